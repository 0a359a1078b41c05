"""Bootstrap prediction intervals of the exact model's speedup (planner.intervals.prediction_interval).

Statistical tests: the profiles are drawn from known distributions (timings Gaussian around a
known T(k), agreement sequences Bernoulli(α) per token), so the true speedup is known exactly.
Coverage is checked over 40 independent profiles at the 95% level; the pass threshold (at
least 30 of 40) fails with probability < 1e-4 for a correct 95% interval (binomial(40, 0.95)),
and the negative control (inputs held fixed, no noise propagated) must fail it.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from interval_controls import profile_only_weights

from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.cost_model import ChainSettings, predict_chain
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.formats.plan import read_plan
from polyplan.planner.plan_builder import plan_from_profile
from polyplan.planner.intervals.prediction_interval import prediction_intervals
from polyplan.planner.exact.runs import run_survival
from polyplan.formats.profile import AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats

KS = (1, 2, 4, 8)
T1 = {"target": 0.010, "drafter": 0.002}
ALPHA = 0.75
BLOCK = 4
NOISE = 0.08  # relative sd of one timing


def true_t(name: str, k: int) -> float:
    return T1[name] * (1 + 0.1 * (k - 1))


def drawn_profile(rng: np.random.Generator, *, repeats: int = 15, prompts: int = 12, length: int = 120,
                  keep_samples: bool = True, alpha: float = ALPHA) -> Profile:
    """A profile measured from the known truth with noise (module docstring)."""
    models = []
    for name in T1:
        points = []
        for k in KS:
            samples = true_t(name, k) * (1 + NOISE * rng.standard_normal(repeats))
            q1, q3 = np.percentile(samples, [25, 75])
            points.append(LatencyPoint(128, k, float(np.median(samples)), float(q3 - q1), repeats,
                                       tuple(float(v) for v in samples) if keep_samples else None))
        models.append(ModelProfile(name, f"fp-{name}", tuple(points)))
    sequences = ["".join("1" if hit else "0" for hit in rng.random(length) < alpha) for _ in range(prompts)]
    rate = sum(s.count("1") for s in sequences) / (prompts * length)
    profile = Profile(target="target", device="synthetic", models=tuple(models), pairs=(),
                      acceptance_runs={"greedy": AgreementRuns((PairAgreement("target", "drafter", tuple(sequences)),))})
    return profile.with_stats("target", "drafter", "greedy", SamplingStats(alpha=min(rate, 0.999)))


def point_speedup(profile: Profile) -> float:
    from polyplan.planner.search import evaluate_chain

    return evaluate_chain(profile, ("target", "drafter"), (BLOCK,)).exact_speedup


def true_speedup() -> float:
    curves = [LatencyCurve(KS, tuple(true_t(name, k) for k in KS)) for name in T1]
    return predict_chain([ALPHA], curves, [BLOCK]).speedup


def interval_of(profile: Profile, resamples: int = 100, seed: int = 0):
    point = point_speedup(profile)
    result = prediction_intervals(profile, [(("target", "drafter"), (BLOCK,), point)], resamples=resamples, seed=seed)
    return result.chains[0].speedup


def test_the_interval_covers_the_true_speedup_at_its_level():
    """n = 40 profiles, 95% intervals: at least 30 must cover the truth (see module docstring)."""
    truth = true_speedup()
    rng = np.random.default_rng(7)
    covered = sum(interval_of(drawn_profile(rng)).contains(truth) for _ in range(40))
    assert covered >= 30


def test_negative_control_fixed_inputs_do_not_cover():
    """Negative control: with one timing per point, no IQR and no acceptance data to resample
    the interval has zero width, and fails the coverage test above."""
    truth = true_speedup()
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(40):
        profile = drawn_profile(rng)
        profile = dataclasses.replace(profile, acceptance_runs={}, models=tuple(
            dataclasses.replace(model, latency=tuple(LatencyPoint(p.context_length, p.k, p.median_s, 0.0, 1, None) for p in model.latency))
            for model in profile.models
        ))
        interval = interval_of(profile)
        assert interval.low == interval.high
        covered += interval.contains(truth)
    assert covered < 30


def test_more_measurements_give_a_narrower_interval():
    rng = np.random.default_rng(3)
    few = interval_of(drawn_profile(rng, repeats=5, prompts=4))
    many = interval_of(drawn_profile(rng, repeats=60, prompts=48))
    assert many.high - many.low < few.high - few.low


def test_old_profiles_without_stored_timings_use_median_and_iqr():
    rng = np.random.default_rng(5)
    profile = drawn_profile(rng, keep_samples=False)
    point = point_speedup(profile)
    result = prediction_intervals(profile, [(("target", "drafter"), (BLOCK,), point)], resamples=50)
    assert result.latency_source == "median_iqr"
    assert result.chains[0].speedup.low < point < result.chains[0].speedup.high


def test_bootstrapped_runs_agree_with_the_planner_survival_on_the_full_sample():
    """The count-matrix route of the bootstrap reproduces run_survival when every prompt is drawn once."""
    from polyplan.planner.exact.runs import count_matrix, profile_runs, survival_from_counts

    profile = drawn_profile(np.random.default_rng(11))
    sequences = profile_runs(profile, "greedy")[("target", "drafter")]
    at_risk, going_on, starts = count_matrix(sequences, BLOCK)
    pooled = survival_from_counts(at_risk.sum(axis=0), going_on.sum(axis=0), int(starts.sum()))
    assert pooled == run_survival(sequences, BLOCK)


def test_chains_that_cannot_be_told_apart_are_reported_as_tied():
    """The same chain listed twice with the same prediction is tied with itself; target-only
    (1.00x, far below) is not."""
    profile = drawn_profile(np.random.default_rng(2))
    point = point_speedup(profile)
    chains = [(("target", "drafter"), (BLOCK,), point), (("target", "drafter"), (BLOCK,), point), (("target",), (), 1.0)]
    result = prediction_intervals(profile, chains, resamples=60)
    assert [item.overlaps_best for item in result.chains] == [False, True, False]
    assert "cannot tell" in result.ranking_line()
    alone = prediction_intervals(profile, [chains[0], chains[2]], resamples=60)
    assert "ahead of every other chain" in alone.ranking_line()


def test_plan_json_carries_the_intervals_and_reads_them_back(tmp_path):
    profile = drawn_profile(np.random.default_rng(4))
    out = tmp_path / "plan.json"
    result = plan_from_profile(profile, out, profile_path="profile.json", resamples=40, k_max=4)
    payload = json.loads(out.read_text())
    low, high = payload["alternatives"][0]["exact"]["interval"]
    assert low <= payload["alternatives"][0]["exact"]["speedup"] <= high
    assert payload["prediction_intervals"]["resamples"] == 40
    chains = read_plan(out).alternatives
    assert chains[0].exact.interval == (low, high)
    assert result.intervals is not None and result.intervals.chains[0].speedup.low == low


def test_a_plan_without_intervals_is_still_read(tmp_path):
    profile = drawn_profile(np.random.default_rng(4))
    out = tmp_path / "plan.json"
    plan_from_profile(profile, out, profile_path="profile.json", resamples=0, k_max=4)
    payload = json.loads(out.read_text())
    assert "interval" not in payload["alternatives"][0]["exact"] and payload["prediction_intervals"] is None
    assert read_plan(out).alternatives[0].exact.interval is None


def test_bad_settings_are_one_clear_error():
    profile = drawn_profile(np.random.default_rng(4))
    with pytest.raises(PolyplanError, match="resamples"):
        prediction_intervals(profile, [(("target",), (), 1.0)], resamples=5)
    with pytest.raises(PolyplanError, match="level"):
        prediction_intervals(profile, [(("target",), (), 1.0)], level=1.5)


def test_stored_timings_round_trip_and_bad_ones_are_one_clear_error(tmp_path):
    from polyplan.formats.profile import read_profile, write_profile

    profile = drawn_profile(np.random.default_rng(8), repeats=4)
    first = profile.models[0]
    profile = profile.with_model(dataclasses.replace(first, latency=(dataclasses.replace(first.latency[0], outliers=1), *first.latency[1:])))
    path = tmp_path / "profile.json"
    write_profile(profile, path)
    again = read_profile(path)
    assert again.models[0].latency[0].samples_s == profile.models[0].latency[0].samples_s
    assert again.models[0].latency[0].outliers == 1
    payload = json.loads(path.read_text())
    payload["models"][0]["latency"][0]["samples_s"] = [0.01, -0.5]
    path.write_text(json.dumps(payload))
    with pytest.raises(PolyplanError, match=r"models\[0\]\.latency\[0\]\.samples_s\[1\]: must be > 0"):
        read_profile(path)


def heterogeneous_runs(rng: np.random.Generator, prompts: int, length: int = 80) -> tuple[str, ...]:
    """Agreement sequences of `prompts` prompts whose own rates differ (α_p ~ Beta, mean 0.75):
    how acceptance really varies between prompts (code drafts well, prose less)."""
    rates = rng.beta(6.0, 2.0, prompts)
    return tuple("".join("1" if hit else "0" for hit in rng.random(length) < rate) for rate in rates)


def with_runs(sequences: tuple[str, ...]) -> Profile:
    """Exact latency (no timing noise) and these agreement runs: only acceptance is uncertain."""
    models = tuple(ModelProfile(name, f"fp-{name}", tuple(LatencyPoint(128, k, true_t(name, k)) for k in KS)) for name in T1)
    rate = sum(s.count("1") for s in sequences) / sum(len(s) for s in sequences)
    profile = Profile(target="target", device="synthetic", models=models, pairs=(),
                      acceptance_runs={"greedy": AgreementRuns((PairAgreement("target", "drafter", tuple(sequences)),))})
    return profile.with_stats("target", "drafter", "greedy", SamplingStats(alpha=min(rate, 0.999)))


def test_the_interval_covers_a_new_prompt_sets_speedup(monkeypatch):
    """Issue 23 item 3: a plan is validated and used on prompts the profile never saw. Profile on
    12 prompts, then measure the exact model on a new set of 12 from the same population: the
    95% interval must cover the new set's speedup in at least 30 of 40 trials (binomial bound of
    the module docstring); the negative control, resampling only the profile's own prompts (the
    error of its mean, not of a new set's), covers clearly fewer on the same draws."""
    import polyplan.planner.intervals.prediction_interval as module

    rng = np.random.default_rng(11)
    trials = [(with_runs(heterogeneous_runs(rng, 12)), with_runs(heterogeneous_runs(rng, 12))) for _ in range(40)]

    def covered() -> int:
        return sum(interval_of(profiled).contains(point_speedup(new)) for profiled, new in trials)

    new_set = covered()
    assert new_set >= 30


    monkeypatch.setattr(module, "prompt_weights", profile_only_weights)
    assert covered() <= new_set - 4


def biased(profile: Profile, name: str, factor: float, *, floor: bool) -> Profile:
    """`profile` with every timing of `name` inflated by `factor`, as a burst of load while it
    was timed does; with `floor`, the fixed workload timed in the same rounds was inflated too
    (as the profiler records it), and every other model's floor was quiet."""
    import dataclasses

    from polyplan.formats.profile import TimingHealth

    models = []
    for model in profile.models:
        slow = factor if model.name == name else 1.0
        latency = [dataclasses.replace(p, median_s=p.median_s * slow, iqr_s=p.iqr_s * slow,
                                       samples_s=None if p.samples_s is None else tuple(v * slow for v in p.samples_s))
                   for p in model.latency]
        timing = TimingHealth(reference_median_s=0.001 * slow, reference_relative_iqr=0.03) if floor else None
        models.append(dataclasses.replace(model, latency=latency, timing=timing))
    return dataclasses.replace(profile, models=models)


def test_a_profile_biased_for_one_model_widens_to_the_truth():
    """Issue 23: timings inflated for one model only (the drafter timed during a 1.8x burst). Its
    floor record says so, and the interval, widened by that measured amount, contains the true
    speedup as often as a 95% interval should (at least 30 of 40 drawn profiles, the module
    docstring's bound); without the floor record (the negative control) the same biased timings
    give intervals that miss it (at most 2 of 40). The widening is named, for the plan and the
    report, and a clean profile is not widened."""
    truth = true_speedup()
    rng = np.random.default_rng(3)
    recorded_hits = blind_hits = 0
    for _ in range(40):
        clean = drawn_profile(rng)
        recorded = biased(clean, "drafter", 1.8, floor=True)
        result = prediction_intervals(recorded, [(("target", "drafter"), (BLOCK,), point_speedup(recorded))], resamples=100)
        recorded_hits += result.chains[0].speedup.contains(truth)
        blind_hits += interval_of(biased(clean, "drafter", 1.8, floor=False)).contains(truth)
    assert recorded_hits >= 30 and blind_hits <= 2, (recorded_hits, blind_hits)
    assert len(result.widened) == 1 and result.widened[0].startswith("drafter: latency x [0.5")
    assert "1.80x slower" in result.widened[0]
    assert prediction_intervals(clean, [(("target", "drafter"), (BLOCK,), point_speedup(clean))]).widened == ()


def test_a_noisy_floor_shared_by_every_model_is_one_widening_line_at_the_levels_drift():
    """Models timed on the same noisy floor get one line naming them all; the factor's spread is
    the level's drift (FLOOR_DRIFT_SHARE of the per-call spread), not the per-call spread itself."""
    from polyplan.formats.profile import TimingHealth
    from polyplan.planner.intervals.prediction_interval import FLOOR_DRIFT_SHARE

    clean = drawn_profile(np.random.default_rng(7))
    noisy = dataclasses.replace(clean, models=[
        dataclasses.replace(model, timing=TimingHealth(reference_median_s=0.001, reference_relative_iqr=0.34))
        for model in clean.models])
    result = prediction_intervals(noisy, [(("target", "drafter"), (BLOCK,), point_speedup(noisy))], resamples=400)
    assert len(result.widened) == 1 and result.widened[0].startswith("drafter, target: latency x [")
    low, high = (float(x) for x in result.widened[0].split("[")[1].split("]")[0].split(", "))
    sd = FLOOR_DRIFT_SHARE * 0.34 / 1.349
    assert math.exp(-1.96 * sd) * 0.93 < low < math.exp(-1.96 * sd) * 1.07
    assert math.exp(1.96 * sd) * 0.93 < high < math.exp(1.96 * sd) * 1.07
    assert high < math.exp(1.96 * 0.34 / 1.349) * 0.9  # narrower than the per-call spread would make it


def test_a_widened_interval_is_named_in_the_plan_and_the_validation_notes(tmp_path):
    """The widening travels: plan.json keeps `prediction_intervals.widened` and reads it back,
    and the validation report's notes name it; a clean profile's plan names none."""
    from polyplan.planner.plan_builder import planned_from_profile
    from polyplan.validation.chain_runs import plan_notes

    clean = drawn_profile(np.random.default_rng(5))
    planned_from_profile(biased(clean, "drafter", 1.8, floor=True), tmp_path / "plan.json", profile_path="p.json")
    plan = read_plan(tmp_path / "plan.json")
    assert len(plan.prediction_intervals.widened) == 1
    assert plan.prediction_intervals.widened[0].startswith("drafter: latency x [0.5")
    assert any(note.startswith("prediction interval widened for timing health: drafter: latency x")
               for note in plan_notes(plan))
    planned_from_profile(clean, tmp_path / "clean.json", profile_path="p.json")
    clean_plan = read_plan(tmp_path / "clean.json")
    assert clean_plan.prediction_intervals.widened == ()
    assert not any("widened" in note for note in plan_notes(clean_plan))


THREE = ("target", "mid", "drafter")
T1_THREE = {"target": 0.010, "mid": 0.004, "drafter": 0.001}


def correlated_three_level(rng: np.random.Generator, prompts: int, length: int = 80) -> Profile:
    """A three-model profile whose two pairs share each prompt's difficulty: a prompt hard for
    the middle model is hard for the drafter too (as measured on the family: the prompts the
    int8 copy drafts worse are the ones the distilled drafter drafts worse). Exact latency."""
    # most prompts draft fairly well, a few (a repeated passage, boilerplate) almost perfectly
    rates = np.where(rng.random(prompts) < 0.15, 0.99, rng.beta(6.0, 2.0, prompts))
    models = tuple(ModelProfile(name, f"fp-{name}", tuple(LatencyPoint(128, k, t1 * (1 + 0.1 * (k - 1))) for k in KS))
                   for name, t1 in T1_THREE.items())
    profile = Profile(target="target", device="synthetic", models=models, pairs=())
    entries = []
    for verifier, drafter, scale in (("target", "mid", 1.0), ("mid", "drafter", 0.95)):
        sequences = tuple("".join("1" if hit else "0" for hit in rng.random(length) < scale * rate) for rate in rates)
        rate = sum(s.count("1") for s in sequences) / sum(len(s) for s in sequences)
        profile = profile.with_stats(verifier, drafter, "greedy", SamplingStats(alpha=min(rate, 0.999)))
        entries.append(PairAgreement(verifier, drafter, sequences))
    return dataclasses.replace(profile, acceptance_runs={"greedy": AgreementRuns(tuple(entries))})


def three_level_speedup(profile: Profile) -> float:
    from polyplan.planner.search import evaluate_chain

    return evaluate_chain(profile, THREE, (4, 3)).exact_speedup


def three_level_coverage(trials) -> int:
    covered = 0
    for profiled, new in trials:
        point = three_level_speedup(profiled)
        interval = prediction_intervals(profiled, [(THREE, (4, 3), point)], resamples=100, seed=0).chains[0].speedup
        covered += interval.contains(three_level_speedup(new))
    return covered


def test_every_pair_draws_the_same_new_prompt_set(monkeypatch):
    """Every pair is measured on the same prompts, so a replicate's new prompt set is one draw
    for all of them and the levels of a chain move together, as they do on real prompts (on the
    family, the prompts the int8 copy drafts worse are the ones the drafter drafts worse). Two
    pairs with the same agreement per prompt then get the same α in every replicate; the
    negative control, a draw per pair (what the module did before), decorrelates them."""
    import polyplan.planner.intervals.prediction_interval as module

    profile = correlated_three_level(np.random.default_rng(5), 16)
    first = profile.acceptance_runs["greedy"].pairs[0]
    entries = (first, PairAgreement("mid", "drafter", first.agreement))
    profile = dataclasses.replace(profile, acceptance_runs={"greedy": AgreementRuns(entries)})
    profile = profile.with_stats("mid", "drafter", "greedy", profile.pair("target", "mid").sampling["greedy"])

    def correlation() -> float:
        replicates = module._AcceptanceReplicates(profile, ChainSettings(), 200, np.random.default_rng(0))
        return float(np.corrcoef(replicates.alphas(("target", "mid")), replicates.alphas(("mid", "drafter")))[0, 1])

    assert correlation() == pytest.approx(1.0)
    draw = module._AcceptanceReplicates._prompt_draw

    def per_pair(self, prompts):
        self._weights.clear()  # forget the shared draw: every call draws anew
        return draw(self, prompts)

    monkeypatch.setattr(module._AcceptanceReplicates, "_prompt_draw", per_pair)
    assert abs(correlation()) < 0.3


def test_few_prompts_stretch_follows_students_t():
    from scipy.stats import norm, t

    from polyplan.planner.intervals.prediction_interval import few_prompts_stretch

    assert few_prompts_stretch(None, 0.95) == 1.0
    assert few_prompts_stretch(16, 0.95) == pytest.approx(t.ppf(0.975, 15) / norm.ppf(0.975) * np.sqrt(16 / 15))
    assert few_prompts_stretch(16, 0.95) == pytest.approx(1.123, abs=1e-3)
    values = [few_prompts_stretch(n, 0.95) for n in (4, 8, 16, 64, 1024)]
    assert values == sorted(values, reverse=True) and values[-1] == pytest.approx(1.0, abs=0.002)


def test_the_stretch_moves_each_bound_by_its_factor_in_log_speedup(monkeypatch):
    """The stretch is a monotone map of every replicate, so each bound moves exactly by it:
    log(bound / point) is `prompt_stretch` times what it is unstretched."""
    import polyplan.planner.intervals.prediction_interval as module

    profile = correlated_three_level(np.random.default_rng(3), 8)
    point = three_level_speedup(profile)
    stretched = prediction_intervals(profile, [(THREE, (4, 3), point)], resamples=100, seed=0)
    assert stretched.prompt_stretch == pytest.approx(module.few_prompts_stretch(8, 0.95))
    monkeypatch.setattr(module, "few_prompts_stretch", lambda prompts, level: 1.0)
    plain = prediction_intervals(profile, [(THREE, (4, 3), point)], resamples=100, seed=0)
    assert plain.prompt_stretch == 1.0
    for bound in ("low", "high"):
        wide, narrow = getattr(stretched.chains[0].speedup, bound), getattr(plain.chains[0].speedup, bound)
        # (percentiles interpolate between replicates in speedup, not log-speedup: equal to 2%)
        assert np.log(wide / point) == pytest.approx(stretched.prompt_stretch * np.log(narrow / point), rel=0.02)
        assert abs(np.log(wide / point)) > abs(np.log(narrow / point))


def test_a_new_prompt_sets_three_level_speedup_is_covered_with_few_skewed_prompts():
    """Profiles of 8 prompts from a skewed population (a few prompts drafted almost perfectly),
    two pairs sharing each prompt's difficulty: over 80 trials the 95% interval covers a new
    8-prompt set's speedup at least 68 times (binomial(80, 0.95) falls below 68 with probability
    < 1e-3)."""
    rng = np.random.default_rng(6)
    trials = [(correlated_three_level(rng, 8), correlated_three_level(rng, 8)) for _ in range(80)]
    assert three_level_coverage(trials) >= 68


def test_the_workload_interval_draws_once_and_is_narrower_than_a_new_sets():
    """For the workload's mean (`new_set` False) a replicate is the cluster resample of the
    profile's prompts alone, the very draw of the negative control above; its interval lies
    inside the two-draw one and holds the same point."""
    from polyplan.planner.intervals.prediction_interval import prompt_weights

    once = prompt_weights(12, 50, np.random.default_rng(3), new_set=False)
    assert np.array_equal(once, profile_only_weights(12, 50, np.random.default_rng(3)))
    assert not np.array_equal(once, prompt_weights(12, 50, np.random.default_rng(3)))  # control: two draws differ
    rng = np.random.default_rng(5)
    profile = with_runs(heterogeneous_runs(rng, 12))
    chains = [(("target", "drafter"), (BLOCK,), point_speedup(profile))]
    runs = ChainSettings(acceptance_model="runs")
    new_set = prediction_intervals(profile, chains, runs, resamples=400).chains[0].speedup
    workload = prediction_intervals(profile, chains, runs, resamples=400, new_set=False).chains[0].speedup
    assert workload.point == new_set.point
    assert new_set.low < workload.low <= workload.point <= workload.high < new_set.high
    assert (workload.high - workload.low) < 0.85 * (new_set.high - new_set.low)


def test_an_alphas_error_for_a_new_set_of_another_size_adds_sqrt_n_over_m():
    """Without agreement runs α is drawn from its standard error: a new set of m prompts adds the
    profile's error times sqrt(n / m) (n the profile's prompts), the same again for m = n, none for
    the workload's mean; a profile that does not say how many prompts it had keeps sqrt(2)."""
    import dataclasses

    import polyplan.planner.intervals.prediction_interval as module
    from polyplan.formats.profile import ProfilerRecord

    profile = with_runs(heterogeneous_runs(np.random.default_rng(2), 16))
    counted = dataclasses.replace(profile, profiler=ProfilerRecord(prompts=16))
    factor = lambda p, new_set, size: module._AcceptanceReplicates(p, ChainSettings(acceptance_model="iid"), 20, np.random.default_rng(0),  # noqa: E731
                                                                   new_set, size)._set_factor
    assert factor(counted, True, 4) == pytest.approx(np.sqrt(5.0)) and factor(counted, True, 16) == pytest.approx(np.sqrt(2.0))
    assert factor(counted, False, 4) == 1.0 and factor(profile, True, 4) == pytest.approx(np.sqrt(2.0))
