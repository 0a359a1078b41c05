"""llama.cpp's `ngram-simple` as a `BlockDrafter`: where the last `size_n` tokens occurred before,
it drafts what followed their latest occurrence, else nothing. The rule is
`planner.exact.ngram_replay.NGramSimpleIndex`, which the planner replays exactly. The length depends
on the context alone and every draft is one-hot, so the chain stays lossless. `forward` serves the
profiler's teacher-forced passes: one-hot rows of the first token it would draft (the position's
own token where none), so its α is the accuracy of its first drafted token.
"""

from __future__ import annotations

import torch

from polyplan.decoder.ngram import RuleDrafter, one_hot_logits
from polyplan.planner.exact.ngram_replay import NGramSimpleIndex

_PROFILE_SIZE_M = 16  # the block size `forward` assumes when it looks one draft ahead


class NGramSimpleMember(RuleDrafter):
    """`ngram-simple` over a vocabulary of `vocab_size` tokens."""

    def __init__(self, vocab_size: int, *, size_n: int = 3, name: str = "ngram-simple") -> None:
        super().__init__(vocab_size, name)
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

    def tokens(self) -> tuple[int, ...]:
        """The token ids in the context."""
        return tuple(self._index.tokens)
