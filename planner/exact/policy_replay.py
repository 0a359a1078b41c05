"""A model drafter's draft policy replayed on its agreement sequences: the law of its rounds.

Under greedy decoding a model drafter walks its agreement sequence with the target
deterministically (`planner.exact.runs`). A draft policy (`formats.plan.DraftPolicy`) changes only
how many tokens each round drafts, so the same walk gives its rounds exactly, as the decoder takes them:

- adaptive cap: a round drafts the cap; the cap starts at K and moves after each round by
  `DraftPolicy.next_cap`, restarting with every prompt;
- confidence stop p_min: the drafter drafts while its top probability at the next position is
  >= p_min and fewer than the cap are drafted; a stop below the cap costs one pass more (the pass
  that read the low confidence ran). The confidences are the drafter's along the target's stream
  (`formats.profile.PairAgreement.confidence`); past a round's first disagreement the stream's
  stand in for the drafter's own, which moves only how many doomed tokens are drafted, never how
  many are accepted (docs/cost-model.md, "Draft lengths that adapt").

A round that would reach past the end of a sequence ends that prompt's walk, as in
`planner.exact.runs`; confidences past the end count as high. Only pairs under the target are
replayed: their sequences are measured on the target's own stream. Pure numpy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.formats.options import integer_at_least
from polyplan.formats.plan import DraftPolicy
from polyplan.formats.profile import TargetStream
from polyplan.planner.exact.draft_rounds import DraftRounds
from polyplan.planner.exact.ngram_replay import draft_rounds


@dataclass(frozen=True)
class PolicyRound:
    """One round: tokens drafted, of those accepted, and whether a confidence stop ended it (a
    pass more than drafted)."""

    drafted: int
    accepted: int
    stopped: bool = False


def walk(agreement: Sequence[bool], block: int, policy: DraftPolicy, confidence: Sequence[float] | None = None) -> tuple[PolicyRound, ...]:
    """The rounds a greedy chain target > drafter runs along one agreement sequence (module docstring)."""
    integer_at_least(block, 1, "draft policy replay: block size")
    policy.check_block(block)
    if policy.p_min is not None and confidence is None:
        raise PolyplanError("draft policy replay: p_min needs the drafter's confidences, which the profile does not keep")
    length, position, cap = len(agreement), 0, block
    rounds = []
    while position < length:
        drafted, stopped = cap, False
        if policy.p_min is not None:
            drafted = 0  # past the sequence's end the draft goes on: a round kept below has its first disagreement before
            while drafted < cap and (position + drafted >= length or confidence[position + drafted] >= policy.p_min):
                drafted += 1
            stopped = drafted < cap
        accepted = 0
        while accepted < drafted and position + accepted < length and agreement[position + accepted]:
            accepted += 1
        if accepted < drafted and position + accepted >= length:
            break  # still agreeing where the measurement ends
        rounds.append(PolicyRound(drafted, accepted, stopped))
        cap = policy.next_cap(cap, drafted, accepted)
        position += accepted + 1
    return tuple(rounds)


def model_rounds(sequences: Sequence[Sequence[bool]], block: int, policy: DraftPolicy,
                 confidences: Sequence[Sequence[float]] | None = None) -> DraftRounds:
    """The law of a model drafter's rounds under `policy` at block size `block` (the starting
    cap), counted per sequence (prompt)."""
    if not sequences:
        raise PolyplanError("draft policy replay: no agreement sequences to replay")
    if confidences is not None and len(confidences) != len(sequences):
        raise PolyplanError(f"draft policy replay: {len(confidences)} confidence sequences for {len(sequences)} agreement sequences")
    widest = policy.widest(block)
    counts = np.zeros((len(sequences), widest + 1, widest + 1))
    stops = np.zeros((len(sequences), widest + 1))
    for row, sequence in enumerate(sequences):
        for item in walk(sequence, block, policy, None if confidences is None else confidences[row]):
            counts[row, item.drafted, item.accepted] += 1
            stops[row, item.drafted] += item.stopped
    if counts.sum() == 0:
        raise PolyplanError("draft policy replay: no complete round in the measured sequences")
    return DraftRounds(counts, model_drafter=True, stops=stops)


def replayed_rounds(pair: tuple[str, str], block: int, policy: DraftPolicy, rule_drafters: Mapping[str, int],
                    streams: Sequence[TargetStream], runs: Mapping[tuple[str, str], Sequence[Sequence[bool]]],
                    confidences: Mapping[tuple[str, str], Sequence[Sequence[float]]]) -> tuple[DraftRounds, int]:
    """A last drafter's rounds from block size `block` under `policy`, and the prompts they come
    from: a rule drafter's (`rule_drafters`: size_n by name) replayed on the target's `streams`, a
    model drafter's on the pair's agreement sequences in `runs`, with its `confidences`."""
    verifier, drafter = pair
    if drafter in rule_drafters:
        return draft_rounds(streams, rule_drafters[drafter], block, policy=policy), len(streams)
    sequences = runs.get(pair)
    if sequences is None:
        raise PolyplanError(f"{verifier} > {drafter}: a draft policy is replayed on agreement runs, and the profile has none")
    return model_rounds(sequences, block, policy, confidences.get(pair)), len(sequences)
