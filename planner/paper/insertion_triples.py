"""Theorem 3.2 on one insertion of a profile's chains, beside the exact model.

An insertion is a triple (upper, middle, lower) of profiled models: `middle` verifies `lower`'s
drafts and is verified by `upper` (the paper's M_1, M_2', M_3'), against the same chain without
`middle` (M_1, M_2). The paper's inputs come from the profile as Lemma 3.1's do
(`planner.paper.paper_model`). docs/theory.md, "polyplan theory insertion".
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import DraftPolicy, blocks_text
from polyplan.formats.profile import Profile
from polyplan.formats.plan import ConditionRecord
from polyplan.planner.paper.insertion import InsertionAnalysis, analyze_insertion
from polyplan.planner.exact.latency import curve_from_profile
from polyplan.planner.exact.ngram_replay import ngram_simple_sizes
from polyplan.planner.paper.paper_model import mean_length


@dataclass(frozen=True)
class InsertionInputs:
    """Theorem 3.2's inputs for inserting `middle` between `upper` and `lower`, in the paper's
    notation; each E[L] is a mean acceptance length at its level's block size in its chain."""

    upper: str  # M_1
    middle: str  # M_2'
    lower: str  # M_2 = M_3'
    t1: float  # T_1: T(1) of upper, in seconds
    t2: float  # T_2 = T_3': of lower
    t2_new: float  # T_2': of middle
    l1: float  # E[L_1]: of (upper, lower) in the chain without `middle`
    l1_new: float  # E[L_1]': of (upper, middle) in the chain with it
    l2_new: float  # E[L_2]': of (middle, lower) in the chain with it
    # the paper's scaling factor α: the block size of the level `middle` verifies (the passes `lower`
    # makes per verification); not an acceptance rate
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
    middle: str | None = None,
    *,
    sampling: str = "greedy",
    context_length: int | None = None,
) -> InsertionInputs:
    """Theorem 3.2's inputs (`.analyze()` evaluates it) for inserting `middle` between its
    neighbours in `with_chain`, costliest first: the triple itself or a longer chain, which need not
    start at the target; the three pairs must be profiled under `sampling`. `with_blocks`: its
    block sizes, one per verifying level; `without_blocks`: those of the same chain without
    `middle`; `middle` None: the middle of a chain of three; `context_length`: where T(1) is read
    (None: averaged over the profiled contexts)."""
    chain = tuple(with_chain)
    if middle is None:
        if len(chain) != 3:
            raise PolyplanError(f"middle: name the inserted model of {' > '.join(chain)} (only a chain of 3 has one middle)")
        middle = chain[1]
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
    without_policy: DraftPolicy | None = None  # the chain without `middle`: its last level's draft policy

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
            f"{self.without_speedup:.3f}x ({' > '.join(self.without_chain)}, K = {blocks_text(self.without_blocks, self.without_policy)})"
        )


def _condition(condition: ConditionRecord) -> str:
    if condition.rhs is None:
        return f"{condition.lhs:.3g} < ?"
    return f"{condition.lhs:.3g} {'<' if condition.holds else '>='} {condition.rhs:.3g}"


def triple_insertion(
    profile: Profile,
    middle: str,
    with_plan: tuple[Sequence[str], Sequence[int], float],
    without_plan: tuple[Sequence[str], Sequence[int], float] | tuple[Sequence[str], Sequence[int], float, DraftPolicy | None],
    *,
    sampling: str = "greedy",
    context_length: int | None = None,
) -> TripleInsertion:
    """Theorem 3.2 on `middle`'s insertion, from the two chains' (chain, block sizes, exact speedup);
    the chain without it may carry its last level's draft policy (`formats.plan.DraftPolicy`) as a
    fourth item, which its line prints."""
    with_chain, with_blocks, with_speedup = with_plan
    without_chain, without_blocks, without_speedup, *rest = without_plan
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
        without_policy=rest[0] if rest else None,
    )


def profile_triples(profile: Profile, sampling: str = "greedy") -> tuple[tuple[str, str, str], ...]:
    """Every (upper, middle, lower) a chain of `profile` can hold: the target and the models
    faster than it (T(1) averaged over the profiled contexts, as `planner.search` orders a
    chain), costliest first, with the three pairs profiled under `sampling`; in the order of
    `itertools.combinations` over the models sorted by cost. A rule drafter (`ngram-simple`) is
    planned only directly under the target, so it is never the lower model of a triple."""
    def step(name: str) -> float:
        return curve_from_profile(profile.model(name))(1)

    target = step(profile.target)
    rules = ngram_simple_sizes(profile)
    names = [profile.target] + [name for name in profile.model_names()
                                if name != profile.target and name not in rules and step(name) < target]
    names.sort(key=lambda name: -step(name))

    def profiled(verifier: str, drafter: str) -> bool:
        pair = profile.pair(verifier, drafter)
        return pair is not None and sampling in pair.sampling

    return tuple(
        (upper, middle, lower)
        for upper, middle, lower in itertools.combinations(names, 3)
        if profiled(upper, lower) and profiled(upper, middle) and profiled(middle, lower)
    )


def triple_chains(target: str, triple: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The chains, topped by `target`, that compare a triple's insertion: (with, without).
    An upper model that is the target gives the triple itself and (upper, lower); any other
    sits under the target: (target, upper, middle, lower) and (target, upper, lower)."""
    upper, middle, lower = triple
    head = (upper,) if upper == target else (target, upper)
    return head + (middle, lower), head + (lower,)
