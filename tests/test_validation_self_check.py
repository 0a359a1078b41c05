"""recommend's self-check (`validation.self_check`) on fixed run records: a member slower inside
the chain than the plan says moves the composition term C above 1 and the checked prediction and
its interval down by it; a chain that runs as planned keeps C = 1 (the negative control)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from polyplan.formats.plan import ExactRecord, PaperRecord, PlanFile, PlannedChain, SelfCheckRecord
from polyplan.formats.profile import Profile, ProfilerRecord
from polyplan.validation.results import ChainSpec, RunRecord
from polyplan.validation.shrinkage import WeighedTerm
from polyplan.validation.self_check import (
    CHECK_REPEATS, CHECK_SIZES, _budget_text, _checked_plan, check_budget, least_check_s, check_size, composition, fitted_check, composition_interval, estimated_seconds, plan_priced, pooled_term, combined,
)

RECORD = SelfCheckRecord(prompts=4, new_tokens=64, repeats=1, seconds=1.0)


def term(c: float, low: float, high: float) -> WeighedTerm:
    """C as applied, with its interval (measured as applied: a check whose evidence kept all of it)."""
    return WeighedTerm(c, low, high, c, 1.0, 0.0)

STEP = 0.010  # the plan's target-only seconds per token
TOKENS = 20


def planned(chain, forwards, time_per_token, speedup, interval) -> PlannedChain:
    levels = len(chain) - 1
    return PlannedChain(
        chain=chain, block_sizes=(3,) * levels,
        exact=ExactRecord(speedup=speedup, acceptances=(0.8,) * levels, forwards_per_token=forwards, tokens_per_verification=(2.9,) * levels,
                          drafted_per_verification=(3.0,) * levels, time_per_token_s=time_per_token, overhead_per_token_s=0.0,
                          interval=interval),
        paper=PaperRecord(speedup=speedup, phi_per_token=forwards, mean_lengths=(2.9,) * levels),
    )


CHAIN = planned(("t", "d"), (0.35, 1.05), (0.35 * 0.012, 1.05 * 0.0008), STEP / (0.35 * 0.012 + 1.05 * 0.0008), (1.7, 2.3))
ALONE = planned(("t",), (1.0,), (STEP,), 1.0, (1.0, 1.0))


def records(slower: float, prompts: int = 4) -> tuple[list[RunRecord], list[RunRecord]]:
    """Each prompt: the chain's runs as planned, its target passes `slower` times their planned time."""
    runs, base = [], []
    for p in range(prompts):
        wobble = 1.0 + 0.02 * (p % 2)
        target_s = 7 * 0.012 * slower * wobble  # 7 passes per 20 tokens = 0.35 per token
        drafter_s = 21 * 0.0008 * wobble
        runs.append(RunRecord(0, 0, p, target_s + drafter_s, 0.0, tuple(range(TOKENS)), (7, 21), (target_s, drafter_s),
                              ((3,) * 7, ()), (14, 0), (7, 0)))
        base.append(RunRecord(1, 0, p, TOKENS * STEP * wobble, 0.0, tuple(range(TOKENS)), (TOKENS,), (TOKENS * STEP * wobble,),
                              ((),), (0,), (0,)))
    return runs, base


def test_a_member_slower_inside_the_chain_gives_c_above_one_and_lowers_the_prediction():
    runs, base = records(slower=1.3)
    c, low, high = composition_interval(plan_priced(CHAIN, STEP), runs, base, rng=np.random.default_rng(0))
    expected = (0.35 * 0.012 * 1.3 + 1.05 * 0.0008) / (0.35 * 0.012 + 1.05 * 0.0008)
    assert c == pytest.approx(expected, rel=0.02)
    assert low <= c <= high
    plan = PlanFile(target="t", sampling="greedy", profiled_fingerprints={}, alternatives=(CHAIN, ALONE))
    checked = _checked_plan(plan, {CHAIN.chain: (term(c, low, high), 1.6)}, (), RECORD).plan
    chain = next(item for item in checked.alternatives if item.chain == CHAIN.chain)
    assert chain.predicted_speedup == pytest.approx(CHAIN.exact.speedup / c)
    assert chain.predicted_interval[1] < CHAIN.exact.interval[1] and chain.predicted_interval[0] < CHAIN.exact.interval[0]
    assert chain.predicted_interval[1] - chain.predicted_interval[0] >= (CHAIN.exact.interval[1] - CHAIN.exact.interval[0]) / high
    alone = next(item for item in checked.alternatives if len(item.chain) == 1)
    assert alone.predicted_speedup == 1.0 and checked.self_check.checked == ()


def test_a_chain_that_runs_as_planned_keeps_c_at_one_negative_control():
    runs, base = records(slower=1.0)
    c, low, high = composition_interval(plan_priced(CHAIN, STEP), runs, base, rng=np.random.default_rng(0))
    assert c == pytest.approx(1.0, abs=1e-9) and low == pytest.approx(1.0, abs=1e-9) and high == pytest.approx(1.0, abs=1e-9)
    plan = PlanFile(target="t", sampling="greedy", profiled_fingerprints={}, alternatives=(CHAIN, ALONE))
    chain = _checked_plan(plan, {CHAIN.chain: (term(c, low, high), 2.0)}, (), RECORD).plan.alternatives[0]
    assert chain.predicted_speedup == pytest.approx(CHAIN.exact.speedup)
    assert chain.predicted_interval == pytest.approx(CHAIN.exact.interval)


def test_the_check_can_re_rank_and_unchecked_chains_take_the_pooled_term():
    other = replace(CHAIN, chain=("t", "e"), exact=replace(CHAIN.exact, speedup=CHAIN.exact.speedup * 0.95))
    third = replace(CHAIN, chain=("t", "f"), exact=replace(CHAIN.exact, speedup=CHAIN.exact.speedup * 0.5))
    plan = PlanFile(target="t", sampling="greedy", profiled_fingerprints={}, alternatives=(CHAIN, other, third, ALONE))
    found = _checked_plan(plan, {CHAIN.chain: (term(1.3, 1.2, 1.4), 1.5), other.chain: (term(1.0, 0.95, 1.05), 1.9)}, (), RECORD)
    assert found.plan.best.chain == ("t", "e")  # measured faster here: first now
    assert any("re-ranked" in line for line in found.lines)
    pooled = next(item for item in found.plan.alternatives if item.chain == ("t", "f")).check
    assert pooled.pooled and pooled.composition == pytest.approx(1.15) and (pooled.composition_low, pooled.composition_high) == (0.95, 1.4)


def test_an_unchecked_chain_takes_c_from_the_checked_chains_whose_drafters_are_most_like_its_own():
    """The loop's quiet run on an AMD EPYC (family 26): checked C 0.93, 1.03, 1.13; `target > drafter`
    (measured 1.72x, exact 1.58x) takes `target > drafter > ngram`'s, not the median of all three."""
    terms = {("t", "d", "n"): (term(0.93, 0.90, 0.99), 1.9), ("t", "i", "d", "n"): (term(1.03, 0.99, 1.06), 1.8),
             ("t", "i", "n"): (term(1.13, 1.06, 1.27), 1.2)}

    def pooled(chain, found=terms):
        found = pooled_term(chain, found)
        return found.composition, found.low, found.high

    assert pooled(("t", "d")) == (0.93, 0.90, 0.99)  # shares 1 of 2 drafters with ("t", "d", "n"), 1 of 3 with the next
    assert pooled(("t", "i", "d")) == (1.03, 0.99, 1.06)  # 2 of 3
    assert pooled(("t", "i")) == (1.13, 1.06, 1.27)  # 1 of 2 with ("t", "i", "n"), 1 of 3 with ("t", "i", "d", "n")
    # ties (1 of 2 with ("t", "d", "n") and with ("t", "i", "n")): the median of the tied, the interval spanning theirs
    assert pooled(("t", "n")) == (pytest.approx(1.03), 0.90, 1.27)
    # control: a chain sharing no drafter takes the median of all, as before
    assert pooled(("t", "e")) == (1.03, 0.90, 1.27)
    assert pooled(("t", "e"), {}) == (1.0, 1.0, 1.0)


def test_the_checked_interval_adds_the_two_errors_in_quadrature():
    exact, point = (1.5, 2.4), 2.0  # exact 2.0x [1.5, 2.4]
    # C known exactly: the exact interval moved by 1/C (control)
    assert combined(point / 1.25, exact, (1.25, 1.25, 1.25)) == pytest.approx((1.5 / 1.25, 2.4 / 1.25))
    # an exact point with no spread: C's interval alone (a high C is a low speedup)
    assert combined(point / 1.25, (2.0, 2.0), (1.25, 1.0, 1.5)) == pytest.approx((2.0 / 1.5, 2.0 / 1.0))
    low, high = combined(point / 1.25, exact, (1.25, 1.0, 1.5))
    assert low == pytest.approx(1.6 * math.exp(-math.hypot(math.log(2.0 / 1.5), math.log(1.5 / 1.25))))
    assert high == pytest.approx(1.6 * math.exp(math.hypot(math.log(2.4 / 2.0), math.log(1.25 / 1.0))))
    assert 1.5 / 1.5 < low < min(1.5 / 1.25, 2.0 / 1.5) and max(2.4 / 1.25, 2.0 / 1.0) < high < 2.4 / 1.0  # wider than each, narrower than both in full
    assert combined(1.6, None, (1.25, 1.0, 1.5)) is None


def test_composition_reads_the_baseline_from_target_only_runs():
    runs, base = records(slower=1.0)
    faster_base = [replace(run, decode_s=run.decode_s * 0.8) for run in base]  # target-only decoding faster than profiled
    assert composition(CHAIN, runs, faster_base, STEP) == pytest.approx(1.25, rel=1e-6)


def specs(*chains: PlannedChain) -> list[ChainSpec]:
    return [ChainSpec(planned=chain, roles=(), rank=index + 1) for index, chain in enumerate(chains)]


def test_the_check_is_sized_to_its_budget_by_the_plans_own_estimate():
    chains = specs(CHAIN, ALONE)
    per_token = STEP / CHAIN.exact.speedup + STEP  # the chain and target-only decoding, by the exact model
    largest = estimated_seconds(chains, *CHECK_SIZES[0], repeats=CHECK_REPEATS)
    assert largest == pytest.approx(CHECK_REPEATS * CHECK_SIZES[0][0] * (CHECK_SIZES[0][1] + 8) * per_token)
    assert check_size(chains, None) == (*CHECK_SIZES[0], largest)  # no budget: the full check
    assert check_size(chains, largest * 1.01)[:2] == CHECK_SIZES[0]  # negative control: it fits
    prompts, tokens, estimate = check_size(chains, largest * 0.6)
    assert (prompts, tokens) != CHECK_SIZES[0] and estimate <= largest * 0.6
    assert check_size(chains, 1e-9)[:2] == CHECK_SIZES[-1]  # nothing fits: the smallest that can still fit C


def test_a_check_over_its_budget_leaves_out_its_lowest_ranked_chains_first():
    """Where no size fits the budget with every chain, the lowest-ranked checked chain is left out,
    then the next, until the smallest size fits; target-only and the recommended chain are always
    run (the negative controls: a budget that fits keeps every chain; none that fits keeps those two)."""
    from polyplan.validation.results import ROLE_TARGET_ONLY

    second = planned(("t", "e"), (0.5, 1.5), (0.5 * 0.012, 1.5 * 0.0008), 1.2, (1.0, 1.4))
    third = planned(("t", "e", "d"), (0.4, 0.6, 1.2), (0.4 * 0.012, 0.6 * 0.002, 1.2 * 0.0008), 1.1, (0.9, 1.3))
    chains = [ChainSpec(CHAIN, (), 1), ChainSpec(second, (), 2), ChainSpec(third, (), 3), ChainSpec(ALONE, (ROLE_TARGET_ONLY,), 9)]
    smallest = lambda chosen: estimated_seconds(chosen, *CHECK_SIZES[-1], repeats=CHECK_REPEATS)
    assert fitted_check(chains, None) == (tuple(chains), check_size(chains, None))
    assert fitted_check(chains, smallest(chains) * 1.01)[0] == tuple(chains)  # it fits: nothing left out
    without_third = [chains[0], chains[1], chains[3]]
    kept, (prompts, tokens, estimate) = fitted_check(chains, smallest(without_third) * 1.01)
    assert kept == tuple(without_third) and (prompts, tokens) == CHECK_SIZES[-1] and estimate <= smallest(without_third) * 1.01
    two = [chains[0], chains[3]]
    assert fitted_check(chains, smallest(two) * 1.01)[0] == tuple(two)
    assert fitted_check(chains, 1e-9)[0] == tuple(two)  # nothing fits: the recommended chain beside target-only
    prefilled = fitted_check(chains, smallest(chains) * 1.01, prefill=lambda chosen: 1.0 * len(chosen))
    assert len(prefilled[0]) < len(chains)  # the prefills of the chains' members count toward the fit
    # a plan that recommends the target alone: its best speculating chain is kept, not a check of nothing
    off = [ChainSpec(ALONE, (ROLE_TARGET_ONLY,), 1), ChainSpec(CHAIN, (), 2), ChainSpec(second, (), 3), ChainSpec(third, (), 4)]
    assert fitted_check(off, 1e-9)[0] == (off[0], off[1])


def test_the_estimate_counts_each_members_prefill_of_the_prompts_once_per_pass():
    """A large model's prefills cost more than its check decodes (a 1.5B model on two cores, seconds
    per prompt): the estimate adds each member's prefill of every prompt, once per repeat, by the
    profile's prefill curves; a member without one adds nothing."""
    from polyplan.formats.profile import LatencyPoint, ModelProfile, PrefillPoint
    from polyplan.validation.self_check import prefill_seconds

    def model(name: str, per_token: float | None) -> ModelProfile:
        prefill = () if per_token is None else (PrefillPoint(100, 100 * per_token, 0.0, 2),)
        return ModelProfile(name=name, fingerprint="sha256:x", latency=(LatencyPoint(100, 1, 0.01),), prefill=prefill)

    chains = specs(CHAIN, ALONE)
    names = sorted({name for spec in chains for name in spec.planned.chain})
    assert len(names) == 2
    profile = Profile(target=names[0], device="cpu", models=(model(names[0], 0.02), model(names[1], 0.005)), pairs=())
    lengths = [41, 81, 101, 201]
    each = prefill_seconds(chains, profile, lengths)
    # one measured length (100 tokens): through the origin, its slope continued past it
    assert each == pytest.approx((0.02 + 0.005) * sum(length - 1 for length in lengths))
    assert prefill_seconds(chains, None, lengths) == 0.0
    alone = Profile(target=names[0], device="cpu", models=(model(names[0], 0.02), model(names[1], None)), pairs=())
    assert prefill_seconds(chains, alone, lengths) == pytest.approx(0.02 * sum(length - 1 for length in lengths))
    decode = estimated_seconds(chains, *CHECK_SIZES[0], repeats=CHECK_REPEATS)
    assert estimated_seconds(chains, *CHECK_SIZES[0], repeats=CHECK_REPEATS, prefill_s=each) == pytest.approx(decode + CHECK_REPEATS * each)
    assert check_size(chains, decode * 1.01)[:2] == CHECK_SIZES[0]
    assert check_size(chains, decode * 1.01, prefill_s=each)[:2] != CHECK_SIZES[0]  # the prefills no longer fit


def test_the_budget_is_a_tenth_of_the_profiles_measuring_time():
    def profile(record: ProfilerRecord) -> Profile:
        return Profile(target="t", device="cpu", models=(), pairs=(), profiler=record)

    assert check_budget(profile(ProfilerRecord(seconds=221.0))) == pytest.approx(22.1)
    assert check_budget(profile(ProfilerRecord())) is None  # a profile from before it was recorded
    assert check_budget(None) is None


def test_under_a_budget_the_check_takes_its_share_within_what_is_left():
    """`--budget`'s rest caps the check's 10 % of the profile's measuring time (never below 0);
    a roomy budget (the default 30m guard on a quick plan) does not grow the check past its share."""
    profile = Profile(target="t", device="cpu", models=(), pairs=(), profiler=ProfilerRecord(seconds=221.0))
    assert check_budget(profile, left_s=1463.0) == pytest.approx(22.1)
    assert check_budget(profile, left_s=15.0) == pytest.approx(15.0)
    assert check_budget(profile, left_s=-3.0) == 0.0
    unrecorded = Profile(target="t", device="cpu", models=(), pairs=(), profiler=ProfilerRecord())
    assert check_budget(unrecorded, left_s=95.0) == pytest.approx(95.0)
    assert check_budget(None, left_s=10.0) == pytest.approx(10.0)


def test_the_least_check_is_priced_from_the_target_alone_before_any_chain_is_ranked():
    """The last check size on the first prompts: two chains at target-only's pace, the target
    primed once a prompt and repeat (kept primed between the chains); prompts past the check's are
    not counted."""
    from polyplan.planner.exact.latency import LatencyCurve
    from polyplan.profiler.budget import MemberCost

    target = MemberCost(LatencyCurve((1, 2), (0.05, 0.08)), prefill_points=((100, 0.5),))
    prompts, tokens = CHECK_SIZES[-1]
    lengths = [101] * prompts + [5000]
    decode = 2 * prompts * (tokens + 8) * 0.05
    assert least_check_s(target, lengths) == pytest.approx(CHECK_REPEATS * (decode + prompts * 0.5))


def test_a_smallest_check_above_its_budget_says_it_ran_whole_and_over_is_for_a_wrong_estimate():
    whole = replace(RECORD, seconds=50.0, budget_s=30.0, estimated_s=51.0)
    assert "the smallest check run whole above it" in _budget_text(whole) and "OVER" not in _budget_text(whole)
    wrong = replace(RECORD, seconds=50.0, budget_s=30.0, estimated_s=20.0)
    assert ", OVER it" in _budget_text(wrong)
    kept = replace(RECORD, seconds=25.0, budget_s=30.0, estimated_s=24.0)
    assert "OVER" not in _budget_text(kept) and "run whole" not in _budget_text(kept)
