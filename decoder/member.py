"""The chain-member protocols: a member owns its KV cache (or what stands in for one); the decoder
only appends tokens, reads next-token logits, and cuts the cache back after a rejection.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class ChainMember(Protocol):
    """A model in a chain (`decoder.hf`, `decoder.ngram`, `decoder.ngram_simple`, `decoder.llama_cpp`).
    `vocab_size` counts the logits `forward` returns per position, padding included: ids
    `>= valid_vocab_size` are padding, masked to -inf. `max_context` None: unbounded."""

    name: str
    vocab_size: int
    valid_vocab_size: int
    eos_token_id: int | None
    max_context: int | None

    @property
    def cache_length(self) -> int:
        """Tokens whose keys/values are in the cache."""
        ...

    def forward(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        """Append `new_ids` (`(k,)`, int64, k >= 1) to the cache; float logits `(k, vocab_size)`,
        row `j` the next-token distribution after `new_ids[j]`. With `keep_last = r` only the last
        `r` rows: the decoder never needs a prompt's earlier rows, and an LM head over them is not free."""
        ...

    def crop(self, length: int) -> None:
        """Cut the cache back to its first `length` tokens (`0 <= length <= cache_length`)."""
        ...

    def reset(self) -> None:
        """Empty the cache."""
        ...

    def token_map(self) -> dict[str, int] | None:
        """The token-to-id map the vocabulary check compares; None for members without a
        tokenizer of their own (they adopt the chain's)."""
        ...


@runtime_checkable
class BlockDrafter(Protocol):
    """A drafter that proposes a whole block in one call, possibly shorter or empty
    (`NGramSimpleMember`); at the bottom of a chain `draft_block` replaces K `forward` steps, its
    proposals one-hot (p(x) = 1). The length must depend on the context alone, never on the
    verifier: then every verified token is still an exact sample."""

    def draft_block(self, new_ids: torch.Tensor, limit: int) -> list[int]:
        """Append `new_ids` (`(k,)`, int64, k >= 0: the tokens committed since the last call)
        to the context and return at most `limit` drafted tokens after it, possibly none.
        The drafts are not added to the context (`cache_length` counts committed tokens only)."""
        ...


@runtime_checkable
class ArgmaxForward(Protocol):
    """A member that can return just the argmax of its logits rows (`LlamaCppMember`): all that
    greedy sampling needs from a pass, at any level, so a member whose rows live outside torch
    takes it where they are instead of copying (k, V) floats out per pass."""

    def forward_argmax(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        """`forward(new_ids, keep_last)` reduced to the argmax of each returned row: int64 ids of
        shape `(r,)`, on the member's device. Exactly `argmax_ids(forward(...)[:, :valid_vocab_size])`
        (`decoder.sampling`): ids `>= valid_vocab_size` never win, and ties go to the lowest id, as
        `torch.argmax` breaks them."""
        ...


@runtime_checkable
class ConfidentArgmax(Protocol):
    """A member that can return each row's argmax with its probability (`LlamaCppMember`), without
    copying rows out: what a confidence stop (`formats.plan.DraftPolicy.p_min`) reads from a
    greedy drafter. Others hand the decoder their rows (`sampling.top_probability`)."""

    def forward_argmax_confidence(self, new_ids: torch.Tensor, keep_last: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward_argmax(new_ids, keep_last)` and, per returned row, the softmax probability (at
        temperature 1, over the valid vocabulary) of that argmax: `(r,)` int64 and `(r,)` float,
        exactly `sampling.top_probability(forward(...)[:, :valid_vocab_size])` up to rounding."""
        ...


def stop_token_ids(member: ChainMember) -> tuple[int, ...]:
    """The ids that end a generation of `member`: its `eos_token_ids` when it has several
    (`HFMember`: every EOS id of its generation config), else its `eos_token_id`, else none."""
    several = getattr(member, "eos_token_ids", None)
    if several:
        return tuple(several)
    return () if member.eos_token_id is None else (member.eos_token_id,)
