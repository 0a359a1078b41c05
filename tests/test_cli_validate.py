"""`polyplan recommend --candidates` and `polyplan validate` through typer's CliRunner on a tiny
local family (built here, never downloaded), and every bad input they promise one line for."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import perturbed_copy, save_model, tiny_llama, tiny_tokenizer, write_candidate_workspace
from polyplan.cli.app import app
from polyplan.formats.codec import encode
from polyplan.formats.processor import Processor
from polyplan.formats.validation_report import encode_report, read_report

pytestmark = pytest.mark.usefixtures("single_thread", "short_calibrations")

PROFILE_FAST = [
    "--new-tokens", "8", "--latency-ks", "1,2,4", "--context-lengths", "8,16", "--repeats", "3", "--warmup", "1", "--noise-budget", "0",
    "--decoded-prompts", "2", "--block-sizes", "2", "--temperatures", "0", "--threads", "1",
]
VALIDATE_FAST = ["--new-tokens", "12", "--repeats", "2", "--top", "1"]


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, short_calibrations) -> Path:
    root = write_candidate_workspace(tmp_path_factory.mktemp("validate_cli"))
    result = _invoke("profile", "--candidates", str(root / "models.yaml"), "--prompts", str(root / "prompts.jsonl"),
                     "--out", str(root / "profile.json"), *PROFILE_FAST)
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture(scope="module")
def planned(workspace) -> Path:
    plan = workspace / "plan.json"
    result = _invoke("recommend", "--candidates", str(workspace / "models.yaml"), "--profile", str(workspace / "profile.json"),
                     "--prompts", str(workspace / "prompts.jsonl"), "--out", str(plan), "--threads", "1")
    assert result.exit_code == 0, result.output
    return plan


def test_recommend_with_candidates_reuses_the_profile_and_records_the_models(workspace, planned):
    payload = json.loads(planned.read_text())
    assert payload["candidates"]["path"] == str((workspace / "models.yaml").resolve())
    assert payload["candidates"]["yaml"]["candidates"][0]["name"] == "target"
    assert set(payload["fingerprints"]) == {"target", "small", "ngram"}
    assert set(payload["loop_overhead"]) == {"per_step_s", "per_round_s"}
    assert all({"exact", "paper", "insertion_verdicts"} <= set(entry) for entry in payload["alternatives"])
    again = _invoke("recommend", "--candidates", str(workspace / "models.yaml"), "--profile", str(workspace / "profile.json"),
                    "--prompts", str(workspace / "prompts.jsonl"), "--out", str(workspace / "again.json"), "--threads", "1")
    assert again.exit_code == 0, again.output
    assert "profile " in again.stdout and ": 0 entries measured" in again.stdout  # the settings were resumed
    assert "Thm 3.2 per insertion" in again.stdout and "per verification round" in again.stdout


def test_top_beyond_the_plans_alternatives_validates_them_all_and_says_so(workspace, planned, tmp_path):
    ranked = len(json.loads(planned.read_text())["alternatives"]) - 1
    result = _invoke("validate", "--plan", str(planned), "--prompts", str(workspace / "prompts.jsonl"), *VALIDATE_FAST,
                     "--top", "99", "--out", str(tmp_path / "report"), "--json")
    assert result.exit_code == 0, result.output  # a valid plan never fails on an option that can exceed it
    payload = json.loads(result.stdout)
    assert len(payload["chains"]) == ranked + 1
    assert f"--top 99: {planned} ranks {ranked} alternative chain{'s' if ranked != 1 else ''}; validated all of them" in payload["notes"]


def test_validate_json_has_one_entry_per_chain_and_greedy_outputs_equal(workspace, planned, tmp_path):
    result = _invoke("validate", "--plan", str(planned), "--prompts", str(workspace / "prompts.jsonl"), *VALIDATE_FAST,
                     "--out", str(tmp_path / "report"), "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload == json.loads((tmp_path / "report" / "report.json").read_text())  # printed what it wrote
    assert encode_report(read_report(tmp_path / "report" / "report.json")) == payload  # and its codec reads it
    chains = payload["chains"]
    assert [entry["recommended"] for entry in chains].count(True) == 1
    assert chains[0]["chain"] == json.loads(planned.read_text())["alternatives"][0]["chain"]
    assert ["target"] in [entry["chain"] for entry in chains]
    for entry in chains:
        assert entry["greedy_equal"] is True
        assert entry["measured_speedup"] > 0 and len(entry["speedup_per_repeat"]) == 2
        assert set(entry["predicted_speedup"]) == {"exact", "paper", "exact_retimed"}
        assert entry["predicted_speedup"]["exact_retimed"] > 0  # the plan's profile is still there
        assert [level["model"] for level in entry["levels"]] == entry["chain"]
    assert payload["settings"]["prompts"] == 3 and payload["settings"]["repeats"] == 2
    runs = 3 * 2 * len(chains) + 3  # prompts x repeats x chains, then the agreement runs, one per prompt
    progress = [line for line in result.stderr.splitlines() if line.startswith("[polyplan] validate ")]
    assert progress and progress[-1].startswith(f"[polyplan] validate {runs}/{runs} ")  # --json keeps its progress, on stderr
    for name in ("report.md", "report.json", "predicted_vs_measured.png", "measured_speedup.png", "phi_paper_vs_measured.png"):
        assert (tmp_path / "report" / name).is_file()
    assert (tmp_path / "report" / "measured_speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "report" / "report.json").read_text())["chains"] == chains


def _plan_copy(planned: Path, tmp_path: Path, **changes) -> Path:
    payload = json.loads(planned.read_text())
    payload.update(changes)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(payload))
    return path


def test_a_plan_whose_models_changed_is_refused(workspace, planned, tmp_path):
    """The target is in every chain validate runs (only their members are checked: which
    drafters those are depends on the timings)."""
    family = tmp_path / "family"
    shutil.copytree(workspace / "small", family / "small")
    shutil.copy(workspace / "models.yaml", family / "models.yaml")
    moved = json.loads(planned.read_text())
    moved["candidates"]["path"] = str(family / "models.yaml")
    save_model(family / "target", perturbed_copy(tiny_llama(0, layers=4, hidden=64), 0.3, seed=2), tiny_tokenizer())
    plan = _plan_copy(planned, tmp_path, candidates=moved["candidates"])
    # --top 0: how many alternatives the plan has depends on timings (a loaded machine can make
    # fewer pairs cheaper than their verifier), and --top is checked before the fingerprints
    result = _invoke("validate", "--plan", str(plan), "--top", "0", "--out", str(tmp_path / "r"))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "model 'target' changed since the plan was made" in result.stderr and "re-run polyplan recommend" in result.stderr


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("version", r"plan_version: unsupported version 3; this polyplan reads version 2 \(and migrates version 1\)"),
        ("long_prompts", r"long.txt: no usable prompt: all 2 are longer than the \d+ tokens that fit"),
        ("empty_prompts", r"empty.txt: no prompts \(the file is empty\)"),
        ("no_candidates", r"candidates: the plan does not record its models.yaml .* pass --candidates models.yaml"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(workspace, planned, tmp_path, case, message):
    plan, extra = planned, []
    if case == "version":
        plan = _plan_copy(planned, tmp_path, plan_version=3)
    elif case == "long_prompts":
        words = " ".join(f"w{4 + i % 60}" for i in range(400))
        (tmp_path / "long.txt").write_text(f"{words}\n\n{words}\n")
        extra = ["--prompts", str(tmp_path / "long.txt")]
    elif case == "empty_prompts":
        (tmp_path / "empty.txt").write_text("")
        extra = ["--prompts", str(tmp_path / "empty.txt")]
    elif case == "no_candidates":
        plan = _plan_copy(planned, tmp_path, candidates=None)
    result = _invoke("validate", "--plan", str(plan), *VALIDATE_FAST[:4], *extra, "--out", str(tmp_path / "r"))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert re.search(message, result.stderr), result.stderr


def test_validate_breaks_results_down_by_spec_bench_category(workspace, planned, tmp_path):
    rows = [json.loads(line) for line in (workspace / "prompts.jsonl").read_text().splitlines()]
    for row, category in zip(rows, ("writing", "math", "writing")):
        row.update(question_id=len(category), category=category)
    prompts = tmp_path / "question.jsonl"
    prompts.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    result = _invoke("validate", "--plan", str(planned), "--prompts", str(prompts), *VALIDATE_FAST, "--out", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    assert "per category, " in result.stdout and "writing" in result.stdout
    report = read_report(tmp_path / "r" / "report.json")
    assert len(report.categories) == len(report.chains) - 1  # every chain but target-only
    for item in report.categories:
        assert [row.category for row in item.rows] == ["writing", "math", "all"]
        assert [row.runs for row in item.rows] == [4, 2, 6]  # prompts x 2 repeats
        assert all(row.speedup > 0 and row.tokens_per_target_pass >= 1 for row in item.rows)
    assert "## Per category" in (tmp_path / "r" / "report.md").read_text()


def test_recommend_runs_its_self_check_and_validate_judges_the_checked_prediction(workspace, planned):
    payload = json.loads(planned.read_text())
    record = payload["self_check"]
    assert record["skipped"] is None and record["prompts"] >= 1 and record["checked"]  # the self-check ran
    checked = [entry["check"] for entry in payload["alternatives"] if len(entry["chain"]) > 1]
    assert checked and all(entry["speedup"] > 0 for entry in checked)
    assert any(not entry["pooled"] for entry in checked)
    ranked = [entry["check"]["speedup"] for entry in payload["alternatives"]]
    assert ranked == sorted(ranked, reverse=True)  # re-ranked by the checked prediction
    again = _invoke("recommend", "--candidates", str(workspace / "models.yaml"), "--profile", str(workspace / "profile.json"),
                    "--prompts", str(workspace / "prompts.jsonl"), "--out", str(workspace / "json.json"), "--threads", "1", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["self_check"]["prompts"] == record["prompts"]  # stdout: the plan alone
    checking = [line for line in again.stderr.splitlines() if line.startswith("[polyplan] self-check ")]
    assert checking and re.match(r"\[polyplan\] self-check (\d+)/\1 ", checking[-1])  # the check says how far it is
    skipped = _invoke("recommend", "--candidates", str(workspace / "models.yaml"), "--profile", str(workspace / "profile.json"),
                      "--prompts", str(workspace / "prompts.jsonl"), "--out", str(workspace / "unchecked.json"), "--threads", "1",
                      "--no-check")
    assert skipped.exit_code == 0, skipped.output
    assert "Self-check skipped (--no-check)" in skipped.stdout
    unchecked = json.loads((workspace / "unchecked.json").read_text())
    assert unchecked["self_check"]["skipped"].startswith("--no-check") and all("check" not in e for e in unchecked["alternatives"])


EPYC = Processor("AMD EPYC 9R14", "x86_64", ("avx2", "avx512f", "fma"), "x86", "AVX512", 2)
XEON = Processor("Intel(R) Xeon(R) Processor", "x86_64", ("amx_tile", "avx2", "avx512f", "fma"), "x86", "AVX512", 2)


@pytest.mark.parametrize("here", [XEON, EPYC], ids=["another processor", "the same (negative control)"])
def test_a_plan_from_another_processor_is_validated_with_one_line_saying_so(workspace, planned, tmp_path, monkeypatch, here):
    """Fake processors on both sides (never the real machine's): the plan's record says EPYC;
    this machine is made to read as `here`."""
    plan = _plan_copy(planned, tmp_path, processor=encode(EPYC))
    monkeypatch.setattr("polyplan.pipeline.stages.this_processor", lambda device="cpu": here)
    result = _invoke("validate", "--plan", str(plan), "--prompts", str(workspace / "prompts.jsonl"), *VALIDATE_FAST,
                     "--out", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output  # it warns, it does not refuse
    said = [line for line in result.output.splitlines() if "profiled on" in line]  # stdout and stderr
    notes = [note for note in read_report(tmp_path / "r" / "report.json").notes if "profiled on" in note]
    if here is EPYC:
        assert said == [] and notes == []
        return
    expected = ("the plan was profiled on 'AMD EPYC 9R14 (avx512, x86)' but this is 'Intel(R) Xeon(R) Processor (amx, x86)': "
                "its timings may not hold; re-run polyplan profile here")
    assert said == [f"warning: {expected}"] and f"warning: {expected}" in result.stderr
    assert notes == [expected]  # the report keeps it
