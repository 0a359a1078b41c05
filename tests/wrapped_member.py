"""A test member that wraps another and hands every `ChainMember` call on to it; tests subclass
it to count or log the calls the chain makes."""

from __future__ import annotations


class WrappedMember:
    """Says what `inner` is (name, vocabulary, EOS, context) and delegates every call to it."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name, self.vocab_size, self.valid_vocab_size = inner.name, inner.vocab_size, inner.valid_vocab_size
        self.eos_token_id, self.max_context = inner.eos_token_id, inner.max_context

    @property
    def cache_length(self) -> int:
        return self.inner.cache_length

    def forward(self, new_ids, keep_last=None):
        return self.inner.forward(new_ids, keep_last=keep_last)

    def crop(self, length: int) -> None:
        self.inner.crop(length)

    def reset(self) -> None:
        self.inner.reset()

    def token_map(self):
        return self.inner.token_map()
