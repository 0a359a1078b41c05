"""llama.cpp's ngram-simple replayed on the target's streams (planner.exact.ngram_replay), and the
llama.cpp export that uses it; the slow test checks the replay against a real llama-server."""

from __future__ import annotations

import dataclasses

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import TargetStream
from polyplan.planner.exact.ngram_replay import ngram_simple_draft, replay_prediction, replay_stream


def test_the_draft_copies_what_followed_the_latest_earlier_occurrence():
    history = [9, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 8, 8, 8, 8, 1, 2]
    # the pattern is the last size_n tokens with the sampled one: [1, 2, 3]; its latest earlier
    # occurrence starts at 8 and is followed by 8, 8, 8, 8, 1, 2 (up to size_m)
    assert ngram_simple_draft(history, 3, 3, 4) == [8, 8, 8, 8]
    assert ngram_simple_draft(history, 3, 3, 10) == [8, 8, 8, 8, 1, 2]  # the history ends first
    assert ngram_simple_draft(history, 7, 3, 4) == []  # [1, 2, 7] never occurred: no draft, a plain step


def test_the_draft_follows_llama_cpps_edge_rules():
    assert ngram_simple_draft([1, 2, 3, 1, 2], 3, 3, 1) == []  # history not longer than size_n + size_m + 1
    # a match at position 0 does not count (llama.cpp searches down to 1)
    assert ngram_simple_draft([1, 2, 3, 7, 7, 7, 7, 1, 2], 3, 3, 2) == []
    # the latest occurrence wins, not the first
    assert ngram_simple_draft([0, 5, 1, 2, 3, 4, 5, 1, 2, 9, 9, 5, 1], 2, 3, 3) == [9, 9, 5]
    assert ngram_simple_draft([0, 0, 0, 0, 0, 4, 4, 1, 2, 9, 1], 2, 2, 2) == [9, 1]
    # fewer than size_n tokens left to copy after the match: no draft
    assert ngram_simple_draft([0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 1], 2, 2, 2) == []


def test_the_replay_accounts_every_token_once():
    loop = [4, 5, 6, 7]
    stream = TargetStream(8, tuple([1, 2, 3] + loop + [4]) + tuple(loop * 10))  # a target that repeats itself
    rounds = replay_stream(stream, 2, 4)
    assert sum(r.accepted + 1 for r in rounds) == 40 - 1  # the first token comes from the prefill
    assert all(r.accepted <= r.drafted <= 4 for r in rounds)
    assert sum(r.accepted for r in rounds) > 20  # the loop is drafted and accepted
    assert replay_stream(stream, 2, 4, new_tokens=10) == replay_stream(TargetStream(8, stream.ids[:18]), 2, 4)
    with pytest.raises(PolyplanError, match="size_n and size_m must be >= 1"):
        replay_stream(stream, 0, 4)


def test_the_prediction_charges_a_wide_pass_per_draft_and_one_step_otherwise():
    step = lambda k: 0.010 + 0.002 * (k - 1)  # noqa: E731 (T(k) of a target)
    repeating = TargetStream(8, (1, 2, 3, 4, 5, 6, 7, 4) + (5, 6, 7, 4) * 15)
    fresh = TargetStream(4, tuple(range(100, 164)))  # never repeats: never drafts
    assert replay_prediction([fresh], 2, 4, step).speedup == pytest.approx(1.0)
    good = replay_prediction([repeating], 2, 4, step)
    assert good.speedup > 2.2 and good.tokens_per_verification[0] > 3
    mixed = replay_prediction([repeating, fresh], 2, 4, step)
    assert 1.0 < mixed.speedup < good.speedup
    assert sum(mixed.drafted_pmf[0]) == pytest.approx(1.0) and mixed.drafted_pmf[0][0] > 0.4


def test_the_llama_cpp_export_replays_ngram_simple_where_the_profile_has_streams(tmp_path):
    """The same profile and plan, with and without the target's streams: with them the n-gram
    option is the replay (and says so), without them the α model (and says why)."""
    import dataclasses

    from polyplan.formats.candidates import parse_candidates
    from polyplan.formats.profile import (AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile,
                                          SamplingStats)
    from polyplan.planner.engine_export import export_plan
    from polyplan.planner.plan_builder import planned_from_profile

    models = (ModelProfile("gemma", "fp-g", tuple(LatencyPoint(64, k, 0.018 * (1 + 0.05 * (k - 1))) for k in (1, 2, 4, 8, 16))),
              ModelProfile("ngram", "fp-n", (LatencyPoint(64, 1, 1e-5),)))
    profile = Profile(target="gemma", device="cpu x (1 thread)", models=models, pairs=())
    profile = profile.with_stats("gemma", "ngram", "greedy", SamplingStats(alpha=0.55))
    repeating = TargetStream(8, (1, 2, 3, 4, 5, 6, 7, 4) + (5, 6, 7, 4) * 15)
    runs = AgreementRuns((PairAgreement("gemma", "ngram", ("1100" * 15,)),), streams=(repeating,))
    profile = dataclasses.replace(profile, acceptance_runs={"greedy": runs})
    (tmp_path / "gemma.gguf").write_bytes(b"GGUF")
    candidates = parse_candidates({"candidates": [{"name": "gemma", "source": "gemma.gguf", "target": True, "engine": "llama.cpp"},
                                                  {"name": "ngram", "derive": {"kind": "ngram", "max_n": 2}}]},
                                  base_dir=tmp_path)
    plan = planned_from_profile(profile, None, profile_path="p.json").plan
    replayed = export_plan(plan, profile, candidates, "llama.cpp").chosen
    assert replayed.model.startswith("replayed llama.cpp's ngram-simple on the profile's 1 target streams")
    assert replayed.block_size >= 2 and replayed.speedup > 2.0
    profile = dataclasses.replace(profile, acceptance_runs={"greedy": dataclasses.replace(runs, streams=())})
    by_alpha = export_plan(plan, profile, candidates, "llama.cpp").chosen
    assert by_alpha.model.startswith("alpha model: the profile holds no target streams")
    assert by_alpha.speedup != pytest.approx(replayed.speedup)


def _export(tmp_path, stream: TargetStream, slope: float):
    """The llama.cpp export of a one-stream profile whose target's T(k) = T(1) (1 + slope (k - 1))."""
    from polyplan.formats.candidates import parse_candidates
    from polyplan.formats.profile import (AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile,
                                          SamplingStats)
    from polyplan.planner.engine_export import export_plan
    from polyplan.planner.plan_builder import planned_from_profile

    models = (ModelProfile("gemma", "fp-g", tuple(LatencyPoint(64, k, 0.018 * (1 + slope * (k - 1))) for k in (1, 2, 4, 8, 16))),
              ModelProfile("ngram", "fp-n", (LatencyPoint(64, 1, 1e-5),)))
    profile = Profile(target="gemma", device="cpu x (1 thread)", models=models, pairs=())
    profile = profile.with_stats("gemma", "ngram", "greedy", SamplingStats(alpha=0.05))
    profile = dataclasses.replace(profile, acceptance_runs={
        "greedy": AgreementRuns((PairAgreement("gemma", "ngram", ("0" * 60,)),), streams=(stream,))})
    (tmp_path / "gemma.gguf").write_bytes(b"GGUF")
    candidates = parse_candidates({"candidates": [{"name": "gemma", "source": "gemma.gguf", "target": True, "engine": "llama.cpp"},
                                                  {"name": "ngram", "derive": {"kind": "ngram", "max_n": 2}}]},
                                  base_dir=tmp_path)
    plan = planned_from_profile(profile, None, profile_path="p.json").plan
    return export_plan(plan, profile, candidates, "llama.cpp")


def test_the_llama_cpp_export_says_off_when_nothing_pays(tmp_path):
    """A stream that never repeats and a target whose wide passes cost their tokens: every
    configuration is at best 1.00x, so the export recommends off and prints the plain server."""
    from polyplan.engines.export import config_text, export_lines, export_to_json

    export = _export(tmp_path, TargetStream(4, tuple(range(100, 230))), slope=1.0)
    labels = [config.label for config in export.ranking]
    assert {"ngram-simple (defaults)", "ngram-mod (defaults)", "ngram-map-k (defaults)", "ngram-map-k4v (defaults)",
            "off (no speculation)"} <= set(labels)
    assert export.recommended.label == "off (no speculation)" and export.recommended.flags == ()
    command = config_text(export)
    assert command.startswith("llama-server -m ") and "--spec" not in command
    text = "\n".join(export_lines(export))
    assert "recommended: off: no configuration beats the target alone beyond its interval" in text
    assert export_to_json(export)["recommended"]["label"] == "off (no speculation)"


def test_negative_control_the_llama_cpp_export_recommends_what_pays(tmp_path):
    repeating = TargetStream(8, (1, 2, 3, 4, 5, 6, 7, 4) + (5, 6, 7, 4) * 30)
    export = _export(tmp_path, repeating, slope=0.05)
    assert export.recommended is export.ranking[0] and export.recommended.label != "off (no speculation)"
    assert export.recommended.low > 1.0 and "--spec-type" in " ".join(export.recommended.flags)
    from polyplan.engines.export import config_text

    assert " ".join(export.recommended.flags) in config_text(export)


@pytest.mark.slow
def test_the_replay_drafts_and_accepts_what_a_real_llama_server_does(tmp_path):
    """The pinned llama-server with ngram-simple on a tiny GGUF: its reported drafted and
    accepted tokens equal the replay's on its own target-only stream (prompt + output)."""
    from polyplan.engines.llama_cpp.server import LlamaServer
    from tiny_gguf import pinned_server_and_tiny_gguf

    server_binary, model = pinned_server_and_tiny_gguf(tmp_path)
    prompt = [5, 9, 33, 70, 101, 7, 5, 9, 33, 70, 101, 7, 5, 9]
    common = ("-t", "1", "-c", "256", "-np", "1", "--no-webui")
    with LlamaServer(server_binary, model, common, tmp_path / "plain.log") as server:
        plain = server.complete(prompt, 48)
    stream = TargetStream(len(prompt), tuple(prompt) + plain.token_ids)
    for size_n, size_m in ((2, 4), (1, 6), (3, 3)):
        flags = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(size_n),
                 "--spec-ngram-simple-size-m", str(size_m))
        with LlamaServer(server_binary, model, common + flags, tmp_path / f"ngram-{size_n}-{size_m}.log") as server:
            drafted = server.complete(prompt, 48)
        rounds = replay_stream(stream, size_n, size_m)
        assert drafted.token_ids == plain.token_ids
        assert drafted.draft_n > 0  # this stream repeats itself enough to draft at every size
        assert (drafted.draft_n, drafted.draft_accepted) == (sum(r.drafted for r in rounds), sum(r.accepted for r in rounds))
