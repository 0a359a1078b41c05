"""A bounded background load: keep one CPU core busy with matrix products, then stop by itself.

Used by `polyplan bench load` and `polyplan bench loop` to show how predictions hold on a busy
machine. The load runs in a child process (this file run as a script, so that the child never
imports torch through the `polyplan.profiler` package), one thread
(BLAS/OpenMP thread counts set to 1 in its environment before numpy is imported), doing
chained 256 x 256 float64 matrix products in a loop. It can never outlive its purpose:

- a time limit: it exits after `seconds` (at most `MAX_SECONDS`), whatever happens;
- a parent-death check: between products (every few milliseconds) it exits as soon as the
  process that started it is gone (its parent id changes, or the given pid no longer exists);
- `background_load` (a context manager) terminates it when the block ends, normally or not,
  and kills it if it does not exit within a second.

Each child prints one line on exit: the products it ran and the seconds it ran for.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.errors import PolyplanError

MAX_SECONDS = 4 * 3600.0
SIZE = 256
_ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                                      "NUMEXPR_NUM_THREADS")}


@dataclass(frozen=True)
class LoadReport:
    """What one load process did."""

    products: int
    seconds: float

    @property
    def products_per_second(self) -> float:
        return self.products / self.seconds if self.seconds > 0 else 0.0


def check_seconds(seconds: float, option: str = "--seconds") -> float:
    """`seconds` if it is a finite number in (0, MAX_SECONDS]; else one clear error."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= MAX_SECONDS:
        raise PolyplanError(f"{option}: must be a number of seconds in (0, {MAX_SECONDS:g}], got {seconds!r}")
    return float(seconds)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def run_load(seconds: float, parent: int | None = None, *, clock=time.monotonic, stop=lambda: False) -> LoadReport:
    """Busy one core with matrix products for `seconds`, until `parent` is gone, or until
    `stop()` is true (this is the child's body; call it through `background_load`)."""
    import numpy as np

    seconds = check_seconds(seconds)
    started_parent = os.getppid()
    rng = np.random.default_rng(0)
    left = rng.standard_normal((SIZE, SIZE)) / SIZE**0.5
    right = rng.standard_normal((SIZE, SIZE)) / SIZE**0.5
    began = clock()
    products = 0
    while clock() - began < seconds and not stop():
        if parent is not None and (os.getppid() != started_parent or not _alive(parent)):
            break
        left = left @ right
        left /= max(float(np.abs(left).max()), 1e-12)  # keep the values finite forever
        products += 1
    return LoadReport(products, clock() - began)


@dataclass
class LoadProcesses:
    """The running load processes of `background_load`; `reports` is filled when they end."""

    processes: list[subprocess.Popen]
    reports: tuple[LoadReport, ...] = ()


@contextmanager
def background_load(seconds: float, cores: int = 1) -> Iterator[LoadProcesses]:
    """Run `cores` load processes (one core each) for at most `seconds` while the block runs.

    They stop at the end of the block (terminated), at their own time limit, or when this
    process dies, whichever comes first.
    """
    seconds = check_seconds(seconds)
    if isinstance(cores, bool) or not isinstance(cores, int) or not 1 <= cores <= (os.cpu_count() or 1):
        raise PolyplanError(f"--cores: must be an integer in [1, {os.cpu_count() or 1}] (the cores of this machine), got {cores!r}")
    environment = {**os.environ, **_ONE_THREAD}
    command = [sys.executable, str(Path(__file__).resolve()), "--seconds", repr(seconds), "--parent", str(os.getpid())]
    running = LoadProcesses([
        subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for _ in range(cores)
    ])
    try:
        yield running
    finally:
        reports = []
        for process in running.processes:
            if process.poll() is None:
                process.terminate()
            try:
                output, _ = process.communicate(timeout=1.0)
            except subprocess.TimeoutExpired:
                process.kill()
                output, _ = process.communicate()
            reports.append(_parse(output))
        running.reports = tuple(report for report in reports if report is not None)


def run_load_processes(seconds: float, cores: int = 1) -> tuple[LoadReport, ...]:
    """Run the load in the foreground (child processes) until their time limit; their reports."""
    with background_load(seconds, cores) as running:
        for process in running.processes:
            process.wait()
    return running.reports


def _parse(output: str | None) -> LoadReport | None:
    """The child's closing line `products <n> seconds <s>` (None when it was killed before it)."""
    for line in (output or "").splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "products" and parts[2] == "seconds":
            return LoadReport(int(parts[1]), float(parts[3]))
    return None


def main(argv: list[str] | None = None) -> None:
    """The child process: `python .../profiler/load.py --seconds S --parent PID`."""
    import signal

    parser = argparse.ArgumentParser(description="Keep one core busy with matrix products (bounded).")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--parent", type=int, default=None)
    arguments = parser.parse_args(argv)
    stopped = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))  # finish the product, report, exit
    report = run_load(arguments.seconds, arguments.parent, stop=lambda: bool(stopped))
    print(f"products {report.products} seconds {report.seconds:.3f}", flush=True)


if __name__ == "__main__":
    main()
