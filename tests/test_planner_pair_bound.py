"""Bounds before measurement (planner.exact.pair_bound): from latency curves alone, the best a
drafter could give its verifier; never beaten by the exact model at any acceptance."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import LoopOverhead
from polyplan.formats.profile import LatencyPoint, LoopCalibration, ModelProfile, Profile, SamplingStats, SwitchCosts
from polyplan.planner.exact.cost_model import ChainSettings, predict_chain
from polyplan.planner.exact.draft_rounds import DraftRounds
from polyplan.planner.exact.latency import curve_from_profile
from polyplan.planner.exact.overhead import profile_overhead
from polyplan.planner.exact.pair_bound import PairBound, pair_bound, pair_bounds, pair_prices, required_acceptance_at
from polyplan.planner.exact.physical_limit import limit_speedups, physical_limit
from polyplan.planner.search import SearchSettings, rank_chains

WIDTHS = (1, 2, 3, 4, 6, 8, 12, 16)


def _model(name: str, seconds: dict[int, float], rule: bool = False) -> ModelProfile:
    return ModelProfile(name, f"fp-{name}", tuple(LatencyPoint(64, k, t) for k, t in sorted(seconds.items())),
                        ngram_simple=2 if rule else None)


def _profile(models: tuple[ModelProfile, ...], overhead: tuple[float, float] | None = None,
             switches: dict[str, tuple[float, ...]] | None = None) -> Profile:
    profile = Profile(target=models[0].name, device="synthetic", models=models, pairs=())
    if overhead is not None:
        profile = dataclasses.replace(profile, loop_overhead={"greedy": LoopCalibration(*overhead)})
    if switches:
        profile = dataclasses.replace(profile, switch_costs=SwitchCosts(switches))
    return profile


def _random_curve(rng: np.random.Generator, step: float) -> dict[int, float]:
    """T(k) at a random subset of widths: growing by a random slope, with a random bump (non-monotone
    curves are allowed, as CPU kernels make them)."""
    widths = sorted({1, *rng.choice(WIDTHS[1:], size=int(rng.integers(1, len(WIDTHS))), replace=False).tolist()})
    slope = rng.uniform(0.0, 0.4)
    return {k: step * (1 + slope * (k - 1)) * float(rng.lognormal(0.0, 0.25 if k > 1 else 0.0)) for k in widths}


def _random_pair(rng: np.random.Generator) -> tuple[Profile, bool]:
    """A target and one drafter (a model, or now and then a rule drafter) with random curves, loop and
    switch costs; the model drafter's T(2) sometimes far above 2 T(1) (the catch-up cap's case)."""
    rule = rng.random() < 0.25
    target = _random_curve(rng, 0.01)
    step = 0.01 * float(np.exp(rng.uniform(np.log(0.002), np.log(1.2))))
    drafter = {1: step, 2: step * rng.choice([rng.uniform(0.8, 2.0), rng.uniform(2.0, 8.0)])} if not rule else {1: step}
    if not rule and rng.random() < 0.5:
        drafter.update({k: step * (1 + 0.3 * (k - 1)) for k in (4, 8)})
    overhead = None if rng.random() < 0.3 else (float(rng.uniform(0, 0.002)), float(rng.uniform(0, 0.003)))
    switches = None if rng.random() < 0.3 else {
        "t": tuple(float(v) for v in rng.uniform(0, 0.002, size=int(rng.integers(1, 4)))),
        "d": tuple(float(v) for v in rng.uniform(0, 0.001, size=int(rng.integers(1, 6)))),
    }
    return _profile((_model("t", target), _model("d", drafter, rule)), overhead, switches), rule


def _random_rounds(rng: np.random.Generator, k: int, model_drafter: bool) -> DraftRounds:
    """A random joint law of tokens drafted (0 … K) and accepted, with random confidence stops for a
    model drafter: any law the search hands the exact model at the last level."""
    counts = np.zeros((2, k + 1, k + 1))
    for prompt in range(2):
        for m in range(k + 1):
            counts[prompt, m, : m + 1] = rng.integers(0, 4, size=m + 1) * (rng.random() < 0.7)
    counts[0, k, k] += 1  # at least one round
    stops = None
    if model_drafter:  # a model drafter hands up nothing only after a confidence stop (the policy replay's rounds)
        stops = np.floor(counts.sum(axis=2) * rng.random((2, k + 1)) * (rng.random() < 0.5))
        stops[:, 0] = counts[:, 0].sum(axis=1)
    return DraftRounds(counts, model_drafter, stops)


def _exact(profile: Profile, acceptance, k: int) -> float:
    """The exact model's speedup of [t, d] as the search prices it (the loop overhead the profile records)."""
    curves = [curve_from_profile(profile.model(name)) for name in ("t", "d")]
    switches = profile.switch_costs.models if profile.switch_costs else {}
    return predict_chain([acceptance], curves, [k], profile_overhead(profile, "greedy"),
                         [switches.get(name, (0.0,)) for name in ("t", "d")]).speedup


def test_no_acceptance_beats_the_bound_on_random_latency_tables():
    """Over 300 random pairs, every K up to k_max and random acceptance (i.i.d. α, near-perfect α,
    and arbitrary measured round laws with stops): the exact model never beats the bound, and at
    α → 1 it comes within the cap of it (the bound is tight)."""
    rng = np.random.default_rng(7)
    k_max = 10
    capped = tight = 0
    for case in range(300):
        profile, rule = _random_pair(rng)
        bound = pair_bound(profile, "t", "d", k_max=k_max)
        prices = bound.prices
        for k in range(1, k_max + 1):
            laws = [_random_rounds(rng, k, model_drafter=not rule) for _ in range(2)]
            if not rule:
                laws += [float(rng.uniform(0, 0.999)), 0.0, 1 - 1e-9]
            for law in laws:
                exact = _exact(profile, law, k)
                assert exact <= bound.speedup * (1 + 1e-12), (case, k, law, exact, bound)
        if not rule:
            capped += prices.catch_up > prices.step
            near = max(_exact(profile, 1 - 1e-12, k) for k in range(1, k_max + 1))
            tight += near >= bound.speedup * (1 - 1e-6)
    assert capped >= 20 and tight >= 100  # the cap's case was drawn, and the bound is reached where it does not bind


def test_the_catch_up_cap_is_what_keeps_it_a_bound():
    """Negative control: priced at perfect acceptance with the whole catch-up pass, a drafter whose
    two-token pass costs 9 of its steps is beaten by the exact model when every round's last draft
    is rejected (a measured law: no catch-up is paid)."""
    profile = _profile((_model("t", {1: 0.010, 2: 0.0105, 4: 0.011, 8: 0.012}), _model("d", {1: 0.001, 2: 0.009})))
    prices = pair_prices(profile, "t", "d", k_max=8)
    naive = max(prices.iid(1.0, k) for k in range(1, 9))
    last_rejected = [np.zeros((1, k + 1, k + 1)) for k in range(1, 9)]
    for counts in last_rejected:
        counts[0, -1, -2] = 1.0
    exact = max(_exact(profile, DraftRounds(counts, model_drafter=True), len(counts[0]) - 1) for counts in last_rejected)
    assert exact > naive * 1.1
    assert exact <= pair_bound(profile, "t", "d", k_max=8).speedup


def test_a_free_drafter_gives_the_physical_limit():
    """A rule drafter (one call a round) that costs next to nothing gives the physical limit's S(K),
    loop and switch costs included; so does a free model drafter with no loop cost."""
    target = {1: 0.010, 2: 0.012, 4: 0.016, 8: 0.040}
    for overhead, switch in ((None, (0.0,)), ((0.0004, 0.0007), (0.0009, 0.0002))):
        profile = _profile((_model("t", target), _model("d", {1: 1e-15}, rule=True)), overhead, {"t": switch})
        limit = physical_limit(curve_from_profile(profile.model("t")),
                               overhead=None if overhead is None else LoopOverhead(*overhead), switch=switch, k_max=12)
        prices = pair_prices(profile, "t", "d", k_max=12)
        assert [prices.perfect(k) for k in range(1, 13)] == pytest.approx(limit.speedups, rel=1e-9)
        bound = pair_bound(profile, "t", "d", k_max=12)
        assert (bound.speedup, bound.block_size) == (pytest.approx(limit.speedup, rel=1e-9), limit.block_size)
    free_model = _profile((_model("t", target), _model("d", {1: 1e-15})))
    prices = pair_prices(free_model, "t", "d", k_max=7)
    assert [prices.perfect(k) for k in range(1, 8)] == pytest.approx(list(limit_speedups(curve_from_profile(free_model.model("t")), 7)), rel=1e-9)


def test_a_hand_computed_pair():
    """T_t(1, 2, 4, 8) = 10, 12, 16, 40 ms (T(3) = 14, T(5) = 22), T_d(1, 2) = 1, 1.5 ms, loop 0.5 ms a
    step and 1 ms a round, switch costs 2 ms (target) and 0.3, 0.1 ms (drafter):
    S(K) = (K + 1) · 10.5 / (K · 1.5 + s_d(K) + 0.5 + T̃_t(K + 1) + 2 + 1)."""
    profile = _profile((_model("t", {1: 0.010, 2: 0.012, 4: 0.016, 8: 0.040}), _model("d", {1: 0.001, 2: 0.0015})),
                       (0.0005, 0.001), {"t": (0.002,), "d": (0.0003, 0.0001)})
    by_hand = [2 * 10.5 / (1.5 + 0.3 + 0.5 + 12 + 3), 3 * 10.5 / (3.0 + 0.4 + 0.5 + 14 + 3),
               4 * 10.5 / (4.5 + 0.4 + 0.5 + 16 + 3), 5 * 10.5 / (6.0 + 0.4 + 0.5 + 22 + 3)]
    prices = pair_prices(profile, "t", "d", k_max=4)
    assert [prices.perfect(k) for k in range(1, 5)] == pytest.approx(by_hand, rel=1e-12)
    bound = pair_bound(profile, "t", "d", k_max=4)
    assert (bound.speedup, bound.block_size, bound.cost_ratio) == (pytest.approx(by_hand[2], rel=1e-12), 3, pytest.approx(0.1))
    assert bound.can_pay and bound.text() == "t <- d: at best x1.72 at K = 3 with perfect acceptance (cost 0.1 of a t step)"
    # the exact model at α → 1 is the same price
    assert _exact(profile, 1 - 1e-12, 3) == pytest.approx(by_hand[2], rel=1e-9)
    # a drafter at 0.8 of the target's step cannot pay at any K: at best 4 · 10 / (3 · 8 + 0.5 + 16) at K = 3
    costly = _profile((_model("t", {1: 0.010, 2: 0.012, 4: 0.016, 8: 0.040}), _model("d", {1: 0.008, 2: 0.0085})))
    slow = pair_bound(costly, "t", "d")
    assert not slow.can_pay and slow.block_size == 0 and slow.speedup == pytest.approx(40 / 40.5, rel=1e-12)
    assert slow.text() == "t <- d: at best x0.99 with perfect acceptance: cannot pay (cost 0.8 of a t step)"
    assert slow.required_acceptance(1.0) is None
    # settings: another context length and no loop overhead
    plain = pair_bound(profile, "t", "d", k_max=4, settings=ChainSettings())
    assert plain.speedup > bound.speedup


def test_required_acceptance_is_monotone_and_consistent():
    profile = _profile((_model("t", {1: 0.010, 2: 0.011, 4: 0.013, 8: 0.018, 16: 0.03}), _model("d", {1: 0.0015, 2: 0.0019})),
                       (0.0002, 0.0004), {"t": (0.0005,), "d": (0.0002, 0.0001)})
    bound = pair_bound(profile, "t", "d", k_max=12)
    assert bound.can_pay
    overs = np.linspace(0.5, bound.speedup * 0.999, 25)
    found = [required_acceptance_at(bound, over) for over in overs]
    alphas = [alpha for alpha, _ in found]
    assert all(alpha is not None for alpha in alphas)
    assert all(b >= a for a, b in zip(alphas, alphas[1:])) and alphas[-1] > alphas[0]
    for over, (alpha, k) in zip(overs, found):
        if alpha > 0:  # reached exactly at the crossing, where the exact model says so too
            assert bound.prices.iid(alpha, k) == pytest.approx(over, abs=1e-6)
            assert _exact(profile, alpha, k) == pytest.approx(over, abs=1e-6)
            assert all(_exact(profile, alpha * (1 - 1e-4), j) < over for j in range(1, 13))
        else:
            assert bound.prices.iid(0.0, k) >= over
    assert bound.required_acceptance(bound.speedup * 1.001) is None
    assert bound.required_acceptance(overs[-1]) == alphas[-1]
    with pytest.raises(PolyplanError, match="over"):
        bound.required_acceptance(0)
    with pytest.raises(PolyplanError, match="made without its prices"):
        PairBound("t", "d", 2.0, 3, 0.1).required_acceptance(1.5)


def _random_family(rng: np.random.Generator) -> Profile:
    """A target and three model drafters of random cost and acceptance: a costly sibling ("a", 0.45-0.98
    of a target step) that is nearly always right, and two of any cost."""
    steps = {"t": 0.02}
    models = [_model("t", _random_curve(rng, 0.02))]
    for name in ("a", "b", "c"):
        steps[name] = 0.02 * (rng.uniform(0.45, 0.98) if name == "a" else float(np.exp(rng.uniform(np.log(0.01), np.log(0.95)))))
        models.append(_model(name, {1: steps[name], 2: steps[name] * rng.uniform(0.9, 2.5), 8: steps[name] * rng.uniform(1.5, 4)}))
    profile = _profile(tuple(models), None if rng.random() < 0.4 else (float(rng.uniform(0, 0.002)), float(rng.uniform(0, 0.002))),
                       None if rng.random() < 0.5 else {name: (float(rng.uniform(0, 0.002)),) for name in steps})
    for verifier in steps:
        for drafter in steps:
            if steps[drafter] < steps[verifier]:
                alpha = rng.uniform(0.95, 0.999) if (verifier, drafter) == ("t", "a") else rng.uniform(0.3, 0.995)
                profile = profile.with_stats(verifier, drafter, "greedy", SamplingStats(alpha=float(alpha)))
    return profile


def test_a_drafter_that_cannot_pay_is_never_chosen_directly_under_the_target():
    """On random families the search never ranks a two-model chain above its bound, so a drafter
    whose bound cannot pay is never the chosen one under the target. Not claimed, and shown false
    here: a drafter whose bound cannot pay may still pay as an intermediate (verifying a cheaper
    drafter's blocks, its passes cost less per token than its steps). Negative control: a 'bound'
    that charges the drafter twice excludes a drafter the search chose."""
    rng = np.random.default_rng(11)
    excluded = too_tight = intermediate = 0
    for _ in range(40):
        profile = _random_family(rng)
        settings = SearchSettings(max_levels=3, k_max=8, overhead=profile_overhead(profile, "greedy"))
        result = rank_chains(profile, settings)
        bounds = {b.drafter: b for b in pair_bounds(profile, [("t", name) for name in "abc"], k_max=8, settings=settings)}
        for plan in result.ranked:
            if len(plan.chain) == 2:
                assert plan.exact_speedup <= bounds[plan.chain[1]].speedup * (1 + 1e-12)
        excluded += sum(not b.can_pay for b in bounds.values())
        intermediate += len(result.best.chain) == 3 and not bounds[result.best.chain[1]].can_pay
        if len(result.best.chain) == 2:
            chosen = bounds[result.best.chain[1]]
            assert chosen.can_pay
            doubled = dataclasses.replace(chosen.prices, drafting=tuple(2 * d for d in chosen.prices.drafting))
            too_tight += max(doubled.perfect(k) for k in range(9)) <= 1.0 < result.best.exact_speedup
    assert excluded >= 10 and too_tight >= 1 and intermediate >= 1


def test_bad_input_is_one_clear_error():
    profile = _profile((_model("t", {1: 0.01}), _model("d", {1: 0.001})))
    with pytest.raises(PolyplanError, match="no model named 'x'"):
        pair_bound(profile, "t", "x")
    with pytest.raises(PolyplanError, match="cannot draft for itself"):
        pair_bound(profile, "t", "t")
    with pytest.raises(PolyplanError, match="k_max"):
        pair_bound(profile, "t", "d", k_max=0)
    with pytest.raises(PolyplanError, match="at most 16"):
        pair_bound(profile, "t", "d").prices.iid(0.5, 17)


def test_the_theory_report_states_each_pairs_bound_beside_theorem_32():
    """On the paper's Table 1: one bound per pair under the target (with the acceptance the leader
    asks for) and one per inner pair; none below the two-model chain the search ranks, and the
    acceptance reaches the leader's speedup exactly."""
    from typer.testing import CliRunner

    from polyplan.cli.app import app
    from polyplan.formats.profile import read_profile
    from polyplan.planner.theory_report import theory_report

    example = read_profile(Path(__file__).resolve().parents[1] / "polyplan" / "data" / "paper_table1_profile.json")
    report = theory_report(example)
    assert [(item.bound.verifier, item.bound.drafter) for item in report.bounds] == [
        ("vicuna-7b", "vicuna-7b-w4"), ("vicuna-7b", "eagle"), ("vicuna-7b-w4", "eagle")]
    leader = report.search.best
    ranked = {plan.chain: plan.exact_speedup for plan in report.search.ranked}
    for item in report.bounds[:2]:
        assert item.leader == leader and item.bound.speedup >= ranked[("vicuna-7b", item.bound.drafter)]
        assert item.bound.prices.iid(item.acceptance, item.block_size) == pytest.approx(leader.exact_speedup, abs=1e-6)
    assert report.bounds[2].leader is None and report.bounds[2].acceptance is None
    text = CliRunner().invoke(app, ["theory", "report"]).stdout
    section = text.split("Bounds before measurement")[1].split("Errata")[0]
    assert "vicuna-7b <- eagle: at best x3.95 at K = 8 with perfect acceptance (cost 0.16 of a vicuna-7b step); " \
           f"the leader ({leader.exact_speedup:.3f}x) needs alpha >= {report.bounds[1].acceptance:.3f} at K = 6" in section
    assert "vicuna-7b-w4 <- eagle" in section and "an inner pair" in section


def test_the_profilers_bounded_pairs_are_never_in_the_chosen_chain():
    """`bounded_pairs` (what the profiler measures only briefly) never holds a pair of the chain
    the full search chooses, over random families up to three levels; negative control: the
    pair bound alone (`can_pay` under the target) would have excluded a chosen intermediate."""
    from polyplan.planner.exact.pair_bound import bounded_pairs

    rng = np.random.default_rng(5)
    bounded_seen = pair_bound_alone_wrong = 0
    for _ in range(40):
        profile = _random_family(rng)
        settings = SearchSettings(max_levels=3, k_max=8, overhead=profile_overhead(profile, "greedy"))
        best = rank_chains(profile, settings).best
        pairs = [(p.verifier, p.drafter) for p in profile.pairs]
        moot = bounded_pairs(profile, pairs, "t", k_max=8, settings=settings)
        chosen = set(zip(best.chain, best.chain[1:]))
        assert not chosen & set(moot), (best.chain, moot)
        bounded_seen += len(moot)
        if len(best.chain) == 3:
            pair_bound_alone_wrong += not pair_bound(profile, "t", best.chain[1], k_max=8, settings=settings).can_pay
    assert bounded_seen >= 10 and pair_bound_alone_wrong >= 1
