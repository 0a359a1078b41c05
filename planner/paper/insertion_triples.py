"""Theorem 3.2 on one insertion of a profile's chains, beside the exact model.

An insertion is a triple (upper, middle, lower) of profiled models: a chain in which `middle`
verifies `lower`'s drafts and is verified by `upper` (the paper's M_1, M_2', M_3'), against the
same chain without `middle`, where `upper` verifies `lower` directly (M_1, M_2). The paper's
inputs come from the profile as Lemma 3.1's do (`planner.paper.paper_model`):

- T_1, T_2' and T_2 = T_3': T(1) of upper, middle and lower;
- E[L_1]: the mean acceptance length of (upper, lower) at the block size of that level in the
  chain without `middle`; E[L_1]', E[L_2]': of (upper, middle) and (middle, lower) at their
  levels' block sizes in the chain with it (decoded μ where measured, else eq. 3 from α);
- the scaling factor α: the block size of the level `middle` verifies (the passes its drafter
  makes per verification, as Lemma 3.1's φ_n = α φ_{n−1} counts them).

`insertion_inputs` gives those inputs; `triple_insertion` evaluates Theorem 3.2 on them
(`planner.paper.insertion`: its two conditions, whether they guarantee a gain, and Lemma 3.1's
eq. 2 − eq. 1) and keeps the exact model's speedups of the two chains beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import Profile
from polyplan.planner.paper.insertion import Condition, InsertionAnalysis, analyze_insertion
from polyplan.planner.exact.latency import curve_from_profile
from polyplan.planner.paper.paper_model import mean_length


@dataclass(frozen=True)
class InsertionInputs:
    """Theorem 3.2's inputs for inserting `middle` between `upper` and `lower` (paper notation:
    t1 = T_1, t2 = T_2 = T_3', t2_new = T_2', l1 = E[L_1], l1_new = E[L_1]', l2_new = E[L_2]')."""

    upper: str
    middle: str
    lower: str
    t1: float
    t2: float
    t2_new: float
    l1: float
    l1_new: float
    l2_new: float
    alpha_scale: float

    def analyze(self) -> InsertionAnalysis:
        """Theorem 3.2 and Lemma 3.1's exact difference on these inputs."""
        return analyze_insertion(
            t1=self.t1, t2=self.t2, t2_new=self.t2_new, l1=self.l1, l1_new=self.l1_new, l2_new=self.l2_new,
            alpha_scale=self.alpha_scale,
        )


def insertion_inputs(
    profile: Profile,
    with_chain: Sequence[str],
    with_blocks: Sequence[int],
    without_blocks: Sequence[int],
    middle: str,
    *,
    sampling: str = "greedy",
    context_length: int | None = None,
) -> InsertionInputs:
    """Theorem 3.2's inputs for `middle`'s insertion between its neighbours in `with_chain`
    (block sizes `with_blocks`), against that chain without it (block sizes `without_blocks`).
    The times are T(1) read at `context_length` (None: averaged over the profiled contexts)."""
    chain = tuple(with_chain)
    if middle not in chain[1:-1]:
        raise PolyplanError(f"middle: {middle!r} is not an intermediate model of {' > '.join(chain)}")
    if len(with_blocks) != len(chain) - 1 or len(without_blocks) != len(chain) - 2:
        raise PolyplanError(
            f"block sizes: need {len(chain) - 1} with {middle!r} and {len(chain) - 2} without, "
            f"got {len(with_blocks)} and {len(without_blocks)}"
        )
    position = chain.index(middle)
    upper, lower = chain[position - 1], chain[position + 1]

    def step(name: str) -> float:
        return curve_from_profile(profile.model(name), context_length)(1)

    def length(verifier: str, drafter: str, k: int) -> float:
        return mean_length(profile.stats(verifier, drafter, sampling), k)[0]

    return InsertionInputs(
        upper=upper,
        middle=middle,
        lower=lower,
        t1=step(upper),
        t2=step(lower),
        t2_new=step(middle),
        l1=length(upper, lower, without_blocks[position - 1]),
        l1_new=length(upper, middle, with_blocks[position - 1]),
        l2_new=length(middle, lower, with_blocks[position]),
        alpha_scale=float(with_blocks[position]),
    )


@dataclass(frozen=True)
class TripleInsertion:
    """One insertion: Theorem 3.2, Lemma 3.1's difference and the exact model's speedups with
    and without `middle` (chains target first, with their block sizes)."""

    upper: str
    middle: str
    lower: str
    analysis: InsertionAnalysis
    with_chain: tuple[str, ...]
    with_blocks: tuple[int, ...]
    with_speedup: float
    without_chain: tuple[str, ...]
    without_blocks: tuple[int, ...]
    without_speedup: float

    @property
    def exact_delta(self) -> float:
        """The exact model's speedup with `middle` minus without it."""
        return self.with_speedup - self.without_speedup

    @property
    def theorem_guarantees_gain(self) -> bool:
        """Theorem 3.2's conditions (with α = the block size `middle` verifies) guarantee a gain."""
        return bool(self.analysis.theorem_guarantees_gain)

    @property
    def lemma31_helps(self) -> bool:
        """Lemma 3.1's time per token is lower with `middle` (eq. 2 − eq. 1 < 0)."""
        return self.analysis.verdict == "helps"

    def line(self) -> str:
        """One line: the theorem, Lemma 3.1 and the exact model on this insertion."""
        analysis = self.analysis
        exact = "helps" if self.exact_delta > 0 else "no gain"
        return (
            f"{self.middle} between {self.upper} and {self.lower}: Thm 3.2 "
            f"{'guarantees a gain' if self.theorem_guarantees_gain else 'no guarantee'} "
            f"(cond 1 {_condition(analysis.condition1)}, cond 2 {_condition(analysis.condition2)}, "
            f"assumptions {'hold' if analysis.assumptions_hold else 'fail'}, c = {analysis.ceiling}); "
            f"Lemma 3.1 {'helps' if self.lemma31_helps else 'no gain'} "
            f"({analysis.exact_difference * 1e3:+.3g} ms/token); exact {exact}: "
            f"{self.with_speedup:.3f}x ({' > '.join(self.with_chain)}, K = {list(self.with_blocks)}) vs "
            f"{self.without_speedup:.3f}x ({' > '.join(self.without_chain)}, K = {list(self.without_blocks)})"
        )


def _condition(condition: Condition) -> str:
    if condition.rhs is None:
        return f"{condition.lhs:.3g} < ?"
    return f"{condition.lhs:.3g} {'<' if condition.holds else '>='} {condition.rhs:.3g}"


def triple_insertion(
    profile: Profile,
    middle: str,
    with_plan: tuple[Sequence[str], Sequence[int], float],
    without_plan: tuple[Sequence[str], Sequence[int], float],
    *,
    sampling: str = "greedy",
    context_length: int | None = None,
) -> TripleInsertion:
    """Theorem 3.2 on `middle`'s insertion, from the two chains' (chain, block sizes, exact speedup)."""
    with_chain, with_blocks, with_speedup = with_plan
    without_chain, without_blocks, without_speedup = without_plan
    if tuple(name for name in with_chain if name != middle) != tuple(without_chain):
        raise PolyplanError(f"without: {' > '.join(without_chain)} is not {' > '.join(with_chain)} without {middle!r}")
    inputs = insertion_inputs(profile, with_chain, with_blocks, without_blocks, middle,
                              sampling=sampling, context_length=context_length)
    return TripleInsertion(
        upper=inputs.upper,
        middle=middle,
        lower=inputs.lower,
        analysis=inputs.analyze(),
        with_chain=tuple(with_chain),
        with_blocks=tuple(int(k) for k in with_blocks),
        with_speedup=float(with_speedup),
        without_chain=tuple(without_chain),
        without_blocks=tuple(int(k) for k in without_blocks),
        without_speedup=float(without_speedup),
    )
