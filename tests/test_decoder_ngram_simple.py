"""The ngram-simple member (decoder.ngram_simple) and block drafting in the chain: drafts of 0 … K
tokens, greedy equality with the target, and rounds that the planner's replay predicts exactly."""

from __future__ import annotations

import pytest
import torch

from conftest import perturbed_copy, tiny_llama
from polyplan.decoder import ChainMember, HFMember
from polyplan.decoder.chain import generate
from polyplan.decoder.member import BlockDrafter
from polyplan.decoder.ngram import NGramMember
from polyplan.decoder.ngram_simple import NGramSimpleMember
from polyplan.decoder.sampling import Sampling
from polyplan.formats.profile import TargetStream
from polyplan.planner.exact.ngram_replay import chain_rounds, ngram_simple_draft
from polyplan.validation.primed import PrimedMember

pytestmark = pytest.mark.usefixtures("single_thread")

LOOPING = [5, 9, 12, 5, 9, 12, 7, 5, 9]  # a prompt that repeats itself


@pytest.fixture(scope="module")
def target(single_thread):
    return tiny_llama(0, layers=2)


def test_it_is_a_chain_member_and_a_block_drafter_and_a_model_drafter_is_not():
    member = NGramSimpleMember(20, size_n=2)
    assert isinstance(member, ChainMember) and isinstance(member, BlockDrafter)
    assert not isinstance(NGramMember(20), BlockDrafter) and not isinstance(HFMember(tiny_llama(0, layers=1)), BlockDrafter)
    primed = PrimedMember(member)
    assert isinstance(primed, BlockDrafter) and not isinstance(PrimedMember(NGramMember(20)), BlockDrafter)


def test_draft_block_drafts_by_the_rule_and_keeps_only_committed_tokens():
    member = NGramSimpleMember(20, size_n=2)
    history = [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 7, 1]
    draft = member.draft_block(torch.tensor(history + [2]), 4)
    assert draft == ngram_simple_draft(history, 2, 2, 4) == [3, 4, 5, 6]
    assert member.cache_length == len(history) + 1  # the drafts are not in its context
    assert member.draft_block(torch.tensor([9]), 4) == []  # [2, 9] never occurred: nothing drafted
    member.crop(len(history) + 1)
    assert member.draft_block(torch.tensor([], dtype=torch.int64), 2) == [3, 4]
    assert member.tokens() == tuple(history + [2])
    member.reset()
    assert member.cache_length == 0 and member.draft_block(torch.tensor([1]), 4) == []


def test_forward_rows_are_one_hot_first_drafts_or_the_token_itself():
    member = NGramSimpleMember(20, size_n=1)
    ids = [1, 2] * 12 + [3]
    logits = member.forward(torch.tensor(ids))
    assert torch.isfinite(logits).sum(dim=-1).tolist() == [1] * len(ids)
    proposals = logits.argmax(dim=-1).tolist()
    assert proposals[-2] == 1  # after ... 1, 2 the rule drafts 1 (size_m 16 needs 19 tokens of history)
    assert proposals[-1] == 3  # 3 never occurred before: it proposes the token itself
    assert member.forward(torch.tensor([4, 5]), keep_last=1).shape == (1, 20)


@pytest.mark.parametrize("size_n", [1, 2, 3])
@pytest.mark.parametrize("block", [1, 3, 6])
def test_greedy_chain_equals_the_target_and_its_rounds_are_the_replays(target, size_n, block):
    """Output token for token the target's own; every round (tokens per verification) and the
    drafted total exactly what `planner.exact.ngram_replay.chain_rounds` replays on the target's stream
    (recorded longer than the run, so no draft is cut by the stream's end)."""
    vocab = HFMember(target).vocab_size
    plain = generate([HFMember(target)], LOOPING, max_new_tokens=80)
    result = generate([HFMember(target), NGramSimpleMember(vocab, size_n=size_n)], LOOPING, max_new_tokens=60, block_sizes=(block,))
    assert result.token_ids == plain.token_ids[:60]
    rounds = chain_rounds(TargetStream(len(LOOPING), tuple(LOOPING) + plain.token_ids), size_n, block, new_tokens=60)
    level = result.levels[0]
    assert level.tokens_per_verification == tuple(r.accepted + 1 for r in rounds)
    assert level.tokens_drafted == sum(r.drafted for r in rounds)
    assert result.levels[1].forward_passes == len(rounds)  # one drafter call per round
    if size_n == 1:
        assert 0 < sum(r.drafted == 0 for r in rounds) < len(rounds)  # rounds with and without drafts


def test_a_three_level_chain_with_block_drafting_at_the_bottom_is_greedy_exact(target):
    vocab = HFMember(target).vocab_size
    plain = generate([HFMember(target)], LOOPING, max_new_tokens=40)
    chain = [HFMember(target), HFMember(perturbed_copy(target, 0.05, seed=2)), NGramSimpleMember(vocab, size_n=1)]
    result = generate(chain, LOOPING, max_new_tokens=40, block_sizes=(4, 3))
    assert result.token_ids == plain.token_ids
    assert result.levels[1].tokens_drafted > 0  # the lookup drafted for the middle level


def test_sampled_rounds_with_and_without_drafts_run(target):
    vocab = HFMember(target).vocab_size
    generator = torch.Generator().manual_seed(0)
    result = generate([HFMember(target), NGramSimpleMember(vocab, size_n=1)], LOOPING * 3, max_new_tokens=40,
                      block_sizes=(3,), sampling=Sampling(1.0), generator=generator)
    assert len(result.token_ids) == 40
    assert result.levels[0].forward_passes == len(result.levels[0].tokens_per_verification)
