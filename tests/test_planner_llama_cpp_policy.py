"""A plan's draft policy in the llama.cpp export (`planner.llama_cpp.policy`, `planner.engine_export`).

Checked: the confidence stop is rendered as `--spec-draft-p-min` (with `--spec-draft-n-min 0`, so a
draft the stop cut short is verified, not discarded); its prediction equals a hand computation of
the replayed rounds on a tiny synthetic profile; p_min → 0 gives the fixed draft-simple
prediction (control); an adaptive cap is one line naming the fixed n-max rendered; the replay
reads the drafter's 10-best confidences (llama-server's) where the profile keeps them, drafting at
least as many tokens as on whole-vocabulary ones where the drafter's mass spreads beyond its 10
best and exactly as many where it does not (control), and falls back with one line where they are
not kept.
"""

from __future__ import annotations

import dataclasses

import pytest

from polyplan.engines.export import config_text
from polyplan.formats.plan import DraftPolicy
from polyplan.formats.profile import AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats
from polyplan.planner.engine_export import export_plan
from polyplan.planner.llama_cpp.policy import policy_rounds, server_view
from polyplan.planner.llama_cpp.ranking import llama_cpp_spec_flags
from polyplan.planner.plan_builder import plan_of
from polyplan.planner.search import SearchSettings, evaluate_chain, rank_chains

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
    plan = plan_of(rank_chains(profile, SearchSettings(max_levels=2, k_max=2, draft_policies=False)))
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
    # without a stop: K tokens a round, fewer (not none) where a request's end caps the draft
    assert llama_cpp_spec_flags("draft_model", 6, "d.gguf")[-4:] == ["--spec-draft-n-min", "0", "--spec-draft-p-min", "0"]


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


# four prompts: where the drafter agrees with the target, and its top logit there (cycling through
# TOP_LOGITS from a different place in each prompt) among `others` zero logits, the rest −inf
TOP_LOGITS = (4.0, 3.0, 1.0, 3.0, 4.0, 2.0, 4.0, 3.0)
AGREEMENTS = ("1101111011110111", "1111011111101101", "0111110111111011", "1110111101111110")


def _kept_confidences(others: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The drafter's top probabilities at each position of each prompt as the profiler keeps
    them: over the whole vocabulary and over its 10 best logits (`decoder.sampling.top_probability`)."""
    import torch

    from polyplan.decoder.sampling import top_probability
    from polyplan.formats.profile import DRAFT_SIMPLE_TOP_K, confidence_text

    kept = []
    for prompt, agreement in enumerate(AGREEMENTS):
        rows = torch.full((len(agreement), 64), float("-inf"), dtype=torch.float64)
        rows[:, 1:1 + others] = 0.0
        rows[:, 0] = torch.tensor([TOP_LOGITS[(i + 3 * prompt) % len(TOP_LOGITS)] for i in range(len(agreement))], dtype=torch.float64)
        kept.append((confidence_text(top_probability(rows)), confidence_text(top_probability(rows, among=DRAFT_SIMPLE_TOP_K))))
    return tuple(whole for whole, _ in kept), tuple(ten for _, ten in kept)


def _kept_profile(others: int, top10: bool = True, whole_from_top10: bool = False) -> Profile:
    """The synthetic profile with the drafter's kept confidences (`top10`: the 10-best ones too;
    `whole_from_top10`: the 10-best ones kept as if they were the whole-vocabulary ones)."""
    whole, ten = _kept_confidences(others)
    profile = _profile()
    pair = PairAgreement("target", "draft", AGREEMENTS, ten if whole_from_top10 else whole, ten if top10 else ())
    return dataclasses.replace(profile, acceptance_runs={"greedy": AgreementRuns((pair,))})


def _drafted(profile: Profile, p_min: float, k: int) -> float:
    """Tokens the replayed stop drafts at cap k, as the export replays it (`server_view`)."""
    counts = policy_rounds(server_view(profile, "target", "draft")[0], "target", "draft", p_min)(k).counts
    return float((counts.sum(axis=(0, 2)) * range(counts.shape[1])).sum())


@pytest.mark.parametrize("p_min", [0.3, 0.5, 0.8])
def test_the_replay_reads_the_10_best_confidences_and_drafts_at_least_as_many_tokens(p_min):
    """40 logits beside the top: the mass spreads beyond the 10 best, so the 10-best confidence
    is above the whole-vocabulary one and the replay (as llama-server) drafts at least as many
    tokens, more at some cap; 9 beside it (10 in all): the two confidences are one, and so are
    the rounds (the negative control)."""
    spread, whole_only = _kept_profile(40), _kept_profile(40, top10=False)
    drafted = {k: (_drafted(spread, p_min, k), _drafted(whole_only, p_min, k)) for k in range(1, 9)}
    assert all(ten >= whole for ten, whole in drafted.values()) and any(ten > whole for ten, whole in drafted.values())
    concentrated, concentrated_whole = _kept_profile(9), _kept_profile(9, top10=False)
    assert _kept_confidences(9)[0] == _kept_confidences(9)[1]
    for k in range(1, 9):
        assert _drafted(concentrated, p_min, k) == _drafted(concentrated_whole, p_min, k)


def test_the_export_replays_the_10_best_confidences_and_says_when_it_falls_back(gguf_pair):
    spread, whole_only = _kept_profile(40), _kept_profile(40, top10=False)
    plan = _plan(spread, DraftPolicy(p_min=0.5))

    def stop_row(export):
        return next(config for config in export.ranking if config.label.endswith("p-min=0.5"))

    server = export_plan(plan, spread, gguf_pair, "llama.cpp", k_max=2)
    fallback = export_plan(plan, whole_only, gguf_pair, "llama.cpp", k_max=2)
    assert not any("whole vocabulary" in note for note in server.ranking_notes)
    lines = [note for note in fallback.ranking_notes if "whole vocabulary" in note]
    assert lines == ["draft's confidence stop: replayed on its top probabilities over the whole vocabulary, as the profile "
                     "keeps no 10-best ones (llama-server's; re-run polyplan profile): it may draft fewer tokens than the server"]
    assert stop_row(server).speedup != pytest.approx(stop_row(fallback).speedup, rel=1e-6)
    # what the export prices is the walk on the 10-best confidences (with its interval, where there is one)
    renamed = export_plan(plan, _kept_profile(40, top10=False, whole_from_top10=True), gguf_pair, "llama.cpp", k_max=2)
    assert (stop_row(renamed).speedup, stop_row(renamed).interval) == (stop_row(server).speedup, stop_row(server).interval)
    # polyplan's own planner keeps comparing the whole-vocabulary confidences: the 10-best ones change nothing there
    own = [evaluate_chain(profile, ("target", "draft"), (4,), draft_policy=DraftPolicy(p_min=0.5)).exact_speedup
           for profile in (spread, whole_only, _kept_profile(40, top10=False, whole_from_top10=True))]
    assert own[0] == own[1] != pytest.approx(own[2], rel=1e-6)  # (the last: what it would be on the 10-best ones)
    # concentrated mass: the same row either way (control)
    concentrated, concentrated_whole = _kept_profile(9), _kept_profile(9, top10=False)
    same = export_plan(plan, concentrated, gguf_pair, "llama.cpp", k_max=2)
    assert stop_row(same).speedup == pytest.approx(
        stop_row(export_plan(plan, concentrated_whole, gguf_pair, "llama.cpp", k_max=2)).speedup, rel=1e-12)


def test_in_llama_servers_loop_a_stop_round_pays_its_passes_and_the_verified_batch_decoded_again(gguf_pair):
    """With llama-server's loop (`planner.llama_cpp.server_loop`), each replayed round of the stop costs
    the target's T(m + 1) and the server's per-round and per-row costs, the draft model's round
    cost, a pass per drafted token plus one for the stop (the bindings' T_d(1) times the
    calibrated ratio), and its second decode of the m + 1 verified tokens (the last-row curve, a
    jump from one token to two as on llama.cpp's CPU kernels): a round that drafted nothing costs
    one pass and a one-token decode, not a drafted token and a round."""
    from polyplan.planner.llama_cpp.server_loop import ServerLoop
    from polyplan.planner.llama_cpp.ranking import LlamaCppPrices

    profile = _profile(alpha=0.2)
    reeval = ModelProfile("draft", "fp-draft-last", tuple(LatencyPoint(64, k, 0.01 if k == 1 else 0.02 + 0.002 * k) for k in range(1, 9)))
    loop = ServerLoop(per_round_s=0.004, per_row_s=0.001, per_draft_round_s=0.002, per_draft_pass_s=0.015, draft_reeval=0.8)
    prices = LlamaCppPrices(profile.model("target"), loop=loop, draft_ratio=1.5, reevaluations={"draft": reeval})
    export = export_plan(_plan(profile, DraftPolicy(p_min=0.5)), profile, gguf_pair, "llama.cpp", k_max=2, prices=prices)
    row = _row(export, "draft-simple draft K=2 p-min=0.5")
    k2 = [(2, 2, 0), (0, 0, 1), (2, 0, 0), (2, 0, 0), (2, 1, 0)]  # (drafted, accepted, stopped), as walked above

    def last_row(k: int) -> float:
        return 0.01 if k == 1 else 0.02 + 0.002 * k

    seconds = sum(TARGET_S * (1 + 0.1 * m) + 0.004 + 0.001 * m + 0.002 + 0.015 * (m + stop) + 0.8 * last_row(m + 1)
                  for m, _, stop in k2)
    assert row.speedup == pytest.approx((TARGET_S + 0.004) / (seconds / sum(a + 1 for _, a, _ in k2)), rel=1e-9)


