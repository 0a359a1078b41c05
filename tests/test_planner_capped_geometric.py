"""Tokens per verification: sympy derivation, the paper's printed forms, the errata, and MC."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import sympy as sp

from polyplan.formats.errors import PolyplanError
from polyplan.planner.paper import capped_geometric as cg


@dataclass(frozen=True)
class Derivation:
    """Sympy expressions derived from the pmf (symbols `alpha` = acceptance, `K` = block size)."""

    alpha: Any
    k: Any
    pmf: Any
    mean: Any
    second_moment: Any
    variance: Any


@functools.lru_cache(maxsize=1)
def derive_moments() -> Derivation:
    """E[L], E[L²] and Var[L] derived with sympy from the pmf, for symbolic α and K.

    The symbolic sums carry a Piecewise for α = 1; the α ≠ 1 branch is kept, since
    α ∈ [0, 1) everywhere in polyplan.
    """
    alpha = sp.Symbol("alpha", nonnegative=True)
    k = sp.Symbol("K", integer=True, positive=True)
    j = sp.Symbol("j", integer=True, positive=True)
    pmf = alpha ** (j - 1) * (1 - alpha)

    def drop_alpha_one(expr: Any) -> Any:
        return expr.replace(lambda e: isinstance(e, sp.Piecewise), lambda e: e.args[-1].expr)

    mean = drop_alpha_one(sp.summation(j * pmf, (j, 1, k)) + (k + 1) * alpha**k)
    second = drop_alpha_one(sp.summation(j**2 * pmf, (j, 1, k)) + (k + 1) ** 2 * alpha**k)
    mean = sp.simplify(mean)
    variance = sp.simplify(second - mean**2)
    return Derivation(alpha=alpha, k=k, pmf=pmf, mean=mean, second_moment=sp.simplify(second), variance=variance)


def capped_geometric_pmf(acceptance: float, k: int) -> list[float]:
    """P(L = j) for j = 1 … k + 1 (index j − 1)."""
    return [acceptance ** (j - 1) * (1 - acceptance) for j in range(1, k + 1)] + [acceptance**k]


def test_sympy_derivation_matches_the_closed_forms_and_eq3():
    d = derive_moments()
    # The derivation sums the pmf symbolically; the closed forms are what the code evaluates.
    assert sp.simplify(d.mean - cg.closed_form_mean(d.alpha, d.k)) == 0
    assert sp.simplify(d.variance - cg.closed_form_variance(d.alpha, d.k)) == 0
    # Eq. 3 is the mean when its alpha is the ACCEPTANCE rate and n = K.
    assert sp.simplify(d.mean - (1 - d.alpha ** (d.k + 1)) / (1 - d.alpha)) == 0
    # The pmf sums to one for every K.
    j = sp.Symbol("j", integer=True, positive=True)  # equal to the derivation's summation index
    total = sp.summation(d.pmf, (j, 1, d.k)) + d.alpha**d.k
    total = total.replace(lambda e: isinstance(e, sp.Piecewise), lambda e: e.args[-1].expr)
    assert sp.simplify(total) == 1


def test_printed_a2_variance_is_not_the_derived_one():
    d = derive_moments()
    n = sp.Symbol("n", integer=True, positive=True)
    # A.2's variable N (cap n trials, success p) is L with acceptance 1 - p and K = n - 1.
    printed = cg.paper_a2_expression(1 - d.alpha, n)
    true = d.variance.subs(d.k, n - 1)
    assert sp.simplify(printed - true) != 0
    assert sp.simplify((printed - true).subs({d.alpha: sp.Rational(7, 10), n: 2})) != 0


@pytest.mark.parametrize("acceptance", [0.0, 0.3, 0.7, 0.95])
@pytest.mark.parametrize("k", [1, 2, 5, 12])
def test_numeric_moments_equal_brute_force_sums(acceptance, k):
    pmf = capped_geometric_pmf(acceptance, k)
    values = np.arange(1, k + 2)
    mean = float(np.dot(pmf, values))
    variance = float(np.dot(pmf, values**2)) - mean**2
    assert math.isclose(sum(pmf), 1.0, rel_tol=1e-12)
    assert cg.capped_geometric_mean(acceptance, k) == pytest.approx(mean, rel=1e-12)
    assert cg.capped_geometric_variance(acceptance, k) == pytest.approx(variance, rel=1e-9, abs=1e-12)
    assert cg.paper_eq3_mean(acceptance, k) == pytest.approx(mean, rel=1e-12)


def test_erratum_a2_variance_at_p_0_3():
    # p = 0.3 is the appendix's success probability; the paper's alpha_fail = 1 - p = 0.7.
    assert cg.paper_a2_variance(0.3, 2) == pytest.approx(-15.09, abs=0.005)
    assert cg.paper_a2_variance(0.3, 3) == pytest.approx(-34.91, abs=0.005)
    assert cg.paper_sigma2(alpha_fail=0.7, n=2) == pytest.approx(-15.09, abs=0.005)
    # The true variances of the same variable: N = L with acceptance 0.7 and K = n - 1.
    assert cg.capped_geometric_variance(0.7, 1) == pytest.approx(0.21, abs=1e-12)
    assert cg.capped_geometric_variance(0.7, 2) == pytest.approx(0.7539, abs=1e-12)


def test_eq3_read_literally_is_a_different_number():
    # The same number fed as a failure probability gives a count that falls with acceptance.
    assert cg.paper_eq3_mean_literal(0.9, 4) == pytest.approx(cg.paper_eq3_mean(0.1, 4))
    assert cg.paper_eq3_mean_literal(0.9, 4) < 1.2 < cg.capped_geometric_mean(0.9, 4)
    assert cg.paper_eq3_mean_literal(0.0, 4) == 5.0  # eq. 3's limit at alpha -> 1


def test_theorem_3_3_relative_variability():
    # Exact sigma/mu vanishes at both ends (L = 1 always, or L = K + 1 always) and peaks between:
    # "low variability" holds when acceptance is near 0 or near 1, not in between.
    assert cg.relative_variability(0.0, 5) == 0.0
    curve = [cg.relative_variability(a, 5) for a in np.linspace(0.0, 0.999, 200)]
    assert max(curve) > 0.4 and curve[-1] < 0.1
    assert 0 < int(np.argmax(curve)) < len(curve) - 1
    exact = cg.relative_variability(0.7, 2)
    assert exact == pytest.approx(math.sqrt(0.7539) / 2.19, rel=1e-12)
    # Eq. 4 as printed is undefined (negative radicand) where the printed variance is negative.
    assert math.isnan(cg.paper_eq4_relative_variability(0.7, 2))
    # Where the radicand is positive it still differs from the exact value.
    printed = cg.paper_eq4_relative_variability(0.1, 2)
    assert math.isfinite(printed) and printed != pytest.approx(cg.relative_variability(0.1, 2), rel=1e-3)


def test_monte_carlo_agrees_with_the_closed_forms():
    """n = 200,000 draws per case; |error| < 4 standard errors (two-sided level ~6e-5)."""
    rng = np.random.default_rng(12345)
    draws = 200_000

    def sample(acceptance: float, k: int) -> np.ndarray:
        accepted = rng.random((draws, k)) < acceptance  # [draws, k]
        first_reject = np.where(accepted.all(axis=1), k, np.argmin(accepted, axis=1))
        return first_reject + 1

    for acceptance, k in [(0.7, 2), (0.85, 6), (0.5, 3)]:
        tokens = sample(acceptance, k)
        stderr = tokens.std(ddof=1) / math.sqrt(draws)
        assert abs(tokens.mean() - cg.capped_geometric_mean(acceptance, k)) < 4 * stderr
        # Variance: standard error from the fourth central moment.
        centred = tokens - tokens.mean()
        var_se = math.sqrt((np.mean(centred**4) - np.var(tokens) ** 2) / draws)
        assert abs(tokens.var(ddof=1) - cg.capped_geometric_variance(acceptance, k)) < 4 * var_se
    # Negative control: the literal reading of eq. 3 is rejected by the same test.
    tokens = sample(0.85, 6)
    stderr = tokens.std(ddof=1) / math.sqrt(draws)
    assert abs(tokens.mean() - cg.paper_eq3_mean_literal(0.85, 6)) > 4 * stderr


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: cg.capped_geometric_mean(1.0, 3), r"acceptance: must be in \[0, 1\), got 1.0"),
        (lambda: cg.capped_geometric_mean(-0.1, 3), r"acceptance: must be in \[0, 1\)"),
        (lambda: cg.capped_geometric_mean(float("nan"), 3), r"acceptance: must be in \[0, 1\)"),
        (lambda: cg.capped_geometric_variance(0.5, 0), "k: block size must be an integer >= 1, got 0"),
        (lambda: cg.capped_geometric_mean(0.5, 2.5), "k: block size must be an integer >= 1, got 2.5"),
        (lambda: cg.paper_a2_variance(0.0, 2), r"p_success: must be in \(0, 1\]"),
        (lambda: cg.paper_eq3_mean(1.2, 2), r"alpha: must be in \[0, 1\)"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(PolyplanError, match=message):
        call()
