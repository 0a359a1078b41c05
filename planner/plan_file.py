"""Building plan.json from the planner's `Recommendation` (the format itself, its types and its
reader are `formats.plan`): the loop overhead and timing warnings the profile records, the
bootstrap intervals of every ranked chain, written atomically by `write_plan`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from polyplan.formats.atomic import write_text_atomically
from polyplan.planner.overhead import profile_overhead
from polyplan.planner.prediction_interval import DEFAULT_RESAMPLES, PredictionIntervals, prediction_intervals
from polyplan.planner.search import ChainPlan, Recommendation, recommend
from polyplan.planner.timing_health import timing_warnings
from polyplan.formats.plan import PLAN_VERSION
from polyplan.formats.profile import SCHEMA_VERSION, Profile

def _exact_json(plan: ChainPlan, intervals: PredictionIntervals | None = None) -> dict[str, Any]:
    exact = plan.exact
    found = None if intervals is None else intervals.of(plan.chain)
    interval = None if found is None else {"interval": [found.speedup.low, found.speedup.high]}
    return {
        "speedup": exact.speedup,
        "cost_per_token_s": exact.cost_per_token,
        "forwards_per_token": list(exact.forwards_per_token),
        "time_per_token_s": list(exact.time_per_token),
        "tokens_per_verification": list(exact.tokens_per_verification),
        "drafted_per_verification": list(exact.drafted_per_verification),
        "wasted_per_verification": list(exact.wasted_per_verification),
        "acceptances": list(plan.acceptances),
        "overhead_per_token_s": exact.overhead_per_token,
        **(interval or {}),
    }


def _paper_json(plan: ChainPlan) -> dict[str, Any]:
    paper = plan.paper
    return {
        "speedup": paper.speedup,
        "time_per_token_s": paper.time_per_token,
        "phi_per_token": list(paper.phi_per_token),
        "mean_lengths": list(paper.mean_lengths),
        "length_sources": list(paper.length_sources),
        "alpha_scale": paper.alpha_scale,
    }


def _summary(plan: ChainPlan, intervals: PredictionIntervals | None) -> dict[str, Any]:
    return {
        "chain": list(plan.chain),
        "block_sizes": list(plan.block_sizes),
        "exact_speedup": plan.exact_speedup,
        "paper_speedup": plan.paper_speedup,
        "acceptances": list(plan.acceptances),
        "exact": _exact_json(plan, intervals),
        "paper": _paper_json(plan),
        "theorem_3_2": [{"model": model, "verdict": verdict} for model, verdict in plan.insertion_verdicts],
        "verify_widths": [widths.to_json() for widths in plan.verify_widths],
    }


def profile_digest(profile: Profile) -> str:
    """A digest of everything a profile holds (its canonical JSON), recorded in the plan so
    that `planner.plan_check` can tell an edited plan from a profile measured again since."""
    import hashlib

    text = json.dumps(profile.to_json_dict(), sort_keys=True, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_to_json_dict(
    result: Recommendation,
    *,
    profile_path: str | None = None,
    candidates: dict[str, Any] | None = None,
    profile_digest: str | None = None,
) -> dict[str, Any]:
    """The plan.json object for a recommendation.

    `candidates` ({"path": ..., "yaml": ...}) records the models.yaml the profile was made
    from, so that `polyplan validate` can load the same models later.
    """
    best = result.best
    prints = dict(result.fingerprints)
    return {
        "plan_version": PLAN_VERSION,
        "target": result.target,
        "device": result.device,
        "sampling": result.sampling,
        "chain": list(best.chain),
        "block_sizes": list(best.block_sizes),
        "verify_widths": [widths.to_json() for widths in best.verify_widths],
        "fingerprints": dict(prints),
        "profile": {"path": profile_path, "schema_version": SCHEMA_VERSION, **({"digest": profile_digest} if profile_digest else {})},
        "candidates": candidates,
        "loop_overhead": None if result.overhead is None else result.overhead.to_json_dict(),
        "switch_costs": {name: list(cost) for name, cost in result.switch_costs},
        "predicted": _exact_json(best, result.intervals),
        "paper": _paper_json(best),
        "alternatives": [_summary(plan, result.intervals) for plan in result.ranked],
        "insertions": [note.line for note in result.insertions],
        "prediction_intervals": None if result.intervals is None else _intervals_json(result.intervals),
        "warnings": list(result.warnings),
        "search": {
            "max_levels": result.max_levels, "k_max": result.k_max, "method": best.search,
            "context_length": result.context_length, "acceptance_model": result.acceptance_model,
        },
    }


def _intervals_json(intervals: PredictionIntervals) -> dict[str, Any]:
    return {
        "level": intervals.level,
        "resamples": intervals.resamples,
        "seed": intervals.seed,
        "latency_source": intervals.latency_source,
        "acceptance_source": intervals.acceptance_source,
        "tied_with_best": [list(item.chain) for item in intervals.tied_with_best()],
        "ranking": intervals.ranking_line(),
    }


def write_plan(
    result: Recommendation,
    path: str | os.PathLike[str],
    *,
    profile_path: str | None = None,
    candidates: dict[str, Any] | None = None,
    profile_digest: str | None = None,
) -> None:
    """Write plan.json atomically (temporary file in the same folder, then os.replace)."""
    path = Path(path)
    payload = plan_to_json_dict(result, profile_path=profile_path, candidates=candidates, profile_digest=profile_digest)
    write_text_atomically(path, json.dumps(payload, indent=2, allow_nan=False) + "\n")


def plan_from_profile(
    profile: Profile,
    out: str | os.PathLike[str] | None,
    *,
    profile_path: str | None,
    candidates: dict[str, Any] | None = None,
    sampling: str = "greedy",
    resamples: int = DEFAULT_RESAMPLES,
    drafters: tuple[str, ...] | None = None,
    **search_options: Any,
) -> Recommendation:
    """`recommend` with the loop overhead the profile records (if any), the bootstrap
    intervals of every ranked chain's exact speedup (`resamples` replicates; 0: none) and the
    profile's timing warnings, written to `out`.

    `drafters`: the models a chain may use besides the target (default: every profiled one; a
    profile keeps entries of models outside the current candidates, which cannot be run).
    `search_options` go to `planner.search.recommend` (max_levels, k_max, block_sizes, seed, …).
    """
    overhead = profile_overhead(profile, sampling)
    result = recommend(profile, sampling=sampling, overhead=overhead, candidates=drafters, **search_options)
    intervals = None
    if resamples:
        intervals = prediction_intervals(
            profile, [(plan.chain, plan.block_sizes, plan.exact_speedup) for plan in result.ranked], sampling=sampling,
            context_length=result.context_length, overhead=overhead, acceptance_model=result.acceptance_model,
            resamples=resamples, seed=int(search_options.get("seed", 0)),
        )
    result = dataclasses.replace(result, intervals=intervals, warnings=timing_warnings(profile))
    if out is not None:
        write_plan(result, out, profile_path=profile_path, candidates=candidates, profile_digest=profile_digest(profile))
    return result
