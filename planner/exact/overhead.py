"""The decoding loop's own cost: what a chain spends outside its models' forward passes.

Besides its models' passes, a chain pays the loop around them (choosing tokens, verification,
host transfers, cutting caches back, bookkeeping), enough with small models on a CPU to move a
prediction, so the exact model can charge it (`formats.overhead.LoopOverhead`):

- `per_step_s`: one autoregressive step of the last member (and of plain decoding, the baseline);
- `per_round_s`: one verification round at any level (verification, transfer, crops).

Both are measured on their own with stand-in members whose passes cost nothing
(`profiler.loop_overhead`), never fitted to a chain's speed. `fit_loop_costs` is the one fit of
loop costs (non-negative least squares over configurations), for polyplan's loop and for HF
`generate`'s (`planner.exact.engine_overhead`).

A model's first passes after another model's are slower than in a tight loop (its weights and
state left the CPU caches): its *switch cost*, the extra seconds of the 1st, 2nd, … pass after a
switch (`profiler.switching`, `formats.overhead.SwitchCost`). A verification pass is always a 1st
pass; a drafting loop of K passes pays the first K.
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
