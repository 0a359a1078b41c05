"""A draft model's rounds in llama-server, replayed on the pair's greedy agreement sequences.

Under greedy decoding llama-server's `draft-simple` (the pinned build's common/speculative.cpp)
walks the target's own stream deterministically: after the token a round's verification sampled,
the draft model drafts while it is confident (`--spec-draft-p-min`, its top probability over its
10 best logits) and fewer than n-max tokens are drafted, never more than the request's tokens left
minus one (the server's n_draft_max); the target keeps the draft up to its first disagreement. The
pair's agreement sequence (position i: whether the draft model's argmax on the stream's first i
continuation tokens is the target's) and the confidences the profile keeps along it give every
round exactly as the server runs it on that prompt, as `ngram_rules.replay_request` gives an n-gram
rule's; the first token comes from the prefill. Past a round's first disagreement the stream's
confidences stand in for the draft model's own (as in `planner.exact.policy_replay`): that moves
how many doomed tokens are drafted, never how many are kept.

A round's passes are what its slot adds to the server's batched draft (one draft-model decode of
one row per drafting slot and step): one per drafted token, one more where the confidence stop
read a token it did not draft, none where nothing may be drafted. The simulation under load
(`planner.llama_cpp.under_load.simulate_load`) prices the batched passes from these. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import Profile, TargetStream
from polyplan.planner.exact.ngram_replay import ReplayRound
from polyplan.planner.exact.runs import profile_runs
from polyplan.planner.llama_cpp.ngram_rules import SessionReplay

GREEDY = "greedy"


@dataclass(frozen=True)
class ModelRound(ReplayRound):
    """A draft model's round: drafted, accepted, and whether a confidence stop ended it."""

    stopped: bool = False

    @property
    def passes(self) -> int:
        """Draft-model passes of this round's slot (module docstring)."""
        return self.drafted + int(self.stopped)


def server_rounds(agreement: Sequence[bool], confidence: Sequence[float] | None, k: int, p_min: float | None,
                  total: int) -> tuple[ModelRound, ...]:
    """The rounds llama-server runs with a draft model at n-max `k` and confidence stop `p_min`
    (None: none) for a request decoding `total` tokens of a stream whose agreement sequence and
    confidences are given (module docstring).

    Raises:
        PolyplanError: `k` < 1, a stop without confidences, or sequences shorter than `total`.
    """
    if k < 1:
        raise PolyplanError(f"draft-model replay: n-max must be >= 1, got {k}")
    if p_min is not None and confidence is None:
        raise PolyplanError("draft-model replay: a confidence stop needs the draft model's confidences (re-run polyplan profile)")
    if len(agreement) < total or (confidence is not None and len(confidence) < total):
        raise PolyplanError(f"draft-model replay: {len(agreement)} agreement positions for a request of {total} tokens")
    generated, rounds = 1, []
    while generated < total:
        cap = min(k, total - generated - 1)  # the server's n_draft_max: n_remaining - 1
        drafted = cap
        if p_min is not None:
            drafted = 0
            while drafted < cap and confidence[generated + drafted] >= p_min:
                drafted += 1
        accepted = 0
        while accepted < drafted and agreement[generated + accepted]:
            accepted += 1
        rounds.append(ModelRound(drafted, accepted, stopped=cap > 0 and drafted < cap))
        generated += accepted + 1
    return tuple(rounds)


def draft_sessions(profile: Profile, target: str, drafter: str, k: int, p_min: float | None,
                   streams: Sequence[TargetStream], new_tokens: int | None, repeats: int,
                   orders: Sequence[Sequence[int]]) -> tuple[SessionReplay, ...]:
    """One session per request order (the stream numbers in the order served, the whole list
    `repeats` times), each request the draft model's `server_rounds` on its stream's agreement
    sequence (its first `new_tokens` tokens; all when None). `profile`: the view whose
    confidences are the server's (`planner.llama_cpp.policy.server_view`).

    Raises:
        PolyplanError: the profile keeps no greedy agreement sequences for the pair, or not one
            per stream, or no confidences where `p_min` asks for them.
    """
    sequences = profile_runs(profile, GREEDY).get((target, drafter))
    if not sequences or len(sequences) != len(streams):
        raise PolyplanError(f"{target} > {drafter}: the profile keeps no greedy agreement sequence for each of its "
                            f"{len(streams)} target streams (re-run polyplan profile)")
    entry = profile.acceptance_runs.get(GREEDY)
    confidences = None if entry is None else entry.confidences_by_pair().get((target, drafter))
    per_stream = []
    for number, stream in enumerate(streams):
        generated = len(stream.ids) - stream.prompt_tokens
        total = generated if new_tokens is None else min(new_tokens, generated)
        per_stream.append(server_rounds(sequences[number], None if confidences is None else confidences[number],
                                        k, p_min, total) if total >= 1 else ())
    sessions = []
    for order in orders:
        served = [number for _ in range(repeats) for number in order]
        sessions.append(SessionReplay(tuple(per_stream[number] for number in served), tuple(served)))
    return tuple(sessions)
