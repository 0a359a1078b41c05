"""The profile codec: schema 2's typed records round-trip, a version-1 file is migrated (its
meta entries become the typed fields, nothing measured is lost), and a future version or a
foreign file (a plan, a report, unrelated JSON) is one line naming the file and what it is."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.formats import profile as types
from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import LoopOverhead
from polyplan.formats.profile import (
    SCHEMA_VERSION, AgreementRuns, EngineCalibration, LatencyPoint, LoopCalibration, ModelProfile, PairAgreement, Profile,
    ProfilerRecord, SamplingStats, SwitchCosts, TimingHealth,
)
from polyplan.formats.profile_codec import decode, encode, load
from polyplan.planner.engine_overhead import profile_call_seconds, profile_engine_overhead
from polyplan.planner.overhead import profile_overhead, profile_switch_costs
from polyplan.planner.runs import profile_runs
from polyplan.planner.timing_health import timing_warnings
from polyplan.planner.sample_size import profile_warning

EXAMPLE = Path(__file__).resolve().parents[1] / "polyplan" / "data" / "paper_table1_profile.json"
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
    profile = decode(_version_1(), label="old.json")
    assert profile.schema_version == SCHEMA_VERSION == 2
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
    profile = load(old)
    profile.save(tmp_path / "new.json")
    payload = json.loads((tmp_path / "new.json").read_text())
    assert payload["schema_version"] == 2
    assert payload["meta"] == {"mine": {"kept": True}} and payload["models"][1]["meta"] == {"threads": "many"}
    assert "meta" not in payload["models"][0] or payload["models"][0]["meta"] == {"room": "B12"}
    assert payload["switch_costs"]["models"] == {"t": [0.001, 0.0005], "d": [0.0002]}
    assert payload["models"][0]["timing"]["noise_budget_exhausted"] is True
    again = load(tmp_path / "new.json")
    assert again == profile
    assert encode(again) == payload


def test_every_typed_record_round_trips():
    profile = Profile(
        target="t", device="cpu",
        models=[ModelProfile("t", "fp-t", [LatencyPoint(64, 1, 0.01, samples_s=(0.01, 0.011))], timing=TimingHealth(threads=1, cpus=2)),
                ModelProfile("d", "fp-d", [LatencyPoint(64, 1, 0.002)])],
        profiler=ProfilerRecord(prompts=8),
        loop_overhead={"greedy": LoopCalibration(1e-4, 2e-4, fingerprint="sha256:l"), "t0.7": LoopCalibration(1e-4, 3e-4)},
        engine_overhead={"hf": {"greedy": EngineCalibration(1e-4, 1e-3, per_call_s=0.004, fingerprint="sha256:x")}},
        switch_costs=SwitchCosts({"t": (0.001,), "d": (0.0002, 0.0001)}, context_length=64, fingerprint="sha256:s"),
        acceptance_runs={"greedy": AgreementRuns((PairAgreement("t", "d", ("10", "111")),), fingerprint="sha256:r")},
    )
    profile.add_pair("t", "d").sampling["greedy"] = SamplingStats(alpha=0.5)
    again = decode(json.loads(json.dumps(encode(profile))))
    assert again == profile
    # negative control: the comparison sees a change in a typed record
    assert decode(json.loads(json.dumps(encode(profile))).__or__({"switch_costs": {"models": {"t": [0.002]}}})) != profile


def test_the_loop_costs_keep_their_fingerprints_through_the_codec_and_the_migration():
    """The pipeline reuses a loop overhead or switch costs while their fingerprint holds
    (`profiler.loop_costs`): the fingerprint survives a round trip and a version-1 file, where
    it sat inside the meta entry."""
    old = _version_1()
    old["meta"]["loop_overhead"]["greedy"]["fingerprint"] = "sha256:l"
    old["meta"]["switch_cost"]["fingerprint"] = "sha256:s"
    profile = decode(old)
    assert profile.loop_overhead["greedy"].fingerprint == "sha256:l"
    assert profile.switch_costs.fingerprint == "sha256:s"
    payload = json.loads(json.dumps(encode(profile)))
    assert payload["loop_overhead"]["greedy"]["fingerprint"] == "sha256:l" and payload["switch_costs"]["fingerprint"] == "sha256:s"
    assert decode(payload) == profile
    # negative control: without one, none is invented (the pipeline then measures afresh)
    assert decode(_version_1()).loop_overhead["greedy"].fingerprint is None and decode(_version_1()).switch_costs.fingerprint is None


def test_every_field_names_a_check_the_codec_knows():
    known = {"count0", "count1", "seconds", "non_negative", "probability", "unit", "correlation", "mu", "unit_interval",
             "mu_interval", "non_negative_interval", "text", "string", "flag", "texts", "timings", "quantiles", "free",
             "record", "records", "modes", "engines", "switch_table", "bits", "version"}
    records = [value for value in vars(types).values() if dataclasses.is_dataclass(value) and value.__module__ == types.__name__]
    assert len(records) >= 15
    for record in records:
        for field in dataclasses.fields(record):
            if field.name == "source":
                continue
            assert field.metadata.get("json") in known, f"{record.__name__}.{field.name}"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p.__setitem__("schema_version", 3),
         "bad.json: schema_version: unsupported version 3; this polyplan reads version 2 (and migrates version 1)"),
        (lambda p: p.__setitem__("switch_cost", {"models": {}}), "bad.json: unknown field 'switch_cost'"),
        (lambda p: p.__setitem__("switch_costs", [1]), "bad.json: switch_costs: must be an object with 'models'"),
        (lambda p: p.__setitem__("loop_overhead", {"t0": {"per_step_s": 0, "per_round_s": 0}}),
         "bad.json: loop_overhead: key 't0' is neither 'greedy' nor 't<temperature>'"),
        (lambda p: p["models"][0].__setitem__("timing", {"threads": 0}), "bad.json: models[0].timing.threads: must be an integer >= 1"),
    ],
)
def test_a_bad_version_2_field_is_named(edit, message):
    payload = encode(decode(_version_1()))
    edit(payload)
    with pytest.raises(PolyplanError) as caught:
        decode(payload, label="bad.json")
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
        decode(payload, label="x.json")
    assert str(caught.value).startswith(message)


def test_recommend_given_a_plan_as_its_profile_says_so(tmp_path):
    runner = CliRunner()
    plan = tmp_path / "plan.json"
    made = runner.invoke(app, ["recommend", "--profile", str(EXAMPLE), "--out", str(plan), "--resamples", "0"])
    assert made.exit_code == 0, made.output
    wrong = runner.invoke(app, ["recommend", "--profile", str(plan), "--out", str(tmp_path / "again.json")])
    assert wrong.exit_code == 2
    assert f"error: {plan}: is a plan (plan.json from polyplan recommend), not a profile" in wrong.stderr
