"""References that resolve: every module a docstring, comment, README or docs page cites exists.

Docstrings cite modules in backticks, either by their full name (`polyplan.planner.exact.cost_model`)
or by their room path (`planner.exact.cost_model.predict_chain`, `formats.profile.Profile`); the
README and the docs do the same, and cite files by path (`planner/search.py`). This test collects
every such name from the docstrings and comments of the .py files, README.md and docs/*.md, plus
the `from polyplan... import ...` lines of their examples, and fails naming the file, the line and
the name when it does not resolve: to a module, or to a name that module defines or imports at its
top level (and, one level further, to a name a class defines in its body).

Names are resolved against the source tree (the module's file and its top-level statements, read
with `ast`), so the check imports nothing and needs no torch. Nothing may point outside the
repository either: no `../shared/...` design file; the design notes are `docs/design.md`.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWN = Path(__file__).resolve()  # its negative controls cite names that do not exist
# room path (as docstrings cite it) -> folder; `polyplan.<room>` is the same module
ROOMS = {"formats": "formats", "planner": "planner", "decoder": "decoder", "models": "models", "profiler": "profiler",
         "validation": "validation", "engines": "engines", "pipeline": "pipeline", "cli": "cli", "zoo": "zoo"}
# top-level folders a backticked repository path may start with
TOP_FOLDERS = (*ROOMS, "polyplan", "tests", "examples", "notebooks", "docs")
FILE_SUFFIXES = {"yaml", "yml", "json", "jsonl", "md", "py", "gguf", "txt", "toml", "csv", "png", "ipynb", "safetensors"}

SPAN = re.compile(r"`([^`\n]+)`")
NAME = re.compile(r"(?<![\w.])((?:polyplan|%s)(?:\.\w+)+)" % "|".join(ROOMS))
PATH = re.compile(r"(?:%s)/[\w.-]*(?:/[\w.-]*)*" % "|".join(TOP_FOLDERS))
ATTRIBUTE = re.compile(r"(?<![\w.])([A-Z]\w+)\.([a-z_]\w*)\b")
IMPORT = re.compile(r"^\s*(?:>>>\s*)?from\s+(polyplan(?:\.\w+)*)\s+import\s+\(?([\w\s,]+)\)?\s*$")


def sources() -> list[Path]:
    """The .py files of the rooms, the package root, the tests and the examples; README.md; docs/*.md."""
    found = sorted(path for path in ROOT.rglob("*.py") if path.relative_to(ROOT).parts[0] in TOP_FOLDERS)
    found.append(ROOT / "README.md")
    found += sorted((ROOT / "docs").glob("*.md"))
    return found


@lru_cache(maxsize=None)
def texts(path: Path) -> tuple[tuple[int, str], ...]:
    """(line number, text) of every docstring and comment line of a .py file; every line of a .md file
    (read and parsed once per file for the checks below)."""
    return tuple(_texts(path))


def _texts(path: Path) -> Iterator[tuple[int, str]]:
    source = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        yield from enumerate(source.splitlines(), 1)
        return
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for offset, line in enumerate(node.value.value.splitlines()):
                yield node.lineno + offset, line
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def cited_names(text: str) -> list[str]:
    """The dotted polyplan names `text` cites: in backticks or in plain prose (`profiler.retime` and
    profiler.retime alike), and in a `from polyplan... import ...` line."""
    names = [name for span in SPAN.findall(text) for name in NAME.findall(span)]
    names += NAME.findall(SPAN.sub(" ", text))
    imported = IMPORT.match(text)
    if imported:
        module, listed = imported.groups()
        names.append(module)
        names += [f"{module}.{name.split(' as ')[0].strip()}" for name in listed.split(",") if name.strip()]
    return [name for name in dict.fromkeys(names) if name.rsplit(".", 1)[-1] not in FILE_SUFFIXES]  # `models.yaml` is a file


def cited_paths(text: str) -> list[str]:
    """The repository paths `text` cites: backticked spans that are a path under a top-level folder.
    Under a room only source files and folders count: a room's name is also the usual name of an
    output folder (`validation/reporting.md` is what `polyplan validate --out validation` writes)."""
    return [span for span in SPAN.findall(text) if PATH.fullmatch(span) and (
        span.split("/")[0] not in ROOMS or span.endswith(("/", ".py", ".ipynb")))]


def repository_path(cited: str) -> Path:
    """Where a cited path lies: room paths as the rooms are laid out (`zoo/` is `zoo/`)."""
    first, _, rest = cited.partition("/")
    return ROOT / ROOMS.get(first, first) / rest


def module_file(parts: list[str]) -> Path | None:
    """The source file of the module `parts` names (room path, without `polyplan`), None if none."""
    if not parts:
        return ROOT / "polyplan" / "__init__.py"
    if parts[0] not in ROOMS:
        return None
    path = ROOT / ROOMS[parts[0]] / Path(*parts[1:]) if parts[1:] else ROOT / ROOMS[parts[0]]
    if parts[1:] and path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return path / "__init__.py" if (path / "__init__.py").is_file() else None


def defined(body: list[ast.stmt]) -> set[str]:
    """The names a module or class body binds at its top level (definitions, assignments, imports)."""
    found = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found.update(name.id for target in node.targets for name in ast.walk(target) if isinstance(name, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            found |= defined(node.body) | defined(node.orelse)
    return found


@lru_cache(maxsize=None)
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def resolves(name: str) -> bool:
    """Whether `name` (`polyplan.<room>...` or `<room>...`) is a module, or a name its longest module
    prefix defines, or a name the class it names defines."""
    parts = name.split(".")
    if parts[0] == "polyplan":
        parts = parts[1:]
    for cut in range(len(parts), -1, -1):
        path = module_file(parts[:cut])
        if path is None:
            continue
        rest = parts[cut:]
        if not rest:
            return True
        module = parsed(path)
        if rest[0] not in defined(module.body):
            return False
        cls = next((node for node in module.body if isinstance(node, ast.ClassDef) and node.name == rest[0]), None)
        if len(rest) == 1 or cls is None or cls.bases:  # inherited names are not checked
            return True
        return rest[1] in defined(cls.body)
    return False


@lru_cache(maxsize=None)
def classes() -> dict[str, ast.ClassDef | None]:
    """Every class the package defines, by name; None for a name two modules define (not checked)."""
    found: dict[str, ast.ClassDef | None] = {}
    for path in sources():
        if path.suffix != ".py" or path.relative_to(ROOT).parts[0] not in (*ROOMS.values(), "polyplan"):
            continue
        for node in parsed(path).body:
            if isinstance(node, ast.ClassDef):
                found[node.name] = None if node.name in found else node
    return found


def cited_attributes(text: str) -> list[str]:
    """`Class.name` citations of the package's own classes (`Profile.save`), in backticks or prose."""
    known = classes()
    return [f"{cls}.{name}" for cls, name in ATTRIBUTE.findall(text)
            if known.get(cls) is not None and not known[cls].bases and name not in FILE_SUFFIXES]


def attribute_resolves(cited: str) -> bool:
    """Whether the class binds the name in its body or as `self.<name> = ...` in a method."""
    cls, name = cited.split(".")
    node = classes()[cls]
    instance = {target.attr for method in ast.walk(node) if isinstance(method, (ast.Assign, ast.AnnAssign))
                for target in (method.targets if isinstance(method, ast.Assign) else [method.target])
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"}
    return name in defined(node.body) | instance


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def test_the_sources_are_found():
    found = {path.relative_to(ROOT).parts[0] for path in sources()}
    assert set(ROOMS) - {"zoo"} <= found and {"polyplan", "tests", "README.md"} <= found


def test_every_cited_module_resolves():
    stale = [f"{where(path, line)}: `{name}`" for path in sources() if path != OWN for line, text in texts(path)
             for name in cited_names(text) if not resolves(name)]
    assert not stale, "references to modules or names that do not exist:\n" + "\n".join(stale)


def test_every_cited_class_attribute_exists():
    stale = [f"{where(path, line)}: {cited}" for path in sources() if path != OWN for line, text in texts(path)
             for cited in cited_attributes(text) if not attribute_resolves(cited)]
    assert not stale, "references to class attributes that do not exist:\n" + "\n".join(stale)


def test_every_cited_path_exists():
    missing = [f"{where(path, line)}: `{cited}`" for path in sources() for line, text in texts(path)
               for cited in cited_paths(text) if not repository_path(cited).exists()]
    assert not missing, "paths that do not exist in the repository:\n" + "\n".join(missing)


def test_nothing_points_outside_the_repository():
    own = Path(__file__).resolve()
    outside = [f"{where(path, number)}: {line.strip()}" for path in sources() if path != own
               for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
               if "../shared" in line or re.search(r"`\.\./", line)]
    assert not outside, "references outside the repository (the design notes are docs/design.md):\n" + "\n".join(outside)


def test_the_checks_catch_a_stale_reference():
    """Negative control: a moved module, a missing name, a missing path and an import example are caught,
    a file name and a real name are not."""
    assert cited_names("see `profiler.pipeline.profile_candidates` and `models.yaml`") == ["profiler.pipeline.profile_candidates"]
    assert not resolves("profiler.pipeline.profile_candidates")
    assert not resolves("polyplan.planner.exact.cost_model.no_such_function")
    assert resolves("planner.exact.cost_model.predict_chain") and resolves("polyplan.formats.profile.Profile.model")
    assert cited_names("    from polyplan.decoder import HFMember, Nothing") == [
        "polyplan.decoder", "polyplan.decoder.HFMember", "polyplan.decoder.Nothing"]
    assert not resolves("polyplan.decoder.Nothing")
    assert cited_names("the retimed curves of profiler.retime.") == ["profiler.retime"]  # prose, no backticks
    assert not resolves("profiler.retime")
    assert cited_attributes("written by Profile.save, read by Profile.model") == ["Profile.save", "Profile.model"]
    assert not attribute_resolves("Profile.save") and attribute_resolves("Profile.model")
    assert cited_paths("(`polyplan/commands/run.py`, `cli/commands/<group>.py`)") == ["polyplan/commands/run.py"]
    assert not repository_path("polyplan/commands/run.py").exists() and repository_path("zoo/refine.py").exists()
