"""A byte-level BPE tokenizer for the zoo, trained with `tokenizers` and saved HF-style."""

from __future__ import annotations

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

_EOS_TOKEN = "<|endoftext|>"


def train_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE with `vocab_size` tokens; `_EOS_TOKEN` is id 0.

    Byte-level means every string round-trips, so held-out code never meets an unknown token.
    Training `tokenizers` BPE is deterministic for a fixed input order.
    """
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[_EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=_EOS_TOKEN,
        bos_token=_EOS_TOKEN,
        pad_token=_EOS_TOKEN,
        unk_token=None,
        model_max_length=1_000_000,
    )


def encode_corpus(tokenizer: PreTrainedTokenizerFast, texts: list[str]) -> np.ndarray:
    """One flat int32 stream of all texts, each followed by the EOS id."""
    eos = [tokenizer.eos_token_id]
    encodings = tokenizer.backend_tokenizer.encode_batch(texts)
    return np.concatenate([np.asarray(encoding.ids + eos, dtype=np.int32) for encoding in encodings])
