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

DEFAULT_BLOCK_SIZE = 4


@dataclass(frozen=True)
class TextGeneration:
    """The decoded new text and the full `GenerationResult` behind it."""

    text: str
    result: GenerationResult


class IncrementalText:
    """Decodes a growing list of token ids and hands out only the text not handed out yet.

    A token of a byte-level vocabulary can hold part of a multi-byte UTF-8 character; until the
    rest arrives the decoded text ends in U+FFFD, so nothing is handed out for it then. It
    assumes, as Hugging Face's `TextStreamer` does, that decoding a longer list only appends
    text (true of byte-level and SentencePiece vocabularies; a tokenizer that cleans up spaces
    across tokens could rewrite what was already handed out).
    """

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
    """Run the loaded chain `members` (target first) on `prompt`: encode it with the target's
    `tokenizer` (through its chat template, as one user turn, unless `raw` or it has none),
    generate until `max_new_tokens` or any of the target's EOS ids, and decode the new tokens.

    `block_sizes=None` uses `DEFAULT_BLOCK_SIZE` at every verifying level. `on_text` receives
    the text as the chain commits tokens (`IncrementalText`); the pieces join to `text`.
    `draft_policy`: the last member's draft lengths (`formats.plan.DraftPolicy`; None: fixed).
    """
    blocks = [DEFAULT_BLOCK_SIZE] * (len(members) - 1) if block_sizes is None else list(block_sizes)
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
