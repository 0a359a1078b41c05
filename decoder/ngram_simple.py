"""A rule drafter that drafts only where the stream repeats itself: llama.cpp's `ngram-simple`.

When the last `size_n` tokens occurred before, it drafts the tokens that followed their latest
earlier occurrence, up to the block size the chain asks for (llama.cpp's size_m); otherwise it
drafts nothing, and the target takes a plain one-token step. The rule is
`planner.exact.ngram_replay.NGramSimpleIndex`, so the planner predicts this member's rounds exactly by
replaying the target's streams, and `export --engine llama.cpp` hands the same drafter to
llama-server.

Unlike a model drafter it proposes a whole block at once (`draft_block`, the chain's
`BlockDrafter` protocol) and its drafts are not added to its context: what stays there is what
the chain committed. Drafting a variable number of tokens keeps the chain lossless: the length
is decided from the context alone, before the verifier runs, and every drafted token is a
one-hot proposal (p(x) = 1), accepted with probability q(x) and recovered from q without x.

`forward` serves the profiler's teacher-forced passes: one-hot rows of the first token it would
draft after each position (the position's own token when it would draft nothing), so its α is
the accuracy of its first drafted token where it drafts.
"""

from __future__ import annotations

import torch

from polyplan.decoder.ngram import one_hot_logits
from polyplan.planner.exact.ngram_replay import NGramSimpleIndex

PROFILE_SIZE_M = 16  # the block size `forward` assumes when it looks one draft ahead


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
            draft = self._index.draft(PROFILE_SIZE_M)
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
