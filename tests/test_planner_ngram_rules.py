"""llama.cpp's n-gram drafters ported to pure Python (planner.llama_cpp.ngram_rules), on hand-made token
streams: what each rule drafts, its cap, the state it keeps between requests; and the ranking
of llama-server configurations with "off" (planner.llama_cpp.ranking)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import TargetStream
from polyplan.planner.llama_cpp.ranking import (OFF, RankedConfig, Replicates, ReplayWorkload, choose_config, ranked,
                                                replayed_config, session_interval, session_speedup)
from polyplan.planner.exact.ngram_replay import ngram_simple_draft, replay_stream
from polyplan.planner.llama_cpp.ngram_rules import (LLAMA_CPP_RULES, NGramCacheRule, NGramMapRule, NGramModRule, NGramSimpleRule,
                                                StdUnorderedCounts, replay_request, replay_session)

DATA = Path(__file__).parent / "data"
REPEATING = TargetStream(8, (1, 2, 3, 4, 5, 6, 7, 4) + (5, 6, 7, 4) * 15)


def test_ngram_simple_through_the_session_loop_is_the_existing_replay():
    for size_n, size_m in ((2, 4), (1, 6), (3, 3)):
        assert replay_request(NGramSimpleRule(size_n, size_m), REPEATING) == replay_stream(REPEATING, size_n, size_m)
        assert replay_request(NGramSimpleRule(size_n, size_m), REPEATING, 10) == replay_stream(REPEATING, size_n, size_m, 10)


def test_ngram_mod_hash_is_llama_cpps():
    # common_ngram_mod::idx: res = res * 6364136223846793005 + token (size_t), then % 4M entries
    rule = NGramModRule(2, 1, 4)
    assert rule.table.index([1, 2], 0) == (6364136223846793005 * 1 + 2) % (1 << 64) % (4 * 1024 * 1024)
    big = [2**31 - 1, 2**31 - 2, 7]
    expected = 0
    for token in big:
        expected = (expected * 6364136223846793005 + token) % (1 << 64)
    assert NGramModRule(3, 1, 4).table.index(big, 0) == expected % (4 * 1024 * 1024)


def test_ngram_mod_drafts_all_or_nothing_from_n_min_to_n_max():
    rule = NGramModRule(n_match=2, n_min=2, n_max=4)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    rule.begin(prompt)
    history = prompt + [9, 1]
    assert rule.draft(history, 2) == [3, 4, 5, 6]  # the table's chain from (1, 2), cut at n_max
    assert rule.draft(history, 9) == []  # (1, 9) never seen
    assert rule.draft(prompt + [0, 5], 6) == [7, 8]  # the chain ends after 2 >= n_min
    strict = NGramModRule(n_match=2, n_min=3, n_max=4)
    strict.begin(prompt)
    assert strict.draft(prompt + [0, 5], 6) == []  # ... but 2 < n_min = 3: nothing (the cap is all or nothing)


def test_ngram_mod_adds_the_generated_n_grams_in_chunks_of_more_than_32():
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    rule = NGramModRule(n_match=2, n_min=1, n_max=4)
    rule.begin(prompt)
    assert rule.draft(prompt + [20, 21, 22, 23, 5, 21], 22) == []  # (21, 22) was generated, not added yet
    rule = NGramModRule(n_match=2, n_min=1, n_max=4)
    rule.begin(prompt)
    history = prompt + [20, 21, 22, 23] + [0] * 30 + [20, 21]  # 44 tokens > i_last (6) + 32: a chunk is added
    assert rule.draft(history, 22) == [23, 0, 0, 20]  # (0, 0) holds what followed its last occurrence


def test_ngram_mod_keeps_its_table_from_request_to_request():
    """The table is shared by every request the server serves: a fresh stream drafts nothing,
    the same stream served again drafts its earlier continuation (what `bench peers` repeats do)."""
    stream = TargetStream(30, tuple(range(100, 130)) + tuple(range(200, 240)))
    session = replay_session([stream], lambda: NGramModRule(4, 8, 16), repeats=2)
    first, second = session.requests
    assert sum(r.drafted for r in first) == 0
    assert sum(r.drafted for r in second) >= 16 and all(r.accepted == r.drafted for r in second)
    assert session.stream_of == (0, 0)
    fresh = replay_session([stream], lambda: NGramModRule(4, 8, 16))
    assert len(fresh.requests) == 1 and fresh.drafted == 0
    with pytest.raises(PolyplanError, match="repeats must be >= 1"):
        replay_session([stream], NGramModRule, repeats=0)


def test_ngram_mod_clears_its_table_after_five_low_drafts_in_a_row():
    rule = NGramModRule(n_match=1, n_min=1, n_max=1)
    rule.begin([5, 6])
    for _ in range(4):
        assert rule.draft([7], 5) == [6]
        rule.accept(0)
    assert rule.resets == 0 and rule.n_low == 4
    rule.draft([7], 5)
    rule.accept(1)  # a good draft ends the streak
    assert rule.n_low == 0
    for _ in range(5):
        assert rule.draft([7], 5) == [6]
        rule.accept(0)
    assert rule.resets == 1 and not rule.table.entries and rule.draft([7], 5) == []


def test_ngram_mod_slots_share_the_table_but_each_counts_its_own_low_drafts():
    """common_speculative_impl_ngram_mod: one `common_ngram_mod` for the server, a `seq_info` per
    slot. Five low drafts split over two slots clear nothing; five on one slot clear the table
    for both."""
    first = NGramModRule(n_match=1, n_min=1, n_max=1)
    other = first.slot()
    assert other.table is first.table and other is not first
    first.begin([5, 6])
    assert other.draft([7], 5) == [6]  # the other slot drafts from what this one's prompt added
    for rule in (first, other, first, other, first):
        assert rule.draft([7], 5) == [6]
        rule.accept(0)
    assert first.resets == 0 and (first.n_low, other.n_low) == (3, 2)
    for rule in (other, other, other):
        rule.draft([7], 5)
        rule.accept(0)
    assert first.resets == other.resets == 1 and first.draft([7], 5) == []
    assert other.n_low == 0 and first.n_low == 3  # the streak that cleared it was the other slot's alone
    with pytest.raises(PolyplanError, match="cannot serve n_match"):
        NGramModRule(n_match=2, table=first.table)


def test_each_rule_gives_another_slot_its_own_state_or_the_servers_shared_one():
    """`DraftRule.slot`: ngram-simple is stateless (the same rule), ngram-map-k/k4v and ngram-cache
    keep one state per slot (a fresh rule with the same settings), ngram-mod shares its table."""
    simple = NGramSimpleRule(3, 7)
    assert simple.slot() is simple
    mapped = NGramMapRule(size_n=2, size_m=5, min_hits=2, key_only=False)
    twin = mapped.slot()
    assert twin is not mapped and (twin.n, twin.m, twin.min_hits, twin.key_only) == (2, 5, 2, False) and not twin.keys
    cache = NGramCacheRule()
    assert cache.slot() is not cache and not cache.slot().context
    mod = NGramModRule(4, 8, 16)
    assert mod.slot().table is mod.table and (mod.slot().n, mod.slot().n_min, mod.slot().n_max) == (4, 8, 16)


class _Recording:
    """A rule that logs every call the server makes, by slot, and drafts one wrong token."""

    def __init__(self, log, slot=0):
        self.log, self.number = log, slot

    def slot(self):
        return _Recording(self.log, self.number + 1)

    def begin(self, prompt):
        self.log.append(("begin", self.number, len(prompt)))

    def draft(self, history, sampled):
        self.log.append(("draft", self.number))
        return [-1]

    def accept(self, accepted):
        self.log.append(("accept", self.number))


def test_slots_are_served_iteration_by_iteration_as_the_server_does():
    """All decoding slots draft, then each verifies and accepts in slot order; a slot whose request
    ended takes its next prompt the iteration after (its `begin`), and drafts from the one after
    that; requests go to slots by their place in the load, and the loads run one after another."""
    from polyplan.planner.llama_cpp.ngram_rules import serve_slots

    short, longer = TargetStream(2, (1, 2, 3, 4, 5)), TargetStream(3, (1, 2, 3, 4, 5, 6, 7))  # 3 and 4 new tokens
    log: list = []
    session = serve_slots([short, longer], lambda: _Recording(log), (0, 1, 0), 2, new_tokens=None)
    # iteration 0: both prompts; 1-2: both slots decode (slot 0 drafts then while it has room: 3 tokens = 2 rounds,
    # the last without a draft call); 3: slot 0's next prompt, slot 1's last round; 4-5: slot 0's rounds
    assert log == [("begin", 0, 2), ("begin", 1, 3),
                   ("draft", 0), ("draft", 1), ("accept", 0), ("accept", 1),
                   ("draft", 1), ("accept", 1),
                   ("begin", 0, 2),
                   ("draft", 0), ("accept", 0)]
    assert session.stream_of == (0, 1, 0)
    assert [len(rounds) for rounds in session.requests] == [2, 3, 2]
    log.clear()
    serve_slots([short, longer], lambda: _Recording(log), (0, 1), 2)
    one_load = list(log)
    log.clear()
    serve_slots([short, longer], lambda: _Recording(log), (0, 1, 0, 1), 2, load=2)
    assert log == one_load * 2  # the second load starts when the first has ended, both slots together
    log.clear()
    serve_slots([short, longer], lambda: _Recording(log), (0, 1, 0, 1), 2)
    assert log != one_load * 2  # control: in one load slot 0 takes its next prompt while slot 1 decodes
    with pytest.raises(PolyplanError, match="slots and load must be >= 1"):
        serve_slots([short], NGramSimpleRule, (0,), 0)


def test_one_slot_serves_the_requests_as_the_sequential_replay_does():
    from polyplan.planner.llama_cpp.ngram_rules import serve_slots

    streams = [REPEATING, TargetStream(30, tuple(range(100, 130)) + tuple(range(200, 240)))]
    for make_rule in (NGramSimpleRule, lambda: NGramModRule(4, 8, 16), NGramMapRule, NGramCacheRule):
        for new_tokens in (None, 12):
            sequential = replay_session(streams, make_rule, new_tokens=new_tokens, repeats=2)
            assert serve_slots(streams, make_rule, sequential.stream_of, 1, new_tokens=new_tokens, load=2) == sequential


def test_ngram_mod_at_two_slots_remembers_the_first_repeat_where_one_slot_clears_it():
    """What the Qwen race under load measured (docs/engines.md): one slot's five low drafts in a
    row, counted across its requests, clear the table before the prompts come again; spread over
    two slots no slot reaches five, so the second repeat drafts the first's answers."""
    from polyplan.planner.llama_cpp.ngram_rules import serve_slots

    rng = np.random.default_rng(7)
    common = (901, 902, 903, 904)  # in every answer, followed by different tokens: a draft there fails at once
    streams = []
    for i in range(6):
        prompt = tuple(int(t) for t in rng.integers(1000 * (i + 1), 1000 * (i + 1) + 500, size=12))
        answer = tuple(int(t) for t in rng.integers(100, 900, size=2)) + common + tuple(int(t) for t in rng.integers(100, 900, size=34))
        streams.append(TargetStream(len(prompt), prompt + answer))

    def make_rule():
        return NGramModRule(n_match=4, n_min=2, n_max=8)
    order = tuple(range(6)) * 2
    one = serve_slots(streams, make_rule, order, 1, load=6)
    two = serve_slots(streams, make_rule, order, 2, load=6)
    second = lambda session: sum(item.accepted for rounds in session.requests[6:] for item in rounds)
    assert second(two) > 2 * max(second(one), 1)


def test_ngram_map_k_drafts_from_the_first_indexed_occurrence_and_caps_by_the_last_acceptance():
    prompt = [9, 1, 2, 3, 4, 1, 2, 5, 6, 7, 7, 7]
    rule = NGramMapRule(size_n=2, size_m=2)
    rule.begin(prompt)
    assert rule.draft(prompt[:5], 2) == []  # fewer than 2 size_n + size_m tokens
    assert rule.draft(prompt + [8, 1], 2) == [5, 6]  # the latest (1, 2) in the prompt
    later = prompt + [8, 1, 2, 7, 7, 7, 7, 1]
    assert rule.draft(later, 2) == [5, 6]  # the map keeps the position it indexed first ...
    assert ngram_simple_draft(later, 2, 2, 2) == [7, 7]  # ... where ngram-simple takes the latest
    rule.accept(1)
    assert rule.draft(later, 2) == [5]  # the key drafts at most what was accepted last time
    rule.accept(0)
    assert rule.draft(later, 2) == []  # rejected at its first token: this key never drafts again
    assert rule.draft(later, 3) == []  # (3 is not a key's continuation here)


def test_ngram_map_k4v_needs_a_majority_m_gram_and_drafts_after_the_match():
    majority = [9, 1, 2, 5, 6, 1, 2, 5, 6, 1, 2, 7, 8, 0, 0, 0, 0, 0, 0]
    rule = NGramMapRule(2, 2, 1, key_only=False)
    rule.begin(majority)
    # (5, 6) follows (1, 2) twice, (7, 8) once: a majority; llama.cpp then drafts the tokens after
    # the match it found (the latest), not the majority's
    assert rule.draft(majority + [3, 1], 2) == [7, 8]
    tie = [9, 1, 2, 5, 6, 1, 2, 7, 8, 0, 0, 0, 0, 0, 0]
    rule = NGramMapRule(2, 2, 1, key_only=False)
    rule.begin(tie)
    assert rule.draft(tie + [3, 1], 2) == []  # 1 against 1: no draft
    hits = NGramMapRule(2, 2, 2, key_only=False)
    hits.begin(majority)
    assert hits.draft(majority + [3, 1], 2) == []  # min_hits 2: the key's first look-up drafts nothing
    assert hits.draft(majority + [3, 1], 2) == [7, 8]


def test_ngram_cache_drafts_the_most_frequent_follower_of_the_longest_n_gram():
    """common_ngram_cache_draft with an empty static cache, by hand: the first call counts the
    history and the sampled token; (1, 2, 3) was followed once by 1 (size 3 needs one sample at
    50 %), and so on around the cycle, up to 8 tokens."""
    rule = NGramCacheRule()
    assert rule.draft([1, 2, 3, 1, 2], 3) == [1, 2, 3, 1, 2, 3, 1, 2]
    assert rule.cache_size == 6
    # 2-grams need two samples at 50 %, 1-grams two at 66 %: (9, 4) seen once drafts nothing, and
    # 4 -> {5, 6} (50 %) neither
    sparse = NGramCacheRule()
    assert sparse.draft([9, 4, 5, 8, 4, 6, 7], 4) == []


def test_ngram_cache_counts_each_new_chunk_on_its_own_and_ignores_a_shorter_request():
    """draft_one adds only the tokens after `cache_size` as their own chunk (n-grams across the
    chunk's start are not counted); a new request whose history is shorter adds nothing."""
    rule = NGramCacheRule()
    rule.draft([1, 2, 3], 4)  # counts 1 2 3 4
    rule.draft([1, 2, 3, 4, 7, 8], 9)  # counts the chunk 7 8 9 alone: (4, 7) is not counted
    assert (4,) not in rule.context and (7, 8) in rule.context and rule.context[(1, 2, 3)].counts == {4: 1}
    assert rule.cache_size == 7
    rule.draft([50, 51], 52)  # a second request, shorter than the first: nothing is added
    assert (50,) not in rule.context and rule.cache_size == 7


def test_ngram_cache_breaks_a_tie_by_libstdcxx_iteration_order():
    """(7, 8) was followed by 5, then by 18: a 50 % tie at size 2, which passes. 18 and 5 share
    bucket 5 of 13, and the later key goes first in its bucket, so llama.cpp drafts 18, not the
    first seen."""
    rule = NGramCacheRule()
    assert rule.draft([7, 8, 5, 9, 7, 8, 18, 10, 7], 8)[:2] == [18, 10]
    assert rule.context[(7, 8)].order == [18, 5]


def test_the_map_order_is_libstdcxxs():
    """StdUnorderedCounts against std::unordered_map<int, int> compiled by the GCC that built the
    pinned server (tests/data/libstdcxx_unordered_map_orders.txt: 60 random insertion sequences,
    up to 70 keys, so rehashes to 29 and 59 buckets are covered)."""
    lines = [line for line in (DATA / "libstdcxx_unordered_map_orders.txt").read_text().splitlines() if not line.startswith("#")]
    pairs = list(zip(lines[0::2], lines[1::2]))
    assert len(pairs) == 60
    for given, printed in pairs:
        counts = StdUnorderedCounts()
        for token in given.split()[1:]:
            counts.add(int(token))
        order, buckets = printed[len("out "):].split(" | ")
        assert [f"{token}:{counts.counts[token]}" for token in counts.order] == order.split() and counts.buckets == int(buckets)
    # negative control: first-seen order (a plain dict) is not it
    assert any(list(dict.fromkeys(int(t) for t in given.split()[1:])) != [int(item.split(":")[0]) for item in printed[4:].split(" | ")[0].split()]
               for given, printed in pairs)


def test_every_rule_replays_a_session_and_accepts_at_most_what_it_drafts():
    other = TargetStream(6, (11, 12, 13, 14, 15, 16) + (17, 18, 19) * 30)
    for kind, (make_rule, flags) in LLAMA_CPP_RULES.items():
        assert flags == ("--spec-type", kind)
        session = replay_session([REPEATING, other], make_rule, new_tokens=64, repeats=2)
        rounds = [r for request in session.requests for r in request]
        assert all(0 <= r.accepted <= r.drafted for r in rounds)
        for request, stream in zip(session.requests, session.stream_of):
            produced = sum(r.accepted + 1 for r in request) + 1  # the first token comes from the prefill
            assert produced == min(64, len((REPEATING, other)[stream].ids) - (REPEATING, other)[stream].prompt_tokens)


# --------------------------------------------------------------------------- the ranking


def _replicates(streams: int, spread: float = 0.0) -> Replicates:
    rng = np.random.default_rng(1)
    ks = np.arange(1, 66)
    steps = np.stack([(0.010 + 0.002 * (ks - 1)) * (1 + spread * rng.standard_normal()) for _ in range(200)])
    weights = np.stack([np.bincount(rng.integers(0, streams, streams), minlength=streams) for _ in range(200)]).astype(float)
    return Replicates(steps, weights, 1.0)


def test_a_session_is_priced_with_t_of_k_and_its_interval_holds_the_point():
    step = lambda k: 0.010 + 0.002 * (k - 1)  # noqa: E731
    fresh = TargetStream(4, tuple(range(100, 164)))
    session = replay_session([REPEATING, fresh], lambda: NGramSimpleRule(2, 4))
    assert session_speedup(session, step) > 1.2
    assert session_speedup(replay_session([fresh], lambda: NGramSimpleRule(2, 4)), step) == pytest.approx(1.0)
    point = session_speedup(session, step)
    low, high = session_interval([session], 2, point, _replicates(2))
    assert low < point < high and low < 1.05  # one stream repeats, one never does: a new set may hold neither


def test_a_session_of_repeats_is_priced_as_the_race_reports_it_the_mean_of_each_repeats_ratio():
    """ngram-mod remembers the first repeat in the second: the two repeats' speedups differ, and
    the session's is their mean (the race's statistic), not the ratio of the summed times; its
    interval with nothing resampled is the point."""
    from polyplan.planner.llama_cpp.ranking import repeat_parts

    step = lambda k: 0.010 + 0.002 * (k - 1)  # noqa: E731
    stream = TargetStream(30, tuple(range(100, 130)) + tuple(range(200, 240)))
    session = replay_session([stream], lambda: NGramModRule(4, 8, 16), repeats=2)
    first, second = repeat_parts(session, 2)
    assert (first.requests, second.requests) == ((session.requests[0],), (session.requests[1],))
    each = [session_speedup(part, step) for part in (first, second)]
    assert each[0] == pytest.approx(1.0) and each[1] > 1.5
    assert session_speedup(session, step, repeats=2) == pytest.approx(sum(each) / 2)
    assert session_speedup(session, step) < sum(each) / 2  # control: the summed times weigh the slow repeat more
    assert repeat_parts(session, 3) == [session]  # runs that do not divide the requests: one
    fixed = Replicates(np.tile([step(k) for k in range(1, 40)], (3, 1)), np.ones((3, 1)), 1.0)
    point = session_speedup(session, step, repeats=2)
    assert session_interval([session], 1, point, fixed, repeats=2) == pytest.approx((point, point))


def test_a_stateful_rules_interval_spans_the_orders_its_requests_may_come_in():
    """ngram-cache counts its first request's prompt and little after, so the order of the
    requests decides whether it drafts: the interval reads the session in other orders too."""
    step = lambda k: 0.010 + 0.002 * (k - 1)  # noqa: E731
    seeding = TargetStream(40, (1, 2, 3, 4, 5) * 8 + (1, 2, 3, 4, 5) * 8)  # a long prompt that teaches the cache
    short = [TargetStream(3, (9, 8, 7) + (1, 2, 3, 4, 5) * 8), TargetStream(3, (6, 8, 7) + (1, 2, 3, 4, 5) * 8)]
    first = [seeding, *short]
    one = replay_session(first, NGramCacheRule)
    other = replay_session(first, NGramCacheRule, order=[1, 2, 0])
    assert other.stream_of == (1, 2, 0) and one.drafted != other.drafted  # the order changes what it drafts
    fixed = Replicates(np.stack([0.010 + 0.002 * np.arange(0, 65)] * 40), np.ones((40, 3)), 1.0)
    point = session_speedup(one, step)
    assert session_interval([one], 3, point, fixed) == pytest.approx((point, point))  # one order, nothing resampled
    low, high = session_interval([one, other], 3, point, fixed)
    assert low == pytest.approx(min(point, session_speedup(other, step))) and high == pytest.approx(max(point, session_speedup(other, step)))
    # negative control: ngram-simple keeps no state between requests, so its orders agree
    simple = [replay_session(first, lambda: NGramSimpleRule(2, 4), order=order) for order in ([0, 1, 2], [2, 0, 1])]
    simple_point = session_speedup(simple[0], step)
    assert session_interval(simple, 3, simple_point, fixed) == pytest.approx((simple_point, simple_point))


def test_the_ranking_says_off_when_nothing_pays():
    """A target whose wide passes cost as much as their tokens (T(k) = k T(1)) and streams that
    never repeat: no configuration beats the target alone, so the recommendation is off."""
    step = lambda k: 0.010 * k  # noqa: E731
    streams = [TargetStream(4, tuple(range(100 * s, 100 * s + 80))) for s in range(1, 5)]
    replicates = Replicates(np.stack([0.010 * np.arange(1, 66)] * 50), np.ones((50, 4)), 1.0)
    configs = [replayed_config(f"{kind} (defaults)", flags, streams, make_rule, step, ReplayWorkload(), replicates)
               for kind, (make_rule, flags) in LLAMA_CPP_RULES.items()]
    configs.append(RankedConfig("draft-simple d K=3", ("--spec-type", "draft-simple"), 0.93))
    ranking = ranked(configs)
    assert ranking[0].label == OFF and choose_config(ranking).label == OFF and choose_config(ranking).flags == ()
    assert all(config.speedup < 1.0 + 1e-9 for config in ranking)  # none drafts: 1.00x at best


def test_negative_control_the_ranking_picks_what_clearly_pays():
    step = lambda k: 0.010 + 0.001 * (k - 1)  # noqa: E731
    streams = [REPEATING, TargetStream(8, (1, 2, 3, 4, 5, 6, 7, 4) + (5, 6, 7, 4) * 15)]
    replicates = Replicates(np.stack([0.010 + 0.001 * np.arange(0, 65)] * 50), np.ones((50, 2)), 1.0)
    good = replayed_config("ngram-simple size-n=2 K=4", ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2",
                                                         "--spec-ngram-simple-size-m", "4"),
                           streams, lambda: NGramSimpleRule(2, 4), step, ReplayWorkload(), replicates)
    ranking = ranked([good, RankedConfig("draft-simple d K=3", ("-md", "d.gguf"), 1.1)])
    assert good.low > 2.0 and choose_config(ranking) is good and ranking[0] is good


def test_off_wins_over_a_faster_point_whose_interval_reaches_below_one():
    unsure = RankedConfig("ngram-mod (defaults)", ("--spec-type", "ngram-mod"), 1.08, (0.95, 1.2))
    sure = RankedConfig("draft-simple d K=2", ("-md", "d.gguf"), 1.04, (1.01, 1.07))
    assert choose_config(ranked([unsure])).label == OFF
    assert choose_config(ranked([unsure, sure])) is sure  # the surest of those beyond their interval


def test_the_choice_is_the_configuration_that_pays_most_surely_not_the_highest_point():
    """Of the paying rows the one whose workload interval's low end is highest: ngram-mod's point
    resting on its table surviving a repeat (1.60x [1.03, 1.85] on the profile's 16 code prompts,
    raced 1.04x on 8 others) loses to ngram-simple's 1.48x [1.30, 1.73] (raced 1.67x); equal low
    ends go to the higher point; the order of the ranking does not matter."""
    mod = RankedConfig("ngram-mod (defaults)", ("--spec-type", "ngram-mod"), 1.60, (0.99, 2.20), workload_interval=(1.03, 1.85))
    simple = RankedConfig("ngram-simple size-n=4 K=15", ("--spec-type", "ngram-simple"), 1.48, (1.21, 2.07),
                          workload_interval=(1.30, 1.73))
    assert choose_config(ranked([mod, simple])) is simple and choose_config(ranked([simple, mod])) is simple
    assert choose_config(ranked([mod])) is mod  # alone it pays: chosen
    level = dataclasses.replace(simple, speedup=1.70, workload_interval=(1.30, 1.90))
    assert choose_config(ranked([simple, level])) is level


def test_low_ends_within_the_bootstraps_resolution_are_tied_and_the_point_decides():
    """gemma-3-270m's plan for 8 chat prompts at one request (prices re-timed with the re-warm
    fix): ngram-mod 1.64x [1.16, 2.49] against ngram-simple K=13 1.70x [1.16, 2.69]; raced, 1.26x
    and 1.68x. Low ends that close are tied (`LOW_TIE`), so the higher point wins, in either
    order; a low end further below than `LOW_TIE` still loses whatever its point."""
    from polyplan.planner.llama_cpp.ranking import LOW_TIE, surest

    mod = RankedConfig("ngram-mod (defaults)", ("--spec-type", "ngram-mod"), 1.64, (1.11, 3.12), workload_interval=(1.163, 2.49))
    simple = RankedConfig("ngram-simple size-n=3 K=13", ("--spec-type", "ngram-simple"), 1.70, (0.91, 3.25),
                          workload_interval=(1.158, 2.69))
    assert choose_config(ranked([mod, simple])) is simple and choose_config(ranked([simple, mod])) is simple
    far = dataclasses.replace(simple, workload_interval=(1.163 * (1 - LOW_TIE) - 0.01, 2.69))
    assert choose_config(ranked([mod, far])) is mod and surest([far, mod]) is mod


def test_the_choice_reads_the_workload_interval_and_a_race_the_new_sets():
    """A configuration whose interval for a new prompt set reaches below 1.00x but whose interval
    for the workload's mean does not is exported (gemma-3-270m at 2 threads: ngram-simple
    predicted 1.09x [0.98, 1.26], measured 1.16x [1.07, 1.25], and the two-draw rule said off);
    one whose workload interval reaches below 1.00x is not (control)."""
    pays = RankedConfig("ngram-simple (defaults)", ("--spec-type", "ngram-simple"), 1.09, (0.98, 1.26), workload_interval=(1.02, 1.18))
    unsure = RankedConfig("ngram-mod (defaults)", ("--spec-type", "ngram-mod"), 1.12, (0.90, 1.35), workload_interval=(0.97, 1.28))
    assert pays.low == 1.02 and choose_config(ranked([pays])) is pays
    assert choose_config(ranked([unsure])).label == OFF and choose_config(ranked([unsure, pays])) is pays
    assert RankedConfig("x", (), 1.09, (0.98, 1.26)).low == 0.98  # a row without the workload's interval reads the other


def test_a_replayed_rows_workload_interval_lies_inside_its_new_sets():
    """One draw (the profile's streams resampled) against two (a new set drawn from that resample):
    the same point, a narrower interval inside the other."""
    step = lambda k: 0.010 + 0.002 * (k - 1)  # noqa: E731
    # 16 streams: after a stretch that never repeats (0, 16, 32 or 48 tokens), a pattern of 3 to 7 tokens over and over
    streams = [TargetStream(4, ((1, 2, 3, 4) + tuple(range(100 * s, 100 * s + 16 * (s % 4)))
                                + tuple(range(1000 + 10 * s, 1003 + 10 * s + s % 5)) * 20)[:68]) for s in range(16)]
    from polyplan.planner.intervals.prediction_interval import prompt_weights

    replicates = Replicates(_replicates(len(streams)).steps, prompt_weights(16, 200, np.random.default_rng(3)), 1.0,
                            prompt_weights(16, 200, np.random.default_rng(3), new_set=False))
    row = replayed_config("ngram-simple size-n=2 K=4", (), streams, lambda: NGramSimpleRule(2, 4), step, ReplayWorkload(), replicates)
    assert row.interval[0] <= row.workload_interval[0] <= row.speedup <= row.workload_interval[1] <= row.interval[1]
    assert row.workload_interval[1] - row.workload_interval[0] < row.interval[1] - row.interval[0]
    assert replayed_config("x", (), streams, lambda: NGramSimpleRule(2, 4), step, ReplayWorkload(),
                           Replicates(replicates.steps, replicates.weights, 1.0)).workload_interval is None  # control: not drawn, not given


def _sixteen_streams() -> list[TargetStream]:
    """16 streams: after a stretch that never repeats (0, 16, 32 or 48 tokens), a pattern of 3
    to 7 tokens over and over."""
    return [TargetStream(4, ((1, 2, 3, 4) + tuple(range(100 * s, 100 * s + 16 * (s % 4)))
                             + tuple(range(1000 + 10 * s, 1003 + 10 * s + s % 5)) * 20)[:68]) for s in range(16)]


def test_a_race_on_fewer_prompts_than_the_profiles_is_judged_by_a_wider_interval():
    """A new set of 4 prompts drawn from a population the profile's 16 estimate moves by its own
    spread, more than a new set of 16 (the Qwen code race: 8 prompts judged by a 16-prompt
    interval). The weights of each replicate count 4 picks; the workload interval (one draw)
    and the point are the same whatever the race's size."""
    step = lambda k: 0.010 + 0.002 * (k - 1)  # noqa: E731
    streams = _sixteen_streams()
    from polyplan.planner.llama_cpp.export import ranking_replicates as replicates_for
    from polyplan.formats.profile import LatencyPoint, ModelProfile, Profile

    target = ModelProfile("target", "fp", tuple(LatencyPoint(64, k, step(k)) for k in (1, 2, 4, 8, 16, 32, 64)))
    profile = Profile(target="target", device="synthetic", models=(target,), pairs=())
    rows = {}
    for size in (None, 4):
        replicates = replicates_for(profile, "target", len(streams), 65, None, set_size=size)
        assert set(replicates.weights.sum(axis=1)) == {16.0 if size is None else 4.0}
        rows[size] = replayed_config("ngram-simple size-n=2 K=4", (), streams, lambda: NGramSimpleRule(2, 4), step,
                                     ReplayWorkload(prompts=size), replicates)
    width = lambda interval: interval[1] - interval[0]  # noqa: E731
    assert rows[4].speedup == rows[None].speedup and rows[4].workload_interval == rows[None].workload_interval
    assert width(rows[4].interval) > 1.3 * width(rows[None].interval)  # sqrt((1/16 + 1/4) / (2/16)) = 1.58 in theory
    assert rows[4].interval[0] < rows[None].interval[0] and rows[None].interval[1] < rows[4].interval[1]
    assert ReplayWorkload(prompts=8).set_words(16) == "a new set of 8 prompts" and ReplayWorkload().set_words(16) == "a new set of 16 prompts"


def test_a_race_priced_on_its_own_prompts_replays_them_in_their_own_order():
    """The race's order is known: `in_order` prices the one session in that order, where the
    profile's prompts are priced at the median of `ORDERS` orders (ngram-cache: the order decides
    whether it drafts)."""
    step = lambda k: 0.010 + 0.002 * (k - 1)  # noqa: E731
    seeding = TargetStream(40, (1, 2, 3, 4, 5) * 8 + (1, 2, 3, 4, 5) * 8)
    short = [TargetStream(3, (a, 8, 7) + (1, 2, 3, 4, 5) * 8) for a in (9, 6, 5)]
    streams = [seeding, *short]  # the seeding prompt first: in this order the cache learns in time
    in_order = replayed_config("ngram-cache (defaults)", (), streams, NGramCacheRule, step, ReplayWorkload(in_order=True), None)
    assert in_order.speedup == pytest.approx(session_speedup(replay_session(streams, NGramCacheRule), step))
    drawn = replayed_config("ngram-cache (defaults)", (), streams, NGramCacheRule, step, ReplayWorkload(), None)
    assert in_order.speedup > 3.0 and drawn.speedup == pytest.approx(1.0)  # control: most drawn orders seed too late


@pytest.mark.slow
def test_the_stateful_replays_draft_and_accept_what_a_real_llama_server_does(tmp_path):
    """The pinned llama-server with ngram-mod, ngram-map-k, ngram-map-k4v (small sizes, so a tiny model's
    short answers draft) and ngram-cache (its defaults) serving three prompts twice, in turn, in
    one server: each request's drafted and accepted counts equal the session replay's on the
    target alone's streams.

    ngram-cache counts only its first request's prompt (and chunks of accepted tokens), so its
    prompts begin with each token the tiny model says most often, three times over ("v v v": a
    follower at 2/3, which the 1-gram threshold passes); the drafts then also reach its 50 % ties.
    (On gemma-3-270m, three text prompts, 48 new tokens: 24 drafted and 8 accepted on the first,
    as the replay on the server's own output.)"""
    from collections import Counter

    from polyplan.engines.llama_cpp.server import LlamaServer
    from tiny_gguf import pinned_server_and_tiny_gguf

    server_binary, model = pinned_server_and_tiny_gguf(tmp_path)
    prompts = [[5, 9, 33, 70, 101, 7, 5, 9, 33, 70, 101, 7, 5, 9],
               [12, 40, 41, 42, 12, 40, 41, 42, 12, 40, 3, 3, 3, 12, 40, 41],
               [200, 201, 5, 9, 33, 202, 203, 204, 200, 201, 5, 9]]
    new_tokens = 40
    common = ("-t", "1", "-c", "512", "-np", "1", "--no-webui")
    with LlamaServer(server_binary, model, common, tmp_path / "plain.log") as server:
        outputs = [server.complete(p, new_tokens).token_ids for p in prompts]
        said = [token for token, _ in Counter(token for output in outputs for token in output).most_common(60)]
        cached = [[token for token in said for _ in range(3)] + prompt for prompt in prompts]
        cache_outputs = [server.complete(p, new_tokens).token_ids for p in cached]
    streams = {tuple(map(tuple, prompts)): [TargetStream(len(p), tuple(p) + o) for p, o in zip(prompts, outputs)],
               tuple(map(tuple, cached)): [TargetStream(len(p), tuple(p) + o) for p, o in zip(cached, cache_outputs)]}
    rules = {
        "ngram-mod": (("--spec-ngram-mod-n-match", "2", "--spec-ngram-mod-n-min", "2", "--spec-ngram-mod-n-max", "6"),
                      lambda: NGramModRule(2, 2, 6), prompts),
        "ngram-map-k": (("--spec-ngram-map-k-size-n", "1", "--spec-ngram-map-k-size-m", "3"),
                        lambda: NGramMapRule(1, 3), prompts),
        "ngram-map-k4v": (("--spec-ngram-map-k4v-size-n", "1", "--spec-ngram-map-k4v-size-m", "3"),
                          lambda: NGramMapRule(1, 3, key_only=False), prompts),
        "ngram-cache": ((), NGramCacheRule, cached),  # no sizes to set: n-grams of 1-4 tokens, 8 drafted at most
    }
    for kind, (flags, make_rule, asked) in rules.items():
        served = streams[tuple(map(tuple, asked))]
        replay = replay_session(served, make_rule, new_tokens=new_tokens, repeats=2)
        measured = []
        with LlamaServer(server_binary, model, common + ("--spec-type", kind) + flags, tmp_path / f"{kind}.log") as server:
            for _ in range(2):
                for stream, prompt in zip(served, asked):
                    done = server.complete(prompt, new_tokens)
                    assert done.token_ids == stream.ids[len(prompt):]
                    measured.append((done.draft_n, done.draft_accepted))
        replayed = [(sum(r.drafted for r in rounds), sum(r.accepted for r in rounds)) for rounds in replay.requests]
        assert sum(drafted for drafted, _ in measured) > 0, kind  # the streams draft at these sizes
        assert measured == replayed, kind


def test_the_rule_of_a_servers_flags_is_the_one_it_runs_or_none():
    from polyplan.planner.llama_cpp.ngram_rules import rule_for_flags

    label, make_rule = rule_for_flags(("--spec-type", "ngram-mod"))
    assert label == "ngram-mod (defaults)" and isinstance(make_rule(), NGramModRule)
    label, make_rule = rule_for_flags(("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "15"))
    assert label == "ngram-simple size-n=3 K=15" and (make_rule().size_n, make_rule().size_m) == (3, 15)
    assert rule_for_flags(("--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "5"))[0] == "ngram-simple size-n=12 K=5"
    for other in (("--spec-type", "draft-simple", "-md", "d.gguf"), ("--spec-type", "draft-simple,ngram-mod"), (),
                  ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "x"),
                  ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-draft-n-max", "4")):
        assert rule_for_flags(other) is None
