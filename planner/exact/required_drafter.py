"""What would pay: the acceptance a drafter needs, or the cost it may have, for a target speedup.

One model drafter directly under the target M_1, accepted i.i.d. at rate α, drafting K tokens per
round at c · T_1(1) a step (c = T_d(1) / T_1(1), its cost ratio). The exact model prices it as

    tokens per verification   g(α, K) = (1 − α^{K+1}) / (1 − α)
    seconds per round         R(c, K) = K · (c · T_1(1) + p) + T̃_1(K + 1) + s + r
    speedup                   S(α, c, K) = g(α, K) · (T_1(1) + p) / R(c, K)

with T̃_1 the monotone envelope of the target's T(k), p and r the loop's cost per step and per
round, s the target's switch cost (a hypothetical drafter has none of its own).

- `required_acceptance`: for S and c, the least α that reaches S at its best K (S rises with α at
  every K, so each K has one α_K, found by bisection on g); K runs over 1 … k_max.
- `largest_cost_ratio`: for S and α, the largest c that still reaches S, in closed form per K:
  c_K = ((g (T_1(1) + p) / S − T̃_1(K + 1) − s − r) / K − p) / T_1(1).

No α or c found here beats the physical limit (`planner.exact.physical_limit`): c = 0, α → 1 is it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import NO_OVERHEAD, NO_SWITCH, LoopOverhead, SwitchCost
from polyplan.formats.options import integer_at_least
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.planner.exact.physical_limit import measured_block_size
from polyplan.planner.exact.verify_width import monotone_envelope
from polyplan.planner.paper.capped_geometric import check_acceptance, check_block_size
from polyplan.planner.paper.lemma31 import check_positive


@dataclass(frozen=True)
class RequiredAcceptance:
    """The least acceptance α that reaches `speedup` with a drafter of cost ratio `cost_ratio`."""

    speedup: float  # the target speedup S over the target alone
    cost_ratio: float  # c = T_d(1) / T_1(1)
    acceptance: float | None  # the least α over K (None: no α < 1 reaches S at any K up to k_max)
    block_size: int | None  # the K it is reached at (None with `acceptance`)
    acceptances: tuple[float | None, ...]  # α_K for K = 1 … k_max (None where no α < 1 reaches S at that K)

    @property
    def reachable(self) -> bool:
        return self.acceptance is not None


@dataclass(frozen=True)
class RequiredCost:
    """The largest cost ratio c at which a drafter accepted at `acceptance` reaches `speedup`."""

    speedup: float  # the target speedup S over the target alone
    acceptance: float  # the drafter's α
    cost_ratio: float | None  # the largest c over K (None: even a free drafter at this α misses S)
    block_size: int | None  # the K it is reached at (None with `cost_ratio`)
    cost_ratios: tuple[float | None, ...]  # c_K for K = 1 … k_max (None where even c = 0 misses S at that K)

    @property
    def reachable(self) -> bool:
        return self.cost_ratio is not None


@dataclass(frozen=True)
class _Round:
    """The target's side of a round at every K = 1 … k_max: T_1(1) + p, and T̃_1(K + 1) + s + r."""

    baseline: float
    verify: np.ndarray  # [k_max], index K − 1
    per_step: float

    def seconds(self, cost_ratio: float, k: int, step: float) -> float:
        """R(c, K) for a target step of `step` seconds."""
        return k * (cost_ratio * step + self.per_step) + float(self.verify[k - 1])


def _round(curve: LatencyCurve, overhead: LoopOverhead | None, switch: SwitchCost, k_max: int | None) -> tuple[_Round, int]:
    if k_max is None:
        k_max = max(1, measured_block_size(curve))
    integer_at_least(k_max, 1, "k_max")
    loop = NO_OVERHEAD if overhead is None else overhead
    ks = np.arange(1, k_max + 1, dtype=float)
    verify = monotone_envelope(curve).many(ks + 1) + switch[0] + loop.per_round_s
    return _Round(curve(1) + loop.per_step_s, verify, loop.per_step_s), k_max


def tokens_per_verification(acceptance: float, block_size: int) -> float:
    """g(α, K) = 1 + α + … + α^K: tokens one verification of K i.i.d. drafted tokens gathers."""
    return math.fsum(acceptance**j for j in range(block_size + 1))


def _check_cost_ratio(cost_ratio: float) -> float:
    try:
        value = float(cost_ratio)
    except (TypeError, ValueError):
        raise PolyplanError(f"cost_ratio: must be a number >= 0, got {cost_ratio!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise PolyplanError(f"cost_ratio: must be a finite number >= 0, got {cost_ratio!r}")
    return value


def drafter_speedup(
    curve: LatencyCurve,
    acceptance: float,
    cost_ratio: float,
    block_size: int,
    *,
    overhead: LoopOverhead | None = None,
    switch: SwitchCost = NO_SWITCH,
) -> float:
    """S(α, c, K) on the target's `curve` (module docstring): what the exact model predicts for
    one i.i.d. drafter of cost ratio c at block size K."""
    alpha = check_acceptance(acceptance, "acceptance")
    c = _check_cost_ratio(cost_ratio)
    k = check_block_size(block_size, "block_size")
    target, _ = _round(curve, overhead, switch, k)
    return tokens_per_verification(alpha, k) * target.baseline / target.seconds(c, k, curve(1))


def _acceptance_for(tokens: float, k: int) -> float | None:
    """The α in [0, 1) with g(α, k) = tokens (0 when g(0) = 1 already suffices, None past K + 1)."""
    if tokens <= 1.0:
        return 0.0
    if tokens >= k + 1:
        return None
    return float(brentq(lambda a: tokens_per_verification(a, k) - tokens, 0.0, 1.0, xtol=1e-15, rtol=4 * np.finfo(float).eps))


def required_acceptance(
    curve: LatencyCurve,
    speedup: float,
    cost_ratio: float,
    *,
    overhead: LoopOverhead | None = None,
    switch: SwitchCost = NO_SWITCH,
    k_max: int | None = None,
) -> RequiredAcceptance:
    """The least acceptance α a drafter of cost ratio `cost_ratio` needs for `speedup` over the
    target alone (S > 0, c >= 0), at its best block size (module docstring), on the target's
    `curve`, with the loop's `overhead` and the target's `switch` cost; `k_max`: the largest K
    considered (None: the widest block the curve was timed for)."""
    s = check_positive(speedup, "speedup")
    c = _check_cost_ratio(cost_ratio)
    target, k_max = _round(curve, overhead, switch, k_max)
    step = curve(1)
    needed = [
        _acceptance_for(s * target.seconds(c, k, step) / target.baseline, k) for k in range(1, k_max + 1)
    ]
    reached = [(alpha, k) for k, alpha in enumerate(needed, 1) if alpha is not None]
    if not reached:
        return RequiredAcceptance(s, c, None, None, tuple(needed))
    alpha, k = min(reached)
    return RequiredAcceptance(s, c, alpha, k, tuple(needed))


def largest_cost_ratio(
    curve: LatencyCurve,
    speedup: float,
    acceptance: float,
    *,
    overhead: LoopOverhead | None = None,
    switch: SwitchCost = NO_SWITCH,
    k_max: int | None = None,
) -> RequiredCost:
    """The largest cost ratio c at which a drafter accepted at `acceptance` reaches `speedup`
    over the target alone, at its best block size (module docstring; arguments as in
    `required_acceptance`)."""
    s = check_positive(speedup, "speedup")
    alpha = check_acceptance(acceptance, "acceptance")
    target, k_max = _round(curve, overhead, switch, k_max)
    step = curve(1)
    ratios: list[float | None] = []
    for k in range(1, k_max + 1):
        budget = tokens_per_verification(alpha, k) * target.baseline / s - float(target.verify[k - 1])
        c = (budget / k - target.per_step) / step
        ratios.append(c if c >= 0 else None)
    reached = [(c, -k) for k, c in enumerate(ratios, 1) if c is not None]
    if not reached:
        return RequiredCost(s, alpha, None, None, tuple(ratios))
    c, negative_k = max(reached)
    return RequiredCost(s, alpha, c, -negative_k, tuple(ratios))
