"""The training corpus: the Python standard library's source (`split_stdlib`), split by file. The
held-out files are chosen by a hash of the relative path, so the split does not move when a file
is added elsewhere.
"""

from __future__ import annotations

import hashlib
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.errors import PolyplanError

# tests, generated data and vendored code: the corpus keeps idiomatic library code
_SKIPPED_PARTS = frozenset(
    {"test", "tests", "idle_test", "site-packages", "dist-packages", "lib2to3", "__pycache__",
     "ensurepip", "turtledemo", "idlelib", "tkinter", "pydoc_data", "encodings"}
)
_MAX_FILE_BYTES = 200_000


@dataclass(frozen=True)
class CorpusSplit:
    """Relative paths (under `root`) of the training and the held-out validation files."""

    root: Path
    train: tuple[str, ...]
    validation: tuple[str, ...]


def _stdlib_root() -> Path:
    root = Path(sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise PolyplanError(f"stdlib: folder {root} not found; the zoo corpus needs it")
    return root


def _is_held_out(relative: str, every: int) -> bool:
    digest = hashlib.sha256(relative.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "little") % every == 0


def split_stdlib(root: Path | None = None, held_out_every: int = 20) -> CorpusSplit:
    """List the corpus files and hold out about one in `held_out_every` for validation."""
    root = _stdlib_root() if root is None else root
    files = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if _SKIPPED_PARTS.intersection(relative.parts[:-1]):
            continue
        if path.stat().st_size > _MAX_FILE_BYTES:
            continue
        files.append(relative.as_posix())
    if not files:
        raise PolyplanError(f"stdlib: no Python files under {root}")
    validation = tuple(f for f in files if _is_held_out(f, held_out_every))
    train = tuple(f for f in files if not _is_held_out(f, held_out_every))
    return CorpusSplit(root=root, train=train, validation=validation)


def read_texts(root: Path, relative_paths: tuple[str, ...], max_chars: int | None = None) -> list[str]:
    """Read the files (undecodable bytes replaced), stopping once `max_chars` are gathered."""
    texts = ((root / relative).read_text(encoding="utf-8", errors="replace") for relative in relative_paths)
    return _gather(texts, max_chars)


def stdlib_prose(max_chars: int) -> list[str]:
    """English prose every Python has: the reference manual's topics in `pydoc_data.topics`, one
    text per topic, in a fixed order, until `max_chars` are gathered."""
    from pydoc_data.topics import topics

    return _gather((topics[name] for name in sorted(topics)), max_chars)


def _gather(texts: Iterable[str], max_chars: int | None) -> list[str]:
    """The texts in order, stopping after the one that reaches `max_chars` in all (None: every one)."""
    gathered, total = [], 0
    for text in texts:
        gathered.append(text)
        total += len(text)
        if max_chars is not None and total >= max_chars:
            break
    return gathered
