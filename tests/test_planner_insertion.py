"""Theorem 3.2: the printed conditions, the assumptions, the exact difference, the verdict."""

from __future__ import annotations

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.planner.paper.insertion import analyze_insertion
from polyplan.planner.paper.lemma31 import ideal_time

TABLE1 = dict(t1=25.0, t2=4.0, t2_new=7.0, l1=4.34, l1_new=6.26, l2_new=4.36)


def test_table1_quantized_intermediate_helps():
    result = analyze_insertion(**TABLE1)
    assert result.condition1.lhs == pytest.approx(0.28)
    assert result.condition1.rhs == pytest.approx(2 * 4.36 * (1 / 4.34 - 1 / 6.26))
    assert result.condition1.holds is True
    # Under 2E[L2]' > E[L1] condition 2's rhs is negative: it cannot hold for any alpha > 0.
    assert result.condition2.lhs == pytest.approx(7 / 4)
    assert result.condition2_rhs_per_alpha == pytest.approx(4.34 / 8.72 - 1)
    assert result.condition2.holds is False and result.condition2.rhs is None
    assert result.assumptions_hold and result.ceiling == 2
    assert result.theorem_guarantees_gain is True
    assert (result.verdict, result.verdict_basis) == ("helps", "theorem_3_2")
    assert result.exact_difference is None


@pytest.mark.parametrize("alpha", [0.5, 1.0, 7.0, 20.0])
def test_exact_difference_is_eq2_minus_eq1(alpha):
    result = analyze_insertion(**TABLE1, alpha_scale=alpha)
    two = ideal_time([4.34], [25.0, 4.0], alpha_scale=alpha).total
    three = ideal_time([6.26, 4.36], [25.0, 7.0, 4.0], alpha_scale=alpha).total
    assert result.two_model_time == pytest.approx(two)
    assert result.three_model_time == pytest.approx(three)
    assert result.exact_difference == pytest.approx(three - two)
    assert result.verdict == "helps" and result.verdict_basis == "exact_difference"
    assert result.condition2.rhs == pytest.approx(alpha * (4.34 / 8.72 - 1))


def test_ceiling_above_two_makes_the_bound_loose():
    # E[L1]'/E[L2]' = 3.5 -> ceiling 4, the proof's 2 over-estimates the three-model time.
    args = dict(t1=30.0, t2=2.0, t2_new=8.0, l1=3.0, l1_new=7.0, l2_new=2.0)
    result = analyze_insertion(**args, alpha_scale=4.0)
    assert result.ceiling == 4
    three = ideal_time([7.0, 2.0], [30.0, 8.0, 2.0], alpha_scale=4.0).total
    assert result.exact_difference == pytest.approx(three - result.two_model_time)
    assert result.paper_bound_difference > result.exact_difference


def test_exact_verdict_can_disagree_with_the_theorem():
    # Conditions fail (the intermediate is slow), yet the exact difference decides.
    args = dict(t1=25.0, t2=4.0, t2_new=20.0, l1=4.34, l1_new=6.26, l2_new=4.36)
    theorem = analyze_insertion(**args)
    assert theorem.condition1.holds is False
    assert theorem.verdict == "no_gain" and theorem.theorem_guarantees_gain is False
    exact = analyze_insertion(**args, alpha_scale=7.0)
    assert exact.exact_difference < 0 and exact.verdict == "helps"
    slow_drafting = analyze_insertion(**args, alpha_scale=0.1)
    assert slow_drafting.exact_difference > 0 and slow_drafting.verdict == "no_gain"


def test_assumptions_and_undetermined_condition2():
    # 2E[L2]' < E[L1]: assumption fails; condition 2's coefficient is positive, needs alpha.
    result = analyze_insertion(t1=25.0, t2=4.0, t2_new=1.0, l1=5.0, l1_new=6.0, l2_new=2.0)
    assert result.assumption_l1_grows and not result.assumption_l2_doubled_exceeds_l1
    assert result.assumptions_hold is False
    assert result.condition2.holds is None and result.condition2_rhs_per_alpha == pytest.approx(0.25)
    assert result.theorem_guarantees_gain is False and result.verdict == "no_gain"
    with_alpha = analyze_insertion(t1=25.0, t2=4.0, t2_new=1.0, l1=5.0, l1_new=6.0, l2_new=2.0, alpha_scale=8.0)
    assert with_alpha.condition2.holds is True  # 0.25 < 8 * 0.25


@pytest.mark.parametrize(
    ("field", "value"),
    [("t1", 0.0), ("t2", -4.0), ("t2_new", float("nan")), ("l1", 0.0), ("l1_new", -1.0), ("l2_new", float("inf"))],
)
def test_bad_input(field, value):
    args = dict(TABLE1)
    args[field] = value
    with pytest.raises(PolyplanError, match=f"^{field}: must be a finite number > 0"):
        analyze_insertion(**args)
    with pytest.raises(PolyplanError, match="^alpha: must be a finite number > 0"):
        analyze_insertion(**TABLE1, alpha_scale=-1.0)
