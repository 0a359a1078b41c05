"""A toy chain member whose next-token logits are read from a table indexed by the last tokens.

Small enough (a vocabulary of about 8, a context of the last 1–2 tokens) that the exact
distribution of any continuation can be enumerated, which is what the losslessness tests
compare the decoder's samples against.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class TableMember:
    """Next-token logits = `table[last `order` tokens]`.

    The table has shape `(V+1,) * order + (V,)`; index V in a context slot stands for
    "no token here" (positions before the start of the sequence).
    """

    eos_token_id: int | None = None
    max_context: int | None = None

    def __init__(self, table: torch.Tensor, *, name: str = "table") -> None:
        self.order = table.dim() - 1
        vocab = table.shape[-1]
        if self.order < 1 or any(size != vocab + 1 for size in table.shape[:-1]):
            raise ValueError(f"table: expected shape {(vocab + 1,) * max(self.order, 1) + (vocab,)}, got {tuple(table.shape)}")
        self.name = name
        self.vocab_size = vocab
        self.valid_vocab_size = vocab
        self.table = table
        self._rows = table.reshape(-1, vocab)  # (V+1)^order rows of (V,) logits
        self._rows32 = self._rows.float()  # what `forward` returns, without a cast per call
        self._tokens: list[int] = []

    @classmethod
    def random(
        cls, vocab_size: int, order: int, generator: torch.Generator, *, scale: float = 1.5, name: str = "table"
    ) -> TableMember:
        """A table of Gaussian logits with standard deviation `scale`."""
        shape = (vocab_size + 1,) * order + (vocab_size,)
        return cls(scale * torch.randn(shape, generator=generator, dtype=torch.float64), name=name)

    def perturbed(self, noise: float, generator: torch.Generator, *, name: str) -> TableMember:
        """A correlated copy: these logits plus Gaussian noise of standard deviation `noise`."""
        return TableMember(self.table + noise * torch.randn(self.table.shape, generator=generator, dtype=self.table.dtype), name=name)

    @property
    def cache_length(self) -> int:
        return len(self._tokens)

    def _row(self, tokens: Sequence[int]) -> int:
        """Flat table row for the next token after `tokens`."""
        vocab, row = self.vocab_size, 0
        for back in range(self.order, 0, -1):
            row = row * (vocab + 1) + (tokens[-back] if len(tokens) >= back else vocab)
        return row

    def next_logits(self, tokens: Sequence[int]) -> torch.Tensor:
        """Logits `(V,)` of the token after `tokens` (for exact enumeration in tests)."""
        return self._rows[self._row(tokens)]

    def forward(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        ids = new_ids.tolist()
        first = len(ids) - (keep_last if keep_last is not None else len(ids))
        rows = []
        for j, token in enumerate(ids):
            self._tokens.append(token)
            if j >= first:
                rows.append(self._row(self._tokens))
        if len(rows) == 1:  # the common case while drafting: a view, no gather
            return self._rows32[rows[0] : rows[0] + 1]
        return self._rows32[torch.tensor(rows)]  # (kept, V)

    def crop(self, length: int) -> None:
        if not 0 <= length <= len(self._tokens):
            raise ValueError(f"crop({length}) outside [0, {len(self._tokens)}]")
        del self._tokens[length:]

    def reset(self) -> None:
        self._tokens.clear()

    def token_map(self) -> None:
        return None

    def tokens(self) -> tuple[int, ...]:
        """The token ids in the cache (for tests that check it equals the committed prefix)."""
        return tuple(self._tokens)
