"""A llama.cpp model whose output head covers a subset S of the token ids: what a
`LlamaCppMember` needs to run it as a full-vocabulary chain member.

The model file (`models.llama_vocab` makes it) has N = |S| vocabulary entries: its output head
holds the rows of S only, so llama.cpp's n_vocab is N and its logits are the N rows of S, in
the order of `keep`. Two things happen at the member's edge, so that the chain sees the same
V-token vocabulary as the target:

- input: every context token, in S or not, is read exactly by handing llama.cpp its input
  EMBEDDING (a batch with `embd`, llama.cpp's path for multimodal inputs) instead of its id:
  the row of the full file's `token_embd` (`TokenEmbeddings`, dequantized by gguf's numpy code,
  times the graph's token-path input scale: sqrt(n_embd) for Gemma 3, 1 for Llama/Qwen);
- output: the N logits are put back at their full-vocabulary ids, −inf elsewhere
  (`models.reduced_vocab.restrict_logits`), so every proposal is a full-vocabulary id in S.

The chain stays lossless for the reason `models.reduced_vocab` gives: the drafter's p is zero
outside S, and verification recovers the target's mass there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch


class TokenEmbeddings:
    """The input embedding rows of a GGUF file's `token_embd` tensor, read on demand.

    The tensor's bytes are memory-mapped (nothing is read until a row is asked for) and the
    rows asked for are dequantized with the `gguf` package's numpy code, then multiplied by
    `scale`.

    Args:
        path: The GGUF file.
        offset: Where the tensor's bytes start in the file.
        ggml_type: Its ggml type (`gguf.GGMLQuantizationType`).
        rows: Its rows (the vocabulary size V).
        width: Its row length (the embedding width).
        scale: What the model's graph multiplies token embeddings by (and not raw ones).
    """

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
    """How a reduced-vocabulary llama.cpp model maps to the full vocabulary.

    Attributes:
        keep: The full-vocabulary ids of the model's N head rows, in row order, shape (N,), int64.
        vocab: The full vocabulary's size V.
        embeddings: Input embeddings of all V tokens (the full file's `token_embd`).
        end_ids: The full vocabulary's end-of-generation ids (all in `keep`).
    """

    keep: torch.Tensor
    vocab: int
    embeddings: TokenEmbeddings
    end_ids: tuple[int, ...]
