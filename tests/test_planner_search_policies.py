"""The search offers draft lengths that adapt (`planner.search`, `formats.plan.DraftPolicy`):
for a chain of the target and one drafter it tries an adaptive cap and, with the drafter's
confidences in the profile, a confidence stop, and keeps whichever the exact model ranks best.

Synthetic profiles where each pays: half the prompts agree throughout and half never (a fixed K
must compromise; a cap that follows the prompt does not), and a drafter whose confidence tells
its right tokens from its wrong ones (a stop saves the doomed passes). Checked: the plan records
the policy, prints it, reads back, passes `planner.plan_check` against its profile, gets an
interval that holds its point, and `bench intervals` checks it; a profile without confidences
offers no p_min, a deeper chain no policy, and `draft_policies=False` none at all.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import DraftPolicy, read_plan
from polyplan.formats.profile import AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats, confidence_text
from polyplan.planner.intervals.interval_coverage import interval_coverage
from polyplan.planner.plan_check import check_plan
from polyplan.planner.plan_builder import planned_from_profile, profile_digest
from polyplan.planner.search import SearchSettings, evaluate_chain, rank_chains

KS = tuple(range(1, 17))
PROMPTS, LENGTH = 24, 96


def profile_with(agreement: list[str], drafter_step: float, confidence: list[str] | None = None, mid: bool = False) -> Profile:
    times = {"target": 0.010, "drafter": drafter_step} | ({"mid": 0.005} if mid else {})
    models = tuple(ModelProfile(name, f"fp-{name}", tuple(LatencyPoint(128, k, t1 * (1 + 0.02 * (k - 1))) for k in KS))
                   for name, t1 in times.items())
    profile = Profile(target="target", device="synthetic", models=models, pairs=())
    rate = sum(s.count("1") for s in agreement) / sum(len(s) for s in agreement)
    entries = [PairAgreement("target", "drafter", tuple(agreement), tuple(confidence or ()))]
    profile = profile.with_stats("target", "drafter", "greedy", SamplingStats(alpha=min(rate, 0.999)))
    if mid:
        for verifier, drafter in (("target", "mid"), ("mid", "drafter")):
            entries.append(PairAgreement(verifier, drafter, tuple(agreement)))
            profile = profile.with_stats(verifier, drafter, "greedy", SamplingStats(alpha=min(rate, 0.999)))
    return dataclasses.replace(profile, acceptance_runs={"greedy": AgreementRuns(tuple(entries), prompts=len(agreement))})


def bimodal() -> list[str]:
    """Half the prompts agree throughout but every 40th token, half agree one token in five."""
    rng = np.random.default_rng(0)
    easy = ["".join("0" if j % 40 == 39 else "1" for j in range(LENGTH))] * (PROMPTS // 2)
    hard = ["".join("1" if x else "0" for x in rng.random(LENGTH) < 0.2) for _ in range(PROMPTS // 2)]
    return easy + hard


def telling() -> tuple[list[str], list[str]]:
    """Agreement at 0.6, the drafter sure (0.95) where it agrees and unsure (0.05) where not."""
    rng = np.random.default_rng(1)
    agreement = ["".join("1" if x else "0" for x in rng.random(LENGTH) < 0.6) for _ in range(PROMPTS)]
    confidence = [confidence_text([0.95 if bit == "1" else 0.05 for bit in text]) for text in agreement]
    return agreement, confidence


def test_an_adaptive_cap_is_planned_where_prompts_differ(tmp_path):
    profile = profile_with(bimodal(), 0.0015)
    result = rank_chains(profile)
    plan = next(p for p in result.ranked if p.chain == ("target", "drafter"))
    assert plan.draft_policy is not None and plan.draft_policy.adaptive
    fixed = rank_chains(profile, SearchSettings(draft_policies=False)).ranked
    assert plan.exact_speedup > next(p for p in fixed if p.chain == plan.chain).exact_speedup * 1.02
    assert "adaptive" in plan.blocks_label()


def test_a_confidence_stop_is_planned_where_the_drafter_knows_when_it_is_wrong(tmp_path):
    from polyplan.formats.profile import write_profile

    agreement, confidence = telling()
    profile = profile_with(agreement, 0.004, confidence)
    write_profile(profile, tmp_path / "profile.json")
    planned = planned_from_profile(profile, tmp_path / "plan.json", profile_path=str(tmp_path / "profile.json"), resamples=30)
    best = planned.recommendation.best
    assert best.chain == ("target", "drafter") and best.draft_policy is not None and best.draft_policy.p_min is not None
    without = evaluate_chain(profile, best.chain, best.block_sizes)
    assert best.exact_speedup > without.exact_speedup * 1.05
    plan = read_plan(tmp_path / "plan.json")
    assert plan.best.draft_policy == best.draft_policy and f"p_min {best.draft_policy.p_min:g}" in plan.best.blocks_label()
    low, high = plan.best.exact.interval
    assert low <= plan.best.exact.speedup <= high
    check_plan(plan, "plan.json", profile)  # the policy's prediction is what the profile gives
    edited = dataclasses.replace(plan, alternatives=(dataclasses.replace(plan.best, draft_policy=None),) + plan.alternatives[1:])
    with pytest.raises(PolyplanError, match="the plan was edited"):
        check_plan(edited, "plan.json", profile)
    coverage = interval_coverage(profile, [(best.chain, best.block_sizes, best.draft_policy)], splits=10, resamples=20)
    assert coverage.chains[0].draft_policy == best.draft_policy


def test_without_confidences_no_stop_is_offered_and_deeper_chains_keep_a_fixed_k():
    agreement, _ = telling()
    bare = rank_chains(profile_with(agreement, 0.004))
    assert all(p.draft_policy is None or p.draft_policy.p_min is None for p in bare.ranked)
    deep = rank_chains(profile_with(bimodal(), 0.0015, mid=True))
    assert all(p.draft_policy is None for p in deep.ranked if len(p.chain) > 2)
    with pytest.raises(PolyplanError, match="directly under the target only"):
        evaluate_chain(profile_with(bimodal(), 0.0015, mid=True), ("target", "mid", "drafter"), (3, 3), draft_policy=DraftPolicy(1, 8))
    with pytest.raises(PolyplanError, match="p_min needs the drafter's confidences"):
        evaluate_chain(profile_with(agreement, 0.004), ("target", "drafter"), (3,), draft_policy=DraftPolicy(p_min=0.5))


def test_old_profiles_re_encode_and_a_confidence_string_is_checked():
    from polyplan.formats.profile import decode_profile, encode_profile

    agreement, confidence = telling()
    profile = profile_with(agreement, 0.004, confidence)
    payload = encode_profile(profile)
    assert decode_profile(payload) == profile and encode_profile(decode_profile(payload)) == payload
    bare = encode_profile(profile_with(agreement, 0.004))
    assert "confidence" not in bare["acceptance_runs"]["greedy"]["pairs"][0]
    payload["acceptance_runs"]["greedy"]["pairs"][0]["confidence"][0] = "zz"
    with pytest.raises(PolyplanError, match=r"acceptance_runs\.greedy\.pairs\[0\]\.confidence"):
        decode_profile(payload)
    assert profile_digest(profile) != profile_digest(profile_with(agreement, 0.004))
