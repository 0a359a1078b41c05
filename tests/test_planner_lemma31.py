"""Lemma 3.1 as printed: φ_i and the ideal time T for n models."""

from __future__ import annotations

import math

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.planner.paper.lemma31 import ideal_time


def ideal_speedup(mean_lengths, times, *, alpha_scale: float) -> float:
    """N · T_1 / T: the speedup Lemma 3.1 predicts over autoregressive decoding with M_1."""
    return float(times[0]) / ideal_time(mean_lengths, times, alpha_scale=alpha_scale).total


def test_two_models_is_the_papers_eq1():
    # eq. 1: T = N/E[L1] T1 + alpha N/E[L1] T2 (the E[L_0] = 0 convention: no ceiling at i = 1).
    result = ideal_time([4.34], [25.0, 4.0], alpha_scale=7.0, n_tokens=100.0)
    assert result.phi == pytest.approx((100 / 4.34, 7 * 100 / 4.34))
    assert result.total == pytest.approx(100 / 4.34 * 25 + 7 * 100 / 4.34 * 4)
    assert result.ceilings == (1,)


def test_three_models_table1():
    result = ideal_time([6.26, 4.36], [25.0, 7.0, 4.0], alpha_scale=7.0)
    c = math.ceil(6.26 / 4.36)
    assert c == 2
    assert result.ceilings == (1, 2)
    assert result.phi == pytest.approx((1 / 6.26, 1 / (4.36 * 2), 7 / (4.36 * 2)))
    assert result.terms == pytest.approx(tuple(p * t for p, t in zip(result.phi, (25, 7, 4))))
    assert result.total == pytest.approx(25 / 6.26 + 7 / 8.72 + 28 / 8.72)
    assert ideal_speedup([6.26, 4.36], [25.0, 7.0, 4.0], alpha_scale=7.0) == pytest.approx(25 / result.total)


def test_ceiling_terms_for_four_models():
    # E[L] = 9, 4, 1.5: ceilings ⌈9/4⌉ = 3 and ⌈4/1.5⌉ = 3; the last model is alpha * phi_{n-1}.
    result = ideal_time([9.0, 4.0, 1.5], [50.0, 10.0, 3.0, 1.0], alpha_scale=2.0, n_tokens=36.0)
    assert result.ceilings == (1, 3, 3)
    assert result.phi == pytest.approx((36 / 9, 36 / 12, 36 / 4.5, 2 * 36 / 4.5))
    # A ratio just above an integer rounds up, exactly on an integer it does not.
    assert ideal_time([8.0, 4.0], [1.0, 1.0, 1.0], alpha_scale=1.0).ceilings == (1, 2)
    assert ideal_time([8.0001, 4.0], [1.0, 1.0, 1.0], alpha_scale=1.0).ceilings == (1, 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(mean_lengths=[4.0], times=[25.0, -4.0], alpha_scale=1.0), r"times\[1\]: must be a finite number > 0"),
        (dict(mean_lengths=[4.0], times=[0.0, 4.0], alpha_scale=1.0), r"times\[0\]: must be a finite number > 0"),
        (dict(mean_lengths=[float("nan")], times=[25.0, 4.0], alpha_scale=1.0), r"mean_lengths\[0\]"),
        (dict(mean_lengths=[4.0], times=[25.0, 4.0], alpha_scale=0.0), "alpha_scale"),
        (dict(mean_lengths=[4.0, 2.0], times=[25.0, 4.0], alpha_scale=1.0), "mean_lengths: need 1"),
        (dict(mean_lengths=[], times=[25.0], alpha_scale=1.0), "at least 2 models"),
    ],
)
def test_bad_input(kwargs, message):
    with pytest.raises(PolyplanError, match=message):
        ideal_time(**kwargs)
