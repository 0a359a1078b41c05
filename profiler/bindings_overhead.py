"""What the Python bindings add to a llama.cpp member's forward, against llama.cpp's own timer.

A forward of one token through `LlamaCppMember` should cost what llama.cpp's decode of one token
costs: the member fills a batch, calls `llama_decode` and copies one row of logits. This times
`steps` such forwards on the wall clock and reads llama.cpp's own decode time for the same calls
(`llama_perf_context`), so the difference is exactly the bindings' and polyplan's per-call work.
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
