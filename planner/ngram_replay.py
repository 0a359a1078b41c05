"""llama.cpp's `ngram-simple` drafter replayed on the target's own greedy streams.

polyplan's n-gram member (`decoder.ngram`) proposes a token at every position, falling back to
shorter n-grams; its α is what the exact model reads. llama.cpp's `ngram-simple` is another
drafter: it drafts only when the last `size_n` tokens (the sampled one included) occurred
before, and then copies up to `size_m` tokens that followed that earlier occurrence (fewer when
the history ends first, none when fewer than `size_n` could be copied). A round without a
draft is a plain one-token step; a round with L drafts is one target pass over L + 1 tokens.
So its speed depends on how often the stream repeats itself, which α does not say: predicted
with α, an exported `ngram-simple` configuration was 40% below the speed measured in
llama-server on gemma-3-270m.

This module mirrors `common_ngram_simple_draft` of the pinned llama.cpp (common/ngram-map.cpp,
llama-cpp-python 0.3.36) and the server's round: after the prompt, the first token comes from
the prefill (the same in every configuration, left out); then each round drafts from the
history (prompt and accepted tokens, without the sampled one) and the sampled token, the
target verifies `[sampled] + draft` in one pass, the longest prefix of the draft equal to the
target's own continuation is accepted, and the target's next token is the new sampled one.
Greedy decoding makes the target's continuation the stream the profile recorded
(`formats.profile.TargetStream`), so the replay is exact up to numerics: which rounds draft,
how long the drafts are and how many tokens are accepted. Time comes from the target's latency
curve: target only spends T(1) per token, a round T(L + 1). Pure: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import TargetStream
from polyplan.planner.cost_model import ChainPrediction

LLAMA_CPP_DEFAULT_SIZES = (12, 48)  # --spec-ngram-simple-size-n / -size-m when not given (common/common.h)


def ngram_simple_draft(history: Sequence[int], sampled: int, size_n: int, size_m: int) -> list[int]:
    """The draft `ngram-simple` proposes after `history` (the tokens before the sampled one)
    and `sampled`: the tokens after the latest earlier occurrence of the last `size_n` tokens
    (`sampled` included), at most `size_m`; empty when there is none, when the history is
    shorter than size_n + size_m + 2 tokens, or when fewer than `size_n` tokens could be copied.
    Position 0 of the history never counts as a match (as in llama.cpp)."""
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


@dataclass(frozen=True)
class ReplayRound:
    """One server round: the draft length L and how many of its tokens the target accepted."""

    drafted: int
    accepted: int


def replay_stream(stream: TargetStream, size_n: int, size_m: int, new_tokens: int | None = None) -> tuple[ReplayRound, ...]:
    """The rounds llama-server runs with `ngram-simple` (size_n, size_m) to generate the
    stream's continuation greedily (its first `new_tokens`; all of it when None)."""
    if size_n < 1 or size_m < 1:
        raise PolyplanError(f"ngram-simple: size_n and size_m must be >= 1, got {size_n}, {size_m}")
    continuation = stream.ids[stream.prompt_tokens:]
    total = len(continuation) if new_tokens is None else min(new_tokens, len(continuation))
    if total < 1:
        return ()
    history = list(stream.ids[:stream.prompt_tokens])
    sampled, generated = continuation[0], 1
    rounds = []
    while generated < total:
        draft = ngram_simple_draft(history, sampled, size_n, size_m)[: total - generated - 1]  # the server's n_draft_max
        accepted = 0
        while accepted < len(draft) and draft[accepted] == continuation[generated + accepted]:
            accepted += 1
        rounds.append(ReplayRound(len(draft), accepted))
        history += [sampled] + draft[:accepted]
        sampled = continuation[generated + accepted]
        generated += accepted + 1
    return tuple(rounds)


def replay_prediction(streams: Sequence[TargetStream], size_n: int, size_m: int, step: Callable[[int], float],
                      new_tokens: int | None = None) -> ChainPrediction:
    """The exact model's prediction of `ngram-simple` over `streams`, pooled: the time of every
    round (`step(k)`: the target's T(k)) against one T(1) per token. Level 1's drafted pmf is
    the distribution of draft lengths over the rounds (0: no draft, a plain step)."""
    rounds = [item for stream in streams for item in replay_stream(stream, size_n, size_m, new_tokens)]
    if not rounds:
        raise PolyplanError("ngram-simple: the profile's target streams are too short to replay")
    tokens = sum(item.accepted + 1 for item in rounds)
    seconds = sum(step(item.drafted + 1) for item in rounds)
    drafted = sum(item.drafted for item in rounds)
    accepted = sum(item.accepted for item in rounds)
    cost = seconds / tokens
    pmf = [0.0] * (max(item.drafted for item in rounds) + 1)
    for item in rounds:
        pmf[item.drafted] += 1.0 / len(rounds)
    return ChainPrediction(
        cost_per_token=cost,
        speedup=step(1) / cost,
        forwards_per_token=(len(rounds) / tokens,),
        time_per_token=(cost,),
        tokens_per_verification=(tokens / len(rounds),),
        drafted_per_verification=(drafted / len(rounds),),
        wasted_per_verification=((drafted - accepted) / len(rounds),),
        drafted_pmf=(tuple(pmf),),
    )
