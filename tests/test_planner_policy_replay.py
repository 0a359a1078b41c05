"""Draft policies planned by replay (`planner.exact.policy_replay`, `planner.exact.ngram_replay`)
and priced by the exact model (`planner.exact.cost_model` reading a model drafter's `DraftRounds`).

Checked: the replay's rounds are the decoder's actual rounds on a tiny chain (tiny Llamas, the
agreement and confidences from the profiler's teacher-forced pass; drafted tokens read from the
target's verification widths), for an adaptive cap, a confidence stop (exact up to each round's
first disagreement, the module's stated approximation beyond) and both, and for a rule
drafter with an adaptive cap; the fixed policy walks as `planner.exact.runs` does; the cost of a
variable-length model draft equals a hand computation; the bootstrap resamples the stops too.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import perturbed_copy, tiny_llama
from wrapped_member import WrappedMember
from polyplan.decoder.chain import generate
from polyplan.decoder.hf import HFMember
from polyplan.decoder.ngram_simple import NGramSimpleMember
from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import LoopOverhead
from polyplan.formats.plan import FIXED_DRAFTS, DraftPolicy
from polyplan.formats.profile import TargetStream
from polyplan.planner.exact.cost_model import predict_chain
from polyplan.planner.exact.draft_rounds import DraftRounds
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.planner.exact.ngram_replay import chain_rounds
from polyplan.planner.exact.policy_replay import PolicyRound, model_rounds, walk
from polyplan.planner.exact.runs import run_counts
from polyplan.profiler.acceptance import teacher_forced

pytestmark = pytest.mark.usefixtures("single_thread")

PROMPT = [5, 9, 33, 7, 5, 9, 33, 7, 5]
LOOPING = [5, 9, 12, 5, 9, 12, 7, 5, 9]
NEW = 60
RECORDED = 90  # the stream is recorded longer than the run, so no round is cut by its end


class Widths(WrappedMember):
    """The target, logging how many rows each of its passes returns: m + 1 in a verification."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.rows: list[int] = []

    def forward(self, new_ids, keep_last=None):
        self.rows.append(keep_last)
        return super().forward(new_ids, keep_last=keep_last)


@pytest.fixture(scope="module")
def pair(single_thread):
    target = tiny_llama(0, layers=2)
    return target, perturbed_copy(target, 0.5, 3)


def _measured(target, drafter, prompt):
    """The target's greedy stream, the pair's agreement along it and the drafter's confidences,
    from the teacher-forced passes the profiler makes."""
    stream = generate([HFMember(target)], prompt, max_new_tokens=RECORDED).token_ids
    forced_target = teacher_forced(HFMember(target), [prompt], [stream], temperature=0.0, vocab=target.config.vocab_size)
    forced_drafter = teacher_forced(HFMember(drafter), [prompt], [stream], temperature=0.0, vocab=target.config.vocab_size)
    agreement = tuple((forced_target.argmax[0] == forced_drafter.argmax[0]).tolist())
    return stream, agreement, tuple(forced_drafter.top[0].tolist())


def _first(rounds, tokens):
    """The rounds a run of `tokens` new tokens takes (it stops once it has them)."""
    kept, made = [], 0
    for item in rounds:
        if made >= tokens:
            break
        kept.append(item)
        made += item.accepted + 1
    return kept


@pytest.mark.parametrize("policy", [FIXED_DRAFTS, DraftPolicy(1, 8), DraftPolicy(p_min=0.3), DraftPolicy(2, 7, 0.2)], ids=str)
@pytest.mark.parametrize("block", [2, 4])
def test_the_replay_walks_the_decoders_rounds(pair, policy, block):
    target, drafter = pair
    stream, agreement, confidence = _measured(target, drafter, PROMPT)
    spy = Widths(HFMember(target))
    result = generate([spy, HFMember(drafter)], PROMPT, max_new_tokens=NEW, block_sizes=(block,), draft_policy=policy)
    assert result.token_ids == stream[:NEW]
    rounds = _first(walk(agreement, block, policy, confidence), NEW)
    level = result.levels[0]
    assert level.tokens_per_verification == tuple(r.accepted + 1 for r in rounds)
    drafted = tuple(rows - 1 for rows in spy.rows)
    if policy.p_min is None:
        assert drafted == tuple(r.drafted for r in rounds)
        assert result.levels[1].forward_passes == sum(r.drafted + r.stopped for r in rounds)
    else:
        # exact up to the first disagreement; past it the drafter reads its own rejected token, which
        # the stream's confidences stand in for (the module's approximation): the round drafted more
        # than it accepted in both, within the cap
        for item, actual in zip(rounds, drafted):
            assert actual == item.drafted if item.drafted == item.accepted else item.accepted < actual
        assert any(r.drafted == r.accepted and r.stopped for r in rounds)  # stops the replay knows exactly
    if policy.p_min is not None:
        assert any(r.stopped for r in rounds) and len({r.drafted for r in rounds}) > 1
    if policy.adaptive:
        assert len({r.drafted for r in rounds}) > 1


def test_a_rule_drafters_adaptive_cap_is_replayed_round_by_round(pair):
    target, _ = pair
    vocab = target.config.vocab_size
    policy = DraftPolicy(1, 6)
    plain = generate([HFMember(target)], LOOPING, max_new_tokens=RECORDED)
    spy = Widths(HFMember(target))
    result = generate([spy, NGramSimpleMember(vocab, size_n=1)], LOOPING, max_new_tokens=NEW, block_sizes=(2,), draft_policy=policy)
    assert result.token_ids == plain.token_ids[:NEW]
    rounds = chain_rounds(TargetStream(len(LOOPING), tuple(LOOPING) + plain.token_ids), 1, 2, new_tokens=NEW, policy=policy)
    assert result.levels[0].tokens_per_verification == tuple(r.accepted + 1 for r in rounds)
    assert tuple(rows - 1 for rows in spy.rows) == tuple(r.drafted for r in rounds)
    assert max(r.drafted for r in rounds) > 2  # the cap grew past K


def test_the_fixed_walk_is_the_run_walk():
    rng = np.random.default_rng(0)
    for _ in range(20):
        sequence = tuple(bool(x) for x in rng.random(50) < 0.7)
        rounds = walk(sequence, 3, FIXED_DRAFTS)
        assert len(rounds) == run_counts(sequence, 3).starts
        assert all(r.drafted == 3 and not r.stopped for r in rounds)


def test_a_confidence_stop_drafts_while_confident_and_pays_the_stopping_pass():
    agreement = (True, True, False, True, True, True, True, True)
    confidence = (0.9, 0.8, 0.2, 0.9, 0.95, 0.9, 0.3, 0.9)
    rounds = walk(agreement, 4, DraftPolicy(p_min=0.5), confidence)
    # from 0: drafts 0, 1 (0.2 stops), accepts both; from 3 (after the bonus at 2): drafts 3, 4, 5, stops at 6
    # and accepts all three; from 7: drafts 7 and past the end, still agreeing there: not observed
    assert rounds == (PolicyRound(2, 2, True), PolicyRound(3, 3, True))
    assert walk(agreement, 4, DraftPolicy(p_min=0.01), confidence) == walk(agreement, 4, FIXED_DRAFTS)
    with pytest.raises(PolyplanError, match="needs the drafter's confidences"):
        walk(agreement, 4, DraftPolicy(p_min=0.5))


def test_the_cost_of_a_variable_length_model_draft_is_the_hand_computation():
    """Two rounds, equally often: 2 drafted, 1 accepted, stopped (3 passes); 3 drafted, 3 accepted (3 passes)."""
    counts = np.zeros((1, 4, 4))
    counts[0, 2, 1] = 1
    counts[0, 3, 3] = 1
    stops = np.zeros((1, 4))
    stops[0, 2] = 1
    rounds = DraftRounds(counts, model_drafter=True, stops=stops)
    t1, t2 = (lambda k: 1.0 + 0.1 * (k - 1)), 0.2  # target T(k), drafter T(1)
    loop = LoopOverhead(per_step_s=0.01, per_round_s=0.05)
    switch = [0.0, (0.03, 0.02)]
    got = predict_chain([rounds], [_curve(t1), t2], [3], loop, switch, pad_verification=False)
    passes = 3.0  # both rounds: 2 + 1 stop, or 3
    drafter = passes * (t2 + 0.01) + 0.05  # passes, their step overhead, the switch excess of the first two
    verify = 0.5 * t1(3) + 0.5 * t1(4)
    tokens = 0.5 * 2 + 0.5 * 4
    assert got.cost_per_token == pytest.approx((drafter + verify + 0.05) / tokens)
    assert got.forwards_per_token == pytest.approx((1 / tokens, passes / tokens))
    assert got.drafted_per_verification == pytest.approx((2.5,))


def _curve(step):
    from polyplan.planner.exact.latency import LatencyCurve

    ks = tuple(range(1, 10))
    return LatencyCurve(ks, tuple(step(k) for k in ks))


def test_the_bootstrap_resamples_the_stops_by_prompt():
    rounds = model_rounds([(True, False, True, True, False)] * 2, 2, DraftPolicy(p_min=0.5), [(0.9, 0.9, 0.2, 0.9, 0.9)] * 2)
    doubled = rounds.resampled(np.array([2.0, 0.0]))
    assert doubled.stops.sum() == rounds.stops.sum() and doubled.model_drafter
    assert np.allclose(doubled.passes_pmf(), rounds.passes_pmf())


def test_a_policy_drafter_catches_up_only_after_an_unstopped_all_accepted_round():
    """Rounds: 3 drafted 2 with both accepted, 1 drafted 2 with one accepted, 1 stopped before
    drafting anything; one of the four 2-token rounds stopped (its extra pass fed its last draft).
    Two tokens to feed after (3/5) · (1 − 1/4) of the rounds; a rule drafter never catches up."""
    counts = np.zeros((1, 3, 3))
    counts[0, 2, 2], counts[0, 2, 1], counts[0, 0, 0] = 3, 1, 1
    stops = np.zeros((1, 3))
    stops[0, 2], stops[0, 0] = 1, 1
    rounds = DraftRounds(counts, model_drafter=True, stops=stops)
    assert rounds.all_accepted_unfed() == pytest.approx(0.45)
    target = LatencyCurve(ks=(1, 3), seconds=(0.04, 0.09))
    drafter = LatencyCurve(ks=(1, 2), seconds=(0.02, 0.07))
    flat = LatencyCurve(ks=(1, 2), seconds=(0.02, 0.02))
    steep_cost = predict_chain([rounds], [target, drafter], [2], pad_verification=False).cost_per_token
    flat_cost = predict_chain([rounds], [target, flat], [2], pad_verification=False).cost_per_token
    tokens = predict_chain([rounds], [target, flat], [2], pad_verification=False).tokens_per_verification[0]
    assert steep_cost - flat_cost == pytest.approx(0.45 * 0.05 / tokens)
    rule = DraftRounds(counts)
    assert predict_chain([rule], [target, drafter], [2]).cost_per_token == predict_chain([rule], [target, flat], [2]).cost_per_token
