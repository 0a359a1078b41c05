"""The exact cost model (DP) against the Monte-Carlo simulation of the recursion."""

from __future__ import annotations

import numpy as np
import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.planner.paper.capped_geometric import capped_geometric_mean
from polyplan.planner.exact.cost_model import predict_chain
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.planner.paper.lemma31 import ideal_time
from simulate_reference import simulate_chain

# Latency curves in seconds: measured at a few k, interpolated linearly in between.
TARGET = LatencyCurve(ks=(1, 2, 4, 8), seconds=(0.025, 0.026, 0.028, 0.033))
MIDDLE = LatencyCurve(ks=(1, 4, 8), seconds=(0.007, 0.0075, 0.009))
SMALL = LatencyCurve(ks=(1, 8), seconds=(0.002, 0.0026))
TINY = 0.0005

CHAINS = [
    pytest.param([0.8], [TARGET, 0.004], [4], id="2-models"),
    pytest.param([0.9, 0.75], [TARGET, MIDDLE, SMALL], [4, 3], id="3-models"),
    pytest.param([0.9, 0.7, 0.6], [TARGET, MIDDLE, SMALL, TINY], [5, 3, 2], id="4-models"),
]
ROUNDS = 8000  # top-level rounds per simulation
Z = 4.0  # tolerance in standard errors (two-sided level ~6e-5 per comparison)


def test_two_models_is_leviathans_formula():
    prediction = predict_chain([0.8], [TARGET, 0.004], [4])
    tokens = capped_geometric_mean(0.8, 4)
    assert prediction.tokens_per_verification == pytest.approx((tokens,))
    assert prediction.cost_per_token == pytest.approx((4 * 0.004 + TARGET(5)) / tokens)
    assert prediction.speedup == pytest.approx(0.025 / prediction.cost_per_token)
    assert prediction.forwards_per_token == pytest.approx((1 / tokens, 4 / tokens))
    assert sum(prediction.time_per_token) == pytest.approx(prediction.cost_per_token)
    assert prediction.wasted_per_verification == pytest.approx((4 - (tokens - 1),))


def test_single_model_is_autoregressive():
    prediction = predict_chain([], [TARGET], [])
    assert prediction.speedup == 1.0 and prediction.cost_per_token == pytest.approx(0.025)


def test_intermediate_returns_a_random_count_of_at_least_k():
    prediction = predict_chain([0.9, 0.75], [TARGET, MIDDLE, SMALL], [4, 3])
    pmf = np.asarray(prediction.drafted_pmf[0])  # tokens M_2 hands to M_1
    assert pmf.sum() == pytest.approx(1.0)
    assert pmf[:4].sum() == 0.0 and pmf[4] < 1.0 and pmf[5:].sum() > 0.1
    assert prediction.drafted_per_verification[0] > 4
    assert sum(prediction.time_per_token) == pytest.approx(prediction.cost_per_token)


@pytest.mark.parametrize(("acceptances", "curves", "blocks"), CHAINS)
def test_dp_matches_monte_carlo(acceptances, curves, blocks):
    prediction = predict_chain(acceptances, curves, blocks)
    simulation = simulate_chain(acceptances, curves, blocks, rounds=ROUNDS, rng=np.random.default_rng(2024))

    def close(estimate, value):
        if estimate.stderr == 0.0:  # deterministic in the simulation (the bottom level's K)
            return estimate.value == pytest.approx(value, rel=1e-12)
        return abs(estimate.value - value) < Z * estimate.stderr

    assert close(simulation.cost_per_token, prediction.cost_per_token)
    for estimate, value in zip(simulation.forwards_per_token, prediction.forwards_per_token):
        assert close(estimate, value)
    for estimate, value in zip(simulation.tokens_per_verification, prediction.tokens_per_verification):
        assert close(estimate, value)
    for estimate, value in zip(simulation.drafted_per_verification, prediction.drafted_per_verification):
        assert close(estimate, value)


def test_negative_controls_are_rejected():
    """Same simulation and tolerance: models that are wrong must fail the comparison.

    (1) the paper's Lemma 3.1 on the same chain (E[L_i] from eq. 3, T_i(1), alpha = K_{n-1});
    (2) the exact model with the second acceptance rate off by 0.07 (0.68 instead of 0.75).
    """
    acceptances, curves, blocks = [0.9, 0.75], [TARGET, MIDDLE, SMALL], [4, 3]
    simulation = simulate_chain(acceptances, curves, blocks, rounds=ROUNDS, rng=np.random.default_rng(7))
    estimate = simulation.cost_per_token

    def rejected(value: float) -> bool:
        return abs(estimate.value - value) > Z * estimate.stderr

    lengths = [capped_geometric_mean(0.9, 4), capped_geometric_mean(0.75, 3)]
    lemma = ideal_time(lengths, [TARGET(1), MIDDLE(1), SMALL(1)], alpha_scale=3).total
    assert rejected(lemma)
    assert rejected(predict_chain([0.9, 0.68], curves, blocks).cost_per_token)
    assert not rejected(predict_chain(acceptances, curves, blocks).cost_per_token)


def test_latency_interpolation_and_extrapolation():
    assert TARGET(3) == pytest.approx(0.027)
    assert TARGET(0.5) == pytest.approx(0.025)  # flat below the first point
    assert TARGET(10) == pytest.approx(0.033 + 2 * (0.005 / 4))  # last slope continues
    falling = LatencyCurve(ks=(1, 2), seconds=(0.01, 0.009))
    assert falling(5) == pytest.approx(0.009)  # never extrapolated downward
    # one non-monotone pair at the end (T(12) > T(16), as float32 gemma-3-270m measured) does
    # not flatten the curve: the slope is the least-squares line through k >= 8
    bumpy = LatencyCurve(ks=(1, 2, 4, 8, 12, 16), seconds=(0.072, 0.072, 0.080, 0.128, 0.214, 0.194))
    assert bumpy.slope_above == pytest.approx((-4 * (0.128 - 0.512 / 3) + 4 * (0.194 - 0.512 / 3)) / 32)
    assert bumpy(20) == pytest.approx(0.194 + 4 * bumpy.slope_above)
    assert bumpy(20) > bumpy(16)  # control: the last two points alone would have stayed flat
    assert LatencyCurve(ks=(1,), seconds=(0.01,))(16) == 0.01
    with pytest.raises(PolyplanError, match="must increase"):
        LatencyCurve(ks=(2, 1), seconds=(0.01, 0.02))
    with pytest.raises(PolyplanError, match=r"T\(1\) must be a finite time > 0"):
        LatencyCurve(ks=(1,), seconds=(0.0,))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([1.0], [TARGET, 0.004], [4]), r"acceptances\[0\]: must be in \[0, 1\)"),
        (([0.8], [TARGET, 0.004], [0]), r"block_sizes\[0\]: block size must be an integer >= 1"),
        (([0.8], [TARGET, -0.004], [2]), r"latency: T\(1\) must be a finite time > 0"),
        (([0.8, 0.7], [TARGET, 0.004], [2]), "acceptances: need 1"),
        (([0.8], [TARGET, 0.004], [2, 2]), "block_sizes: need 1"),
    ],
)
def test_bad_input(args, message):
    with pytest.raises(PolyplanError, match=message):
        predict_chain(*args)


def test_a_drafter_pays_its_two_token_first_pass_after_its_whole_draft_was_accepted():
    """llama.cpp drafters can cost several steps for two tokens; the round after an all-accepted
    draft feeds the last draft and the bonus token: P(all K accepted) · (T_d(2) − T_d(1)) more
    per round, by hand, and the Monte-Carlo reference agrees. Control: a flat drafter pays nothing extra."""
    alpha, k = 0.9, 3
    target = LatencyCurve(ks=(1, 4), seconds=(0.040, 0.120))
    drafter = LatencyCurve(ks=(1, 2), seconds=(0.020, 0.075))
    tokens = (1 - alpha ** (k + 1)) / (1 - alpha)
    by_hand = (k * 0.020 + alpha**k * (0.075 - 0.020) + 0.120) / tokens
    predicted = predict_chain([alpha], [target, drafter], [k], pad_verification=False)
    assert predicted.cost_per_token == pytest.approx(by_hand, rel=1e-12)
    assert predicted.time_per_token[1] == pytest.approx((k * 0.020 + alpha**k * 0.055) / tokens, rel=1e-12)
    simulated = simulate_chain([alpha], [target, drafter], [k], rounds=40_000, rng=np.random.default_rng(0), pad_verification=False)
    assert abs(simulated.cost_per_token.value - by_hand) < 4 * simulated.cost_per_token.stderr
    flat = predict_chain([alpha], [target, LatencyCurve(ks=(1, 2), seconds=(0.020, 0.020))], [k], pad_verification=False)
    assert flat.cost_per_token == pytest.approx((k * 0.020 + 0.120) / tokens, rel=1e-12)
