"""The profiling budget: the durations it reads, what it refuses, and how many prompts fit."""

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.profiler.budget import (
    CALIBRATION_STEPS, MIN_PROMPTS, AcceptanceCost, Budget, BudgetClock, MemberCost, acceptance_cost, calibration_seconds, switch_seconds, decoded_seconds, duration_text, parse_budget,
    plan_budget,
)


@pytest.mark.parametrize("text, seconds", [("5m", 300), ("90s", 90), ("1h30m", 5400), ("2.5m", 150), (" 3 min ", 180),
                                           ("1m30s", 90), ("0.5h", 1800)])
def test_durations_read(text, seconds):
    assert parse_budget(text).seconds == pytest.approx(seconds)


@pytest.mark.parametrize("text, says", [("0", "more than 0"), ("0m", "more than 0"), ("5", "give a unit"),
                                        ("5d", "unknown unit 'd'"), ("five", "cannot read"), ("", "cannot read"),
                                        ("5m x", "cannot read"), ("-5m", "cannot read")])
def test_bad_budgets_are_one_line_naming_the_option(text, says):
    with pytest.raises(PolyplanError) as error:
        parse_budget(text)
    assert says in str(error.value) and str(error.value).startswith("--budget") and "\n" not in str(error.value)


def test_duration_text():
    assert duration_text(42) == "42 s"
    assert duration_text(200) == "3 min 20 s"
    assert duration_text(3900) == "1 h 05 min"


def _costs(target_step=0.01, drafter_step=0.001):
    target = MemberCost(LatencyCurve((1, 4, 8), (target_step, 1.5 * target_step, 2 * target_step)), ((100, 0.05),))
    drafter = MemberCost(LatencyCurve((1, 4, 8), (drafter_step, 1.2 * drafter_step, 1.5 * drafter_step)))
    return {"target": target, "drafter": drafter}


def test_acceptance_cost_counts_stream_and_reads_per_mode():
    costs = _costs()
    one = acceptance_cost("target", costs, [100], new_tokens=8, modes=1, width=4)
    stream = 0.05 + 8 * 0.01
    forced = (0.05 + 2 * 0.015) + (costs["drafter"].prefill(100) + 2 * 0.0012)
    assert one.per_prompt_s[0] == pytest.approx(stream + forced)
    two = acceptance_cost("target", costs, [100], new_tokens=8, modes=2, width=4)
    assert two.per_prompt_s[0] == pytest.approx(2 * one.per_prompt_s[0])
    # greedy: the target's own read is its continuation (no pass), the other mode still reads it
    greedy = acceptance_cost("target", costs, [100], new_tokens=8, modes=2, width=4, greedy=True)
    assert greedy.per_prompt_s[0] == pytest.approx(2 * one.per_prompt_s[0] - (0.05 + 2 * 0.015))


def test_a_large_targets_calibrations_are_its_switch_costs_priced_from_their_loop():
    """At a step of 20 ms or more the loop overhead runs around stand-ins (no model cost), so the
    calibrations cost the switch costs: each model primed, then 16 rounds of the costliest other
    model's pass and 8 of its own; a small target keeps the shipped family's steps per token."""
    big = MemberCost(LatencyCurve((1, 4), (0.08, 0.18)), prefill_points=((128, 1.0),))
    small = MemberCost(LatencyCurve((1, 4), (0.03, 0.05)), prefill_points=((128, 0.3),))
    costs = {"target": big, "drafter": small}
    rounds = (0.03 + 8 * 0.08) + (0.08 + 8 * 0.03)
    assert switch_seconds(costs, context=128) == pytest.approx(1.3 + 16 * rounds)
    assert calibration_seconds(big, tokens=64, modes=1, costs=costs) == pytest.approx(switch_seconds(costs))
    tiny = MemberCost(LatencyCurve((1, 4), (0.002, 0.003)))
    assert calibration_seconds(tiny, tokens=64, modes=1, costs={"target": tiny}) == pytest.approx(CALIBRATION_STEPS * 64 * 0.002)


def test_prefill_scales_beyond_the_longest_measured_prompt():
    cost = MemberCost(LatencyCurve((1,), (0.01,)), ((100, 0.05), (300, 0.2)))
    assert cost.prefill(200) == pytest.approx(0.125)
    assert cost.prefill(600) == pytest.approx(0.4)
    assert cost.prefill(0) == 0.0


def test_prompts_taken_in_order_while_they_fit():
    cost = AcceptanceCost((1.0, 2.0, 3.0, 4.0, 5.0, 6.0))
    plan = plan_budget(Budget(30.0, "30s"), spent_s=5.0, cost=cost, calibration_s=4.0)  # 21 s left: 1+2+3+4+5 = 15, +6 = 21
    assert plan.prompts == 6 and plan.left_s == pytest.approx(0.0)
    plan = plan_budget(Budget(25.0, "25s"), spent_s=5.0, cost=cost, calibration_s=4.0)  # 16 s left
    assert plan.prompts == 5 and plan.acceptance_s == pytest.approx(15.0)
    assert any("other 1 prompts" in line for line in plan.lines())
    # the plan never spends more than the budget on what it estimates
    assert plan.spent_s + plan.acceptance_s + plan.calibration_s <= 25.0


def test_a_budget_below_the_least_says_what_it_needs():
    cost = AcceptanceCost((10.0,) * 8)
    with pytest.raises(PolyplanError) as error:
        plan_budget(Budget(60.0, "1m"), spent_s=30.0, cost=cost, calibration_s=5.0)
    message = str(error.value)
    assert message.startswith("--budget 1m: too small") and "--budget 2m" in message  # 30 + 5 + 4 * 10 = 75 s
    assert plan_budget(Budget(75.0, "75s"), spent_s=30.0, cost=cost, calibration_s=5.0).prompts == MIN_PROMPTS


def test_fewer_prompts_than_the_minimum_are_all_taken():
    plan = plan_budget(Budget(100.0, "100s"), spent_s=1.0, cost=AcceptanceCost((1.0, 1.0)), calibration_s=1.0)
    assert plan.prompts == 2


def test_decoded_run_price_falls_with_tokens_per_verification():
    costs = _costs()
    slow = decoded_seconds(costs["target"], costs["drafter"], 4, 1.0, prompts=4, new_tokens=128)
    fast = decoded_seconds(costs["target"], costs["drafter"], 4, 4.0, prompts=4, new_tokens=128)
    assert fast == pytest.approx(slow / 4)
    assert slow == pytest.approx(4 * 128 * (4 * 0.001 + costs["target"].curve(5)))


def test_a_reserve_for_what_runs_after_the_profile_comes_off_the_prompts():
    """recommend keeps its self-check's estimate out of the profile's budget: the prompts that fit
    and the left-over shrink by it, the log names it, and the least budget asked for counts it."""
    cost = AcceptanceCost((1.0, 2.0, 3.0, 4.0, 5.0, 6.0))
    plan = plan_budget(Budget(30.0, "30s"), spent_s=5.0, cost=cost, calibration_s=4.0, reserve_s=6.0)  # 15 s left
    assert plan.prompts == 5 and plan.left_s == pytest.approx(0.0)
    assert plan.spent_s + plan.acceptance_s + plan.calibration_s + plan.reserve_s <= 30.0
    assert "the self-check after it about 6 s" in plan.lines()[0]
    with pytest.raises(PolyplanError) as error:
        plan_budget(Budget(60.0, "1m"), spent_s=30.0, cost=AcceptanceCost((10.0,) * 8), calibration_s=5.0, reserve_s=30.0)
    message = str(error.value)
    assert "and the self-check" in message and "--budget 2m" in message  # 30 + 5 + 30 + 4 * 10 = 105 s
    with pytest.raises(PolyplanError, match="--budget 3m"):  # the same without the reserve asks for 75 s, with a larger one 135 s
        plan_budget(Budget(60.0, "1m"), spent_s=30.0, cost=AcceptanceCost((10.0,) * 8), calibration_s=5.0, reserve_s=60.0)


def test_a_clock_says_what_is_left_of_its_budget():
    clock = BudgetClock(Budget(100.0, "100s"), started=10.0)
    assert clock.left(40.0) == pytest.approx(70.0) and clock.elapsed(40.0) == pytest.approx(30.0)
