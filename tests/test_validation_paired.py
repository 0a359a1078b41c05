"""Paired per-prompt speedups and their CIs (validation.paired), and the checks built on them.

Statistical tests draw decode times from known distributions: per prompt a base cost, per
(prompt, repeat) independent log-normal timing noise (sd 10%) on both runs of a pair, so the
true speedup is known. Coverage: 40 simulated validations of 8 prompts x 3 repeats, 95% CIs,
at least 30 must contain the truth (a correct 95% interval fails that with probability
< 1e-4); the negative control states a truth 15% off, which must be covered far less often.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from polyplan.validation.paired import paired_speedup, ratio_interval
from polyplan.validation.results import ChainSpec, RunRecord, headline, summarise_chain
from polyplan.formats.plan import ExactRecord, PaperRecord, PlannedChain
from polyplan.validation.results import CHECK_FASTEST, CHECK_HOLDS, ROLE_ALTERNATIVE, ROLE_RECOMMENDED, ROLE_TARGET_ONLY


def simulated(rng: np.random.Generator, speedup: float, prompts: int = 8, repeats: int = 3):
    cost = rng.uniform(0.5, 2.0, size=(prompts, 1))  # prompts differ in length/difficulty
    base = cost * np.exp(0.1 * rng.standard_normal((prompts, repeats)))
    chain = cost / speedup * np.exp(0.1 * rng.standard_normal((prompts, repeats)))
    return chain, base


def test_the_paired_ci_covers_the_true_speedup():
    rng = np.random.default_rng(0)
    results = [paired_speedup(*simulated(rng, 2.0), resamples=400) for _ in range(40)]
    assert sum(r.contains(2.0) for r in results) >= 30


def test_negative_control_a_wrong_truth_is_rarely_covered():
    rng = np.random.default_rng(0)
    results = [paired_speedup(*simulated(rng, 2.0), resamples=400) for _ in range(40)]
    assert sum(r.contains(2.3) for r in results) < 30


def test_one_slowed_pass_does_not_move_the_estimate():
    """The issue's run 2: one target-only pass slowed 3x made a repeat read 4.82x and the mean
    of repeats 2.75x. The median over repeats per prompt ignores it; the mean does not."""
    base = np.full((4, 3), 1.0)
    chain = np.full((4, 3), 1.0 / 1.75)
    slowed = base.copy()
    slowed[:, 0] *= 3.0  # the whole first repeat of target-only decoding was disturbed
    clean = paired_speedup(chain, base)
    disturbed = paired_speedup(chain, slowed)
    assert disturbed.point == pytest.approx(clean.point) == pytest.approx(1.75)
    naive = np.mean(slowed.sum(axis=0) / chain.sum(axis=0))  # the old mean over repeats
    assert naive > 2.5  # negative control: the old estimate is dragged up by the one repeat


def test_shapes_and_values_are_checked():
    with pytest.raises(ValueError):
        paired_speedup(np.ones((2, 3)), np.ones((3, 2)))
    with pytest.raises(ValueError):
        paired_speedup(np.zeros((2, 2)), np.ones((2, 2)))


def test_ratio_interval_pairs_the_draws_of_two_chains():
    rng = np.random.default_rng(1)
    chain, base = simulated(rng, 2.0)
    same = paired_speedup(chain, base)
    faster = paired_speedup(chain / 1.3, base)
    gap = ratio_interval(faster, same)
    assert gap.point == pytest.approx(1.3) and not gap.includes_one
    assert ratio_interval(same, same).includes_one


# ---------------------------------------------------------------- the checks on validation results


def _planned(chain, exact, interval):
    levels = len(chain) - 1
    return PlannedChain(
        chain=chain, block_sizes=(4,) * levels,
        exact=ExactRecord(speedup=exact, acceptances=(0.8,) * levels, forwards_per_token=(0.5,) * len(chain),
                          tokens_per_verification=(2.0,) * levels, drafted_per_verification=(4.0,) * levels,
                          time_per_token_s=(0.001,) * len(chain), overhead_per_token_s=0.0, interval=interval),
        paper=PaperRecord(speedup=exact, phi_per_token=(0.5,) * len(chain), mean_lengths=(2.0,) * levels),
    )


def _runs(index, times, levels):
    return [
        RunRecord(chain=index, repeat=r, prompt=p, decode_s=float(times[p, r]), prefill_s=0.01, token_ids=(1, 2, 3, 4),
                  forward_passes=(2,) * levels, forward_seconds=(0.001,) * levels,
                  tokens_per_verification=((2, 2),) + ((),) * (levels - 1), tokens_drafted=(4,) + (0,) * (levels - 1),
                  tokens_accepted=(2,) + (0,) * (levels - 1))
        for p in range(times.shape[0]) for r in range(times.shape[1])
    ]


def _validate(recommended_speedup, other_speedup, *, interval=(1.6, 1.9), predicted=1.75, seed=3):
    """Recommended chain (predicted `predicted` [interval]), one alternative, target-only; 8 prompts x 3 repeats."""
    rng = np.random.default_rng(seed)
    cost = rng.uniform(0.5, 2.0, size=(8, 1))
    noise = lambda: np.exp(0.03 * rng.standard_normal((8, 3)))  # noqa: E731
    base = cost * noise()
    specs = [
        ChainSpec(_planned(("t", "d"), predicted, interval), (ROLE_RECOMMENDED,), 1),
        ChainSpec(_planned(("t", "d", "n"), 1.7, (1.5, 1.9)), (ROLE_ALTERNATIVE,), 2),
        ChainSpec(_planned(("t",), 1.0, (1.0, 1.0)), (ROLE_TARGET_ONLY,), 3),
    ]
    times = [cost / recommended_speedup * noise(), cost / other_speedup * noise(), base]
    baseline = _runs(2, base, 1)
    chains = [summarise_chain(spec, _runs(i, t, len(spec.planned.chain)), baseline, greedy=True)
              for i, (spec, t) in enumerate(zip(specs, times))]
    return chains, headline(chains)


def test_ranking_check_fails_when_the_recommended_chain_is_clearly_slower():
    """Negative control, the issue's run 2: recommended 1.76x, the alternative 2.75x, low noise."""
    chains, head = _validate(1.76, 2.75)
    assert head.record.fastest == "t > d > n" and head.record.recommended_within_noise is False
    assert head.find(CHECK_FASTEST).passed is False
    assert head.record.fastest_over_recommended is not None and head.record.fastest_over_recommended.low > 1.0


def test_ranking_check_passes_when_the_two_are_within_noise():
    chains, head = _validate(1.76, 1.765)
    assert head.record.recommended_within_noise is True
    assert head.find(CHECK_FASTEST).passed is True


def test_a_prediction_holds_only_inside_its_interval_and_within_ten_percent():
    chains, head = _validate(1.76, 1.70)
    assert chains[0].prediction_holds is True and chains[0].inside_interval is True
    outside, _ = _validate(1.45, 1.70)  # 1.45x against 1.75 [1.6, 1.9]: outside and 17% off
    assert outside[0].prediction_holds is False
    wide, _ = _validate(1.55, 1.70, interval=(1.2, 2.3))  # inside a wide interval but 13% off
    assert wide[0].inside_interval is True and wide[0].prediction_holds is False
    assert head.find(CHECK_HOLDS).passed is True


def test_error_sources_split_latency_acceptance_and_noise():
    chains, _ = _validate(1.76, 1.70)
    staged = dataclasses.replace(chains[0], predicted=dataclasses.replace(chains[0].predicted, retimed=1.80, reaccepted=1.70))
    sources = staged.error_sources
    measured = staged.measured_speedup
    assert sources.total == pytest.approx(1.75 / measured - 1)
    assert sources.latency == pytest.approx(1.75 / 1.80 - 1)
    assert sources.acceptance == pytest.approx(1.80 / 1.70 - 1)
    assert sources.residual == pytest.approx(1.70 / measured - 1)
    assert (1 + sources.latency) * (1 + sources.acceptance) * (1 + sources.residual) == pytest.approx(1 + sources.total)
    assert sources.tokens_per_pass == pytest.approx(0.0)  # predicted 2.0 tokens per target pass, measured 2.0
    assert 0 < sources.noise < 0.05
    only_retimed = dataclasses.replace(chains[0], predicted=dataclasses.replace(chains[0].predicted, retimed=1.80)).error_sources
    assert only_retimed.acceptance is None and only_retimed.after_latency == pytest.approx(1.80 / measured - 1)
    assert len(staged.measured.prompts) == 8 and staged.measured.prompts[0].target_passes == 2
