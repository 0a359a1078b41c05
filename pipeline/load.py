"""A bounded background load: keep CPU cores busy with matrix products, then stop by itself.

Used by `polyplan bench load` and `polyplan bench loop`, in three `SHAPES`, because users'
machines are not busy the way one generator is: `steady` (`cores` processes, busy all the time),
`bursty` (each alternating busy and asleep for random spans: a build, a notebook kernel, a browser)
and `two-process` (two bursty processes with independent phases, whatever `cores` says). Each load
process is this file run as a script (so it never imports torch), one thread chaining `SIZE`-square
matrix products. It cannot outlive its purpose: it exits at its time limit (at most `MAX_SECONDS`),
once the process that started it is gone, or when `background_load`'s block ends, and prints the
products it ran and the seconds it ran for.
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
class LoadShape:
    """How many load processes run and whether they sleep between bursts."""

    name: str
    bursty: bool
    processes: int | None  # None: one per requested core

    def count(self, cores: int) -> int:
        return cores if self.processes is None else self.processes


SHAPES = {
    "steady": LoadShape("steady", bursty=False, processes=None),
    "bursty": LoadShape("bursty", bursty=True, processes=None),
    "two-process": LoadShape("two-process", bursty=True, processes=2),
}
_BURST_SPAN_S = (0.1, 1.0)


def load_shape(name: str, option: str = "--shape") -> LoadShape:
    """The shape called `name`; else one clear error naming the shapes."""
    if name not in SHAPES:
        raise PolyplanError(f"{option}: {name!r} is not a load shape ({', '.join(SHAPES)})")
    return SHAPES[name]


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


def check_cores(cores: int) -> int:
    """`cores` if it is a whole number of this machine's cores, at least 1; else one clear error."""
    if isinstance(cores, bool) or not isinstance(cores, int) or not 1 <= cores <= (os.cpu_count() or 1):
        raise PolyplanError(f"--cores: must be an integer in [1, {os.cpu_count() or 1}] (the cores of this machine), got {cores!r}")
    return cores


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def run_load(seconds: float, parent: int | None = None, *, clock=time.monotonic, stop=lambda: False,
             bursty: bool = False, seed: int = 0, sleep=time.sleep) -> LoadReport:
    """Busy one core with matrix products for `seconds`, until `parent` is gone, or until
    `stop()` is true (this is the child's body; call it through `background_load`). `bursty`:
    alternate busy and asleep spans drawn uniformly from `_BURST_SPAN_S` (generator `seed`)."""
    import numpy as np

    seconds = check_seconds(seconds)
    started_parent = os.getppid()
    rng = np.random.default_rng(0)
    spans = np.random.default_rng(seed)
    left = rng.standard_normal((SIZE, SIZE)) / SIZE**0.5
    right = rng.standard_normal((SIZE, SIZE)) / SIZE**0.5
    began = clock()
    products = 0
    phase_end, busy = began + (spans.uniform(*_BURST_SPAN_S) if bursty else seconds), True
    while clock() - began < seconds and not stop():
        if parent is not None and (os.getppid() != started_parent or not _alive(parent)):
            break
        if bursty and clock() >= phase_end:
            busy = not busy
            phase_end = clock() + spans.uniform(*_BURST_SPAN_S)
        if not busy:
            sleep(0.02)  # short naps, so the stop and parent checks stay prompt
            continue
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
def background_load(seconds: float, cores: int = 1, shape: LoadShape = SHAPES["steady"]) -> Iterator[LoadProcesses]:
    """Run the `shape`'s load processes (one core each; `cores` of them unless the shape fixes the
    count) while the block runs: they stop at its end, at `seconds`, or when this process dies."""
    seconds = check_seconds(seconds)
    check_cores(cores)
    environment = {**os.environ, **_ONE_THREAD}
    command = [sys.executable, str(Path(__file__).resolve()), "--seconds", repr(seconds), "--parent", str(os.getpid())]
    running = LoadProcesses([
        subprocess.Popen(command + (["--bursty", "--seed", str(index)] if shape.bursty else []), env=environment,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for index in range(shape.count(cores))
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


def run_load_processes(seconds: float, cores: int = 1, shape: LoadShape = SHAPES["steady"]) -> tuple[LoadReport, ...]:
    """Run the load in the foreground (child processes) until their time limit; their reports."""
    with background_load(seconds, cores, shape) as running:
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
    """The child process: `python .../pipeline/load.py --seconds S --parent PID`."""
    import signal

    parser = argparse.ArgumentParser(description="Keep one core busy with matrix products (bounded).")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--parent", type=int, default=None)
    parser.add_argument("--bursty", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args(argv)
    stopped = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))  # finish the product, report, exit
    report = run_load(arguments.seconds, arguments.parent, stop=lambda: bool(stopped), bursty=arguments.bursty,
                      seed=arguments.seed)
    print(f"products {report.products} seconds {report.seconds:.3f}", flush=True)


if __name__ == "__main__":
    main()
