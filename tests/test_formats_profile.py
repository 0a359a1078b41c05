"""The profile file (`formats.profile`, read and written by `formats.codec`): every field
round-trips (atomic save), the profiler's fields (intervals, implied μ, fingerprints,
warnings) included; schema 2's typed records; a version-1 file is migrated (its meta entries
become the typed fields, nothing measured is lost); one clear error per bad field; a future
version or a foreign file (a plan, a report, unrelated JSON) is one line naming the file and
what it is."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import LoopOverhead
from polyplan.formats.profile import (
    SCHEMA_VERSION, AgreementRuns, AlphaDistribution, DecodedStats, EngineCalibration, ImpliedStats, LatencyPoint,
    LoopCalibration, ModelProfile, PairAgreement, PrefillPoint, Profile, ProfilerRecord, SamplingStats, SwitchCosts,
    TimingHealth,
)
from polyplan.formats.profile import decode_profile, encode_profile, read_profile, write_profile
from polyplan.formats.sampling import SamplingMode
from polyplan.planner.exact.engine_overhead import profile_call_seconds, profile_engine_overhead
from polyplan.planner.exact.overhead import profile_overhead, profile_switch_costs
from polyplan.planner.exact.runs import profile_runs
from polyplan.planner.intervals.timing_health import timing_warnings
from polyplan.planner.intervals.sample_size import profile_warning

EXAMPLE = Path(__file__).resolve().parents[1] / "polyplan" / "data" / "paper_table1_profile.json"


def _example_payload() -> dict:
    return json.loads(EXAMPLE.read_text())


def _write(tmp_path: Path, payload: dict, name: str = "profile.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(payload))
    return path


def test_example_profile_loads_with_table1_numbers():
    profile = read_profile(EXAMPLE)
    assert profile.target == "vicuna-7b"
    assert [m.latency[0].median_s for m in profile.models] == [0.025, 0.007, 0.004]
    mus = {(p.verifier, p.drafter): p.sampling["greedy"].decoded[0].mu for p in profile.pairs}
    assert mus == {
        ("vicuna-7b", "vicuna-7b-w4"): 6.26,
        ("vicuna-7b", "eagle"): 4.34,
        ("vicuna-7b-w4", "eagle"): 4.36,
    }


def test_the_shipped_profile_is_the_one_copy_and_resources_reads_it():
    from conftest import shipped_paper_profile

    assert shipped_paper_profile().read_bytes() == EXAMPLE.read_bytes()
    assert not (Path(__file__).resolve().parents[1] / "examples" / "paper_table1_profile.json").exists()


def test_save_refuses_an_invalid_profile_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "p.json"
    profile = read_profile(EXAMPLE)
    write_profile(profile, path)
    before = path.read_text()
    pair = profile.pairs[0]
    profile = profile.with_stats(pair.verifier, pair.drafter, "greedy", dataclasses.replace(pair.sampling["greedy"], alpha=1.5))
    with pytest.raises(PolyplanError, match=r"pairs\[0\]\.sampling\.greedy\.alpha: must be in \[0, 1\)"):
        write_profile(profile, path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_sampling_keys():
    assert SamplingMode(0).key == "greedy"
    assert SamplingMode(1.0).key == "t1.0"
    assert SamplingMode(0.7).key == "t0.7"
    with pytest.raises(PolyplanError, match="temperature"):
        SamplingMode(-1)


def test_sampling_temperature_reverses_the_key():
    for temperature in (0.0, 0.7, 1.0):
        assert SamplingMode.parse(SamplingMode(temperature).key).temperature == temperature
    for bad in ("x0.7", "tabc", "", "t0", "t-1", "tnan", "tinf"):
        with pytest.raises(PolyplanError, match="neither 'greedy'"):
            SamplingMode.parse(bad)
    assert SamplingMode.parse("greedy").greedy and not SamplingMode.parse("t0.7").greedy


def _mutate(payload: dict, path: str, value) -> dict:
    target = payload
    keys = path.split("/")
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    last = keys[-1]
    if value is _DELETE:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return payload


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("pairs/2/sampling/greedy/alpha", 1.3, "profile.json: pairs[2].sampling.greedy.alpha: must be in [0, 1), got 1.3"),
        ("pairs/0/sampling/greedy/alpha", -0.1, "pairs[0].sampling.greedy.alpha: must be in [0, 1), got -0.1"),
        ("pairs/0/sampling/greedy/alpha", 1.0, "pairs[0].sampling.greedy.alpha: must be in [0, 1), got 1"),
        ("models/1/latency/0/median_s", -0.007, "models[1].latency[0].median_s: must be > 0, got -0.007"),
        ("models/1/latency/0/median_s", 0, "models[1].latency[0].median_s: must be > 0, got 0"),
        ("models/0/latency/0/k", 0, "models[0].latency[0].k: must be an integer >= 1, got 0"),
        ("pairs/0/sampling/greedy/decoded/0/k", 0, "decoded[0].k: must be an integer >= 1, got 0"),
        ("pairs/0/sampling/greedy/decoded/0/mu", 9.0, "decoded[0].mu: must be in [1, k + 1] = [1, 8], got 9"),
        ("schema_version", 3, "schema_version: unsupported version 3; this polyplan reads version 2"),
        ("schema_version", _DELETE, "schema_version: missing; this polyplan reads version 2"),
        ("target", "llama", "target: 'llama' is not one of the models"),
        ("models/0/fingerprint", "", "models[0].fingerprint: must be a non-empty string"),
        ("models/0/latncy", [], "models[0].latncy: unknown field"),
        ("pairs/1/drafter", "nobody", "pairs[1].drafter: 'nobody' is not one of the models"),
        ("pairs/0/sampling/t-hot", {"alpha": 0.5}, "pairs[0].sampling: key 't-hot' is neither"),
        ("models/2/name", "vicuna-7b", "models[2].name: duplicate model name 'vicuna-7b'"),
        ("models/0/latency/0/median_s", True, "models[0].latency[0].median_s: must be a number, got a boolean"),
    ],
)
def test_bad_field_is_named(tmp_path, path, value, message):
    bad = _write(tmp_path, _mutate(_example_payload(), path, value))
    with pytest.raises(PolyplanError) as caught:
        read_profile(bad)
    text = str(caught.value)
    assert message in text
    assert "\n" not in text
    assert text.startswith(str(bad))


def test_nan_in_the_json_is_rejected_with_its_field(tmp_path):
    text = EXAMPLE.read_text().replace('"alpha": 0.813996', '"alpha": NaN')
    path = tmp_path / "profile.json"
    path.write_text(text)
    with pytest.raises(PolyplanError, match=r"pairs\[1\]\.sampling\.greedy\.alpha: must be a finite number, got NaN"):
        read_profile(path)
    path.write_text(EXAMPLE.read_text().replace('"median_s": 0.025', '"median_s": Infinity'))
    with pytest.raises(PolyplanError, match=r"models\[0\]\.latency\[0\]\.median_s: must be a finite number"):
        read_profile(path)


def test_unreadable_inputs(tmp_path):
    with pytest.raises(PolyplanError, match="no such file"):
        read_profile(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{\"schema_version\": 1,")
    with pytest.raises(PolyplanError, match=r"broken.json: not valid JSON \(line 1"):
        read_profile(broken)
    array = tmp_path / "array.json"
    array.write_text("[]")
    with pytest.raises(PolyplanError, match="must hold one JSON object"):
        read_profile(array)


def test_optional_distribution_fields_validate(tmp_path):
    payload = _example_payload()
    payload["pairs"][0]["sampling"]["greedy"]["alpha_distribution"] = {
        "mean": 0.93, "std": 0.2, "samples": 100, "quantiles": {"0.5": 1.0, "0.1": 0.4}
    }
    profile = read_profile(_write(tmp_path, payload))
    spread = profile.pairs[0].sampling["greedy"].alpha_distribution
    assert spread is not None and spread.quantiles == {"0.5": 1.0, "0.1": 0.4}
    payload["pairs"][0]["sampling"]["greedy"]["alpha_distribution"]["quantiles"] = {"median": 1.0}
    with pytest.raises(PolyplanError, match=r"alpha_distribution\.quantiles: key 'median' is not a probability"):
        read_profile(_write(tmp_path, payload))
    assert math.isfinite(profile.pairs[0].sampling["greedy"].alpha)


def _full_profile() -> Profile:
    models = (
        ModelProfile(
            "big", "fp-big", (LatencyPoint(64, 1, 0.02, 0.001, 9),), (PrefillPoint(64, 0.05, 0.002, 3),), latency_fingerprint="sha256:lat"
        ),
        ModelProfile("small", "fp-small", (LatencyPoint(64, 1, 0.002),)),
    )
    profile = Profile(target="big", device="cpu", models=models, pairs=())
    return profile.with_stats("big", "small", "greedy", SamplingStats(
        alpha=0.7,
        alpha_samples=400,
        alpha_ci=(0.65, 0.74),
        alpha_distribution=AlphaDistribution(0.7, 0.45, {"0.5": 1.0}, 400, autocorrelation=0.2),
        implied=(ImpliedStats(2, 2.19, 2.3), ImpliedStats(4, 2.77)),
        decoded=(DecodedStats(4, 2.9, 1.1, 120, mu_ci=(2.7, 3.1), sigma_ci=(1.0, 1.2), prompts=8, fingerprint="sha256:dec"),),
        fingerprint="sha256:alpha",
        warnings=("K=4: decoded mu 2.90 vs 2.77 implied",),
    ))


def test_every_field_round_trips_through_the_file_and_the_codec(tmp_path):
    """One round trip for every record the codec writes: built field by field, saved
    atomically, read back equal; encode/decode equal too, with a negative control."""
    profile = _full_profile()
    profile = profile.with_stats("big", "small", SamplingMode(1.0).key, SamplingStats(alpha=0.6))
    assert len(profile.pairs) == 1  # a pair is added once
    big = profile.models[0]
    profile = profile.with_model(dataclasses.replace(
        big, timing=TimingHealth(threads=1, cpus=2), latency=(dataclasses.replace(big.latency[0], samples_s=(0.02, 0.021)),),
    ))
    profile = dataclasses.replace(
        profile,
        profiler=ProfilerRecord(prompts=8),
        loop_overhead={"greedy": LoopCalibration(1e-4, 2e-4, fingerprint="sha256:l"), "t0.7": LoopCalibration(1e-4, 3e-4)},
        engine_overhead={"hf": {"greedy": EngineCalibration(1e-4, 1e-3, per_call_s=0.004, fingerprint="sha256:x")}},
        switch_costs=SwitchCosts({"big": (0.001,), "small": (0.0002, 0.0001)}, context_length=64, fingerprint="sha256:s"),
        acceptance_runs={"greedy": AgreementRuns((PairAgreement("big", "small", ("10", "111")),), fingerprint="sha256:r")},
    )
    path = tmp_path / "p.json"
    write_profile(profile, path)
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # the temporary file was renamed
    again = read_profile(path)
    assert again == profile
    assert set(again.pairs[0].sampling) == {"greedy", "t1.0"}
    stats = again.pairs[0].sampling["greedy"]
    assert stats.alpha_ci == (0.65, 0.74) and stats.decoded[0].mu_ci == (2.7, 3.1)
    assert stats.implied[1].mu_positional is None
    assert again.models[0].latency_fingerprint == "sha256:lat" and again.models[1].latency_fingerprint is None
    assert decode_profile(json.loads(json.dumps(encode_profile(profile)))) == profile
    # negative control: the comparison sees a change in a typed record
    assert decode_profile(json.loads(json.dumps(encode_profile(profile))).__or__({"switch_costs": {"models": {"big": [0.002]}}})) != profile


def test_old_profiles_without_the_new_fields_still_load():
    profile = read_profile(EXAMPLE)
    stats = profile.pairs[0].sampling["greedy"]
    assert stats.alpha_ci is None and stats.implied == () and stats.warnings == () and stats.fingerprint is None


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s: s.__setitem__("alpha_ci", [0.8, 0.7]), r"greedy\.alpha_ci: low 0\.8 is above high 0\.7"),
        (lambda s: s.__setitem__("alpha_ci", [0.5, 1.2]), r"greedy\.alpha_ci: must lie within \[0, 1\]"),
        (lambda s: s.__setitem__("alpha_ci", [0.5]), r"greedy\.alpha_ci: must be an array of 2, got 1 items"),
        (lambda s: s["implied"][0].__setitem__("mu", 3.5), r"greedy\.implied\[0\]\.mu: must be in \[1, k \+ 1\] = \[1, 3\]"),
        (lambda s: s["implied"].append({"k": 2, "mu": 2.0}), r"greedy\.implied\[2\]: duplicate entry for k 2"),
        (lambda s: s["implied"][0].__setitem__("extra", 1), r"greedy\.implied\[0\]\.extra: unknown field"),
        (lambda s: s["decoded"][0].__setitem__("mu_ci", [0.5, 3.0]), r"greedy\.decoded\[0\]\.mu_ci: must lie within \[1, 5\]"),
        (lambda s: s["decoded"][0].__setitem__("sigma_ci", [-1.0, 3.0]), r"greedy\.decoded\[0\]\.sigma_ci: must lie within \[0, inf\]"),
        (lambda s: s["decoded"][0].__setitem__("prompts", 0), r"greedy\.decoded\[0\]\.prompts: must be an integer >= 1"),
        (lambda s: s["decoded"][0].__setitem__("fingerprint", ""), r"greedy\.decoded\[0\]\.fingerprint: must be a non-empty string"),
        (lambda s: s.__setitem__("warnings", ["ok", 3]), r"greedy\.warnings\[1\]: must be a string, got the number 3"),
        (lambda s: s.__setitem__("warnings", ["ok", " "]), r"greedy\.warnings\[1\]: must be a non-empty string"),
        (lambda s: s["alpha_distribution"].__setitem__("autocorrelation", 1.5), r"alpha_distribution\.autocorrelation: must be in \[-1, 1\]"),
    ],
)
def test_bad_new_fields_are_named(tmp_path, mutate, message):
    payload = encode_profile(_full_profile())
    mutate(payload["pairs"][0]["sampling"]["greedy"])
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(PolyplanError, match=message) as caught:
        read_profile(path)
    assert str(caught.value).startswith(f"{path}: pairs[0].sampling.greedy")


def test_bad_latency_fingerprint_is_named(tmp_path):
    payload = encode_profile(_full_profile())
    payload["models"][0]["latency_fingerprint"] = 7
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(PolyplanError, match=r"models\[0\]\.latency_fingerprint: must be a string, got the number 7"):
        read_profile(path)


TIMING = {"reference_median_s": 0.002, "reference_relative_iqr": 0.4, "latency_outliers": 1, "latency_timings": 40,
          "noise_budget_exhausted": True, "threads": 1, "cpus": 2, "load_average": 0.5}


def _version_1() -> dict:
    """A version-1 profile as polyplan wrote it: the profiler's records in meta, beside a user's key."""
    latency = [{"context_length": 64, "k": 1, "median_s": 0.01}]
    return {
        "schema_version": 1, "target": "t", "device": "cpu",
        "meta": {
            "profiler": {"latency": {"ks": [1, 2]}, "acceptance": {"block_sizes": [2, 3]}, "prompts": 3, "torch": "2.4"},
            "loop_overhead": {"greedy": {"per_step_s": 1e-4, "per_round_s": 3e-4, "vocab": 64, "threads": 1, "method": "m"}},
            "engine_overhead": {"hf": {"greedy": {"per_step_s": 2e-4, "per_round_s": 1e-3, "per_call_s": 0.01,
                                                  "fingerprint": "sha256:e", "drafter": "d", "threads": 1}}},
            "switch_cost": {"models": {"t": [0.001, 0.0005], "d": 0.0002}, "context_length": 64, "method": "m"},
            "acceptance_runs": {"greedy": {"fingerprint": "sha256:r", "prompts": 2, "new_tokens": 4,
                                           "pairs": [{"verifier": "t", "drafter": "d", "agreement": ["1101", "0"]}]}},
            "mine": {"kept": True},
        },
        "models": [{"name": "t", "fingerprint": "fp-t", "latency": latency, "meta": {**TIMING, "room": "B12"}},
                   {"name": "d", "fingerprint": "fp-d", "latency": latency, "meta": {"threads": "many"}}],
        "pairs": [{"verifier": "t", "drafter": "d", "sampling": {"greedy": {"alpha": 0.6}}}],
    }


def test_a_version_1_profile_is_migrated_onto_the_typed_fields():
    profile = decode_profile(_version_1(), label="old.json")
    assert encode_profile(profile)["schema_version"] == SCHEMA_VERSION == 2
    assert profile.profiler == ProfilerRecord(latency={"ks": [1, 2]}, acceptance={"block_sizes": [2, 3]}, prompts=3, torch="2.4")
    assert profile_overhead(profile, "greedy") == LoopOverhead(1e-4, 3e-4)
    assert profile.loop_overhead["greedy"].vocab == 64
    assert profile_engine_overhead(profile, "hf", "greedy") == LoopOverhead(2e-4, 1e-3)
    assert profile_call_seconds(profile, "hf", "greedy") == 0.01
    assert profile.engine_overhead["hf"]["greedy"].details == {"drafter": "d", "threads": 1}
    assert profile_switch_costs(profile) == {"t": (0.001, 0.0005), "d": (0.0002,)}
    assert profile_runs(profile, "greedy") == {("t", "d"): ((True, True, False, True), (False,))}
    assert profile.models[0].timing == TimingHealth(**TIMING)
    assert any("machine floor was noisy" in line for line in timing_warnings(profile))
    assert "3 prompt(s)" in profile_warning(profile)
    # what is the user's stays the user's: their keys, and values the old reader ignored
    assert profile.meta == {"mine": {"kept": True}}
    assert profile.models[0].meta == {"room": "B12"}
    assert profile.models[1].timing is None and profile.models[1].meta == {"threads": "many"}


def test_a_migrated_profile_is_written_as_version_2_and_reads_back_the_same(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_version_1()))
    profile = read_profile(old)
    write_profile(profile, tmp_path / "new.json")
    payload = json.loads((tmp_path / "new.json").read_text())
    assert payload["schema_version"] == 2
    assert payload["meta"] == {"mine": {"kept": True}} and payload["models"][1]["meta"] == {"threads": "many"}
    assert "meta" not in payload["models"][0] or payload["models"][0]["meta"] == {"room": "B12"}
    assert payload["switch_costs"]["models"] == {"t": [0.001, 0.0005], "d": [0.0002]}
    assert payload["models"][0]["timing"]["noise_budget_exhausted"] is True
    again = read_profile(tmp_path / "new.json")
    assert again == profile
    assert encode_profile(again) == payload


def test_the_loop_costs_keep_their_fingerprints_through_the_codec_and_the_migration():
    """The pipeline reuses a loop overhead or switch costs while their fingerprint holds
    (`pipeline.loop_costs`): the fingerprint survives a round trip and a version-1 file, where
    it sat inside the meta entry."""
    old = _version_1()
    old["meta"]["loop_overhead"]["greedy"]["fingerprint"] = "sha256:l"
    old["meta"]["switch_cost"]["fingerprint"] = "sha256:s"
    profile = decode_profile(old)
    assert profile.loop_overhead["greedy"].fingerprint == "sha256:l"
    assert profile.switch_costs.fingerprint == "sha256:s"
    payload = json.loads(json.dumps(encode_profile(profile)))
    assert payload["loop_overhead"]["greedy"]["fingerprint"] == "sha256:l" and payload["switch_costs"]["fingerprint"] == "sha256:s"
    assert decode_profile(payload) == profile
    # negative control: without one, none is invented (the pipeline then measures afresh)
    assert decode_profile(_version_1()).loop_overhead["greedy"].fingerprint is None and decode_profile(_version_1()).switch_costs.fingerprint is None


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p.__setitem__("schema_version", 3),
         "bad.json: schema_version: unsupported version 3; this polyplan reads version 2 (and migrates version 1)"),
        (lambda p: p.__setitem__("switch_cost", {"models": {}}), "bad.json: switch_cost: unknown field"),
        (lambda p: p.__setitem__("switch_costs", [1]), "bad.json: switch_costs: must be a JSON object, got an array"),
        (lambda p: p.__setitem__("loop_overhead", {"t0": {"per_step_s": 0, "per_round_s": 0}}),
         "bad.json: loop_overhead: key 't0' is neither 'greedy' nor 't<temperature>'"),
        (lambda p: p["models"][0].__setitem__("timing", {"threads": 0}), "bad.json: models[0].timing.threads: must be an integer >= 1"),
    ],
)
def test_a_bad_version_2_field_is_named(edit, message):
    payload = encode_profile(decode_profile(_version_1()))
    edit(payload)
    with pytest.raises(PolyplanError) as caught:
        decode_profile(payload, label="bad.json")
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"plan_version": 1, "chain": ["t"]}, "x.json: is a plan (plan.json from polyplan recommend), not a profile"),
        ({"headline": {}, "chains": []}, "x.json: is a validation report (from polyplan validate), not a profile"),
        ({"candidates": []}, "x.json: is a candidates file (models.yaml), not a profile"),
        ({"hello": "world"}, "x.json: is not a profile (profile.json from polyplan profile): none of its fields"),
        ([1, 2], "x.json: must hold one JSON object, got an array"),
    ],
)
def test_a_foreign_file_is_one_line_saying_what_it_is(payload, message):
    with pytest.raises(PolyplanError) as caught:
        decode_profile(payload, label="x.json")
    assert str(caught.value).startswith(message)


def test_recommend_given_a_plan_as_its_profile_says_so(tmp_path):
    runner = CliRunner()
    plan = tmp_path / "plan.json"
    made = runner.invoke(app, ["recommend", "--profile", str(EXAMPLE), "--out", str(plan), "--resamples", "0"])
    assert made.exit_code == 0, made.output
    wrong = runner.invoke(app, ["recommend", "--profile", str(plan), "--out", str(tmp_path / "again.json")])
    assert wrong.exit_code == 2
    assert f"error: {plan}: is a plan (plan.json from polyplan recommend), not a profile" in wrong.stderr


def test_the_target_streams_round_trip_and_bad_ones_are_named():
    from polyplan.formats.profile import AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats, TargetStream

    models = tuple(ModelProfile(name, f"fp-{name}", (LatencyPoint(8, 1, 0.01),)) for name in ("a", "b"))
    profile = Profile(target="a", device="cpu", models=models, pairs=()).with_stats("a", "b", "greedy", SamplingStats(alpha=0.5))
    streams = (TargetStream(3, (1, 2, 3, 4, 5)), TargetStream(1, (0, 7)))
    profile = dataclasses.replace(profile, acceptance_runs={"greedy": AgreementRuns((PairAgreement("a", "b", ("10",)),), streams=streams)})
    payload = encode_profile(profile)
    assert decode_profile(json.loads(json.dumps(payload)), label="p.json").acceptance_runs["greedy"].streams == streams
    old = json.loads(json.dumps(payload))
    del old["acceptance_runs"]["greedy"]["streams"]
    assert decode_profile(old, label="p.json").acceptance_runs["greedy"].streams == ()  # a profile made before streams
    for edit, message in [
        (lambda s: s[0].__setitem__("prompt_tokens", 9), "streams[0].prompt_tokens: 9 is more than the stream's 5 ids"),
        (lambda s: s[1].__setitem__("ids", [0, -1]), "streams[1].ids[1]: must be an integer >= 0"),
        (lambda s: s[1].__setitem__("ids", []), "streams[1].ids: must hold at least one token id"),
    ]:
        bad = json.loads(json.dumps(payload))
        edit(bad["acceptance_runs"]["greedy"]["streams"])
        with pytest.raises(PolyplanError, match=message.replace("[", r"\[").replace("]", r"\]")):
            decode_profile(bad, label="p.json")


def test_the_10_best_confidences_round_trip_and_an_old_profile_re_encodes_unchanged():
    """`PairAgreement.confidence_top10` (llama-server's p_min reads it) rides the codec beside
    `confidence`, with the same per-position check; a profile from before it, with confidences
    only, decodes without it and re-encodes to the same bytes."""
    from polyplan.formats.codec import json_text
    from polyplan.formats.profile import AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats

    models = tuple(ModelProfile(name, f"fp-{name}", (LatencyPoint(8, 1, 0.01),)) for name in ("a", "b"))
    profile = Profile(target="a", device="cpu", models=models, pairs=()).with_stats("a", "b", "greedy", SamplingStats(alpha=0.5))
    pair = PairAgreement("a", "b", ("10", "111"), ("33ff", "0080ff"), ("40ff", "0190ff"))
    profile = dataclasses.replace(profile, acceptance_runs={"greedy": AgreementRuns((pair,))})
    payload = json.loads(json.dumps(encode_profile(profile)))
    assert payload["acceptance_runs"]["greedy"]["pairs"][0]["confidence_top10"] == ["40ff", "0190ff"]
    again = decode_profile(payload, label="p.json")
    assert again == profile
    runs = again.acceptance_runs["greedy"]
    assert runs.confidences_by_pair(top10=True) == {("a", "b"): ((64 / 255, 1.0), (1 / 255, 144 / 255, 1.0))}
    assert runs.confidences_by_pair() == {("a", "b"): ((51 / 255, 1.0), (0.0, 128 / 255, 1.0))}
    # a profile made before: confidences only; nothing new appears when it is written again
    old = json.loads(json.dumps(payload))
    del old["acceptance_runs"]["greedy"]["pairs"][0]["confidence_top10"]
    decoded = decode_profile(old, label="old.json")
    assert decoded.acceptance_runs["greedy"].pairs[0].confidence_top10 == ()
    assert decoded.acceptance_runs["greedy"].confidences_by_pair(top10=True) == {}
    assert json_text(encode_profile(decoded)) == json_text(old)
    assert json_text(encode_profile(decode_profile(payload))) != json_text(old)  # negative control
    for edit, message in [
        (lambda p: p.__setitem__("confidence_top10", ["40ff"]), "pairs[0].confidence_top10: must give two hex digits per agreement position"),
        (lambda p: p.__setitem__("confidence_top10", ["40", "0190ff"]), "pairs[0].confidence_top10: must give two hex digits per agreement"),
        (lambda p: p.__setitem__("confidence_top10", ["4g00", "0190ff"]), "pairs[0].confidence_top10: strings of two-digit hexadecimal"),
    ]:
        bad = json.loads(json.dumps(payload))
        edit(bad["acceptance_runs"]["greedy"]["pairs"][0])
        with pytest.raises(PolyplanError, match=message.replace("[", r"\[").replace("]", r"\]")):
            decode_profile(bad, label="p.json")
