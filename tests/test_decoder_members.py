"""The members on their own: n-gram proposals and crops, table look-ups, HF cache crops."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import tiny_llama
from table_member import TableMember
from polyplan.decoder import ChainMember, HFMember, NGramMember

pytestmark = pytest.mark.usefixtures("single_thread")


def proposals(member: NGramMember, ids: list[int]) -> list[int]:
    logits = member.forward(torch.tensor(ids))
    assert torch.isfinite(logits).sum(dim=-1).tolist() == [1] * len(ids)  # one-hot rows
    assert (logits.max(dim=-1).values == 0).all()
    return logits.argmax(dim=-1).tolist()


def test_members_satisfy_the_protocol():
    members = [NGramMember(10), TableMember.random(4, 1, torch.Generator().manual_seed(0)), HFMember(tiny_llama(0, layers=1))]
    for member in members:
        assert isinstance(member, ChainMember)


def test_ngram_proposes_what_followed_the_longest_match():
    member = NGramMember(20, max_n=3, min_n=1)
    # context 1 2 3 9 1 2 3 -> suffix "1 2 3" was followed by 9
    assert proposals(member, [1, 2, 3, 9, 1, 2, 3])[-1] == 9
    member.reset()
    # "5 6" occurred twice, followed by 7 then by 8: the most recent occurrence wins
    assert proposals(member, [5, 6, 7, 5, 6, 8, 4, 5, 6])[-1] == 8


def test_ngram_prefers_longer_matches_and_falls_back_to_repeating():
    member = NGramMember(20, max_n=2, min_n=1)
    out = proposals(member, [4, 1, 7, 2, 1, 9, 4, 1])
    assert out[-1] == 7  # "4 1" matches (followed by 7) although "1" alone last preceded 9
    assert out[0] == 4  # no earlier context: repeat the last token
    member = NGramMember(20, max_n=3, min_n=2)
    assert proposals(member, [3, 5, 11])[-1] == 11  # no bigram seen before: repeat


def test_ngram_crop_forgets_the_dropped_tokens():
    member = NGramMember(20, max_n=2)
    member.forward(torch.tensor([1, 2, 3]))
    member.forward(torch.tensor([1, 2, 9, 1]))  # "1" last followed by 2, then by 9
    member.crop(3)
    assert member.tokens() == (1, 2, 3) and member.cache_length == 3
    fresh = NGramMember(20, max_n=2)
    fresh.forward(torch.tensor([1, 2, 3]))
    assert proposals(member, [1]) == proposals(fresh, [1]) == [2]
    member.crop(0)
    assert member.tokens() == () and member._ends == {}


def test_ngram_keep_last():
    member = NGramMember(20)
    assert member.forward(torch.tensor([1, 2, 1]), keep_last=1).shape == (1, 20)


def test_table_rows_follow_the_last_tokens():
    generator = torch.Generator().manual_seed(0)
    member = TableMember.random(5, 2, generator)
    logits = member.forward(torch.tensor([3, 1, 4]))
    torch.testing.assert_close(logits[0], member.table[5, 3].float())  # no token before 3 → slot V
    torch.testing.assert_close(logits[2], member.table[1, 4].float())
    torch.testing.assert_close(member.forward(torch.tensor([2]), keep_last=1)[0], member.table[4, 2].float())
    member.crop(1)
    assert member.tokens() == (3,)
    with pytest.raises(ValueError):
        member.crop(2)


def test_hf_member_crop_and_keep_last_match_a_fresh_pass():
    model = tiny_llama(0, layers=2, init=0.1)
    member = HFMember(model)
    sequence = torch.tensor([5, 9, 11, 20, 31, 7, 8])
    full = member.forward(sequence)  # (7, V)
    assert full.shape == (7, 64) and full.dtype == torch.float32 and member.cache_length == 7
    member.crop(4)
    assert member.cache_length == 4
    again = member.forward(torch.tensor([31, 7, 8]), keep_last=2)
    torch.testing.assert_close(again, full[-2:], atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        reference = model(sequence.unsqueeze(0)).logits[0]
    torch.testing.assert_close(full, reference, atol=1e-5, rtol=1e-5)
    member.reset()
    assert member.cache_length == 0
    assert member.max_context == 256 and member.eos_token_id == 2 and member.token_map() is None


def test_hf_member_masks_padded_vocabulary_rows():
    from conftest import tiny_tokenizer

    member = HFMember(tiny_llama(0, layers=1, vocab=72), tokenizer=tiny_tokenizer())
    assert member.vocab_size == 72 and member.valid_vocab_size == 64
    logits = member.forward(torch.tensor([4, 5]))
    assert (logits[:, 64:] == -math.inf).all() and torch.isfinite(logits[:, :64]).all()
    assert member.token_map()["w5"] == 5


def test_hf_member_passes_its_cache_without_a_deprecation_warning():
    """Issue 23, item 7: transformers 5.2x renamed `past_key_values` to `cache` and warns on the
    old name (a FutureWarning on every run with a Llama model); the member passes the name the
    model takes. Negative control: the old name does warn, so the check can fail."""
    import warnings

    from polyplan.decoder.hf import cache_keyword

    model = tiny_llama(0)
    member = HFMember(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        member.forward(torch.tensor([1, 2, 3]), keep_last=1)
        member.forward(torch.tensor([4]), keep_last=1)
    assert not [w for w in caught if "past_key_values" in str(w.message)]
    if cache_keyword(model) == "cache":
        from transformers import DynamicCache

        with warnings.catch_warnings(record=True) as old:
            warnings.simplefilter("always")
            model(input_ids=torch.tensor([[1, 2]]), past_key_values=DynamicCache(config=model.config), use_cache=True)
        assert [w for w in old if "past_key_values" in str(w.message)]
