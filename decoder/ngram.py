"""A model-free drafter: prompt lookup (n-gram matching against the context so far).

After each position it proposes, one-hot, the token that followed the most recent earlier
occurrence of the longest suffix n-gram (n from `max_n` down to `min_n`), or the last token
again without a match. One-hot proposals are a valid drafter distribution p at any temperature:
x is accepted with probability q(x), and a rejection recovers from q without x.
"""

from __future__ import annotations

import math

import torch


def one_hot_logits(proposals: list[int], vocab_size: int, keep_last: int | None = None) -> torch.Tensor:
    """Logits `(kept, V)` of one-hot proposals (0 at the proposed token, -inf elsewhere), the
    last `keep_last` of them (all when None)."""
    if keep_last is not None:
        proposals = proposals[len(proposals) - keep_last :]
    logits = torch.full((len(proposals), vocab_size), -math.inf)  # (kept, V)
    logits[torch.arange(len(proposals)), proposals] = 0.0
    return logits


class RuleDrafter:
    """What the drafters without a model share: no EOS, no context limit, and no tokenizer (they
    adopt the chain's vocabulary of `vocab_size` tokens)."""

    eos_token_id: int | None = None
    max_context: int | None = None

    def __init__(self, vocab_size: int, name: str) -> None:
        self.name = name
        self.vocab_size = vocab_size
        self.valid_vocab_size = vocab_size

    def token_map(self) -> None:
        return None


class NGramMember(RuleDrafter):
    """Prompt-lookup drafter over a vocabulary of `vocab_size` tokens."""

    def __init__(self, vocab_size: int, *, max_n: int = 3, min_n: int = 1, name: str = "ngram") -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        super().__init__(vocab_size, name)
        self.max_n = max_n
        self.min_n = min_n
        self._tokens: list[int] = []
        self._ends: dict[tuple[int, ...], list[int]] = {}  # n-gram -> end positions (ascending) of its occurrences

    @property
    def cache_length(self) -> int:
        return len(self._tokens)

    def _append(self, token: int) -> int:
        """Add `token` to the context and return the proposal for the position after it."""
        tokens = self._tokens
        tokens.append(token)
        end = len(tokens) - 1
        proposal = None
        for n in range(min(self.max_n, end + 1), self.min_n - 1, -1):
            ends = self._ends.setdefault(tuple(tokens[end - n + 1 :]), [])
            if proposal is None and ends:
                proposal = tokens[ends[-1] + 1]
            ends.append(end)
        return token if proposal is None else proposal

    def forward(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        return one_hot_logits([self._append(token) for token in new_ids.tolist()], self.vocab_size, keep_last)

    def crop(self, length: int) -> None:
        if not 0 <= length <= len(self._tokens):
            raise ValueError(f"crop({length}) outside [0, {len(self._tokens)}]")
        tokens = self._tokens
        while len(tokens) > length:
            end = len(tokens) - 1
            for n in range(min(self.max_n, end + 1), self.min_n - 1, -1):
                key = tuple(tokens[end - n + 1 :])
                ends = self._ends[key]
                ends.pop()  # the occurrence ending at `end` is the latest one
                if not ends:
                    del self._ends[key]
            tokens.pop()

    def reset(self) -> None:
        self._tokens.clear()
        self._ends.clear()

    def tokens(self) -> tuple[int, ...]:
        """The token ids in the context."""
        return tuple(self._tokens)
