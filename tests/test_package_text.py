"""The package's docstrings and comments explain; its modules share only public names.

Two rules of `docs/architecture.md` ("Docstrings and the public surface"), read from the source
with `ast` and `tokenize` (nothing is imported):

- No docstring or comment carries a measured figure: a speedup (`1.76x`), a percentage other than
  a confidence level (`+14.4 %`), a time in milliseconds, a date, a commit hash or the issue or
  session a measurement came from. Figures move with the next measurement; they live in docs/ and
  CHANGELOG.md, dated and tied to a commit, and a docstring points there.
- No module imports another module's private name (`from polyplan.<module> import _helper`, or
  `module._helper` on an imported polyplan module): what two modules share is public.

Each rule has a negative control that must fail.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("formats", "planner", "decoder", "models", "profiler", "validation", "engines", "pipeline", "zoo", "cli",
         "polyplan")

SPEEDUP = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?[x×](?![\w])")
PERCENT = re.compile(r"(?<![\w.])[+\-−±]?(\d+(?:\.\d+)?)\s?%")
CONFIDENCE_LEVELS = {"50", "90", "95", "99"}  # "a 95 % interval" states a setting, not a measurement
MILLISECONDS = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?ms\b")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
HISTORY = re.compile(r"\b(?:[Ss]ession|[Ii]ssue|PR) #?\d+\b")
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def package_files() -> list[Path]:
    return sorted(path for room in ROOMS for path in (ROOT / room).rglob("*.py"))


def prose(source: str) -> list[tuple[int, str]]:
    """(line number, text) of every docstring line and comment of `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found += [(first.lineno + offset, line) for offset, line in enumerate(first.value.value.splitlines())]
    found += [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
              if token.type == tokenize.COMMENT]
    return found


def figures(line: str) -> list[str]:
    """The measured figures, dates and history references `line` carries."""
    found = [match.group() for match in SPEEDUP.finditer(line)]
    found += [match.group() for match in PERCENT.finditer(line) if match.group(1) not in CONFIDENCE_LEVELS]
    for pattern in (MILLISECONDS, DATE, HISTORY, COMMIT):
        found += [match.group() for match in pattern.finditer(line)]
    return found


@pytest.mark.parametrize("path", package_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_docstrings_and_comments_carry_no_measured_figures(path):
    found = [f"{path.relative_to(ROOT)}:{number}: {found} in {line.strip()!r}"
             for number, line in prose(path.read_text(encoding="utf-8")) for found in [figures(line)] if found]
    assert not found, ("measured figures, dates or history in docstrings or comments (move them to docs/ or "
                       "CHANGELOG.md and point there):\n" + "\n".join(found))


def test_the_figure_check_catches_a_figure():
    """Negative control: a speedup, an error, a time, a date, a commit and an issue are caught; a confidence
    level, a hex constant, `k x k` and an identifier are not."""
    source = ('"""Measured 1.76x, +14.4 % off, 42 ms a step on 2026-11-28 (commit bd97e01, issue 33)."""\n'
              "X = 0x1F  # a 95 % interval over k x k blocks of x2\n")
    caught = [found for _, line in prose(source) for found in figures(line)]
    assert caught == ["1.76x", "+14.4 %", "42 ms", "2026-11-28", "issue 33", "bd97e01"]


def private_imports(source: str, module: str) -> list[str]:
    """The private names of other polyplan modules that `source` (the module `module`) imports or reads."""
    tree = ast.parse(source)
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("polyplan"):
            for alias in node.names:
                if alias.name.startswith("_") and node.module != module:
                    found.append(f"{node.module}.{alias.name}")
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("polyplan") and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{aliases[node.value.id]}.{node.attr}")
    return found


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != "polyplan":
        parts.insert(0, "polyplan")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("path", package_files(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_module_imports_another_modules_private_name(path):
    found = private_imports(path.read_text(encoding="utf-8"), module_of(path))
    assert not found, f"{path.relative_to(ROOT)} uses private names of other modules: {found}"


def test_the_private_check_catches_a_private_import():
    """Negative control: `from m import _f` and `m._f` are caught; a module's own names and dunders are not."""
    source = ("from polyplan.engines.hf_overhead import _ForwardClock\n"
              "from polyplan.planner import engine_export\n"
              "from polyplan.planner.search import _own\n"
              "x = engine_export._prompt_weights, engine_export.__name__\n")
    assert private_imports(source, "polyplan.planner.search") == [
        "polyplan.engines.hf_overhead._ForwardClock", "polyplan.planner.engine_export._prompt_weights"]
