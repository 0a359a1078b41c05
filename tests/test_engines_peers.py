"""`polyplan bench peers` end to end on the shipped family (examples/zoo.yaml), tiny settings:
a plan made from a synthetic profile of those very models (their real fingerprints), two
Spec-Bench prompts, a few tokens. Checks the configurations raced, the per-category tables,
the equality of greedy outputs and the pass counting; never a timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from polyplan.formats.candidates import read_candidates
from polyplan.cli.app import app
from polyplan.formats.plan import write_plan
from polyplan.planner.plan_builder import plan_of
from polyplan.planner.search import recommend
from polyplan.formats.profile import LatencyPoint, ModelProfile, Profile, SamplingStats, write_profile
from polyplan.models.fingerprints import candidate_fingerprints

pytestmark = pytest.mark.usefixtures("single_thread")

ZOO = Path(__file__).resolve().parents[1] / "examples" / "zoo.yaml"
TIMES = {"target": 0.01, "target-int8": 0.006, "target-exit2": 0.003, "drafter": 0.002, "ngram": 0.0002}
ALPHA = {"target-int8": 0.95, "target-exit2": 0.5, "drafter": 0.7, "ngram": 0.3}


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("peers")
    prints = candidate_fingerprints(read_candidates(ZOO))
    models = tuple(ModelProfile(name, prints[name], tuple(LatencyPoint(64, k, seconds * (1 + 0.1 * (k - 1))) for k in (1, 2, 4, 8)))
                   for name, seconds in TIMES.items())
    profile = Profile(target="target", device="synthetic", models=models, pairs=())
    for name, alpha in ALPHA.items():
        profile = profile.with_stats("target", name, "greedy", SamplingStats(alpha=alpha, engine_alpha=alpha))
    write_profile(profile, root / "profile.json")
    path = root / "plan.json"
    write_plan(plan_of(recommend(profile, max_levels=2, k_max=4), profile_path=str(root / "profile.json"),
                       candidates={"path": str(ZOO), "yaml": yaml.safe_load(ZOO.read_text())}), path)
    lines = [
        {"question_id": 1, "category": "coding", "turns": ["def add(a, b):\n    return"]},
        {"question_id": 2, "category": "writing", "turns": ["The module defines a class that"]},
    ]
    (root / "question.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_bench_peers_races_hf_and_polyplan_per_category_with_equal_outputs(plan):
    result = CliRunner().invoke(app, ["bench", "peers", "--plan", str(plan), "--prompts", str(plan.parent / "question.jsonl"),
                                      "--new-tokens", "6", "--repeats", "1", "--threads", "1", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["outputs_equal"] is True and payload["mismatches"] == []
    configs = list(dict.fromkeys(row["configuration"] for row in payload["rows"]))
    assert configs[0] == "target only (HF generate)"
    assert any(c.startswith("HF assisted drafter K=") for c in configs)
    assert any(c.startswith("HF prompt lookup ngram K=") for c in configs)
    assert configs[-1].startswith("polyplan target > ")
    # the int8 and early-exit copies are handed to HF's generate as polyplan's live models (in process) ...
    assert any(c.startswith("HF assisted target-int8 K=") for c in configs)
    assert any(c.startswith("HF assisted target-exit2 K=") for c in configs)
    assert {row["category"] for row in payload["rows"]} == {"coding", "writing", "all"}
    for row in payload["rows"]:
        assert row["tokens"] > 0 and row["target_passes"] >= 1
        if row["configuration"] == configs[0]:
            assert row["speedup"] == 1.0
            assert row["target_passes"] == row["tokens"]  # plain greedy: one pass per token, prefill fused
        else:
            assert row["tokens_per_target_pass"] >= 1.0
    overall = [row for row in payload["rows"] if row["category"] == "all"]
    assert all(row["predicted_speedup"] is not None for row in overall[1:])
    # the synthetic profile has no HF overhead entry: the predictions say they used polyplan's loop
    assert "HF overhead not measured" in payload["hf_overhead"]
    exported = payload["exported"]
    assert exported["configuration"] in configs and exported["configuration"].startswith("HF ")
    # ... but never exported: a user cannot type them into HF
    assert "target-int8" not in exported["configuration"] and "target-exit2" not in exported["configuration"]
    row = next(r for r in overall if r["configuration"] == exported["configuration"])
    # issue 14c: the verdict is judged by the whole-call prediction (prefill and per-call cost too)
    assert exported["predicted_per_token_speedup"] == row["predicted_speedup"]
    assert exported["predicted_speedup"] == row["predicted_whole_call_speedup"] == exported["predicted_whole_call_speedup"]
    assert exported["error"] == pytest.approx(row["predicted_whole_call_speedup"] / row["speedup"] - 1)
    assert all(r["predicted_whole_call_speedup"] is not None for r in overall if r["configuration"].startswith("HF "))
    assert overall[-1]["predicted_whole_call_speedup"] is None  # polyplan's own decoder: per token only
    # no HF overhead entry, so no per-call cost: the whole-call model says what it leaves out
    assert "HF's per-call cost" in payload["whole_call_note"]
    assert exported["within_tolerance"] == (abs(exported["error"]) <= 0.10)


def test_a_sampled_plan_is_refused_in_one_line(plan, tmp_path):
    payload = json.loads(plan.read_text())
    payload["sampling"] = "t1.0"
    other = tmp_path / "plan.json"
    other.write_text(json.dumps(payload))
    result = CliRunner().invoke(app, ["bench", "peers", "--plan", str(other)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "greedy" in result.stderr


def test_negative_control_a_configuration_with_other_output_is_reported():
    from polyplan.engines.peers import PeerConfig, peers_lines, race_peers
    from polyplan.profiler.prompts import EncodedPrompt, Prompt

    prompts = [EncodedPrompt(Prompt("x", "spec_bench:math", "q:1"), (1, 2, 3))]
    same = PeerConfig("base", None, lambda ids: ([5, 6, 7], 3))
    other = PeerConfig("lossy", 2.0, lambda ids: ([5, 9, 7], 1))
    bench = race_peers([same, other], prompts, repeats=2, new_tokens=3)
    assert bench.mismatches == ("lossy: prompt 1: output differs from target-only from token 1",)
    assert "OUTPUTS DIFFER" in "\n".join(peers_lines(bench))
    row = next(r for r in bench.rows if r.label == "lossy" and r.category == "math")
    assert row.tokens_per_target_pass == 3.0 and row.tokens == 6


def test_whole_call_prediction_uses_profile_costs_and_the_calls_token_counts_only():
    """Issue 14c: the whole-call prediction of a row is the model's seconds for the bench's own
    calls (prompt lengths, tokens emitted), never its measured times; the verdict uses it."""
    from polyplan.planner.exact.whole_call import CallModel, PrefillCurve
    from polyplan.engines.peers import PeerConfig, exported_check, peers_lines, race_peers
    from polyplan.profiler.prompts import EncodedPrompt, Prompt

    prompts = [EncodedPrompt(Prompt("x", "spec_bench:math", "q:1"), (1, 2, 3, 4)),
               EncodedPrompt(Prompt("y", "spec_bench:code", "q:2"), tuple(range(1, 11)))]
    prefill = PrefillCurve((10,), (0.010,))
    base_model = CallModel(per_token_s=0.010, per_call_s=0.002, target_prefill=prefill, replaced_s=0.010)
    fast_model = CallModel(per_token_s=0.004, per_call_s=0.002, target_prefill=prefill, extra_tokens=2, replaced_s=0.005)
    base = PeerConfig("base", None, lambda ids: ([7] * len(ids), len(ids)), call=base_model)
    fast = PeerConfig("fast", 2.5, lambda ids: ([7] * len(ids), 2), exported=True, call=fast_model)
    bench = race_peers([base, fast], prompts, repeats=2, new_tokens=10)
    # each prompt emits as many tokens as it has (4 and 10), twice (two repeats)
    base_s = 2 * (base_model.seconds(4, 4) + base_model.seconds(10, 10))
    fast_s = 2 * (fast_model.seconds(4, 4) + fast_model.seconds(10, 10))
    row = next(r for r in bench.rows if r.label == "fast" and r.category == "all")
    assert row.predicted_speedup == 2.5
    assert row.predicted_call_speedup == pytest.approx(base_s / fast_s)
    math_row = next(r for r in bench.rows if r.label == "fast" and r.category == "math")
    assert math_row.predicted_call_speedup == pytest.approx(base_model.seconds(4, 4) / fast_model.seconds(4, 4))
    checked, error = exported_check(bench)
    assert error == pytest.approx(row.predicted_call_speedup / row.speedup - 1)
    text = "\n".join(peers_lines(bench))
    assert f"predicted {row.predicted_call_speedup:.2f}x whole-call (per-token limit 2.50x)" in text
    # negative control: without a call model the row (and the verdict) stay per token
    plain = race_peers([base, PeerConfig("fast", 2.5, fast.run, exported=True)], prompts, repeats=1, new_tokens=10)
    plain_row = next(r for r in plain.rows if r.category == "all" and r.label == "fast")
    assert plain_row.predicted_call_speedup is None
    assert exported_check(plain)[1] == pytest.approx(2.5 / plain_row.speedup - 1)
    assert "per-token (no whole-call model)" in "\n".join(peers_lines(plain))
