"""The decoding loop's costs as profiles and plans record them (what they mean and how the exact
model uses them: `planner.exact.overhead`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from polyplan.formats.checks import ONE_OR_MANY, non_negative
from polyplan.formats.codec import Invalid, spec
from polyplan.formats.errors import PolyplanError
from polyplan.formats.inputs import is_finite_number


@dataclass(frozen=True)
class LoopOverhead:
    """Seconds the decoding loop spends per autoregressive step and per verification round."""

    per_step_s: float = spec(non_negative)
    per_round_s: float = spec(non_negative)

    def __post_init__(self) -> None:
        for name in ("per_step_s", "per_round_s"):
            value = getattr(self, name)
            if not is_finite_number(value) or value < 0:
                raise PolyplanError(f"loop overhead: {name} must be a finite number >= 0, got {value!r}")
            object.__setattr__(self, name, float(value))  # seconds, written as floats


NO_OVERHEAD = LoopOverhead(0.0, 0.0)

_SWITCH_PROBLEM = "must be a finite number of seconds >= 0, or a non-empty list of them"


def _switch_seconds(values: tuple[float, ...]) -> None:
    if not values or any(value < 0 for value in values):
        raise Invalid(_SWITCH_PROBLEM)


# extra seconds of the 1st, 2nd, … consecutive pass after a switch
SwitchCost = Annotated[tuple[float, ...], ONE_OR_MANY, _switch_seconds]
NO_SWITCH: tuple[float, ...] = (0.0,)


def switch_cost(value: Any, where: str) -> tuple[float, ...]:
    """A switch cost given in memory (the planner's argument): seconds >= 0, one number (1st
    pass only) or a non-empty sequence; `PolyplanError` naming `where` otherwise."""
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values or any(not is_finite_number(v) or v < 0 for v in values):
        raise PolyplanError(f"{where}: {_SWITCH_PROBLEM}")
    return tuple(float(v) for v in values)
