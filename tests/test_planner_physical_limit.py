"""The physical limit (planner.exact.physical_limit): a free drafter that is always right, priced as
the exact model prices a round; no ranked chain may beat it."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import LoopOverhead
from polyplan.formats.profile import (AgreementRuns, LatencyPoint, LoopCalibration, ModelProfile, PairAgreement, Profile,
                                      SamplingStats, SwitchCosts, TargetStream)
from polyplan.formats.profile import read_profile
from polyplan.planner.exact.cost_model import predict_chain
from polyplan.planner.exact.draft_rounds import DraftRounds
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.planner.exact.physical_limit import limit_interval, limit_speedups, physical_limit, target_limit
from polyplan.planner.plan_builder import plan_from_profile
from polyplan.planner.search import rank_chains

EXAMPLE = Path(__file__).resolve().parents[1] / "polyplan" / "data" / "paper_table1_profile.json"
# T(1), T(2), T(4), T(8) = 10, 12, 16, 40 ms: linear in between, so T(3) = 14, T(5) = 22, T(6) = 28, T(7) = 34 ms
CURVE = LatencyCurve((1, 2, 4, 8), (0.010, 0.012, 0.016, 0.040))


def test_the_limit_on_a_known_curve_is_the_hand_computed_one():
    limit = physical_limit(CURVE)
    by_hand = [2 * 10 / 12, 3 * 10 / 14, 4 * 10 / 16, 5 * 10 / 22, 6 * 10 / 28, 7 * 10 / 34, 8 * 10 / 40]
    assert limit.speedups == pytest.approx(by_hand, rel=1e-12)
    assert (limit.block_size, limit.speedup, limit.measured_block_size) == (3, pytest.approx(2.5), 7)
    assert not limit.extrapolated and limit.share(1.25) == pytest.approx(0.5)
    # the loop's costs: the baseline pays a step (1 ms) per token, a round a step, the round cost (2 ms) and
    # the target's 1st pass after a switch (0.5 ms)
    costly = physical_limit(CURVE, overhead=LoopOverhead(0.001, 0.002), switch=(0.0005, 0.0003))
    assert costly.speedups[:4] == pytest.approx([2 * 11 / 15.5, 3 * 11 / 17.5, 4 * 11 / 19.5, 5 * 11 / 25.5], rel=1e-12)
    assert (costly.block_size, costly.speedup) == (3, pytest.approx(44 / 19.5))
    # beyond the widest width timed, the curve goes on with its last slope (6 ms a token), as the exact model reads it
    wide = physical_limit(CURVE, k_max=9)
    assert wide.speedups[7:] == pytest.approx([9 * 10 / 46, 10 * 10 / 52])
    with pytest.raises(PolyplanError, match="k_max: must be an integer >= 1"):
        physical_limit(CURVE, k_max=0)


def test_a_pass_is_priced_at_its_monotone_envelope_and_no_gain_means_k_0():
    bumpy = LatencyCurve((1, 2, 4), (0.010, 0.030, 0.020))  # T(2) > T(4): a pass over 2 runs padded to width 4
    assert physical_limit(bumpy).speedups == pytest.approx([2 * 10 / 20, 3 * 10 / 20, 4 * 10 / 20])
    steep = LatencyCurve((1, 2, 4), (0.010, 0.025, 0.060))  # verifying costs more than the steps it saves
    limit = physical_limit(steep)
    assert (limit.block_size, limit.speedup) == (0, 1.0) and max(limit.speedups) < 1
    assert limit.text() == "1.00x at K = 0"


@pytest.mark.parametrize("overhead, switch", [(None, (0.0,)), (LoopOverhead(0.0004, 0.0007), (0.0009, 0.0002))])
def test_the_limit_is_the_exact_model_of_a_free_rule_drafter_that_is_always_right(overhead, switch):
    """The exact model's own price of a round by a drafter that drafts K tokens in one call,
    costs (next to) nothing and is never rejected."""
    free = LatencyCurve((1,), (1e-15,))
    limit = physical_limit(CURVE, overhead=overhead, switch=switch)
    for k, speedup in enumerate(limit.speedups, start=1):
        counts = np.zeros((1, k + 1, k + 1))
        counts[0, k, k] = 1.0  # every round drafts K tokens and all K are accepted
        exact = predict_chain([DraftRounds(counts)], [CURVE, free], [k], overhead, [switch, (0.0,)])
        assert speedup == pytest.approx(exact.speedup, rel=1e-9)


def _with_costs(profile: Profile) -> Profile:
    return dataclasses.replace(profile, loop_overhead={"greedy": LoopCalibration(1e-4, 3e-4)},
                               switch_costs=SwitchCosts({name: (2e-4, 5e-5) for name in profile.model_names()}))


def _cascade(overhead: bool = False) -> Profile:
    """Four models, each agreeing well only with its neighbour; T(k) grows 10% a token, timed to k = 8."""
    times = {"A": 0.1, "B": 0.02, "C": 0.004, "D": 0.0005}
    alphas = {("A", "B"): 0.95, ("B", "C"): 0.9, ("C", "D"): 0.85, ("A", "C"): 0.5, ("A", "D"): 0.3, ("B", "D"): 0.5}
    models = tuple(ModelProfile(name, f"fp-{name}", tuple(LatencyPoint(64, k, t * (1 + 0.1 * (k - 1))) for k in (1, 2, 4, 8)))
                   for name, t in times.items())
    profile = Profile(target="A", device="synthetic", models=models, pairs=())
    for verifier, drafter in itertools.permutations(times, 2):
        if times[drafter] < times[verifier]:
            profile = profile.with_stats(verifier, drafter, "greedy", SamplingStats(alpha=alphas.get((verifier, drafter), 0.05)))
    return _with_costs(profile) if overhead else profile


LOOPING = TargetStream(8, (1, 2, 3, 4, 5, 6, 7, 4) + (5, 6, 7, 4) * 30)  # a target that loops: a lookup drafter is right


def _lookup(step_s: float) -> Profile:
    """A target, a small model and a lookup (rule) drafter that reads a looping target well."""
    models = (
        ModelProfile("big", "fp-b", tuple(LatencyPoint(64, k, 0.010 * (1 + 0.05 * (k - 1))) for k in (1, 2, 4, 8, 16))),
        ModelProfile("small", "fp-s", tuple(LatencyPoint(64, k, 0.004 * (1 + 0.2 * (k - 1))) for k in (1, 2, 4, 8, 16))),
        ModelProfile("lookup", "fp-l", (LatencyPoint(64, 1, 1e-6),), ngram_simple=2),
    )
    profile = Profile(target="big", device="synthetic", models=models, pairs=())
    for verifier, drafter, alpha in (("big", "small", 0.6), ("big", "lookup", 0.5), ("small", "lookup", 0.5)):
        profile = profile.with_stats(verifier, drafter, "greedy", SamplingStats(alpha=alpha))
    return dataclasses.replace(
        profile, acceptance_runs={"greedy": AgreementRuns((PairAgreement("big", "small", ("1101" * 10,)),), streams=(LOOPING,))},
        loop_overhead={"greedy": LoopCalibration(step_s, 1e-4)},
    )


@pytest.mark.parametrize("name, profile", [
    ("paper Table 1", read_profile(EXAMPLE)),
    ("paper Table 1 with loop and switch costs", _with_costs(read_profile(EXAMPLE))),
    ("cascade", _cascade()),
    ("cascade with loop and switch costs", _cascade(overhead=True)),
    ("a lookup drafter, a costly loop step", _lookup(0.004)),
])
def test_no_ranked_chain_beats_the_limit(name, profile):
    result = plan_from_profile(profile, None, profile_path=None, resamples=0)
    limit = result.limit
    assert limit is not None and limit.speedup >= 1.0
    assert all(plan.exact_speedup <= limit.speedup * (1 + 1e-12) for plan in result.ranked), name
    assert limit.block_size >= 1 and limit.speedups[limit.block_size - 1] == limit.speedup
    # negative controls: priced with a model drafter's K loop steps per round, the "limit" is beaten by the
    # lookup drafter's one call a round; over K = 1 only, by the cascade's deep chain
    if name.startswith("a lookup"):
        baseline = profile.model("big").latency[0].median_s + 0.004
        k_steps = [(k + 1) * baseline / ((k + 1) * baseline / s + (k - 1) * 0.004) for k, s in enumerate(limit.speedups, start=1)]
        assert result.best.chain == ("big", "lookup") and max(k_steps) < result.best.exact_speedup
    if name == "cascade":
        assert limit.speedups[0] < result.best.exact_speedup


def test_the_limit_reaches_as_far_as_any_chain_hands_its_target_tokens():
    """A 3-level chain can hand its target more than K_1 tokens (level 2 overshoots K_1): the
    limit's K then runs past the widest width timed, extrapolated as the exact model does."""
    result = rank_chains(read_profile(EXAMPLE))  # one-point curves: timed at k = 1 only
    assert result.limit.measured_block_size == 0 and result.limit.extrapolated
    widest = max(len(plan.exact.drafted_pmf[0]) - 1 for plan in result.ranked if len(plan.chain) > 1)
    assert len(result.limit.speedups) <= widest and len(result.limit.speedups) > max(result.best.block_sizes)
    assert result.limit.speedups == pytest.approx([k + 1 for k in range(1, len(result.limit.speedups) + 1)])  # flat T


def test_target_limit_reads_the_profiles_switch_cost_and_timings():
    profile = _cascade(overhead=True)
    overhead = LoopOverhead(1e-4, 3e-4)
    limit = target_limit(profile, overhead=overhead)
    curve = LatencyCurve((1, 2, 4, 8), tuple(0.1 * (1 + 0.1 * (k - 1)) for k in (1, 2, 4, 8)))
    assert limit == physical_limit(curve, overhead=overhead, switch=(2e-4, 5e-5))
    assert limit.speedups != physical_limit(curve, overhead=overhead).speedups  # the switch cost counts


def _sampled(spread: float) -> Profile:
    """The cascade with 15 timings per latency point (relative spread `spread`)."""
    profile = _cascade()
    rng = np.random.default_rng(1)
    models = []
    for model in profile.models:
        latency = [
            LatencyPoint(p.context_length, p.k, p.median_s, p.iqr_s, 15,
                         tuple(float(v) for v in p.median_s * (1 + spread * rng.standard_normal(15))))
            for p in model.latency
        ]
        models.append(dataclasses.replace(model, latency=tuple(
            LatencyPoint(p.context_length, p.k, float(np.median(p.samples_s)), 0.0, 15, p.samples_s) for p in latency)))
    return dataclasses.replace(profile, models=tuple(models))


def test_the_limit_interval_comes_from_the_targets_timings():
    noisy, quiet = _sampled(0.05), _sampled(0.001)
    wide = limit_interval(noisy, target_limit(noisy), resamples=200)
    narrow = limit_interval(quiet, target_limit(quiet), resamples=200)
    for interval, limit in ((wide, target_limit(noisy)), (narrow, target_limit(quiet))):
        assert interval.point == limit.speedup and interval.low <= limit.speedup <= interval.high
    assert wide.high - wide.low > 10 * (narrow.high - narrow.low) > 0
    assert limit_interval(noisy, target_limit(noisy), resamples=200, seed=3) != wide  # a seed draws other replicates
    paper = read_profile(EXAMPLE)  # no timings and no IQR: nothing to resample
    flat = limit_interval(paper, target_limit(paper), resamples=50)
    assert flat.low == flat.high == flat.point
    with pytest.raises(PolyplanError, match="resamples: must be an integer >= 20"):
        limit_interval(paper, target_limit(paper), resamples=5)
    # the plan's limit carries it
    result = plan_from_profile(noisy, None, profile_path=None, resamples=50)
    assert result.limit.interval is not None and result.limit.interval.point == result.limit.speedup


def test_limit_speedups_matches_the_limit():
    assert tuple(limit_speedups(CURVE, 7)) == physical_limit(CURVE).speedups
