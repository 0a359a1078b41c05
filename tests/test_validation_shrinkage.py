"""The self-check's C weighed by its evidence (`validation.shrinkage`): clear evidence keeps the
correction (the negative control: an exact model off by a known factor on a quiet machine is still
corrected), noisy evidence of a model that is about right moves the point little and widens the
interval, and over many simulated checks the weighed C is nearer the truth than the measured one."""

from __future__ import annotations

import math

import numpy as np
import pytest

from polyplan.validation.shrinkage import (
    PRIOR_FLOOR, CheckEvidence, bootstrap_variance, floor_variance, pass_variance, weigh,
)

CHAINS = (("t", "d", "n"), ("t", "i", "d", "n"), ("t", "i", "n"))


def test_a_quiet_check_of_a_model_off_by_a_known_factor_keeps_the_correction():
    evidence = {chain: CheckEvidence(math.log(1.3) + offset, 0.02**2, ()) for chain, offset in zip(CHAINS, (0.0, 0.02, -0.02))}
    weighed = weigh(evidence, shared_variance=0.02**2)
    for chain, term in weighed.items():
        assert term.weight > 0.95
        assert term.composition == pytest.approx(math.exp(evidence[chain].log_c), rel=0.02)
        assert term.low < term.composition < term.high and term.low > 1.15  # the interval excludes "the model was right"


def test_a_noisy_check_of_a_model_about_right_moves_little_and_widens():
    measured = (0.90, 0.95, 1.06)
    evidence = {chain: CheckEvidence(math.log(c), 0.03**2, ()) for chain, c in zip(CHAINS, measured)}
    noisy = weigh(evidence, shared_variance=floor_variance(0.31))  # the floor's IQR/median a noisy machine reads
    for chain, c in zip(CHAINS, measured):
        term = noisy[chain]
        assert term.weight < 0.35
        assert abs(math.log(term.composition)) < 0.35 * abs(math.log(c))
        assert term.high / term.low > math.exp(2 * 1.96 * PRIOR_FLOOR * 0.7)  # wider than a point: uncertainty stated
    # control: the same measured C on a quiet machine is mostly kept
    quiet = weigh(evidence, shared_variance=0.0)
    assert quiet[CHAINS[0]].weight > noisy[CHAINS[0]].weight
    assert quiet[CHAINS[0]].composition < noisy[CHAINS[0]].composition < 1.0


def test_pass_variance_pools_each_chains_spread_of_passes():
    evidence = [CheckEvidence(0.0, 0.0, (0.1, -0.1)), CheckEvidence(0.0, 0.0, (0.2, 0.0)), CheckEvidence(0.0, 0.0, ())]
    # sums of squares 0.02 and 0.02 on 2 degrees of freedom, over 2 passes: the variance of a mean of two
    assert pass_variance(evidence) == pytest.approx(0.04 / 2 / 2)
    assert pass_variance([CheckEvidence(0.0, 0.0, ())]) is None


def test_floor_and_bootstrap_variances():
    assert floor_variance(None) == 0.0 and floor_variance(0.0) == 0.0
    assert floor_variance(0.1) < floor_variance(0.3)
    assert floor_variance(0.3) == pytest.approx((0.5 * math.log(1.3) / 1.349) ** 2)
    assert bootstrap_variance(1.0, math.exp(-0.196), math.exp(0.196)) == pytest.approx(0.1**2, rel=1e-3)


@pytest.mark.parametrize("true_c", [1.0, 1.08, 1.3])
def test_weighed_c_is_nearer_the_truth_than_the_measured_one_and_its_interval_covers_it(true_c):
    """Simulated checks: three chains share the machine's noise of the check (sd 0.08) and each has
    its prompts' (sd 0.03); the exact model is off by `true_c` on every chain."""
    rng = np.random.default_rng(1)
    shared_sd, prompt_sd, trials = 0.08, 0.03, 2000
    raw_error, weighed_error, covered = [], [], 0
    for _ in range(trials):
        shared = rng.normal(0.0, shared_sd)
        evidence = {chain: CheckEvidence(math.log(true_c) + shared + rng.normal(0.0, prompt_sd), prompt_sd**2, ())
                    for chain in CHAINS}
        weighed = weigh(evidence, shared_variance=shared_sd**2)
        for chain in CHAINS:
            raw_error.append((evidence[chain].log_c - math.log(true_c)) ** 2)
            weighed_error.append((math.log(weighed[chain].composition) - math.log(true_c)) ** 2)
            covered += weighed[chain].low <= true_c <= weighed[chain].high
    coverage = covered / (trials * len(CHAINS))
    if true_c == 1.0:
        assert np.mean(weighed_error) < 0.5 * np.mean(raw_error)  # a right model is left nearly alone
    else:  # a wrong one is corrected about as well as measured (shrinking costs a little where C is far from 1)
        assert math.sqrt(np.mean(weighed_error)) < 1.2 * math.sqrt(np.mean(raw_error))
    assert coverage > 0.85
