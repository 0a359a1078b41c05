"""llama-server under load (`planner.llama_cpp.under_load`): B requests in flight.

Checked: at one request in flight every row, point and both intervals, is
`rank_server_configs`'s on a realistic export (replayed n-gram types, ngram-simple at its K, a
draft model at its K and behind the plan's confidence stop, llama-server's calibrated loop); a
two-slot case computed by hand (one slot's n-gram found nothing); the target alone gains
aggregate throughput at B on a sub-linear T(k) and gains nothing on a linear one (control);
speculation that pays at one request pays less at more on a CPU-like T(k) ≈ k·T(1); a prompt
delays the other slot's decode; the physical limit at one request is `physical_limit`'s and
falls with B; bad client counts; the ranges of one choice and the count from which it is off.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import DraftPolicy
from polyplan.formats.profile import AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats, TargetStream
from polyplan.planner import engine_export
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.planner.exact.ngram_replay import ReplayRound
from polyplan.planner.exact.physical_limit import physical_limit
from polyplan.planner.llama_cpp import under_load
from polyplan.planner.llama_cpp.export import rank_server_configs
from polyplan.planner.llama_cpp.ranking import OFF, LlamaCppPrices, choose_config
from polyplan.planner.llama_cpp.server_loop import NGRAM, NO_SERVER_LOOP, TARGET_ALONE, ServerLoop
from polyplan.planner.llama_cpp.under_load import (UNIFIED_FLAG, LoadedConfig, LoadRanking, load_limit, load_ranges, off_from,
                                                   parse_clients, rank_under_load, simulate_load)
from polyplan.planner.plan_builder import plan_of
from polyplan.planner.search import SearchSettings, rank_chains


def _cpu_curve(k: float) -> float:
    """A CPU-like T(k): a 40 ms step, each further row 60 % of one."""
    return 0.04 * (1 + 0.6 * (k - 1))


def _streams() -> tuple[TargetStream, ...]:
    rng = np.random.default_rng(3)
    streams = []
    for i in range(6):
        motif = tuple(int(t) for t in rng.integers(10, 40, size=4 + i % 3))
        noise = tuple(int(t) for t in rng.integers(40, 90, size=6))
        body = (motif * 6)[: 18 + 3 * i] + noise + motif * 3
        streams.append(TargetStream(5 + i, tuple(range(100 + i, 105 + 2 * i)) + body))
    return tuple(streams)


def _agreement(streams) -> tuple[str, ...]:
    rng = np.random.default_rng(4)
    return tuple("".join("1" if rng.random() < 0.7 else "0" for _ in range(len(s.ids) - s.prompt_tokens)) for s in streams)


def _profile() -> Profile:
    ks = tuple(range(1, 17))
    target = ModelProfile("target", "fp-target", tuple(LatencyPoint(64, k, _cpu_curve(k), 0.002, 5, None) for k in ks))
    draft = ModelProfile("draft", "fp-draft", tuple(LatencyPoint(64, k, 0.006 * (1 + 0.5 * (k - 1)), 0.0004) for k in ks))
    ngram = ModelProfile("ngram", "fp-ngram", (LatencyPoint(64, 1, 0.0001),), ngram_simple=2)
    profile = Profile(target="target", device="synthetic", models=(target, draft, ngram), pairs=())
    profile = profile.with_stats("target", "draft", "greedy", SamplingStats(alpha=0.7, engine_alpha=0.7))
    profile = profile.with_stats("target", "ngram", "greedy", SamplingStats(alpha=0.3, engine_alpha=0.3))
    streams = _streams()
    agreement = _agreement(streams)
    confidence = tuple("".join("e6" if bit == "1" else "40" for bit in text) for text in agreement)
    pair = PairAgreement("target", "draft", agreement, confidence)
    return dataclasses.replace(profile, acceptance_runs={"greedy": AgreementRuns((pair,), streams=streams)})


LOOP = ServerLoop(per_request_s=0.004, per_round_s=0.002, per_row_s=0.0005, per_ngram_round_s=0.0003,
                  per_draft_round_s=0.001, per_draft_pass_s=0.006, per_draft_prompt_token_s=0.0002, draft_reeval=0.9)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """The options and request `export_plan` hands `rank_server_configs` on a realistic plan,
    and what that returned."""
    from polyplan.formats.candidates import parse_candidates

    root = tmp_path_factory.mktemp("load")
    for name in ("target.gguf", "draft.gguf"):
        (root / name).write_bytes(b"GGUF")
    candidates = parse_candidates({"candidates": [
        {"name": "target", "source": "target.gguf", "target": True, "engine": "llama.cpp"},
        {"name": "draft", "source": "draft.gguf", "engine": "llama.cpp"},
        {"name": "ngram", "derive": {"kind": "ngram-simple", "size_n": 2}},
    ]}, base_dir=root)
    profile = _profile()
    plan = plan_of(rank_chains(profile, SearchSettings(max_levels=2, k_max=4, draft_policies=False)))
    best = dataclasses.replace(plan.best, chain=("target", "draft"), block_sizes=(3,), draft_policy=DraftPolicy(p_min=0.5))
    plan = dataclasses.replace(plan, alternatives=(best, *plan.alternatives[1:]))
    reeval = ModelProfile("draft", "fp-draft-last", tuple(LatencyPoint(64, k, 0.005 + 0.001 * k) for k in range(1, 17)))
    loop = dataclasses.replace(LOOP, slot_rounds=((2, 0.0012), (4, 0.0008)))  # calibrated at 2 and 4 slots: one request ignores them
    prices = LlamaCppPrices(profile.model("target"), loop=loop, draft_ratio=1.2, reevaluations={"draft": reeval})
    seen = {}

    def spy(options, request):
        seen["args"] = (options, request)
        seen["result"] = rank_server_configs(options, request)
        return seen["result"]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_export, "rank_server_configs", spy)
        engine_export.export_plan(plan, profile, candidates, "llama.cpp", k_max=4, prices=prices,
                                  replay_also=[("--spec-type", "draft-simple", "-md", str(root / "draft.gguf"),
                                                "--spec-draft-n-max", "2")])
    return seen


def test_at_one_request_every_row_is_the_exports_own(captured):
    options, request = captured["args"]
    today, _ = captured["result"]
    labels = {config.label for config in today}
    assert any(label.startswith("ngram-mod") for label in labels)
    assert any(label.startswith("ngram-simple size-n=2") for label in labels)
    assert any(label.startswith("draft-simple draft K=") and "p-min" not in label for label in labels)
    assert any("p-min=0.5" in label for label in labels)
    assert any("n-max=2" in label for label in labels)
    (load,) = rank_under_load(options, request, (1,))
    assert [config.label for config in load.configs] == [config.label for config in today]
    for mine, theirs in zip(load.configs, today):
        assert mine.speedup == pytest.approx(theirs.speedup, rel=1e-9, abs=1e-12), mine.label
        for got, want in ((mine.interval, theirs.interval), (mine.workload_interval, theirs.workload_interval)):
            assert (got is None) == (want is None), mine.label
            if want is not None:
                assert got == pytest.approx(want, rel=1e-9), mine.label
    replayed = [config for config in today if config.interval is not None]
    assert len(replayed) >= 6  # every row above has its interval
    at_four = rank_under_load(options, request, (4,))[0]
    assert at_four.target_tokens_per_s > load.target_tokens_per_s  # a sub-linear T(k): batching pays the target alone
    for config in today:  # T(k) grows 0.6 T(1) a row: every drafting row pays less with four in flight
        if config.label != OFF:
            assert at_four.config(config.label).speedup < config.speedup, config.label
    assert at_four.limit < load.limit


def _linear(a: float, b: float):
    return lambda k: a + b * k


HAND_LOOP = ServerLoop(per_request_s=0.0005, per_round_s=0.001, per_row_s=0.0001, per_ngram_round_s=0.0002)


def test_two_slots_by_hand_one_whose_ngram_found_nothing():
    """T(k) = 0.01 + 0.002 k. Request 0 (3 prompt rows) drafts 2 twice (2 then 1 accepted: 5
    tokens); request 1 (2 prompt rows) finds no draft three times (3 tokens). Iteration 1 carries
    both prompts (in no decode interval); 2 and 3 carry 3 + 1 rows, which llama.cpp decodes in two
    passes of 2 (each slot's first row, then request 0's other two: `ubatches`); 4 request 1's
    last row alone."""
    step = _linear(0.01, 0.002)
    requests = [(ReplayRound(2, 2), ReplayRound(2, 1)), (ReplayRound(0, 0),) * 3]
    run = simulate_load(requests, (0, 1), (3, 2), 2, step, HAND_LOOP)
    ngram_round = 0.001 + 0.0002  # per round + per n-gram round, plus 0.0001 a drafted row
    second = 2 * step(2) + (ngram_round + 0.0002) + ngram_round
    third = 2 * step(2) + (ngram_round + 0.0002 + 0.0005) + ngram_round
    fourth = step(1) + ngram_round + 0.0005
    assert run.decode_s == pytest.approx((second + third, second + third + fourth), rel=1e-12)
    assert run.union_s == pytest.approx(second + third + fourth, rel=1e-12)
    assert run.tokens == (5, 3)
    assert run.aggregate == pytest.approx(8 / run.union_s, rel=1e-12)
    assert run.per_request == pytest.approx((5 / (second + third) + 3 / (second + third + fourth)) / 2, rel=1e-12)
    assert run.counts[(0, 2)] == pytest.approx(2 * (1 / 2 + 2 / 2)) and run.counts[(1, 2)] == pytest.approx(2 * 1 / 2)
    attributed = sum(value * step(width) for (_, width), value in run.counts.items()) + sum(run.extra.values())
    assert attributed == pytest.approx(run.union_s, rel=1e-12)
    # the target alone: 2 slots of one row for three iterations, then request 0's last two alone
    alone = simulate_load(under_load.target_rounds(requests), (0, 1), (3, 2), 2, step, HAND_LOOP, TARGET_ALONE)
    both, single = step(2) + 2 * 0.001, step(1) + 0.001
    assert alone.union_s == pytest.approx(3 * both + 0.0005 + 2 * single + 0.0005, rel=1e-12)
    assert alone.union_s / run.union_s == pytest.approx(0.075 / 0.0754, rel=1e-9)


def test_the_overlap_is_the_requests_decode_seconds_over_their_union():
    """The hand case: request 0 decodes in iterations 2-3, request 1 in 2-4, so on average
    (2 + 3 iterations' seconds) / (3 iterations' seconds) requests decode at once; one client
    decodes one request at a time (overlap 1 exactly); the target alone at two slots overlaps
    more than the n-gram run, whose requests end apart."""
    step = _linear(0.01, 0.002)
    requests = [(ReplayRound(2, 2), ReplayRound(2, 1)), (ReplayRound(0, 0),) * 3]
    run = simulate_load(requests, (0, 1), (3, 2), 2, step, HAND_LOOP)
    assert run.overlap == pytest.approx(sum(run.decode_s) / run.union_s, rel=1e-12)
    assert 1.0 < run.overlap < 2.0
    assert simulate_load(requests, (0, 1), (3, 2), 1, step, HAND_LOOP).overlap == pytest.approx(1.0, rel=1e-12)
    even = [(ReplayRound(0, 0),) * 4] * 2  # two requests of equal length, prompts of one row: always together
    assert simulate_load(even, (0, 1), (1, 1), 2, step, HAND_LOOP, TARGET_ALONE).overlap == pytest.approx(2.0, rel=1e-12)


def test_every_ranked_row_says_its_overlap_where_it_was_simulated(captured):
    """Replayed rows and the target alone carry the simulation's overlap (1 at one request, more
    at four); a draft model's row says None at one request (the exact model's price, not a
    simulation) and its simulated overlap at four."""
    options, request = captured["args"]
    one, four = rank_under_load(options, request, (1, 4))
    for ranking in (one, four):
        replayed = [config for config in ranking.configs if config.note.startswith("replayed")]
        assert replayed and all(config.overlap is not None for config in replayed)
        assert ranking.config(OFF).overlap is not None
    drafts = [label for label in (config.label for config in one.configs) if label.startswith("draft-simple")]
    assert drafts and all(one.config(label).overlap is None for label in drafts)
    assert all(1.0 < four.config(label).overlap <= 4.0 for label in drafts)
    assert all(config.overlap == pytest.approx(1.0, rel=1e-9) for config in one.configs if config.overlap is not None)
    assert 1.0 < four.config(OFF).overlap <= 4.0


def test_a_slots_round_cost_calibrated_at_two_slots_is_charged_where_two_decode_together():
    """The hand case with a slot's round at 0.3 ms when two slots decode together: the second and
    third iterations charge it to each slot, the fourth (request 1 alone) the one-slot 1 ms."""
    step = _linear(0.01, 0.002)
    loop = dataclasses.replace(HAND_LOOP, slot_rounds=((2, 0.0003),))
    requests = [(ReplayRound(2, 2), ReplayRound(2, 1)), (ReplayRound(0, 0),) * 3]
    run = simulate_load(requests, (0, 1), (3, 2), 2, step, loop)
    together, alone_round = 0.0003 + 0.0002, 0.001 + 0.0002
    second = 2 * step(2) + (together + 0.0002) + together
    third = 2 * step(2) + (together + 0.0002 + 0.0005) + together
    fourth = step(1) + alone_round + 0.0005
    assert run.union_s == pytest.approx(second + third + fourth, rel=1e-12)
    target = simulate_load(under_load.target_rounds(requests), (0, 1), (3, 2), 2, step, loop, TARGET_ALONE)
    assert target.union_s == pytest.approx(3 * (step(2) + 2 * 0.0003) + 0.0005 + 2 * (step(1) + 0.001) + 0.0005, rel=1e-12)


def test_requests_that_end_at_eos_are_not_stretched_to_the_races_length(captured):
    """A race that decodes past end of sequence stretches every replayed request to its length at
    2+ clients; one that stops at it (`ReplayWorkload.to_eos`) replays the streams as they end."""
    options, request = captured["args"]
    fixed = dataclasses.replace(request, workload=dataclasses.replace(request.workload, new_tokens=200, repeats=1))
    to_eos = dataclasses.replace(fixed, workload=dataclasses.replace(fixed.workload, to_eos=True))
    ranker = under_load._Ranker(options, fixed)
    session = ranker.replayed[0].sessions[0]
    longest = max(sum(item.accepted + 1 for item in rounds) for rounds in session.requests)
    assert longest < 199
    assert set(ranker.run(session, 2).tokens) == {199}
    assert max(under_load._Ranker(options, to_eos).run(session, 2).tokens) == longest


def _rounds(requests: int, tokens: int, drafted: int, accepted: int):
    return [(ReplayRound(drafted, accepted),) * (tokens // (accepted + 1)) for _ in range(requests)]


def test_the_target_alone_gains_from_batching_on_a_sublinear_t_and_not_on_a_linear_one():
    requests = [(ReplayRound(0, 0),) * (40 + 7 * i) for i in range(8)]  # requests end at different times
    prompts, streams = (20,) * 8, tuple(range(8))
    for step, gains in ((_linear(0.03, 0.002), True), (_linear(0.0, 0.01), False)):
        rates = [simulate_load(requests, streams, prompts, b, step, HAND_LOOP, TARGET_ALONE).aggregate for b in (1, 2, 4)]
        if gains:
            assert rates[0] < rates[1] < rates[2]
        else:  # linear: a batch costs its rows, and the others' prompts now stall the decoding
            assert max(rates[1:]) < rates[0]


def test_on_a_cpu_like_t_speculation_that_pays_at_one_request_pays_less_at_more():
    step = _linear(0.03, 0.02)  # T(k) grows 0.4 T(1) a row: T(4) = 2.2 T(1), T(32) = 13.4 T(1)
    rounds = _rounds(8, 60, 3, 2)  # every round drafts 3 and keeps 2
    streams, prompts = tuple(range(8)), (10,) * 8
    speedups = []
    for b in (1, 2, 4, 8):
        run = simulate_load(rounds, streams, prompts, b, step, NO_SERVER_LOOP)
        alone = simulate_load(under_load.target_rounds(rounds), streams, prompts, b, step, NO_SERVER_LOOP, TARGET_ALONE)
        speedups.append(alone.union_s / run.union_s)
    assert speedups[0] > 1.2 and speedups[-1] < 1.0
    assert all(a > b for a, b in zip(speedups, speedups[1:]))


def test_a_prompt_delays_the_other_slots_decode():
    """Client 1 decodes one long request; client 0's second request's prompt rides in one of its
    iterations and makes it longer by the prompt's rows, T(1 + 1 + P) − T(1 + 1)."""
    step = _linear(0.01, 0.001)
    requests = [(ReplayRound(0, 0),) * 2, (ReplayRound(0, 0),) * 10, (ReplayRound(0, 0),) * 2]
    decode = {}
    for prompt in (1, 200):
        run = simulate_load(requests, (0, 1, 2), (1, 1, prompt), 2, step, NO_SERVER_LOOP, TARGET_ALONE)
        decode[prompt] = run.decode_s[1]
    assert decode[200] - decode[1] == pytest.approx(step(1 + 200) - step(1 + 1), rel=1e-9)


def test_prompts_longer_than_the_batch_go_on_in_the_next_iterations_and_stall_the_decoding_slot_by_hand():
    """T(k) = k seconds, two slots, two 6-token prompts, each request two plain steps. With room
    for 8 rows an iteration: the first iteration carries slot 0's prompt and 2 rows of slot 1's;
    the second slot 0's first step beside slot 1's 4 rows left (5 s, in slot 0's decode
    interval); then both step (2 s) and slot 1 alone (1 s). Slot 0 decodes in 5 + 2 s, slot 1 in
    2 + 1 s, and the union is 8 s; with room for both prompts each decodes in 2 + 2 s."""
    step = LatencyCurve((1, 64), (1.0, 64.0))
    requests = [(ReplayRound(0, 0),) * 2, (ReplayRound(0, 0),) * 2]
    chunked = simulate_load(requests, (0, 1), (6, 6), 2, step, NO_SERVER_LOOP, TARGET_ALONE, n_batch=8)
    assert chunked.decode_s == pytest.approx((7.0, 3.0)) and chunked.union_s == pytest.approx(8.0)
    assert chunked.tokens == (2, 2)
    whole = simulate_load(requests, (0, 1), (6, 6), 2, step, NO_SERVER_LOOP, TARGET_ALONE, n_batch=12)
    assert whole.decode_s == pytest.approx((4.0, 4.0)) and whole.union_s == pytest.approx(4.0)
    one = simulate_load(requests[:1], (0,), (6,), 1, step, NO_SERVER_LOOP, TARGET_ALONE, n_batch=4)
    assert one.decode_s == pytest.approx((2.0,)) and one.union_s == pytest.approx(2.0)  # one slot: its prompt is in no decode
    with pytest.raises(PolyplanError, match="batch size"):
        simulate_load(requests, (0, 1), (6, 6), 2, step, NO_SERVER_LOOP, TARGET_ALONE, n_batch=0)


def test_the_physical_limit_at_one_request_is_physical_limits_and_falls_with_b():
    curve = LatencyCurve(tuple(range(1, 65)), tuple(_cpu_curve(k) for k in range(1, 65)))
    speedup, k = load_limit(curve, 1, 8)
    reference = physical_limit(curve, k_max=8)
    assert (speedup, k) == (pytest.approx(reference.speedup, rel=1e-12), reference.block_size)
    limits = [load_limit(curve, b, 8)[0] for b in (1, 2, 4, 8)]
    assert all(a > b for a, b in zip(limits, limits[1:]))
    assert load_limit(LatencyCurve((1, 64), (0.01, 0.64)), 4, 8) == (1.0, 0)  # T(k) = k T(1): nothing pays


@pytest.mark.parametrize("text", ["0", "-1", "two", "", "1,,2", "1.5", "2,0"])
def test_bad_client_counts_are_one_line_naming_the_option(text):
    with pytest.raises(PolyplanError, match="^--clients: ") as error:
        parse_clients(text, "--clients")
    assert "\n" not in str(error.value)


def test_client_counts_are_sorted_and_unique():
    assert parse_clients(" 4,1,2,2 ", "--concurrency") == (1, 2, 4)


def test_missing_widths_name_what_is_measured_what_is_needed_and_the_command(captured):
    _, request = captured["args"]
    under_load.check_widths(request, (1, 2), 4, "polyplan profile --latency-ks 1-64")
    with pytest.raises(PolyplanError) as error:
        under_load.check_widths(request, (1, 4), 4, "polyplan profile --latency-ks 1-64")
    text = str(error.value)
    assert "up to 16" in text and "up to 20" in text and "polyplan profile --latency-ks 1-64" in text


def _ranking(clients: int, chosen: str, rows: dict[str, tuple[float, tuple[float, float] | None]]) -> LoadRanking:
    configs = tuple(LoadedConfig(label, (), clients, speedup, bounds, bounds, 10.0 * speedup, 10.0 * speedup / clients)
                    for label, (speedup, bounds) in rows.items())
    return LoadRanking(clients, configs, next(c for c in configs if c.label == chosen), 1.5, 10.0)


def test_ranges_merge_ties_and_off_is_from_the_first_count_off_to_the_end():
    off = (1.0, None)
    rankings = [
        _ranking(1, "a", {"a": (1.5, (1.3, 1.7)), "b": (1.2, (1.1, 1.3)), OFF: off}),
        _ranking(2, "b", {"a": (1.25, (1.1, 1.4)), "b": (1.3, (1.2, 1.4)), OFF: off}),  # tied with a: one range
        _ranking(4, OFF, {"a": (0.9, (0.8, 1.0)), "b": (0.95, (0.9, 1.0)), OFF: off}),
        _ranking(8, OFF, {"a": (0.8, (0.7, 0.9)), OFF: off}),
    ]
    ranges = load_ranges(rankings)
    assert [(r.first, r.last, r.config.label) for r in ranges] == [(1, 2, "a"), (4, 8, OFF)]
    assert off_from(rankings) == 4
    # control: b beyond a's interval at 2 splits the range; a count drafting again at the end clears off
    split = [rankings[0], _ranking(2, "b", {"a": (1.05, (1.01, 1.1)), "b": (1.3, (1.2, 1.4)), OFF: off}), *rankings[2:]]
    assert [(r.first, r.last, r.config.label) for r in load_ranges(split)] == [(1, 1, "a"), (2, 2, "b"), (4, 8, OFF)]
    assert off_from([*rankings[:3], _ranking(8, "a", {"a": (1.2, (1.1, 1.3)), OFF: off})]) is None
    assert off_from(rankings[:2]) is None


def test_one_request_joins_the_range_of_its_choice_with_kv_unified():
    """At 1 request "a"; at 2 and 4 "a --kv-unified" (one slot has one KV stream anyway): one
    range 1-4 served with the flag. Control: at 1 request "b", whose unified form is not chosen
    beyond it, keeps a range of its own; a range of 2 requests or more is never taken over so."""
    off = (1.0, None)
    unified = "a " + UNIFIED_FLAG

    def with_unified(ranking, speedup, bounds):
        row = LoadedConfig(unified, (UNIFIED_FLAG,), ranking.clients, speedup, bounds, bounds, 1.0, 1.0)
        return dataclasses.replace(ranking, unified=row, chosen=row)

    two = with_unified(_ranking(2, "a", {"a": (1.1, (0.9, 1.05)), OFF: off}), 1.4, (1.2, 1.6))
    four = with_unified(_ranking(4, OFF, {"a": (0.9, (0.8, 1.0)), OFF: off}), 1.3, (1.1, 1.5))
    rankings = [_ranking(1, "a", {"a": (1.8, (1.5, 2.1)), OFF: off}), two, four]
    assert [(r.first, r.last, r.config.label) for r in load_ranges(rankings)] == [(1, 4, unified)]
    other = [_ranking(1, "b", {"a": (1.2, (1.1, 1.3)), "b": (1.8, (1.5, 2.1)), OFF: off}), two, four]
    assert [(r.first, r.last, r.config.label) for r in load_ranges(other)] == [(1, 1, "b"), (2, 4, unified)]
    split_at_two = _ranking(2, "a", {"a": (1.5, (1.3, 1.7)), OFF: off})
    assert [(r.first, r.last, r.config.label) for r in load_ranges([split_at_two, four])] == [(2, 2, "a"), (4, 4, unified)]


class _Counting:
    """A rule whose state crosses requests, one per slot: it drafts as many tokens as requests it has begun."""

    def __init__(self):
        self.begun = 0

    def slot(self):
        return _Counting()

    def begin(self, prompt):
        self.begun += 1

    def draft(self, history, sampled):
        return [sampled] * self.begun

    def accept(self, accepted):
        pass


def test_a_rule_whose_state_is_each_slots_replays_each_clients_requests_with_its_own():
    from polyplan.planner.llama_cpp.ngram_rules import replay_request, replay_session, serve_slots

    streams = _streams()
    session = replay_session(streams, _Counting, repeats=2)
    assert serve_slots(streams, _Counting, session.stream_of, 1) == session
    split = serve_slots(streams, _Counting, session.stream_of, 2, load=6)
    fresh = _Counting()
    own = [replay_request(fresh, streams[i]) for i in (1, 3, 5, 1, 3, 5)]  # client 1's requests, its own state
    assert [split.requests[i] for i in range(1, 12, 2)] == own
    assert split.stream_of == session.stream_of
    assert split.drafted < session.drafted  # control: one state across all requests has begun more of them


def test_the_loaded_pricing_of_a_fixed_draft_is_the_simulation_with_its_tail_left_out():
    """Every slot drafting K = 3 and keeping all: the loaded curves (T(B·k)/B a slot) with the
    other slots' prompt stalls give the simulation's speedup exactly at one request and within
    3 % at 2 and 4 (what they leave out: the start and the tail with fewer slots)."""
    curve = LatencyCurve(tuple(range(1, 65)), tuple(0.03 + 0.004 * k for k in range(1, 65)))
    rng = np.random.default_rng(0)
    lengths = [4 * int(x) for x in rng.integers(8, 30, size=24)]
    prompts = [int(x) for x in rng.integers(10, 60, size=24)]
    requests = [(ReplayRound(3, 3),) * (n // 4) for n in lengths]
    fixed, tokens = 24 * LOOP.per_request_s, sum(lengths)
    for clients, tolerance in ((1, 1e-12), (2, 0.03), (4, 0.03)):
        run = simulate_load(requests, tuple(range(24)), prompts, clients, curve, LOOP)
        alone = simulate_load(under_load.target_rounds(requests), tuple(range(24)), prompts, clients, curve, LOOP, TARGET_ALONE)
        per_token = (curve(clients * 4) / clients + LOOP.round_s(3, NGRAM)) / 4
        baseline = curve(clients) / clients + LOOP.per_round_s
        stalls = [under_load.prompt_stalls(curve, clients, rows, prompts[clients:]) for rows in (4, 1)]
        loaded = (fixed + stalls[1] + baseline * tokens) / (fixed + stalls[0] + per_token * tokens)
        assert loaded == pytest.approx(alone.union_s / run.union_s, rel=tolerance), clients


def test_the_widths_needed_are_those_of_the_ranked_rows_not_the_search_limit(captured):
    """A plan searched to the widest width timed would otherwise always ask for B times it."""
    options, request = captured["args"]
    k = under_load.ranked_block_size(options, request)
    fixed = [option.block_size for option in options if option.reason is None and option.block_size]
    assert fixed and k >= max(fixed)
    wide = dataclasses.replace(request, k_max=max(request.pricing.target_curve.ks))
    assert under_load.ranked_block_size(options, wide) <= max(request.pricing.target_curve.ks)
    assert under_load.needed_width(wide, (1, 2), k) == 2 * (k + 1)


def test_a_race_load_is_simulated_one_prompt_set_at_a_time():
    """`simulate_loads`: each run of `load` requests is its own load (its clients start together),
    so the merge is the sum of the separate simulations; one load, or one client, is the single
    simulation (at one client nothing overlaps, so cutting changes nothing)."""
    step = _linear(0.01, 0.002)
    requests = [(ReplayRound(2, 2),) * (3 + i) for i in range(8)]
    prompts, streams = tuple(10 + i for i in range(8)), tuple(range(8))
    whole = simulate_load(requests, streams, prompts, 2, step, HAND_LOOP)
    assert under_load.simulate_loads(requests, streams, prompts, 2, step, HAND_LOOP, load=None) == whole
    assert under_load.simulate_loads(requests, streams, prompts, 2, step, HAND_LOOP, load=8) == whole
    cut = under_load.simulate_loads(requests, streams, prompts, 2, step, HAND_LOOP, load=4)
    parts = [simulate_load(requests[i:i + 4], streams[i:i + 4], prompts[i:i + 4], 2, step, HAND_LOOP) for i in (0, 4)]
    assert cut.union_s == pytest.approx(sum(part.union_s for part in parts), rel=1e-12)
    assert cut.tokens == parts[0].tokens + parts[1].tokens and cut.decode_s == parts[0].decode_s + parts[1].decode_s
    assert cut.union_s != pytest.approx(whole.union_s, rel=1e-6)  # control: where the loads start matters at 2 clients
    one = [under_load.simulate_loads(requests, streams, prompts, 1, step, HAND_LOOP, load=load).union_s for load in (None, 3)]
    assert one[0] == pytest.approx(one[1], rel=1e-12)


def test_a_request_is_stretched_to_the_races_length_with_its_own_rounds():
    """A race decodes every request to its new tokens; a replay that ended sooner repeats its
    own rounds from the start, the last cut to fit; one that is long enough is kept."""
    rounds = (ReplayRound(3, 3), ReplayRound(2, 0))  # 4 + 1 tokens
    assert under_load.stretched(rounds, 5) == rounds
    assert under_load.stretched(rounds, 12) == rounds + rounds + (ReplayRound(1, 1),)  # 10 tokens, then 2 of the next 4
    assert sum(item.accepted + 1 for item in under_load.stretched(rounds, 12)) == 12
    assert under_load.stretched((), 3) == (ReplayRound(0, 0),) * 3


def test_under_load_the_slots_decode_the_races_length_and_at_one_request_nothing_changes(captured):
    options, request = captured["args"]
    short = dataclasses.replace(request, workload=dataclasses.replace(request.workload, new_tokens=400))  # past every stream
    (one,) = rank_under_load(options, short, (1,))
    (today,) = rank_under_load(options, dataclasses.replace(short, workload=dataclasses.replace(short.workload, new_tokens=None)), (1,))
    assert [c.speedup for c in one.configs] == pytest.approx([c.speedup for c in today.configs], rel=1e-12)
    ranker = under_load._Ranker(options, short)
    session = ranker.replayed[0].sessions[0]
    run = ranker.run(session, 2)
    assert set(run.tokens) == {399}  # every request decodes 399 after the prefill's first, as the race's would
    assert set(ranker.run(session, 1).tokens) != {399}  # control: at one request the replay's own lengths


def test_one_kv_stream_prices_every_decode_as_one_pass_and_is_reported_beside_the_ranking(captured):
    """`--kv-unified`: at one request nothing to report; at four the best row simulated with one
    KV stream (its flag added, never in the ranking itself), no slower than the same configuration
    split; the vLLM path asks for none."""
    options, request = captured["args"]
    one, four = rank_under_load(options, request, (1, 4))
    assert one.unified is None
    best = four.unified
    assert best is not None and best.label.endswith(" --kv-unified") and best.flags[-1] == "--kv-unified"
    assert all(not config.label.endswith("--kv-unified") for config in four.configs)
    split = four.config(best.label.removesuffix(" --kv-unified"))
    assert split is not None and best.speedup >= split.speedup - 1e-9
    (plain,) = rank_under_load(options, request, (4,), unified=False)
    assert plain.unified is None


def test_the_choice_is_the_kv_unified_row_where_it_pays_and_is_the_fastest(captured):
    """At each count the choice is `choose_config`'s over the ranked rows and the unified one:
    the unified row where its low end is above 1 and it pays more surely than the split server's
    choice (`surest`), else that choice; `config` finds the unified row by its label; without
    `--kv-unified` priced (vLLM) no choice carries the flag."""
    from polyplan.planner.llama_cpp.ranking import surest

    options, request = captured["args"]
    for ranking in rank_under_load(options, request, (2, 4)):
        split = choose_config(ranking.configs)
        unified = ranking.unified
        wins = unified.low > 1.0 and surest([split, unified]) is unified
        assert ranking.chosen.label == (unified.label if wins else split.label)
        assert ranking.config(unified.label) is unified
    for ranking in rank_under_load(options, request, (2, 4), unified=False):
        assert UNIFIED_FLAG not in ranking.chosen.flags and ranking.chosen.label == choose_config(ranking.configs).label


def test_a_unified_row_that_pays_and_beats_the_split_choice_is_chosen(captured):
    """The rule by hand on the real ranking at 4: the unified row made faster than every ranked
    row and surer to pay is chosen; made unsure (its interval below 1) it is not (control)."""
    options, request = captured["args"]
    (four,) = rank_under_load(options, request, (4,))
    top = max(config.speedup for config in four.configs)
    surest = max([1.0, *(config.low for config in four.configs if config.label != OFF)])
    faster = dataclasses.replace(four.unified, speedup=top + 0.5, workload_interval=(surest + 0.01, top + 1))
    unsure = dataclasses.replace(faster, workload_interval=(0.99, top + 1))
    ranker = under_load._Ranker(options, request)
    for row, chosen in ((faster, True), (unsure, False)):
        ranker.unified = lambda clients, row=row: row
        assert (ranker.rank(4).chosen is row) is chosen


def test_one_kv_stream_is_the_same_lock_step_in_one_pass_by_hand():
    """The hand case with `split=False`: iterations 2 and 3 are one pass of 4 rows again."""
    step = _linear(0.01, 0.002)
    requests = [(ReplayRound(2, 2), ReplayRound(2, 1)), (ReplayRound(0, 0),) * 3]
    run = simulate_load(requests, (0, 1), (3, 2), 2, step, HAND_LOOP, split=False)
    ngram_round = 0.001 + 0.0002
    second = step(4) + (ngram_round + 0.0002) + ngram_round
    third = step(4) + (ngram_round + 0.0002 + 0.0005) + ngram_round
    fourth = step(1) + ngram_round + 0.0005
    assert run.union_s == pytest.approx(second + third + fourth, rel=1e-12)
    assert run.counts[(0, 4)] == pytest.approx(2 * 3 / 4) and run.counts[(1, 4)] == pytest.approx(2 * 1 / 4)


def test_a_replicate_prompt_set_is_served_as_the_session_serves_its_prompts():
    """`replicate_session`: stream s `counts[s]` times in stream order, once per repeat, each
    request with the rounds the session replayed for that stream in that repeat (a rule whose
    state crosses requests drafts differently in the second repeat); all ones is the session."""
    from polyplan.planner.llama_cpp.ngram_rules import replay_session

    streams = _streams()
    session = replay_session(streams, _Counting, repeats=2)
    assert under_load.replicate_session(session, np.ones(6), 6) == session
    counts = np.array([2, 0, 1, 0, 0, 3])
    replicate = under_load.replicate_session(session, counts, 6)
    assert replicate.stream_of == (0, 0, 2, 5, 5, 5) * 2
    first, second = session.requests[:6], session.requests[6:]
    assert replicate.requests == (first[0], first[0], first[2], first[5], first[5], first[5],
                                  second[0], second[0], second[2], second[5], second[5], second[5])
    assert first[0] != second[0]  # control: the repeats' rounds differ, and each repeat kept its own


def test_a_simulated_loads_union_is_its_passes_at_their_t_plus_its_loop_costs():
    """`_priced_union` at the T(k) a load was simulated with is its union, so a replicate's T(k)
    re-prices the same schedule."""
    streams = _streams()
    requests = [tuple(ReplayRound(d, a) for d, a in ((3, 1), (0, 0), (2, 2), (4, 0))) for _ in streams]
    step = _linear(0.01, 0.004)
    for clients in (1, 2, 4):
        run = under_load.simulate_loads(requests, list(range(6)), [s.prompt_tokens for s in streams], clients, step, HAND_LOOP,
                                        NGRAM, load=3)
        steps = np.array([step(k) for k in range(1, run.widest() + 1)])
        assert under_load._priced_union(run, steps) == pytest.approx(run.union_s, rel=1e-12)
        assert under_load._priced_union(run, 2 * steps) > run.union_s  # control: a slower T prices it slower


def test_under_load_a_replicate_of_the_profiled_prompts_at_the_nominal_t_is_the_point(captured):
    """At B > 1 each replicate's prompt set is simulated as a load: the replicate that is the
    profiled set itself, priced at the nominal T(k), gives the row's own speedup exactly; another
    set gives another speedup (not the same load reweighted)."""
    options, request = captured["args"]
    request = dataclasses.replace(request, workload=dataclasses.replace(request.workload, in_order=True))
    ranker = under_load._Ranker(options, request)
    item = next(item for item in ranker.replayed if item.label.startswith("ngram-simple size-n=2"))
    session = ranker.sessions(item, 2)[0]
    count = len(ranker.streams)
    curve = request.pricing.target_curve
    nominal = np.array([curve(k) for k in range(1, 2000)])
    from polyplan.planner.llama_cpp.ranking import Replicates
    ranker.replicates = Replicates(np.tile(nominal, (3, 1)), np.ones((3, count)), 1.0)
    run, base = ranker.run(session, 2), ranker.run(session, 2, target=True)
    values = ranker._simulated_replicates(session, 2, np.ones((3, count)), None, True)
    assert values == pytest.approx([base.union_s / run.union_s] * 3, rel=1e-9)
    other = np.zeros((1, count))
    other[0, 0] = count  # the first prompt alone, as often as the set has prompts
    assert ranker._simulated_replicates(session, 2, other, None, True)[0] != pytest.approx(values[0], rel=1e-3)


def test_a_race_replays_the_order_it_sends_where_a_plan_draws_orders(captured):
    """`ReplayWorkload.sent`: a race's prediction replays one session, the prompts in their own
    order each repeat, so client c's requests are prompts c, c + N, ... as `run_load` sends them;
    the plan a user exports (order unknown) replays `ORDERS` drawn orders and takes the median."""
    from polyplan.planner.llama_cpp.ranking import ORDERS, ReplayWorkload

    options, request = captured["args"]
    drawn = under_load._Ranker(options, request)
    count = len(drawn.streams)
    sent = under_load._Ranker(options, dataclasses.replace(request, workload=ReplayWorkload.sent(
        request.workload.new_tokens or 64, 2, count, to_eos=True)))
    assert sent.orders == [list(range(count))]
    item = next(item for item in sent.replayed if item.label.startswith("ngram-simple size-n=2"))
    sessions = sent.sessions(item, 2)
    assert len(sessions) == 1 and sessions[0].stream_of == tuple(range(count)) * 2
    assert len(drawn.orders) == ORDERS and drawn.orders[0] == list(range(count))
    assert any(order != list(range(count)) for order in drawn.orders[1:])  # control: the plan's orders are drawn


def test_a_workload_of_several_loads_is_the_mean_of_each_loads_ratio():
    """`load_speedup`: each load (a race's repeat) its own ratio, the mean taken; one load is the
    plain ratio of the unions."""
    streams = _streams()
    fast = [tuple(ReplayRound(3, 3) for _ in range(4)) for _ in range(3)]
    slow = [tuple(ReplayRound(3, 0) for _ in range(16)) for _ in range(3)]
    requests = fast + slow  # the first load drafts well, the second never keeps a draft
    prompts = [s.prompt_tokens for s in streams]
    step = _linear(0.01, 0.004)
    run = under_load.simulate_loads(requests, list(range(6)), prompts, 2, step, HAND_LOOP, NGRAM, load=3)
    base = under_load.simulate_loads(under_load.target_rounds(requests), list(range(6)), prompts, 2, step, HAND_LOOP,
                                     TARGET_ALONE, load=3)
    assert len(run.loads) == len(base.loads) == 2
    each = [b.union_s / r.union_s for r, b in zip(run.loads, base.loads)]
    assert each[0] > 1.0 > each[1]
    assert under_load.load_speedup(run, base) == pytest.approx(sum(each) / 2)
    assert under_load.load_speedup(run, base) != pytest.approx(base.union_s / run.union_s, rel=1e-3)  # control
    one = under_load.simulate_loads(requests, list(range(6)), prompts, 2, step, HAND_LOOP, NGRAM)
    one_base = under_load.simulate_loads(under_load.target_rounds(requests), list(range(6)), prompts, 2, step, HAND_LOOP, TARGET_ALONE)
    assert one.loads == (one,) and under_load.load_speedup(one, one_base) == pytest.approx(one_base.union_s / one.union_s)


def test_a_replicate_that_draws_none_of_a_loads_prompts_leaves_that_load_out_of_its_mean():
    """Where a load sends fewer prompts than the profile has streams (a race of 3 prompts on 6
    streams), a replicate can draw none of one load's streams: that load is no part of it (its
    mean is over the loads it draws from), not a 0/0 that makes the interval NaN."""
    streams = _streams()
    requests = [tuple(ReplayRound(3, s % 3) for _ in range(5)) for s in range(6)]
    prompts = [s.prompt_tokens for s in streams]
    step = _linear(0.01, 0.004)
    run = under_load.simulate_loads(requests, list(range(6)), prompts, 2, step, HAND_LOOP, NGRAM, load=3)
    base = under_load.simulate_loads(under_load.target_rounds(requests), list(range(6)), prompts, 2, step, HAND_LOOP,
                                     TARGET_ALONE, load=3)
    nominal = np.array([step(k) for k in range(1, 64)])
    from polyplan.planner.llama_cpp.ranking import Replicates
    weights = np.array([[1.0] * 6, [3.0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 3.0]])  # all; the first load's only; the second's only
    replicates = Replicates(np.tile(nominal, (3, 1)), weights, 1.0)
    values = under_load._reweighted_speedups([run], [base], 6, replicates, weights)
    assert np.all(np.isfinite(values))
    assert values[0] == pytest.approx(under_load.load_speedup(run, base), rel=1e-9)
    first = under_load._reweighted_speedups([run.loads[0]], [base.loads[0]], 6, replicates, weights[1:2])
    assert values[1] == pytest.approx(first[0], rel=1e-9)  # the second load, which it draws nothing of, left out


def test_the_exports_replicates_do_not_slow_the_target_alone_where_its_floor_read_slower():
    """A target timed while the machine floor read 2x the quietest model's: the plan's own
    replicates scale its curve down (half of them fully, to 0.5), but the export's ranking holds
    the server's loop fixed, so its replicates keep T(k) where it was measured, with its sampling
    noise; the floor's symmetric spread stays."""
    from polyplan.formats.profile import TimingHealth
    from polyplan.planner.intervals.prediction_interval import latency_replicates
    from polyplan.planner.llama_cpp.export import ranking_replicates

    profile = _profile()
    slow = TimingHealth(reference_median_s=0.002, reference_relative_iqr=0.05)
    quiet = TimingHealth(reference_median_s=0.001, reference_relative_iqr=0.05)
    for model in profile.models:
        profile = profile.with_model(dataclasses.replace(model, timing=slow if model.name == "target" else quiet))
    nominal = _cpu_curve(1)
    plan_curves, _, widened = latency_replicates(profile, ["target"], 200, np.random.default_rng(0))
    assert np.median([curve(1) for curve in plan_curves["target"]]) < 0.8 * nominal  # control: the plan's correction
    assert any("slower while it was timed" in line for line in widened)
    steps = ranking_replicates(profile, "target", len(_streams()), 8, None).steps
    assert np.median(steps[:, 0]) == pytest.approx(nominal, rel=0.02)
    noisy = TimingHealth(reference_median_s=0.002, reference_relative_iqr=0.6)  # a noisy floor still widens both ways
    wide = profile.with_model(dataclasses.replace(profile.model("target"), timing=noisy))
    spread = ranking_replicates(wide, "target", len(_streams()), 8, None).steps[:, 0]
    assert np.percentile(spread, 2.5) < 0.95 * nominal < 1.05 * nominal < np.percentile(spread, 97.5)
