"""rank_chains(): finds known optima, explains insertions, writes plans; no torch anywhere."""

from __future__ import annotations

import dataclasses
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.cost_model import predict_chain
from polyplan.planner.exact.latency import curve_from_profile
from polyplan.formats.plan import read_plan
from polyplan.formats.plan import write_plan
from polyplan.planner.plan_builder import plan_of
from polyplan.planner.search import SearchSettings, evaluate_chain, rank_chains
from polyplan.formats.profile import DecodedStats, LatencyPoint, ModelProfile, Profile, SamplingStats
from polyplan.formats.profile import read_profile

EXAMPLE = Path(__file__).resolve().parents[1] / "polyplan" / "data" / "paper_table1_profile.json"


def synthetic(times: dict[str, float], alphas: dict[tuple[str, str], float], default: float = 0.05) -> Profile:
    """Target = first name; every model faster than another gets a pair under it.

    Latency grows 10% per extra token: T(k) = T(1) (1 + 0.1 (k - 1)), measured at k = 1..16.
    Pairs not listed get the poor acceptance `default`.
    """
    names = list(times)
    models = tuple(ModelProfile(name, f"fp-{name}", tuple(LatencyPoint(256, k, times[name] * (1 + 0.1 * (k - 1))) for k in (1, 2, 4, 8, 16)))
                   for name in names)
    profile = Profile(target=names[0], device="synthetic", models=models, pairs=())
    for verifier, drafter in itertools.permutations(names, 2):
        if times[drafter] < times[verifier]:
            profile = profile.with_stats(verifier, drafter, "greedy", SamplingStats(alpha=alphas.get((verifier, drafter), default)))
    return profile


# Optimum A > C: the only good acceptance with the target is C's; B is slow and C is poor under B.
TWO = synthetic({"A": 0.1, "B": 0.03, "C": 0.002, "D": 0.0005}, {("A", "C"): 0.85, ("A", "B"): 0.9, ("B", "C"): 0.3})
# Optimum A > B > C: B agrees with A, C with B, but C alone is poor under A; D is a decoy.
THREE = synthetic({"A": 0.1, "B": 0.02, "C": 0.002, "D": 0.0005}, {("A", "B"): 0.95, ("B", "C"): 0.9, ("A", "C"): 0.5})
# Optimum A > B > C > D: a cascade where each model only agrees with its neighbour.
FOUR = synthetic(
    {"A": 0.1, "B": 0.02, "C": 0.004, "D": 0.0005},
    {("A", "B"): 0.95, ("B", "C"): 0.9, ("C", "D"): 0.85, ("A", "C"): 0.5, ("A", "D"): 0.3, ("B", "D"): 0.5},
)


@pytest.mark.parametrize(
    ("profile", "expected"),
    [(TWO, ("A", "C")), (THREE, ("A", "B", "C")), (FOUR, ("A", "B", "C", "D"))],
    ids=["2-models", "3-models", "4-models"],
)
def test_recommend_finds_the_known_optimum(profile, expected):
    result = rank_chains(profile, SearchSettings(max_levels=4, k_max=8))
    assert result.best.chain == expected
    speeds = [plan.exact_speedup for plan in result.ranked]
    assert speeds == sorted(speeds, reverse=True)
    assert len(result.ranked) == 8  # every subset of the three drafters, target on top
    assert {plan.chain[0] for plan in result.ranked} == {"A"}
    # The block sizes are the grid optimum for that chain.
    alphas = list(result.best.acceptances)
    lat = [curve_from_profile(profile.model(name)) for name in expected]
    grid = itertools.product(range(1, 9), repeat=len(expected) - 1)
    best_cost = min(predict_chain(alphas, lat, blocks).cost_per_token for blocks in grid)
    assert result.best.exact.cost_per_token == pytest.approx(best_cost, rel=1e-12)
    assert result.best.search == "grid"


def test_insertion_notes_explain_in_and_out():
    notes = {note.model: note for note in rank_chains(TWO).insertions}
    assert notes["B"].included is False and notes["B"].theorem_verdict == "no_gain"
    assert notes["B"].line.startswith("out: B: exact model")
    assert notes["B"].exact_speedup_with < notes["B"].exact_speedup_without
    assert notes["C"].included is True and notes["C"].theorem_verdict is None  # bottom: n/a
    assert "does not apply" in notes["C"].line
    notes = {note.model: note for note in rank_chains(FOUR).insertions}
    assert all(note.included for note in notes.values())
    assert notes["B"].theorem_verdict == "helps" and "between A and C" in notes["B"].line
    assert notes["C"].theorem_verdict == "helps" and "between B and D" in notes["C"].line
    limited = {note.model: note for note in rank_chains(FOUR, SearchSettings(max_levels=2)).insertions}
    assert not limited["D"].included and "would exceed max_levels = 2" in limited["D"].line


def test_max_levels_limits_the_chain():
    result = rank_chains(FOUR, SearchSettings(max_levels=2))
    assert all(len(plan.chain) <= 2 for plan in result.ranked)
    assert result.best.chain == ("A", "B")


def test_optuna_search_is_seeded_and_near_the_grid_optimum():
    grid = rank_chains(THREE, SearchSettings(max_levels=3, k_max=8, block_sizes="grid"))
    first = rank_chains(THREE, SearchSettings(max_levels=3, k_max=8, block_sizes="optuna", optuna_trials=40, seed=3))
    second = rank_chains(THREE, SearchSettings(max_levels=3, k_max=8, block_sizes="optuna", optuna_trials=40, seed=3))
    assert first.best.chain == grid.best.chain == ("A", "B", "C")
    assert first.best.search == "optuna"
    assert first.best.block_sizes == second.best.block_sizes
    assert first.best.exact_speedup >= 0.97 * grid.best.exact_speedup


def test_paper_model_uses_decoded_mu_when_measured_else_eq3():
    profile = synthetic({"A": 0.1, "C": 0.002}, {("A", "C"): 0.85})
    plan = evaluate_chain(profile, ("A", "C"), (5,))
    assert plan.paper.length_sources == ("eq3",)
    assert plan.paper.mean_lengths[0] == pytest.approx((1 - 0.85**6) / 0.15)
    assert plan.paper.alpha_scale == 5
    stats = profile.stats("A", "C", "greedy")
    profile = profile.with_stats("A", "C", "greedy", dataclasses.replace(stats, decoded=(*stats.decoded, DecodedStats(k=5, mu=3.5))))
    plan = evaluate_chain(profile, ("A", "C"), (5,))
    assert plan.paper.length_sources == ("decoded",) and plan.paper.mean_lengths == (3.5,)
    t1, t2 = 0.1, 0.002
    assert plan.paper.speedup == pytest.approx(t1 / ((t1 + 5 * t2) / 3.5))
    assert plan.paper.phi_per_token == pytest.approx((1 / 3.5, 5 / 3.5))


def test_table1_example_prefers_the_quantized_intermediate():
    result = rank_chains(read_profile(EXAMPLE))
    assert result.best.chain == ("vicuna-7b", "vicuna-7b-w4", "eagle")
    two = next(plan for plan in result.ranked if plan.chain == ("vicuna-7b", "eagle"))
    assert result.best.exact_speedup > two.exact_speedup


def test_bad_profiles_and_arguments():
    incomplete = synthetic({"A": 0.1, "B": 0.02, "C": 0.002}, {})
    incomplete = dataclasses.replace(incomplete, pairs=tuple(pair for pair in incomplete.pairs if (pair.verifier, pair.drafter) != ("B", "C")))
    with pytest.raises(PolyplanError, match="no entry for verifier 'B', drafter 'C' under sampling 'greedy'"):
        rank_chains(incomplete)
    with pytest.raises(PolyplanError, match="under sampling 't1.0'"):
        rank_chains(THREE, SearchSettings(sampling="t1.0"))
    with pytest.raises(PolyplanError, match="max_levels: must be an integer >= 1"):
        rank_chains(THREE, SearchSettings(max_levels=0))
    with pytest.raises(PolyplanError, match="k_max, a block size: must be an integer >= 1"):
        rank_chains(THREE, SearchSettings(k_max=0))
    with pytest.raises(PolyplanError, match="block_sizes: must be one of"):
        rank_chains(THREE, SearchSettings(block_sizes="random"))
    with pytest.raises(PolyplanError, match="chain: must start with the target 'A'"):
        evaluate_chain(THREE, ("B", "C"), (2,))
    with pytest.raises(PolyplanError, match="no model named 'Z'"):
        rank_chains(THREE, SearchSettings(candidates=["Z"]))


def test_slower_candidates_are_explained_not_used():
    profile = synthetic({"A": 0.1, "C": 0.002, "Z": 0.3}, {("A", "C"): 0.85})
    result = rank_chains(profile)
    assert all("Z" not in plan.chain for plan in result.ranked)
    note = next(note for note in result.insertions if note.model == "Z")
    assert note.line.startswith("out: Z is not faster than the target")


def test_plan_file_round_trip(tmp_path):
    result = rank_chains(THREE)
    path = tmp_path / "plan.json"
    write_plan(plan_of(result, profile_path="profile.json"), path)
    plan = read_plan(path)
    assert plan.chain == result.best.chain and plan.block_sizes == result.best.block_sizes
    assert dict(plan.fingerprints) == {name: f"fp-{name}" for name in plan.chain}
    assert plan.best.exact.speedup == pytest.approx(result.best.exact_speedup)
    payload = json.loads(path.read_text())
    assert payload["alternatives"][0]["exact"]["forwards_per_token"] == list(result.best.exact.forwards_per_token)
    assert plan.alternatives[0].exact.forwards_per_token == result.best.exact.forwards_per_token
    payload["alternatives"][0]["block_sizes"] = [0, 2]
    path.write_text(json.dumps(payload))
    with pytest.raises(PolyplanError, match=r"plan.json: alternatives\[0\]\.block_sizes\[0\]: must be an integer >= 1, got 0"):
        read_plan(path)
    payload["plan_version"] = 9
    path.write_text(json.dumps(payload))
    with pytest.raises(PolyplanError, match="plan_version: unsupported version 9"):
        read_plan(path)


def test_planner_and_its_commands_never_import_torch():
    code = (
        "import sys, polyplan.planner, polyplan.formats.profile, polyplan.cli.commands.theory, polyplan.cli.commands.recommend; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _timed_to(widest: int) -> Profile:
    """A target (0.1 s a step, flat in k up to `widest`, so long blocks pay) and a faithful, free drafter."""
    ks = sorted({1, 2, widest})
    models = (ModelProfile("A", "fp-A", tuple(LatencyPoint(256, k, 0.1 * (1 + 0.01 * (k - 1))) for k in ks)),
              ModelProfile("B", "fp-B", tuple(LatencyPoint(256, k, 0.001) for k in ks)))
    return Profile(target="A", device="synthetic", models=models, pairs=()).with_stats("A", "B", "greedy", SamplingStats(alpha=0.99))


def test_k_max_defaults_to_the_widest_width_the_profile_timed():
    from polyplan.planner.search import default_k_max

    wide = _timed_to(16)
    assert default_k_max(wide) == 15  # a block of 15 is verified at width 16, the widest timed
    result = rank_chains(wide)
    assert result.k_max == 15 and result.best.block_sizes[0] > 8  # long blocks pay here: the old default cut them
    assert rank_chains(wide, SearchSettings(k_max=8)).best.block_sizes == (8,)  # an explicit --k-max still rules
    assert default_k_max(_timed_to(8)) == 8  # the embedded family's widths: as before
    assert default_k_max(read_profile(EXAMPLE)) == 8  # one-point (constant) curves: as before
    assert default_k_max(_timed_to(32)) == 31
