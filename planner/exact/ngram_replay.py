"""llama.cpp's `ngram-simple` drafter replayed on the target's own greedy streams.

`ngram-simple` drafts only when the last `size_n` tokens (the sampled one included) occurred
before, and then copies up to `size_m` tokens that followed that occurrence, so its speed depends
on how often the stream repeats itself, which an acceptance rate α does not say. The replay mirrors
`common_ngram_simple_draft` of the pinned llama.cpp (common/ngram-map.cpp) and the server's round;
greedy decoding makes the target's continuation the stream the profile recorded
(`formats.profile.TargetStream`), so the replay is exact up to numerics. polyplan's own
`ngram-simple` member (`decoder.ngram_simple`) drafts by the same rule with the chain's block size
as size_m (`chain_rounds`). docs/cost-model.md, "Rule drafters replayed". Pure: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.formats.options import integer_at_least
from polyplan.formats.plan import FIXED_DRAFTS, DraftPolicy
from polyplan.formats.profile import Profile, TargetStream
from polyplan.planner.exact.cost_model import ChainPrediction
from polyplan.planner.exact.draft_rounds import DraftRounds
from polyplan.planner.llama_cpp.server_loop import NGRAM, NO_SERVER_LOOP, ServerLoop

LLAMA_CPP_DEFAULT_SIZES = (12, 48)  # --spec-ngram-simple-size-n / -size-m when not given (common/common.h)


def target_streams(profile: Profile) -> tuple[TargetStream, ...]:
    """The target's greedy streams the profile keeps beside its agreement runs (none in a
    profile made before they were kept)."""
    runs = profile.acceptance_runs.get("greedy")
    return runs.streams if runs is not None else ()


def ngram_simple_sizes(profile: Profile) -> dict[str, int]:
    """size_n of every `ngram-simple` drafter of the profile, by name."""
    return {model.name: model.ngram_simple for model in profile.models if model.ngram_simple}


def ngram_simple_draft(history: Sequence[int], sampled: int, size_n: int, size_m: int) -> list[int]:
    """The draft `ngram-simple` proposes after `history` and the `sampled` token, by llama.cpp's
    literal backward scan (the reference `NGramSimpleIndex` is tested against): at most `size_m`
    tokens after the latest earlier occurrence of the last `size_n` tokens; empty when there is
    none (position 0 never matches), when the history is shorter than size_n + size_m + 2 tokens,
    or when fewer than `size_n` tokens could be copied."""
    length = len(history)
    if length <= size_n + size_m + 1:
        return []
    pattern = list(history[length - size_n + 1:]) + [sampled]
    match = 0
    for start in range(length - size_n - 1, 0, -1):
        if list(history[start:start + size_n]) == pattern:
            match = start
            break
    if match == 0:
        return []
    copy = min(size_m, length - (match + size_n))
    if copy < size_n:
        return []
    return list(history[match + size_n:match + size_n + copy])


class NGramSimpleIndex:
    """A growing token history with the starts of each of its `size_n`-grams: `draft` gives what
    `ngram_simple_draft(tokens[:-1], tokens[-1], size_n, size_m)` gives, without scanning the
    history (one dictionary look-up, then a walk over the latest starts of that n-gram)."""

    def __init__(self, size_n: int) -> None:
        integer_at_least(size_n, 1, "ngram-simple: size_n")
        self.size_n = size_n
        self.tokens: list[int] = []
        self._starts: dict[tuple[int, ...], list[int]] = {}  # n-gram -> its start positions, ascending

    def __len__(self) -> int:
        return len(self.tokens)

    def append(self, token: int) -> None:
        tokens = self.tokens
        tokens.append(token)
        if len(tokens) >= self.size_n:
            self._starts.setdefault(tuple(tokens[-self.size_n:]), []).append(len(tokens) - self.size_n)

    def truncate(self, length: int) -> None:
        """Keep the first `length` tokens."""
        tokens = self.tokens
        if not 0 <= length <= len(tokens):
            raise PolyplanError(f"ngram-simple: truncate({length}) outside [0, {len(tokens)}]")
        while len(tokens) > length:
            if len(tokens) >= self.size_n:
                key = tuple(tokens[-self.size_n:])
                starts = self._starts[key]
                starts.pop()  # the n-gram ending at the last token is its latest occurrence
                if not starts:
                    del self._starts[key]
            tokens.pop()

    def draft(self, size_m: int) -> list[int]:
        """The tokens `ngram-simple` (size_n, size_m) drafts after the history."""
        size_n, tokens = self.size_n, self.tokens
        length = len(tokens) - 1  # the history, without the sampled (last) token
        if length <= size_n + size_m + 1:
            return []
        starts = self._starts.get(tuple(tokens[-size_n:]), ())
        latest = length - size_n - 1  # the latest start llama.cpp's backward scan looks at
        match = next((start for start in reversed(starts) if start <= latest), 0)
        if match == 0:  # none, or only at position 0 (never a match)
            return []
        copy = min(size_m, length - (match + size_n))
        if copy < size_n:
            return []
        return tokens[match + size_n:match + size_n + copy]


@dataclass(frozen=True)
class ReplayRound:
    """One server round: the draft length L and how many of its tokens the target accepted."""

    drafted: int
    accepted: int


def replay_stream(stream: TargetStream, size_n: int, size_m: int, new_tokens: int | None = None) -> tuple[ReplayRound, ...]:
    """The rounds llama-server runs with `ngram-simple` (size_n, size_m) to generate the
    stream's continuation greedily (its first `new_tokens`; all of it when None): the first
    token comes from the prefill, and a draft never runs past the tokens left to generate (the
    server's n_draft_max)."""
    if size_n < 1 or size_m < 1:
        raise PolyplanError(f"ngram-simple: size_n and size_m must be >= 1, got {size_n}, {size_m}")
    continuation = stream.ids[stream.prompt_tokens:]
    total = len(continuation) if new_tokens is None else min(new_tokens, len(continuation))
    if total < 1:
        return ()
    index = NGramSimpleIndex(size_n)
    for token in stream.ids[:stream.prompt_tokens + 1]:
        index.append(token)
    return _rounds(index, continuation, 1, total, size_m, total)


def _rounds(index: NGramSimpleIndex, continuation: Sequence[int], generated: int, total: int, size_m: int,
            end: int, policy: DraftPolicy = FIXED_DRAFTS) -> tuple[ReplayRound, ...]:
    """Rounds from `generated` tokens of `continuation` until `total`: draft after the index's
    tokens (its last one the sampled token), at most up to `end` (the draft keeps one token of
    room for the target's own), accept the prefix the target's stream agrees with, and append
    the accepted tokens and the target's next one. `policy`'s adaptive cap moves size_m after
    each round (`DraftPolicy.next_cap`)."""
    rounds = []
    while generated < total:
        draft = index.draft(size_m)[: end - generated - 1]
        accepted = 0
        while accepted < len(draft) and draft[accepted] == continuation[generated + accepted]:
            accepted += 1
        rounds.append(ReplayRound(len(draft), accepted))
        size_m = policy.next_cap(size_m, len(draft), accepted)
        for token in continuation[generated:generated + accepted + 1]:
            index.append(token)
        generated += accepted + 1
    return tuple(rounds)


def replay_prediction(streams: Sequence[TargetStream], size_n: int, size_m: int, step: Callable[[int], float],
                      new_tokens: int | None = None, loop: ServerLoop = NO_SERVER_LOOP) -> ChainPrediction:
    """The exact model's prediction of `ngram-simple` over `streams`, pooled: the time of every
    round (`step(k)`: the target's T(k), and llama-server's own costs `loop`,
    `planner.llama_cpp.server_loop`) against one T(1) per token (and the server's per-round cost;
    each stream one request on both sides). Level 1's drafted pmf is the distribution of draft
    lengths over the rounds (0: no draft, a plain step)."""
    rounds = [item for stream in streams for item in replay_stream(stream, size_n, size_m, new_tokens)]
    if not rounds:
        raise PolyplanError("ngram-simple: the profile's target streams are too short to replay")
    tokens = sum(item.accepted + 1 for item in rounds)
    fixed = loop.per_request_s * len(streams)
    seconds = fixed + sum(step(item.drafted + 1) + loop.round_s(item.drafted, NGRAM) for item in rounds)
    drafted = sum(item.drafted for item in rounds)
    accepted = sum(item.accepted for item in rounds)
    cost = seconds / tokens
    pmf = [0.0] * (max(item.drafted for item in rounds) + 1)
    for item in rounds:
        pmf[item.drafted] += 1.0 / len(rounds)
    return ChainPrediction(
        cost_per_token=cost,
        speedup=(fixed + (step(1) + loop.per_round_s) * tokens) / seconds,
        forwards_per_token=(len(rounds) / tokens,),
        time_per_token=(cost,),
        tokens_per_verification=(tokens / len(rounds),),
        drafted_per_verification=(drafted / len(rounds),),
        wasted_per_verification=((drafted - accepted) / len(rounds),),
        drafted_pmf=(tuple(pmf),),
    )


def chain_rounds(stream: TargetStream, size_n: int, block: int, new_tokens: int | None = None,
                 policy: DraftPolicy = FIXED_DRAFTS) -> tuple[ReplayRound, ...]:
    """The rounds polyplan's chain target > ngram-simple(size_n) runs at block size `block` (or
    `policy`'s adaptive cap starting there) to generate the stream's continuation greedily (its
    first `new_tokens`; None: all): the first round drafts after the prompt, whose last token is its
    sampled one. A draft running past the recorded stream is cut where the stream ends (the stream
    cannot say what the target would have done there)."""
    integer_at_least(block, 1, "ngram-simple: block size")
    continuation = stream.ids[stream.prompt_tokens:]
    total = len(continuation) if new_tokens is None else min(new_tokens, len(continuation))
    index = NGramSimpleIndex(size_n)
    for token in stream.ids[:stream.prompt_tokens]:
        index.append(token)
    return _rounds(index, continuation, 0, total, block, len(continuation), policy)


def draft_rounds(streams: Sequence[TargetStream], size_n: int, block: int, new_tokens: int | None = None,
                 policy: DraftPolicy = FIXED_DRAFTS) -> DraftRounds:
    """The law of the chain's rounds (`chain_rounds`) over `streams`, counted per stream
    (`policy`: an adaptive cap starting at `block`)."""
    if not streams:
        raise PolyplanError("ngram-simple: the profile holds no target streams to replay (re-run polyplan profile)")
    widest = policy.widest(block)
    counts = np.zeros((len(streams), widest + 1, widest + 1))
    for row, stream in enumerate(streams):
        for item in chain_rounds(stream, size_n, block, new_tokens, policy):
            counts[row, item.drafted, item.accepted] += 1
    if counts.sum() == 0:
        raise PolyplanError("ngram-simple: the profile's target streams are too short to replay")
    return DraftRounds(counts)
