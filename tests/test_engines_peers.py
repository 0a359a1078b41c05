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
from polyplan.planner.search import SearchSettings, rank_chains
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
    write_plan(plan_of(rank_chains(profile, SearchSettings(max_levels=2, k_max=4)), profile_path=str(root / "profile.json"),
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
    assert (payload["format"], payload["engine"]) == ("polyplan race", "hf")
    assert all(row["equal_outputs"] == row["runs"] and row["first_difference"] is None for row in payload["rows"])
    configs = list(dict.fromkeys(row["label"] for row in payload["rows"]))
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
        if row["label"] == configs[0]:
            assert row["speedup"] == 1.0
            assert row["target_passes"] == row["tokens"]  # plain greedy: one pass per token, prefill fused
        else:
            assert row["tokens"] / row["target_passes"] >= 1.0
    overall = [row for row in payload["rows"] if row["category"] == "all"]
    assert all(row["predicted_speedup"] is not None for row in overall[1:])
    # the synthetic profile has no HF overhead entry: the predictions say they used polyplan's loop
    assert "HF overhead not measured" in payload["notes"]["hf_overhead"]
    exported = [row for row in overall if row["exported"]]
    assert len(exported) == 1 and exported[0]["label"].startswith("HF ")
    row = exported[0]
    # ... but never exported: a user cannot type them into HF
    assert "target-int8" not in row["label"] and "target-exit2" not in row["label"]
    # the verdict is judged by the whole-call prediction (prefill and per-call cost too)
    assert row["predicted_call_speedup"] is not None
    assert row["error"] == pytest.approx(row["predicted_call_speedup"] / row["speedup"] - 1)
    assert all(r["predicted_call_speedup"] is not None for r in overall if r["label"].startswith("HF "))
    assert overall[-1]["predicted_call_speedup"] is None  # polyplan's own decoder: per token only
    # no HF overhead entry, so no per-call cost: the whole-call model says what it leaves out
    assert "HF's per-call cost" in payload["notes"]["whole_call"]
    assert row["tolerance"] == 0.10 and row["judgement"].endswith(("within 10%, exported)", "outside 10%, exported)"))
    assert (abs(row["error"]) <= 0.10) == ("within 10%" in row["judgement"])


def test_a_sampled_plan_is_refused_in_one_line(plan, tmp_path):
    payload = json.loads(plan.read_text())
    payload["sampling"] = "t1.0"
    other = tmp_path / "plan.json"
    other.write_text(json.dumps(payload))
    result = CliRunner().invoke(app, ["bench", "peers", "--plan", str(other)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "greedy" in result.stderr


def test_negative_control_a_configuration_with_other_output_is_reported():
    from polyplan.engines.hf_race import hf_race_lines, race_hf
    from polyplan.engines.race import Contender, Timed
    from polyplan.profiler.prompts import EncodedPrompt, Prompt

    prompts = [EncodedPrompt(Prompt("x", "spec_bench:math", "q:1"), (1, 2, 3))]
    same = Contender("base", run=lambda ids: Timed((5, 6, 7), 0.03, 3))
    other = Contender("lossy", predicted_speedup=2.0, run=lambda ids: Timed((5, 9, 7), 0.01, 1))
    race = race_hf([same, other], prompts, repeats=2, new_tokens=3)
    row = next(r for r in race.rows if r.label == "lossy" and r.category == "all")
    assert (row.equal_outputs, row.runs, row.first_difference) == (0, 2, "prompt 0: first differs at new token 1")
    assert "OUTPUTS DIFFER in 2 run(s)" in "\n".join(hf_race_lines(race))
    row = next(r for r in race.rows if r.label == "lossy" and r.category == "math")
    assert row.tokens_per_target_pass == 3.0 and row.tokens == 6 and row.speedup == pytest.approx(3.0)


def test_whole_call_prediction_uses_profile_costs_and_the_calls_token_counts_only():
    """The whole-call prediction of a row is the model's seconds for the race's own calls (prompt
    lengths, tokens emitted), never its measured times; the verdict uses it."""
    from polyplan.engines.hf_race import TOLERANCE, exported_row, hf_race_lines, race_hf
    from polyplan.engines.race import Contender, Timed
    from polyplan.planner.exact.whole_call import CallModel, PrefillCurve
    from polyplan.profiler.prompts import EncodedPrompt, Prompt

    prompts = [EncodedPrompt(Prompt("x", "spec_bench:math", "q:1"), (1, 2, 3, 4)),
               EncodedPrompt(Prompt("y", "spec_bench:code", "q:2"), tuple(range(1, 11)))]
    prefill = PrefillCurve((10,), (0.010,))
    base_model = CallModel(per_token_s=0.010, per_call_s=0.002, target_prefill=prefill, replaced_s=0.010)
    fast_model = CallModel(per_token_s=0.004, per_call_s=0.002, target_prefill=prefill, extra_tokens=2, replaced_s=0.005)
    base = Contender("base", run=lambda ids: Timed((7,) * len(ids), 0.01 * len(ids), len(ids)), call=base_model)
    fast = Contender("fast", predicted_speedup=2.5, exported=True, tolerance=TOLERANCE,
                     run=lambda ids: Timed((7,) * len(ids), 0.005 * len(ids), 2), call=fast_model)
    race = race_hf([base, fast], prompts, repeats=2, new_tokens=10)
    # each prompt emits as many tokens as it has (4 and 10), twice (two repeats)
    base_s = 2 * (base_model.seconds(4, 4) + base_model.seconds(10, 10))
    fast_s = 2 * (fast_model.seconds(4, 4) + fast_model.seconds(10, 10))
    row = next(r for r in race.rows if r.label == "fast" and r.category == "all")
    assert row.predicted_speedup == 2.5 and row.speedup == pytest.approx(2.0)
    assert row.predicted_call_speedup == pytest.approx(base_s / fast_s)
    math_row = next(r for r in race.rows if r.label == "fast" and r.category == "math")
    assert math_row.predicted_call_speedup == pytest.approx(base_model.seconds(4, 4) / fast_model.seconds(4, 4))
    assert exported_row(race) == row and row.error == pytest.approx(row.predicted_call_speedup / row.speedup - 1)
    text = "\n".join(hf_race_lines(race))
    assert f"predicted {row.predicted_call_speedup:.2f}x whole-call (per-token limit 2.50x)" in text
    # negative control: without a call model the row (and the verdict) stay per token
    plain = race_hf([base, Contender("fast", predicted_speedup=2.5, exported=True, tolerance=TOLERANCE, run=fast.run)], prompts,
                    repeats=1, new_tokens=10)
    plain_row = exported_row(plain)
    assert plain_row.predicted_call_speedup is None and plain_row.error == pytest.approx(2.5 / 2.0 - 1)
    assert plain_row.judgement() == "2.50x (+25.0%, outside 10%, exported)"
    assert "per-token (no whole-call model)" in "\n".join(hf_race_lines(plain))
