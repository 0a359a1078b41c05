"""Lemma 3.1 of the paper: the ideal forward counts φ_i and the ideal time T, as printed.

For a chain M_1 … M_n, with E[L_i] the mean acceptance length when M_i verifies what the
sub-chain below it proposes, T_i the time of one forward of M_i, N the number of tokens and the
paper's scaling factor α (here `alpha_scale`, NOT an acceptance rate):

    φ_1 = N / E[L_1]
    φ_i = N / (E[L_i] · ⌈E[L_{i−1}] / E[L_i]⌉)      for 1 < i < n
    φ_n = α · φ_{n−1}
    T   = Σ_i φ_i · T_i

The paper's convention E[L_0] = 0 would make the i = 1 ceiling ⌈0 / E[L_1]⌉ = 0, yet its own
eq. 1 reads φ_1 = N / E[L_1]: so the i = 1 term has no ceiling factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from polyplan.formats.errors import PolyplanError


@dataclass(frozen=True)
class IdealTime:
    """Lemma 3.1's result: φ_i per model (M_1 first), the time T and its per-model terms."""

    phi: tuple[float, ...]
    terms: tuple[float, ...]
    total: float
    ceilings: tuple[int, ...]  # ⌈E[L_{i−1}]/E[L_i]⌉ per verifying level (1 for i = 1)


def check_positive(value: float, name: str) -> float:
    """`value` as a float, or a PolyplanError naming `name` unless it is a finite number > 0."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PolyplanError(f"{name}: must be a number > 0, got {value!r}") from None
    if not (math.isfinite(number) and number > 0):
        raise PolyplanError(f"{name}: must be a finite number > 0, got {value!r}")
    return number


def ideal_time(
    mean_lengths: Sequence[float],
    times: Sequence[float],
    *,
    alpha_scale: float,
    n_tokens: float = 1.0,
) -> IdealTime:
    """Lemma 3.1 for n = len(times) models, exactly as printed.

    Args:
        mean_lengths: E[L_1] … E[L_{n−1}] (one per verifying level, top first).
        times: T_1 … T_n, the average forward time of each model (any unit; T has that unit).
        alpha_scale: the paper's scaling factor α (> 0) in φ_n = α φ_{n−1}; for a drafter that
            proposes K tokens per verification, α = K counts its forward passes.
        n_tokens: N, the number of tokens generated (1 gives time per token).
    """
    n = len(times)
    if n < 2:
        raise PolyplanError(f"times: Lemma 3.1 needs at least 2 models, got {n}")
    if len(mean_lengths) != n - 1:
        raise PolyplanError(f"mean_lengths: need {n - 1} values (one per verifying level), got {len(mean_lengths)}")
    lengths = [check_positive(value, f"mean_lengths[{index}]") for index, value in enumerate(mean_lengths)]
    t = [check_positive(value, f"times[{index}]") for index, value in enumerate(times)]
    scale = check_positive(alpha_scale, "alpha_scale")
    big_n = check_positive(n_tokens, "n_tokens")

    phi: list[float] = [big_n / lengths[0]]
    ceilings: list[int] = [1]
    for i in range(1, n - 1):  # 0-based i is the paper's i + 1, i.e. 1 < i + 1 < n
        ceiling = math.ceil(lengths[i - 1] / lengths[i])
        ceilings.append(ceiling)
        phi.append(big_n / (lengths[i] * ceiling))
    phi.append(scale * phi[-1])
    terms = tuple(p * time for p, time in zip(phi, t))
    return IdealTime(phi=tuple(phi), terms=terms, total=math.fsum(terms), ceilings=tuple(ceilings))
