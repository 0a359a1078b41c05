"""A plan for an answer length (`recommend --new-tokens`): acceptance read over the first N
tokens of each profiled continuation (`planner.exact.runs.at_length`), recorded in the plan,
and validate's default length and note (`cli.commands.validate`)."""

from __future__ import annotations

import dataclasses

import pytest

from polyplan.cli.commands.validate import _answer_length
from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import encode_plan, read_plan
from polyplan.formats.profile import (AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats,
                                      TargetStream)
from polyplan.planner.exact.runs import at_length
from polyplan.planner.plan_builder import planned_from_profile

PROMPTS, LENGTH = 8, 64
# the drafter agrees on 1 of 2 positions over the first half of each answer, on every one after
AGREEMENT = ("10" * (LENGTH // 4) + "1" * (LENGTH // 2),) * PROMPTS


def _profile() -> Profile:
    target = ModelProfile("target", "fp-t", tuple(LatencyPoint(64, k, 0.1 * (1 + 0.05 * (k - 1))) for k in (1, 2, 4, 8)))
    draft = ModelProfile("draft", "fp-d", tuple(LatencyPoint(64, k, 0.01) for k in (1, 2, 4, 8)))
    profile = Profile(target="target", device="synthetic", models=(target, draft), pairs=())
    profile = profile.with_stats("target", "draft", "greedy", SamplingStats(alpha=0.75, engine_alpha=0.75))
    streams = tuple(TargetStream(4, (1, 2, 3, 4) + tuple(range(10, 10 + LENGTH))) for _ in range(PROMPTS))
    runs = AgreementRuns((PairAgreement("target", "draft", AGREEMENT, ("80" * LENGTH,) * PROMPTS, ("c0" * LENGTH,) * PROMPTS),),
                         new_tokens=LENGTH, streams=streams)
    return dataclasses.replace(profile, acceptance_runs={"greedy": runs})


def test_the_profile_is_read_over_the_first_n_tokens_of_each_answer():
    profile = _profile()
    cut = at_length(profile, LENGTH // 2)
    runs = cut.acceptance_runs["greedy"]
    assert runs.new_tokens == LENGTH // 2 and all(len(text) == LENGTH // 2 for text in runs.pairs[0].agreement)
    assert all(len(text) == LENGTH for text in runs.pairs[0].confidence)  # two hex digits a position
    assert all(len(text) == LENGTH for text in runs.pairs[0].confidence_top10)  # and llama-server's 10-best ones alike
    assert all(len(stream.ids) == 4 + LENGTH // 2 for stream in runs.streams)
    assert cut.stats("target", "draft", "greedy").alpha == pytest.approx(0.5)  # α: the agreement over those tokens
    assert at_length(profile, LENGTH) == profile and at_length(profile, 4 * LENGTH) == profile  # control: nothing to cut
    with pytest.raises(PolyplanError, match="new_tokens: must be an integer >= 1"):
        at_length(profile, 0)


def test_a_plan_for_short_answers_predicts_what_their_acceptance_gives_and_says_so(tmp_path):
    whole = planned_from_profile(_profile(), tmp_path / "whole.json", profile_path="p.json", resamples=20, k_max=4)
    short = planned_from_profile(_profile(), tmp_path / "short.json", profile_path="p.json", resamples=20, k_max=4,
                                 new_tokens=LENGTH // 2)
    best = lambda planned: next(p for p in planned.recommendation.ranked if p.chain == ("target", "draft"))  # noqa: E731
    assert best(short).exact_speedup < best(whole).exact_speedup  # the first half agrees less
    assert read_plan(tmp_path / "short.json").search.new_tokens == LENGTH // 2
    assert read_plan(tmp_path / "whole.json").search.new_tokens is None
    assert "new_tokens" not in encode_plan(read_plan(tmp_path / "whole.json"))["search"]  # plans without it are written as before


def test_validate_decodes_the_plans_length_unless_told_and_says_when_it_differs(tmp_path, capsys):
    planned_from_profile(_profile(), tmp_path / "short.json", profile_path="p.json", resamples=0, k_max=4, new_tokens=32)
    planned_from_profile(_profile(), tmp_path / "whole.json", profile_path="p.json", resamples=0, k_max=4)
    assert _answer_length(tmp_path / "short.json", None) == 32
    assert _answer_length(tmp_path / "whole.json", None) == 128  # a plan for no particular length: validate's default
    assert capsys.readouterr().err == ""
    assert _answer_length(tmp_path / "short.json", 64) == 64
    assert "read acceptance over 32-token answers and these are 64 tokens" in capsys.readouterr().err
    assert _answer_length(tmp_path / "whole.json", 64) == 64 and capsys.readouterr().err == ""  # control: nothing to compare
