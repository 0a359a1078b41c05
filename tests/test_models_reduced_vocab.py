"""The reduced-vocabulary drafter (models/reduced_vocab.py): its head, its token subset, and
losslessness of chains that use it.

Chi-square goodness of fit against the target's exactly enumerated joint distribution of the
first three tokens (the toy tables of test_decoder_lossless.py: vocabulary 8), at significance
level ALPHA = 0.001 with SAMPLES = 3 000 `generate` calls per test. The drafter gives zero
probability to 3 of the 8 tokens. Two negative controls must fail at the same size: restricting
the VERIFIER (the target) to the subset, and recovering from q instead of norm(max(0, q − p)).
"""

from __future__ import annotations

import pytest
import torch

from conftest import tiny_llama
from table_member import TableMember
from polyplan.decoder import HFMember, Sampling, generate
from polyplan.decoder import verify as verify_module
from polyplan.models.reduced_vocab import SubsetHead, most_frequent_tokens, restrict_head, restrict_logits
from polyplan.formats.errors import PolyplanError
from test_decoder_lossless import ALPHA, BLOCKS, VOCAB, chi_square_pvalue, sample_counts, target_joint, toy_chain

pytestmark = pytest.mark.usefixtures("single_thread")

SAMPLES = 3_000
KEEP = torch.tensor([0, 2, 3, 5, 6])  # the drafter never proposes 1, 4 or 7


def reduced(member: TableMember, name: str) -> TableMember:
    """`member` with its logits outside KEEP at −inf (what a SubsetHead produces)."""
    return TableMember(restrict_logits(member.table[..., KEEP], KEEP, VOCAB), name=name)


def test_restrict_logits_and_the_subset_head():
    logits = restrict_logits(torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]]), KEEP, VOCAB)
    assert logits.shape == (1, VOCAB) and torch.isinf(logits[0, [1, 4, 7]]).all()
    assert logits[0, KEEP].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    with pytest.raises(PolyplanError, match="reduced head: 5 kept ids need a"):
        SubsetHead(torch.zeros(4, 3), KEEP, VOCAB)


def test_restricted_hf_model_keeps_the_body_and_the_kept_rows():
    model = tiny_llama(0, layers=2)
    keep = torch.arange(0, 64, 3)
    small = restrict_head(model, keep)
    ids = torch.tensor([[4, 9, 13, 21, 30]])
    with torch.no_grad():
        full, part = model(ids).logits, small(ids).logits
    assert part.shape == full.shape and torch.allclose(part[..., keep], full[..., keep], atol=1e-6)
    outside = torch.ones(64, dtype=torch.bool)
    outside[keep] = False
    assert torch.isinf(part[..., outside]).all() and not torch.isinf(full).any()  # the original keeps its head
    assert small.model is model.model and HFMember(small).vocab_size == 64


def test_greedy_chain_with_a_reduced_drafter_equals_the_target():
    target = tiny_llama(0, layers=3, init=0.1)
    keep = most_frequent_tokens(generate([HFMember(target)], [4, 9, 13], max_new_tokens=40).token_ids, 64, 24)
    drafter = HFMember(restrict_head(tiny_llama(0, layers=3, init=0.1), keep), name="reduced")
    prompt = [5, 11, 17, 23]
    alone = generate([HFMember(target)], prompt, max_new_tokens=24)
    chained = generate([HFMember(target), drafter], prompt, max_new_tokens=24, block_sizes=[3])
    assert chained.token_ids == alone.token_ids
    assert chained.levels[0].tokens_accepted > 0  # the drafter did draft (same weights on its subset)


def test_most_frequent_tokens():
    ids = [5, 5, 5, 2, 2, 9, 1]
    assert most_frequent_tokens(ids, 12, 3).tolist() == [1, 2, 5]  # 5 x3, 2 x2, then 1 and 9 tie: the lower id
    assert most_frequent_tokens(ids, 12, 3, always=[11]).tolist() == [2, 5, 11]
    with pytest.raises(PolyplanError, match=r"N = 13 must lie in \[0, 12\]"):
        most_frequent_tokens(ids, 12, 13)


@pytest.mark.parametrize("n", [2, 3])
def test_chain_with_a_reduced_drafter_samples_the_target_joint(n):
    chain = toy_chain(n)
    chain[-1] = reduced(chain[-1], f"M{n}-reduced")
    sampling = Sampling(1.0)
    counts = sample_counts(chain, BLOCKS[n], sampling, SAMPLES, seed=40 + n)
    assert chi_square_pvalue(counts, target_joint(chain[0], sampling)) > ALPHA


def test_negative_control_restricting_the_verifier_fails():
    full_target, drafter = toy_chain(2)
    chain = [reduced(full_target, "M1-reduced"), reduced(drafter, "M2-reduced")]
    sampling = Sampling(1.0)
    counts = sample_counts(chain, BLOCKS[2], sampling, SAMPLES, seed=50)
    assert chi_square_pvalue(counts, target_joint(full_target, sampling)) < ALPHA


def test_negative_control_recovering_from_q_fails(monkeypatch):
    monkeypatch.setattr(verify_module, "recovery_distribution", lambda p, q: q)
    chain = toy_chain(2)
    chain[-1] = reduced(chain[-1], "M2-reduced")
    sampling = Sampling(1.0)
    counts = sample_counts(chain, BLOCKS[2], sampling, SAMPLES, seed=51)
    assert chi_square_pvalue(counts, target_joint(chain[0], sampling)) < ALPHA


def test_compact_logits_are_the_kept_columns_of_the_full_ones():
    from polyplan.models.reduced_vocab import compact_logits
    from polyplan.formats.errors import PolyplanError

    keep = torch.tensor([3, 7, 11, 40])
    model = restrict_head(tiny_llama(0, layers=1, vocab=64), keep)
    ids = torch.tensor([[5, 9, 13]])
    with torch.no_grad():
        full = model(ids).logits
        with compact_logits(model):
            compact = model(ids).logits
        after = model(ids).logits
    assert compact.shape == (1, 3, 4) and torch.equal(compact, full[..., keep])
    assert torch.equal(after, full)  # back to full-vocabulary logits after the block
    other = restrict_head(tiny_llama(1, layers=1, vocab=64), torch.tensor([3, 7, 11, 41]))
    with pytest.raises(PolyplanError, match="keep different ids"):
        with compact_logits(model, other):
            pass
