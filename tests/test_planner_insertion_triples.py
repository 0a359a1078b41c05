"""Theorem 3.2 on every insertion that matters (planner.paper.insertion_triples, recommend's
`insertion_triples`): a middle model between the target and any cheaper member, and each
intermediate level of the top chains, beside the exact model with and without it."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import DecodedStats, LatencyPoint, ModelProfile, Profile, SamplingStats
from polyplan.planner.paper.capped_geometric import paper_eq3_mean
from polyplan.planner.paper.insertion import analyze_insertion
from polyplan.planner.paper.insertion_triples import insertion_inputs, profile_triples, triple_chains, triple_insertion
from polyplan.planner.search import SearchSettings, TOP_CHAINS, rank_chains

TIMES = {"A": 0.1, "B": 0.02, "C": 0.004, "D": 0.0005}
ALPHAS = {("A", "B"): 0.95, ("B", "C"): 0.9, ("C", "D"): 0.85, ("A", "C"): 0.5, ("A", "D"): 0.3, ("B", "D"): 0.5}


def _cascade() -> Profile:
    """Four models, each agreeing well only with its neighbour (T(k) grows 10% a token)."""
    models = tuple(ModelProfile(name, f"fp-{name}", tuple(LatencyPoint(64, k, t * (1 + 0.1 * (k - 1))) for k in (1, 2, 4, 8)))
                   for name, t in TIMES.items())
    profile = Profile(target="A", device="synthetic", models=models, pairs=())
    for verifier, drafter in itertools.permutations(TIMES, 2):
        if TIMES[drafter] < TIMES[verifier]:
            profile = profile.with_stats(verifier, drafter, "greedy", SamplingStats(alpha=ALPHAS[(verifier, drafter)]))
    return profile


def test_the_inputs_of_a_triple_are_the_papers():
    profile = _cascade()
    stats = profile.stats("A", "B", "greedy")
    profile = profile.with_stats("A", "B", "greedy", replace(stats, decoded=(*stats.decoded, DecodedStats(k=5, mu=4.5))))  # measured: read as is
    inputs = insertion_inputs(profile, ("A", "B", "D"), (5, 3), (2,), "B")
    assert (inputs.upper, inputs.middle, inputs.lower) == ("A", "B", "D")
    assert (inputs.t1, inputs.t2, inputs.t2_new) == pytest.approx((0.1, 0.0005, 0.02))
    assert inputs.l1 == pytest.approx(paper_eq3_mean(0.3, 2))  # A over D at the K of the chain without B
    assert inputs.l1_new == 4.5 and inputs.l2_new == pytest.approx(paper_eq3_mean(0.5, 3))
    assert inputs.alpha_scale == 3.0  # the K B verifies
    assert inputs.analyze() == analyze_insertion(t1=0.1, t2=0.0005, t2_new=0.02, l1=inputs.l1, l1_new=4.5,
                                                 l2_new=inputs.l2_new, alpha_scale=3.0)
    deep = insertion_inputs(profile, ("A", "B", "C", "D"), (8, 4, 2), (8, 3), "C")  # between B and D
    assert (deep.upper, deep.lower, deep.t1, deep.l1) == ("B", "D", pytest.approx(0.02), pytest.approx(paper_eq3_mean(0.5, 3)))
    with pytest.raises(PolyplanError, match="'D' is not an intermediate model of A > B > D"):
        insertion_inputs(profile, ("A", "B", "D"), (5, 3), (2,), "D")
    with pytest.raises(PolyplanError, match="block sizes: need 2 with 'B' and 1 without"):
        insertion_inputs(profile, ("A", "B", "D"), (5,), (2,), "B")
    with pytest.raises(PolyplanError, match="A > C is not A > B > D without 'B'"):
        triple_insertion(profile, "B", (("A", "B", "D"), (5, 3), 2.0), (("A", "C"), (2,), 1.0))


def test_recommend_covers_a_middle_between_the_target_and_every_lower_member():
    result = rank_chains(_cascade())
    triples = {(t.with_chain, t.middle): t for t in result.insertion_triples}
    # every three-model chain: B under the target above C and above D, C above D
    for chain in (("A", "B", "C"), ("A", "B", "D"), ("A", "C", "D")):
        assert (chain, chain[1]) in triples
    # and each intermediate level of the top chains, deeper ones included (C between B and D in A > B > C > D)
    for plan in result.ranked[:TOP_CHAINS]:
        assert all((plan.chain, middle) in triples for middle in plan.chain[1:-1])
    assert (("A", "B", "C", "D"), "C") in triples and len(triples) == len(result.insertion_triples)  # no repeats
    plans = {plan.chain: plan for plan in result.ranked}
    for (chain, middle), triple in triples.items():
        without = tuple(name for name in chain if name != middle)
        assert triple.without_chain == without and triple.without_speedup == plans[without].exact_speedup
        assert triple.with_speedup == plans[chain].exact_speedup and triple.with_blocks == plans[chain].block_sizes
        # the same verdict recommend gives the chain's own insertions
        assert (middle, triple.analysis.verdict) in plans[chain].insertion_verdicts
    cheap = triples[(("A", "C", "D"), "C")]
    assert cheap.line().startswith("C between A and D: Thm 3.2 ")
    assert f"exact {'helps' if cheap.exact_delta > 0 else 'no gain'}: {cheap.with_speedup:.3f}x (A > C > D, K = " in cheap.line()
    # negative control: with chains of two models at most there is nothing to insert
    assert rank_chains(_cascade(), SearchSettings(max_levels=2)).insertion_triples == ()


def test_the_inputs_of_any_triple_are_public_api():
    """`polyplan.planner.insertion_inputs`: any (upper, middle, lower) and block sizes, the upper
    model need not be the target; a three-model chain names its own middle."""
    from polyplan.planner import InsertionInputs
    from polyplan.planner import insertion_inputs as public

    profile = _cascade()
    inputs = public(profile, ("B", "C", "D"), (4, 2), (3,))  # B is not the target
    assert isinstance(inputs, InsertionInputs) and inputs == insertion_inputs(profile, ("B", "C", "D"), (4, 2), (3,), "C")
    assert (inputs.upper, inputs.middle, inputs.lower, inputs.alpha_scale) == ("B", "C", "D", 2.0)
    assert (inputs.t1, inputs.t2, inputs.t2_new) == pytest.approx((0.02, 0.0005, 0.004))
    assert (inputs.l1, inputs.l1_new, inputs.l2_new) == pytest.approx(
        (paper_eq3_mean(0.5, 3), paper_eq3_mean(0.9, 4), paper_eq3_mean(0.85, 2)))
    # the same triple as a middle level of a longer chain reads the same numbers
    assert insertion_inputs(profile, ("A", "B", "C", "D"), (8, 4, 2), (8, 3), "C") == inputs
    with pytest.raises(PolyplanError, match="middle: name the inserted model of A > B > C > D"):
        public(profile, ("A", "B", "C", "D"), (8, 4, 2), (8, 3))


def test_the_triples_a_profile_can_hold_and_their_chains():
    profile = _cascade()
    assert profile_triples(profile) == (("A", "B", "C"), ("A", "B", "D"), ("A", "C", "D"), ("B", "C", "D"))
    profile = replace(profile, pairs=tuple(pair for pair in profile.pairs if pair is not profile.pair("B", "D")))  # B over D unprofiled
    assert profile_triples(profile) == (("A", "B", "C"), ("A", "C", "D"))
    assert profile_triples(profile, "t1.0") == ()  # nothing profiled under that sampling
    slow = _cascade().with_model(ModelProfile("Z", "fp-Z", (LatencyPoint(64, 1, 0.5),)))  # slower than the target: in no chain
    slow = slow.with_stats("Z", "A", "greedy", SamplingStats(alpha=0.99)).with_stats("Z", "B", "greedy", SamplingStats(alpha=0.9))
    assert all("Z" not in triple for triple in profile_triples(slow)) and len(profile_triples(slow)) == 4
    assert triple_chains("A", ("A", "B", "D")) == (("A", "B", "D"), ("A", "D"))
    assert triple_chains("A", ("B", "C", "D")) == (("A", "B", "C", "D"), ("A", "B", "D"))


def test_a_rule_drafter_is_never_the_lower_model_of_a_triple():
    """ngram-simple is planned only directly under the target, so a triple placing it under a
    middle model has no chain to compare (the measured Qwen pair profile holds one). Control: the
    model drafters of the same profile still form triples."""
    from pathlib import Path

    from polyplan.formats.profile import read_profile

    profile = read_profile(Path(__file__).resolve().parents[1] / "docs" / "results" / "qwen-code-amd" / "profile.json")
    triples = profile_triples(profile)
    assert triples and all("ngram-simple" not in triple for triple in triples)
    assert ("qwen-1.5b", "qwen-0.5b", "ngram") in triples
