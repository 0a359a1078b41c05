"""A draft model's rounds in llama-server replayed on agreement sequences
(`planner.llama_cpp.draft_replay`), and how the simulation under load prices them: the batched
draft, and llama.cpp's split of a decode whose slots carry unequal rows (`under_load.ubatches`)."""

from __future__ import annotations

import dataclasses

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import LatencyPoint, ModelProfile, PrefillPoint, TargetStream
from polyplan.planner.llama_cpp.draft_replay import ModelRound, draft_sessions, server_rounds
from polyplan.planner.llama_cpp.server_loop import DRAFT_MODEL, ServerLoop
from polyplan.planner.llama_cpp.under_load import DraftBatch, draft_prefill_per_token_s, simulate_load, ubatches


def _linear(a: float, b: float):
    return lambda k: a + b * k


# -- the rounds

def test_a_fixed_n_max_drafts_k_and_keeps_the_draft_up_to_its_first_disagreement():
    """10 tokens: the first from the prefill; round 1 drafts 3 at position 1 (1, 1, 0: 2 kept);
    round 2 at 4 drafts 3 (all kept); round 3 at 8 may draft only 1 (the tokens left minus one)."""
    agreement = [True, True, True, False, True, True, True, True, True, True]
    rounds = server_rounds(agreement, None, 3, None, 10)
    assert rounds == (ModelRound(3, 2), ModelRound(3, 3), ModelRound(1, 1))
    assert sum(item.accepted + 1 for item in rounds) == 9  # every token after the prefill's
    assert [item.passes for item in rounds] == [3, 3, 1]


def test_a_confidence_stop_drafts_while_confident_and_pays_the_pass_that_read_the_low_one():
    """p_min 0.5 at n-max 4: at position 1 the confidences 0.9, 0.8, 0.1 stop the draft at 2 (3
    passes); at position 4 a first confidence of 0.1 drafts nothing (1 pass, one row verified)."""
    confidence = [1.0, 0.9, 0.8, 0.1, 0.1, 0.9, 0.9, 0.9]
    agreement = [True] * 8
    rounds = server_rounds(agreement, confidence, 4, 0.5, 8)
    assert rounds[0] == ModelRound(2, 2, stopped=True) and rounds[0].passes == 3
    assert rounds[1] == ModelRound(0, 0, stopped=True) and rounds[1].passes == 1
    assert rounds[2] == ModelRound(2, 2, stopped=False)  # capped by the tokens left, not stopped
    assert sum(item.accepted + 1 for item in rounds) == 7


def test_the_replay_refuses_what_it_cannot_replay():
    with pytest.raises(PolyplanError, match="n-max"):
        server_rounds([True], None, 0, None, 1)
    with pytest.raises(PolyplanError, match="confidences"):
        server_rounds([True] * 4, None, 2, 0.5, 4)
    with pytest.raises(PolyplanError, match="agreement positions"):
        server_rounds([True] * 3, None, 2, None, 5)


def test_sessions_serve_the_streams_in_each_order_and_repeat(monkeypatch):
    """Two streams, served as (1, 0) twice: the requests are each stream's rounds, in that order."""
    from polyplan.planner.llama_cpp import draft_replay

    streams = (TargetStream(2, (5, 6, 1, 2, 3, 4)), TargetStream(1, (7, 1, 2, 3)))
    sequences = ((True, True, False, True), (True, True, True))
    monkeypatch.setattr(draft_replay, "profile_runs", lambda profile, sampling: {("t", "d"): sequences})
    profile = type("P", (), {"acceptance_runs": {}})()
    (session,) = draft_sessions(profile, "t", "d", 2, None, streams, None, 2, [[1, 0]])
    assert session.stream_of == (1, 0, 1, 0)
    assert session.requests[0] == server_rounds(sequences[1], None, 2, None, 3)
    assert session.requests[1] == server_rounds(sequences[0], None, 2, None, 4)
    with pytest.raises(PolyplanError, match="agreement sequence for each"):
        draft_sessions(profile, "t", "d", 2, None, streams[:1], None, 1, [[0]])


# -- llama.cpp's split of a decode

def test_a_decode_of_unequal_slots_is_split_into_passes_of_equal_rows_per_slot():
    """llama_batch_allocr::split_equal(sequential) by hand: rows 8, 3, 1, 5 are four passes (all
    four slots 1 row; slots 0-1 2 rows; slot 0 alone 5, since slot 3 does not follow slot 1; slot 3
    alone 4); equal rows are one pass; a waiting slot splits the others; a prompt placed last
    in the batch joins the slots whose ids it follows."""
    assert ubatches([8, 3, 1, 5]) == [[(0, 1), (1, 1), (2, 1), (3, 1)], [(0, 2), (1, 2)], [(0, 5)], [(3, 4)]]
    assert ubatches([4, 4, 4, 4]) == [[(0, 4), (1, 4), (2, 4), (3, 4)]]
    assert ubatches([16, 1, 1, 1]) == [[(0, 1), (1, 1), (2, 1), (3, 1)], [(0, 15)]]
    assert ubatches([1, 0, 1, 1]) == [[(0, 1)], [(2, 1), (3, 1)]]
    assert ubatches([1, 1, 135, 1], order=[0, 1, 3, 2]) == [[(0, 1), (1, 1), (2, 1)], [(3, 1)], [(2, 134)]]
    assert ubatches([1200], n_ubatch=512) == [[(0, 512)], [(0, 512)], [(0, 176)]]
    assert sum(count for part in ubatches([8, 3, 1, 5]) for _, count in part) == 17


# -- the batched draft

LOOP = ServerLoop(per_request_s=0.0, per_round_s=0.001, per_row_s=0.0001, per_draft_round_s=0.002,
                  per_draft_pass_s=0.006, draft_reeval=0.5)
DRAFT_STEP = _linear(0.004, 0.001)  # the draft model's T_d(k)
REEVAL_STEP = _linear(0.003, 0.0005)


def test_at_one_slot_the_simulated_draft_model_round_is_the_one_request_price():
    """One slot: each iteration is T(L + 1) + `ServerLoop.round_s` of a draft model's round
    (its passes, the second decode), so the simulation at one request is the exact model's round."""
    step = _linear(0.01, 0.002)
    batch = DraftBatch(DRAFT_STEP, LOOP.per_draft_pass_s, LOOP.reeval, REEVAL_STEP)
    rounds = (ModelRound(3, 2), ModelRound(2, 0, stopped=True), ModelRound(0, 0, stopped=True))
    run = simulate_load([rounds], (0,), (4,), 1, step, LOOP, DRAFT_MODEL, draft=batch)
    expected = sum(step(item.drafted + 1) + LOOP.round_s(item.drafted, DRAFT_MODEL, item.passes, REEVAL_STEP) for item in rounds)
    assert run.union_s == pytest.approx(expected, rel=1e-12)
    assert run.tokens == (sum(item.accepted + 1 for item in rounds),)


def test_two_slots_draft_together_until_the_longer_draft_stops():
    """Slots drafting 3 and 1 (passes 3 and 1): the first pass decodes both slots' rows at once
    (T_d(2)), the next two slot 0's alone (T_d(1) each); the verified rows 4 and 2 are decoded in
    two passes by the target and by the second decode alike (2 rows of each slot, then slot 0's 2)."""
    batch = DraftBatch(DRAFT_STEP, LOOP.per_draft_pass_s, LOOP.reeval, REEVAL_STEP)
    per_pass = LOOP.per_draft_pass_s / DRAFT_STEP(1)
    drafting = per_pass * (DRAFT_STEP(2) + 2 * DRAFT_STEP(1))
    assert batch.seconds([3, 1], [4, 2]) == pytest.approx(drafting + 0.5 * (REEVAL_STEP(4) + REEVAL_STEP(2)), rel=1e-12)
    one_pass = per_pass * (DRAFT_STEP(2) + 2 * DRAFT_STEP(1)) + 0.5 * REEVAL_STEP(6)
    assert batch.seconds([3, 1], [4, 2], split=False) == pytest.approx(one_pass, rel=1e-12)
    # a slot that waits between two drafting slots splits every pass
    gap = per_pass * 2 * (2 * DRAFT_STEP(1)) + 0.5 * 2 * REEVAL_STEP(3)
    assert batch.seconds([2, 0, 2], [3, 0, 3]) == pytest.approx(gap, rel=1e-12)


def test_a_simulated_iteration_of_two_drafting_slots_by_hand():
    """Two requests of one round each, slot 0 drafting 3 (2 kept), slot 1 drafting 1 (kept), prompts
    of 2 rows: iteration 1 carries the prompts (no decode interval); iteration 2 verifies 4 + 2 rows
    in two passes, drafts as above, and pays each slot's own round; the attribution adds up."""
    step = _linear(0.01, 0.002)
    batch = DraftBatch(DRAFT_STEP, LOOP.per_draft_pass_s, LOOP.reeval, REEVAL_STEP)
    requests = [(ModelRound(3, 2),), (ModelRound(1, 1),)]
    run = simulate_load(requests, (0, 1), (2, 2), 2, step, LOOP, DRAFT_MODEL, draft=batch)
    own = LOOP.slot_share_s(3, DRAFT_MODEL, 2) + LOOP.slot_share_s(1, DRAFT_MODEL, 2)
    second = step(4) + step(2) + own + batch.seconds([3, 1], [4, 2])
    assert run.union_s == pytest.approx(second, rel=1e-12)
    assert run.decode_s == pytest.approx((second, second), rel=1e-12)
    attributed = sum(value * step(width) for (_, width), value in run.counts.items()) + sum(run.extra.values())
    assert attributed == pytest.approx(run.union_s, rel=1e-12)


def test_a_new_prompts_draft_prefill_stalls_the_slot_decoding_beside_it_by_hand():
    """Two slots, slot 0 with two requests of one round (drafting 1, kept), slot 1 one request of
    two such rounds; prompts of 5 rows; the draft model prefills 2 ms a prompt token. Iteration 1
    carries both first prompts (no decode interval); iteration 2 both slots' rounds; iteration 3
    slot 0's second prompt beside slot 1's last round: the draft model's prefill of those 5 rows
    (10 ms) is in it, so in slot 1's decode interval. At one client the prefill is in no decode
    interval, and without it (the control) the difference is exactly 10 ms."""
    step = _linear(0.01, 0.002)
    requests = [(ModelRound(1, 1),), (ModelRound(1, 1),) * 2, (ModelRound(1, 1),)]
    plain = DraftBatch(DRAFT_STEP, LOOP.per_draft_pass_s, LOOP.reeval, REEVAL_STEP)
    prefilled = dataclasses.replace(plain, prefill_per_token_s=0.002)
    runs = [simulate_load(requests, (0, 1, 2), (5, 5, 5), 2, step, LOOP, DRAFT_MODEL, draft=batch) for batch in (plain, prefilled)]
    assert runs[1].union_s - runs[0].union_s == pytest.approx(5 * 0.002, rel=1e-9)
    assert runs[1].decode_s[1] - runs[0].decode_s[1] == pytest.approx(5 * 0.002, rel=1e-9)  # slot 1 stalled
    assert runs[1].decode_s[0] == pytest.approx(runs[0].decode_s[0], rel=1e-12)  # slot 0's first request ended before
    alone = [simulate_load(requests, (0, 1, 2), (5, 5, 5), 1, step, LOOP, DRAFT_MODEL, draft=batch) for batch in (plain, prefilled)]
    assert alone[1].union_s == pytest.approx(alone[0].union_s, rel=1e-12)


def test_a_draft_models_prefill_per_token_is_its_entrys_prefill_seconds_over_tokens():
    entry = ModelProfile("draft", "fp", (LatencyPoint(128, 1, 0.01),),
                         prefill=(PrefillPoint(128, 0.5), PrefillPoint(384, 1.5)))
    assert draft_prefill_per_token_s(entry) == pytest.approx(2.0 / 512)
    assert draft_prefill_per_token_s(dataclasses.replace(entry, prefill=())) == 0.0


def test_the_one_slot_share_and_the_batched_terms_make_the_one_request_round():
    """`ServerLoop.round_s` is the slot's own share plus the passes and the second decode."""
    loop = dataclasses.replace(LOOP, slot_rounds=((2, 0.0004),))
    whole = loop.round_s(3, DRAFT_MODEL, 4, REEVAL_STEP)
    assert whole == pytest.approx(loop.slot_share_s(3, DRAFT_MODEL) + 4 * loop.per_draft_pass_s + loop.reeval * REEVAL_STEP(4))
    assert loop.slot_share_s(3, DRAFT_MODEL, 2) == pytest.approx(0.0004 + 3 * 0.0001 + 0.002)
