"""The error split by the factors of time per token (`validation.cost_split`): its terms multiply
to the total error, and each term moves only when its factor does."""

from __future__ import annotations

import math

import pytest

from polyplan.decoder.result import PassTally
from polyplan.validation.cost_split import LevelCosts, cost_split, merged_tallies, profile_seconds_per_pass

TARGET_STEP = 0.010  # the plan's target-only seconds per token
LEVELS = (LevelCosts(0.35, 0.34, 0.0063, 0.0063), LevelCosts(1.03, 1.03, 0.0007, 0.0007))
LOOP = 5e-5


def split(levels=LEVELS, loop=LOOP, baseline=TARGET_STEP, measured=None):
    planned = sum(level.predicted_forwards * level.predicted_seconds_per_pass for level in LEVELS) + LOOP
    predicted = TARGET_STEP / planned
    actual = sum(level.forwards * level.seconds_per_pass for level in levels) + loop
    return cost_split(levels, loop=loop, predicted_loop=LOOP, baseline=baseline, predicted_baseline=TARGET_STEP,
                      predicted_speedup=predicted, measured_speedup=measured if measured is not None else baseline / actual)


def product(s) -> float:
    return math.prod(1.0 + term for term in (s.baseline, s.forwards, s.per_pass, s.loop, s.aggregation, s.model))


def test_the_terms_multiply_to_the_total_error():
    slower = (LevelCosts(0.41, 0.34, 0.0081, 0.0063), LevelCosts(1.2, 1.03, 0.0009, 0.0007))
    s = split(slower, loop=2e-4, baseline=0.0105, measured=1.31)
    assert product(s) == pytest.approx(1.0 + s.total, rel=1e-12)
    assert s.total > 0.3  # the chain was much slower than planned, and every factor says why
    assert s.forwards > 0 and s.per_pass > 0 and s.loop > 0 and s.baseline < 0


def as_planned() -> tuple[LevelCosts, ...]:
    return tuple(LevelCosts(level.predicted_forwards, level.predicted_forwards, level.predicted_seconds_per_pass,
                            level.predicted_seconds_per_pass) for level in LEVELS)


def test_a_member_slower_inside_the_chain_moves_only_per_pass():
    target, drafter = as_planned()
    s = split((LevelCosts(target.forwards, target.predicted_forwards, target.seconds_per_pass * 1.3,
                          target.predicted_seconds_per_pass), drafter))
    assert s.per_pass > 0.2 and s.total == pytest.approx(s.per_pass)
    for term in (s.forwards, s.loop, s.baseline, s.aggregation, s.model):
        assert term == pytest.approx(0.0, abs=1e-12)


def test_as_planned_every_term_is_zero_negative_control():
    s = split(as_planned())
    for term in (s.total, s.baseline, s.forwards, s.per_pass, s.loop, s.aggregation, s.model):
        assert term == pytest.approx(0.0, abs=1e-12)


def test_more_passes_per_token_moves_forwards_not_per_pass():
    target, drafter = as_planned()
    s = split((LevelCosts(target.forwards * 1.2, target.predicted_forwards, target.seconds_per_pass,
                          target.predicted_seconds_per_pass), drafter))
    assert s.forwards > 0.1
    assert s.per_pass == pytest.approx(0.0, abs=1e-12)


def test_tallies_merge_by_width_and_price_at_their_contexts():
    merged = merged_tallies([(PassTally(1, 2, 0.02, 100.0), PassTally(4, 1, 0.02, 110.0)), (PassTally(4, 3, 0.05, 130.0),)])
    assert merged == (PassTally(1, 2, 0.02, 100.0), PassTally(4, 4, 0.07, 125.0))
    priced = profile_seconds_per_pass("t", merged, lambda model, width, context: 0.01 * width + context / 1e4)
    assert priced == pytest.approx((2 * (0.01 + 0.01) + 4 * (0.04 + 0.0125)) / 6)
    assert profile_seconds_per_pass("t", (), lambda *a: 1.0) is None
