"""torch's CPU thread count for a run: what `--threads` asks, or what a plan was profiled with.

Latency depends on the thread count, so a plan is validated with the threads its profile was
measured with; the profile's device label records them ("cpu … (2 threads)").
"""

from __future__ import annotations

import re

from polyplan.formats.errors import PolyplanError

_THREADS = re.compile(r"\((\d+) threads?\)")


def set_threads(threads: int | None) -> None:
    """Set torch's CPU threads for this process (`--threads`); None keeps torch's default."""
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

