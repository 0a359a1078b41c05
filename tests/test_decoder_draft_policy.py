"""Draft lengths that adapt (`formats.plan.DraftPolicy` in `decoder.chain.generate`): an adaptive
cap and a confidence stop p_min at the last level.

Checked: greedy output equals the target's own greedy continuation for every policy on chains of
two and three members (tiny Llamas) and on a rule drafter with an adaptive cap; the cap walks
HF's +2 / −1 rule within [k_min, k_max]; a confidence stop runs the pass whose token it does not
draft (the last member's passes = drafted + stops) and its drafts vary in length; a member's own
`forward_argmax_confidence` gives the same rounds as rows reduced by the decoder; losslessness at
temperature 1 by chi-square on toy table members (as `test_decoder_lossless.py`: 8^3 cells,
ALPHA = 0.001, 4 000 samples) with a negative control (a verifier that always accepts) that must
fail at the same size; bad policies are one line; the top probability over a row's 10 best
logits (what llama-server's p_min reads) equals the softmax over those 10 by hand.
"""

from __future__ import annotations

import pytest
import torch

from conftest import perturbed_copy, tiny_llama
from table_member import TableMember
from test_decoder_lossless import ALPHA, DEFAULT_SAMPLES, LOOPING, VOCAB, always_accept, chi_square_pvalue, target_joint, toy_chain
from wrapped_member import WrappedMember
from polyplan.decoder import verify as verify_module
from polyplan.decoder.chain import context_reserve, generate
from polyplan.decoder.hf import HFMember
from polyplan.decoder.member import ConfidentArgmax
from polyplan.decoder.ngram_simple import NGramSimpleMember
from polyplan.decoder.sampling import Sampling, argmax_ids, top_probability
from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import DraftPolicy

pytestmark = pytest.mark.usefixtures("single_thread")

PROMPT = [5, 9, 33, 7, 5, 9, 33, 7, 5]
NEW = 40
POLICIES = [DraftPolicy(1, 8), DraftPolicy(p_min=0.3), DraftPolicy(2, 6, 0.5)]


@pytest.fixture(scope="module")
def models(single_thread):
    target = tiny_llama(0, layers=2)
    return target, perturbed_copy(target, 0.3, 1), perturbed_copy(target, 0.6, 2)


def _greedy(chain, blocks, policy=None, prompt=PROMPT):
    return generate(chain, prompt, max_new_tokens=NEW, block_sizes=blocks, draft_policy=policy)


@pytest.mark.parametrize("policy", POLICIES, ids=str)
@pytest.mark.parametrize("n", [2, 3])
def test_greedy_output_is_the_targets(models, policy, n):
    members = [HFMember(model) for model in models[:n]]
    alone = _greedy(members[:1], ())
    blocks = (3,) if n == 2 else (4, 3)
    result = _greedy(members, blocks, policy)
    assert result.token_ids == alone.token_ids
    last = result.levels[-2]
    assert sum(last.tokens_per_verification) == last.tokens_accepted + len(last.tokens_per_verification)
    drafter = result.levels[-1]
    stops = drafter.forward_passes - last.tokens_drafted
    assert stops >= 0 and (policy.p_min is not None or stops == 0)


def test_a_confidence_stop_drafts_varying_lengths_and_pays_the_stopping_pass(models):
    members = [HFMember(models[0]), HFMember(models[2])]
    fixed = _greedy(members, (4,))
    stopped = _greedy(members, (4,), DraftPolicy(p_min=0.5))
    assert stopped.token_ids == fixed.token_ids
    drafted = stopped.levels[0].tokens_drafted
    rounds = len(stopped.levels[0].tokens_per_verification)
    assert drafted < 4 * rounds  # some round stopped early
    assert stopped.levels[1].forward_passes > drafted  # the pass whose token was not drafted ran


def test_the_cap_walks_hfs_schedule():
    policy = DraftPolicy(2, 7)
    assert policy.next_cap(3, 3, 3) == 5 and policy.next_cap(6, 6, 6) == 7  # +2 after a full acceptance, up to k_max
    assert policy.next_cap(3, 3, 1) == 2 and policy.next_cap(2, 2, 0) == 2  # −1 otherwise, down to k_min
    assert policy.next_cap(3, 0, 0) == 5  # nothing drafted, nothing rejected: as HF (all of none accepted)
    assert DraftPolicy(p_min=0.5).next_cap(4, 4, 0) == 4  # no adaptive cap: it stays


def test_an_adaptive_cap_on_a_rule_drafter_keeps_the_output(models):
    members = [HFMember(models[0]), NGramSimpleMember(models[0].config.vocab_size, size_n=2)]
    alone = _greedy(members[:1], ())
    result = _greedy(members, (3,), DraftPolicy(1, 8))
    assert result.token_ids == alone.token_ids
    assert max(result.levels[0].tokens_per_verification) <= 9


class OwnConfidence(WrappedMember):
    """A member offering `forward_argmax_confidence`, reduced from its rows as llama.cpp's member
    reduces its buffer; it counts its calls."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.calls = 0

    def forward_argmax_confidence(self, new_ids, keep_last=None):
        self.calls += 1
        rows = self.inner.forward(new_ids, keep_last=keep_last)[:, : self.valid_vocab_size]
        return argmax_ids(rows), top_probability(rows)


def test_a_members_own_confidence_gives_the_same_rounds(models):
    plain = [HFMember(models[0]), HFMember(models[2])]
    own = [plain[0], OwnConfidence(HFMember(models[2]))]
    assert isinstance(own[1], ConfidentArgmax) and not isinstance(plain[1], ConfidentArgmax)
    policy = DraftPolicy(p_min=0.5)
    a, b = _greedy(plain, (4,), policy), _greedy(own, (4,), policy)
    assert a.token_ids == b.token_ids and a.levels[0].tokens_per_verification == b.levels[0].tokens_per_verification
    assert own[1].calls == b.levels[1].forward_passes  # every drafting pass (the prompt is fused with the first)


def test_top_probability_is_the_softmax_maximum():
    logits = torch.tensor([[0.0, 1.0, 2.0], [5.0, 5.0, -1.0]])
    assert torch.allclose(top_probability(logits), torch.softmax(logits.double(), -1).max(-1).values)


def _counts(chain, blocks, policy, samples, seed, prompt=(3,)):
    import numpy as np

    generator = torch.Generator().manual_seed(seed)
    counts = np.zeros((VOCAB,) * 3)
    for _ in range(samples):
        result = generate(chain, list(prompt), max_new_tokens=3, block_sizes=blocks, sampling=Sampling(1.0), generator=generator,
                          draft_policy=policy)
        counts[result.token_ids] += 1
    return counts


@pytest.mark.parametrize(("n", "policy"), [(2, DraftPolicy(p_min=0.35)), (2, DraftPolicy(1, 4)), (3, DraftPolicy(1, 3, 0.3))], ids=str)
def test_the_chain_samples_the_target_joint(n, policy):
    chain = toy_chain(n)
    blocks = (2,) if n == 2 else (2, 2)
    counts = _counts(chain, blocks, policy, DEFAULT_SAMPLES, seed=70 + n)
    assert chi_square_pvalue(counts, target_joint(chain[0], Sampling(1.0))) > ALPHA


def test_the_drafts_really_stop_at_a_temperature():
    chain = toy_chain(2)
    generator = torch.Generator().manual_seed(5)
    drafted = [generate(chain, [3], max_new_tokens=3, block_sizes=(2,), sampling=Sampling(1.0), generator=generator,
                        draft_policy=DraftPolicy(p_min=0.35)).levels[0].tokens_drafted for _ in range(60)]
    assert min(drafted) < max(drafted)


def test_the_negative_control_fails(monkeypatch):
    monkeypatch.setattr(verify_module, "acceptance_probability", always_accept)
    chain = toy_chain(2)
    counts = _counts(chain, (2,), DraftPolicy(p_min=0.35), DEFAULT_SAMPLES, seed=77)
    assert chi_square_pvalue(counts, target_joint(chain[0], Sampling(1.0))) < ALPHA


def test_a_rule_drafter_with_an_adaptive_cap_samples_the_target_joint():
    chain = toy_chain(1) + [NGramSimpleMember(VOCAB, size_n=1)]
    counts = _counts(chain, (2,), DraftPolicy(1, 4), DEFAULT_SAMPLES, seed=78, prompt=LOOPING)
    assert chi_square_pvalue(counts, target_joint(chain[0], Sampling(1.0), LOOPING)) > ALPHA


def test_the_context_reserve_counts_the_widest_cap():
    assert context_reserve((3,), (), DraftPolicy(1, 8)) == 8
    assert context_reserve((4, 3), (), DraftPolicy(1, 8)) == 12
    assert context_reserve((3,), (), DraftPolicy(p_min=0.5)) == 3


@pytest.mark.parametrize(("make", "words"), [
    (lambda: DraftPolicy(5, 2), "k_min 5 is above k_max 2"),
    (lambda: DraftPolicy(p_min=1.0), "p_min must be a number in (0, 1)"),
    (lambda: DraftPolicy(p_min=0.0), "p_min must be a number in (0, 1)"),
    (lambda: DraftPolicy(k_min=2), "k_min and k_max go together"),
])
def test_bad_policies_are_one_line(make, words):
    with pytest.raises(PolyplanError, match="draft policy: ") as error:
        make()
    assert words in str(error.value) and "\n" not in str(error.value)


def test_bad_uses_are_one_line():
    target = TableMember.random(VOCAB, 2, torch.Generator().manual_seed(0), name="t")
    rule = NGramSimpleMember(VOCAB, size_n=1)
    with pytest.raises(PolyplanError, match="drafts by rule and has none"):
        generate([target, rule], [3], max_new_tokens=4, block_sizes=(2,), draft_policy=DraftPolicy(p_min=0.5))
    with pytest.raises(PolyplanError, match=r"last block size \(block_sizes\[0\]\) 9 must lie in \[k_min, k_max\] = \[1, 8\]"):
        generate([target, target], [3], max_new_tokens=4, block_sizes=(9,), draft_policy=DraftPolicy(1, 8))
    with pytest.raises(PolyplanError, match="target alone drafts nothing"):
        generate([target], [3], max_new_tokens=4, draft_policy=DraftPolicy(1, 8))


def test_the_top_probability_over_the_10_best_logits_is_their_softmax_by_hand():
    """llama-server's draft-simple keeps its 10 best candidates (`DRAFT_SIMPLE_TOP_K`) and
    normalises over them: row 0 spreads mass beyond them, so its 10-best value is above the
    whole-vocabulary one; row 1 has 10 finite logits, so the two are equal (negative control)."""
    import math

    from polyplan.formats.profile import DRAFT_SIMPLE_TOP_K

    spread = [3.0, 1.0, 2.0, 0.5, -1.0, 0.0, 2.5, 1.5, -0.5, 0.25, 0.1, -2.0, 0.2, 0.3]
    best = sorted(spread, reverse=True)[:10]
    concentrated = best + [float("-inf")] * 4  # the same 10 best, nothing beyond them
    logits = torch.tensor([spread, concentrated], dtype=torch.float64)
    by_hand = math.exp(best[0]) / sum(math.exp(value) for value in best)
    whole = math.exp(max(spread)) / sum(math.exp(value) for value in spread)
    ten = top_probability(logits, among=DRAFT_SIMPLE_TOP_K)
    assert DRAFT_SIMPLE_TOP_K == 10
    assert float(ten[0]) == pytest.approx(by_hand, rel=1e-12) and float(top_probability(logits)[0]) == pytest.approx(whole, rel=1e-12)
    assert float(ten[0]) > whole + 0.01  # the mass beyond the 10 best is left out
    assert float(ten[1]) == pytest.approx(float(top_probability(logits)[1]), rel=1e-12) == pytest.approx(by_hand, rel=1e-12)
    rows = torch.randn(200, 50, generator=torch.Generator().manual_seed(0)) * 2
    assert bool((top_probability(rows, among=10) >= top_probability(rows) - 1e-15).all())
    assert torch.allclose(top_probability(rows[:, :6], among=10), top_probability(rows[:, :6]), rtol=1e-12)  # fewer than 10: all
