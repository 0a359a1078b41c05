"""The interval-coverage check on a profile's own prompts (planner.intervals.interval_coverage, `polyplan
bench intervals`).

The profiles are synthetic: per prompt a drafting rate drawn from a skewed population shared
by the chain's pairs, agreement strings Bernoulli at that rate, exact latency. The check must
find the shipped intervals calibrated (their count inside the binomial range), and find the
intervals too narrow when the bootstrap only resamples the profile's own prompts (negative
control: the error of the profile's mean, not of a new set)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from interval_controls import profile_only_weights
from typer.testing import CliRunner

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats
from polyplan.formats.profile import write_profile
from polyplan.planner.intervals.interval_coverage import coverage_lines, interval_coverage
from polyplan.planner.plan_builder import planned_from_profile

KS = (1, 2, 4, 8)
TIMES = {"target": 0.010, "mid": 0.004, "drafter": 0.001}
CHAINS = [(("target", "mid", "drafter"), (4, 3)), (("target", "drafter"), (3,))]


def pooled_profile(seed: int, prompts: int = 48, length: int = 96) -> Profile:
    rng = np.random.default_rng(seed)
    rates = np.where(rng.random(prompts) < 0.15, 0.99, rng.beta(6.0, 2.0, prompts))
    models = tuple(ModelProfile(name, f"fp-{name}", tuple(LatencyPoint(128, k, t1 * (1 + 0.1 * (k - 1))) for k in KS))
                   for name, t1 in TIMES.items())
    profile = Profile(target="target", device="synthetic", models=models, pairs=())
    entries = []
    for verifier, drafter, scale in (("target", "mid", 1.0), ("mid", "drafter", 0.95), ("target", "drafter", 0.93)):
        strings = tuple("".join("1" if hit else "0" for hit in rng.random(length) < scale * rate) for rate in rates)
        rate = sum(s.count("1") for s in strings) / (prompts * length)
        profile = profile.with_stats(verifier, drafter, "greedy", SamplingStats(alpha=rate))
        entries.append(PairAgreement(verifier, drafter, strings))
    return dataclasses.replace(profile, acceptance_runs={"greedy": AgreementRuns(tuple(entries), prompts=prompts)})


def test_the_shipped_intervals_are_calibrated_on_new_prompt_sets():
    result = interval_coverage(pooled_profile(1), CHAINS, split=16, splits=40, resamples=100)
    low, high = result.expected
    assert (result.prompts, result.split, result.splits) == (48, 16, 40)
    assert (low, high) == (35, 40)  # binomial(40, 0.95)'s central 95%
    for item in result.chains:
        assert low <= item.covered <= high, item
        assert item.actual_spread > 0 and 0.8 * item.actual_spread <= item.interval_spread <= 1.25 * item.actual_spread
    text = "\n".join(coverage_lines(result))
    assert "target > mid > drafter [4, 3]" in text and "NARROW" not in text


def test_negative_control_intervals_of_the_profiles_mean_only_are_found_narrow(monkeypatch):
    import polyplan.planner.intervals.prediction_interval as module


    monkeypatch.setattr(module, "prompt_weights", profile_only_weights)
    monkeypatch.setattr(module, "few_prompts_stretch", lambda prompts, level: 1.0)
    result = interval_coverage(pooled_profile(1), CHAINS, split=16, splits=40, resamples=100)
    assert all(item.interval_spread < 0.8 * item.actual_spread for item in result.chains)
    assert any(item.covered < result.expected[0] for item in result.chains)
    assert "NARROW" in "\n".join(coverage_lines(result))


@pytest.mark.parametrize(("options", "message"), [
    ({"split": 25}, r"--split 25: the profile has 48 prompts, two sets of 25 need 50"),
    ({"split": 1}, r"--split: must be an integer >= 2"),
    ({"split": 8, "splits": 3}, r"--splits: must be an integer >= 10"),
])
def test_bad_settings_are_one_clear_error(options, message):
    with pytest.raises(PolyplanError, match=message):
        interval_coverage(pooled_profile(2), CHAINS, **options)


def test_a_profile_without_agreement_runs_is_one_clear_error():
    profile = dataclasses.replace(pooled_profile(2), acceptance_runs={})
    with pytest.raises(PolyplanError, match="no greedy agreement runs"):
        interval_coverage(profile, CHAINS, split=8)


def test_bench_intervals_reads_the_plans_profile(tmp_path):
    from polyplan.cli.app import app

    profile = pooled_profile(3, prompts=24)
    write_profile(profile, tmp_path / "profile.json")
    planned_from_profile(profile, tmp_path / "plan.json", profile_path=str(tmp_path / "profile.json"), resamples=20, k_max=4)
    runner = CliRunner()
    result = runner.invoke(app, ["bench", "intervals", "--plan", str(tmp_path / "plan.json"), "--splits", "10",
                                 "--top", "2", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["prompts"] == 24 and payload["split"] == 12 and len(payload["chains"]) == 2
    assert all(0 <= item["covered"] <= 10 for item in payload["chains"])
    (tmp_path / "profile.json").unlink()
    gone = runner.invoke(app, ["bench", "intervals", "--plan", str(tmp_path / "plan.json")])
    assert gone.exit_code == 2 and "cannot be read" in gone.output
