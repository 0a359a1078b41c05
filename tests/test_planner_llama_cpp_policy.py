"""A plan's draft policy in the llama.cpp export (`planner.llama_cpp_policy`, `planner.engine_rules`).

Checked: the confidence stop is rendered as `--spec-draft-p-min` (with `--spec-draft-n-min 0`, so a
draft the stop cut short is verified, not discarded); its prediction equals a hand computation of
the replayed rounds on a tiny synthetic profile; p_min → 0 gives the fixed draft-simple
prediction (control); an adaptive cap is one line naming the fixed n-max rendered.
"""

from __future__ import annotations

import dataclasses

import pytest

from polyplan.engines.export import config_text
from polyplan.formats.plan import DraftPolicy
from polyplan.formats.profile import AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats
from polyplan.planner.engine_rules import export_plan
from polyplan.planner.llama_cpp_ranking import llama_cpp_spec_flags
from polyplan.planner.plan_file import plan_of
from polyplan.planner.search import recommend

# one prompt: where the drafter agrees with the target, and its top probability there (x 255)
AGREEMENT = "11010010"
CONFIDENCE = (230, 230, 230, 51, 230, 230, 230, 230)  # 0.902 everywhere but 0.2 at position 3
TARGET_S, DRAFT_S = 0.1, 0.01  # T(k) = TARGET_S (1 + 0.1 (k − 1)); the drafter's is flat: no catch-up pass


def _profile(agreement: str = AGREEMENT, confidence=CONFIDENCE, alpha: float = 0.5) -> Profile:
    target = ModelProfile("target", "fp-target", tuple(LatencyPoint(64, k, TARGET_S * (1 + 0.1 * (k - 1))) for k in (1, 2, 4, 8)))
    draft = ModelProfile("draft", "fp-draft", tuple(LatencyPoint(64, k, DRAFT_S) for k in (1, 2, 4, 8)))
    profile = Profile(target="target", device="synthetic", models=(target, draft), pairs=())
    profile = profile.with_stats("target", "draft", "greedy", SamplingStats(alpha=alpha, engine_alpha=alpha))
    pair = PairAgreement("target", "draft", (agreement,), ("".join(f"{value:02x}" for value in confidence),))
    return dataclasses.replace(profile, acceptance_runs={"greedy": AgreementRuns((pair,))})



def _plan(profile: Profile, policy: DraftPolicy | None, block: int = 2):
    plan = plan_of(recommend(profile, max_levels=2, k_max=2, draft_policies=False))
    best = dataclasses.replace(plan.best, chain=("target", "draft"), block_sizes=(block,), draft_policy=policy)
    return dataclasses.replace(plan, alternatives=(best, *plan.alternatives[1:]))


def _row(export, prefix: str):
    return next(config for config in export.ranking if config.label.startswith(prefix))


def _hand_speedup(rounds) -> float:
    """(drafted, accepted, stopped) per round: T(1) over (passes · T_d(1) + T(m + 1)) per token."""
    seconds = sum((m + stopped) * DRAFT_S + TARGET_S * (1 + 0.1 * m) for m, _, stopped in rounds)
    return TARGET_S / (seconds / sum(a + 1 for _, a, _ in rounds))


def test_the_confidence_stop_is_rendered_with_no_minimum_draft():
    flags = llama_cpp_spec_flags("draft_model", 6, "d.gguf", p_min=0.75)
    assert flags == ["--spec-type", "draft-simple", "-md", "d.gguf", "--spec-draft-n-max", "6", "--spec-draft-n-min", "0",
                     "--spec-draft-p-min", "0.75"]
    # without a stop: exactly K tokens a round, as before
    assert llama_cpp_spec_flags("draft_model", 6, "d.gguf")[-4:] == ["--spec-draft-n-min", "6", "--spec-draft-p-min", "0"]


def test_the_plans_p_min_is_a_ranked_row_predicted_by_replaying_its_stop(tmp_path, gguf_pair):
    profile = _profile(alpha=0.2)
    export = export_plan(_plan(profile, DraftPolicy(p_min=0.5)), profile, gguf_pair, "llama.cpp", k_max=2)
    row = _row(export, "draft-simple draft K=2 p-min=0.5")
    assert row.flags == tuple(llama_cpp_spec_flags("draft_model", 2, str(tmp_path / "draft.gguf"), p_min=0.5))
    # the walk by hand (planner.exact.policy_replay): K = 2 stops before position 3 (0.2 < 0.5)
    k2 = [(2, 2, 0), (0, 0, 1), (2, 0, 0), (2, 0, 0), (2, 1, 0)]
    k1 = [(1, 1, 0), (1, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 0), (1, 1, 0)]
    assert _hand_speedup(k2) == pytest.approx(1.0 / 0.8375)  # (0.09 + 0.58) / 8 tokens
    assert _hand_speedup(k2) > _hand_speedup(k1)  # so the search keeps K = 2
    assert row.speedup == pytest.approx(_hand_speedup(k2), rel=1e-12)
    # the fixed row (by α = 0.2 here) is still ranked; the stop's row is faster and is the command printed
    fixed = next(config for config in export.ranking if config.label.startswith("draft-simple draft K=") and "p-min" not in config.label)
    assert fixed.speedup < row.speedup and export.recommended is row
    assert "--spec-draft-n-max 2 --spec-draft-n-min 0 --spec-draft-p-min 0.5 --temp 0" in config_text(export)
    assert not any("adaptive" in note for note in export.ranking_notes)


def test_negative_control_p_min_near_zero_gives_the_fixed_prediction(gguf_pair):
    """Every confidence above p_min: the stop never fires and the replay is the fixed walk. On an
    agreement sequence whose fixed K = 1 walk accepts exactly half its rounds, that is the α = 0.5
    prediction the export made before."""
    profile = _profile("100" * 6, (255,) * 18, alpha=0.5)
    export = export_plan(_plan(profile, DraftPolicy(p_min=1e-6), block=1), profile, gguf_pair, "llama.cpp", k_max=1)
    stopped = _row(export, "draft-simple draft K=1 p-min=1e-06")
    fixed = next(config for config in export.ranking if config.label == "draft-simple draft K=1")
    assert stopped.speedup == pytest.approx(fixed.speedup, rel=1e-12)
    # and a stop that fires changes it: the control can fail
    firing = export_plan(_plan(profile, DraftPolicy(p_min=0.5), block=1), _profile("100" * 6, (255, 10, 10) * 6),
                         gguf_pair, "llama.cpp", k_max=1)
    assert _row(firing, "draft-simple draft K=1 p-min=0.5").speedup != pytest.approx(fixed.speedup, rel=1e-6)


def test_an_adaptive_cap_is_one_line_naming_the_fixed_n_max_rendered(gguf_pair):
    profile = _profile()
    export = export_plan(_plan(profile, DraftPolicy(k_min=1, k_max=2, p_min=0.5), block=2), profile, gguf_pair,
                         "llama.cpp", k_max=2)
    lines = [note for note in export.ranking_notes if "adaptive" in note]
    assert lines == ["the plan's draft drafts with an adaptive cap 1..2; llama-server has no adaptive cap, so the export "
                     "renders a fixed --spec-draft-n-max 2 with its confidence stop --spec-draft-p-min 0.5"]
    capped = export_plan(_plan(profile, DraftPolicy(k_min=1, k_max=2), block=2), profile, gguf_pair, "llama.cpp", k_max=2)
    assert not any("p-min" in config.label for config in capped.ranking)
    assert any("renders a fixed --spec-draft-n-max" in note and "p-min" not in note for note in capped.ranking_notes)


def test_a_profile_without_confidences_says_why_the_stop_is_not_modelled(gguf_pair):
    profile = _profile()
    runs = profile.acceptance_runs["greedy"]
    bare = dataclasses.replace(profile, acceptance_runs={"greedy": dataclasses.replace(
        runs, pairs=(dataclasses.replace(runs.pairs[0], confidence=()),))})
    export = export_plan(_plan(bare, DraftPolicy(p_min=0.5)), bare, gguf_pair, "llama.cpp", k_max=2)
    assert not any("p-min" in config.label for config in export.ranking)
    assert any(note.startswith("draft's confidence stop p_min 0.5: not modelled (") and "no drafter confidences" in note
               for note in export.ranking_notes)
