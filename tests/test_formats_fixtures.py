"""Files polyplan wrote before the one codec (issue 30, item 1) still read, and re-encoding what
was read gives the same bytes: profile.json, plan.json and report.json pinned byte for byte.

The fixtures in tests/data were written by polyplan before the codec change (on 63d7747), by
tests/data/make_fixtures.py as committed with them (commit 1bc4fac, "tests: pin profile.json
and plan.json byte for byte before the one codec"; it used the readers and writers of then):
- profile_v2_paper.json: the paper's Table 1 profile (shipped as version 1) read and saved
  again, i.e. as version 2;
- profile_v2_full.json: a profile holding every record of schema_version 2;
- plan_v2_paper.json: `polyplan recommend --profile polyplan/data/paper_table1_profile.json`;
- plan_v2_checked.json: a plan with every optional record (processor, candidates, loop
  overhead and switch costs, each chain's self-check and the plan's self-check record);
- report_v1.json: written by `polyplan validate` (pinned by issue 20);
and the profile.json, plan.json and report.json of the published runs (docs/results).
Older versions still migrate: plan_v1.json, report_v1_before_near_tie.json and the paper's
version-1 profile (tests/test_formats_plan.py, test_formats_report.py, test_formats_profile.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.formats.codec import json_text
from polyplan.formats.plan import decode_plan, encode_plan, read_plan, write_plan
from polyplan.formats.profile import encode_profile, read_profile, write_profile
from polyplan.formats.validation_report import encode_report, read_report, write_report

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
PAPER = ROOT / "polyplan" / "data" / "paper_table1_profile.json"

CODECS = {
    "profile_v2_paper.json": (read_profile, encode_profile, write_profile),
    "profile_v2_full.json": (read_profile, encode_profile, write_profile),
    "plan_v2_paper.json": (read_plan, encode_plan, write_plan),
    "plan_v2_checked.json": (read_plan, encode_plan, write_plan),
    "report_v1.json": (read_report, encode_report, write_report),
}


@pytest.mark.parametrize("name", CODECS)
def test_a_pinned_file_reads_and_encodes_back_to_the_same_bytes(name, tmp_path):
    read, encode, write = CODECS[name]
    text = (DATA / name).read_text(encoding="utf-8")
    record = read(DATA / name)
    assert json_text(encode(record)) == text
    write(record, tmp_path / name)
    assert (tmp_path / name).read_text(encoding="utf-8") == text
    # negative control: the comparison sees a changed value
    changed = json.loads(text)
    first = next(key for key in changed if not key.endswith("version"))
    changed[first] = "changed"
    assert json_text(changed) != text


RESULTS = sorted(path for path in (ROOT / "docs" / "results").glob("*/*.json") if path.name in ("profile.json", "plan.json", "report.json"))
BY_NAME = {"profile.json": CODECS["profile_v2_full.json"], "plan.json": CODECS["plan_v2_checked.json"], "report.json": CODECS["report_v1.json"]}


@pytest.mark.parametrize("path", RESULTS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_the_files_of_the_published_runs_read_and_encode_back_to_the_same_bytes(path):
    """docs/results holds what real runs wrote (the family on an AMD EPYC and an H200: agreement
    runs, engine overheads, self-checks, timing health): the same rule holds for them."""
    read, encode, _ = BY_NAME[path.name]
    assert json_text(encode(read(path))) == path.read_text(encoding="utf-8")


def test_the_paper_profile_reads_as_the_version_2_file_written_from_it():
    """Version 1 (the shipped file) migrates to what polyplan wrote from it before the codec."""
    assert read_profile(PAPER) == read_profile(DATA / "profile_v2_paper.json")
    assert json_text(encode_profile(read_profile(PAPER))) == (DATA / "profile_v2_paper.json").read_text(encoding="utf-8")


def test_the_full_profile_holds_every_record():
    profile = read_profile(DATA / "profile_v2_full.json")
    stats = profile.stats("big", "small", "greedy")
    assert stats.decoded[0].mu_ci == (2.7, 3.1) and stats.implied[0].mu_positional == 2.3 and stats.engine_alpha_ci == (0.6, 0.7)
    assert profile.processor.flags == ("avx2", "avx512_bf16", "avx512f", "fma") and profile.models[0].timing.noise_budget_exhausted
    assert profile.models[0].latency[0].samples_s == (0.0199, 0.02, 0.0203) and profile.model("ngram").ngram_simple == 3
    assert profile.engine_overhead["hf"]["greedy"].details == {"drafter": "small", "threads": 1}
    assert profile.switch_costs.models == {"big": (0.001,), "small": (0.0002, 0.0001)}
    assert profile.acceptance_runs["greedy"].streams[1].ids == (0, 7) and profile.profiler.raw_prompts
    assert profile.meta == {"room": "B12", "nested": {"list": [1, 2.5, "x", None, True]}}


def test_the_checked_plan_holds_every_optional_record():
    plan = read_plan(DATA / "plan_v2_checked.json")
    assert plan.self_check is not None and plan.self_check.checked == (plan.best.chain,)
    assert all(chain.check is not None for chain in plan.alternatives)
    assert plan.best.check.measured == 2.0 and plan.alternatives[1].check.pooled
    assert plan.best.predicted_speedup == pytest.approx(plan.best.exact.speedup / 1.1)
    assert plan.processor is not None and plan.candidates.device == "cpu" and plan.switch_costs == {"eagle": (2e-4, 5e-5)}


def test_recommend_on_the_paper_profile_writes_the_plan_it_wrote_before(tmp_path, monkeypatch):
    """Issue 30's "done when": recommend on the paper's Table 1 profile writes the plan it wrote
    before the codec: the same fields, texts and counts, every number equal up to its last bits
    (numpy's sums round differently on another processor's vector width: an Intel Xeon's differ
    from the AMD EPYC's that pinned them in the 16th digit). The fixtures' bytes round-trip exactly
    (`test_a_pinned_file_reads_and_encodes_back_to_the_same_bytes` above)."""
    monkeypatch.chdir(ROOT)  # the plan records the profile's path as given
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(app, ["recommend", "--profile", "polyplan/data/paper_table1_profile.json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    pinned = DATA / "plan_v2_paper.json"
    written, before = json.loads(out.read_text(encoding="utf-8")), json.loads(pinned.read_text(encoding="utf-8"))
    assert _same_up_to_rounding(written, before), "recommend wrote another plan than tests/data/plan_v2_paper.json"
    assert _same_up_to_rounding(json.loads(json_text(encode_plan(read_plan(out)))), before)
    # negative controls: a number off in its 10th digit, or a changed text, is another plan
    off = json.loads(pinned.read_text(encoding="utf-8"))
    off["alternatives"][0]["exact"]["speedup"] *= 1 + 1e-10
    assert not _same_up_to_rounding(off, before)
    off = json.loads(pinned.read_text(encoding="utf-8"))
    off["target"] += "x"
    assert not _same_up_to_rounding(off, before)
    assert decode_plan(json.loads(pinned.read_text(encoding="utf-8"))).best.chain == ("vicuna-7b", "vicuna-7b-w4", "eagle")


def _same_up_to_rounding(written, pinned, rel: float = 1e-12) -> bool:
    """Whether two JSON values are equal but for floats within `rel` of each other."""
    if isinstance(written, float) or isinstance(pinned, float):
        return isinstance(written, (int, float)) and isinstance(pinned, (int, float)) and \
            written == pytest.approx(pinned, rel=rel, abs=1e-300)
    if isinstance(written, dict) and isinstance(pinned, dict):
        return written.keys() == pinned.keys() and all(_same_up_to_rounding(written[k], pinned[k], rel) for k in written)
    if isinstance(written, list) and isinstance(pinned, list):
        return len(written) == len(pinned) and all(_same_up_to_rounding(a, b, rel) for a, b in zip(written, pinned))
    return type(written) is type(pinned) and written == pinned
