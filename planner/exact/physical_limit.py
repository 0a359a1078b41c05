"""The physical limit: the speedup a free drafter that is always right would give.

However good its drafters, a chain's target verifies m drafted tokens in one pass of width m + 1
and emits at most m + 1 tokens for it. A drafter that costs nothing and is never rejected emits
K + 1 tokens per target pass of width K + 1, so on the target's measured T(k), per block size K,

    S(K) = (K + 1) · (T(1) + p) / (T̃(K + 1) + s + r + p),

each cost the one the exact model charges a one-level chain: T̃ the monotone envelope
(`planner.exact.verify_width`), s the target's switch cost, r and p the loop's cost per round and
per step (`planner.exact.overhead`); the free drafter pays one drafting call per round, the least
the exact model charges. The limit is max(1, max over K of S(K)).

It bounds every chain the exact model predicts: a round handing the target m tokens costs at least
T̃(m + 1) + s + r + p and emits at most m + 1, and a ratio of expectations is at most the largest
ratio. docs/cost-model.md, "The search".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyplan.formats.overhead import NO_OVERHEAD, NO_SWITCH, LoopOverhead, SwitchCost
from polyplan.formats.profile import Profile
from polyplan.formats.options import integer_at_least
from polyplan.planner.exact.latency import LatencyCurve, curve_from_profile
from polyplan.planner.exact.overhead import profile_switch_costs
from polyplan.planner.intervals.prediction_interval import DEFAULT_LEVEL, SpeedupInterval, latency_replicates
from polyplan.planner.exact.verify_width import monotone_envelope


@dataclass(frozen=True)
class PhysicalLimit:
    """The best speedup a free, always-right drafter gives the target (module docstring)."""

    speedup: float  # max(1, max over K of S(K))
    block_size: int  # the K reaching it (the smallest on a tie); 0 when no K beats the target alone
    speedups: tuple[float, ...]  # S(K) for K = 1 … len(speedups)
    measured_block_size: int  # the largest K whose pass (width K + 1) the target was timed at (0: one token only)
    interval: SpeedupInterval | None = None  # bootstrap interval of `speedup` at `block_size` (None: not made)

    @property
    def extrapolated(self) -> bool:
        """The limit's width K + 1 lies beyond the widest the target was timed at."""
        return self.block_size > self.measured_block_size

    def timed(self) -> tuple[int, float] | None:
        """(K, S(K)) at the best K whose width the target was timed at (None: timed at one token only)."""
        measured = self.speedups[: self.measured_block_size]
        if not measured:
            return None
        best = int(np.argmax(measured))
        return best + 1, float(measured[best])

    def share(self, speedup: float) -> float:
        """`speedup` as a share of the limit (1.0: the limit itself)."""
        return speedup / self.speedup

    def text(self) -> str:
        """The limit, with its interval when made, and its K (`at K = 0` when speculation cannot pay)."""
        value = f"{self.speedup:.2f}x" if self.interval is None else self.interval.text()
        return f"{value} at K = {self.block_size}"


def measured_block_size(curve: LatencyCurve) -> int:
    """The largest K whose verification width K + 1 the curve was timed at."""
    return max(curve.ks) - 1


def limit_speedups(
    curve: LatencyCurve, k_max: int, overhead: LoopOverhead | None = None, switch: SwitchCost = NO_SWITCH
) -> np.ndarray:
    """S(K) for K = 1 … k_max (module docstring) on the target's curve."""
    loop = NO_OVERHEAD if overhead is None else overhead
    ks = np.arange(1, k_max + 1, dtype=float)
    verify = monotone_envelope(curve).many(ks + 1)
    baseline = curve(1) + loop.per_step_s
    return (ks + 1) * baseline / (verify + switch[0] + loop.per_round_s + loop.per_step_s)


def physical_limit(
    curve: LatencyCurve,
    *,
    overhead: LoopOverhead | None = None,
    switch: SwitchCost = NO_SWITCH,
    k_max: int | None = None,
) -> PhysicalLimit:
    """The physical limit on the target's latency `curve`, with the loop's `overhead` and the
    target's `switch` cost (a verification pass is a 1st pass); `k_max`: the largest K considered
    (None: `measured_block_size(curve)`, at least 1)."""
    if k_max is None:
        k_max = max(1, measured_block_size(curve))
    integer_at_least(k_max, 1, "k_max")
    speedups = limit_speedups(curve, k_max, overhead, switch)
    best = int(np.argmax(speedups))
    if speedups[best] <= 1.0:
        return PhysicalLimit(1.0, 0, tuple(float(s) for s in speedups), measured_block_size(curve))
    return PhysicalLimit(float(speedups[best]), best + 1, tuple(float(s) for s in speedups), measured_block_size(curve))


def target_limit(
    profile: Profile,
    *,
    context_length: int | None = None,
    overhead: LoopOverhead | None = None,
    k_max: int | None = None,
) -> PhysicalLimit:
    """`physical_limit` of the profile's target, with the switch cost the profile records for it."""
    curve = curve_from_profile(profile.model(profile.target), context_length)
    switch = profile_switch_costs(profile).get(profile.target, NO_SWITCH)
    return physical_limit(curve, overhead=overhead, switch=switch, k_max=k_max)


def limit_interval(
    profile: Profile,
    limit: PhysicalLimit,
    *,
    context_length: int | None = None,
    overhead: LoopOverhead | None = None,
    resamples: int,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> SpeedupInterval:
    """Bootstrap interval of `limit.speedup`: the target's timings resampled (and its
    timing-health corrections drawn) as `planner.intervals.prediction_interval` does, S re-evaluated at
    the limit's K on each replicate."""
    integer_at_least(resamples, 20, "resamples")
    if limit.block_size == 0:
        return SpeedupInterval(1.0, 1.0, 1.0, level)
    rng = np.random.default_rng(seed)
    target = profile.target
    curves, _, _ = latency_replicates(profile, [target], resamples, rng, context_length)
    switch = profile_switch_costs(profile).get(target, NO_SWITCH)
    k = limit.block_size
    values = np.asarray([limit_speedups(curve, k, overhead, switch)[k - 1] for curve in curves[target]])
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return SpeedupInterval(limit.speedup, min(float(low), limit.speedup), max(float(high), limit.speedup), level)
