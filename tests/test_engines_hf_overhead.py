"""HF generate's own loop overhead: the fit (exact, on synthetic counts and seconds), the profile
entry (round trip, old profiles without it, resumption by fingerprint), which overhead
`polyplan export` says it used, and the bench peers 10% check. The measurement runs once on
two tiny random Llamas (a few hundred milliseconds); no timed asserts."""

from __future__ import annotations

import math

import pytest

from conftest import tiny_llama, truncated_copy
from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.cost_model import predict_chain
from polyplan.planner.exact.engine_overhead import (
    EngineOverhead, LoopCounts, engine_overhead_entry, fit_engine_overhead, prediction_overhead, profile_call_seconds, profile_engine_overhead, stored_fingerprint,
)
from polyplan.formats.overhead import LoopOverhead
from polyplan.formats.profile import (
    LatencyPoint, LoopCalibration, ModelProfile, Profile, decode_profile, encode_profile, read_profile, write_profile,
)

PER_CALL, PER_STEP, PER_ROUND = 0.004, 0.0005, 0.0015
# target-only at 32 and 64 tokens, assisted at K = 1, 2, 4 (drafter steps, target rounds)
COUNTS = [LoopCounts(1, 32, 0), LoopCounts(1, 64, 0), LoopCounts(1, 40, 40), LoopCounts(1, 62, 31), LoopCounts(1, 100, 25)]


def _seconds(counts):
    return [c.calls * PER_CALL + c.steps * PER_STEP + c.rounds * PER_ROUND for c in counts]


def test_the_fit_recovers_per_call_step_and_round_exactly():
    fitted = fit_engine_overhead(COUNTS, _seconds(COUNTS))
    assert fitted.per_call_s == pytest.approx(PER_CALL, rel=1e-9)
    assert fitted.loop.per_step_s == pytest.approx(PER_STEP, rel=1e-9)
    assert fitted.loop.per_round_s == pytest.approx(PER_ROUND, rel=1e-9)


def test_the_fit_never_goes_negative_and_needs_enough_configurations():
    seconds = _seconds(COUNTS)
    seconds[0] += 0.05  # a burst of load on the shortest call: a naive difference would give a negative per-step cost
    fitted = fit_engine_overhead(COUNTS, seconds)
    assert min(fitted.per_call_s, fitted.loop.per_step_s, fitted.loop.per_round_s) >= 0.0
    with pytest.raises(PolyplanError, match="at least as many configurations"):
        fit_engine_overhead(COUNTS[:2], _seconds(COUNTS[:2]))


def test_the_hf_overhead_changes_the_prediction_as_the_cost_model_says():
    """What export does with it: the same exact model, with HF's step and round costs."""
    ours, theirs = LoopOverhead(0.0001, 0.0002), LoopOverhead(PER_STEP, PER_ROUND)
    t_target, t_draft, k, alpha = 0.01, 0.002, 4, 0.7
    with_theirs = predict_chain([alpha], [t_target, t_draft], [k], theirs)
    # by hand: E[tokens per round] = (1 − α^(K+1)) / (1 − α); baseline pays one step overhead per token
    tokens = (1 - alpha ** (k + 1)) / (1 - alpha)
    round_cost = k * (t_draft + PER_STEP) + t_target + PER_ROUND
    assert with_theirs.speedup == pytest.approx((t_target + PER_STEP) / (round_cost / tokens), rel=1e-12)
    assert with_theirs.speedup != pytest.approx(predict_chain([alpha], [t_target, t_draft], [k], ours).speedup, rel=1e-3)


def _profile(**typed) -> Profile:
    return Profile(target="target", device="synthetic", models=(ModelProfile("target", "fp-target", (LatencyPoint(64, 1, 0.01),)),),
                   pairs=(), **typed)


def _version_1(meta: dict) -> Profile:
    """A version-1 profile that kept the overheads in its meta (read through the migration)."""
    payload = encode_profile(_profile())
    return decode_profile({**payload, "schema_version": 1, "meta": meta}, label="old.json")


def test_profile_round_trip_and_old_profiles(tmp_path):
    entry = engine_overhead_entry(EngineOverhead(LoopOverhead(PER_STEP, PER_ROUND), PER_CALL), fingerprint="sha256:x",
                                  details={"drafter": "draft"})
    profile = _profile(loop_overhead={"greedy": LoopCalibration(1e-4, 2e-4)}, engine_overhead={"hf": {"greedy": entry}})
    write_profile(profile, tmp_path / "profile.json")
    again = read_profile(tmp_path / "profile.json")
    assert again.engine_overhead == profile.engine_overhead and again.engine_overhead["hf"]["greedy"].details == {"drafter": "draft"}
    assert profile_engine_overhead(again, "hf", "greedy") == LoopOverhead(PER_STEP, PER_ROUND)
    assert profile_engine_overhead(again, "hf", "t1.0") is None
    assert profile_call_seconds(again, "hf", "greedy") == PER_CALL and stored_fingerprint(again, "hf", "greedy") == "sha256:x"
    used = prediction_overhead(again, "hf", "greedy")
    assert used.overhead == LoopOverhead(PER_STEP, PER_ROUND) and "HF generate's own, measured (500 us/step + 1500 us/round)" in used.note
    # an old profile: no entry -> polyplan's loop, said so
    old = prediction_overhead(_version_1({"loop_overhead": {"greedy": {"per_step_s": 1e-4, "per_round_s": 2e-4}}}), "hf", "greedy")
    assert old.overhead == LoopOverhead(1e-4, 2e-4)
    assert "HF overhead not measured; prediction uses polyplan's loop overhead (100 us/step + 200 us/round)" in old.note
    # engines polyplan cannot run: polyplan's loop, said so (even when the HF entry exists)
    vllm = prediction_overhead(again, "vllm", "greedy")
    assert vllm.overhead == LoopOverhead(1e-4, 2e-4) and "vllm's own loop is not measured" in vllm.note


def test_a_malformed_entry_is_one_clear_error():
    """Read once, when the profile is decoded: a version-1 file names where it kept the entry."""
    with pytest.raises(PolyplanError, match=r"old.json: meta.engine_overhead.hf.greedy.per_step_s: must be >= 0"):
        _version_1({"engine_overhead": {"hf": {"greedy": {"per_step_s": -1, "per_round_s": 0}}}})
    with pytest.raises(PolyplanError, match=r"old.json: meta.engine_overhead: must be a JSON object, got an array"):
        _version_1({"engine_overhead": ["x"]})
    payload = encode_profile(_profile())
    with pytest.raises(PolyplanError, match=r"new.json: engine_overhead.hf.greedy.per_step_s: must be >= 0"):
        decode_profile({**payload, "engine_overhead": {"hf": {"greedy": {"per_step_s": -1, "per_round_s": 0}}}}, label="new.json")
    with pytest.raises(PolyplanError, match=r"engine_overhead.hf.greedy.per_call_s: must be >= 0"):
        decode_profile({**payload, "engine_overhead": {"hf": {"greedy": {"per_step_s": 0, "per_round_s": 0, "per_call_s": -1}}}})


def test_a_malformed_table_is_a_polyplan_error_for_every_reader():
    for meta, where in (({"engine_overhead": ["x"]}, "meta.engine_overhead"), ({"engine_overhead": {"hf": ["x"]}}, "meta.engine_overhead.hf")):
        with pytest.raises(PolyplanError, match=f"{where}: must be a JSON object, got an array"):
            _version_1(meta)


def test_measured_on_tiny_models_and_resumed_by_fingerprint(single_thread):
    from polyplan.decoder.hf import HFMember
    from polyplan.engines.hf_overhead import ensure_hf_overhead
    from polyplan.models.fingerprints import ProfiledModel

    target_model = tiny_llama(0, layers=2)
    models = [
        ProfiledModel("target", HFMember(target_model, name="target"), "fp-target"),
        ProfiledModel("draft", HFMember(truncated_copy(target_model, 1), name="draft"), "fp-draft"),
    ]
    profile = _profile().with_model(ModelProfile("draft", "fp-draft", (LatencyPoint(64, 1, 0.002),)))
    before = models[1].member.model.generation_config.num_assistant_tokens
    profile, measured = ensure_hf_overhead(profile, models, list(range(3, 20)), [0.0], tokens=6, repeats=1)
    assert measured == 1
    entry = profile.engine_overhead["hf"]["greedy"]
    assert entry.details["drafter"] == "draft" and min(entry.per_step_s, entry.per_round_s, entry.per_call_s) >= 0
    rows = entry.details["configurations"]
    # min_new_tokens = max: EOS (id 2 here) never cuts a call; target-only: one target pass per token
    assert rows["target-only 3 tokens"] == {**rows["target-only 3 tokens"], "calls": 1, "steps": 3, "rounds": 0}
    assert rows["target-only 6 tokens"]["steps"] == 6
    assert rows["target-only 6 tokens"]["drafter_forward_s"] == 0.0 and rows["target-only 6 tokens"]["target_forward_s"] > 0
    for k in (1, 2, 4):
        row = rows[f"assisted 6 tokens K={k}"]
        # at most K drafter passes per round; HF drafts nothing in a last round with one token left
        assert 1 <= row["rounds"] <= 6 and row["rounds"] - 1 <= row["steps"] <= k * row["rounds"]
    assert models[1].member.model.generation_config.num_assistant_tokens == before  # the drafter's config restored
    # resumed: nothing re-measured while the fingerprint holds; a new sampling mode is added, the old entry kept
    profile, measured = ensure_hf_overhead(profile, models, list(range(3, 20)), [0.0], tokens=6, repeats=1)
    assert measured == 0
    profile, measured = ensure_hf_overhead(profile, models, list(range(3, 20)), [0.0, 1.0], tokens=6, repeats=1)
    assert measured == 1
    assert profile.engine_overhead["hf"]["greedy"] is entry and "t1.0" in profile.engine_overhead["hf"]
    # another drafter (changed weights: another fingerprint) is measured again
    models[1] = ProfiledModel("draft", models[1].member, "fp-draft-changed")
    assert ensure_hf_overhead(profile, models, list(range(3, 20)), [0.0], tokens=6, repeats=1)[1] == 1


def test_no_usable_hf_drafter_measures_nothing():
    """Not an HF target; only non-HF drafters; an HF drafter with another vocabulary (HF would
    need its universal assisted decoding): nothing is measured, the export then says so."""
    from conftest import TINY_VOCAB
    from polyplan.decoder.hf import HFMember
    from polyplan.engines.hf_overhead import ensure_hf_overhead
    from polyplan.models.fingerprints import ProfiledModel

    class Plain:
        pass

    profile = _profile()
    plain = [ProfiledModel("target", Plain(), "fp-target"), ProfiledModel("ngram", Plain(), "fp-ngram")]
    assert ensure_hf_overhead(profile, plain, [1, 2, 3], [0.0]) == (profile, 0)
    hf_target = ProfiledModel("target", HFMember(tiny_llama(0)), "fp-target")
    assert ensure_hf_overhead(profile, [hf_target, plain[1]], [1, 2, 3], [0.0]) == (profile, 0)
    other_vocab = ProfiledModel("draft", HFMember(tiny_llama(1, vocab=TINY_VOCAB + 8)), "fp-draft")
    assert ensure_hf_overhead(profile, [hf_target, other_vocab], [1, 2, 3], [0.0]) == (profile, 0)
    assert not profile.engine_overhead


def prediction_error(predicted: float, measured: float) -> float:
    """Relative error of a predicted speedup: predicted / measured − 1."""
    if not (math.isfinite(predicted) and math.isfinite(measured)) or measured <= 0:
        return float("nan")
    return predicted / measured - 1.0


def test_prediction_error_and_the_ten_percent_line():
    from polyplan.engines.hf_race import TOLERANCE, exported_row, hf_race_lines
    from polyplan.formats.race import Race, RaceRow

    def race(measured: float, exported: bool = True) -> Race:
        rows = (RaceRow("base", 1.0, 0.0, 3, 100, 100.0, 100),
                RaceRow("HF assisted draft K=4", measured, 0.02, 3, 100, 100.0 * measured, 40, predicted_speedup=1.5,
                        exported=exported, tolerance=TOLERANCE if exported else None))
        return Race("hf", rows, 2, 8, 3, 1, notes=(("hf_overhead", "loop overhead: HF generate's own"),))

    assert prediction_error(1.5, 1.4) == pytest.approx(1.5 / 1.4 - 1)
    row = exported_row(race(1.4))
    assert row.label == "HF assisted draft K=4" and row.error == pytest.approx(0.0714285714, rel=1e-6)
    assert "error +7.1%: within 10%" in hf_race_lines(race(1.4))[-3]
    # negative control: a prediction 25% off must fail the check
    assert "error +25.0%: outside 10%" in hf_race_lines(race(1.2))[-3]
    none = race(1.4, exported=False)
    assert exported_row(none) is None and "none raced" in hf_race_lines(none)[-3]


@pytest.mark.parametrize("hf_overhead", [True, False])
def test_the_loop_costs_leave_hf_overhead_out_only_when_asked(monkeypatch, hf_overhead):
    """`ensure_loop_costs(hf_overhead=False)` (the demo's profile: nothing it plans or validates
    reads HF generate's loop) never measures it; the default does (the negative control)."""
    import types

    import polyplan.pipeline.loop_costs as loop_costs
    from polyplan.profiler import ProfileSettings
    from polyplan.profiler.prompts import EncodedPrompt, Prompt

    calls = []
    nothing = lambda profile, *args, **kwargs: (profile, 0)  # noqa: E731
    monkeypatch.setattr(loop_costs, "ensure_agreement", nothing)
    monkeypatch.setattr(loop_costs, "_ensure_loop_overhead", nothing)
    monkeypatch.setattr(loop_costs, "_ensure_switch_costs", nothing)
    monkeypatch.setattr(loop_costs, "ensure_hf_overhead", lambda profile, *args, **kwargs: (calls.append(1), (profile, 1))[1])
    prompts = [EncodedPrompt(Prompt("", "user", "p:1"), tuple(range(3, 40)))]
    target = types.SimpleNamespace(name="target")
    _, run = loop_costs.ensure_loop_costs(_profile(), [target], prompts, ProfileSettings(), previous_runs=None,
                                          device_label="cpu", hf_overhead=hf_overhead)
    assert calls == ([1] if hf_overhead else []) and run.measured == (1 if hf_overhead else 0)


def test_the_demo_profiles_without_hf_overhead(monkeypatch, tmp_path):
    """The demo asks its profile for no HF overhead (its plan and validation never read it)."""
    import polyplan.pipeline.stages as stages
    from polyplan.pipeline.demo import DemoSettings

    class Seen(Exception):
        pass

    def profile_candidates(*args, **kwargs):
        raise Seen(kwargs)

    monkeypatch.setattr(stages, "profile_candidates", profile_candidates)
    with pytest.raises(Seen) as seen:
        stages.run_demo(DemoSettings(out=tmp_path / "demo", cache_dir=tmp_path / "cache"))
    assert seen.value.args[0]["hf_overhead"] is False and seen.value.args[0]["sequential"]
