"""Greedy equality: every chain reproduces the target's own greedy decoding token for token.

Tiny random-initialised float32 Llamas on CPU. Drafts range from nearly identical to the
target (a copy with small weight noise) through a layer-skip copy to an unrelated model and
the n-gram drafter, so rounds with no, partial and full acceptance all occur.
"""

from __future__ import annotations

import pytest
import torch

from conftest import perturbed_copy, tiny_llama, truncated_copy
from polyplan.decoder.chain import generate
from polyplan.decoder.hf import HFMember
from polyplan.decoder.ngram import NGramMember

pytestmark = pytest.mark.usefixtures("single_thread")

NEW_TOKENS = 16
PROMPTS = 20


@pytest.fixture(scope="module")
def models(single_thread):
    target = tiny_llama(0, layers=4, init=0.1)
    return {
        "target": target,
        "close": perturbed_copy(target, 0.02, seed=1),  # acceptance ≈ 0.7
        "noisy": perturbed_copy(target, 0.05, seed=2),  # ≈ 0.5
        "skip": truncated_copy(target, 3),  # ≈ 0.2
        "other": tiny_llama(7, layers=1, init=0.1),  # unrelated: ≈ chance
    }


@pytest.fixture(scope="module")
def prompts():
    generator = torch.Generator().manual_seed(123)
    lengths = [1, 1, 2] + torch.randint(2, 13, (PROMPTS - 3,), generator=generator).tolist()
    return [torch.randint(3, 64, (length,), generator=generator).tolist() for length in lengths]


def reference_greedy(model, prompt: list[int], new_tokens: int) -> list[int]:
    """Plain greedy decoding recomputing the whole sequence each step (no cache at all)."""
    sequence = list(prompt)
    with torch.no_grad():
        for _ in range(new_tokens):
            sequence.append(int(model(torch.tensor([sequence])).logits[0, -1].argmax()))
    return sequence[len(prompt) :]


@pytest.fixture(scope="module")
def references(single_thread, models, prompts):
    return [reference_greedy(models["target"], prompt, NEW_TOKENS) for prompt in prompts]


def build(models, names):
    return [NGramMember(64) if name == "ngram" else HFMember(models[name], name=name) for name in names]


CHAINS = [
    (("target", "close"), (1,)),
    (("target", "close"), (3,)),
    (("target", "noisy"), (5,)),
    (("target", "ngram"), (3,)),
    (("target", "close", "skip"), (2, 3)),
    (("target", "noisy", "close"), (4, 1)),
    (("target", "close", "noisy", "skip"), (3, 2, 2)),
    (("target", "close", "noisy", "other"), (1, 1, 1)),
    (("target", "noisy", "skip", "ngram"), (5, 2, 3)),
]


@pytest.mark.parametrize(("names", "blocks"), CHAINS, ids=lambda value: "-".join(map(str, value)))
def test_chain_equals_plain_greedy(models, prompts, references, names, blocks):
    chain = build(models, names)
    accepted = proposed = 0
    for prompt, reference in zip(prompts, references):
        result = generate(chain, prompt, max_new_tokens=NEW_TOKENS, block_sizes=blocks)
        assert list(result.token_ids) == reference, f"prompt {prompt}"
        accepted += result.levels[0].tokens_accepted
        proposed += result.levels[0].tokens_drafted
    assert proposed > 0


def test_n1_equals_plain_greedy_and_hf_generate(models, prompts, references):
    target = models["target"]
    member = HFMember(target)
    for prompt, reference in list(zip(prompts, references))[:5]:
        ours = list(generate([member], prompt, max_new_tokens=NEW_TOKENS).token_ids)
        with torch.no_grad():
            theirs = target.generate(
                torch.tensor([prompt]), do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=0
            )[0, len(prompt) :].tolist()
        assert ours == reference == theirs


def test_every_acceptance_path_is_exercised(models, prompts, references):
    """With K = 3 rounds of the n = 2 chain end in no, partial and full acceptance."""
    chain = build(models, ("target", "noisy"))
    seen = set()
    for prompt in prompts:
        seen.update(generate(chain, prompt, max_new_tokens=NEW_TOKENS, block_sizes=(3,)).levels[0].tokens_per_verification)
    assert {1, 2, 3, 4} <= seen  # 1: first token rejected; 2, 3: partial; 4: all 3 + bonus


def test_intermediate_levels_accept_and_reject(models, prompts):
    chain = build(models, ("target", "close", "noisy", "skip"))
    totals = [[0, 0] for _ in chain]
    for prompt in prompts[:8]:
        for index, level in enumerate(generate(chain, prompt, max_new_tokens=NEW_TOKENS, block_sizes=(3, 2, 2)).levels):
            totals[index][0] += level.tokens_accepted
            totals[index][1] += level.tokens_drafted
    for accepted, proposed in totals[:-1]:
        assert 0 < accepted < proposed
    assert totals[-1] == [0, 0]  # the last member only drafts


@pytest.mark.parametrize("blocks", [(1,), (3,), (4,), (2, 3), (3, 1, 2)], ids=str)
def test_self_draft_accepts_everything(models, prompts, references, blocks):
    target = models["target"]
    chain = [HFMember(target, name=f"copy{i}") for i in range(len(blocks) + 1)]
    for prompt, reference in list(zip(prompts, references))[:6]:
        result = generate(chain, prompt, max_new_tokens=NEW_TOKENS, block_sizes=blocks)
        assert list(result.token_ids) == reference
        for level in result.levels[:-1]:
            assert level.tokens_accepted == level.tokens_drafted
        top = result.levels[0]
        if len(blocks) == 1:  # n = 2: every verification yields K + 1
            assert set(top.tokens_per_verification) == {blocks[0] + 1}
        # every verification at every level: all m drafted tokens accepted plus the bonus
        assert sum(top.tokens_per_verification) == top.tokens_drafted + top.verifications
