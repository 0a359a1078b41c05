"""The exact cost model: expected wall time per emitted token of a chain of any length.

It follows the staged-verification recursion the decoder runs (docs/design.md): a round of level
i takes m ~ X_{i+1} = draft(i+1, K_i) tokens, costs cost(draft(i+1, K_i)) + T̃_i(m + 1) and gathers
min(A_i, m) + 1 tokens (A_i: acceptances before the first rejection, i.i.d. at rate α or by the
measured runs; at the last level possibly the measured law of its rounds, `DraftRounds`);
draft(i, K) repeats rounds until >= K tokens are gathered. Every drafted token is paid for,
accepted or not: that is how wasted work enters the cost. Rounds are i.i.d., so
E[cost of draft(i, K)] = E[rounds] · E[round cost] (Wald), and the top level is a renewal-reward
process. docs/cost-model.md, "The exact model"; the Monte-Carlo reference it is tested against
is tests/simulate_reference.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.planner.paper.capped_geometric import check_acceptance, check_block_size
from polyplan.planner.exact.draft_rounds import DraftRounds
from polyplan.planner.exact.latency import LatencyCurve, constant_curve
from polyplan.formats.overhead import NO_OVERHEAD, NO_SWITCH, LoopOverhead, SwitchCost, switch_cost
from polyplan.planner.exact.overhead import switch_total
from polyplan.planner.exact.runs import RunSurvival
from polyplan.planner.exact.verify_width import monotone_envelope

CurveLike = Union[LatencyCurve, float]
Acceptance = Union[float, RunSurvival, DraftRounds]  # i.i.d. rate α, measured acceptance runs, or a rule drafter's rounds


@dataclass(frozen=True)
class ChainSettings:
    """How a profile is read into the exact model's inputs; shared by the search
    (`planner.search.SearchSettings` extends it), one chain's prediction and the intervals."""

    sampling: str = "greedy"  # the profile's sampling-mode key ("greedy", "t1.0", …)
    context_length: int | None = None  # where the latency curves are read (None: their average over the measured ones)
    overhead: LoopOverhead | None = None  # the loop's own cost per step and round, for the exact model only
    # "iid" (rate α per token), "runs" (measured acceptance runs, `planner.exact.runs`), "auto" (runs where recorded)
    acceptance_model: str = "auto"


@dataclass(frozen=True)
class ChainPrediction:
    """What the exact model predicts for one chain (models M_1 … M_n, levels 1 … n−1); per-model
    tuples start at M_1, per-level ones at level 1."""

    cost_per_token: float  # expected seconds per token M_1 emits (forward passes plus the loop overhead)
    speedup: float  # (T_1(1) + per-step overhead) / cost_per_token: over M_1 decoding alone
    forwards_per_token: tuple[float, ...]  # E[forward passes of each M_i] per token (the paper's φ_i / N)
    time_per_token: tuple[float, ...]  # E[seconds in each M_i's passes] per token (with the overhead: the cost)
    tokens_per_verification: tuple[float, ...]  # per level i, E[min(A_i, m) + 1]: tokens one verification gathers
    drafted_per_verification: tuple[float, ...]  # per level, E[m]: tokens handed up for one verification
    wasted_per_verification: tuple[float, ...]  # per level, E[m − min(A_i, m)]: drafted tokens rejected
    drafted_pmf: tuple[tuple[float, ...], ...]  # per level, P(m = j) at index j
    overhead_per_token: float = 0.0  # expected seconds of the decoding loop per emitted token


@dataclass(frozen=True)
class _Draft:
    """draft(i, K) summarised: the pmf of its token count and expectations per call."""

    pmf: np.ndarray  # [max_count + 1], P(X_i = j)
    cost: float  # E[seconds of all forwards below and at level i, loop overhead included]
    overhead: float  # E[seconds of loop overhead in that cost]
    forwards: tuple[float, ...]  # E[forwards of M_i … M_n per call]
    times: tuple[float, ...]  # E[seconds in M_i … M_n per call]
    level_stats: tuple[tuple[float, float, float, np.ndarray], ...]  # per level i … n−1 (E[g], E[m], E[waste], pmf m)


def _gathered_given_drafted(acceptance: Acceptance, max_drafted: int) -> np.ndarray:
    """G[m, j] = P(min(A, m) + 1 = j) for m = 0 … max_drafted, j = 0 … max_drafted + 1.

    A's law: geometric (P(A >= a) = α^a) for a float α, the measured run survival, or, for a
    rule drafter, the measured law of its rounds.
    """
    if isinstance(acceptance, DraftRounds):
        table = np.zeros((max_drafted + 1, max_drafted + 2))
        measured = acceptance.gathered_given_drafted()
        rows = min(max_drafted, acceptance.max_drafted) + 1
        table[:rows, : rows + 1] = measured[:rows, : rows + 1]
        table[rows:, 1] = 1.0  # never drafted
        return table
    if isinstance(acceptance, RunSurvival):
        survival = acceptance(max_drafted + 1)  # S(0 … max_drafted + 1)
    else:
        survival = acceptance ** np.arange(max_drafted + 2, dtype=float)
    table = np.zeros((max_drafted + 1, max_drafted + 2))
    for m in range(max_drafted + 1):
        table[m, 1 : m + 1] = survival[:m] - survival[1 : m + 1]  # rejected after a = j − 1 acceptances
        table[m, m + 1] = survival[m]
    return table


def as_curve(curve: CurveLike, name: str) -> LatencyCurve:
    """`curve`, or a constant curve of `curve` seconds; `PolyplanError` naming `name` otherwise."""
    if isinstance(curve, LatencyCurve):
        return curve
    try:
        return constant_curve(float(curve))
    except (TypeError, ValueError):
        raise PolyplanError(f"{name}: must be a latency curve or a time in seconds, got {curve!r}") from None


def _level_round(
    acceptance: Acceptance, drafted_pmf: np.ndarray, verify: LatencyCurve, switch: float = 0.0
) -> tuple[np.ndarray, float, tuple]:
    """One verification round given the pmf of drafted tokens: gathered pmf, forward time
    (the verifier's pass, cold: `switch` added), stats."""
    counts = np.arange(len(drafted_pmf), dtype=float)
    table = _gathered_given_drafted(acceptance, len(drafted_pmf) - 1)
    gathered = drafted_pmf @ table  # [max_drafted + 2]
    verify_time = float(drafted_pmf @ verify.many(counts + 1)) + switch
    mean_gathered = float(gathered @ np.arange(len(gathered)))
    mean_drafted = float(drafted_pmf @ counts)
    # waste = m − accepted = m − (g − 1)
    stats = (mean_gathered, mean_drafted, mean_drafted - (mean_gathered - 1.0), drafted_pmf)
    return gathered, verify_time, stats


def _with_catch_up(below: _Draft, acceptance: Acceptance, curve: LatencyCurve) -> _Draft:
    """The drafter's first pass of a round, widened by the token it has not seen (`below`: the
    last model's draft, `acceptance`: its verifier's law, `curve`: its own T(k)): each round pays
    P(all accepted) · max(0, T(2) − T(1)) more, at the level right above the drafter only; a rule
    drafter reads the whole stream in one call. docs/cost-model.md, "The drafter's catch-up pass"."""
    if isinstance(acceptance, DraftRounds):
        if not acceptance.model_drafter:
            return below
        all_accepted = acceptance.all_accepted_unfed()
    else:
        table = _gathered_given_drafted(acceptance, len(below.pmf) - 1)
        all_accepted = float(sum(below.pmf[m] * table[m, m + 1] for m in range(len(below.pmf))))
    extra = all_accepted * max(0.0, curve(2) - curve(1))
    if extra == 0.0:
        return below
    return _Draft(pmf=below.pmf, cost=below.cost + extra, overhead=below.overhead, forwards=below.forwards,
                  times=below.times[:-1] + (below.times[-1] + extra,), level_stats=below.level_stats)


def _last_draft(k: int, acceptance: Acceptance, curve: LatencyCurve, overhead: LoopOverhead, switch: SwitchCost) -> _Draft:
    """draft(n, k) of the last model M_n, whose verifier's law is `acceptance`, before its
    catch-up pass (`_with_catch_up`)."""
    if isinstance(acceptance, DraftRounds):
        pmf = acceptance.drafted_pmf()
        if not acceptance.model_drafter:  # a rule drafter: one call, 0 … K tokens
            seconds = curve(1) + switch_total(switch, 1)
            loop = overhead.per_step_s
            return _Draft(pmf=pmf, cost=seconds + loop, overhead=loop, forwards=(1.0,), times=(seconds,), level_stats=())
        passes = acceptance.passes_pmf()  # a model drafter: one pass per drafted token (and per stop)
        counts = np.arange(len(passes), dtype=float)
        mean_passes = float(passes @ counts)
        seconds = mean_passes * curve(1) + float(sum(p * switch_total(switch, j) for j, p in enumerate(passes) if p))
        loop = mean_passes * overhead.per_step_s
        return _Draft(pmf=pmf, cost=seconds + loop, overhead=loop, forwards=(mean_passes,), times=(seconds,), level_stats=())
    pmf = np.zeros(k + 1)
    pmf[k] = 1.0
    seconds = k * curve(1) + switch_total(switch, k)  # the loop follows the verifier's pass: cold
    loop = k * overhead.per_step_s
    return _Draft(pmf=pmf, cost=seconds + loop, overhead=loop, forwards=(float(k),), times=(seconds,), level_stats=())


def _draft(
    level: int,
    k: int,
    acceptances: Sequence[Acceptance],
    curves: Sequence[LatencyCurve],
    blocks: Sequence[int],
    overhead: LoopOverhead,
    switch: Sequence[SwitchCost],
    verify_curves: Sequence[LatencyCurve],
) -> _Draft:
    """Summarise draft(level, k) (0-based level: 0 is the target, len(curves) − 1 the smallest;
    `verify_curves`: what a verification pass of each model costs, `curves` its one-token steps)."""
    last = len(curves) - 1
    if level == last:
        drafted = _last_draft(k, acceptances[last - 1], curves[last], overhead, switch[last])
        return _with_catch_up(drafted, acceptances[last - 1], curves[last])
    below = _draft(level + 1, blocks[level], acceptances, curves, blocks, overhead, switch, verify_curves)
    gathered, verify_time, stats = _level_round(acceptances[level], below.pmf, verify_curves[level], switch[level][0])
    max_gain = len(gathered) - 1
    visit = np.zeros(k)  # visit[s] = P(a round starts with s tokens gathered)
    visit[0] = 1.0
    final = np.zeros(k + max_gain)  # P(X = t)
    for s in range(k):
        if visit[s] == 0.0:
            continue
        spread = visit[s] * gathered[1:]  # gains 1 … max_gain
        targets = s + np.arange(1, max_gain + 1)
        inside = targets < k
        np.add.at(visit, targets[inside], spread[inside])
        np.add.at(final, targets[~inside], spread[~inside])
    rounds = float(visit.sum())
    round_cost = below.cost + verify_time + overhead.per_round_s
    return _Draft(
        pmf=final,
        cost=rounds * round_cost,
        overhead=rounds * (below.overhead + overhead.per_round_s),
        forwards=(rounds,) + tuple(rounds * f for f in below.forwards),
        times=(rounds * verify_time,) + tuple(rounds * t for t in below.times),
        level_stats=(stats,) + tuple(below.level_stats),
    )


def predict_chain(
    acceptances: Sequence[Acceptance],
    curves: Sequence[CurveLike],
    block_sizes: Sequence[int],
    overhead: LoopOverhead | None = None,
    switch_costs: Sequence[float | Sequence[float]] | None = None,
    pad_verification: bool = True,
    verify_curves: Sequence[CurveLike] | None = None,
) -> ChainPrediction:
    """Exact expected cost per emitted token of the chain M_1 … M_n.

    Args:
        acceptances: α_{i,i+1} for i = 1 … n−1: the per-token acceptance rate of M_{i+1}'s
            samples under M_i (adjacent pairs only), each in [0, 1); or, per level, the
            measured `planner.exact.runs.RunSurvival` of the pair at that level's block size; or, for
            the last level only, a `DraftRounds` law: a rule drafter's, or a model drafter's
            under a draft policy (its block size the policy's starting cap).
        curves: T_1 … T_n as `LatencyCurve`s (or constant times in seconds).
        block_sizes: K_1 … K_{n−1}, each >= 1 (empty for n = 1).
        overhead: the decoding loop's own cost per step and per round (None: none).
        switch_costs: per model, the extra seconds of its 1st, 2nd, … pass after another
            model ran (`planner.exact.overhead`), or one number (the 1st pass only). Every
            verification pass pays the 1st; a drafting loop of K steps pays the first K. None: none.
        pad_verification: a verification pass over k tokens costs the monotone envelope T̃(k)
            (`planner.exact.verify_width`), as the decoder runs it; False: T(k) as measured (an
            engine that never pads).
        verify_curves: per model, what a verification pass costs where that is not its `curves`
            entry (llama-server's draft model decodes the verified batch again,
            `planner.llama_cpp.server_loop`); the baseline still costs `curves[0]`. None: `curves`.
    """
    n = len(curves)
    if n < 1:
        raise PolyplanError("curves: a chain needs at least the target model")
    if len(acceptances) != n - 1:
        raise PolyplanError(f"acceptances: need {n - 1} (one per adjacent pair), got {len(acceptances)}")
    if len(block_sizes) != n - 1:
        raise PolyplanError(f"block_sizes: need {n - 1} (one per verifying level), got {len(block_sizes)}")
    alphas = [a if isinstance(a, (RunSurvival, DraftRounds)) else check_acceptance(a, f"acceptances[{i}]") for i, a in enumerate(acceptances)]
    blocks = [check_block_size(k, f"block_sizes[{i}]") for i, k in enumerate(block_sizes)]
    for i, a in enumerate(alphas):
        if isinstance(a, DraftRounds) and i != n - 2:
            raise PolyplanError(f"acceptances[{i}]: measured rounds (DraftRounds) are read at the last level only, got level {i} of {n - 1}")
    lat = [as_curve(c, f"curves[{i}]") for i, c in enumerate(curves)]
    if switch_costs is not None and len(switch_costs) != n:
        raise PolyplanError(f"switch_costs: need {n} (one per model), got {len(switch_costs)}")
    switch = [NO_SWITCH] * n if switch_costs is None else [switch_cost(c, f"switch_costs[{i}]") for i, c in enumerate(switch_costs)]
    loop = NO_OVERHEAD if overhead is None else overhead
    baseline = lat[0](1) + loop.per_step_s
    if n == 1:
        return ChainPrediction(baseline, 1.0, (1.0,), (lat[0](1),), (), (), (), (), loop.per_step_s)

    if verify_curves is not None and len(verify_curves) != n:
        raise PolyplanError(f"verify_curves: need {n} (one per model), got {len(verify_curves)}")
    verifying = lat if verify_curves is None else [as_curve(c, f"verify_curves[{i}]") for i, c in enumerate(verify_curves)]
    verify = [monotone_envelope(c) for c in verifying] if pad_verification else verifying
    below = _draft(1, blocks[0], alphas, lat, blocks, loop, switch, verify)
    gathered, verify_time, stats = _level_round(alphas[0], below.pmf, verify[0], switch[0][0])
    tokens = stats[0]
    round_cost = below.cost + verify_time + loop.per_round_s
    cost = round_cost / tokens
    level_stats = (stats,) + below.level_stats
    return ChainPrediction(
        cost_per_token=cost,
        speedup=baseline / cost,
        forwards_per_token=(1.0 / tokens,) + tuple(f / tokens for f in below.forwards),
        time_per_token=(verify_time / tokens,) + tuple(t / tokens for t in below.times),
        tokens_per_verification=tuple(s[0] for s in level_stats),
        drafted_per_verification=tuple(s[1] for s in level_stats),
        wasted_per_verification=tuple(s[2] for s in level_stats),
        drafted_pmf=tuple(tuple(float(p) for p in s[3]) for s in level_stats),
        overhead_per_token=(below.overhead + loop.per_round_s) / tokens,
    )

