"""Intervals of the llama.cpp export's draft-model rows (`planner.engine_export`, drawn by
`planner.intervals.prediction_interval.pair_replicates` as the plan's and the n-gram rows' are).

Checked on synthetic profiles (stored timings spread ±6 %, agreement runs of prompts that agree
0.85 or 0.35): the interval holds the point; fewer prompts give a wider one; a drafter whose
point is above 1.00x but whose interval reaches below it is not recommended ("off"), and the
same drafter measured on many prompts is (control); the confidence stop's row has one too.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from polyplan.formats.plan import DraftPolicy
from polyplan.formats.profile import AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats
from polyplan.planner.engine_export import export_plan
from polyplan.planner.llama_cpp.ranking import OFF, ReplayWorkload
from polyplan.planner.plan_builder import plan_of
from polyplan.planner.search import SearchSettings, rank_chains

SPREAD = (0.94, 0.98, 1.0, 1.02, 1.06)  # each latency point's stored timings around its median
RATES = (0.85, 0.35)  # agreement of the even and the odd prompts


def _curve(name: str, seconds) -> ModelProfile:
    return ModelProfile(name, f"fp-{name}", tuple(LatencyPoint(64, k, seconds(k), samples_s=tuple(seconds(k) * s for s in SPREAD))
                                                  for k in (1, 2, 4, 8)))


def _profile(prompts: int, draft_s: float, length: int = 64, confidences: bool = False) -> Profile:
    rng = np.random.default_rng(1)
    sequences = ["".join("1" if rng.random() < RATES[i % 2] else "0" for _ in range(length)) for i in range(prompts)]
    alpha = sum(sequence.count("1") for sequence in sequences) / (prompts * length)
    profile = Profile(target="target", device="synthetic", pairs=(),
                      models=(_curve("target", lambda k: 0.1 * (1 + 0.1 * (k - 1))), _curve("draft", lambda k: draft_s)))
    profile = profile.with_stats("target", "draft", "greedy", SamplingStats(alpha=alpha, engine_alpha=alpha))
    tops = tuple("".join("f0" if bit == "1" else "40" for bit in sequence) for sequence in sequences) if confidences else ()
    return dataclasses.replace(profile, acceptance_runs={"greedy": AgreementRuns((PairAgreement("target", "draft", tuple(sequences), tops),))})


def _export(profile: Profile, candidates, policy: DraftPolicy | None = None, workload: ReplayWorkload = ReplayWorkload()):
    plan = plan_of(rank_chains(profile, SearchSettings(max_levels=2, k_max=4, draft_policies=False)))
    if policy is not None:
        best = dataclasses.replace(plan.best, chain=("target", "draft"), block_sizes=(2,), draft_policy=policy)
        plan = dataclasses.replace(plan, alternatives=(best, *plan.alternatives[1:]))
    return export_plan(plan, profile, candidates, "llama.cpp", k_max=4, workload=workload)


def _draft_row(export, p_min: bool = False):
    return next(config for config in export.ranking if config.label.startswith("draft-simple") and ("p-min" in config.label) == p_min)


def test_a_draft_rows_interval_holds_its_point_and_widens_with_fewer_prompts(gguf_pair):
    few, many = (_draft_row(_export(_profile(prompts, 0.035), gguf_pair)) for prompts in (4, 64))
    for row in (few, many):
        assert row.interval is not None and row.interval[0] < row.speedup < row.interval[1]
        assert "no interval" not in row.note
    width = lambda row: row.interval[1] - row.interval[0]  # noqa: E731
    assert width(few) > 1.5 * width(many)


def test_the_ranking_says_off_when_a_drafters_interval_straddles_one(gguf_pair):
    export = _export(_profile(16, 0.04), gguf_pair)
    row = _draft_row(export)
    assert row.speedup > 1.0 and row.interval[0] < 1.0 < row.interval[1]
    assert export.recommended.label == OFF
    # control: the same kind of drafter, cheaper and measured on 64 prompts, clears 1.00x and is recommended
    sure = _export(_profile(64, 0.03), gguf_pair)
    assert _draft_row(sure).interval[0] > 1.0 and sure.recommended is _draft_row(sure)


def test_the_confidence_stops_row_has_an_interval_drawn_from_its_replayed_rounds(gguf_pair):
    export = _export(_profile(16, 0.035, confidences=True), gguf_pair, DraftPolicy(p_min=0.5))
    row = _draft_row(export, p_min=True)
    assert row.interval is not None and row.interval[0] <= row.speedup <= row.interval[1] and row.interval[0] < row.interval[1]


def test_a_race_on_fewer_prompts_judges_a_draft_row_by_a_wider_interval(gguf_pair):
    """The interval a race on 4 prompts is judged by, for a drafter profiled on 32: wider than for
    a new set of 32 (its second draw has 4 prompts), with the same point and workload interval;
    the confidence stop's row too."""
    profile = _profile(32, 0.035, confidences=True)
    for p_min, policy in ((False, None), (True, DraftPolicy(p_min=0.5))):
        profiled, raced = (_draft_row(_export(profile, gguf_pair, policy, ReplayWorkload(prompts=size)), p_min) for size in (None, 4))
        assert raced.speedup == profiled.speedup and raced.workload_interval == profiled.workload_interval
        assert raced.interval[1] - raced.interval[0] > 1.3 * (profiled.interval[1] - profiled.interval[0])


def test_a_raced_draft_simple_is_predicted_at_its_own_flags_defaults_filled_in(gguf_pair):
    """A race's draft-model configurations (`replay_also`): llama-server's defaults (n-max 3,
    n-min 0, p-min 0: exactly 3 tokens a round) priced as the fixed-K row at K = 3 is, and an
    n-max/p-min sweep point by its confidence stop replayed at that cap, as the plan's policy row
    at the same K and p-min is; each with intervals. Not modelled (no row): a combination with
    ngram-mod, a drafter file the export does not hold, a stop whose short drafts are discarded
    (n-min > 0)."""
    from polyplan.planner.llama_cpp.policy import draft_simple_flags

    profile = _profile(16, 0.035, confidences=True)
    base = _export(profile, gguf_pair, DraftPolicy(p_min=0.5))
    fixed, stop = _draft_row(base), _draft_row(base, p_min=True)
    source = fixed.flags[fixed.flags.index("-md") + 1]
    k_stop = int(stop.flags[stop.flags.index("--spec-draft-n-max") + 1])
    defaults = ("--spec-type", "draft-simple", "-md", source)
    sweep = ("--spec-type", "draft-simple", "-md", source, "--spec-draft-n-max", str(k_stop), "--spec-draft-p-min", "0.5")
    unmodelled = [("--spec-type", "draft-simple,ngram-mod", "-md", source), ("--spec-type", "draft-simple", "-md", "other.gguf"),
                  (*sweep, "--spec-draft-n-min", "2")]
    plan = plan_of(rank_chains(profile, SearchSettings(max_levels=2, k_max=4, draft_policies=False)))
    best = dataclasses.replace(plan.best, chain=("target", "draft"), block_sizes=(2,), draft_policy=DraftPolicy(p_min=0.5))
    plan = dataclasses.replace(plan, alternatives=(best, *plan.alternatives[1:]))
    from polyplan.planner.llama_cpp.ranking import llama_cpp_spec_flags

    three = tuple(llama_cpp_spec_flags("draft_model", 3, source))  # what the export renders for exactly 3 a round
    export = export_plan(plan, profile, gguf_pair, "llama.cpp", k_max=4, replay_also=[defaults, three, sweep, *unmodelled])
    by_flags = {config.flags: config for config in export.ranking}
    assert by_flags[defaults].speedup == pytest.approx(by_flags[three].speedup)
    assert by_flags[defaults].interval == pytest.approx(by_flags[three].interval)
    assert by_flags[sweep].speedup == pytest.approx(stop.speedup) and by_flags[sweep].interval == pytest.approx(stop.interval)
    assert by_flags[defaults].workload_interval is not None and by_flags[sweep].label == f"draft-simple draft n-max={k_stop} p-min=0.5"
    assert not any(flags in by_flags for flags in unmodelled)
    # a profile without the 10-best confidences: the sweep falls back, said once however many points it has
    plain = dataclasses.replace(profile, acceptance_runs={"greedy": dataclasses.replace(
        profile.acceptance_runs["greedy"], pairs=tuple(dataclasses.replace(p, confidence_top10=()) for p in profile.acceptance_runs["greedy"].pairs))})
    sweep2 = sweep[:5] + ("8",) + sweep[6:]
    fallback = export_plan(plan, plain, gguf_pair, "llama.cpp", k_max=4, replay_also=[sweep, sweep2]).ranking_notes
    assert sum("no 10-best ones" in note for note in fallback) == 1
    assert len(export.ranking) == len(base.ranking) + len({defaults, three, sweep} - {config.flags for config in base.ranking})
    assert draft_simple_flags(defaults) == draft_simple_flags((*defaults, "--spec-draft-n-max", "3", "--spec-draft-p-min", "0"))
    assert draft_simple_flags(("--spec-type", "ngram-mod")) is None and draft_simple_flags((*defaults, "--spec-draft-p-min", "x")) is None
