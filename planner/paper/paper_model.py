"""The paper's model of a concrete chain: Lemma 3.1 fed from a profile.

Per verifying level i, E[L_i] is the decoded μ measured at K_i when the profile has it
("decoded"), else eq. 3 with the pair's acceptance rate ("eq3"); T_i is T_i(1), one number per
model as in the paper (so the model ignores how verification grows with the tokens verified);
the scaling factor α is K_{n−1}, the passes the smallest drafter makes per verification, which
is what φ_n = α φ_{n−1} counts in the paper's eq. 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from polyplan.planner.paper.capped_geometric import paper_eq3_mean
from polyplan.planner.paper.lemma31 import ideal_time
from polyplan.formats.profile import SamplingStats


@dataclass(frozen=True)
class PaperPrediction:
    """Lemma 3.1 for one chain: φ_i per emitted token (N = 1), time per token and speedup."""

    mean_lengths: tuple[float, ...]  # E[L_i] per level
    length_sources: tuple[str, ...]  # "decoded" or "eq3" per level
    phi_per_token: tuple[float, ...]  # φ_i / N per model, M_1 first
    time_per_token: float  # T / N
    speedup: float  # T_1 / (T / N)
    alpha_scale: float


def mean_length(stats: SamplingStats, k: int) -> tuple[float, str]:
    """E[L] of a pair at block size k: the decoded μ if measured at k, else eq. 3 from α."""
    decoded = stats.decoded_at(k)
    if decoded is not None:
        return decoded.mu, "decoded"
    return paper_eq3_mean(stats.alpha, k), "eq3"


def paper_prediction(pair_stats: Sequence[SamplingStats], times: Sequence[float], block_sizes: Sequence[int]) -> PaperPrediction:
    """Lemma 3.1's prediction for a chain with `times` T_i(1) and adjacent-pair statistics."""
    if len(times) == 1:
        return PaperPrediction((), (), (1.0,), float(times[0]), 1.0, 0.0)
    lengths, sources = zip(*(mean_length(stats, k) for stats, k in zip(pair_stats, block_sizes)))
    scale = float(block_sizes[-1])
    result = ideal_time(lengths, times, alpha_scale=scale)
    return PaperPrediction(
        mean_lengths=tuple(lengths),
        length_sources=tuple(sources),
        phi_per_token=result.phi,
        time_per_token=result.total,
        speedup=float(times[0]) / result.total,
        alpha_scale=scale,
    )
