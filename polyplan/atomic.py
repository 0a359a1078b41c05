"""Writing a file so that a reader (or a crash) never sees half of it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from polyplan.errors import PolyplanError


def write_text_atomically(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` to a temporary file next to `path`, flush it to disk, then rename it over
    `path`: the file is either the old one or the complete new one, never a partial write.

    Raises:
        PolyplanError: the folder of `path` does not exist.
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise PolyplanError(f"{path}: folder {directory} does not exist")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
