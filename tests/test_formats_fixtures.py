"""Files polyplan writes, pinned byte for byte before the one codec (issue 30, item 1): each reads,
and re-encoding what was read gives the same bytes.

The fixtures in tests/data were written by polyplan before the codec change, by
tests/data/make_fixtures.py (run from the repository root):
- profile_v2_paper.json: the paper's Table 1 profile (shipped as version 1) read and saved
  again, i.e. as version 2;
- profile_v2_full.json: a profile holding every record of schema_version 2;
- plan_v2_paper.json: `polyplan recommend --profile polyplan/data/paper_table1_profile.json`;
- plan_v2_checked.json: a plan with every optional record (processor, candidates, loop
  overhead and switch costs, each chain's self-check and the plan's self-check record);
- report_v1.json: written by `polyplan validate` (pinned by issue 20).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyplan.formats.plan import encode_plan, read_plan
from polyplan.formats.profile_codec import encode, load
from polyplan.formats.report import read_report, report_text

DATA = Path(__file__).parent / "data"


def _text(payload) -> str:
    return json.dumps(payload, indent=2, allow_nan=False) + "\n"


CODECS = {
    "profile_v2_paper.json": lambda path: _text(encode(load(path))),
    "profile_v2_full.json": lambda path: _text(encode(load(path))),
    "plan_v2_paper.json": lambda path: _text(encode_plan(read_plan(path))),
    "plan_v2_checked.json": lambda path: _text(encode_plan(read_plan(path))),
    "report_v1.json": lambda path: report_text(read_report(path)),
}


@pytest.mark.parametrize("name", CODECS)
def test_a_pinned_file_reads_and_encodes_back_to_the_same_bytes(name):
    assert CODECS[name](DATA / name) == (DATA / name).read_text(encoding="utf-8")
