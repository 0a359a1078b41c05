"""Intervals of the llama.cpp export's draft-model rows (`planner.engine_rules`, drawn by
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
from polyplan.planner.engine_rules import export_plan
from polyplan.planner.llama_cpp_ranking import OFF, ReplayWorkload
from polyplan.planner.plan_file import plan_of
from polyplan.planner.search import recommend

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
    plan = plan_of(recommend(profile, max_levels=2, k_max=4, draft_policies=False))
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
