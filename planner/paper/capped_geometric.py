"""Tokens per verification: the capped geometric distribution, exact and as the paper prints it.

One verification of a block of `K` drafted tokens, each accepted independently with the
ACCEPTANCE rate `α` (Leviathan et al.'s α), emits `L = min(A, K) + 1` tokens, where `A` is the
number of acceptances before the first rejection:

    P(L = j) = α^(j-1) (1 − α)   for j = 1 … K,        P(L = K + 1) = α^K.

`derive_moments()` derives E[L] and Var[L] with sympy by summing this pmf symbolically;
the numeric functions below evaluate closed forms that the tests prove equal to that
derivation. Every function says in its parameter name which probability it takes:

- `acceptance` — the per-token acceptance rate (the quantity profiles store as `alpha`);
- `alpha_fail` — the paper's α, which the paper calls "the failure probability in each step"
  of a geometric trial whose success probability is `p = 1 − α`;
- `p_success` — the paper's Appendix A `p`.

The paper's eq. 3, μ = (1 − α^{n+1}) / (1 − α), is exactly Leviathan's expected token count
when its α is the ACCEPTANCE rate and n = K. Read literally (α = probability that a token is
rejected) it gives a different, wrong number; `paper_eq3_mean` evaluates it as printed, and
the caller decides which probability to feed it.

Appendix A.2's variance (and the σ² printed in section 3.1) is wrong: with p = 0.3 it is
−15.09 at n = 2 and −34.91 at n = 3, while the true variances of the paper's own variable
(the trial count N of a geometric capped at n trials, success probability p) are 0.21 and
0.7539. N is L with acceptance = 1 − p and K = n − 1.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from polyplan.formats.errors import PolyplanError


def check_acceptance(acceptance: float, name: str = "acceptance") -> float:
    """`acceptance` as a float in [0, 1); `PolyplanError` naming `name` otherwise."""
    try:
        value = float(acceptance)
    except (TypeError, ValueError):
        raise PolyplanError(f"{name}: must be a number in [0, 1), got {acceptance!r}") from None
    if not (math.isfinite(value) and 0.0 <= value < 1.0):
        raise PolyplanError(f"{name}: must be in [0, 1), got {acceptance!r}")
    return value


MAX_THEORY_K = 10**6  # beyond it every formula has long converged, and float powers overflow
MAX_PAPER_N = MAX_THEORY_K + 1  # the paper's n is K or K + 1


def check_block_size(k: int, name: str = "k", maximum: int = MAX_THEORY_K) -> int:
    """`k` as an int in 1..`maximum`; `PolyplanError` naming `name` otherwise."""
    if isinstance(k, bool) or not isinstance(k, int):
        if isinstance(k, float) and k.is_integer():
            k = int(k)
        else:
            raise PolyplanError(f"{name}: block size must be an integer >= 1, got {k!r}")
    if k < 1:
        raise PolyplanError(f"{name}: block size must be an integer >= 1, got {k}")
    if k > maximum:
        shown = k if k < 10**12 else f"an integer of {len(str(k))} digits"
        raise PolyplanError(f"{name}: block size must be an integer in 1..{maximum}, got {shown}")
    return k


# --------------------------------------------------------------------------- closed forms
# Written with plain arithmetic so that they accept sympy symbols as well as floats: the
# tests feed them symbols and compare with `derive_moments()`.


def _mean_expr(a: Any, k: Any) -> Any:
    return (1 - a ** (k + 1)) / (1 - a)


def _variance_expr(a: Any, k: Any) -> Any:
    return a * (1 - (2 * k + 1) * a**k * (1 - a) - a ** (2 * k + 1)) / (1 - a) ** 2


def _paper_a2_expr(p: Any, n: Any) -> Any:
    # Appendix A.2's final line, symbol for symbol:
    # Var(N) = ((1-p)[1 - (1-p)^n (n^2 - 1)] - (1-p)^{n+1} (n^2 - 1)) / p^2
    q = 1 - p
    return (q * (1 - q**n * (n**2 - 1)) - q ** (n + 1) * (n**2 - 1)) / p**2


# --------------------------------------------------------------------------- exact


def capped_geometric_mean(acceptance: float, k: int) -> float:
    """Exact E[L]: expected tokens emitted by one verification of `k` drafted tokens."""
    a = check_acceptance(acceptance)
    k = check_block_size(k)
    return float(_mean_expr(a, k))


def capped_geometric_variance(acceptance: float, k: int) -> float:
    """Exact Var[L] of the tokens emitted by one verification of `k` drafted tokens."""
    a = check_acceptance(acceptance)
    k = check_block_size(k)
    return float(_variance_expr(a, k))


def capped_geometric_pmf(acceptance: float, k: int) -> list[float]:
    """P(L = j) for j = 1 … k + 1 (index j − 1)."""
    a = check_acceptance(acceptance)
    k = check_block_size(k)
    return [a ** (j - 1) * (1 - a) for j in range(1, k + 1)] + [a**k]


def relative_variability(acceptance: float, k: int) -> float:
    """Exact σ/μ of L (Theorem 3.3's quantity, computed correctly)."""
    return math.sqrt(max(capped_geometric_variance(acceptance, k), 0.0)) / capped_geometric_mean(acceptance, k)


# --------------------------------------------------------------------------- as printed


def paper_eq3_mean(alpha: float, n: int) -> float:
    """The paper's eq. 3 as printed: μ = (1 − α^{n+1}) / (1 − α).

    The paper calls its α "the failure probability in each step"; the formula is the
    expected token count only when `alpha` is the ACCEPTANCE rate and `n` the block size.
    This function takes the number the caller chooses to call α (see `paper_eq3_mean_literal`).
    """
    a = check_acceptance(alpha, "alpha")
    n = check_block_size(n, "n", MAX_PAPER_N)
    return float(_mean_expr(a, n))


def paper_eq3_mean_literal(acceptance: float, k: int) -> float:
    """Eq. 3 fed the paper's literal reading, α = failure probability = 1 − acceptance.

    This is NOT the expected token count (it falls as acceptance rises); it exists to show
    the erratum. At acceptance 0 it takes eq. 3's limit at α → 1, which is n + 1.
    """
    a = check_acceptance(acceptance)
    k = check_block_size(k)
    if 1.0 - a == 1.0:  # acceptance 0, or so small (1e-100) that 1 - acceptance rounds to 1
        return float(k + 1)
    return paper_eq3_mean(1.0 - a, k)


def paper_a2_variance(p_success: float, n: int) -> float:
    """Appendix A.2's variance exactly as printed, in the appendix's `p` (success) and `n`.

    Its variable is N = trials of a geometric capped at `n`, success probability `p`; the
    true variance is `capped_geometric_variance(acceptance=1 - p, k=n - 1)`.
    """
    if isinstance(p_success, bool) or not (isinstance(p_success, (int, float)) and 0 < p_success <= 1):
        raise PolyplanError(f"p_success: must be in (0, 1], got {p_success!r}")
    n = check_block_size(n, "n", MAX_PAPER_N)
    return float(_paper_a2_expr(float(p_success), n))


def paper_sigma2(alpha_fail: float, n: int) -> float:
    """Section 3.1's σ² as printed, in the paper's α (A.2 with p = 1 − α)."""
    a = check_acceptance(alpha_fail, "alpha_fail")
    n = check_block_size(n, "n", MAX_PAPER_N)
    return float(_paper_a2_expr(1.0 - a, n))


def paper_eq4_relative_variability(alpha_fail: float, n: int) -> float:
    """Eq. 4 as printed: σ/μ = sqrt(α[1 − (n²−1)α^n] − (n²−1)α^{n+1}) / ((1 − α)(1 − α^n)).

    Returns NaN where the printed radicand is negative (the printed variance is then < 0,
    so eq. 4 is undefined). Note eq. 4 divides by (1 − α^n) while eq. 3 has (1 − α^{n+1}).
    """
    a = check_acceptance(alpha_fail, "alpha_fail")
    n = check_block_size(n, "n", MAX_PAPER_N)
    radicand = a * (1 - (n**2 - 1) * a**n) - (n**2 - 1) * a ** (n + 1)
    if radicand < 0 or a == 0:
        return math.nan if radicand < 0 else 0.0
    return math.sqrt(radicand) / ((1 - a) * (1 - a**n))


# --------------------------------------------------------------------------- sympy


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
    """Derive E[L], E[L²] and Var[L] with sympy from the pmf, for symbolic α and K.

    The symbolic sums carry a Piecewise for α = 1; we keep the α ≠ 1 branch, since
    α ∈ [0, 1) everywhere in polyplan.
    """
    import sympy as sp  # heavy: only when a derivation is asked for

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


def closed_form_mean(alpha: Any, k: Any) -> Any:
    """The closed form the numeric functions use, for any (possibly symbolic) arguments."""
    return _mean_expr(alpha, k)


def closed_form_variance(alpha: Any, k: Any) -> Any:
    """The closed-form variance the numeric functions use (symbolic arguments allowed)."""
    return _variance_expr(alpha, k)


def paper_a2_expression(p_success: Any, n: Any) -> Any:
    """Appendix A.2's printed variance as an expression (symbolic arguments allowed)."""
    return _paper_a2_expr(p_success, n)
