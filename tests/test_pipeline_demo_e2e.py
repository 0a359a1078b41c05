"""`polyplan demo` on the shipped family, reduced (`--quick` profiling, one prompt of each kind,
few tokens), end to end: profile → recommend → validate, the printed table, the report's
structure and the greedy flags."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.formats.validation_report import encode_report, read_report
from polyplan.validation.results import (
    CHECK_FASTEST, CHECK_GREEDY, CHECK_HOLDS, CHECK_NO_WORSE, DIAGNOSTIC_CHECKED, DIAGNOSTIC_EXACT,
)

pytestmark = pytest.mark.usefixtures("single_thread")


EXAMPLE_FAMILY = Path(__file__).resolve().parent.parent / "examples" / "zoo.yaml"


@pytest.fixture(scope="module")
def family() -> Path:
    """The shipped embedded family (examples/zoo.yaml: target, int8, early exit, drafter, n-grams)."""
    return EXAMPLE_FAMILY


def _demo(family: Path, tmp: Path, *extra: str):
    args = ["demo", "--quick", "--candidates", str(family), "--prompts-per-kind", "1", "--new-tokens", "16", "--repeats", "2",
            "--top", "1", "--cache-dir", str(tmp / "cache"), "--out", str(tmp / "demo"), "--threads", "1", *extra]
    return CliRunner().invoke(app, args)


def test_reduced_demo_prints_one_table_and_writes_a_complete_report(family, tmp_path):
    result = _demo(family, tmp_path)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert re.search(r"profile .*: \d+ entries measured, 0 reused", out)
    assert "exact" in out and "paper" in out and "measured" in out and "greedy" in out
    table = [line for line in out.splitlines() if re.match(r"^\s*(\*|#|1|2)\S*\s+target", line)]
    assert table and sum(line.lstrip().startswith("*") for line in table) == 1
    assert all(" equal " in f" {line} " for line in table)
    folder = tmp_path / "demo"
    for name in ("report.md", "report.json", "plan.json", "predicted_vs_measured.png", "measured_speedup.png",
                 "phi_paper_vs_measured.png"):
        assert (folder / name).is_file(), name
    assert f"report: {folder / 'report.md'}" in out and f"plot:   {folder / 'measured_speedup.png'}" in out
    report = (folder / "report.md").read_text()
    for heading in ("# polyplan validation report", "## Chains", "## Checks", "## Diagnostics", "## Per model", "## Plots"):
        assert heading in report
    payload = json.loads((folder / "report.json").read_text())
    assert encode_report(read_report(folder / "report.json")) == payload  # its codec reads it back
    assert [entry["greedy_equal"] for entry in payload["chains"]] == [True] * len(payload["chains"])
    assert [entry["recommended"] for entry in payload["chains"]].count(True) == 1
    assert any(entry["chain"] == ["target"] for entry in payload["chains"])
    checks = payload["checks"]  # facts about this run; none is a goal of the project's
    assert [check["name"] for check in checks] == [CHECK_HOLDS, CHECK_FASTEST, CHECK_GREEDY, CHECK_NO_WORSE]
    assert checks[2]["passed"] is True  # every chain of the demo is greedy-equal
    assert isinstance(checks[3]["passed"], bool) and "Self-check (" in out  # the demo self-checks its plan
    assert "NOT met" not in out and f"{CHECK_GREEDY} (" in out
    # the three predictions' errors are diagnostics beside the checks: every chain of the demo is lossless, so
    # each has a verdict, the one its value and threshold give
    diagnostics = {check["name"]: check for check in payload["diagnostics"]}
    for name in (DIAGNOSTIC_EXACT, DIAGNOSTIC_CHECKED):
        check = diagnostics[name]
        assert isinstance(check["passed"], bool) and check["passed"] == (check["value"] <= check["threshold"])
    assert all(source.startswith("stdlib:") for source in payload["settings"]["prompt_sources"])
    profile_file = Path(json.loads((folder / "plan.json").read_text())["profile"]["path"])
    assert profile_file.parent == tmp_path / "cache" / "profiles"  # the user's cache, never the package

    assert all(entry["predicted_speedup"]["exact_retimed"] > 0 for entry in payload["chains"])


@pytest.mark.slow
def test_a_second_demo_re_times_the_models_and_reuses_the_rest_of_the_warm_cache(family, tmp_path):
    """Two demos on one cache (slow: a second whole demo; the default run checks the same at the
    profiling step, `test_pipeline_one_profile.test_a_profiling_run_reads_its_profile_once`)."""
    first = _demo(family, tmp_path)
    assert first.exit_code == 0, first.output
    again = _demo(family, tmp_path, "--repeats", "1")
    assert again.exit_code == 0, again.output
    # the warm cache is reused: the 5 latency curves are re-timed, acceptance entries reused
    # (a pair whose drafter's re-timed T(1) now ranks differently is measured anew)
    first_measured = int(re.search(r"profile .*: (\d+) entries measured", first.stdout).group(1))
    measured, reused = map(int, re.search(r"profile .*: (\d+) entries measured, (\d+) reused", again.stdout).groups())
    assert 5 <= measured < first_measured and reused > 0


@pytest.mark.slow
def test_quick_demo_trains_the_quick_family_once_into_the_cache(tmp_path):
    args = ["demo", "--quick", "--prompts-per-kind", "1", "--new-tokens", "16", "--repeats", "1", "--top", "1",
            "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "demo"), "--threads", "1"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    family = tmp_path / "cache" / "quick-family"
    assert (family / "family.json").is_file() and (family / "models.yaml").is_file()
    stamp = (family / "target" / "model.safetensors").stat().st_mtime_ns
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output
    assert (family / "target" / "model.safetensors").stat().st_mtime_ns == stamp  # not trained again
    assert re.search(r"profile .*: \d+ entries measured, [1-9]\d* reused", second.stdout)
