"""A Hugging Face causal language model as a chain member, with its own `DynamicCache`.

Written against transformers 5.x: `DynamicCache(config=...)`, `DynamicCache.crop(n)` takes a
*negative* n (tokens to drop), models take explicit `position_ids` (no `cache_position`), and
`logits_to_keep` limits the language-model head to the rows the decoder needs.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from polyplan.formats.errors import PolyplanError

if TYPE_CHECKING:  # importing transformers takes seconds; only `HFMember` users pay for it
    from transformers import PreTrainedModel


class HFMember:
    """A causal LM (any `AutoModelForCausalLM`, put in eval mode) in a chain. `name` defaults to the
    model's folder or class name; `tokenizer` gives the token map and the number of real (unpadded)
    tokens; `eos_token_id` overrides `end_of_sequence_ids`, `max_context` `max_position_embeddings`."""

    def __init__(
        self,
        model: "PreTrainedModel",
        *,
        name: str | None = None,
        tokenizer=None,
        eos_token_id: int | None = None,
        max_context: int | None = None,
    ) -> None:
        from polyplan.decoder.tall_skinny_head import with_tall_skinny_head

        self.model = with_tall_skinny_head(model.eval())  # few-row CPU verification at one row's cost
        config = model.config.get_text_config(decoder=True)
        self.name = name or Path(str(getattr(model.config, "name_or_path", "") or "")).name or type(model).__name__
        self.vocab_size = int(model.get_output_embeddings().out_features if model.get_output_embeddings() is not None else config.vocab_size)
        self.tokenizer = tokenizer
        self.valid_vocab_size = self.vocab_size
        if tokenizer is not None:
            size = len(tokenizer)
            if size > self.vocab_size:
                raise PolyplanError(f"chain member {self.name!r}: its tokenizer has {size} tokens but the model only {self.vocab_size} logits")
            self.valid_vocab_size = size
        if eos_token_id is None:
            self.eos_token_ids = end_of_sequence_ids(model, tokenizer)
            eos_token_id = self.eos_token_ids[0] if self.eos_token_ids else None
        else:
            self.eos_token_ids = (eos_token_id,)
        self.eos_token_id = eos_token_id
        self.max_context = max_context if max_context is not None else getattr(config, "max_position_embeddings", None)
        self.device = next(model.parameters()).device
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._cache_keyword = cache_keyword(model)
        self._token_map: dict[str, int] | None = None
        self._cache = None
        self.reset()
        self._positions = torch.arange(self.max_context or 1 << 16, device=self.device)  # sliced per call

    @property
    def cache_length(self) -> int:
        return self._length

    def forward(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        k = new_ids.shape[0]
        start = self._length
        if start + k > self._positions.shape[0]:
            self._positions = torch.arange(2 * (start + k), device=self.device)
        extra = {"logits_to_keep": keep_last or 0} if self._keeps_logits else {}
        with torch.inference_mode():
            out = self.model(
                input_ids=new_ids.to(self.device).unsqueeze(0),  # (1, k)
                position_ids=self._positions[start : start + k].unsqueeze(0),  # (1, k)
                use_cache=True,
                **{self._cache_keyword: self._cache},
                **extra,
            )
            self._length = start + k
            logits = out.logits[0]  # (kept, vocab_size)
            if keep_last is not None and not self._keeps_logits:
                logits = logits[-keep_last:]
            logits = logits.float()
            if self.valid_vocab_size < self.vocab_size:
                logits[:, self.valid_vocab_size :] = -torch.inf
        return logits

    def crop(self, length: int) -> None:
        if not 0 <= length <= self._length:
            raise ValueError(f"crop({length}) outside [0, {self._length}]")
        if length < self._length:
            self._cache.crop(length - self._length)  # transformers 5.x: negative = tokens to drop
            self._length = length

    def reset(self) -> None:
        from transformers import DynamicCache

        self._cache = DynamicCache(config=self.model.config)
        self._length = 0

    def token_map(self) -> dict[str, int] | None:
        if self.tokenizer is None:
            return None
        if self._token_map is None:
            self._token_map = dict(self.tokenizer.get_vocab())
        return self._token_map


def cache_keyword(model) -> str:
    """The keyword `model.forward` takes its KV cache by: `cache` where it has one (newer
    transformers releases, where `past_key_values` still works but warns), else `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def end_of_sequence_ids(model: "PreTrainedModel", tokenizer=None) -> tuple[int, ...]:
    """Every id that ends a generation: the generation config's `eos_token_id` (an int or a
    list, e.g. `<eos>` and `<end_of_turn>`), then the model config's, then the tokenizer's."""
    found: list[int] = []
    generation = getattr(model, "generation_config", None)
    config = model.config.get_text_config(decoder=True)
    for value in (getattr(generation, "eos_token_id", None), getattr(config, "eos_token_id", None),
                  getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None):
        found.extend([value] if isinstance(value, int) else [v for v in (value or []) if isinstance(v, int)])
    return tuple(dict.fromkeys(found))
