"""Building a plan from the planner's `Recommendation` (plan.json itself, its types and its
entry points are `formats.plan`): the loop overhead and timing warnings the profile records,
the bootstrap intervals of every ranked chain; `formats.plan.write_plan` writes it atomically.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from polyplan.planner.exact.overhead import profile_overhead
from polyplan.planner.exact.physical_limit import limit_interval
from polyplan.planner.exact.runs import at_length
from polyplan.planner.intervals.prediction_interval import DEFAULT_RESAMPLES, PredictionIntervals, prediction_intervals
from polyplan.planner.search import ChainPlan, Recommendation, SearchSettings, rank_chains
from polyplan.planner.intervals.timing_health import timing_warnings
from polyplan.formats.plan import (
    CandidatesRecord, ChainSpeedRecord, ConditionRecord, ExactRecord, InsertionVerdict, IntervalsRecord, LimitRecord, PaperRecord,
    PlanFile, PlannedChain, ProfileRecord, SearchRecord, TripleRecord, write_plan,
)
from polyplan.planner.paper.insertion_triples import TripleInsertion
from polyplan.planner.exact.physical_limit import PhysicalLimit
from polyplan.formats.profile import SCHEMA_VERSION, Profile, encode_profile

def _planned(plan: ChainPlan, intervals: PredictionIntervals | None, workload: PredictionIntervals | None = None) -> PlannedChain:
    """A ranked chain as the plan records it."""
    exact, paper = plan.exact, plan.paper
    found = None if intervals is None else intervals.of(plan.chain)
    mean = None if workload is None else workload.of(plan.chain)
    return PlannedChain(
        chain=plan.chain,
        block_sizes=plan.block_sizes,
        verify_widths=tuple(plan.verify_widths),
        exact=ExactRecord(
            speedup=exact.speedup,
            cost_per_token_s=exact.cost_per_token,
            forwards_per_token=tuple(exact.forwards_per_token),
            time_per_token_s=tuple(exact.time_per_token),
            tokens_per_verification=tuple(exact.tokens_per_verification),
            drafted_per_verification=tuple(exact.drafted_per_verification),
            wasted_per_verification=tuple(exact.wasted_per_verification),
            acceptances=tuple(plan.acceptances),
            overhead_per_token_s=exact.overhead_per_token,
            interval=None if found is None else (found.speedup.low, found.speedup.high),
            workload_interval=None if mean is None else (mean.speedup.low, mean.speedup.high),
        ),
        paper=PaperRecord(
            speedup=paper.speedup,
            time_per_token_s=paper.time_per_token,
            phi_per_token=tuple(paper.phi_per_token),
            mean_lengths=tuple(paper.mean_lengths),
            length_sources=tuple(paper.length_sources),
            alpha_scale=paper.alpha_scale,
        ),
        insertion_verdicts=tuple(InsertionVerdict(model, verdict) for model, verdict in plan.insertion_verdicts),
        draft_policy=plan.draft_policy,
    )


def _limit(limit: PhysicalLimit) -> LimitRecord:
    interval = None if limit.interval is None else (limit.interval.low, limit.interval.high)
    return LimitRecord(limit.speedup, limit.block_size, limit.measured_block_size, limit.speedups, interval)


def _triple(triple: TripleInsertion) -> TripleRecord:
    analysis = triple.analysis
    return TripleRecord(
        triple.upper, triple.middle, triple.lower,
        ChainSpeedRecord(triple.with_chain, triple.with_blocks, triple.with_speedup),
        ChainSpeedRecord(triple.without_chain, triple.without_blocks, triple.without_speedup),
        analysis.condition1, analysis.condition2,
        analysis.assumptions_hold, triple.theorem_guarantees_gain, float(analysis.exact_difference), triple.line(),
    )


def profile_digest(profile: Profile) -> str:
    """A digest of everything a profile holds (its canonical JSON), recorded in the plan so
    that `planner.plan_check` can tell an edited plan from a profile measured again since."""
    import hashlib

    text = json.dumps(encode_profile(profile), sort_keys=True, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_of(
    result: Recommendation,
    *,
    profile_path: str | None = None,
    candidates: dict[str, Any] | None = None,
    profile_digest: str | None = None,
) -> PlanFile:
    """The plan of a ranking (`formats.plan` writes and reads it); `candidates` ({"path", "yaml",
    "device"}) records the models.yaml the profile was made from, for `validate` to load them."""
    best = result.best
    intervals = result.intervals
    return PlanFile(
        target=result.target,
        sampling=result.sampling,
        alternatives=tuple(_planned(plan, intervals, result.workload) for plan in result.ranked),
        device=result.device,
        processor=result.processor,
        profiled_fingerprints=dict(result.fingerprints),
        profile=ProfileRecord(profile_path, SCHEMA_VERSION, profile_digest),
        candidates=None if candidates is None else CandidatesRecord(
            candidates.get("path"), candidates.get("yaml"), candidates.get("device")
        ),
        loop_overhead=result.overhead,
        switch_costs=dict(result.switch_costs),
        search=SearchRecord(result.max_levels, result.k_max, best.search, result.context_length, result.acceptance_model),
        warnings=tuple(result.warnings),
        insertions=tuple(note.line for note in result.insertions),
        prediction_intervals=None if intervals is None else IntervalsRecord(
            intervals.level, intervals.resamples, intervals.seed, intervals.latency_source, intervals.acceptance_source,
            tuple(item.chain for item in intervals.tied_with_best()), intervals.ranking_line(), intervals.widened,
            intervals.prompt_stretch,
        ),
        physical_limit=None if result.limit is None else _limit(result.limit),
        insertion_triples=tuple(_triple(triple) for triple in result.insertion_triples),
    )


@dataclasses.dataclass(frozen=True)
class Planned:
    """A recommendation and the plan made of it once: what plan.json holds (and `recommend
    --json` prints), so that a run passes the plan on instead of reading its file back."""

    recommendation: Recommendation
    plan: PlanFile


def plan_from_profile(profile: Profile, out: str | os.PathLike[str] | None, **options: Any) -> Recommendation:
    """`planned_from_profile`'s recommendation (for callers that need only the ranking)."""
    return planned_from_profile(profile, out, **options).recommendation


def planned_from_profile(
    profile: Profile,
    out: str | os.PathLike[str] | None,
    *,
    profile_path: str | None,
    candidates: dict[str, Any] | None = None,
    sampling: str = "greedy",
    resamples: int = DEFAULT_RESAMPLES,
    drafters: tuple[str, ...] | None = None,
    new_tokens: int | None = None,
    **search_options: Any,
) -> Planned:
    """`rank_chains` with the loop overhead the profile records, the bootstrap intervals of every
    ranked chain (`resamples` replicates; 0: none) and the timing warnings, and its plan, written to
    `out` (None: not written). `drafters`: the models a chain may use besides the target (None:
    every profiled one). `new_tokens`: the answer length the plan is for, acceptance read over the
    first `new_tokens` tokens of each continuation (`planner.exact.runs.at_length`; None: all).
    `search_options`: the other fields of `planner.search.SearchSettings` (max_levels, k_max, seed, …).
    """
    digest = profile_digest(profile)
    if new_tokens is not None:
        profile = at_length(profile, new_tokens)
    overhead = profile_overhead(profile, sampling)
    settings = SearchSettings(sampling=sampling, overhead=overhead, candidates=drafters, **search_options)
    result = rank_chains(profile, settings)
    intervals, workload, limit = None, None, result.limit
    if resamples:
        seed = settings.seed
        intervals, workload = (prediction_intervals(
            profile, [(plan.chain, plan.block_sizes, plan.exact_speedup, plan.draft_policy) for plan in result.ranked], settings,
            resamples=resamples, seed=seed, new_set=new_set,
        ) for new_set in (True, False))
        if limit is not None:
            limit = dataclasses.replace(limit, interval=limit_interval(
                profile, limit, context_length=result.context_length, overhead=overhead, resamples=resamples, seed=seed,
            ))
    result = dataclasses.replace(result, intervals=intervals, workload=workload, limit=limit, warnings=timing_warnings(profile))
    plan = plan_of(result, profile_path=profile_path, candidates=candidates, profile_digest=digest)
    if new_tokens is not None:
        plan = dataclasses.replace(plan, search=dataclasses.replace(plan.search, new_tokens=new_tokens))
    if out is not None:
        write_plan(plan, out)
    return Planned(result, plan)
