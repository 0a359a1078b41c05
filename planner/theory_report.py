"""The theory report: the paper's formulas and the exact model side by side on one profile.

Lemma 3.1's ideal time for the chain (target, cheapest drafter) and each three-model chain with an
intermediate, Theorem 3.2's verdict on each insertion, the exact model's speedups and the paper's
errata evaluated numerically; on the paper's Table 1 (the shipped example) it reproduces the
paper's reasoning. Beside Theorem 3.2 it states each pair's bound before measurement
(`planner.exact.pair_bound`: the best the drafter could give with every draft accepted, from the
latency curves alone) and, for a pair under the target, the acceptance it needs to reach the
search's leader. K is the block size of the pair's first decoded μ, else 4, and α = K
(`planner.paper.paper_model`). A profile with no drafter faster than the target has no chain to
compare: the report says so in its `note` and keeps the times, the errata and the ranking.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from polyplan.planner.paper.capped_geometric import (
    capped_geometric_mean,
    capped_geometric_variance,
    paper_a2_variance,
    paper_eq3_mean,
    paper_eq3_mean_literal,
    paper_eq4_relative_variability,
    relative_variability,
)
from polyplan.planner.paper.insertion import InsertionAnalysis, analyze_insertion
from polyplan.planner.exact.latency import curve_from_profile
from polyplan.planner.exact.cost_model import ChainSettings
from polyplan.planner.exact.pair_bound import PairBound, pair_bound, required_acceptance_at
from polyplan.planner.search import ChainPlan, Recommendation, SearchSettings, evaluate_chain, rank_chains
from polyplan.formats.profile import Profile


@dataclass(frozen=True)
class Erratum:
    """One place where the paper as printed and the exact value differ."""

    name: str
    printed: float  # NaN where the printed formula is undefined
    exact: float
    note: str


@dataclass(frozen=True)
class InsertionReport:
    """Theorem 3.2 for inserting `model` between the target and the cheapest drafter."""

    model: str
    with_alpha: InsertionAnalysis  # α = K: verdict from the exact eq. 2 − eq. 1
    theorem_only: InsertionAnalysis  # no α: verdict from the printed conditions


@dataclass(frozen=True)
class BoundReport:
    """One pair's bound before measurement, and what acceptance would reach the leader."""

    bound: PairBound
    leader: ChainPlan | None  # the search's best chain, for a pair under the target (None: an inner pair)
    acceptance: float | None  # the least i.i.d. α reaching the leader's speedup (None: none < 1 does, or no leader)
    block_size: int | None  # the K it is reached at

    def text(self) -> str:
        """The bound, then the acceptance the leader asks for (or why there is none)."""
        line = self.bound.text()
        if self.leader is None:
            return f"{line}; an inner pair: its speedup is over {self.bound.verifier} alone"
        leader = f"the leader ({self.leader.exact_speedup:.3f}x)"
        if self.acceptance is None:
            return f"{line}; no alpha reaches {leader}"
        return f"{line}; {leader} needs alpha >= {self.acceptance:.3f} at K = {self.block_size}"


@dataclass(frozen=True)
class TheoryReport:
    """Everything `polyplan theory report` prints."""

    source: str
    sampling: str
    block_size: int
    times: tuple[tuple[str, float], ...]  # (model, T(1) seconds), by cost
    two_model: ChainPlan | None  # None: no drafter faster than the target (see `note`)
    three_model: tuple[ChainPlan, ...]
    insertions: tuple[InsertionReport, ...]
    errata: tuple[Erratum, ...]
    search: Recommendation  # the exact model's best chains over block sizes 1 … 8
    note: str | None = None  # why a part of the report is empty
    bounds: tuple[BoundReport, ...] = ()  # each pair's bound before measurement: under the target, then the inner pairs


def _report_block_size(profile: Profile, sampling: str, verifier: str, drafter: str) -> int:
    stats = profile.stats(verifier, drafter, sampling)
    return stats.decoded[0].k if stats.decoded else 4


def theory_report(profile: Profile, *, source: str = "profile", sampling: str = "greedy") -> TheoryReport:
    """Build the theory report for `profile` (see the module docstring)."""
    step = {model.name: curve_from_profile(model)(1) for model in profile.models}
    target = profile.target
    drafters = sorted((name for name in step if name != target and step[name] < step[target]), key=lambda n: -step[n])
    if not drafters:
        return TheoryReport(
            source=source, sampling=sampling, block_size=4, times=((target, step[target]),), two_model=None, three_model=(),
            insertions=(), errata=_errata(None, 4, []),
            search=rank_chains(profile, SearchSettings(max_levels=1, sampling=sampling)),
            note=(f"no drafter is faster than the target {target!r} (T(1) of every model: "
                  + ", ".join(f"{name} {seconds * 1e3:.4g} ms" for name, seconds in step.items())
                  + "): Lemma 3.1 and Theorem 3.2 have no chain to compare; the target alone is the plan"),
        )
    cheapest = drafters[-1]
    k = _report_block_size(profile, sampling, target, cheapest)
    reading = ChainSettings(sampling=sampling)
    two = evaluate_chain(profile, (target, cheapest), (k,), reading)
    threes = tuple(evaluate_chain(profile, (target, mid, cheapest), (k, k), reading) for mid in drafters[:-1])
    insertions = []
    for plan in threes:
        arguments = dict(
            t1=step[target],
            t2=step[cheapest],
            t2_new=step[plan.chain[1]],
            l1=two.paper.mean_lengths[0],
            l1_new=plan.paper.mean_lengths[0],
            l2_new=plan.paper.mean_lengths[1],
        )
        insertions.append(
            InsertionReport(
                model=plan.chain[1],
                with_alpha=analyze_insertion(**arguments, alpha_scale=float(k)),
                theorem_only=analyze_insertion(**arguments),
            )
        )
    search = rank_chains(profile, SearchSettings(max_levels=min(4, len(drafters) + 1), sampling=sampling))
    return TheoryReport(
        source=source,
        sampling=sampling,
        block_size=k,
        times=tuple((name, step[name]) for name in [target] + drafters),
        two_model=two,
        three_model=threes,
        insertions=tuple(insertions),
        errata=_errata(two, k, insertions),
        search=search,
        bounds=_bounds(profile, search, [(target, name) for name in drafters] + [plan.chain[1:] for plan in threes], reading),
    )


def _bounds(profile: Profile, search: Recommendation, pairs: list[tuple[str, str]], reading: ChainSettings) -> tuple[BoundReport, ...]:
    """Each pair's bound, priced as the report's search prices chains (no loop overhead, its k_max);
    a pair under the target with the acceptance that reaches the search's leader."""
    reports = []
    for verifier, drafter in pairs:
        bound = pair_bound(profile, verifier, drafter, k_max=search.k_max, settings=reading)
        leader = search.best if verifier == profile.target else None
        acceptance, block = (None, None) if leader is None else required_acceptance_at(bound, leader.exact_speedup)
        reports.append(BoundReport(bound, leader, acceptance, block))
    return tuple(reports)


def _errata(two: ChainPlan | None, k: int, insertions: list[InsertionReport]) -> tuple[Erratum, ...]:
    """The printed formulas against the exact ones: Appendix A.2's variance always, eq. 3 and
    eq. 4 at the two-model chain's acceptance and the Theorem 3.2 bounds when there is a chain."""
    rows = [
        Erratum(
            "A.2 variance, p = 0.3, n = 2",
            paper_a2_variance(0.3, 2),
            capped_geometric_variance(0.7, 1),
            "the printed Var(N) is negative; the true variance of N (capped at n = 2 trials) is 0.21",
        ),
        Erratum(
            "A.2 variance, p = 0.3, n = 3",
            paper_a2_variance(0.3, 3),
            capped_geometric_variance(0.7, 2),
            "negative again; the true variance is 0.7539",
        ),
    ]
    if two is None:
        return tuple(rows)
    acceptance = two.acceptances[0]
    rows.append(
        Erratum(
            f"eq. 3 with alpha read as the failure probability (acceptance {acceptance:.4g}, K = {k})",
            paper_eq3_mean_literal(acceptance, k),
            capped_geometric_mean(acceptance, k),
            "eq. 3 is the token count only when alpha is the ACCEPTANCE rate (Leviathan et al.); "
            f"with it, eq. 3 gives {paper_eq3_mean(acceptance, k):.4g}",
        )
    )
    printed = paper_eq4_relative_variability(acceptance, k)
    rows.append(
        Erratum(
            f"eq. 4 sigma/mu (alpha = {acceptance:.4g}, n = K = {k})",
            printed,
            relative_variability(acceptance, k),
            "the printed radicand is negative, so eq. 4 is undefined"
            if math.isnan(printed)
            else "eq. 4 uses the wrong variance and divides by (1 - alpha^n) instead of (1 - alpha^(n+1))",
        )
    )
    for item in insertions:
        analysis = item.with_alpha
        rows.append(
            Erratum(
                f"Theorem 3.2 bound for {item.model}: ceiling replaced by 2 (real ceiling {analysis.ceiling})",
                analysis.paper_bound_difference,
                analysis.exact_difference,
                "eq. 2 - eq. 1 in seconds per token: the proof's bound vs the exact value; "
                "equal when the ceiling is 2, the bound is only sufficient otherwise",
            )
        )
    return tuple(rows)
