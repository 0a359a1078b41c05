"""Writing a file so that a reader (or a crash) never sees half of it."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from polyplan.formats.errors import PolyplanError


def current_umask() -> int:
    """The process umask (read by setting it and putting it back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _new_file_mode(path: Path) -> int:
    """The permission bits `path` gets: an existing file keeps its own; a new one gets what
    `open()` would give it, 0o666 less the umask (mkstemp alone would give 0o600)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o666 & ~current_umask()


def write_text_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to a temporary file next to `path`, flush it to disk, then rename it over `path`:
    the file is the old one or the complete new one, its mode what it was or what the umask gives.
    `PolyplanError` when the folder is missing or the write fails; the old file is then untouched."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise PolyplanError(f"{path}: folder {directory} does not exist")
    if path.is_dir():
        raise PolyplanError(f"{path}: is a folder; cannot write a file there")
    mode = _new_file_mode(path)
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fchmod(stream.fileno(), mode)
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as error:
        _remove(temporary)
        raise PolyplanError(f"{path}: cannot write ({error.strerror or error})") from None
    except BaseException:
        _remove(temporary)
        raise


def _remove(temporary: str | None) -> None:
    if temporary is not None and os.path.exists(temporary):
        os.unlink(temporary)
