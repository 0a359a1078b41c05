"""The tall, skinny LM head: same logits as `nn.Linear` up to float32 rounding, used only where
it qualifies, never modifying the model it is given, and lossless in a chain."""

import pytest
import torch
from torch import nn

from conftest import tiny_llama
from polyplan.decoder.chain import generate
from polyplan.decoder.hf import HFMember
from polyplan.decoder.tall_skinny_head import TALL, TallSkinnyHead, is_tall_cpu_head, with_tall_skinny_head

VOCAB = 512  # 16 rows per hidden column of 32: a tall head


@pytest.fixture(scope="module")
def model():
    return tiny_llama(0, layers=2, hidden=32, vocab=VOCAB)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("bias", [False, True])
def test_logits_equal_the_linear_head(rows, bias):
    torch.manual_seed(rows)
    head = nn.Linear(64, 1024, bias=bias)
    hidden = torch.randn(1, rows, 64)
    fast = TallSkinnyHead(head)(hidden)
    assert fast.shape == (1, rows, 1024)
    torch.testing.assert_close(fast, head(hidden), rtol=1e-5, atol=1e-5)
    assert torch.equal(fast.argmax(-1), head(hidden).argmax(-1))


def test_only_plain_tall_float32_cpu_heads_qualify():
    assert is_tall_cpu_head(nn.Linear(32, 32 * TALL))
    assert not is_tall_cpu_head(nn.Linear(32, 32 * TALL - 1))  # not tall enough
    assert not is_tall_cpu_head(nn.Linear(32, 32 * TALL).to(torch.bfloat16))  # bf16 kernels handle few rows
    assert not is_tall_cpu_head(TallSkinnyHead(nn.Linear(32, 32 * TALL)))  # already replaced / not a Linear

    class Subclass(nn.Linear):
        pass

    assert not is_tall_cpu_head(Subclass(32, 32 * TALL))  # a subclass may compute something else
    assert not is_tall_cpu_head(None)


def test_the_copy_shares_the_weights_and_leaves_the_model_untouched(model):
    fast = with_tall_skinny_head(model)
    assert fast is not model
    assert isinstance(fast.get_output_embeddings(), TallSkinnyHead)
    assert type(model.get_output_embeddings()) is nn.Linear
    assert fast.get_output_embeddings().weight is model.get_output_embeddings().weight
    assert fast.model is model.model
    small = tiny_llama(0, layers=1, hidden=32, vocab=64)  # 2 rows per column: left as it is
    assert with_tall_skinny_head(small) is small


def test_the_member_uses_it_and_the_model_outputs_match(model):
    member = HFMember(model)
    assert isinstance(member.model.get_output_embeddings(), TallSkinnyHead)
    ids = torch.tensor([[5, 17, 300, 41, 9]])
    with torch.inference_mode():
        torch.testing.assert_close(member.model(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-5)


def test_greedy_chain_with_a_tall_head_target_equals_target_only(model):
    prompt = [5, 17, 300, 41]
    drafter = tiny_llama(1, layers=1, hidden=32, vocab=VOCAB)
    target_only = generate([HFMember(model)], prompt, max_new_tokens=32).token_ids
    for block in (1, 3, 6):
        chained = generate([HFMember(model, name="t"), HFMember(drafter, name="d")], prompt,
                           max_new_tokens=32, block_sizes=[block])
        assert chained.token_ids == target_only
