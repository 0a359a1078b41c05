"""The layers import only the layers below them (README, "Layout"; DESIGN.md, "Layout").

formats/ at the bottom; planner/ (pure math), decoder/ (runs chains) on it; profiler/ (measures)
on those; the CLI (polyplan/cli.py, polyplan/commands/, polyplan/cli_support.py) on top. Every
module's imports are read with `ast`, the ones inside functions included, so a lazy import
cannot hide a layer violation.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"formats": "polyplan.formats", "planner": "polyplan.planner", "decoder": "polyplan.decoder",
           "profiler": "polyplan.profiler", "polyplan": "polyplan"}

# What each layer may import of polyplan (prefixes of module names).
ALLOWED = {
    "polyplan.formats": ("polyplan.formats",),
    "polyplan.planner": ("polyplan.formats", "polyplan.planner"),
    # The embedded family's folder is a model source like a HF folder or a hub id.
    "polyplan.decoder": ("polyplan.formats", "polyplan.decoder", "polyplan.zoo.builtin"),
    # The demo trains the quick family, the prompts hold out the family's training corpus.
    "polyplan.profiler": ("polyplan.formats", "polyplan.planner", "polyplan.decoder", "polyplan.profiler", "polyplan.zoo"),
}
FORBIDDEN_THIRD_PARTY = {"polyplan.planner": ("torch", "typer", "rich", "transformers")}
CLI_ONLY = ("typer", "polyplan.cli_support")
CLI_MODULES = ("polyplan.cli", "polyplan.cli_support", "polyplan.commands")


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    parts = list(relative.parts)
    parts[0] = FOLDERS[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imports(path: Path, name: str) -> set[str]:
    """Every module `path` imports (absolute names; relative imports resolved against `name`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from polyplan.formats import options`
    return found


def layer(name: str) -> str | None:
    return next((prefix for prefix in ALLOWED if name == prefix or name.startswith(prefix + ".")), None)


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


MODULES = modules()


def polyplan_module(imported: str) -> str | None:
    """The polyplan module an import names (`from m import f` lists `m.f`), None for others."""
    if imported in MODULES:
        return imported
    parent = imported.rpartition(".")[0]
    return parent if parent in MODULES else None


def test_every_layer_is_found():
    assert {layer(name) for name in MODULES} >= set(ALLOWED)
    assert len(MODULES) > 100


@pytest.mark.parametrize("name", sorted(name for name in MODULES if layer(name) is not None))
def test_a_layer_imports_only_the_layers_below_it(name):
    own = layer(name)
    found = imports(MODULES[name], name)
    wrong = sorted({module for module in map(polyplan_module, found) if module and not within(module, ALLOWED[own])})
    assert not wrong, f"{name} ({own}) imports {wrong}; it may import only {ALLOWED[own]}"
    banned = sorted(module for module in found if within(module, FORBIDDEN_THIRD_PARTY.get(own, ())))
    assert not banned, f"{name} ({own}) imports {banned}"


@pytest.mark.parametrize("name", sorted(name for name in MODULES if not within(name, CLI_MODULES)))
def test_only_the_cli_imports_typer_and_the_cli_support(name):
    found = imports(MODULES[name], name)
    assert not [module for module in found if within(module, CLI_ONLY)], f"{name} imports the CLI's {CLI_ONLY}"


def test_the_checks_catch_a_violation(tmp_path):
    """Negative control: the import reader sees a lazy import inside a function."""
    source = tmp_path / "sample.py"
    source.write_text("def f():\n    from polyplan.profiler.run import profile_models\n    import torch\n", encoding="utf-8")
    found = imports(source, "polyplan.planner.sample")
    assert "polyplan.profiler.run" in found and "torch" in found
    assert not within("polyplan.profiler.run", ALLOWED["polyplan.planner"])
