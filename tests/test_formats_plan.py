"""plan.json's reader (`formats.plan`): every field a consumer uses is typed and checked once;
a foreign file (a profile, a report, unrelated JSON) is one line saying what it is."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import LoopOverhead
from polyplan.formats.plan import CandidatesRecord, InsertionVerdict, ProfileRecord, SearchRecord, decode_plan, read_plan
from polyplan.formats.profile import LoopCalibration, SCHEMA_VERSION, SwitchCosts
from polyplan.formats.profile import read_profile
from polyplan.planner.plan_builder import plan_from_profile, profile_digest

EXAMPLE = Path(__file__).resolve().parents[1] / "polyplan" / "data" / "paper_table1_profile.json"


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    profile = dataclasses.replace(read_profile(EXAMPLE), loop_overhead={"greedy": LoopCalibration(1e-4, 3e-4)},
                                  switch_costs=SwitchCosts({"eagle": (2e-4, 5e-5)}))
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    plan_from_profile(profile, path, profile_path=str(EXAMPLE), candidates={"path": "/x/models.yaml", "yaml": {"a": 1}, "device": "cpu"},
                      resamples=0)
    return path, profile


def test_the_plan_reads_back_typed(planned):
    path, profile = planned
    plan = read_plan(path)
    assert plan.loop_overhead == LoopOverhead(1e-4, 3e-4)
    assert plan.switch_costs == {"eagle": (2e-4, 5e-5)}
    assert plan.profile == ProfileRecord(str(EXAMPLE), SCHEMA_VERSION, profile_digest(profile))
    assert plan.candidates == CandidatesRecord("/x/models.yaml", {"a": 1}, "cpu")
    assert plan.search == SearchRecord(4, 8, plan.search.method, None, "iid") and plan.search.method
    assert plan.alternatives[0].chain == plan.chain and plan.device == profile.device
    assert set(plan.profiled_fingerprints) == set(profile.model_names())


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p.__setitem__("loop_overhead", {"per_step_s": -1, "per_round_s": 0}), "plan.json: loop_overhead.per_step_s: must be >= 0"),
        (lambda p: p.__setitem__("switch_costs", {"eagle": [-1]}), "plan.json: switch_costs.eagle: must be a finite number of seconds"),
        (lambda p: p.__setitem__("switch_costs", [1]), "plan.json: switch_costs: must be a JSON object, got an array"),
        (lambda p: p.__setitem__("plan_version", 3),
         "plan.json: plan_version: unsupported version 3; this polyplan reads version 2 (and migrates version 1)"),
        (lambda p: p["alternatives"][0].__setitem__("chain", p["alternatives"][0]["chain"][::-1]),
         "plan.json: alternatives[0].chain: must be a list of model names starting with the target"),
        (lambda p: p["alternatives"][0].__setitem__("chain", ["eagle"]), "plan.json: alternatives[0].block_sizes: must list 0 integers"),
        (lambda p: p["alternatives"][0]["exact"].__setitem__("speedup", -1.0), "plan.json: alternatives[0].exact.speedup: must be > 0"),
        (lambda p: p["alternatives"][1].__setitem__("block_sizes", [1] * 7), "plan.json: alternatives[1].block_sizes: must list"),
        (lambda p: p["alternatives"][0]["exact"].__setitem__("acceptances", [0.5] * 7), "plan.json: alternatives[0].exact.acceptances: must list"),
        (lambda p: p.__setitem__("colour", "blue"), "plan.json: colour: unknown field (allowed: "),
        (lambda p: p["search"].__setitem__("k_max", "8"), "plan.json: search.k_max: must be an integer, got a string"),
        (lambda p: p.__setitem__("fingerprints", {}), "plan.json: fingerprints: must give a fingerprint for every member"),
        (lambda p: p["alternatives"][0].__setitem__("draft_policy", {"k_min": 9, "k_max": 2}),
         "plan.json: alternatives[0].draft_policy: draft policy: k_min 9 is above k_max 2"),
        (lambda p: p["alternatives"][0].__setitem__("draft_policy", {"p_min": 1.5}),
         "plan.json: alternatives[0].draft_policy: draft policy: p_min must be a number in (0, 1), got 1.5"),
        (lambda p: p["alternatives"][0].__setitem__("draft_policy", {"k_min": 5, "k_max": 8}),
         "plan.json: alternatives[0].draft_policy: the last block size"),
        (lambda p: p["alternatives"][0].__setitem__("draft_policy", {"k_max": 8, "cap": 1}),
         "plan.json: alternatives[0].draft_policy.cap: unknown field"),
    ],
)
def test_a_bad_field_is_named_once_on_read(planned, edit, message):
    payload = json.loads(planned[0].read_text())
    edit(payload)
    with pytest.raises(PolyplanError) as caught:
        decode_plan(payload, "plan.json")
    assert str(caught.value).startswith(message)


def test_a_profile_or_unrelated_json_passed_as_a_plan_says_what_it_is():
    with pytest.raises(PolyplanError, match=r"^p.json: is a profile \(profile.json from polyplan profile\), not a plan"):
        decode_plan(json.loads(EXAMPLE.read_text()), "p.json")
    with pytest.raises(PolyplanError, match=r"^x.json: is not a plan \(plan.json from polyplan recommend\): none of its fields"):
        decode_plan({"hello": 1}, "x.json")


def test_the_sampling_mode_is_parsed_once_on_read(planned):
    payload = json.loads(planned[0].read_text())
    payload["sampling"] = "t1"
    assert decode_plan(payload).sampling == "t1.0"  # the canonical key, as the profile codec writes it
    payload["sampling"] = "hot"
    with pytest.raises(PolyplanError, match=r"^plan.json: sampling: key 'hot' is neither 'greedy' nor 't<temperature>'"):
        decode_plan(payload, "plan.json")


def test_one_codec_writes_and_reads_every_field(planned, tmp_path):
    """What `planner.plan_builder.plan_of` builds, `formats.plan` writes and reads back unchanged,
    and re-encoding what was read gives the file's JSON again."""
    from polyplan.formats.plan import encode_plan, write_plan
    from polyplan.planner.plan_builder import plan_of

    _, profile = planned
    result = plan_from_profile(profile, None, profile_path="p.json", resamples=30)
    plan = plan_of(result, profile_path="p.json", candidates={"path": "/m.yaml", "yaml": {"b": [1]}, "device": None},
                   profile_digest=profile_digest(profile))
    write_plan(plan, tmp_path / "plan.json")
    again = read_plan(tmp_path / "plan.json")
    assert again == plan
    assert encode_plan(again) == json.loads((tmp_path / "plan.json").read_text())
    assert again.prediction_intervals is not None and again.alternatives[0].exact.interval is not None
    assert again.alternatives[0].insertion_verdicts == plan.alternatives[0].insertion_verdicts and again.insertions
    assert again.physical_limit is not None and again.physical_limit.interval is not None and again.insertion_triples
    # negative control: an edited field reads back different
    edited = json.loads((tmp_path / "plan.json").read_text())
    edited["alternatives"][0]["exact"]["cost_per_token_s"] *= 2
    assert decode_plan(edited) != plan


V1_PLAN = Path(__file__).resolve().parent / "data" / "plan_v1.json"  # written by polyplan before plan version 2


def test_a_version_1_plan_reads_as_the_same_plan():
    """A version-1 plan (its first chain repeated at the top level) reads into the plan the
    current writer would have made: the chain, block sizes, predictions and verdicts are its
    first ranked chain's; re-encoding it gives version 2 with each chain once."""
    from polyplan.formats.plan import encode_plan, migrate_v1

    old = json.loads(V1_PLAN.read_text())
    assert old["plan_version"] == 1 and old["chain"] == old["alternatives"][0]["chain"]
    plan = read_plan(V1_PLAN)
    assert plan.chain == tuple(old["chain"]) and plan.block_sizes == tuple(old["block_sizes"])
    assert plan.best.exact.speedup == old["predicted"]["speedup"] and plan.best.paper.speedup == old["paper"]["speedup"]
    assert plan.best.exact.interval == tuple(old["predicted"]["interval"])
    assert [chain.chain for chain in plan.alternatives] == [tuple(entry["chain"]) for entry in old["alternatives"]]
    three = next(chain for chain in plan.alternatives if len(chain.chain) == 3)
    assert three.insertion_verdicts == (InsertionVerdict("vicuna-7b-w4", "helps"),)
    assert plan.loop_overhead == LoopOverhead(1e-4, 3e-4) and plan.switch_costs == {"eagle": (2e-4, 5e-5)}
    new = encode_plan(plan)
    assert new["plan_version"] == 2 and decode_plan(new) == plan
    assert not {"chain", "block_sizes", "verify_widths", "predicted", "paper"} & set(new)
    assert not {"exact_speedup", "paper_speedup", "acceptances", "theorem_3_2"} & set(new["alternatives"][0])
    # what the migration drops is exactly what version 1 repeated
    assert {key: value for key, value in old.items() if key not in ("chain", "block_sizes", "verify_widths", "predicted", "paper")} \
        == {**{key: value for key, value in migrate_v1(old).items() if key != "alternatives"}, "plan_version": 1,
            "alternatives": old["alternatives"]}
    assert new["alternatives"][0]["exact"] == old["predicted"] and new["alternatives"][0]["paper"] == old["paper"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p.__setitem__("block_sizes", [3, 3]), "is not its first ranked chain"),
        (lambda p: p.__setitem__("chain", ["vicuna-7b", "eagle"]), "is not its first ranked chain"),
        (lambda p: p["predicted"].__setitem__("speedup", 9.0), "predicted.speedup 9 differs from its first ranked chain's"),
        (lambda p: p["paper"].__setitem__("speedup", 9.0), "paper.speedup 9 differs from its first ranked chain's"),
        (lambda p: p.__delitem__("predicted"), "predicted.speedup: must be a finite number"),
    ],
)
def test_a_version_1_plan_whose_headline_was_edited_is_refused(edit, message):
    payload = json.loads(V1_PLAN.read_text())
    decode_plan(payload)  # negative control: unedited, it reads
    edit(payload)
    with pytest.raises(PolyplanError, match=r"^plan.json: .*" + message.replace(".", r"\.").replace("(", r"\(")) as caught:
        decode_plan(payload, "plan.json")
    assert str(caught.value).endswith("re-run polyplan recommend") or "finite" in message


def test_the_version_2_writer_plans_what_version_1_planned(tmp_path):
    """The same profile and options give the same plan as before version 2, field for field:
    the migrated version-1 fixture equals what the current writer makes."""
    from polyplan.formats.plan import encode_plan

    profile = dataclasses.replace(read_profile(EXAMPLE), loop_overhead={"greedy": LoopCalibration(1e-4, 3e-4)},
                                  switch_costs=SwitchCosts({"eagle": (2e-4, 5e-5)}))
    plan_from_profile(profile, tmp_path / "plan.json", profile_path="paper_table1_profile.json",
                      candidates={"path": "/x/models.yaml", "yaml": {"a": 1}, "device": "cpu"}, resamples=50)
    written = json.loads((tmp_path / "plan.json").read_text())
    # the physical limit and the insertion triples came after version 1: absent there, they read as not recorded
    old = encode_plan(read_plan(V1_PLAN))
    assert old.pop("physical_limit") is None and old.pop("insertion_triples") == []
    assert written.pop("physical_limit")["speedup"] >= written["alternatives"][0]["exact"]["speedup"]
    assert written.pop("insertion_triples")[0]["middle"] == "vicuna-7b-w4"
    # and the workload's interval (one prompt draw) came after version 2's first plans: inside the new set's
    for chain in written["alternatives"]:
        low, high = chain["exact"].pop("workload_interval")
        assert chain["exact"]["interval"][0] <= low <= chain["exact"]["speedup"] <= high <= chain["exact"]["interval"][1]
    assert written == old
    written["alternatives"][0]["exact"]["speedup"] *= 1.01  # negative control: a changed prediction is seen
    assert written != old


@pytest.mark.parametrize("policy", [{"k_min": 1, "k_max": 8}, {"p_min": 0.7}, {"k_min": 2, "k_max": 6, "p_min": 0.5}], ids=str)
def test_a_plan_with_a_draft_policy_round_trips(planned, tmp_path, policy):
    """The last level's draft policy is written only when there is one (a plan without it keeps
    its bytes), reads back typed and re-encodes to the same JSON."""
    from polyplan.formats.plan import DraftPolicy, encode_plan, write_plan

    payload = json.loads(planned[0].read_text())
    assert all("draft_policy" not in entry for entry in payload["alternatives"])
    assert encode_plan(read_plan(planned[0])) == payload
    first = payload["alternatives"][0]
    first["block_sizes"] = first["block_sizes"][:-1] + [3]
    first["draft_policy"] = policy
    plan = decode_plan(payload)
    assert plan.best.draft_policy == DraftPolicy(**policy)
    write_plan(plan, tmp_path / "plan.json")
    assert json.loads((tmp_path / "plan.json").read_text()) == payload == encode_plan(read_plan(tmp_path / "plan.json"))
    assert plan.best.blocks_label().endswith(DraftPolicy(**policy).label(3) + "]")
