"""Where a command may write (`check_output_file`, `check_report_folder`): checked before any work
starts, so no result is lost at the end, and no input or someone else's file is overwritten.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from polyplan.formats.errors import PolyplanError


def _same_file(first: str | os.PathLike[str], second: str | os.PathLike[str]) -> bool:
    """Whether two paths name one file (through links, `..`, or hard links)."""
    a, b = Path(first), Path(second)
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()
    except OSError:
        return False


def check_output_file(
    path: str | os.PathLike[str], option: str = "--out", *, inputs: Iterable[tuple[str, str | os.PathLike[str] | None]] = ()
) -> Path:
    """`path` as a file this process can create or replace; `PolyplanError` for an empty path, a
    folder, a missing or unwritable folder (e.g. /proc), a read-only file, or one of the files
    `inputs` ((option, path) of each file the command reads) names."""
    if str(path) in ("", "."):
        raise PolyplanError(f"{option}: give a file path (got an empty path)")
    path = Path(path)
    for name, source in inputs:
        if source is not None and _same_file(path, source):
            raise PolyplanError(f"{option}: {path} is the file given to {name}; writing there would destroy it, choose another {option}")
    if path.is_dir():
        raise PolyplanError(f"{option}: {path} is a folder; give a file path")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise PolyplanError(f"{option}: cannot write {path} (folder {folder} does not exist)")
    _probe_folder(folder, f"{option}: cannot write {path}")
    if path.exists() and not os.access(path, os.W_OK):
        raise PolyplanError(f"{option}: cannot write {path} (permission denied)")
    return path


def _probe_folder(folder: Path, message: str) -> None:
    """A file can be created (and renamed) in `folder`: probed with a temporary file."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".polyplan.", suffix=".probe", dir=folder)
    except OSError as error:
        raise PolyplanError(f"{message} ({error.strerror or error})") from None
    os.close(handle)
    os.unlink(probe)


def is_json_with(path: Path, keys: Iterable[str]) -> bool:
    """Whether `path` holds a JSON object with every key in `keys` (what a polyplan output of
    one kind always has)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(value, dict) and set(keys) <= set(value)


def check_report_folder(
    folder: str | os.PathLike[str],
    option: str = "--out",
    *,
    owner: str,
    is_ours: Callable[[Path], bool],
    files: Iterable[str],
    own_files: Mapping[str, Callable[[Path], bool]] | None = None,
    inputs: Iterable[tuple[str, str | os.PathLike[str] | None]] = (),
) -> Path:
    """`folder` as a place for a report: a writable folder (created later if missing) that holds,
    under the names the report writes, nothing but an earlier report: `owner` (e.g. "report.json",
    `is_ours` tells) proves one is there, `files` are replaced only then, `own_files` have their own
    check (plan.json must be a plan), and none may be one of the `inputs` ((option, path))."""
    if str(folder) == "":
        raise PolyplanError(f"{option}: give a folder path (got an empty path)")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise PolyplanError(f"{option}: {folder} exists and is not a folder; give a folder for the report")
    names = [owner, *files, *(own_files or {})]
    for name, source in inputs:
        for written in names:
            if source is not None and _same_file(folder / written, source):
                raise PolyplanError(
                    f"{option}: the report would write {folder / written}, the file given to {name}; choose another {option}"
                )
    if not folder.exists():
        parent = next((p for p in folder.absolute().parents if p.exists()), None)
        if parent is None or not parent.is_dir():
            raise PolyplanError(f"{option}: cannot create the folder {folder}")
        _probe_folder(parent, f"{option}: cannot create the folder {folder}")
        return folder
    _probe_folder(folder, f"{option}: cannot write into {folder}")
    ours = (folder / owner).is_file() and is_ours(folder / owner)
    if (folder / owner).exists() and not ours:
        raise PolyplanError(f"{option}: {folder / owner} exists and is not a polyplan {owner}; move it away or choose another {option}")
    for name in files:
        if (folder / name).exists() and not ours:
            raise PolyplanError(
                f"{option}: {folder / name} exists and no polyplan {owner} is beside it; move it away or choose another {option}"
            )
    for name, check in (own_files or {}).items():
        if (folder / name).exists() and not check(folder / name):
            raise PolyplanError(f"{option}: {folder / name} exists and is not a polyplan {name}; move it away or choose another {option}")
    return folder
