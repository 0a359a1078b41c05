"""torch's CPU thread count for a run: one default for every command that times.

Latency depends on the thread count, so every timing command answers "how many threads?" the same
way (`choose_threads`, docs/profiling.md "How many threads"): `--threads N` when given; else the
count a profile or plan was measured with (kept in its device label), so a resumed profile is not
re-timed and a plan is validated as it was profiled; else the free cores at start: the cores this
process may run on, less the busy ones (`machine_load`), less one kept for everything else, at
least 1, since an OpenMP region waits for its slowest thread and threads on every core let any
other process stall them all. The choice and why are one line (`ThreadChoice.line`).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.errors import PolyplanError

_THREADS = re.compile(r"\((\d+) threads?\)")


@dataclass(frozen=True)
class ThreadChoice:
    """A thread count and where it came from ("--threads", "the profile", "free cores …")."""

    threads: int
    source: str

    @property
    def line(self) -> str:
        return f"threads: {self.threads} ({self.source})"


def available_cpus() -> int:
    """CPU cores this process may run on (its affinity where the OS tells, else os.cpu_count)."""
    allowed = _affinity()
    return len(allowed) if allowed is not None else os.cpu_count() or 1


def machine_load() -> float | None:
    """Runnable work on the cores this process may run on, this process included; None where unknown.

    The 1-minute load average counts every core's work; when this process is pinned to some cores
    (`taskset`, a cpuset), work on the others does not compete for them, so the answer is then the
    busy share of its own cores over a short window (Linux `/proc/stat`), plus this process.
    """
    allowed = _affinity()
    if allowed is not None and len(allowed) < (os.cpu_count() or len(allowed)):
        busy = _busy_cores(allowed)
        if busy is not None:
            return busy + 1.0
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def _affinity() -> set[int] | None:
    """The CPUs this process may run on; None where the OS does not tell (macOS, Windows)."""
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:
        return None


def _cpu_times() -> dict[int, tuple[int, int]] | None:
    """(busy, total) jiffies per CPU from /proc/stat; None where it cannot be read."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    times = {}
    for line in lines:
        fields = line.split()
        if fields and fields[0].startswith("cpu") and fields[0] != "cpu":
            values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
            times[int(fields[0][3:])] = (sum(values) - values[3] - values[4], sum(values))
    return times


def _busy_cores(cpus: set[int], window_s: float = 0.25) -> float | None:
    """How many of `cpus` other work kept busy over `window_s` (0 … len(cpus)), this process
    sleeping meanwhile; None where /proc/stat is unavailable."""
    before = _cpu_times()
    time.sleep(window_s)
    after = _cpu_times()
    if not before or not after:
        return None
    busy = 0.0
    for cpu in cpus:
        if cpu in before and cpu in after and after[cpu][1] > before[cpu][1]:
            busy += (after[cpu][0] - before[cpu][0]) / (after[cpu][1] - before[cpu][1])
    return busy


def free_cores(cores: int, load: float | None, reserved: int = 0) -> int:
    """Cores left for timing: `cores` less the busy ones (the load average, rounded) or less
    one, whichever leaves fewer, and less `reserved` (a load the command itself is about to
    start), at least 1."""
    busy = 0 if load is None else int(load + 0.5)
    return max(1, min(cores - 1, cores - busy) - reserved)


def machine_threads(reserved: int = 0) -> ThreadChoice:
    """Step 3 of the module docstring: the free cores at start."""
    cores, load = available_cpus(), machine_load()
    threads = free_cores(cores, load, reserved)
    seen = "no load average" if load is None else f"load average {load:.2f}"
    also = f", {reserved} kept for the load this command starts" if reserved else ""
    return ThreadChoice(threads, f"free cores at start: {cores} cores, {seen}{also}; --threads overrides")


def choose_threads(threads: int | None, recorded: int | None = None, *, recorded_by: str = "the profile",
                   reserved: int = 0) -> ThreadChoice:
    """The thread count of a timing command (see the module docstring for the order)."""
    if threads is not None:
        if isinstance(threads, bool) or threads < 1:
            raise PolyplanError(f"--threads: must be >= 1, got {threads}")
        return ThreadChoice(threads, "--threads")
    if recorded is not None:
        return ThreadChoice(recorded, f"as {recorded_by} was measured; --threads overrides")
    return machine_threads(reserved)


def set_threads(threads: int | ThreadChoice | None) -> None:
    """Set torch's CPU threads for this process; None keeps torch's default."""
    if isinstance(threads, ThreadChoice):
        threads = threads.threads
    if threads is None:
        return
    if threads < 1:
        raise PolyplanError(f"--threads: must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)


def plan_threads(device_label: str) -> int | None:
    """The CPU thread count in a profile's device label ("cpu … (2 threads)"), if any."""
    match = _THREADS.search(device_label) if device_label.startswith("cpu") else None
    return int(match.group(1)) if match else None
