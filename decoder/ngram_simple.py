"""A rule drafter that drafts only where the stream repeats itself: llama.cpp's `ngram-simple`.

When the last `size_n` tokens occurred before, it drafts the tokens that followed their latest
earlier occurrence, up to the block size asked for; otherwise nothing, and the target takes a
one-token step. The rule is `planner.exact.ngram_replay.NGramSimpleIndex`, so the planner
predicts its rounds exactly by replaying the target's streams. It is a `BlockDrafter`: the
length is decided from the context alone and every draft is one-hot, so the chain stays
lossless; drafts are not added to its context. `forward` serves the profiler's teacher-forced
passes: one-hot rows of the first token it would draft (the position's own token where it
would draft nothing), so its α is the accuracy of its first drafted token.
"""

from __future__ import annotations

import torch

from polyplan.decoder.ngram import one_hot_logits
from polyplan.planner.exact.ngram_replay import NGramSimpleIndex

_PROFILE_SIZE_M = 16  # the block size `forward` assumes when it looks one draft ahead


class NGramSimpleMember:
    """`ngram-simple` over a vocabulary of `vocab_size` tokens (see the module docstring)."""

    eos_token_id: int | None = None
    max_context: int | None = None

    def __init__(self, vocab_size: int, *, size_n: int = 3, name: str = "ngram-simple") -> None:
        self.name = name
        self.vocab_size = vocab_size
        self.valid_vocab_size = vocab_size
        self.size_n = size_n
        self._index = NGramSimpleIndex(size_n)

    @property
    def cache_length(self) -> int:
        return len(self._index)

    def draft_block(self, new_ids: torch.Tensor, limit: int) -> list[int]:
        """Append `new_ids` (`(k,)`, k >= 0) to the context; the up to `limit` tokens drafted after it."""
        for token in new_ids.tolist():
            self._index.append(token)
        return self._index.draft(limit)

    def forward(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        proposals = []
        for token in new_ids.tolist():
            self._index.append(token)
            draft = self._index.draft(_PROFILE_SIZE_M)
            proposals.append(draft[0] if draft else token)
        return one_hot_logits(proposals, self.vocab_size, keep_last)

    def crop(self, length: int) -> None:
        if not 0 <= length <= len(self._index):
            raise ValueError(f"crop({length}) outside [0, {len(self._index)}]")
        self._index.truncate(length)

    def reset(self) -> None:
        self._index = NGramSimpleIndex(self.size_n)

    def token_map(self) -> None:
        return None

    def tokens(self) -> tuple[int, ...]:
        """The token ids in the context."""
        return tuple(self._index.tokens)
