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
forward passes cost nothing, never fitted to a chain's measured speed. `fit_loop_costs` is the one
fit of loop costs: per configuration, how often each cost was paid and the loop's seconds, solved
by non-negative least squares; polyplan's loop (`profiler.loop_overhead`) and HF `generate`'s
(`planner.exact.engine_overhead`, measured by `engines.hf_overhead`) are its callers. They are stored in
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

from collections.abc import Sequence

from polyplan.formats.errors import PolyplanError
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


def fit_loop_costs(counts: Sequence[Sequence[float]], seconds: Sequence[float]) -> tuple[float, ...]:
    """Non-negative least squares: coefficients c >= 0 minimising |counts · c − seconds|.

    `counts`: one row per configuration (how often each cost was paid), `seconds`: that
    configuration's (median) loop time. One subtraction of two noisy medians can go negative
    on a busy machine; a fit over every configuration cannot.
    """
    import numpy as np
    from scipy.optimize import nnls

    design = np.asarray(counts, dtype=float)
    target = np.asarray(seconds, dtype=float)
    if design.ndim != 2 or design.shape[0] != target.shape[0] or design.shape[0] < design.shape[1]:
        raise PolyplanError(f"fit_loop_costs: need at least as many configurations as costs, got {design.shape} for {target.shape}")
    coefficients, _ = nnls(design, target)
    return tuple(float(c) for c in coefficients)
