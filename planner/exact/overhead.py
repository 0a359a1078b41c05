"""The decoding loop's own cost: what a chain spends outside its models' forward passes.

T_i(k) times one forward pass of a model. Running a chain also costs the loop around those
passes: choosing the next token (argmax or sampling over the vocabulary), verification, the
one host transfer per verification, cutting caches back, Python bookkeeping. With small
models on a CPU these are a few percent of a forward pass, enough to move a prediction by
more than the 10% polyplan promises, so the exact model can take them into account:

- `per_step_s`: one autoregressive step of the last member (also one step of plain decoding
  with the target alone, so the baseline pays it too);
- `per_round_s`: one verification round at any level (verification, transfer, crops).

Both are measured on their own (`polyplan.profiler.loop_overhead`), with stand-in members whose
forward passes cost nothing, never fitted to a chain's measured speed. They are stored in
the profile's `loop_overhead`, keyed by sampling mode (`formats.profile.LoopCalibration`).

A chain also switches between models, and a model's first forward passes after another
model's are slower than in the profiler's tight loop (its weights and Python state were
evicted from the CPU caches and come back over a few passes). That *switch cost* is per
model and per position after the switch: the extra seconds of the 1st, 2nd, … consecutive
pass, measured by `polyplan.profiler.switching` and stored as
the profile's `switch_costs.models[name]` (a list of seconds; a single number means the 1st pass
only; `formats.overhead.SwitchCost`). A verification pass is always a 1st pass; a drafting loop of K passes pays the first K.
"""

from __future__ import annotations

from polyplan.formats.overhead import LoopOverhead, SwitchCost
from polyplan.formats.profile import Profile


def profile_overhead(profile: Profile, sampling: str) -> LoopOverhead | None:
    """The loop overhead `profile` records for `sampling` (None when it records none)."""
    entry = profile.loop_overhead.get(sampling)
    return None if entry is None else entry.overhead


def switch_total(cost: SwitchCost, passes: int) -> float:
    """Extra seconds of `passes` consecutive passes right after a switch."""
    return float(sum(cost[:passes]))


def profile_switch_costs(profile: Profile) -> dict[str, SwitchCost]:
    """Per model, the switch cost `profile` records ({} when none)."""
    return {} if profile.switch_costs is None else dict(profile.switch_costs.models)
