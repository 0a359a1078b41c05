"""Summaries of repeated measurements: median and IQR, cluster bootstrap intervals, quantiles.

Pure numpy. The bootstrap resamples whole *clusters* (prompts): observations within one prompt
are correlated, so resampling them one by one would give intervals that are too narrow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

_QUANTILE_LEVELS = (0.1, 0.25, 0.5, 0.75, 0.9)


_OUTLIER_FENCE = 3.0  # Tukey's "far out" fences: Q1 − 3 IQR, Q3 + 3 IQR


@dataclass(frozen=True)
class Spread:
    """Median and interquartile range of repeated timings (seconds); from `robust_spread`, of the
    timings `kept`, `outliers` of the `repeats + outliers` taken dropped by the fence rule."""

    median: float
    iqr: float
    repeats: int
    outliers: int = 0
    kept: tuple[float, ...] = ()

    @property
    def relative_iqr(self) -> float:
        """IQR / median: the noise figure the profiler reports for T_i(1)."""
        return self.iqr / self.median if self.median > 0 else float("nan")


def spread(samples: Sequence[float]) -> Spread:
    """Median and IQR (numpy's linear interpolation) of at least one sample."""
    values = np.asarray(samples, dtype=float)
    if values.size == 0:
        raise ValueError("spread: need at least one sample")
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return Spread(median=float(median), iqr=float(q3 - q1), repeats=int(values.size))


def outlier_mask(samples: Sequence[float], fence: float = _OUTLIER_FENCE) -> np.ndarray:
    """True for each sample outside Tukey's fences [Q1 − fence·IQR, Q3 + fence·IQR]: a pass slowed
    by a burst of background load is dropped instead of averaged in. With fewer than 4 samples
    nothing is flagged (quartiles of 3 values say nothing about tails)."""
    values = np.asarray(samples, dtype=float)
    if values.size < 4:
        return np.zeros(values.shape, dtype=bool)
    q1, q3 = np.percentile(values, [25, 75])
    width = q3 - q1
    return (values < q1 - fence * width) | (values > q3 + fence * width)


def robust_spread(samples: Sequence[float], fence: float = _OUTLIER_FENCE) -> Spread:
    """`spread` of the samples inside the fences of `outlier_mask`, with the dropped count and
    the kept samples (what the planner's bootstrap resamples)."""
    values = np.asarray(samples, dtype=float)
    if values.size == 0:
        raise ValueError("robust_spread: need at least one sample")
    outside = outlier_mask(values, fence)
    kept = values[~outside]
    summary = spread(kept)
    return Spread(summary.median, summary.iqr, summary.repeats, int(outside.sum()), tuple(float(v) for v in kept))


@dataclass(frozen=True)
class Interval:
    """A percentile bootstrap confidence interval at `level` (e.g. 0.95)."""

    low: float
    high: float
    level: float


def cluster_bootstrap(
    clusters: Sequence[Sequence[float]],
    statistic: Callable[[np.ndarray], float],
    *,
    resamples: int,
    level: float,
    rng: np.random.Generator,
) -> Interval:
    """Percentile interval of `statistic(pooled observations)` over cluster resamples.

    Each resample draws len(clusters) clusters with replacement and pools their observations.
    Empty clusters are allowed (they contribute nothing); at least one must be non-empty.
    """
    arrays = [np.asarray(cluster, dtype=float) for cluster in clusters]
    if not any(array.size for array in arrays):
        raise ValueError("cluster_bootstrap: no observations")
    values = []
    count = len(arrays)
    picks = rng.integers(0, count, size=(resamples, count))
    for row in picks:
        pooled = np.concatenate([arrays[i] for i in row])
        if pooled.size:
            values.append(statistic(pooled))
    low, high = np.percentile(values, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return Interval(low=float(low), high=float(high), level=level)


def quantile_summary(values: np.ndarray, levels: Sequence[float] = _QUANTILE_LEVELS) -> dict[str, float]:
    """Quantiles of `values` keyed by the level as a string ("0.1", "0.5", …)."""
    points = np.quantile(np.asarray(values, dtype=float), list(levels))
    return {str(level): float(point) for level, point in zip(levels, points)}


def lag1_autocorrelation(sequences: Sequence[np.ndarray]) -> float | None:
    """Lag-1 autocorrelation of values along each sequence, pooled over sequences.

    Uses the pooled mean and variance; pairs never straddle two sequences. None when there
    is no pair or no variance (a constant sequence has no defined correlation).
    """
    pooled = np.concatenate([np.asarray(s, dtype=float) for s in sequences]) if sequences else np.zeros(0)
    if pooled.size < 2:
        return None
    mean = pooled.mean()
    variance = ((pooled - mean) ** 2).mean()
    if variance <= 1e-15:
        return None
    products, pairs = 0.0, 0
    for sequence in sequences:
        centred = np.asarray(sequence, dtype=float) - mean
        if centred.size >= 2:
            products += float((centred[:-1] * centred[1:]).sum())
            pairs += centred.size - 1
    if pairs == 0:
        return None
    return float(np.clip(products / pairs / variance, -1.0, 1.0))
