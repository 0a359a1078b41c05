"""The one codec of polyplan's files (`formats.codec`): the same rules for profile.json, plan.json
and report.json and for the small records inside them (issue 30, item 1): frozen records whose
field types are the schema, checks in the fields' metadata, an unknown key an error naming the
file and the field path, and one naming scheme for the entry points."""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import pytest

from polyplan.formats import codec, overhead, plan, processor, profile
from polyplan.formats import validation_report as report
from polyplan.formats.checks import ONE_OR_MANY, non_negative, text, whole
from polyplan.formats.codec import EMPTY, NONE, Invalid, Layout, decode, encode, spec
from polyplan.formats.errors import PolyplanError

DATA = Path(__file__).parent / "data"
FILES = {profile: "profile", plan: "plan", report: "report"}


def _records(module) -> list[type]:
    return [value for value in vars(module).values()
            if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == module.__name__]


@pytest.mark.parametrize("module", [profile, plan, report, overhead, processor], ids=lambda m: m.__name__)
def test_every_record_is_frozen_and_the_codec_has_a_rule_for_every_field(module):
    records = _records(module)
    assert records
    for record in records:
        assert record.__dataclass_params__.frozen, record.__name__
        for field in codec._fields(record):  # resolves every field's type
            assert field.key and field.kind is not None, f"{record.__name__}.{field.name}"


@pytest.mark.parametrize("module", list(FILES), ids=lambda m: m.__name__)
def test_one_naming_scheme_for_the_entry_points(module):
    name = FILES[module]
    for verb in ("read", "write", "decode", "encode"):
        assert callable(getattr(module, f"{verb}_{name}")), f"{verb}_{name}"
    for old in ("load", "save", "decode", "encode", f"save_{name}", f"{name}_text"):
        assert not hasattr(module, old), f"{module.__name__}.{old} is still there"


def test_no_hand_written_json_pairs_are_left_in_formats():
    """No record carries its own to/from-JSON methods and no module its own reader of one."""
    for module in (profile, plan, report, overhead, processor):
        for record in _records(module):
            own = {name for name in vars(record) if "json" in name.lower()}
            assert not own, f"{record.__name__}: {own}"
        readers = {name for name, value in vars(module).items() if inspect.isfunction(value) and name.endswith("_from_json")}
        assert not readers, f"{module.__name__}: {readers}"
    assert not (Path(codec.__file__).parent / "profile_codec.py").exists()


@pytest.mark.parametrize(
    "path, edit, message",
    [
        ("profile_v2_full.json", lambda p: p["pairs"][0]["sampling"]["greedy"]["decoded"][0].update(colour=1),
         "pairs[0].sampling.greedy.decoded[0].colour: unknown field"),
        ("profile_v2_full.json", lambda p: p["acceptance_runs"]["greedy"]["streams"][0].update(colour=1),
         "acceptance_runs.greedy.streams[0].colour: unknown field"),
        ("profile_v2_full.json", lambda p: p["processor"].update(colour=1), "processor.colour: unknown field"),
        ("plan_v2_checked.json", lambda p: p["alternatives"][1]["exact"].update(colour=1), "alternatives[1].exact.colour: unknown field"),
        ("plan_v2_checked.json", lambda p: p["alternatives"][0]["check"].update(colour=1), "alternatives[0].check.colour: unknown field"),
        ("plan_v2_checked.json", lambda p: p["loop_overhead"].update(colour=1), "loop_overhead.colour: unknown field"),
        ("plan_v2_paper.json", lambda p: p["insertion_triples"][0]["with"].update(colour=1), "insertion_triples[0].with.colour: unknown field"),
        ("report_v1.json", lambda p: p["chains"][0]["levels"][0]["forwards_per_token"].update(colour=1),
         "chains[0].levels[0].forwards_per_token.colour: unknown field"),
    ],
)
def test_an_unknown_key_anywhere_names_the_file_and_the_field(tmp_path, path, edit, message):
    payload = json.loads((DATA / path).read_text(encoding="utf-8"))
    read = {"profile": profile.read_profile, "plan": plan.read_plan, "report": report.read_report}[path.split("_")[0]]
    edited = tmp_path / path
    edited.write_text(json.dumps(payload))
    read(edited)  # negative control: unedited, it reads
    edit(payload)
    edited.write_text(json.dumps(payload))
    with pytest.raises(PolyplanError) as caught:
        read(edited)
    assert str(caught.value).startswith(f"{edited}: {message} (allowed: "), str(caught.value)


# --------------------------------------------------------------------------- the rules, on a toy record


def _ordered(record: Toy) -> None:
    if record.low > record.high:
        raise Invalid(f"must not be above high {record.high}", ".low")


@dataclasses.dataclass(frozen=True)
class Inner:
    """A record written as its one field's value."""

    layout = Layout(transparent=True)

    pairs: tuple[tuple[int, int], ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Toy:
    layout = Layout(checks=(_ordered,))

    name: str = spec(text)
    count: int = spec(whole(1), key="n")
    low: float = 0.0
    high: float = spec(non_negative, default=1.0)
    seconds: Annotated[tuple[float, ...], ONE_OR_MANY] = (0.0,)
    table: Mapping[Annotated[str, str.lower], float] = spec(factory=dict, omit=EMPTY)
    inner: Inner = Inner()
    note: str | None = spec(default=None, omit=NONE)
    free: Any = None


def test_fields_are_keys_in_order_with_their_names_and_omission():
    toy = Toy(name="x", count=2, inner=Inner(((1, 2),)), free={"a": [1, None]})
    assert encode(toy) == {"name": "x", "n": 2, "low": 0.0, "high": 1.0, "seconds": [0.0], "inner": [[1, 2]], "free": {"a": [1, None]}}
    assert decode(Toy, json.loads(json.dumps(encode(toy)))) == toy
    assert encode(dataclasses.replace(toy, high=float("nan")))["high"] is None  # JSON has no NaN


def test_types_checks_and_steps_before_decoding():
    read = decode(Toy, {"name": "x", "n": 3.0, "low": 1, "seconds": 0.5, "table": {"A": 1}}, "t.json")
    assert read.count == 3 and isinstance(read.count, int)  # an integral number reads as an integer
    assert read.low == 1.0 and isinstance(read.low, float)  # a float field holds a float
    assert read.seconds == (0.5,) and read.table == {"a": 1.0}  # one number as a list of one; keys normalised
    for payload, message in [
        ({"name": "x"}, "t.json: n: missing"),
        ({"name": "x", "n": 0}, "t.json: n: must be an integer >= 1, got 0"),
        ({"name": " ", "n": 1}, "t.json: name: must be a non-empty string, got ' '"),
        ({"name": "x", "n": 1, "high": True}, "t.json: high: must be a number, got a boolean"),
        ({"name": "x", "n": 1, "low": 2.0}, "t.json: low: must not be above high 1.0"),
        ({"name": "x", "n": 1, "inner": [[1]]}, "t.json: inner[0]: must be an array of 2, got 1 items"),
        ({"name": "x", "n": 1, "free": {"a": [float("nan")]}}, "t.json: free.a[0]: must be a finite number, got NaN"),
        ({"name": "x", "n": 1, "count": 1}, "t.json: count: unknown field (allowed: free, high, inner, low, n, name, note, seconds, table)"),
        ([], "t.json: must be a JSON object, got an array"),
    ]:
        with pytest.raises(PolyplanError) as caught:
            decode(Toy, payload, "t.json")
        assert str(caught.value) == message


def test_a_file_names_its_kind_and_version():
    with pytest.raises(PolyplanError, match=r"^x.json: plan_version: unsupported version 9; this polyplan reads version 2 "
                                            r"\(and migrates version 1\) \(upgrade polyplan or re-run polyplan recommend\)$"):
        plan.decode_plan({"plan_version": 9}, "x.json")
    with pytest.raises(PolyplanError, match=r"^x.json: report_version: missing; this polyplan reads version 1 \("):
        report.decode_report({"chains": []}, "x.json")
    with pytest.raises(PolyplanError, match=r"^x.json: is a plan \(plan.json from polyplan recommend\), not a validation report"):
        report.decode_report({"plan_version": 2}, "x.json")


@pytest.mark.parametrize("version", [[1, 2], {"a": 1}, True, "2", 2.5, None])
def test_a_version_of_another_type_is_one_line(version):
    """Found by tests/test_cli_probe.py: a version that is a list or an object must not be looked up."""
    for key, decode_file in (("schema_version", profile.decode_profile), ("plan_version", plan.decode_plan),
                             ("report_version", report.decode_report)):
        with pytest.raises(PolyplanError, match=rf"^x.json: {key}: unsupported version "):
            decode_file({key: version}, "x.json")
