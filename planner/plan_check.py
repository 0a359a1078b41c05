"""Is plan.json still what the planner made? Checked before `validate` runs anything.

Beyond what `formats.plan` checks when it reads a plan, when the profile it records is unchanged
(its digest), the exact model must give, for every ranked chain and its block sizes, the speedup
the plan recorded. A hand-edited plan is refused with a line saying which field disagrees, instead
of being validated against predictions that are no longer the planner's.
"""

from __future__ import annotations

import math

from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import LoopOverhead
from polyplan.formats.plan import PlanFile, PlannedChain
from polyplan.planner.plan_builder import profile_digest
from polyplan.planner.exact.cost_model import ChainSettings
from polyplan.planner.search import evaluate_chain
from polyplan.formats.profile import Profile

_RELATIVE_TOLERANCE = 1e-6  # JSON keeps 17 digits; anything beyond rounding is an edit


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_RELATIVE_TOLERANCE, abs_tol=1e-12)


def check_plan(plan: PlanFile, label: str, profile: Profile | None = None) -> tuple[PlannedChain, ...]:
    """The plan's ranked chains, once the plan is known to be consistent (module docstring).

    Raises:
        PolyplanError: naming `label` and what disagrees, ending in "re-run polyplan recommend".
    """
    chains = plan.alternatives
    overhead = plan.loop_overhead
    if profile is not None and _planned_on(plan, profile):
        _check_against_profile(plan, chains, profile, overhead, label)
    return chains


def _planned_on(plan: PlanFile, profile: Profile) -> bool:
    """Whether `profile` is exactly what the plan was made from (its recorded digest). A
    profile measured again since (a later `recommend --candidates` re-times the loop overhead)
    cannot tell an edited plan from a stale one, so the predictions are not compared then."""
    recorded = plan.profile.digest
    return recorded is not None and recorded == profile_digest(profile)


def _check_against_profile(plan: PlanFile, chains, profile: Profile, overhead: LoopOverhead | None, label: str) -> None:
    context_length = plan.search.context_length
    acceptance_model = plan.search.acceptance_model or "auto"
    for index, planned in enumerate(chains):
        try:
            now = evaluate_chain(
                profile, planned.chain, planned.block_sizes,
                ChainSettings(plan.sampling, context_length, overhead, acceptance_model),
                draft_policy=planned.draft_policy,
            )
        except PolyplanError as error:
            raise PolyplanError(
                f"{label}: alternatives[{index}] cannot be re-computed from its profile {profile.source} ({error}); "
                "refused, re-run polyplan recommend"
            ) from None
        if not _close(now.exact_speedup, planned.exact.speedup):
            raise PolyplanError(
                f"{label}: alternatives[{index}] ({planned.label()}, K = {list(planned.block_sizes)}) records "
                f"{planned.exact.speedup:.4g}x, but its profile {profile.source} gives {now.exact_speedup:.4g}x for that "
                "chain and block sizes (the profile is unchanged): the plan was edited; refused, re-run polyplan recommend"
            )
