"""Losslessness, statistically: the chain samples exactly from the target.

Toy table members (vocabulary 8, logits depend on the last two tokens) make the target's
joint distribution of the first three emitted tokens enumerable exactly (8^3 = 512 cells).
The decoder's samples are compared with it by a chi-square goodness-of-fit test at
significance level ALPHA = 0.001 (cells with expected count < 5 are pooled). Seeds are fixed,
so each test is deterministic.

Sample sizes: every sample is a full `generate` call (0.6–3 ms on one core for n = 2–4), so
the default run draws DEFAULT_SAMPLES = 4 000 per chain and the `slow` tests draw
FULL_SAMPLES = 100 000 per chain (`python -m pytest -m slow tests/test_decoder_lossless.py`,
about 15 minutes of one idle core). Two negative controls must fail the same test at the same sample size:
a verifier that always accepts, and a subtler one that recovers from q instead of
norm(max(0, q − p)). At 2 000 samples both already give p-values below 1e-40, so the
default size keeps ample power.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import stats

from table_member import TableMember
from polyplan.decoder import verify as verify_module
from polyplan.decoder.chain import generate
from polyplan.decoder.ngram_simple import NGramSimpleMember
from polyplan.decoder.sampling import Sampling
from polyplan.formats.plan import VerifyWidths

pytestmark = pytest.mark.usefixtures("single_thread")

ALPHA = 0.001
VOCAB = 8
PROMPT = [3]
DEFAULT_SAMPLES = 4_000
FULL_SAMPLES = 100_000
BLOCKS = {2: (2,), 3: (2, 3), 4: (3, 1, 2)}


def toy_chain(n: int) -> list[TableMember]:
    """Target and drafts, each draft a noisy copy of the member above it (acceptance 0.3–0.7)."""
    generator = torch.Generator().manual_seed(0)
    chain = [TableMember.random(VOCAB, 2, generator, name="M1")]
    for level in range(2, n + 1):
        chain.append(chain[-1].perturbed(1.0, generator, name=f"M{level}"))
    return chain


def target_joint(target: TableMember, sampling: Sampling, prompt: list[int] = PROMPT) -> np.ndarray:
    """Exact P(x1, x2, x3 | prompt) under the target with `sampling`, by enumeration, float64."""

    def next_probs(context):
        logits = target.next_logits(context).double() / sampling.temperature
        if sampling.top_k is not None:
            kth = torch.topk(logits, sampling.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, -torch.inf)
        probs = torch.softmax(logits, dim=-1)
        if sampling.top_p < 1.0:
            ordered, order = probs.sort(descending=True)
            keep = (ordered.cumsum(0) - ordered) < sampling.top_p
            kept = torch.zeros_like(probs)
            kept[order[keep]] = probs[order[keep]]
            probs = kept / kept.sum()
        return probs.numpy()

    joint = np.zeros((VOCAB,) * 3)
    first = next_probs(prompt)
    for x1 in range(VOCAB):
        second = next_probs(prompt + [x1])
        for x2 in range(VOCAB):
            joint[x1, x2] = first[x1] * second[x2] * next_probs(prompt + [x1, x2])
    return joint


def sample_counts(chain, blocks, sampling: Sampling, samples: int, seed: int, verify_widths=(), prompt=PROMPT) -> np.ndarray:
    generator = torch.Generator().manual_seed(seed)
    counts = np.zeros((VOCAB,) * 3)
    for _ in range(samples):
        result = generate(chain, prompt, max_new_tokens=3, block_sizes=blocks, sampling=sampling, generator=generator,
                          verify_widths=verify_widths)
        counts[result.token_ids] += 1
    return counts


def chi_square_pvalue(counts: np.ndarray, probabilities: np.ndarray) -> float:
    """Goodness of fit. A sample in a cell of probability 0 fails outright (p = 0); among the
    other cells, those with expected count < 5 are pooled into one."""
    expected = probabilities.ravel() * counts.sum()
    observed = counts.ravel()
    if observed[expected == 0].any():
        return 0.0
    observed, expected = observed[expected > 0], expected[expected > 0]
    small = expected < 5
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    return float(stats.chisquare(observed, expected * observed.sum() / expected.sum()).pvalue)


def test_enumeration_is_a_distribution():
    joint = target_joint(toy_chain(1)[0], Sampling(1.0))
    assert joint.sum() == pytest.approx(1.0, abs=1e-12)
    assert len(list(itertools.product(range(VOCAB), repeat=3))) == joint.size


@pytest.mark.parametrize(
    ("n", "sampling"), [(2, Sampling(1.0)), (3, Sampling(1.0)), (4, Sampling(1.0)), (3, Sampling(0.8, top_k=5, top_p=0.9))], ids=str
)
def test_chain_samples_the_target_joint(n, sampling):
    chain = toy_chain(n)
    # top-k/top-p leave only 23 of the 512 cells possible, so fewer samples keep the power
    samples = DEFAULT_SAMPLES if sampling.top_k is None else DEFAULT_SAMPLES // 2
    counts = sample_counts(chain, BLOCKS[n], sampling, samples, seed=n)
    assert chi_square_pvalue(counts, target_joint(chain[0], sampling)) > ALPHA


LOOPING = [3, 1, 4, 3, 1, 4, 3, 1]  # ngram-simple drafts 0, 1 or 2 tokens after it, by the sampled ones


@pytest.mark.parametrize("n", [2, 3])
def test_block_drafting_at_the_bottom_samples_the_target_joint(n):
    """ngram-simple at the bottom drafts a length decided by the context alone (none, or up to
    K one-hot proposals): the chain still samples the target exactly."""
    chain = toy_chain(n - 1) + [NGramSimpleMember(VOCAB, size_n=1)]
    blocks = (2,) if n == 2 else (3, 2)
    counts = sample_counts(chain, blocks, Sampling(1.0), DEFAULT_SAMPLES, seed=40 + n, prompt=LOOPING)
    assert chi_square_pvalue(counts, target_joint(chain[0], Sampling(1.0), LOOPING)) > ALPHA
    generator = torch.Generator().manual_seed(0)
    drafted = [generate(chain, LOOPING, max_new_tokens=3, block_sizes=blocks, sampling=Sampling(1.0), generator=generator).levels[-2].tokens_drafted
               for _ in range(50)]
    assert min(drafted) < max(drafted)  # the drafts vary in length


def test_block_drafting_negative_control_fails(monkeypatch):
    monkeypatch.setattr(verify_module, "acceptance_probability", always_accept)
    chain = toy_chain(1) + [NGramSimpleMember(VOCAB, size_n=1)]
    counts = sample_counts(chain, (2,), Sampling(1.0), DEFAULT_SAMPLES, seed=44, prompt=LOOPING)
    assert chi_square_pvalue(counts, target_joint(chain[0], Sampling(1.0), LOOPING)) < ALPHA


# every verification pass over fewer than 6 tokens runs padded to 6 (planner.exact.verify_width)
PAD_TO_6 = VerifyWidths(tuple((k, 6) for k in range(1, 6)))


@pytest.mark.parametrize("n", [2, 3])
def test_padded_chain_samples_the_target_joint(n):
    chain = toy_chain(n)
    sampling = Sampling(1.0)
    counts = sample_counts(chain, BLOCKS[n], sampling, DEFAULT_SAMPLES, seed=30 + n, verify_widths=(PAD_TO_6,) * (n - 1))
    assert chi_square_pvalue(counts, target_joint(chain[0], sampling)) > ALPHA


def test_padded_negative_control_fails(monkeypatch):
    """Same sample size and level, padding on, a verifier that always accepts: must fail."""
    monkeypatch.setattr(verify_module, "acceptance_probability", always_accept)
    chain = toy_chain(3)
    sampling = Sampling(1.0)
    counts = sample_counts(chain, BLOCKS[3], sampling, DEFAULT_SAMPLES, seed=33, verify_widths=(PAD_TO_6,) * 2)
    assert chi_square_pvalue(counts, target_joint(chain[0], sampling)) < ALPHA


def always_accept(p_draft, q_draft):
    return torch.ones_like(q_draft)


def recover_from_q(p, q):
    return q


@pytest.mark.parametrize(("n", "broken", "replacement"), [(2, "acceptance_probability", always_accept), (3, "recovery_distribution", recover_from_q)])
def test_negative_controls_fail(monkeypatch, n, broken, replacement):
    monkeypatch.setattr(verify_module, broken, replacement)
    chain = toy_chain(n)
    sampling = Sampling(1.0)
    counts = sample_counts(chain, BLOCKS[n], sampling, DEFAULT_SAMPLES, seed=n)
    assert chi_square_pvalue(counts, target_joint(chain[0], sampling)) < ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3, 4])
def test_chain_samples_the_target_joint_full(n):
    chain = toy_chain(n)
    sampling = Sampling(1.0)
    counts = sample_counts(chain, BLOCKS[n], sampling, FULL_SAMPLES, seed=10 + n)
    assert chi_square_pvalue(counts, target_joint(chain[0], sampling)) > ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3, 4])
def test_negative_control_fails_full(monkeypatch, n):
    monkeypatch.setattr(verify_module, "acceptance_probability", always_accept)
    chain = toy_chain(n)
    sampling = Sampling(1.0)
    counts = sample_counts(chain, BLOCKS[n], sampling, FULL_SAMPLES, seed=20 + n)
    assert chi_square_pvalue(counts, target_joint(chain[0], sampling)) < ALPHA


@pytest.mark.slow
def test_top_k_top_p_and_temperature_apply_identically_at_every_level():
    chain = toy_chain(3)
    sampling = Sampling(0.8, top_k=5, top_p=0.9)
    counts = sample_counts(chain, BLOCKS[3], sampling, FULL_SAMPLES, seed=30)
    assert chi_square_pvalue(counts, target_joint(chain[0], sampling)) > ALPHA
