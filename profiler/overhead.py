"""Measure the decoding loop's own cost, on its own (see `polyplan.planner.overhead`).

The decoder times every member's `forward` (`LevelStats.wall_time_s`); what a `generate`
call spends beyond those passes is its loop: token choice, verification, the host transfer,
cache crops, bookkeeping. Here the loop runs with stand-in members whose forward pass only
returns rows of a fixed logit table, over the chain's vocabulary size and with the plan's
sampling settings, so the loop does exactly its usual work while the models cost nothing:

1. one stand-in alone (plain decoding): loop time / steps = `per_step_s`;
2. a stand-in verifying a stand-in at block size 4, the drafter proposing a rejected token
   at every seventh position (so rounds both accept and reject): (loop time − drafting steps ×
   `per_step_s`) / rounds = `per_round_s`.

Each is the median over repeats, after a warm-up call. Member-specific work the stand-ins
do not do (an HF cache crop costs some tens of microseconds after a rejection) is left out.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from polyplan.decoder.chain import generate
from polyplan.decoder.sampling import Sampling
from polyplan.planner.overhead import LoopOverhead

_BLOCK = 4
_REJECT_EVERY = 7


class StandIn:
    """A chain member whose forward pass returns rows of a fixed logit table (position-periodic).

    Row j of the table has its maximum at `tokens[j]`; position p gets row p mod len(tokens).
    """

    eos_token_id = None
    max_context = None

    def __init__(self, vocab: int, tokens: tuple[int, ...], *, device: str | torch.device = "cpu", name: str = "stand-in") -> None:
        self.name = name
        self.vocab_size = vocab
        self.valid_vocab_size = vocab
        self.device = torch.device(device)
        self._rows = torch.zeros(len(tokens), vocab, device=self.device)  # (period, V)
        self._rows[torch.arange(len(tokens)), torch.tensor(tokens)] = 4.0
        self._period = torch.arange(1 << 16, device=self.device) % len(tokens)  # position -> row
        self._length = 0

    @property
    def cache_length(self) -> int:
        return self._length

    def forward(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        k = new_ids.shape[0]
        rows = self._rows[self._period[self._length : self._length + k]]  # (k, V)
        self._length += k
        return rows if keep_last is None else rows[k - keep_last :]

    def crop(self, length: int) -> None:
        if not 0 <= length <= self._length:
            raise ValueError(f"crop({length}) outside [0, {self._length}]")
        self._length = length

    def reset(self) -> None:
        self._length = 0

    def token_map(self) -> None:
        return None


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector around timed work (a collection is noise)."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _loop_seconds(chain, tokens: int, blocks: tuple[int, ...], sampling: Sampling, seed: int):
    generator = torch.Generator(device=chain[0].device).manual_seed(seed)
    result = generate(chain, [1], max_new_tokens=tokens, block_sizes=blocks, sampling=sampling, generator=generator)
    return result.wall_time_s - sum(level.wall_time_s for level in result.levels), result


def measure_loop_overhead(
    vocab: int,
    *,
    sampling: Sampling = Sampling(),
    device: str | torch.device = "cpu",
    tokens: int = 256,
    repeats: int = 5,
    seed: int = 0,
) -> LoopOverhead:
    """The loop's cost per autoregressive step and per verification round (module docstring).

    Args:
        vocab: the chain's vocabulary size (token choice and verification scan it).
        sampling: the sampling settings the chain will run with.
        device: where the chain's members live.
        tokens: tokens generated per timed call.
        repeats: timed calls per quantity (the median is kept).
    """
    plain = [StandIn(vocab, (0,), device=device)]
    pair = [StandIn(vocab, (0,), device=device, name="verifier"),
            StandIn(vocab, (0,) * (_REJECT_EVERY - 1) + (1,), device=device, name="drafter")]
    steps, rounds = [], []
    with torch.inference_mode(), collector_paused():
        _loop_seconds(plain, tokens, (), sampling, seed)  # warm-up: lazy initialisation
        _loop_seconds(pair, tokens, (_BLOCK,), sampling, seed)
        for repeat in range(repeats):
            seconds, result = _loop_seconds(plain, tokens, (), sampling, seed + repeat)
            steps.append(seconds / result.levels[0].forward_passes)
        per_step = statistics.median(steps)
        for repeat in range(repeats):
            seconds, result = _loop_seconds(pair, tokens, (_BLOCK,), sampling, seed + repeat)
            drafting = result.levels[1].forward_passes * per_step
            rounds.append((seconds - drafting) / result.levels[0].verifications)
    return LoopOverhead(per_step_s=max(per_step, 0.0), per_round_s=max(statistics.median(rounds), 0.0))
