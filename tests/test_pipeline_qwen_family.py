"""The real family end to end (slow; skipped unless both Qwen2.5-Coder models were fetched with
`polyplan fetch`): examples/qwen-coder.yaml as shipped profiles, plans and validates on the code
workload, on llama.cpp members, with the physical limit beside the chains and every chain's
greedy output equal to the target's or a near-tie."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.formats.fetchable import default_path, known_model

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _require_fetched() -> None:
    pytest.importorskip("llama_cpp")
    for name in ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"):
        if not default_path(known_model(name)).is_file():
            pytest.skip(f"{name} not fetched (run `polyplan fetch {name}`)")


def test_the_shipped_member_set_profiles_plans_and_validates_on_the_code_workload(tmp_path):
    _require_fetched()
    runner = CliRunner()
    profile, plan = tmp_path / "profile.json", tmp_path / "plan.json"
    profiled = runner.invoke(app, ["profile", "--candidates", str(EXAMPLES / "qwen-coder.yaml"), "--prompts",
                                   str(EXAMPLES / "code_workload_profile.jsonl"), "--max-prompts", "4", "--temperatures", "0",
                                   "--threads", "2", "--new-tokens", "16", "--no-decoded", "--repeats", "3",
                                   "--latency-ks", "1,2,4,8,16", "--out", str(profile)])
    assert profiled.exit_code == 0, profiled.output
    recommended = runner.invoke(app, ["recommend", "--profile", str(profile), "--out", str(plan), "--resamples", "20"])
    assert recommended.exit_code == 0, recommended.output
    assert "physical limit:" in recommended.stdout and "of the limit" in recommended.stdout
    written = json.loads(plan.read_text())
    limit = written["physical_limit"]["speedup"]
    assert all(entry["exact"]["speedup"] <= limit + 1e-9 for entry in written["alternatives"])
    validated = runner.invoke(app, ["validate", "--plan", str(plan), "--prompts", str(EXAMPLES / "code_workload.jsonl"),
                                    "--max-prompts", "2", "--new-tokens", "24", "--repeats", "1", "--top", "1",
                                    "--out", str(tmp_path / "report"), "--json"])
    assert validated.exit_code == 0, validated.output
    chains = json.loads(validated.stdout)["chains"]
    assert all(entry["greedy_equal"] is True or entry["near_tie"] for entry in chains)  # equal, or parted only at near-ties
