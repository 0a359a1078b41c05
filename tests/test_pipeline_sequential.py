"""Sequential measuring through the pipeline: `polyplan profile --sequential` hands the run the
stopping rule (`pipeline.stages.sequential_rule`), which ranks the provisional profile with the
agreement runs of the prefix; the log says once where it stopped, and the profile's α, the
agreement runs and the record are all of that prefix."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import write_candidate_workspace
from polyplan.cli.app import app
from polyplan.formats.profile import read_profile

pytestmark = pytest.mark.usefixtures("single_thread", "short_calibrations")

FAST = ["--new-tokens", "8", "--latency-ks", "1,2,4", "--context-lengths", "8,16", "--repeats", "3", "--warmup", "1",
        "--noise-budget", "0", "--block-sizes", "2", "--temperatures", "0", "--threads", "1", "--no-decoded"]


def test_profile_sequential_says_where_it_stopped_and_keeps_one_prefix(tmp_path):
    root = write_candidate_workspace(tmp_path)
    lines = [json.dumps({"turns": [" ".join(f"w{(5 * i + j) % 60 + 4}" for j in range(16))]}) for i in range(6)]
    (root / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    args = ["profile", "--candidates", root / "models.yaml", "--prompts", root / "prompts.jsonl", "--out", root / "p.json", *FAST]
    result = CliRunner().invoke(app, [str(arg) for arg in args + ["--sequential"]])
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if line.startswith("acceptance: ")]
    assert len(said) == 1, result.stderr
    profile = read_profile(root / "p.json")
    prompts = profile.profiler.prompts
    assert said[0].startswith(f"acceptance: decided after 4 of 6 prompts (" if prompts == 4 else "acceptance: all 6 prompts; after 4: ")
    assert prompts in (4, 6) and profile.acceptance_runs["greedy"].prompts == prompts
    assert all(len(pair.agreement) == prompts for pair in profile.acceptance_runs["greedy"].pairs)
    # without --sequential the same command measures every prompt (the negative control)
    whole = CliRunner().invoke(app, [str(arg) for arg in args])
    assert whole.exit_code == 0, whole.output
    assert read_profile(root / "p.json").profiler.prompts == 6
    assert not any(line.startswith("acceptance: ") for line in whole.stderr.splitlines())
