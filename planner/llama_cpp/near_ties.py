"""Near-ties a wide verification pass flips, and what they take from a repeated request's memory.

llama.cpp's CPU kernels compute a batch of many rows along another path than a batch of one (and
another again from some width on), so the target's logits move in their last bits with the
width of the pass. Where the target's two best tokens are nearly tied, the argmax flips: a greedy
answer decoded one token at a time (the target's stream) is not, at that position, what a wide
verification pass gives. `NearTies` keeps, for each stream, the positions where a teacher-forced
pass of each measured width disagrees with the stream (`engines.llama_cpp.wide_flips` measures
them through the bindings).

What it moves: a rule that remembers earlier answers (ngram-mod's table, ngram-cache's dynamic
cache) drafts a repeated prompt's earlier answer whole, in one wide round. Where the earlier
answer produced a position in a pass of one regime (one token, a few drafted) and the repeat
produces it in another, the two disagree at a flip: the repeat's answer departs from the one
remembered there, the draft is rejected from that position on, and the rest of the request is new
text. `departed` replays that on a session: each later appearance of a stream follows its rounds
up to the first position whose regime verdict differs from the first appearance's, keeps the
draft only up to it, and from the next position takes the rounds the first appearance had there
(new text drafted as the stream's own first visit drafted it). The first appearance stands for
the stream as it is (its own flips change words, not how repetitive the text is). A round's
regime is read from its own width (under load the server's batch holds every slot's rows; the
rounds' own widths are a lower bound). Pure.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import TargetStream
from polyplan.planner.exact.ngram_replay import ReplayRound
from polyplan.planner.llama_cpp.ngram_rules import SessionReplay


@dataclass(frozen=True)
class StreamTies:
    """One stream's flips: its tokens' fingerprint (`stream_digest`) and, for each width of
    `NearTies.widths`, the continuation positions (0: the prefill's token) where a pass of that
    width disagrees with the stream."""

    digest: str
    positions: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class NearTies:
    """The flips of the streams a ranking replays, measured at `widths` rows a pass (ascending);
    a round of width b reads the widest measured width it reaches (below the narrowest, the
    narrowest), a one-row step none."""

    widths: tuple[int, ...]
    streams: tuple[StreamTies, ...]

    def __post_init__(self) -> None:
        if not self.widths or list(self.widths) != sorted(set(self.widths)) or self.widths[0] < 2:
            raise PolyplanError(f"near ties: widths must be ascending, distinct and >= 2, got {self.widths}")
        if any(len(item.positions) != len(self.widths) for item in self.streams):
            raise PolyplanError("near ties: every stream needs its flips at each measured width")

    def of(self, stream: TargetStream) -> StreamTies | None:
        """The flips of `stream` (None: not measured for it)."""
        digest = stream_digest(stream)
        return next((item for item in self.streams if item.digest == digest), None)

    def flipped(self, ties: StreamTies, position: int, width: int) -> bool:
        """Whether a pass `width` rows wide gives another token than the stream at `position`."""
        if width <= 1:
            return False
        regime = max((j for j, measured in enumerate(self.widths) if measured <= width), default=0)
        return position in ties.positions[regime]

    def count(self) -> tuple[int, int]:
        """(streams with a flip at some width, streams measured)."""
        return sum(1 for item in self.streams if any(item.positions)), len(self.streams)


def stream_digest(stream: TargetStream) -> str:
    """A stream's identity for `NearTies`: a digest of its prompt length and tokens."""
    text = f"{stream.prompt_tokens};{','.join(map(str, stream.ids))}"
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:32]


def _produced(rounds: Sequence[ReplayRound]) -> dict[int, int]:
    """Each continuation position a request's rounds produce, with the width of the pass that
    produced it (the first token, from the prefill, is left out: both appearances prefill it)."""
    widths, at = {}, 1
    for item in rounds:
        for offset in range(item.accepted + 1):
            widths[at + offset] = item.drafted + 1
        at += item.accepted + 1
    return widths


def _departure(rounds: Sequence[ReplayRound], first: dict[int, int], ties: StreamTies, near: NearTies) -> int | None:
    """The first position where `rounds` and the first appearance (`first`: position to width)
    disagree on a flip; None where they never do."""
    for position, width in sorted(_produced(rounds).items()):
        before = first.get(position)
        if before is not None and near.flipped(ties, position, width) != near.flipped(ties, position, before):
            return position
    return None


def depart(rounds: Sequence[ReplayRound], first: Sequence[ReplayRound], position: int) -> tuple[ReplayRound, ...]:
    """`rounds` departing from the remembered answer at `position`: the round that produces it
    keeps its draft only up to it, and from the next position the request takes the rounds of
    `first` that begin there or later, plain steps up to the first of them."""
    kept, at = [], 1
    for item in rounds:
        if at + item.accepted >= position:
            kept.append(ReplayRound(item.drafted, position - at))
            break
        kept.append(item)
        at += item.accepted + 1
    rest, begin = [], 1
    for item in first:
        if begin > position:
            rest.append(item)
        begin += item.accepted + 1
    resumes = begin - sum(item.accepted + 1 for item in rest)  # where the first of `rest` begins (the end if none)
    return (*kept, *[ReplayRound(0, 0)] * (resumes - position - 1), *rest)


def departed(session: SessionReplay, streams: Sequence[TargetStream], near: NearTies | None) -> SessionReplay:
    """`session` with each later appearance of a stream departing where a flip parts it from the
    first appearance (module docstring); the session itself without `near` or where nothing parts."""
    if near is None:
        return session
    ties_of = {stream: near.of(streams[stream]) for stream in set(session.stream_of)}
    first: dict[int, tuple[ReplayRound, ...]] = {}
    requests = []
    for rounds, stream in zip(session.requests, session.stream_of):
        ties = ties_of[stream]
        if stream not in first or ties is None:
            first.setdefault(stream, rounds)
            requests.append(rounds)
            continue
        position = _departure(rounds, _produced(first[stream]), ties, near)
        requests.append(rounds if position is None else depart(rounds, first[stream], position))
    return SessionReplay(tuple(requests), session.stream_of)
