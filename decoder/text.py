"""Text in, text out: run a loaded chain on a prompt, streaming the text as tokens are committed
(what `polyplan generate` calls)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from polyplan.decoder.chain import generate
from polyplan.decoder.chat import encode_prompt
from polyplan.decoder.member import ChainMember, stop_token_ids
from polyplan.decoder.result import GenerationResult
from polyplan.decoder.sampling import Sampling
from polyplan.formats.plan import DraftPolicy

if TYPE_CHECKING:
    from polyplan.formats.plan import VerifyWidths

_DEFAULT_BLOCK_SIZE = 4


@dataclass(frozen=True)
class TextGeneration:
    """The decoded new text and the full `GenerationResult` behind it."""

    text: str
    result: GenerationResult


class IncrementalText:
    """Decodes a growing list of token ids and hands out only the text not handed out yet. A
    byte-level token can hold part of a UTF-8 character: until the rest arrives the text ends in
    U+FFFD and nothing is handed out. Like HF's `TextStreamer` it assumes that decoding a longer
    list only appends text (true of byte-level and SentencePiece vocabularies)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.shown = 0  # characters of the decoded text handed out so far

    def add(self, ids: Sequence[int]) -> str:
        """Append `ids`; the new complete text (may be empty)."""
        self.ids.extend(ids)
        text = self.text()
        if text.endswith("\ufffd"):
            return ""
        return self._rest(text)

    def finish(self) -> str:
        """Whatever is left, an incomplete character included."""
        return self._rest(self.text())

    def text(self) -> str:
        """The decoded text of every id so far (special tokens left out)."""
        return self.tokenizer.decode(self.ids, skip_special_tokens=True)

    def _rest(self, text: str) -> str:
        new = text[self.shown :]
        self.shown = max(self.shown, len(text))
        return new


def generate_text(
    members: Sequence[ChainMember],
    tokenizer,
    prompt: str,
    *,
    block_sizes: Sequence[int] | None = None,
    max_new_tokens: int = 64,
    sampling: Sampling = Sampling(),
    seed: int = 0,
    raw: bool = False,
    verify_widths: Sequence[VerifyWidths] = (),
    on_text: Callable[[str], None] | None = None,
    draft_policy: DraftPolicy | None = None,
) -> TextGeneration:
    """Run the loaded chain `members` (target first) on `prompt`, encoded with the target's
    `tokenizer` (`decoder.chat.encode_prompt`), until `max_new_tokens` or any of the target's EOS
    ids, and decode the new tokens. `block_sizes=None`: `_DEFAULT_BLOCK_SIZE` at every level.
    `on_text` receives the text as the chain commits tokens; the pieces join to `text`."""
    blocks = [_DEFAULT_BLOCK_SIZE] * (len(members) - 1) if block_sizes is None else list(block_sizes)
    prompt_ids = encode_prompt(tokenizer, prompt, raw=raw)
    device = getattr(members[0], "device", torch.device("cpu")) if members else torch.device("cpu")
    generator = torch.Generator(device=device).manual_seed(seed)
    stream = IncrementalText(tokenizer)
    on_tokens = None if on_text is None else (lambda ids: _show(on_text, stream.add(ids)))
    result = generate(
        members,
        prompt_ids,
        max_new_tokens=max_new_tokens,
        block_sizes=blocks,
        sampling=sampling,
        generator=generator,
        eos_token_id=stop_token_ids(members[0]) if members else None,
        verify_widths=verify_widths,
        on_tokens=on_tokens,
        draft_policy=draft_policy,
    )
    if on_text is not None:
        _show(on_text, stream.finish())
    text = tokenizer.decode(list(result.token_ids), skip_special_tokens=True)
    return TextGeneration(text, result)


def _show(on_text: Callable[[str], None], piece: str) -> None:
    if piece:
        on_text(piece)
