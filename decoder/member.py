"""The chain-member protocol: what a model must offer to sit in a speculative chain.

A member owns its own KV cache (or whatever state stands in for one). The decoder only
ever appends new tokens, reads next-token logits, and cuts the cache back after a rejection.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class ChainMember(Protocol):
    """A model in a chain: the protocol every member implements (the implementations are the
    decoder's other modules, `decoder.hf`, `decoder.ngram`, `decoder.ngram_simple`, `decoder.llama_cpp`).

    Attributes:
        name: Shown in statistics and error messages.
        vocab_size: Number of logits `forward` returns per position (padded rows included;
            see `valid_vocab_size`).
        valid_vocab_size: Ids `>= valid_vocab_size` are padding and are masked to -inf.
        eos_token_id: The end-of-sequence id, or None.
        max_context: The longest sequence the member can hold, or None when unbounded.
    """

    name: str
    vocab_size: int
    valid_vocab_size: int
    eos_token_id: int | None
    max_context: int | None

    @property
    def cache_length(self) -> int:
        """Number of tokens whose keys/values are in the cache."""
        ...

    def forward(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        """Append `new_ids` (shape `(k,)`, int64, k >= 1) to the cache.

        Returns float logits of shape `(k, vocab_size)`: row `j` is the next-token
        distribution after `new_ids[j]`. With `keep_last = r` only the last `r` rows are
        returned, shape `(r, vocab_size)`: the decoder never needs the logits of a prompt's
        earlier positions, and a language-model head over a long prompt is not free.
        """
        ...

    def crop(self, length: int) -> None:
        """Cut the cache back to its first `length` tokens (`0 <= length <= cache_length`)."""
        ...

    def reset(self) -> None:
        """Empty the cache, ready for a new prompt."""
        ...

    def token_map(self) -> dict[str, int] | None:
        """The token-to-id map used to check that members share a vocabulary.

        None for members that have no tokenizer of their own (they adopt the chain's).
        """
        ...


@runtime_checkable
class BlockDrafter(Protocol):
    """A drafter that proposes a whole block in one call and may propose fewer tokens than
    asked, or none (`NGramSimpleMember`). At the bottom of a chain the decoder calls
    `draft_block` instead of stepping `forward` K times; its proposals are one-hot (p(x) = 1).
    The length must depend on the context alone, never on the verifier: then every verified
    token is still an exact sample (the test for each is the same, however many there are)."""

    def draft_block(self, new_ids: torch.Tensor, limit: int) -> list[int]:
        """Append `new_ids` (`(k,)`, int64, k >= 0: the tokens committed since the last call)
        to the context and return at most `limit` drafted tokens after it, possibly none.
        The drafts are not added to the context (`cache_length` counts committed tokens only)."""
        ...


@runtime_checkable
class ArgmaxForward(Protocol):
    """A member that can return just the argmax of its logits rows (`LlamaCppMember`). Under
    greedy sampling the decoder needs nothing else from a pass, at any level: drafting takes the
    drafter's argmax, verification compares the verifier's argmax with the drafts. A member whose
    rows live outside torch (llama.cpp's buffer) then takes the argmax where they are instead
    of copying (k, V) floats out per pass."""

    def forward_argmax(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        """`forward(new_ids, keep_last)` reduced to the argmax of each returned row: int64 ids of
        shape `(r,)`, on the member's device. Exactly `argmax_ids(forward(...)[:, :valid_vocab_size])`
        (`decoder.sampling`): ids `>= valid_vocab_size` never win, and ties go to the lowest id, as
        `torch.argmax` breaks them."""
        ...


@runtime_checkable
class ConfidentArgmax(Protocol):
    """A member that can return each row's argmax together with its probability (`LlamaCppMember`),
    still without copying rows out of its own buffer: what a confidence stop
    (`formats.plan.DraftPolicy.p_min`) reads from a greedy drafter. Members without it hand the
    decoder their rows, which it reduces itself (`sampling.top_probability`)."""

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
