"""Near-ties a wide pass flips (`planner.llama_cpp.near_ties`, `engines.llama_cpp.wide_flips`):
a repeated request whose remembered answer a flip parts from the first appearance departs there
and continues as new text; nothing changes where both appearances produced the position in the
same regime, or where nothing was measured; the check itself through the bindings on a tiny GGUF."""

from __future__ import annotations

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import TargetStream
from polyplan.planner.exact.ngram_replay import ReplayRound as R
from polyplan.planner.llama_cpp.near_ties import NearTies, StreamTies, depart, departed, stream_digest
from polyplan.planner.llama_cpp.ngram_rules import NGramModRule, SessionReplay, replay_session

FIRST = (R(0, 0), R(0, 0), R(3, 1), R(0, 0), R(5, 5), R(0, 0))  # positions 1, 2, 3-4, 5, 6-11, 12: 13 tokens


def _tokens(rounds) -> int:
    return 1 + sum(item.accepted + 1 for item in rounds)


def _ties(stream: TargetStream, narrow=(), wide=()) -> NearTies:
    return NearTies((16, 64), (StreamTies(stream_digest(stream), (tuple(narrow), tuple(wide))),))


def test_a_departure_keeps_the_draft_up_to_the_flip_then_takes_the_first_visits_rounds():
    """By hand: one round of 12 drafted all kept, departing at position 4: it keeps 3 (positions
    1-4), and from position 5 the first appearance's rounds that begin there (5, 6-11, 12)."""
    parted = depart((R(12, 11),), FIRST, 4)
    assert parted == (R(12, 3), R(0, 0), R(5, 5), R(0, 0))
    assert _tokens(parted) == _tokens(FIRST) == 13
    # a departure inside one of the first appearance's rounds: plain steps up to the next that begins
    assert depart((R(12, 11),), FIRST, 7) == (R(12, 6), *[R(0, 0)] * 4, R(0, 0))
    assert _tokens(depart((R(12, 11),), FIRST, 7)) == 13
    # a flip on the round's recovered token: the round keeps what it kept
    assert depart((R(2, 2), R(12, 8)), FIRST, 12) == (R(2, 2), R(12, 8))


def test_a_repeat_departs_only_where_its_regime_and_the_first_appearances_disagree():
    stream = TargetStream(3, tuple(range(20)))
    remembered = (R(11, 11),)  # the repeat drafts the whole answer in one round 12 rows wide
    session = SessionReplay((FIRST, remembered), (0, 0))
    # a flip at 4 for passes of 16 rows and more: the first produced 4 in a 4-row pass (the narrowest regime), the repeat too
    assert departed(session, [stream], _ties(stream, narrow=(4,))) == session
    # the same flip only from 64 rows: the repeat's 12-row pass does not reach it either
    assert departed(session, [stream], _ties(stream, wide=(4,))) == session
    # a flip at 2, which the first produced in a one-row step and the repeat in its wide pass: it departs there
    parted = departed(session, [stream], _ties(stream, narrow=(2,)))
    assert parted.requests[0] == FIRST and parted.requests[1] == (R(11, 1), R(3, 1), R(0, 0), R(5, 5), R(0, 0))
    assert _tokens(parted.requests[1]) == 13
    assert departed(session, [stream], None) == session
    other = TargetStream(3, tuple(range(1, 21)))  # ties measured for another stream: nothing to read
    assert departed(session, [stream], _ties(other, narrow=(2,))) == session


def test_ngram_mod_remembering_a_repeated_answer_keeps_it_only_up_to_a_flip():
    """A replayed session: ngram-mod drafts the first repeat's answer in the second; with a flip
    the wide pass gives at position 6 the second repeat keeps fewer tokens, the first none fewer."""
    stream = TargetStream(30, tuple(range(1, 31)) + tuple(range(100, 200)))  # ngram-mod matches 24-grams
    session = replay_session([stream], NGramModRule, repeats=2)
    assert session.requests[1] != session.requests[0]  # the second repeat remembers the first
    kept = sum(item.accepted for item in session.requests[1])
    parted = departed(session, [stream], _ties(stream, narrow=(6,), wide=(6,)))  # its one round is 65 rows wide
    assert parted.requests[0] == session.requests[0]
    assert sum(item.accepted for item in parted.requests[1]) < kept
    assert _tokens(parted.requests[1]) == _tokens(session.requests[1])


def test_widths_must_ascend_and_every_stream_needs_each():
    stream = TargetStream(1, (1, 2, 3))
    with pytest.raises(PolyplanError, match="ascending"):
        NearTies((64, 16), ())
    with pytest.raises(PolyplanError, match="each measured width"):
        NearTies((16, 64), (StreamTies(stream_digest(stream), ((1,),)),))
    ties = _ties(stream, narrow=(2,), wide=(5,))
    assert ties.count() == (1, 1)
    assert not ties.flipped(ties.of(stream), 2, 1)  # a one-row step is the stream itself
    assert ties.flipped(ties.of(stream), 2, 8) and ties.flipped(ties.of(stream), 2, 40) and not ties.flipped(ties.of(stream), 2, 64)
    assert ties.flipped(ties.of(stream), 5, 65) and not ties.flipped(ties.of(stream), 5, 63)


def test_the_check_through_the_bindings_reports_each_streams_flips_at_each_width(tmp_path):
    """`measure_near_ties` on a tiny GGUF's own greedy streams: one entry per stream, found by its
    digest, a tuple of positions for each width, each inside the continuation."""
    pytest.importorskip("llama_cpp")
    from tiny_gguf import write_tiny_gguf

    from polyplan.engines.llama_cpp.prices import decode_greedy_streams
    from polyplan.engines.llama_cpp.wide_flips import measure_near_ties

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    streams = decode_greedy_streams(path, 1, [(1, 5, 9, 13), (2, 7, 7, 7, 3)], 24)
    ties = measure_near_ties(path, 1, streams, (2, 8))
    assert ties.widths == (2, 8) and len(ties.streams) == 2
    for stream, entry in zip(streams, ties.streams):
        assert ties.of(stream) == entry
        answer = len(stream.ids) - stream.prompt_tokens
        assert all(1 <= position < answer for positions in entry.positions for position in positions)
