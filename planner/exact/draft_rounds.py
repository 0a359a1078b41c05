"""A rule drafter's rounds, as measured: the joint law of tokens drafted and accepted.

A model drafter under the exact model drafts exactly K tokens per call and each is accepted
with rate α (or by the measured acceptance runs). A rule drafter (`kind: ngram-simple`) drafts
only where the context repeats itself: a call hands up anywhere from 0 to K tokens, and how
many it drafts and how many of those the verifier keeps are properties of the stream, which
no per-token rate says. Replayed on the target's own greedy streams (`planner.exact.ngram_replay`),
every round is known exactly; the exact model then reads their joint law
P(drafted = m, accepted = a) in place of "K tokens, rate α" (`planner.exact.cost_model`).

The law is kept as counts per prompt (the prompts are the clusters a bootstrap resamples:
`planner.intervals.prediction_interval`). Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyplan.formats.errors import PolyplanError


@dataclass(frozen=True, eq=False)
class DraftRounds:
    """Rounds of a rule drafter at one block size, pooled over prompts.

    Attributes:
        counts: `(prompts, K + 1, K + 1)`: counts[p, m, a] = rounds of prompt p that drafted m
            tokens of which the verifier accepted the first a (a <= m).
    """

    counts: np.ndarray

    def __post_init__(self) -> None:
        counts = self.counts
        if counts.ndim != 3 or counts.shape[1] != counts.shape[2] or counts.shape[1] < 1:
            raise PolyplanError(f"draft rounds: counts must have shape (prompts, K + 1, K + 1), got {counts.shape}")
        if counts.sum() <= 0:
            raise PolyplanError("draft rounds: no round recorded")
        if np.triu(counts.sum(axis=0), k=1).any():
            raise PolyplanError("draft rounds: a round accepted more tokens than it drafted")

    @property
    def max_drafted(self) -> int:
        return self.counts.shape[1] - 1

    @property
    def rounds(self) -> int:
        return int(self.counts.sum())

    def resampled(self, weights: np.ndarray) -> "DraftRounds":
        """The same rounds with prompt p counted `weights[p]` times (a bootstrap replicate; all
        of them when the weights drew no round)."""
        pooled = np.tensordot(weights, self.counts, axes=1)
        return DraftRounds(pooled[None]) if pooled.sum() > 0 else self

    def joint(self) -> np.ndarray:
        """P(m, a) `(K + 1, K + 1)`, pooled over prompts."""
        pooled = self.counts.sum(axis=0)
        return pooled / pooled.sum()

    def drafted_pmf(self) -> np.ndarray:
        """P(m = j), j = 0 … K."""
        return self.joint().sum(axis=1)

    def gathered_given_drafted(self) -> np.ndarray:
        """G[m, j] = P(a + 1 = j | m), `(K + 1, K + 2)`; rows of an m never drafted put all
        their mass on j = 1 (they are never read: their drafted probability is 0)."""
        joint = self.joint()
        size = joint.shape[0]
        table = np.zeros((size, size + 1))
        mass = joint.sum(axis=1)
        for m in range(size):
            if mass[m] > 0:
                table[m, 1:] = joint[m] / mass[m]
            else:
                table[m, 1] = 1.0
        return table
