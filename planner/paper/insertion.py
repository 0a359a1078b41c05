"""Theorem 3.2 of the paper: does inserting an intermediate model help?

Notation (the paper's): the dualistic system (M_1, M_2) has times T_1, T_2 and mean
acceptance length E[L_1]; the three-model system (M_1, M_2', M_3') inserts a new model M_2'
(time T_2') above the old drafter, which becomes M_3' with T_3' = T_2. E[L_1]' is the mean
acceptance length of M_1 over the new sub-chain, E[L_2]' that of M_2' over M_3'. The paper's α
(`alpha_scale`) is Lemma 3.1's scaling factor, assumed equal in both systems; it is not an
acceptance rate.

Per generated token, Lemma 3.1 gives
    eq. 1:  T_two   = T_1 / E[L_1] + α T_2 / E[L_1]
    eq. 2:  T_three = T_1 / E[L_1]' + T_2' / (E[L_2]' c) + α T_2 / (E[L_2]' c),
            c = ⌈E[L_1]' / E[L_2]'⌉,
and the theorem replaces c by 2 and splits the bound into two sufficient conditions:
    condition 1:  T_2'/T_1 < 2 E[L_2]' (1/E[L_1] − 1/E[L_1]')
    condition 2:  T_2'/T_2 < α (E[L_1] / (2 E[L_2]') − 1)
which suffice when E[L_1]' > E[L_1] and 2 E[L_2]' > E[L_1] (as printed) and c >= 2 (used by
the proof). Under the printed assumption 2 E[L_2]' > E[L_1] the right-hand side of condition 2
is negative, so condition 2 can never hold when the assumptions do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from polyplan.formats.plan import ConditionRecord
from polyplan.planner.paper.lemma31 import check_positive


@dataclass(frozen=True)
class InsertionAnalysis:
    """Theorem 3.2 evaluated on concrete numbers (times per generated token, N = 1).

    verdict: "helps" or "no_gain", decided as follows.
      - With `alpha_scale` given: "helps" iff `exact_difference` = eq. 2 − eq. 1, with the real
        ceiling, is < 0 (the three-model system is strictly faster per token).
      - Without it: "helps" iff the theorem guarantees a gain for every α > 0: the printed
        assumptions hold, c >= 2, and condition 1 holds (condition 2 needs α). "no_gain" then
        means "not guaranteed by the theorem", not "proved slower".
    """

    condition1: ConditionRecord  # `rhs`/`holds` are None when they need α and none was given
    condition2: ConditionRecord
    condition2_rhs_per_alpha: float  # rhs of condition 2 divided by α
    assumption_l1_grows: bool  # E[L_1]' > E[L_1]
    assumption_l2_doubled_exceeds_l1: bool  # 2 E[L_2]' > E[L_1]
    assumptions_hold: bool  # both printed assumptions
    ceiling: int  # c = ⌈E[L_1]'/E[L_2]'⌉, which the theorem replaces by 2
    ceiling_at_least_two: bool
    theorem_guarantees_gain: bool | None  # None when only condition 2 could decide and α is absent
    alpha_scale: float | None
    two_model_time: float | None  # eq. 1 per token (needs α)
    three_model_time: float | None  # eq. 2 per token, real ceiling (needs α)
    exact_difference: float | None  # eq. 2 − eq. 1 per token
    paper_bound_difference: float | None  # the proof's expression (c replaced by 2)
    verdict: str
    verdict_basis: str  # "exact_difference" or "theorem_3_2"


def analyze_insertion(
    *,
    t1: float,
    t2: float,
    t2_new: float,
    l1: float,
    l1_new: float,
    l2_new: float,
    alpha_scale: float | None = None,
) -> InsertionAnalysis:
    """Evaluate Theorem 3.2 in the module docstring's notation: `t1`, `t2`, `t2_new` are T_1,
    T_2 (= T_3') and T_2'; `l1`, `l1_new`, `l2_new` are E[L_1], E[L_1]' and E[L_2]' (all > 0);
    `alpha_scale` is the paper's α (> 0; None leaves condition 2's rhs and the exact difference
    undetermined)."""
    t1 = check_positive(t1, "t1")
    t2 = check_positive(t2, "t2")
    t2_new = check_positive(t2_new, "t2_new")
    l1 = check_positive(l1, "l1")
    l1_new = check_positive(l1_new, "l1_new")
    l2_new = check_positive(l2_new, "l2_new")
    scale = None if alpha_scale is None else check_positive(alpha_scale, "alpha")

    lhs1 = t2_new / t1
    rhs1 = 2 * l2_new * (1 / l1 - 1 / l1_new)
    condition1 = ConditionRecord(lhs=lhs1, rhs=rhs1, holds=lhs1 < rhs1)

    lhs2 = t2_new / t2
    per_alpha = l1 / (2 * l2_new) - 1
    if scale is not None:
        condition2 = ConditionRecord(lhs=lhs2, rhs=scale * per_alpha, holds=lhs2 < scale * per_alpha)
    else:
        # lhs2 > 0, so a non-positive coefficient fails for every α > 0.
        condition2 = ConditionRecord(lhs=lhs2, rhs=None, holds=False if per_alpha <= 0 else None)

    grows = l1_new > l1
    doubled = 2 * l2_new > l1
    assumptions = grows and doubled
    ceiling = math.ceil(l1_new / l2_new)
    premises = assumptions and ceiling >= 2
    if condition1.holds or condition2.holds:
        guaranteed: bool | None = premises
    elif condition2.holds is None:
        guaranteed = None if premises else False
    else:
        guaranteed = False

    two = three = difference = bound = None
    if scale is not None:
        two = t1 / l1 + scale * t2 / l1
        three = t1 / l1_new + t2_new / (l2_new * ceiling) + scale * t2 / (l2_new * ceiling)
        difference = three - two
        bound = (1 / l1_new - 1 / l1) * t1 + t2_new / (2 * l2_new) + scale * (1 / (2 * l2_new) - 1 / l1) * t2
        verdict = "helps" if difference < 0 else "no_gain"
        basis = "exact_difference"
    else:
        verdict = "helps" if guaranteed else "no_gain"
        basis = "theorem_3_2"

    return InsertionAnalysis(
        condition1=condition1,
        condition2=condition2,
        condition2_rhs_per_alpha=per_alpha,
        assumption_l1_grows=grows,
        assumption_l2_doubled_exceeds_l1=doubled,
        assumptions_hold=assumptions,
        ceiling=ceiling,
        ceiling_at_least_two=ceiling >= 2,
        theorem_guarantees_gain=guaranteed,
        alpha_scale=scale,
        two_model_time=two,
        three_model_time=three,
        exact_difference=difference,
        paper_bound_difference=bound,
        verdict=verdict,
        verdict_basis=basis,
    )
