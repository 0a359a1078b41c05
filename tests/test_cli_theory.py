"""The theory and recommend commands through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app

EXAMPLE = Path(__file__).resolve().parents[1] / "polyplan" / "data" / "paper_table1_profile.json"
TABLE1 = ["--t1", "25", "--t2", "4", "--t2-new", "7", "--l1", "4.34", "--l1-new", "6.26", "--l2-new", "4.36"]

runner = CliRunner()


def _ok(args: list[str]):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


def _fails(args: list[str], message: str) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ")
    assert message in result.stderr
    assert result.stderr.count("\n") == 1  # one line, no traceback
    assert "Traceback" not in result.output
    return result.stderr


def test_insertion_json_reproduces_table1():
    payload = json.loads(_ok(["theory", "insertion", *TABLE1, "--json"]).stdout)
    assert payload["condition1"]["lhs"] == 0.28
    assert payload["condition1"]["holds"] is True
    assert set(payload["condition2"]) == {"lhs", "rhs", "holds"}
    assert payload["assumptions_hold"] is True
    assert payload["verdict"] == "helps"
    assert "exact_difference" not in payload


def test_insertion_with_alpha_gives_the_exact_difference():
    payload = json.loads(_ok(["theory", "insertion", *TABLE1, "--alpha", "7", "--json"]).stdout)
    expected = (25 / 6.26 + 7 / 8.72 + 28 / 8.72) - (25 + 28) / 4.34
    assert payload["exact_difference"] == pytest.approx(expected)
    assert payload["condition2"]["rhs"] == pytest.approx(7 * (4.34 / 8.72 - 1))
    assert payload["verdict"] == "helps" and payload["verdict_basis"] == "exact_difference"


def test_insertion_table():
    text = _ok(["theory", "insertion", *TABLE1]).stdout
    assert "condition 1" in text and "lhs 0.28" in text and "verdict: helps" in text


def test_capped_geometric_shows_the_erratum():
    payload = json.loads(_ok(["theory", "capped-geometric", "--alpha", "0.7", "--k", "1", "--json"]).stdout)
    assert payload["exact"]["variance"] == pytest.approx(0.21)
    assert payload["paper"]["a2_variance_p_1_minus_alpha_n_k_plus_1"] == pytest.approx(-15.0889, abs=1e-4)
    assert payload["exact"]["mean"] == pytest.approx(1.7)
    assert payload["paper"]["eq3_mean_alpha_as_acceptance"] == pytest.approx(1.7)
    text = _ok(["theory", "capped-geometric", "--alpha", "0.7", "--k", "2"]).stdout
    assert "0.7539" in text and "-34.9067" in text and "undefined" in text


def test_report_defaults_to_the_table1_example():
    text = _ok(["theory", "report"]).stdout
    assert "Table 1" in text
    assert "vicuna-7b > eagle" in text and "vicuna-7b > vicuna-7b-w4 > eagle" in text
    assert "verdict: helps" in text
    assert "-15.0889" in text and "0.7539" in text
    payload = json.loads(_ok(["theory", "report", "--profile", str(EXAMPLE), "--json"]).stdout)
    assert payload["insertions"]["vicuna-7b-w4"]["verdict"] == "helps"
    assert payload["insertions"]["vicuna-7b-w4"]["condition1"]["lhs"] == pytest.approx(0.28)
    assert payload["two_model"]["lemma31_time_per_token_s"] == pytest.approx((0.025 + 7 * 0.004) / 4.34)
    assert payload["ranked"][0]["chain"] == ["vicuna-7b", "vicuna-7b-w4", "eagle"]


def test_recommend_prints_ranked_chains_and_writes_the_plan(tmp_path):
    out = tmp_path / "plan.json"
    text = _ok(["recommend", "--profile", str(EXAMPLE), "--out", str(out)]).stdout
    assert "vicuna-7b > vicuna-7b-w4 > eagle" in text and "Why each model is in or out" in text
    assert f"wrote {out}" in text
    plan = json.loads(out.read_text())
    assert plan["plan_version"] == 2
    best = plan["alternatives"][0]
    assert best["chain"] == ["vicuna-7b", "vicuna-7b-w4", "eagle"]
    assert len(best["block_sizes"]) == 2 and set(plan["fingerprints"]) >= set(best["chain"])
    printed = json.loads(_ok(["recommend", "--profile", str(EXAMPLE), "--out", str(out), "--json", "--max-levels", "2"]).stdout)
    assert len(printed["alternatives"][0]["chain"]) == 2
    # --json prints the plan it saved, not one built again (which lacked the profile's digest)
    assert printed == json.loads(out.read_text()) and printed["profile"]["digest"].startswith("sha256:")


def _bad_profile(tmp_path: Path, old: str, new: str) -> str:
    path = tmp_path / "profile.json"
    text = EXAMPLE.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return str(path)


def test_bad_input_gives_one_line_and_exit_2(tmp_path):
    _fails(["theory", "insertion", *TABLE1[:-1], "0"], "l2_new: must be a finite number > 0, got 0.0")
    _fails(["theory", "insertion", "--t1", "-25", *TABLE1[2:]], "t1: must be a finite number > 0, got -25.0")
    _fails(["theory", "insertion", *TABLE1, "--alpha", "0"], "alpha: must be a finite number > 0")
    _fails(["theory", "capped-geometric", "--alpha", "1.0", "--k", "3"], "alpha: must be in [0, 1), got 1.0")
    _fails(["theory", "capped-geometric", "--alpha", "-0.2", "--k", "3"], "alpha: must be in [0, 1)")
    _fails(["theory", "capped-geometric", "--alpha", "0.5", "--k", "0"], "k: block size must be an integer >= 1, got 0")
    out = str(tmp_path / "plan.json")
    missing_pair = tmp_path / "missing.json"
    payload = json.loads(EXAMPLE.read_text())
    payload["pairs"] = [pair for pair in payload["pairs"] if pair["verifier"] != "vicuna-7b-w4"]
    missing_pair.write_text(json.dumps(payload))
    _fails(["recommend", "--profile", str(missing_pair), "--out", out], "missing.json: pairs: no entry for verifier 'vicuna-7b-w4', drafter 'eagle'")
    nan = _bad_profile(tmp_path, '"alpha": 0.813996', '"alpha": NaN')
    _fails(["recommend", "--profile", nan, "--out", out], "pairs[1].sampling.greedy.alpha: must be a finite number, got NaN")
    zero = _bad_profile(tmp_path, '"median_s": 0.007', '"median_s": 0')
    _fails(["theory", "report", "--profile", zero], "models[1].latency[0].median_s: must be > 0, got 0")
    negative = _bad_profile(tmp_path, '"median_s": 0.007', '"median_s": -0.007')
    _fails(["recommend", "--profile", negative, "--out", out], "median_s: must be > 0, got -0.007")
    alpha = _bad_profile(tmp_path, '"alpha": 0.815512', '"alpha": 1.3')
    _fails(["recommend", "--profile", alpha, "--out", out], "pairs[2].sampling.greedy.alpha: must be in [0, 1), got 1.3")
    _fails(["recommend", "--profile", str(EXAMPLE), "--out", out, "--k-max", "0"], "k_max, a block size: must be an integer >= 1")
    _fails(["recommend", "--profile", str(tmp_path / "nope.json"), "--out", out], "nope.json: no such file")
    assert not Path(out).exists()
