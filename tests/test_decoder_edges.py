"""Exactness at the edges: EOS mid-block, max_new_tokens = 1, one-token prompts, seeding,
and caches that hold exactly the committed prefix after every verification."""

from __future__ import annotations

import pytest
import torch

from conftest import perturbed_copy, tiny_llama, truncated_copy
from table_member import TableMember
from wrapped_member import WrappedMember
from polyplan.decoder.chain import generate
from polyplan.decoder.hf import HFMember
from polyplan.decoder.ngram import NGramMember
from polyplan.decoder.sampling import Sampling

pytestmark = pytest.mark.usefixtures("single_thread")

VOCAB = 8
SAMPLE = Sampling(1.0)


def tables(n: int, noise: float = 1.0) -> list[TableMember]:
    generator = torch.Generator().manual_seed(5)
    chain = [TableMember.random(VOCAB, 2, generator, name="M1")]
    for level in range(2, n + 1):
        chain.append(chain[-1].perturbed(noise, generator, name=f"M{level}"))
    return chain


def table_greedy(target: TableMember, prompt: list[int], count: int) -> list[int]:
    sequence = list(prompt)
    for _ in range(count):
        sequence.append(int(target.next_logits(sequence).argmax()))
    return sequence[len(prompt) :]


class Spy(WrappedMember):
    """Wraps a member and snapshots every member's cached tokens before each forward pass."""

    def __init__(self, inner, index: int, log: list, chain: list):
        super().__init__(inner)
        self.index, self.log, self.chain = index, log, chain

    def forward(self, new_ids, keep_last=None):
        self.log.append((self.index, [member.tokens() for member in self.chain]))
        return super().forward(new_ids, keep_last=keep_last)


def is_prefix(short, long) -> bool:
    return len(short) <= len(long) and tuple(long[: len(short)]) == tuple(short)


@pytest.mark.parametrize(("n", "blocks", "sampling"), [(2, (3,), SAMPLE), (3, (2, 3), SAMPLE), (4, (3, 1, 2), SAMPLE), (4, (2, 2, 2), Sampling())])
def test_caches_hold_only_the_committed_prefix(n, blocks, sampling):
    """After every verification at level i, members i..n hold a prefix of M_i's tokens (no
    rejected draft survives); after the top level's, a prefix of the final output."""
    inner = tables(n - 1) + [NGramMember(VOCAB, max_n=2)]
    log: list = []
    chain = [Spy(member, index, log, inner) for index, member in enumerate(inner)]
    generator = torch.Generator().manual_seed(n)
    for _ in range(30):
        log.clear()
        prompt = [1, 2]
        result = generate(chain, prompt, max_new_tokens=12, block_sizes=blocks, sampling=sampling, generator=generator)
        final = prompt + list(result.token_ids)
        checked = 0
        for (previous, _), (_, snapshot) in zip(log, log[1:]):
            if previous == n - 1:
                continue  # the last member only drafts; nothing is cropped after it
            for lower in range(previous + 1, n):
                assert is_prefix(snapshot[lower], snapshot[previous])
            if previous == 0:
                assert is_prefix(snapshot[0], final)
            checked += 1
        assert checked > 0
        for member in inner:
            assert is_prefix(member.tokens(), final)


def test_hf_caches_match_the_committed_prefix_after_generate():
    target = tiny_llama(0, layers=3, init=0.1)
    drafts = [perturbed_copy(target, 0.05, seed=1), truncated_copy(target, 2)]
    chain = [HFMember(model, name=f"m{index}") for index, model in enumerate([target] + drafts)]
    prompt = [5, 17, 33]
    result = generate(chain, prompt, max_new_tokens=20, block_sizes=(3, 2), sampling=SAMPLE, generator=torch.Generator().manual_seed(0))
    assert sum(level.tokens_drafted - level.tokens_accepted for level in result.levels) > 0  # there were rejections
    sequence = prompt + list(result.token_ids)
    for member in chain:
        assert member.cache_length <= len(sequence)
        if member.cache_length == len(sequence):
            member.crop(len(sequence) - 1)  # keep one token to feed
        with torch.no_grad():
            continued = member.forward(torch.tensor(sequence[member.cache_length :], dtype=torch.long), keep_last=1)
            fresh = member.model(torch.tensor([sequence])).logits[0, -1:]
        torch.testing.assert_close(continued, fresh, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("n", "blocks"), [(1, ()), (2, (4,)), (3, (4, 2)), (4, (3, 2, 2))])
def test_eos_in_the_middle_of_a_block_stops_right_there(n, blocks):
    chain = [tables(1)[0]] * 1 + [TableMember(tables(1)[0].table, name=f"copy{i}") for i in range(n - 1)]
    prompt = [4]
    reference = table_greedy(chain[0], prompt, 12)
    for position in (1, 2, 5):
        eos = reference[position]
        expected = reference[: reference.index(eos) + 1]
        result = generate(chain, prompt, max_new_tokens=12, block_sizes=blocks, eos_token_id=eos)
        assert list(result.token_ids) == expected
        assert result.stopped_at_eos


@pytest.mark.parametrize(("n", "blocks"), [(2, (3,)), (3, (2, 3)), (4, (3, 1, 2))])
def test_eos_truncates_the_same_sampled_sequence(n, blocks):
    chain = tables(n)
    free = generate(chain, [2], max_new_tokens=15, block_sizes=blocks, sampling=SAMPLE, generator=torch.Generator().manual_seed(9))
    assert not free.stopped_at_eos and len(free.token_ids) == 15
    for position in (0, 3, 7):
        eos = free.token_ids[position]
        stopped = generate(
            chain, [2], max_new_tokens=15, block_sizes=blocks, sampling=SAMPLE, generator=torch.Generator().manual_seed(9), eos_token_id=[eos, 99]
        )
        assert stopped.token_ids == free.token_ids[: free.token_ids.index(eos) + 1]


@pytest.mark.parametrize(("n", "blocks"), [(1, ()), (2, (5,)), (3, (4, 3)), (4, (2, 2, 2))])
@pytest.mark.parametrize("sampling", [Sampling(), SAMPLE], ids=["greedy", "t1"])
def test_max_new_tokens_is_exact(n, blocks, sampling):
    chain = tables(n, noise=0.2)
    reference = table_greedy(chain[0], [3], 11)
    for count in (1, 2, 7, 11):
        result = generate(chain, [3], max_new_tokens=count, block_sizes=blocks, sampling=sampling, generator=torch.Generator().manual_seed(count))
        assert len(result.token_ids) == count
        if sampling.greedy:
            assert list(result.token_ids) == reference[:count]


def test_one_token_prompt_with_hf_and_ngram():
    target = tiny_llama(0, layers=2, init=0.1)
    chain = [HFMember(target), HFMember(perturbed_copy(target, 0.02, seed=3)), NGramMember(64)]
    reference = generate([HFMember(target)], [7], max_new_tokens=10).token_ids
    assert generate(chain, [7], max_new_tokens=10, block_sizes=(2, 2)).token_ids == reference
    assert generate(chain, torch.tensor([[7]]), max_new_tokens=10, block_sizes=(2, 2)).token_ids == reference


def test_same_seed_same_output_and_counts():
    chain = tables(3)

    def run(seed):
        return generate(chain, [1], max_new_tokens=20, block_sizes=(2, 2), sampling=SAMPLE, generator=torch.Generator().manual_seed(seed))

    first, second = run(4), run(4)
    assert first.token_ids == second.token_ids
    assert [level.tokens_per_verification for level in first.levels] == [level.tokens_per_verification for level in second.levels]
    assert any(run(seed).token_ids != first.token_ids for seed in (5, 6, 7))


def test_level_counts_add_up():
    chain = tables(3)
    result = generate(chain, [1], max_new_tokens=30, block_sizes=(3, 2), sampling=SAMPLE, generator=torch.Generator().manual_seed(1))
    top, middle, last = result.levels
    assert top.forward_passes == top.verifications  # one pass per verification
    assert middle.forward_passes == middle.verifications
    assert last.forward_passes == 2 * middle.verifications  # K_2 = 2 drafted tokens per round
    assert middle.tokens_drafted == last.forward_passes
    assert sum(top.tokens_per_verification) >= len(result.token_ids) == 30
    for level in (top, middle):
        assert level.tokens_accepted == sum(level.tokens_per_verification) - level.verifications
    assert [level.model for level in result.levels] == ["M1", "M2", "M3"]
