"""The paper's theory with B sequences in flight: Lemma 3.1, Theorem 3.2 and the physical limit
with every T evaluated at the width of the batched pass.

The paper's Lemma 3.1 and Theorem 3.2 price one sequence. With B sequences decoding in lockstep,
one pass of a verifying level i carries every sequence's block, B · (K_i + 1) tokens, and emits
B · E[L_i] tokens in expectation; one drafting step of the last member serves all B sequences, as
one pass of B rows when drafting is batched across sequences (`BATCHED`: llama-server's
draft-simple drafts every slot in one decode per step) or as B passes of one row when each
sequence drafts in turn (`SEQUENTIAL`). So Lemma 3.1 at B is Lemma 3.1 for N / B batched rounds
with each T_i replaced by the time of its batched pass:

    verifying level i < n:  T_i(B (K_i + 1))
    last member n:          T_n(B) batched, B · T_n(1) sequential

and the target alone at B takes T_1(B) per B tokens. Verification passes are charged at the
monotone envelope T̃ (`planner.exact.verify_width`), as the exact model and the physical limit
charge them; drafting steps and the target alone at the curve itself. At B = 1 every function here
is its one-sequence counterpart fed those times (the tests check it), and with flat curves it is
the paper's formula as printed. The derivation, what changes with B and what this leaves out
(sequences at different positions, prefills sharing the batch): docs/theory.md, "The theory at B
requests in flight".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.formats.options import integer_at_least
from polyplan.formats.overhead import NO_OVERHEAD, NO_SWITCH, LoopOverhead, SwitchCost
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.planner.exact.physical_limit import PhysicalLimit, measured_block_size
from polyplan.planner.exact.verify_width import monotone_envelope
from polyplan.planner.paper.capped_geometric import check_block_size
from polyplan.planner.paper.insertion import InsertionAnalysis, analyze_insertion
from polyplan.planner.paper.lemma31 import IdealTime, check_positive, ideal_time

BATCHED = "batched"  # one drafting step is one pass over B rows: T_n(B)
SEQUENTIAL = "sequential"  # one drafting step is B passes of one row: B · T_n(1)
DRAFTING = (BATCHED, SEQUENTIAL)


def check_clients(clients: int) -> int:
    """`clients` (B) as an int >= 1; a `PolyplanError` naming it otherwise."""
    return integer_at_least(clients, 1, "clients")


def verify_pass(curve: LatencyCurve, block_size: int, clients: int) -> float:
    """T̃(B (K + 1)): one verification pass over `clients` sequences' blocks of `block_size` tokens."""
    k = check_block_size(block_size, "block_size")
    return float(monotone_envelope(curve)(check_clients(clients) * (k + 1)))


def drafting_step(curve: LatencyCurve, clients: int, drafting: str = BATCHED) -> float:
    """One drafting step of the last member for all `clients` sequences: T(B) batched, B · T(1)
    sequential (module docstring)."""
    b = check_clients(clients)
    if drafting == BATCHED:
        return float(curve(b))
    if drafting == SEQUENTIAL:
        return b * float(curve(1))
    raise PolyplanError(f"drafting: must be one of {', '.join(DRAFTING)}, got {drafting!r}")


def loaded_times(
    curves: Sequence[LatencyCurve], block_sizes: Sequence[int], clients: int, drafting: str = BATCHED
) -> tuple[float, ...]:
    """The time of each member's batched pass, M_1 first: `verify_pass` for the n − 1 verifying
    levels at their `block_sizes`, `drafting_step` for the last member."""
    if len(curves) < 2 or len(block_sizes) != len(curves) - 1:
        raise PolyplanError(
            f"block_sizes: need one per verifying level ({max(len(curves) - 1, 1)}), got {len(block_sizes)}"
        )
    verifying = tuple(verify_pass(curve, k, clients) for curve, k in zip(curves, block_sizes))
    return verifying + (drafting_step(curves[-1], clients, drafting),)


def ideal_time_at_load(
    mean_lengths: Sequence[float],
    curves: Sequence[LatencyCurve],
    block_sizes: Sequence[int],
    *,
    clients: int,
    alpha_scale: float | None = None,
    drafting: str = BATCHED,
    n_tokens: float = 1.0,
) -> IdealTime:
    """Lemma 3.1 at B = `clients`: the time of `n_tokens` tokens over all B sequences (`n_tokens`
    1: the aggregate seconds per token). φ_i counts batched passes (N / B rounds), each at its
    `loaded_times`; `alpha_scale` is the paper's α (None: the last block size, the drafting steps
    per verification, as `planner.paper.paper_model` reads it)."""
    b = check_clients(clients)
    scale = float(block_sizes[-1]) if alpha_scale is None and block_sizes else alpha_scale
    times = loaded_times(curves, block_sizes, b, drafting)
    return ideal_time(mean_lengths, times, alpha_scale=scale, n_tokens=check_positive(n_tokens, "n_tokens") / b)


def target_alone_time(curve: LatencyCurve, clients: int) -> float:
    """The target alone at B: one pass of B rows, T_1(B), per B tokens; seconds per token."""
    b = check_clients(clients)
    return float(curve(b)) / b


def speedup_at_load(
    mean_lengths: Sequence[float],
    curves: Sequence[LatencyCurve],
    block_sizes: Sequence[int],
    *,
    clients: int,
    alpha_scale: float | None = None,
    drafting: str = BATCHED,
) -> float:
    """Lemma 3.1's speedup at B: the target alone at B over the chain at B, both aggregate
    (`target_alone_time` over `ideal_time_at_load`'s seconds per token)."""
    chain = ideal_time_at_load(mean_lengths, curves, block_sizes, clients=clients, alpha_scale=alpha_scale,
                               drafting=drafting)
    return target_alone_time(curves[0], clients) / chain.total


@dataclass(frozen=True)
class LoadedInsertion:
    """Theorem 3.2 at B: the batched times it was fed and its analysis on them. The analysis's eq. 1
    and eq. 2 are then seconds per token of every sequence, B tokens in all (divide by B for the
    aggregate seconds per token); their difference has the sign of the aggregate one."""

    clients: int
    t1: float  # T_1 = T̃_1(B (K_1 + 1)): the upper model's verification pass
    t2: float  # T_2 = T_3': the lower model's drafting step (`drafting_step`)
    t2_new: float  # T_2' = T̃_2'(B (K_2 + 1)): the inserted model's verification pass
    analysis: InsertionAnalysis


def insertion_at_load(
    *,
    upper: LatencyCurve,
    middle: LatencyCurve,
    lower: LatencyCurve,
    l1: float,
    l1_new: float,
    l2_new: float,
    top_block: int,
    middle_block: int,
    clients: int,
    drafting: str = BATCHED,
    alpha_scale: float | None = None,
) -> LoadedInsertion:
    """Theorem 3.2 (`planner.paper.insertion.analyze_insertion`) on the batched times at B =
    `clients`: the upper model verifies blocks of `top_block` in both chains (the theorem has one
    T_1), the inserted model blocks of `middle_block`; E[L_1], E[L_1]', E[L_2]' as there (per
    sequence, so B leaves them alone); `alpha_scale` None: `middle_block`, the lower model's steps
    per verification, as `planner.paper.insertion_triples` reads it."""
    b = check_clients(clients)
    t1 = verify_pass(upper, top_block, b)
    t2_new = verify_pass(middle, middle_block, b)
    t2 = drafting_step(lower, b, drafting)
    scale = float(middle_block) if alpha_scale is None else alpha_scale
    analysis = analyze_insertion(t1=t1, t2=t2, t2_new=t2_new, l1=l1, l1_new=l1_new, l2_new=l2_new, alpha_scale=scale)
    return LoadedInsertion(clients=b, t1=t1, t2=t2, t2_new=t2_new, analysis=analysis)


def limit_speedups_at_load(
    curve: LatencyCurve,
    clients: int,
    k_max: int,
    overhead: LoopOverhead | None = None,
    switch: SwitchCost = NO_SWITCH,
) -> np.ndarray:
    """S_B(K) = (K + 1) · (T(B) + p) / (T̃(B (K + 1)) + s + r + p) for K = 1 … k_max: a free,
    always-right drafter at B (`planner.exact.physical_limit.limit_speedups` at B = 1), the loop's
    costs p and r paid once per batched step and round."""
    b = check_clients(clients)
    integer_at_least(k_max, 1, "k_max")
    loop = NO_OVERHEAD if overhead is None else overhead
    ks = np.arange(1, k_max + 1, dtype=float)
    verify = monotone_envelope(curve).many(b * (ks + 1))
    baseline = curve(b) + loop.per_step_s
    return (ks + 1) * baseline / (verify + switch[0] + loop.per_round_s + loop.per_step_s)


def limit_at_load(
    curve: LatencyCurve,
    clients: int,
    *,
    overhead: LoopOverhead | None = None,
    switch: SwitchCost = NO_SWITCH,
    k_max: int | None = None,
) -> PhysicalLimit:
    """The physical limit at B = `clients`: max(1, max over K of `limit_speedups_at_load`), as a
    `PhysicalLimit` whose `measured_block_size` is the largest K whose width B (K + 1) the curve
    was timed at (0: none; `extrapolated` then says the limit's K lies beyond the timed widths).
    `k_max` None: the one-sequence default, `measured_block_size(curve)` (at least 1), so every B
    is asked about the same block sizes."""
    b = check_clients(clients)
    if k_max is None:
        k_max = max(1, measured_block_size(curve))
    speedups = limit_speedups_at_load(curve, b, k_max, overhead, switch)
    timed = max(0, max(curve.ks) // b - 1)
    best = int(np.argmax(speedups))
    values = tuple(float(s) for s in speedups)
    if speedups[best] <= 1.0:
        return PhysicalLimit(1.0, 0, values, timed)
    return PhysicalLimit(float(speedups[best]), best + 1, values, timed)
