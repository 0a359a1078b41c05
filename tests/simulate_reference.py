"""Monte-Carlo simulation of the staged-verification recursion: the reference the exact model
(`planner.exact.cost_model`) is tested against.

It runs the recursion literally (see `planner.exact.cost_model` and docs/design.md), token by token:
each drafted token handed to level i is accepted with probability α_{i,i+1} independently,
verification stops at the first rejection, and every forward pass is charged T_i(tokens) (the
drafter's first pass after its verifier accepted all of its last draft is two tokens wide).
Per top-level round it records the cost, the emitted tokens, the forward passes of every
model and, per level, the verifications, drafted and gathered tokens. Rounds are i.i.d., so
the per-token quantities are ratio estimators whose standard errors come from the delta
method over rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.planner.paper.capped_geometric import check_acceptance, check_block_size
from polyplan.planner.exact.cost_model import CurveLike, as_curve
from polyplan.formats.plan import NO_PADDING
from polyplan.planner.exact.verify_width import verify_widths


@dataclass(frozen=True)
class Estimate:
    """A Monte-Carlo estimate and its standard error."""

    value: float
    stderr: float


@dataclass(frozen=True)
class SimulationResult:
    """Per-token estimates from `rounds` simulated top-level rounds (models M_1 first)."""

    rounds: int
    cost_per_token: Estimate
    forwards_per_token: tuple[Estimate, ...]
    tokens_per_verification: tuple[Estimate, ...]
    drafted_per_verification: tuple[Estimate, ...]


def ratio_estimate(numerator: np.ndarray, denominator: np.ndarray) -> Estimate:
    """Σ numerator / Σ denominator over i.i.d. rounds, with the delta-method standard error."""
    count = len(numerator)
    ratio = float(numerator.sum() / denominator.sum())
    residual = numerator - ratio * denominator
    stderr = float(np.sqrt(residual.var(ddof=1) / count) / denominator.mean()) if count > 1 else math.inf
    return Estimate(ratio, stderr)


class _Uniforms:
    """Uniform(0, 1) draws served from blocks (one numpy call per block, not per token)."""

    def __init__(self, rng: np.random.Generator, block: int = 65536) -> None:
        self.rng = rng
        self.block = block
        self.buffer = rng.random(block)
        self.position = 0

    def take(self, count: int) -> np.ndarray:
        if self.position + count > len(self.buffer):
            self.buffer = np.concatenate([self.buffer[self.position :], self.rng.random(max(self.block, count))])
            self.position = 0
        values = self.buffer[self.position : self.position + count]
        self.position += count
        return values


def simulate_chain(
    acceptances: Sequence[float],
    curves: Sequence[CurveLike],
    block_sizes: Sequence[int],
    *,
    rounds: int,
    rng: np.random.Generator,
    pad_verification: bool = True,
) -> SimulationResult:
    """Simulate `rounds` top-level rounds of the chain (same arguments as `predict_chain`).

    With `pad_verification` a pass over k tokens runs, as the decoder runs it, at the width
    `planner.exact.verify_width.verify_widths` chose and costs T at that width."""
    n = len(curves)
    if n < 2:
        raise PolyplanError("curves: simulation needs a chain of at least two models")
    if len(acceptances) != n - 1 or len(block_sizes) != n - 1:
        raise PolyplanError(f"acceptances, block_sizes: need {n - 1} each for {n} models")
    if rounds < 2:
        raise PolyplanError(f"rounds: need at least 2, got {rounds}")
    alphas = [check_acceptance(a, f"acceptances[{i}]") for i, a in enumerate(acceptances)]
    blocks = [check_block_size(k, f"block_sizes[{i}]") for i, k in enumerate(block_sizes)]
    lat = [as_curve(c, f"curves[{i}]") for i, c in enumerate(curves)]
    smallest_step = lat[-1](1)
    catch_up = max(0.0, lat[-1](2) - smallest_step)  # the drafter's two-token first pass (`cost_model._with_catch_up`)
    widths = [verify_widths(c) if pad_verification else NO_PADDING for c in lat]
    uniforms = _Uniforms(rng)

    cost = np.zeros(rounds)
    emitted = np.zeros(rounds)
    forwards = np.zeros((rounds, n))
    verifications = np.zeros((rounds, n - 1))
    drafted = np.zeros((rounds, n - 1))
    gathered = np.zeros((rounds, n - 1))

    def verify(level: int, m: int, r: int) -> int:
        """One forward of M_level over m drafted tokens + the pending one; returns tokens gathered."""
        cost[r] += lat[level](widths[level].width(m + 1))
        forwards[r, level] += 1
        accepted = uniforms.take(m) < alphas[level]
        rejected = np.flatnonzero(~accepted)
        gain = (int(rejected[0]) if len(rejected) else m) + 1  # accepted prefix + correction/bonus
        if level == n - 2:
            behind[0] = gain == m + 1
        verifications[r, level] += 1
        drafted[r, level] += m
        gathered[r, level] += gain
        return gain

    behind = [False]  # the drafter's verifier accepted all of its last draft: it has two tokens to feed

    def draft(level: int, k: int, r: int) -> int:
        if level == n - 1:
            cost[r] += k * smallest_step + (catch_up if behind[0] else 0.0)
            forwards[r, level] += k
            return k
        total = 0
        while total < k:
            m = draft(level + 1, blocks[level], r)
            total += verify(level, m, r)
        return total

    for r in range(rounds):
        m = draft(1, blocks[0], r)
        emitted[r] = verify(0, m, r)

    return SimulationResult(
        rounds=rounds,
        cost_per_token=ratio_estimate(cost, emitted),
        forwards_per_token=tuple(ratio_estimate(forwards[:, i], emitted) for i in range(n)),
        tokens_per_verification=tuple(ratio_estimate(gathered[:, i], verifications[:, i]) for i in range(n - 1)),
        drafted_per_verification=tuple(ratio_estimate(drafted[:, i], verifications[:, i]) for i in range(n - 1)),
    )
