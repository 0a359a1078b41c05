"""The rooms import only the rooms below them (`docs/architecture.md`; `docs/design.md`, "Rooms and layers").

From the bottom: formats/ (the files), planner/ (pure math: the paper's theory in planner/paper/,
the exact cost model in planner/exact/, the intervals in planner/intervals/, then the search, the
plan and the engines' rules), decoder/ (the chain, its members and verification), models/
(models.yaml to members, and model surgery: int8 and reduced-vocabulary heads), profiler/ (measures
models), validation/ (runs planned chains and judges predictions), engines/ (other engines as peers
and export targets, and what to type for them), the embedded family (zoo/: its training and
distillation, imported only by the loop, whose demo trains it, and the CLI), pipeline/ (profile -> plan
-> validate -> demo), and the CLI (cli/) on top. Every module's imports are read with `ast`, the
ones inside functions included, so a lazy import cannot hide a layer violation.
There are no exceptions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"formats": "polyplan.formats", "planner": "polyplan.planner", "decoder": "polyplan.decoder",
           "models": "polyplan.models", "profiler": "polyplan.profiler", "validation": "polyplan.validation",
           "engines": "polyplan.engines", "pipeline": "polyplan.pipeline", "zoo": "polyplan.zoo", "cli": "polyplan.cli",
           "polyplan": "polyplan"}

# From the bottom up; each room may import itself and the rooms before it.
ORDER = ("polyplan.formats", "polyplan.planner", "polyplan.decoder", "polyplan.models", "polyplan.profiler",
         "polyplan.validation", "polyplan.engines", "polyplan.zoo", "polyplan.pipeline", "polyplan.cli")
ALLOWED = {room: ORDER[: index + 1] for index, room in enumerate(ORDER)}
FORBIDDEN_THIRD_PARTY = {"polyplan.formats": ("torch", "typer", "rich", "transformers"),
                         "polyplan.planner": ("torch", "typer", "rich", "transformers")}
CLI_ONLY = ("typer", "polyplan.cli")
CLI_MODULES = ("polyplan.cli",)


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


def test_the_family_is_imported_only_by_the_pipeline_and_the_cli():
    below = [name for name in MODULES if layer(name) in ORDER[: ORDER.index("polyplan.zoo")]]
    wrong = {name: sorted(m for m in imports(MODULES[name], name) if within(m, ("polyplan.zoo",))) for name in below}
    assert not {name: found for name, found in wrong.items() if found}


def test_the_checks_catch_a_violation(tmp_path):
    """Negative control: the import reader sees a lazy import inside a function."""
    source = tmp_path / "sample.py"
    source.write_text("def f():\n    from polyplan.profiler.run import profile_models\n    import torch\n", encoding="utf-8")
    found = imports(source, "polyplan.planner.sample")
    assert "polyplan.profiler.run" in found and "torch" in found
    assert not within("polyplan.profiler.run", ALLOWED["polyplan.planner"])
