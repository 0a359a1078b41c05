"""`polyplan profile` through typer's CliRunner, on tiny local model folders."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import write_candidate_workspace
from polyplan.cli.app import app
from polyplan.formats.profile import read_profile
from polyplan.profiler.forward_timing import LatencySettings
from polyplan.profiler.settings import AcceptanceSettings

pytestmark = pytest.mark.usefixtures("single_thread", "short_calibrations")

FAST = [
    "--new-tokens", "8", "--latency-ks", "1,2", "--context-lengths", "8,16", "--repeats", "3", "--warmup", "1", "--noise-budget", "0",
    "--decoded-prompts", "2", "--block-sizes", "2",
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    return write_candidate_workspace(tmp_path_factory.mktemp("profile_cli"))


def _invoke(*args: str):
    return CliRunner().invoke(app, ["profile", *args])


def test_profile_writes_a_profile_recommend_accepts_and_reruns_reuse_it(workspace, tmp_path):
    out = tmp_path / "p.json"
    args = ["--candidates", str(workspace / "models.yaml"), "--prompts", str(workspace / "prompts.jsonl"), "--out", str(out), *FAST]
    result = _invoke(*args)
    assert result.exit_code == 0, result.output
    assert "T(1) ms" in result.stdout and "target <- ngram" in result.stdout
    assert "entries measured, 0 reused" in result.stdout
    profile = read_profile(out)
    assert profile.model_names() == ["target", "small", "ngram"]
    assert all(m.fingerprint.startswith("sha256:") for m in profile.models)
    assert "machine floor" in result.stdout
    assert all(m.timing.reference_relative_iqr >= 0 and m.timing.reference_median_s > 0 for m in profile.models)

    again = _invoke(*args, "--json")
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert report["measured"] == [] and len(report["reused"]) == 3 + 3 * 2 * 2
    assert {row["sampling"] for row in report["pairs"]} == {"greedy", "t1.0"}
    assert all(row["reference_relative_iqr"] >= 0 for row in report["models"])

    planned = CliRunner().invoke(app, ["recommend", "--profile", str(out), "--out", str(tmp_path / "plan.json")])
    assert planned.exit_code == 0, planned.output
    assert "best:" in planned.stdout


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing_folder", r"candidate 'small': source folder './nowhere' not found"),
        ("corrupt_weights", r"candidate 'small': corrupt or unreadable weights"),
        ("empty_prompts", r"empty.txt: no prompts \(the file is empty\)"),
        ("bad_out", r"--out: cannot write .*blocker/p.json"),
        ("bad_numbers", r"--block-sizes: expected comma-separated numbers, got '2,x'"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(workspace, tmp_path, setup, message):
    candidates, prompts, out, extra = workspace / "models.yaml", workspace / "prompts.jsonl", tmp_path / "p.json", []
    elsewhere = (workspace / "models.yaml").read_text().replace("./target", str(workspace / "target"))
    if setup == "missing_folder":
        candidates = tmp_path / "models.yaml"
        candidates.write_text(elsewhere.replace("./small", "./nowhere"))
    if setup == "corrupt_weights":
        broken = tmp_path / "small"
        broken.mkdir()
        for file in (workspace / "small").iterdir():
            (broken / file.name).write_bytes(file.read_bytes())
        (broken / "model.safetensors").write_bytes(b"garbage")
        candidates = tmp_path / "models.yaml"
        candidates.write_text(elsewhere)
    if setup == "empty_prompts":
        prompts = tmp_path / "empty.txt"
        prompts.write_text("")
    if setup == "bad_out":
        (tmp_path / "blocker").write_text("a file, not a folder")
        out = tmp_path / "blocker" / "p.json"
    if setup == "bad_numbers":
        extra = ["--block-sizes", "2,x"]
    result = _invoke("--candidates", str(candidates), "--prompts", str(prompts), "--out", str(out), *FAST, *extra)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert re.search(message, lines[0]), lines[0]
    assert not out.exists()


def test_cli_defaults_are_the_library_defaults():
    import inspect

    from polyplan.cli.commands.profile import profile

    defaults = {name: p.default for name, p in inspect.signature(profile).parameters.items()}
    latency, acceptance = LatencySettings(), AcceptanceSettings()
    assert defaults["latency_ks"] == ",".join(map(str, latency.ks))
    assert defaults["context_lengths"] == ",".join(map(str, latency.context_lengths))
    assert (defaults["repeats"], defaults["warmup"]) == (latency.repeats, latency.warmup)
    assert defaults["block_sizes"] == ",".join(map(str, acceptance.block_sizes))
    assert tuple(float(t) for t in defaults["temperatures"].split(",")) == acceptance.temperatures
    assert (defaults["new_tokens"], defaults["decoded_prompts"], defaults["seed"], defaults["decoded_verifications"]) == (
        acceptance.new_tokens,
        acceptance.decoded_prompts,
        acceptance.seed,
        acceptance.decoded_verifications,
    )
    assert acceptance.decoded_min_prompts == 4  # as the --decoded-verifications help says
    assert defaults["threads"] is None  # profiler.threads.choose_threads: as --out was measured, else the free cores


def test_ctrl_c_keeps_what_was_measured_and_the_rerun_finishes_it(workspace, tmp_path, monkeypatch):
    import polyplan.profiler.run as run_module

    real = run_module.measure_decoded
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "measure_decoded", interrupted)
    out = tmp_path / "p.json"
    args = ["--candidates", str(workspace / "models.yaml"), "--prompts", str(workspace / "prompts.jsonl"), "--out", str(out), *FAST]
    result = _invoke(*args)
    assert result.exit_code == 130
    assert "interrupted: results measured so far are kept" in result.stderr
    kept = read_profile(out)
    decoded = [d for p in kept.pairs for s in p.sampling.values() for d in s.decoded]
    assert sum(not d.replayed for d in decoded) == 1  # the one real decoded run before the interrupt (replays decode nothing)
    monkeypatch.setattr(run_module, "measure_decoded", real)
    again = _invoke(*args, "--json")
    assert again.exit_code == 0, again.output
    report = json.loads(again.stdout)
    assert len(report["measured"]) == 3 * 2 - len(decoded) and all(label.startswith("decoded") for label in report["measured"])
