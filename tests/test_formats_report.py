"""report.json (`formats.validation_report`, read and written by `formats.codec`): a written report decodes
and encodes back to the same bytes, and every malformed one is one line naming the file and the
field."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.codec import json_text
from polyplan.formats.validation_report import REPORT_VERSION, decode_report, encode_report, read_report, write_report

SAVED = Path(__file__).parent / "data" / "report_v1.json"  # written by polyplan (test_validation_report_json)


def test_a_saved_report_reads_and_writes_back_the_same_bytes(tmp_path):
    text = SAVED.read_text(encoding="utf-8")
    report = read_report(SAVED)
    assert json_text(encode_report(report)) == text
    assert decode_report(encode_report(report)) == report  # encode -> decode -> encode is the identity
    assert report.settings.repeats == 2 and report.chains[0].levels[0].tokens_per_verification.mu == 2.5
    assert report.chains[2].measured_speedup is None and report.categories[-1].rows[0].speedup is None  # lossy; NaN
    write_report(report, tmp_path / "report.json")
    assert (tmp_path / "report.json").read_text(encoding="utf-8") == text
    assert json.loads(text)["report_version"] == REPORT_VERSION == 1


def _edited(edit) -> dict:
    payload = json.loads(SAVED.read_text(encoding="utf-8"))
    edit(payload)
    return payload


CASES = {
    "missing field": (lambda p: p["chains"][0].pop("rank"), r"chains\[0\]\.rank: missing"),
    "missing nested field": (lambda p: p["chains"][1]["levels"][0]["forwards_per_token"].pop("paper"),
                             r"chains\[1\]\.levels\[0\]\.forwards_per_token\.paper: missing"),
    "wrong type": (lambda p: p["chains"][1]["levels"][0].update(tokens_drafted="42"),
                   r"chains\[1\]\.levels\[0\]\.tokens_drafted: must be an integer, got a string"),
    "a number as true": (lambda p: p["checks"][0].update(threshold=True), r"checks\[0\]\.threshold: must be a number, got a boolean"),
    "null where required": (lambda p: p["settings"].update(seed=None), r"settings\.seed: must not be null \(expected an integer\)"),
    "an object as a list": (lambda p: p["headline"].update(predicted_speedup=[2.0, 3.0]),
                            r"headline\.predicted_speedup: must be a JSON object, got an array"),
    "interval of three": (lambda p: p["chains"][0].update(predicted_interval=[1.0, 2.0, 3.0]),
                          r"chains\[0\]\.predicted_interval: must be an array of 2, got 3 items"),
    "unknown field": (lambda p: p["settings"].update(colour="blue"), r"settings\.colour: unknown field"),
    "future version": (lambda p: p.update(report_version=2),
                       r"report_version: unsupported version 2; this polyplan reads version 1 \(upgrade polyplan"),
    "a fraction where an integer is": (lambda p: p["chains"][0].update(rank=1.5), r"chains\[0\]\.rank: must be an integer, got the number 1\.5"),
    "no version": (lambda p: p.pop("report_version"), r"report_version: missing; this polyplan reads version 1"),
    "another kind of file": (lambda p: (p.clear(), p.update(plan_version=2)), r"is a plan \(plan.json from polyplan recommend\), "
                             r"not a validation report"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_malformed_report_is_one_line_naming_the_file_and_the_field(tmp_path, case):
    edit, message = CASES[case]
    path = tmp_path / "report.json"
    path.write_text(json.dumps(_edited(edit)), encoding="utf-8")
    with pytest.raises(PolyplanError) as raised:
        read_report(path)
    text = str(raised.value)
    assert "\n" not in text
    assert re.fullmatch(re.escape(str(path)) + ": " + message + ".*", text), text


def test_the_saved_report_itself_passes_every_check():
    """The negative control of the cases above: unedited, the same payload decodes."""
    assert decode_report(_edited(lambda p: None), "r.json") == read_report(SAVED)
    with pytest.raises(PolyplanError, match=r"^r\.json: must hold one JSON object, got an array$"):
        decode_report([], "r.json")
    deep = copy.deepcopy(_edited(lambda p: None))
    deep["chains"][0]["per_prompt"][0]["speedup"] = 1  # an integer where a float was: read as written
    assert encode_report(decode_report(deep)) == deep


def _as_before_later_fields(report):
    """`report` without what came later within version 1 (the cost split, seconds per pass, the
    self-check's prediction and its check): what the older fixture was saved with."""
    from dataclasses import replace

    chains = tuple(
        replace(chain, cost_split=None, checked_speedup=None, checked_interval=None,
                levels=tuple(replace(level, seconds_per_pass=None) for level in chain.levels))
        for chain in report.chains
    )
    checks = tuple(check for check in report.checks if not check.name.startswith("checked prediction"))
    return replace(report, chains=chains, checks=checks)


def test_a_report_written_before_near_tie_existed_still_reads():
    """`near_tie` came within report_version 1 with a default: a file without it reads as None,
    and is the same report otherwise (a field without a default is still required)."""
    older = read_report(Path(__file__).parent / "data" / "report_v1_before_near_tie.json")
    assert all(chain.near_tie is None for chain in older.chains)
    saved = _as_before_later_fields(read_report(SAVED))
    # the same run otherwise (what a later field changes, e.g. `holds` judged by a self-checked prediction, aside)
    assert [(c.chain, c.block_sizes, c.predicted_speedup, c.measured_speedup, c.levels, c.per_prompt) for c in older.chains] == \
        [(c.chain, c.block_sizes, c.predicted_speedup, c.measured_speedup, c.levels, c.per_prompt) for c in saved.chains]
    assert (older.settings, older.categories, older.notes) == (saved.settings, saved.categories, saved.notes)
    payload = encode_report(older)
    del payload["chains"][0]["near_tie"], payload["chains"][0]["rank"]
    with pytest.raises(PolyplanError, match=r"chains\[0\]\.rank: missing"):
        decode_report(payload, "r.json")
