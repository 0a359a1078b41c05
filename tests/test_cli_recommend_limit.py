"""`polyplan recommend`'s physical limit, its "don't speculate" verdict and its insertions section,
through typer's CliRunner; the plan records the limit and the insertions, and older plans still read."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import read_plan
from polyplan.formats.profile import LatencyPoint, ModelProfile, Profile, SamplingStats, write_profile

EXAMPLE = Path(__file__).resolve().parents[1] / "polyplan" / "data" / "paper_table1_profile.json"
V1_PLAN = Path(__file__).resolve().parent / "data" / "plan_v1.json"

runner = CliRunner()


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.stdout


def _hopeless(path: Path) -> Path:
    """A target whose only drafter is slow and rarely right, with timings to resample: no chain pays."""
    rng = np.random.default_rng(0)
    models = []
    for name, t in (("big", 0.010), ("slow", 0.006)):
        points = []
        for k in (1, 2, 4, 8):
            samples = tuple(float(v) for v in t * (1 + 0.05 * (k - 1)) * (1 + 0.03 * rng.standard_normal(9)))
            points.append(LatencyPoint(64, k, float(np.median(samples)), 0.0, 9, samples))
        models.append(ModelProfile(name, f"fp-{name}", tuple(points)))
    profile = Profile(target="big", device="synthetic", models=tuple(models), pairs=())
    profile = profile.with_stats("big", "slow", "greedy", SamplingStats(alpha=0.3, alpha_samples=400))
    write_profile(profile, path)
    return path


def test_recommend_prints_the_limit_and_each_chains_share(tmp_path):
    text = _ok(["recommend", "--profile", str(EXAMPLE), "--out", str(tmp_path / "plan.json"), "--resamples", "20"])
    limit = re.search(r"^physical limit: (\d+\.\d\d)x \[[\d.]+, [\d.]+\] at K = (\d+) \(a free drafter that is always right", text, re.M)
    assert limit is not None, text
    plan = json.loads((tmp_path / "plan.json").read_text())
    recorded = plan["physical_limit"]
    assert f"{recorded['speedup']:.2f}" == limit.group(1) and recorded["block_size"] == int(limit.group(2))
    best = plan["alternatives"][0]["exact"]["speedup"]
    share = f"{best / recorded['speedup']:.0%}"
    assert re.search(rf"^best: vicuna-7b > vicuna-7b-w4 > eagle  K = \[\d, \d\]  exact {best:.3f}x \[[\d.]+, [\d.]+\], {share} of the limit",
                     text, re.M), text
    rows = [line for line in text.splitlines() if re.match(r"^\s+\d+\s+\d", line)]
    assert len(rows) == len(plan["alternatives"]) and all(re.search(r"\s\d+%\s", row) for row in rows)
    assert all(entry["exact"]["speedup"] <= recorded["speedup"] for entry in plan["alternatives"])


def test_recommend_says_dont_speculate_with_the_best_chains_interval(tmp_path):
    profile = _hopeless(tmp_path / "profile.json")
    out = tmp_path / "plan.json"
    text = _ok(["recommend", "--profile", str(profile), "--out", str(out), "--resamples", "40"])
    line = next(line for line in text.splitlines() if line.startswith("best: "))
    match = re.fullmatch(r"best: don't speculate \(big only\); best chain big > slow \(K = \[\d+\]\) "
                         r"(\d\.\d{3})x \[(\d\.\d\d), (\d\.\d\d)\], \d+% of the limit", line)
    assert match is not None, line
    point, low, high = (float(value) for value in match.groups())
    assert point < 1.0 and low <= point <= high and low < high  # the timings were resampled
    plan = read_plan(out)
    assert plan.chain == ("big",) and plan.alternatives[1].chain == ("big", "slow")
    recorded = plan.alternatives[1].exact.interval
    assert recorded is not None and abs(recorded[0] - low) <= 0.005 and abs(recorded[1] - high) <= 0.005
    assert plan.physical_limit is not None and plan.physical_limit.block_size >= 1  # a free drafter would still pay


def test_recommend_lists_theorem_3_2_on_every_insertion_that_matters(tmp_path):
    out = tmp_path / "plan.json"
    text = _ok(["recommend", "--profile", str(EXAMPLE), "--out", str(out), "--resamples", "0"])
    section = text.split("Insertions (Theorem 3.2:")[1].split("\n\n")[0].splitlines()[1:]
    assert section == ["  vicuna-7b-w4 between vicuna-7b and eagle: Thm 3.2 no guarantee (cond 1 0.28 < 0.372, cond 2 1.75 >= 0.0499, "
                       "assumptions fail, c = 4); Lemma 3.1 helps (-2.1 ms/token); exact helps: 2.320x "
                       "(vicuna-7b > vicuna-7b-w4 > eagle, K = [7, 1]) vs 2.118x (vicuna-7b > eagle, K = [5])"]
    plan = json.loads(out.read_text())
    (triple,) = plan["insertion_triples"]
    assert (triple["upper"], triple["middle"], triple["lower"]) == ("vicuna-7b", "vicuna-7b-w4", "eagle")
    assert triple["with"]["chain"] == plan["alternatives"][0]["chain"] and triple["line"] == section[0].strip()
    assert triple["condition1"]["holds"] is True and triple["theorem_guarantees_gain"] is False
    assert triple["lemma31_difference_s"] < 0


def test_a_plan_from_before_the_limit_still_reads(tmp_path):
    old = read_plan(V1_PLAN)
    assert old.physical_limit is None and old.insertion_triples == ()
    out = tmp_path / "plan.json"
    _ok(["recommend", "--profile", str(EXAMPLE), "--out", str(out), "--resamples", "0"])
    payload = json.loads(out.read_text())
    for key in ("physical_limit", "insertion_triples"):
        trimmed = {name: value for name, value in payload.items() if name != key}
        assert getattr(read_plan(_write(tmp_path / f"no-{key}.json", trimmed)), key) in (None, ())
    # a malformed record (no polyplan writes one) is one line naming the file and the field, as in
    # every other field of every file (issue 30: one codec); before, it read as "not recorded"
    for key, value, message in [
        ("physical_limit", {"speedup": "fast"}, r"physical_limit\.block_size: missing"),
        ("insertion_triples", [{"upper": "x"}, 3], r"insertion_triples\[0\]\.middle: missing"),
        ("insertion_triples", 3, r"insertion_triples: must be a JSON array, got the number 3"),  # found by test_cli_fuzz_inputs.py
    ]:
        bad = _write(tmp_path / "bad.json", {**payload, key: value})
        with pytest.raises(PolyplanError, match=rf"^{re.escape(str(bad))}: {message}$"):
            read_plan(bad)


def _write(path: Path, payload: dict) -> Path:
    path.write_text(json.dumps(payload))
    return path
