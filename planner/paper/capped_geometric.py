"""Tokens per verification: the capped geometric distribution, exact and as the paper prints it.

One verification of a block of `K` drafted tokens, each accepted independently with the
ACCEPTANCE rate `α` (Leviathan et al.'s α), emits `L = min(A, K) + 1` tokens, where `A` is the
number of acceptances before the first rejection:

    P(L = j) = α^(j-1) (1 − α)   for j = 1 … K,        P(L = K + 1) = α^K.

The numeric functions evaluate closed forms (`closed_form_mean`, `closed_form_variance`) that
tests/test_planner_capped_geometric.py proves equal, with sympy, to the sums of this pmf. Every
function says in its parameter name which probability it takes:

- `acceptance` — the per-token acceptance rate (the quantity profiles store as `alpha`);
- `alpha_fail` — the paper's α, which the paper calls "the failure probability in each step"
  of a geometric trial whose success probability is `p = 1 − α`;
- `p_success` — the paper's Appendix A `p`.

The `paper_*` functions evaluate the paper's formulas as printed; where and why they are wrong:
docs/theory.md, "The errata".
"""

from __future__ import annotations

import math
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


_MAX_THEORY_K = 10**6  # beyond it every formula has long converged, and float powers overflow
_MAX_PAPER_N = _MAX_THEORY_K + 1  # the paper's n is K or K + 1


def check_block_size(k: int, name: str = "k", maximum: int = _MAX_THEORY_K) -> int:
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
# tests feed them symbols and compare with the sympy sums of the pmf.


def closed_form_mean(a: Any, k: Any) -> Any:
    """E[L] at acceptance `a` and block size `k` (symbolic arguments allowed)."""
    return (1 - a ** (k + 1)) / (1 - a)


def closed_form_variance(a: Any, k: Any) -> Any:
    """Var[L] at acceptance `a` and block size `k` (symbolic arguments allowed)."""
    return a * (1 - (2 * k + 1) * a**k * (1 - a) - a ** (2 * k + 1)) / (1 - a) ** 2


def paper_a2_expression(p: Any, n: Any) -> Any:
    """Appendix A.2's printed variance, symbol for symbol (symbolic arguments allowed):
    Var(N) = ((1-p)[1 - (1-p)^n (n^2 - 1)] - (1-p)^{n+1} (n^2 - 1)) / p^2."""
    q = 1 - p
    return (q * (1 - q**n * (n**2 - 1)) - q ** (n + 1) * (n**2 - 1)) / p**2


# --------------------------------------------------------------------------- exact


def capped_geometric_mean(acceptance: float, k: int) -> float:
    """Exact E[L]: expected tokens emitted by one verification of `k` drafted tokens."""
    a = check_acceptance(acceptance)
    k = check_block_size(k)
    return float(closed_form_mean(a, k))


def capped_geometric_variance(acceptance: float, k: int) -> float:
    """Exact Var[L] of the tokens emitted by one verification of `k` drafted tokens."""
    a = check_acceptance(acceptance)
    k = check_block_size(k)
    return float(closed_form_variance(a, k))


def relative_variability(acceptance: float, k: int) -> float:
    """Exact σ/μ of L (Theorem 3.3's quantity, computed correctly)."""
    return math.sqrt(max(capped_geometric_variance(acceptance, k), 0.0)) / capped_geometric_mean(acceptance, k)


# --------------------------------------------------------------------------- as printed


def paper_eq3_mean(alpha: float, n: int) -> float:
    """The paper's eq. 3 as printed, μ = (1 − α^{n+1}) / (1 − α), for whatever number the caller
    calls α: the expected token count only when it is the ACCEPTANCE rate and `n` the block size."""
    a = check_acceptance(alpha, "alpha")
    n = check_block_size(n, "n", _MAX_PAPER_N)
    return float(closed_form_mean(a, n))


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
    n = check_block_size(n, "n", _MAX_PAPER_N)
    return float(paper_a2_expression(float(p_success), n))


def paper_sigma2(alpha_fail: float, n: int) -> float:
    """Section 3.1's σ² as printed, in the paper's α (A.2 with p = 1 − α)."""
    a = check_acceptance(alpha_fail, "alpha_fail")
    n = check_block_size(n, "n", _MAX_PAPER_N)
    return float(paper_a2_expression(1.0 - a, n))


def paper_eq4_relative_variability(alpha_fail: float, n: int) -> float:
    """Eq. 4 as printed: σ/μ = sqrt(α[1 − (n²−1)α^n] − (n²−1)α^{n+1}) / ((1 − α)(1 − α^n)).

    Returns NaN where the printed radicand is negative (the printed variance is then < 0,
    so eq. 4 is undefined). Note eq. 4 divides by (1 − α^n) while eq. 3 has (1 − α^{n+1}).
    """
    a = check_acceptance(alpha_fail, "alpha_fail")
    n = check_block_size(n, "n", _MAX_PAPER_N)
    radicand = a * (1 - (n**2 - 1) * a**n) - (n**2 - 1) * a ** (n + 1)
    if radicand < 0 or a == 0:
        return math.nan if radicand < 0 else 0.0
    return math.sqrt(radicand) / ((1 - a) * (1 - a**n))
