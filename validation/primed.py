"""A chain member whose prompt is already in its cache, so a timed run measures decoding only.

`generate` empties every member's cache and fuses the prefill with the first decoding step; the
exact model predicts the steady state. So each member is primed with all but the last prompt
token (`prime`, timed apart) and `reset` crops back to that prefix instead of emptying the cache:
`generate` reads `cache_length`, so its first pass feeds only the last prompt token (plus any
drafts), as every later step does.
"""

from __future__ import annotations

import time

import torch

from polyplan.decoder.member import ArgmaxForward, BlockDrafter, ChainMember, ConfidentArgmax


class PrimedMember:
    """Wraps a `ChainMember`; `reset` returns to the primed prompt prefix (see the module docstring)."""

    def __init__(self, member: ChainMember) -> None:
        self.member = member
        self.name = member.name
        self.vocab_size = member.vocab_size
        self.valid_vocab_size = member.valid_vocab_size
        self.eos_token_id = member.eos_token_id
        self.max_context = member.max_context
        self.device = getattr(member, "device", torch.device("cpu"))
        self._base = 0
        self._primed: torch.Tensor | None = None  # the prefix of the last prime, while the cache still starts with it
        self._prime_s = 0.0  # what that prime took
        if isinstance(member, BlockDrafter):  # the chain calls it instead of stepping `forward`
            self.draft_block = member.draft_block
        if isinstance(member, ArgmaxForward):  # the chain calls it instead of `forward` when greedy
            self.forward_argmax = member.forward_argmax
        if isinstance(member, ConfidentArgmax):  # a confidence stop reads it when greedy
            self.forward_argmax_confidence = member.forward_argmax_confidence

    def prime(self, prefix: torch.Tensor, sync=lambda: None, reuse: bool = False) -> float:
        """Empty the cache and process `prefix` (shape `(L,)`); returns the seconds it took.
        `reuse`: when the last prime was of the same `prefix`, crop back to it instead (`reset`)
        and return that prime's seconds: the cache then holds what a new prime would give it, and
        a chain run after another on the same prompt skips a prefill that can take seconds. Only
        where nothing else touched the member since (`measure_chains` without `retime`)."""
        if reuse and self._primed is not None and torch.equal(self._primed, prefix):
            self.reset()
            return self._prime_s
        self.member.reset()
        self._base, self._primed = 0, None
        if prefix.shape[0] == 0:
            return 0.0
        sync()
        began = time.perf_counter()
        self.member.forward(prefix.to(self.device), keep_last=1)
        sync()
        elapsed = time.perf_counter() - began
        self._base, self._primed, self._prime_s = int(prefix.shape[0]), prefix.clone(), elapsed
        return elapsed

    @property
    def cache_length(self) -> int:
        return self.member.cache_length

    def forward(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        return self.member.forward(new_ids, keep_last=keep_last)

    def crop(self, length: int) -> None:
        if length < self._base:
            raise ValueError(f"crop({length}) below the primed prompt prefix ({self._base} tokens)")
        self.member.crop(length)

    def reset(self) -> None:
        """Back to the primed prefix (the member's cache keeps the prompt)."""
        if self.member.cache_length > self._base:
            self.member.crop(self._base)
        elif self.member.cache_length < self._base:
            raise ValueError(f"{self.name}: cache of {self.member.cache_length} tokens is shorter than the primed prefix")

    def token_map(self) -> dict[str, int] | None:
        return self.member.token_map()
