"""The decoding loop's costs as profiles and plans record them (see `planner.exact.overhead` for
what they mean and how the exact model uses them).

- `LoopOverhead`: seconds the loop spends per autoregressive step and per verification round;
- `SwitchCost`: extra seconds of a model's 1st, 2nd, … consecutive pass after another model's.

Their JSON readers live here too, since both the profile and the plan codec read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polyplan.formats.errors import PolyplanError
from polyplan.formats.inputs import is_finite_number


@dataclass(frozen=True)
class LoopOverhead:
    """Seconds the decoding loop spends per autoregressive step and per verification round."""

    per_step_s: float
    per_round_s: float

    def __post_init__(self) -> None:
        for name in ("per_step_s", "per_round_s"):
            value = getattr(self, name)
            if not is_finite_number(value) or value < 0:
                raise PolyplanError(f"loop overhead: {name} must be a finite number >= 0, got {value!r}")

    def to_json_dict(self) -> dict[str, float]:
        return {"per_step_s": float(self.per_step_s), "per_round_s": float(self.per_round_s)}


NO_OVERHEAD = LoopOverhead(0.0, 0.0)


def overhead_from_json(value: Any, where: str) -> LoopOverhead:
    """A `LoopOverhead` from its JSON object; `PolyplanError` naming `where` if malformed."""
    if not isinstance(value, dict) or not {"per_step_s", "per_round_s"} <= set(value):
        raise PolyplanError(f"{where}: must be an object with per_step_s and per_round_s")
    try:
        return LoopOverhead(value["per_step_s"], value["per_round_s"])
    except PolyplanError as error:
        raise PolyplanError(f"{where}: {error}") from None


SwitchCost = tuple[float, ...]  # extra seconds of the 1st, 2nd, … consecutive pass after a switch
NO_SWITCH: SwitchCost = (0.0,)


def switch_cost(value: Any, where: str) -> SwitchCost:
    """A switch cost from JSON: seconds >= 0, one number (1st pass only) or a non-empty list."""
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values or any(not is_finite_number(v) or v < 0 for v in values):
        raise PolyplanError(f"{where}: must be a finite number of seconds >= 0, or a non-empty list of them")
    return tuple(float(v) for v in values)
