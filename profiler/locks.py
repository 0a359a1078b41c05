"""Locks that keep concurrent polyplan runs from spoiling each other's work.

`profile_lock(path)` is held while a run reads, extends and writes one profile file, so a second
run on it waits instead of measuring everything again and overwriting the first run's entries;
`timing_lock()`, one per machine, while a run takes timings, so two runs never time under each
other's load. Both are advisory file locks (`filelock`), reentrant within a thread, released when
the process dies; `POLYPLAN_LOCK_TIMEOUT` (seconds) bounds the wait, past which the run stops with
one line saying the file or the machine is busy.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from polyplan.formats.errors import PolyplanError

_TIMEOUT_ENV = "POLYPLAN_LOCK_TIMEOUT"
_LOCK_DIR_ENV = "POLYPLAN_LOCK_DIR"
_TIMING_LOCK_FILE = "polyplan-timing.lock"


def stderr_line(line: str) -> None:
    """Print `line` on stderr at once (what a run says while it waits or works)."""
    print(line, file=sys.stderr, flush=True)


def _wait_limit() -> float:
    """Seconds to wait for a lock (`POLYPLAN_LOCK_TIMEOUT`; default: as long as it takes)."""
    text = os.environ.get(_TIMEOUT_ENV, "").strip()
    if not text:
        return -1.0
    try:
        value = float(text)
    except ValueError:
        raise PolyplanError(f"{_TIMEOUT_ENV}: expected seconds, got {text!r}") from None
    if not value >= 0:
        raise PolyplanError(f"{_TIMEOUT_ENV}: must be >= 0 seconds, got {text!r}")
    return value


def _profile_lock_path(profile: str | os.PathLike[str]) -> Path:
    """The lock file of a profile: hidden, beside it."""
    path = Path(profile)
    return path.with_name(f".{path.name}.lock")


def _timing_lock_path() -> Path:
    """The machine-wide timing lock (`POLYPLAN_LOCK_DIR`, else the system's temp folder)."""
    return Path(os.environ.get(_LOCK_DIR_ENV) or tempfile.gettempdir()) / _TIMING_LOCK_FILE


@contextmanager
def held(lock_file: Path, busy: str, say: Callable[[str], None] = stderr_line) -> Iterator[None]:
    """Hold the file lock `lock_file`; when another process holds it, `say` that `busy`, wait
    (up to `_wait_limit()`), then go on."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(lock_file), is_singleton=True, mode=0o666)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        limit = _wait_limit()
        say(f"waiting: {busy} (lock {lock_file})")
        try:
            lock.acquire(timeout=limit)
        except Timeout:
            raise PolyplanError(f"{busy}; gave up after {limit:g} s ({_TIMEOUT_ENV}); try again when it is done") from None
    except OSError as error:
        raise PolyplanError(f"cannot take the lock {lock_file} ({error.strerror or error})") from None
    try:
        yield
    finally:
        lock.release()


def profile_lock(profile: str | os.PathLike[str], say: Callable[[str], None] = stderr_line):
    """Hold the lock of the profile file `profile` (see the module docstring)."""
    return held(_profile_lock_path(profile), f"profile {profile} is busy: another polyplan run is writing it", say)


def timing_lock(say: Callable[[str], None] = stderr_line):
    """Hold the machine-wide timing lock (see the module docstring)."""
    return held(_timing_lock_path(), "another polyplan run is taking timings on this machine", say)
