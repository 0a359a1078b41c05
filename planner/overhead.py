"""The decoding loop's own cost: what a chain spends outside its models' forward passes.

T_i(k) times one forward pass of a model. Running a chain also costs the loop around those
passes: choosing the next token (argmax or sampling over the vocabulary), verification, the
one host transfer per verification, cutting caches back, Python bookkeeping. With small
models on a CPU these are a few percent of a forward pass, enough to move a prediction by
more than the 10% polyplan promises, so the exact model can take them into account:

- `per_step_s`: one autoregressive step of the last member (also one step of plain decoding
  with the target alone, so the baseline pays it too);
- `per_round_s`: one verification round at any level (verification, transfer, crops).

Both are measured on their own (`polyplan.profiler.overhead`), with stand-in members whose
forward passes cost nothing, never fitted to a chain's measured speed. They are stored in
the profile's `meta["loop_overhead"]`, keyed by sampling mode.

A chain also switches between models, and a model's first forward passes after another
model's are slower than in the profiler's tight loop (its weights and Python state were
evicted from the CPU caches and come back over a few passes). That *switch cost* is per
model and per position after the switch: the extra seconds of the 1st, 2nd, … consecutive
pass, measured by `polyplan.profiler.switching` and stored as
`meta["switch_cost"]["models"][name]` (a list of seconds; a single number means the 1st pass
only). A verification pass is always a 1st pass; a drafting loop of K passes pays the first K.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polyplan.formats.errors import PolyplanError
from polyplan.formats.inputs import is_finite_number

META_KEY = "loop_overhead"
SWITCH_KEY = "switch_cost"


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


def profile_overhead(meta: dict[str, Any], sampling: str, source: str = "profile") -> LoopOverhead | None:
    """The overhead a profile's `meta` records for `sampling` (None when it records none)."""
    table = meta.get(META_KEY)
    if table is None:
        return None
    if not isinstance(table, dict):
        raise PolyplanError(f"{source}: meta.{META_KEY}: must be an object keyed by sampling mode")
    entry = table.get(sampling)
    if entry is None:
        return None
    return overhead_from_json(entry, f"{source}: meta.{META_KEY}.{sampling}")


SwitchCost = tuple[float, ...]  # extra seconds of the 1st, 2nd, … consecutive pass after a switch
NO_SWITCH: SwitchCost = (0.0,)


def switch_cost(value: Any, where: str) -> SwitchCost:
    """A switch cost from JSON: seconds >= 0, one number (1st pass only) or a non-empty list."""
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values or any(not is_finite_number(v) or v < 0 for v in values):
        raise PolyplanError(f"{where}: must be a finite number of seconds >= 0, or a non-empty list of them")
    return tuple(float(v) for v in values)


def switch_total(cost: SwitchCost, passes: int) -> float:
    """Extra seconds of `passes` consecutive passes right after a switch."""
    return float(sum(cost[:passes]))


def profile_switch_costs(meta: dict[str, Any], source: str = "profile") -> dict[str, SwitchCost]:
    """Per model, the switch cost a profile's `meta` records ({} when none)."""
    entry = meta.get(SWITCH_KEY)
    entry = {} if entry is None else entry
    if not isinstance(entry, dict):
        raise PolyplanError(f"{source}: meta.{SWITCH_KEY}: must be an object with 'models' (model name -> seconds)")
    table = entry.get("models", {})
    if not isinstance(table, dict):
        raise PolyplanError(f"{source}: meta.{SWITCH_KEY}.models: must map model names to seconds")
    return {str(name): switch_cost(value, f"{source}: meta.{SWITCH_KEY}.models.{name}") for name, value in table.items()}
