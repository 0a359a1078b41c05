"""Measure the decoding loop's own cost, on its own (see `polyplan.planner.exact.overhead`).

What a `generate` call spends beyond its members' timed forward passes is its loop: token choice,
verification, the host transfer, cache crops, bookkeeping. Here the loop runs with stand-in
members whose forward pass only returns rows of a fixed logit table, over the chain's vocabulary
and sampling settings, so the loop does its usual work while the models cost nothing: one
stand-in decoding alone (steps only), and a stand-in verifying a stand-in that proposes a rejected
token at every `_REJECT_EVERY`-th position, at block sizes 1, 2, 4 and 8 (steps and rounds in
other proportions). Loop time = steps × `per_step_s` + rounds × `per_round_s` is fitted by
non-negative least squares (`planner.exact.overhead.fit_loop_costs`) to each configuration's
median, after a warm-up call of each. Member-specific work the stand-ins do not do (an HF cache
crop after a rejection) is left out.
"""

from __future__ import annotations

import statistics

import torch

from polyplan.decoder.chain import generate
from polyplan.decoder.sampling import Sampling
from polyplan.planner.exact.overhead import fit_loop_costs
from polyplan.formats.overhead import LoopOverhead
from polyplan.profiler.forward_timing import collector_paused

_BLOCK = 4
_REJECT_EVERY = 7


STAND_IN_STEP_S = 0.020  # a target step this long makes the loop's own cost a rounding error: calibrated around stand-ins (docs/profiling.md)


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
    verifier=None,
) -> LoopOverhead:
    """The loop's cost per autoregressive step and per verification round (module docstring):
    each configuration `repeats` times, interleaved; a fit over all of them rather than one
    subtraction of two noisy medians, which can go negative on a busy machine.

    `vocab`, `sampling` and `device` are the chain's; `tokens` are generated per timed call.
    `verifier`: a real chain member (normally the target) to decode and verify with instead of a
    stand-in: its passes are still excluded, but the loop then runs as it does around real passes
    (its cache crops, its own code and data evicted by each pass). Its cache is reset afterwards.
    """
    top = StandIn(vocab, (0,), device=device, name="verifier") if verifier is None else verifier
    plain = [top]
    pair = [top, StandIn(vocab, (0,) * (_REJECT_EVERY - 1) + (1,), device=device, name="drafter")]
    configurations = [(plain, ())] + [(pair, (k,)) for k in (1, 2, _BLOCK, 8)]
    loops: list[list[float]] = [[] for _ in configurations]
    counts: list[tuple[int, int]] = []
    with torch.inference_mode(), collector_paused():
        for chain, blocks in configurations:  # warm-up (lazy initialisation) and the counts
            _, result = _loop_seconds(chain, tokens, blocks, sampling, seed)
            levels = result.levels
            counts.append((levels[-1].forward_passes, levels[0].verifications if len(levels) > 1 else 0))
        for repeat in range(repeats):
            for index, (chain, blocks) in enumerate(configurations):
                seconds, _ = _loop_seconds(chain, tokens, blocks, sampling, seed)
                loops[index].append(seconds)
    top.reset()
    per_step, per_round = fit_loop_costs(counts, [statistics.median(times) for times in loops])  # counts: steps, rounds
    return LoopOverhead(per_step_s=float(per_step), per_round_s=float(per_round))
