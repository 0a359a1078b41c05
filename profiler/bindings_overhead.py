"""What the Python bindings add to a llama.cpp member's forward, against llama.cpp's own timer.

This times one-token forwards of a `LlamaCppMember` on the wall clock and reads llama.cpp's own
decode time for the same calls (`llama_perf_context`): the difference is the bindings' and
polyplan's per-call work (filling a batch, copying a row of logits).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch


@dataclass(frozen=True)
class BindingsOverhead:
    """Mean seconds per one-token forward: on the wall clock and inside llama.cpp's decode."""

    member: str
    steps: int
    forward_s: float
    llama_decode_s: float

    @property
    def relative(self) -> float:
        """The bindings' share: forward / llama.cpp's decode − 1."""
        return self.forward_s / self.llama_decode_s - 1.0 if self.llama_decode_s > 0 else float("nan")


def measure_bindings_overhead(member, prompt_ids: Sequence[int], steps: int = 32) -> BindingsOverhead:
    """Decode `prompt_ids`, then `steps` single greedy tokens, timing each forward."""
    member.reset()
    logits = member.forward(torch.tensor(list(prompt_ids)), keep_last=1)
    member.reset_eval_time()
    total = 0.0
    for _ in range(steps):
        token = torch.tensor([int(logits[-1].argmax())])
        start = time.perf_counter()
        logits = member.forward(token, keep_last=1)
        total += time.perf_counter() - start
    inside_ms, calls = member.eval_time_ms()
    member.reset()
    return BindingsOverhead(member.name, steps, total / steps, inside_ms / 1000.0 / max(calls, 1))
