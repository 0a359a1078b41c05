"""Summaries: the cluster bootstrap's coverage, quantiles, autocorrelation."""

from __future__ import annotations

import numpy as np
import pytest

from polyplan.profiler.stats import cluster_bootstrap, lag1_autocorrelation, quantile_summary


def _clustered(rng: np.random.Generator, clusters: int, size: int) -> list[np.ndarray]:
    """Observations whose cluster means vary (sd 1) much more than within a cluster (sd 0.3);
    the true mean is 0."""
    return [rng.normal(rng.normal(0.0, 1.0), 0.3, size) for _ in range(clusters)]


def test_cluster_bootstrap_covers_clustered_data_where_the_naive_one_does_not():
    """100 data sets of 16 clusters x 20 observations, 95% intervals from 200 resamples each.
    The cluster bootstrap covers the true mean in about 95% of data sets (it must reach 85%:
    below that is a failure at significance ~1e-5 for n = 100); the negative control, which
    resamples single observations as if independent, is far too narrow (coverage under 50%)."""
    rng = np.random.default_rng(0)
    covered = naive_covered = 0
    trials = 100
    for _ in range(trials):
        data = _clustered(rng, 16, 20)
        interval = cluster_bootstrap(data, np.mean, resamples=200, level=0.95, rng=rng)
        covered += interval.low <= 0.0 <= interval.high
        singles = [np.array([x]) for x in np.concatenate(data)]
        naive = cluster_bootstrap(singles, np.mean, resamples=200, level=0.95, rng=rng)
        naive_covered += naive.low <= 0.0 <= naive.high
    assert covered / trials >= 0.85
    assert naive_covered / trials < 0.5


def test_bootstrap_edge_cases():
    rng = np.random.default_rng(1)
    interval = cluster_bootstrap([[], [2.0, 2.0], [2.0]], np.mean, resamples=50, level=0.9, rng=rng)
    assert (interval.low, interval.high, interval.level) == (2.0, 2.0, 0.9)
    with pytest.raises(ValueError):
        cluster_bootstrap([[], []], np.mean, resamples=10, level=0.9, rng=rng)


def test_quantiles_and_autocorrelation():
    values = np.arange(11) / 10
    assert quantile_summary(values) == pytest.approx({"0.1": 0.1, "0.25": 0.25, "0.5": 0.5, "0.75": 0.75, "0.9": 0.9})
    assert lag1_autocorrelation([np.repeat([1.0, 0.0], 50)]) > 0.9
    assert lag1_autocorrelation([np.tile([1.0, 0.0], 50)]) < -0.9
    rng = np.random.default_rng(2)
    assert abs(lag1_autocorrelation([rng.random(4000)])) < 0.06  # i.i.d.: |r| ~ 1/sqrt(n) = 0.016
    assert lag1_autocorrelation([np.ones(5)]) is None
    assert lag1_autocorrelation([np.array([1.0]), np.array([0.0])]) is None  # no pair within a sequence
