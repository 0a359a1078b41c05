"""A last drafter's rounds, as measured: the joint law of tokens drafted and accepted.

A rule drafter (`kind: ngram-simple`) drafts only where the context repeats itself, so a call hands
up 0 to K tokens, and how many it drafts and how many are kept are properties of the stream, which
no per-token rate says. Replayed on the target's greedy streams (`planner.exact.ngram_replay`),
every round is known; the exact model reads the law P(drafted = m, accepted = a) in place of
"K tokens, rate α". A model drafter under a draft policy is read the same way, its rounds replayed
on its agreement sequences (`planner.exact.policy_replay`): one pass per drafted token, and one
more in a round a confidence stop ended (`stops`). Counts are kept per prompt, the clusters the
bootstrap resamples. Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyplan.formats.errors import PolyplanError


@dataclass(frozen=True, eq=False)
class DraftRounds:
    """Rounds of a drafter at the last level, pooled over prompts.

    Attributes:
        counts: `(prompts, K + 1, K + 1)`: counts[p, m, a] = rounds of prompt p that drafted m
            tokens of which the verifier accepted the first a (a <= m); K the most drafted.
        model_drafter: False: a rule drafter, one call per round whatever it drafts; True: a
            model drafter, one pass per drafted token (and per stop).
        stops: `(prompts, K + 1)`: stops[p, m] = rounds of prompt p that drafted m tokens and
            then ran one pass more whose token they did not draft (a confidence stop); None: none.
    """

    counts: np.ndarray
    model_drafter: bool = False
    stops: np.ndarray | None = None

    def __post_init__(self) -> None:
        counts = self.counts
        if counts.ndim != 3 or counts.shape[1] != counts.shape[2] or counts.shape[1] < 1:
            raise PolyplanError(f"draft rounds: counts must have shape (prompts, K + 1, K + 1), got {counts.shape}")
        if counts.sum() <= 0:
            raise PolyplanError("draft rounds: no round recorded")
        if np.triu(counts.sum(axis=0), k=1).any():
            raise PolyplanError("draft rounds: a round accepted more tokens than it drafted")
        if self.stops is not None and (self.stops.shape != counts.shape[:2] or (self.stops > counts.sum(axis=2)).any()):
            raise PolyplanError(f"draft rounds: stops must have shape {counts.shape[:2]} and count at most the rounds of each length")

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
        if pooled.sum() <= 0:
            return self
        stops = None if self.stops is None else np.tensordot(weights, self.stops, axes=1)[None]
        return DraftRounds(pooled[None], self.model_drafter, stops)

    def joint(self) -> np.ndarray:
        """P(m, a) `(K + 1, K + 1)`, pooled over prompts."""
        pooled = self.counts.sum(axis=0)
        return pooled / pooled.sum()

    def drafted_pmf(self) -> np.ndarray:
        """P(m = j), j = 0 … K."""
        return self.joint().sum(axis=1)

    def passes_pmf(self) -> np.ndarray:
        """A model drafter's passes per round: P(passes = j), j = 0 … K + 1 (m, or m + 1 after
        a confidence stop)."""
        rounds = self.counts.sum(axis=(0, 2))  # [K + 1] by m
        stopped = np.zeros_like(rounds) if self.stops is None else self.stops.sum(axis=0)
        passes = np.zeros(len(rounds) + 1)
        passes[:-1] += rounds - stopped
        passes[1:] += stopped
        return passes / passes.sum()

    def all_accepted_unfed(self) -> float:
        """A model drafter's share of rounds after which it has two tokens to feed: it drafted
        m >= 1, all were accepted, and it did not stop on confidence (a stop's extra pass already
        fed its last draft). Stops are taken as independent of full acceptance given m (the rounds
        record them by m only). docs/cost-model.md, "The drafter's catch-up pass"."""
        joint = self.joint()
        rounds = self.counts.sum(axis=(0, 2))  # [K + 1] by m
        stopped = np.zeros_like(rounds) if self.stops is None else self.stops.sum(axis=0)
        unstopped = np.divide(rounds - stopped, rounds, out=np.zeros(len(rounds)), where=rounds > 0)
        return float(sum(joint[m, m] * unstopped[m] for m in range(1, len(rounds))))

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
