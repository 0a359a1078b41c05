"""Why a chain's prediction interval is wide, and what would narrow it (docs/cost-model.md,
"Prediction intervals").

A plan's interval combines independent errors in quadrature (log space): the new prompt set's own
acceptance (`exact.interval` against `exact.workload_interval`, which leaves that draw out), the
profile's estimate from its prompts and timings, a noisy machine floor's widening of the latency
(`prediction_interval.FLOOR_DRIFT_SHARE`), and the self-check's term C. Their 95% log widths are
read back from what plan.json keeps, so that each wide interval gets one line naming its largest
source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from polyplan.formats.plan import PlanFile, PlannedChain
from polyplan.planner.intervals.prediction_interval import FLOOR_DRIFT_SHARE, IQR_TO_SD
from polyplan.planner.intervals.timing_health import MAX_FLOOR_NOISE

WIDE = 1.5  # an interval whose high over low exceeds this gets a line saying why
_Z = 1.959964

_REMEDY = {
    "new_set": "it is for a new set of as many prompts as the profile's, and any such set reads the drafters "
               "differently; the workload interval, for the mean over your traffic, is narrower",
    "profile": "profile on more prompts (`--prompts` with a larger file): the profile's read of acceptance "
               "narrows with the square root of its prompts",
    "floor": "re-profile on a quieter machine (nothing else running, or `--threads 1`)",
    "check": "the self-check's run was noisy: re-run recommend on a quieter machine",
}
_NAME = {
    "new_set": "a new prompt set's own acceptance spread",
    "profile": "the profile's read of acceptance and latency from its prompts",
    "floor": "the noisy machine floor",
    "check": "the self-check's noise",
}


@dataclass(frozen=True)
class WidthSources:
    """95% log widths of a chain's interval by source (each 0 where it does not apply)."""

    new_set: float
    profile: float
    floor: float
    check: float

    def largest(self) -> str:
        return max(("new_set", "profile", "floor", "check"), key=lambda name: getattr(self, name))


def _log_width(interval: tuple[float, float] | None) -> float:
    return 0.0 if interval is None or interval[0] <= 0 else math.log(interval[1] / interval[0])


def _apart(total: float, part: float) -> float:
    """What is left of a quadrature sum `total` once `part` is taken out (never below 0)."""
    return math.sqrt(max(0.0, total**2 - part**2))


def width_sources(planned: PlannedChain, floor: float | None) -> WidthSources:
    """`planned`'s interval split by source; `floor`: the machine floor's IQR/median while the
    profile was timed (None: not recorded)."""
    exact = _log_width(planned.exact.interval)
    workload = _log_width(planned.exact.workload_interval) if planned.exact.workload_interval is not None else exact
    check = 0.0
    if planned.check is not None and planned.check.composition_low > 0:
        check = math.log(planned.check.composition_high / planned.check.composition_low)
    floor_width = 0.0
    if floor is not None and floor > MAX_FLOOR_NOISE:
        floor_width = min(workload, 2 * _Z * FLOOR_DRIFT_SHARE * floor / IQR_TO_SD)
    return WidthSources(new_set=_apart(exact, workload), profile=_apart(workload, floor_width), floor=floor_width,
                        check=check)


def wide_interval_line(planned: PlannedChain, floor: float | None) -> str | None:
    """One line for a chain whose interval spans more than `WIDE`: its largest source and what
    would narrow it; None for a narrower interval or none at all."""
    interval = planned.predicted_interval
    if interval is None or interval[0] <= 0 or interval[1] / interval[0] <= WIDE:
        return None
    sources = width_sources(planned, floor)
    largest = sources.largest()
    others = [f"{_NAME[name]} x{math.exp(getattr(sources, name)):.2f}"
              for name in ("new_set", "profile", "floor", "check") if name != largest and getattr(sources, name) > 0.01]
    return (f"{planned.label()}: interval [{interval[0]:.2f}, {interval[1]:.2f}] spans x{interval[1] / interval[0]:.2f}, "
            f"mostly {_NAME[largest]} (x{math.exp(getattr(sources, largest)):.2f}"
            + (f"; then {', '.join(others)}" if others else "") + f"); {_REMEDY[largest]}")


def wide_interval_lines(plan: PlanFile, chains: int = 4) -> tuple[str, ...]:
    """`wide_interval_line` for the plan's first `chains` chains (the floor from its self-check's record)."""
    floor = None if plan.self_check is None else plan.self_check.floor
    lines = (wide_interval_line(planned, floor) for planned in plan.alternatives[:chains])
    return tuple(line for line in lines if line is not None)
