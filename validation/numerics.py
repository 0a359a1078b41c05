"""Greedy outputs that part at a near-tie which the target itself resolves both ways
(docs/validation.md, "Greedy equality and near-ties").

A chain reads the target in k-token passes, target-only decoding in one-token steps, and some
engines compute logits differently in the two batch shapes. Where a chain parts from target-only
decoding, `near_ties` holds the target's tie margin there (`tie_margin`) against its batch-shape
noise on that text (`batch_shape_noise`): every parting within the noise makes the chain a
`NearTie`, measured; a margin above it is a real difference and the chain stays lossy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from polyplan.decoder.member import ChainMember
from polyplan.validation.results import ChainSpec, RunRecord, parting

_NOISE_WINDOWS = 4  # passes compared with one-token steps, spread over the output


@dataclass(frozen=True)
class NearTie:
    """A chain whose greedy output parted from target-only decoding only at near-ties."""

    runs: int  # runs that parted
    worst_margin: float  # the largest tie margin among them (logits)
    noise: float  # the target's batch-shape noise it was held against (logits)
    width: int  # the pass width the noise was measured at

    def line(self) -> str:
        return (f"{self.runs} run(s) part from target-only decoding at near-ties: the target's two tokens at most "
                f"{self.worst_margin:.3g} apart in a logit, within the {self.noise:.3g} its logits move between one-token "
                f"steps and {self.width}-token passes")


def _logits(member: ChainMember, ids: torch.Tensor, keep_last: int) -> torch.Tensor:
    return member.forward(ids, keep_last=keep_last)[:, : member.valid_vocab_size].float()


def tie_margin(member: ChainMember, context: torch.Tensor, first: int, second: int) -> float:
    """|logit(first) − logit(second)| of `member` after `context` (`(L,)`), read in a one-token
    step after the rest of the context was prefilled (as target-only decoding reads it)."""
    member.reset()
    if context.shape[0] > 1:
        member.forward(context[:-1], keep_last=1)
    row = _logits(member, context[-1:], 1)[0]
    member.reset()
    return float((row[first] - row[second]).abs())


def batch_shape_noise(member: ChainMember, ids: torch.Tensor, start: int, width: int) -> float:
    """The largest |logit difference| between one-token steps and one pass of `width` tokens
    over the same positions of `ids` (`(L,)`), over `_NOISE_WINDOWS` windows from `start` on."""
    last = ids.shape[0] - width
    if width < 2 or last < start:
        return 0.0
    starts = sorted({start + (last - start) * i // max(_NOISE_WINDOWS - 1, 1) for i in range(_NOISE_WINDOWS)})
    worst = 0.0
    for begin in starts:
        member.reset()
        member.forward(ids[:begin], keep_last=1)
        steps = torch.cat([_logits(member, ids[begin + j:begin + j + 1], 1) for j in range(width)])  # (width, V)
        member.crop(begin)
        batched = _logits(member, ids[begin:begin + width], width)  # (width, V)
        worst = max(worst, float((steps - batched).abs().max()))
    member.reset()
    return worst


def near_ties(
    specs: Sequence[ChainSpec],
    records: Sequence[RunRecord],
    baseline: int,
    target: ChainMember,
    prompts: Sequence[Sequence[int]],
) -> dict[int, NearTie]:
    """The chains (by index into `specs`) whose every parting from the target-only runs of the
    same prompt and repeat is a near-tie (module docstring); chains that never part are left out,
    and so is a chain with a run that only stopped earlier or later (no two tokens to compare)."""
    base = {(run.repeat, run.prompt): run for run in records if run.chain == baseline}
    margins: dict[tuple, float] = {}
    found: dict[int, NearTie] = {}
    device = getattr(target, "device", torch.device("cpu"))
    with torch.inference_mode():
        for index, spec in enumerate(specs):
            if index == baseline or len(spec.planned.chain) == 1:
                continue
            parted, lengths_differ = [], False
            for run in (run for run in records if run.chain == index):
                reference = base[(run.repeat, run.prompt)].token_ids
                position = parting(reference, run.token_ids)
                if position is None:
                    continue
                if position >= min(len(reference), len(run.token_ids)):  # one stopped early: no two tokens to compare
                    lengths_differ = True
                    break
                parted.append((run.prompt, reference, position, run.token_ids[position]))
            if lengths_differ or not parted:
                continue
            worst = 0.0
            for prompt, reference, position, token in parted:
                key = (prompt, tuple(reference[:position + 1]), token)
                if key not in margins:
                    context = torch.tensor(list(prompts[prompt]) + list(reference[:position]), dtype=torch.int64, device=device)
                    margins[key] = tie_margin(target, context, reference[position], token)
                worst = max(worst, margins[key])
            width = spec.planned.block_sizes[0] + 1
            prompt, reference, _, _ = parted[0]
            text = torch.tensor(list(prompts[prompt]) + list(reference), dtype=torch.int64, device=device)
            noise = batch_shape_noise(target, text, len(prompts[prompt]), width)
            if worst <= noise:
                found[index] = NearTie(len(parted), worst, noise, width)
    return found
