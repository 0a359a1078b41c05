"""polyplan's own ngram-simple drafter in the planner: its rounds replayed on the target's streams
(planner.exact.ngram_replay.chain_rounds / draft_rounds), read by the exact model in place of α
(planner.exact.cost_model), searched and explained by recommend, and resampled by the intervals."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import LoopOverhead
from polyplan.formats.profile import (AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats,
                                      TargetStream)
from polyplan.formats.profile import decode_profile, encode_profile
from polyplan.planner.exact.cost_model import predict_chain
from polyplan.planner.exact.draft_rounds import DraftRounds
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.planner.exact.ngram_replay import NGramSimpleIndex, chain_rounds, draft_rounds, ngram_simple_draft
from polyplan.planner.intervals.prediction_interval import prediction_intervals
from polyplan.planner.search import SearchSettings, evaluate_chain, rank_chains

REPEATING = TargetStream(8, (1, 2, 3, 4, 5, 6, 7, 4) + (5, 6, 7, 4) * 15)  # a target that loops
FRESH = TargetStream(4, tuple(range(100, 164)))  # never repeats: never drafts


def test_the_index_drafts_what_the_reference_scan_drafts():
    """`NGramSimpleIndex` (the decoder's and the replay's fast path) against the literal mirror
    of llama.cpp's scan, on random histories over a small alphabet, growing and truncated."""
    rng = random.Random(0)
    for _ in range(400):
        size_n, size_m = rng.randint(1, 4), rng.randint(1, 8)
        tokens = [rng.randint(0, 3) for _ in range(rng.randint(1, 60))]
        index = NGramSimpleIndex(size_n)
        for token in tokens:
            index.append(token)
        assert index.draft(size_m) == ngram_simple_draft(tokens[:-1], tokens[-1], size_n, size_m)
        keep = rng.randint(1, len(tokens))
        index.truncate(keep)
        assert index.draft(size_m) == ngram_simple_draft(tokens[:keep - 1], tokens[keep - 1], size_n, size_m)
    with pytest.raises(PolyplanError, match="size_n: must be an integer >= 1"):
        NGramSimpleIndex(0)


def test_chain_rounds_account_every_token_once_and_draft_from_the_prompt():
    rounds = chain_rounds(REPEATING, 2, 4)
    assert sum(r.accepted + 1 for r in rounds) == len(REPEATING.ids) - REPEATING.prompt_tokens  # no prefill token
    assert all(r.accepted <= r.drafted <= 4 for r in rounds)
    assert rounds[0].drafted == 0  # a prompt of 8 tokens is too short to draft from (size_n + size_m + 1 < 8)
    looping_prompt = TargetStream(12, (1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7, 4) + (5, 6, 7, 4) * 12)
    assert chain_rounds(looping_prompt, 2, 4)[0].drafted == 3  # drafted from the prompt, in the first pass
    assert all(r.drafted == 0 for r in chain_rounds(FRESH, 2, 4))
    law = draft_rounds([REPEATING, FRESH], 2, 4)
    assert law.counts.shape == (2, 5, 5) and law.rounds == len(rounds) + len(chain_rounds(FRESH, 2, 4))
    with pytest.raises(PolyplanError, match="no target streams"):
        draft_rounds([], 2, 4)


def test_the_exact_model_reads_the_rounds_as_a_ratio_of_sums():
    """Cost per token = Σ round costs / Σ tokens over the replayed rounds: a drafter call, a
    target pass over the drafts and the pending token, the loop's round and step costs."""
    target = LatencyCurve((1, 2, 4, 8), (0.010, 0.011, 0.013, 0.017))
    drafter = LatencyCurve((1,), (0.0002,))
    overhead = LoopOverhead(per_step_s=0.0004, per_round_s=0.0007)
    law = draft_rounds([REPEATING, FRESH], 2, 6)
    rounds = chain_rounds(REPEATING, 2, 6) + chain_rounds(FRESH, 2, 6)
    seconds = sum(target(r.drafted + 1) + 0.0002 + 0.0004 + 0.0007 for r in rounds)
    tokens = sum(r.accepted + 1 for r in rounds)
    prediction = predict_chain([law], [target, drafter], [6], overhead)
    assert prediction.cost_per_token == pytest.approx(seconds / tokens, rel=1e-12)
    assert prediction.speedup == pytest.approx((0.010 + 0.0004) / (seconds / tokens), rel=1e-12)
    assert prediction.tokens_per_verification[0] == pytest.approx(tokens / len(rounds))
    assert prediction.drafted_per_verification[0] == pytest.approx(sum(r.drafted for r in rounds) / len(rounds))
    assert prediction.forwards_per_token == pytest.approx((len(rounds) / tokens, len(rounds) / tokens))
    # a rule drafter's rounds only at the last level (they may draft past the level's K: an
    # adaptive cap starts there and grows, `formats.plan.DraftPolicy`)
    assert predict_chain([law], [target, drafter], [4]).cost_per_token > 0
    with pytest.raises(PolyplanError, match="last level only"):
        predict_chain([law, 0.5], [target, drafter, drafter], [6, 2])


def test_resampled_rounds_weight_prompts():
    law = draft_rounds([REPEATING, FRESH], 2, 4)
    only_fresh = law.resampled(np.array([0.0, 3.0]))
    assert only_fresh.drafted_pmf()[0] == pytest.approx(1.0)
    assert law.resampled(np.zeros(2)) is law  # a draw with no rounds keeps the full sample
    with pytest.raises(PolyplanError, match="accepted more tokens than it drafted"):
        DraftRounds(np.array([[[0.0, 1.0], [0.0, 0.0]]]))


def synthetic_profile(streams=(REPEATING, FRESH)) -> Profile:
    models = (
        ModelProfile("big", "fp-b", tuple(LatencyPoint(64, k, 0.010 * (1 + 0.05 * (k - 1))) for k in (1, 2, 4, 8, 16))),
        ModelProfile("small", "fp-s", tuple(LatencyPoint(64, k, 0.004 * (1 + 0.2 * (k - 1))) for k in (1, 2, 4, 8, 16))),
        ModelProfile("lookup", "fp-l", (LatencyPoint(64, 1, 2e-5),), ngram_simple=2),
    )
    profile = Profile(target="big", device="cpu x (1 thread)", models=models, pairs=())
    for verifier, drafter, alpha in (("big", "small", 0.6), ("big", "lookup", 0.5), ("small", "lookup", 0.5)):
        for mode in ("greedy", "t1.0"):
            profile = profile.with_stats(verifier, drafter, mode, SamplingStats(alpha=alpha))
    if streams:
        profile = dataclasses.replace(profile, acceptance_runs={
            "greedy": AgreementRuns((PairAgreement("big", "small", ("1101" * 10,) * len(streams)),), streams=tuple(streams))})
    return profile


def test_recommend_plans_the_rule_drafter_directly_under_the_target_only():
    profile = synthetic_profile()
    result = rank_chains(profile)
    chains = {plan.chain for plan in result.ranked}
    assert chains == {("big",), ("big", "small"), ("big", "lookup")}  # big > small > lookup is not predictable
    lookup = next(plan for plan in result.ranked if plan.chain == ("big", "lookup"))
    curve = LatencyCurve((1, 2, 4, 8, 16), tuple(0.010 * (1 + 0.05 * (k - 1)) for k in (1, 2, 4, 8, 16)))
    by_hand = predict_chain([draft_rounds(profile.acceptance_runs["greedy"].streams, 2, lookup.block_sizes[0])],
                            [curve, LatencyCurve((1,), (2e-5,))], lookup.block_sizes)
    assert lookup.exact_speedup == pytest.approx(by_hand.speedup)
    assert lookup.exact_speedup > 1.0
    note = next(item for item in result.insertions if item.model == "lookup")
    assert note.line.startswith("in:" if "lookup" in result.best.chain else "out:")
    with pytest.raises(PolyplanError, match="only directly under the target"):
        evaluate_chain(profile, ("big", "small", "lookup"), (4, 4))


@pytest.mark.parametrize(("sampling", "streams", "reason"), [
    ("t1.0", (REPEATING, FRESH), "at greedy only"),
    ("greedy", (), "no target streams"),
])
def test_without_greedy_streams_the_rule_drafter_is_left_out_and_the_note_says_why(sampling, streams, reason):
    profile = synthetic_profile(streams)
    result = rank_chains(profile, SearchSettings(sampling=sampling))
    assert all("lookup" not in plan.chain for plan in result.ranked)
    note = next(item for item in result.insertions if item.model == "lookup")
    assert note.line.startswith("out:") and reason in note.line


def test_the_interval_resamples_the_streams_and_holds_the_point():
    profile = synthetic_profile((REPEATING, FRESH, REPEATING, FRESH, REPEATING))
    result = rank_chains(profile)
    lookup = next(plan for plan in result.ranked if plan.chain == ("big", "lookup"))
    intervals = prediction_intervals(profile, [(lookup.chain, lookup.block_sizes, lookup.exact_speedup)], resamples=100)
    interval = intervals.chains[0].speedup
    assert interval.low < lookup.exact_speedup < interval.high  # prompts that repeat or not: a wide spread
    assert intervals.acceptance_source == "streams"


def test_the_profile_records_the_rule_drafter():
    profile = synthetic_profile()
    again = decode_profile(encode_profile(profile))
    assert again.model("lookup").ngram_simple == 2 and again.model("big").ngram_simple is None


def test_the_profiles_closing_table_reads_the_rule_drafter_as_recommend_does():
    """`polyplan profile`'s pair table: the rule drafter under the target at greedy is the replay
    (marked (r)), with recommend's K and speedup; under another verifier, or sampled, no row."""
    from polyplan.profiler.summary import pair_rows, summary_lines

    profile = synthetic_profile()
    rows = {(row.verifier, row.drafter, row.sampling): row for row in pair_rows(profile)}
    lookup = rows[("big", "lookup", "greedy")]
    planned = next(plan for plan in rank_chains(profile).ranked if plan.chain == ("big", "lookup"))
    assert lookup.mu_best_source == "replay" and lookup.best_k == planned.block_sizes[0]
    assert lookup.speedup == pytest.approx(planned.exact_speedup)
    assert ("small", "lookup", "greedy") not in rows and ("big", "lookup", "t1.0") not in rows
    assert rows[("big", "small", "greedy")].mu_best_source == "alpha"
    assert any("(r)" in line and "big <- lookup" in line for line in summary_lines(profile))
