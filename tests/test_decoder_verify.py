"""One verification step, exactly: its output distribution is q (float64, analytic)."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from polyplan.decoder.sampling import Sampling, argmax_ids, probabilities, sample
from polyplan.decoder.verify import acceptance_probability, recovery_distribution, verify_greedy, verify_sampled
from polyplan.formats.errors import PolyplanError

pytestmark = pytest.mark.usefixtures("single_thread")


def step_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Distribution of the token one verification step emits when x ~ p is drafted:
    out(x) = p(x)·a(x) + (1 − Σ_y p(y)·a(y))·r(x), with the decoder's own a and r."""
    accept = acceptance_probability(p, q)  # a(x) for every x as the drafted token
    rejected_mass = 1.0 - (p * accept).sum()
    return p * accept + rejected_mass * recovery_distribution(p, q)


def _dist(values) -> torch.Tensor:
    tensor = torch.tensor(values, dtype=torch.float64)
    return tensor / tensor.sum()


CASES = {
    "p equals q": (_dist([0.1, 0.2, 0.3, 0.4]), _dist([0.1, 0.2, 0.3, 0.4])),
    "disjoint supports": (_dist([0.5, 0.5, 0.0, 0.0]), _dist([0.0, 0.0, 0.3, 0.7])),
    "one-hot p inside q's support": (_dist([0.0, 1.0, 0.0, 0.0]), _dist([0.25, 0.25, 0.25, 0.25])),
    "one-hot p outside q's support": (_dist([1.0, 0.0, 0.0, 0.0]), _dist([0.0, 0.6, 0.4, 0.0])),
    "one-hot q": (_dist([0.3, 0.3, 0.2, 0.2]), _dist([0.0, 0.0, 1.0, 0.0])),
    "both one-hot, equal": (_dist([0.0, 0.0, 1.0, 0.0]), _dist([0.0, 0.0, 1.0, 0.0])),
    "partial overlap with zeros": (_dist([0.0, 0.5, 0.3, 0.2]), _dist([0.4, 0.1, 0.5, 0.0])),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_step_emits_exactly_q(case):
    p, q = CASES[case]
    out = step_distribution(p, q)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out, q, rtol=0, atol=1e-12)


def test_one_step_emits_exactly_q_for_random_distributions():
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        logits = torch.randn(2, 16, generator=generator, dtype=torch.float64) * 3
        mask = torch.rand(2, 16, generator=generator) < 0.3  # some zeros in each distribution
        logits[mask] = -torch.inf
        logits[:, 0] = 0.0  # keep each row non-empty
        p, q = torch.softmax(logits, dim=-1)
        torch.testing.assert_close(step_distribution(p, q), q, rtol=0, atol=1e-12)


def test_the_formulas_themselves():
    p, q = _dist([0.5, 0.25, 0.25, 0.0]), _dist([0.25, 0.25, 0.0, 0.5])
    torch.testing.assert_close(acceptance_probability(p, q), torch.tensor([0.5, 1.0, 0.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(recovery_distribution(p, q), torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64))


def test_empty_residual_falls_back_to_q_without_nan():
    p = _dist([0.2, 0.8])
    torch.testing.assert_close(recovery_distribution(p, p.clone()), p)
    one_hot = _dist([0.0, 1.0])
    torch.testing.assert_close(recovery_distribution(one_hot, one_hot.clone()), one_hot)


def test_identical_distributions_accept_every_drafted_token():
    generator = torch.Generator().manual_seed(1)
    q = torch.softmax(torch.randn(6, 50, generator=generator), dim=-1)
    for _ in range(50):
        draft = sample(q[:5], generator)
        accepted, emitted = verify_sampled(q[:5].clone(), q, draft, generator)
        assert accepted.all()
        assert 0 <= int(emitted.min()) and int(emitted.max()) < 50


def test_greedy_verification_accepts_the_agreeing_prefix():
    logits = torch.full((4, 5), -1.0)
    logits[torch.arange(4), torch.tensor([2, 3, 0, 4])] = 1.0  # verifier argmax: 2, 3, 0 | bonus 4
    accepted, emitted = verify_greedy(argmax_ids(logits), torch.tensor([2, 3, 1]))
    assert accepted.tolist() == [True, True, False]
    assert emitted.tolist() == [2, 3, 0, 4]


def test_sampled_step_matches_q_statistically():
    """verify_sampled itself (m = 1), 20 000 steps: emitted token ~ q; chi-square at α = 0.001."""
    generator = torch.Generator().manual_seed(2)
    p = torch.tensor([[0.4, 0.3, 0.2, 0.1, 0.0]])
    q = torch.tensor([[0.1, 0.1, 0.2, 0.3, 0.3], [0.2, 0.2, 0.2, 0.2, 0.2]])
    counts = torch.zeros(5)
    for _ in range(20_000):
        draft = sample(p, generator)
        accepted, emitted = verify_sampled(p, q, draft, generator)
        counts[int(draft) if accepted[0] else int(emitted[0])] += 1
    assert stats.chisquare(counts.numpy(), 20_000 * q[0].numpy()).pvalue > 0.001


def test_sampling_transforms():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    torch.testing.assert_close(probabilities(logits, Sampling(1.0)), torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    torch.testing.assert_close(probabilities(logits, Sampling(1.0, top_k=2)), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    # top_p = 0.8: {0.5, 0.3} reaches 0.8, so 0.15 and 0.05 go.
    torch.testing.assert_close(probabilities(logits, Sampling(1.0, top_p=0.8)), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    torch.testing.assert_close(probabilities(logits, Sampling(1.0, top_p=0.1)), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    cold = probabilities(logits, Sampling(0.5))
    torch.testing.assert_close(cold, torch.softmax(2 * logits, dim=-1))


@pytest.mark.parametrize(
    ("kwargs", "culprit"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": 0}, "top_k"),
    ],
)
def test_bad_sampling_settings_name_the_field(kwargs, culprit):
    with pytest.raises(PolyplanError, match=rf"^{culprit}: ") as error:
        Sampling(**kwargs)
    assert "\n" not in str(error.value)
