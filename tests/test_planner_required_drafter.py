"""What would pay (planner.exact.required_drafter): the acceptance a drafter of a given cost needs
for a target speedup, and the largest cost at a given acceptance, checked against the exact
model (`predict_chain`) of one i.i.d. drafter on a synthetic profile's target."""

from __future__ import annotations

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import LoopOverhead
from polyplan.formats.profile import LatencyPoint, ModelProfile, Profile
from polyplan.planner.exact.cost_model import predict_chain
from polyplan.planner.exact.latency import constant_curve, curve_from_profile
from polyplan.planner.exact.physical_limit import physical_limit
from polyplan.planner.exact.required_drafter import (drafter_speedup, largest_cost_ratio, required_acceptance,
                                                     tokens_per_verification)

# T(k) of a synthetic target: 10 ms a step, a pass over k tokens costs more, and T(3) > T(4) (padded)
TIMES = {1: 0.010, 2: 0.012, 3: 0.0165, 4: 0.016, 8: 0.030, 16: 0.055}
LOOP = LoopOverhead(0.0004, 0.0007)
SWITCH = (0.0009, 0.0002)
COSTS = [(None, (0.0,)), (LOOP, SWITCH)]


def _target_curve():
    model = ModelProfile("target", "fp-target", tuple(LatencyPoint(64, k, t) for k, t in TIMES.items()))
    profile = Profile(target="target", device="synthetic", models=(model,), pairs=())
    return curve_from_profile(profile.model("target"))


CURVE = _target_curve()


def _exact(acceptance: float, cost_ratio: float, block_size: int, overhead, switch) -> float:
    """The exact model's speedup of target > drafter, the drafter costing c · T(1) a step."""
    drafter = constant_curve(cost_ratio * CURVE(1)) if cost_ratio > 0 else constant_curve(1e-300)
    return predict_chain([acceptance], [CURVE, drafter], [block_size], overhead, [switch, 0.0]).speedup


@pytest.mark.parametrize("overhead, switch", COSTS)
@pytest.mark.parametrize("speedup, cost_ratio", [(1.5, 0.02), (2.0, 0.05), (2.5, 0.0), (1.2, 0.2)])
def test_the_acceptance_it_returns_fed_back_gives_the_speedup(overhead, switch, speedup, cost_ratio):
    needed = required_acceptance(CURVE, speedup, cost_ratio, overhead=overhead, switch=switch)
    assert needed.reachable and needed.block_size is not None and 0 < needed.acceptance < 1
    assert _exact(needed.acceptance, cost_ratio, needed.block_size, overhead, switch) == pytest.approx(speedup, abs=1e-6)
    # at every other K the same α gives no more: it is the least acceptance over K
    for k, alpha in enumerate(needed.acceptances, 1):
        if alpha is None:
            assert _exact(1 - 1e-12, cost_ratio, k, overhead, switch) <= speedup + 1e-6  # out of reach at this K
            continue
        assert alpha >= needed.acceptance
        assert _exact(alpha, cost_ratio, k, overhead, switch) == pytest.approx(speedup, abs=1e-6)
        assert _exact(needed.acceptance, cost_ratio, k, overhead, switch) <= speedup + 1e-6
    assert len(needed.acceptances) == 15  # K = 1 … the widest block timed (16 − 1)


@pytest.mark.parametrize("overhead, switch", COSTS)
@pytest.mark.parametrize("speedup, acceptance", [(1.5, 0.8), (1.7, 0.9), (1.1, 0.5)])
def test_the_largest_cost_ratio_fed_back_gives_the_speedup_and_is_the_dual(overhead, switch, speedup, acceptance):
    cost = largest_cost_ratio(CURVE, speedup, acceptance, overhead=overhead, switch=switch)
    assert cost.reachable and cost.cost_ratio >= 0
    assert _exact(acceptance, cost.cost_ratio, cost.block_size, overhead, switch) == pytest.approx(speedup, abs=1e-6)
    assert all(c is None or c <= cost.cost_ratio for c in cost.cost_ratios)
    assert _exact(acceptance, cost.cost_ratio * 1.01 + 1e-4, cost.block_size, overhead, switch) < speedup  # costlier: short
    # the other way round, at that cost, the least acceptance is the one we started from
    back = required_acceptance(CURVE, speedup, cost.cost_ratio, overhead=overhead, switch=switch)
    assert back.acceptance == pytest.approx(acceptance, abs=1e-9) and back.block_size == cost.block_size


@pytest.mark.parametrize("overhead, switch", COSTS)
def test_the_speedup_is_the_exact_models_and_never_beats_the_physical_limit(overhead, switch):
    limit = physical_limit(CURVE, overhead=overhead, switch=switch)
    for k in (1, 3, 4, 7, 15):
        assert drafter_speedup(CURVE, 0.7, 0.1, k, overhead=overhead, switch=switch) == pytest.approx(
            _exact(0.7, 0.1, k, overhead, switch), rel=1e-12)
        assert drafter_speedup(CURVE, 1 - 1e-12, 0.0, k, overhead=overhead, switch=switch) <= limit.speedups[k - 1] + 1e-9
    # a speedup beyond the limit is out of reach at any cost and acceptance
    beyond = limit.speedup * 1.01
    assert not required_acceptance(CURVE, beyond, 0.0, overhead=overhead, switch=switch).reachable
    assert largest_cost_ratio(CURVE, beyond, 0.99, overhead=overhead, switch=switch).cost_ratio is None


def test_a_speedup_the_target_alone_reaches_needs_no_acceptance_and_the_edges_are_errors():
    easy = required_acceptance(CURVE, 0.1, 0.05)
    assert (easy.acceptance, easy.block_size) == (0.0, 1)
    assert tokens_per_verification(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert len(required_acceptance(CURVE, 1.5, 0.05, k_max=4).acceptances) == 4
    with pytest.raises(PolyplanError, match="speedup: must be a finite number > 0"):
        required_acceptance(CURVE, 0.0, 0.1)
    with pytest.raises(PolyplanError, match="cost_ratio: must be a finite number >= 0"):
        required_acceptance(CURVE, 1.5, -0.1)
    with pytest.raises(PolyplanError, match="acceptance: must be in"):
        largest_cost_ratio(CURVE, 1.5, 1.0)
    with pytest.raises(PolyplanError, match="k_max: must be an integer >= 1"):
        largest_cost_ratio(CURVE, 1.5, 0.5, k_max=0)
