"""`hashing.fingerprint_files` and `gguf_source.file_sha256` kept in the polyplan cache
(`file_fingerprint`, `content_sha256`), keyed by the absolute path and the size and mtime_ns of
every file under it, so unchanged files are not read again. The cache is rewritten atomically,
merged with what another process wrote; one that cannot be read or written costs a re-hash.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from polyplan.formats.atomic import write_text_atomically
from polyplan.formats.cache import cache_root
from polyplan.formats.errors import PolyplanError
from polyplan.models.hashing import fingerprint_files

CACHE_FILE = "file-fingerprints.json"
_VERSION = 1

_Stamp = list[list[Any]]  # [[relative name, size, mtime_ns], ...], as JSON keeps it


def file_fingerprint(path: str | os.PathLike[str]) -> str:
    """`hashing.fingerprint_files([path])` of a file or a folder, kept."""
    return _kept(path, "fingerprint", lambda root: fingerprint_files([root]))


def content_sha256(path: str | os.PathLike[str]) -> str:
    """`gguf_source.file_sha256(path)`, the hex sha256 of a file's bytes, kept."""
    from polyplan.models.gguf_source import file_sha256

    return _kept(path, "sha256", file_sha256)


def cache_path() -> Path:
    """Where the kept hashes are (`$POLYPLAN_CACHE_DIR` and the rest: `formats.cache`)."""
    return cache_root() / CACHE_FILE


def _kept(path: str | os.PathLike[str], kind: str, compute: Callable[[Path], str]) -> str:
    """`compute(path)` from the cache while the files under `path` keep their stamp."""
    root = Path(os.path.abspath(path))
    before = _stamp(root)
    if before is None:  # missing or unreadable: let the hash say so, as it always did
        return compute(root)
    key = str(root)
    entry = _read_entries().get(key)
    entry = entry if isinstance(entry, dict) and entry.get("stamp") == before else {"stamp": before}
    if isinstance(entry.get(kind), str):
        return entry[kind]
    value = compute(root)
    if _stamp(root) == before:  # not changed while it was read
        _keep(key, {**entry, kind: value})
    return value


def _stamp(root: Path) -> _Stamp | None:
    """Name, size and mtime_ns of `root` (a file) or of every file under it (a folder); None
    when it cannot be read."""
    try:
        if root.is_dir():
            files = sorted(f for f in root.rglob("*") if f.is_file())
            return [[f.relative_to(root).as_posix(), *_size_and_time(f)] for f in files]
        return [[root.name, *_size_and_time(root)]]
    except OSError:
        return None


def _size_and_time(file: Path) -> tuple[int, int]:
    status = file.stat()
    return status.st_size, status.st_mtime_ns


def _read_entries() -> dict[str, Any]:
    try:
        payload = json.loads(cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(payload, dict) or payload.get("version") != _VERSION or not isinstance(payload.get("files"), dict):
        return {}
    return payload["files"]


def _keep(key: str, entry: dict[str, Any]) -> None:
    """Put `entry` in the cache file (re-read first: another process may have written since)."""
    entries = {path: kept for path, kept in _read_entries().items() if os.path.exists(path)}
    current = entries.get(key)
    if isinstance(current, dict) and current.get("stamp") == entry["stamp"]:
        entry = {**current, **entry}  # another kind of hash of the same files, kept meanwhile
    entries[key] = entry
    target = cache_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(target, json.dumps({"version": _VERSION, "files": entries}, sort_keys=True))
    except (OSError, PolyplanError):
        return  # a read-only cache: the next run hashes again
