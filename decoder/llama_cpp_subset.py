"""A llama.cpp model whose head covers a subset S of the ids, as a full-vocabulary member (the file:
`models.llama_vocab`): every context token, in S or not, goes in as its input EMBEDDING from the
full file's `token_embd`, and the N = |S| logits come out at their ids, −inf elsewhere; lossless
for the reason `models.reduced_vocab` gives.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


class TokenEmbeddings:
    """The rows of GGUF file `path`'s `token_embd` tensor (at byte `offset`, of `ggml_type`, `rows`
    x `width`), memory-mapped and dequantized on demand (the `gguf` package's numpy code), times
    `scale`: what the model's graph multiplies token (not raw) embeddings by."""

    def __init__(self, path: str | Path, *, offset: int, ggml_type: int, rows: int, width: int, scale: float = 1.0) -> None:
        from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

        self.path = Path(path)
        self.qtype = GGMLQuantizationType(ggml_type)
        block, size = GGML_QUANT_SIZES[self.qtype]
        self.rows, self.width, self.scale = rows, width, np.float32(scale)
        self._bytes = np.memmap(self.path, dtype=np.uint8, mode="r", offset=offset, shape=(rows, width // block * size))

    def __call__(self, ids: np.ndarray) -> np.ndarray:
        """The rows of token ids `ids` (shape (k,)): float32, shape (k, width)."""
        from gguf.quants import dequantize

        rows = dequantize(np.asarray(self._bytes[ids]), self.qtype).reshape(len(ids), self.width).astype(np.float32, copy=False)
        return rows * self.scale if self.scale != 1 else rows


@dataclass(frozen=True)
class VocabSubset:
    """How a reduced-vocabulary llama.cpp model maps to the full vocabulary of `vocab` tokens:
    `keep`, the full-vocabulary ids of its N head rows in row order ((N,) int64), `embeddings` of
    all V tokens (the full file's `token_embd`), and the `end_ids` (all in `keep`)."""

    keep: torch.Tensor
    vocab: int
    embeddings: TokenEmbeddings
    end_ids: tuple[int, ...]


def head_subset(member, base) -> torch.Tensor | None:
    """The ids (`VocabSubset.keep`) at which llama.cpp member `member` computes exactly the
    logits that member `base` does, where `member` is a head cut of `base`'s own file: every
    tensor but the head's copied byte for byte (`models.llama_vocab`), its inputs the same file's
    embedding rows, its weight buffers placed alike; None for any other pair. Its logits are then
    `base`'s masked to those ids (the tests check it), so one read of `base` reads both."""
    subset = getattr(member, "subset", None)
    path = getattr(base, "path", None)
    if subset is None or path is None or getattr(base, "subset", None) is not None or member is base:
        return None
    same_buffers = getattr(getattr(member, "extra_buffers", None), "enabled", None) == \
        getattr(getattr(base, "extra_buffers", None), "enabled", None)
    if not same_buffers or Path(subset.embeddings.path).resolve() != Path(path).resolve():
        return None
    return subset.keep
