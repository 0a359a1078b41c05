"""Text in, text out: run a chain of local model folders on a prompt (what `polyplan generate` calls)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from polyplan.decoder.chain import generate
from polyplan.decoder.chat import encode_prompt
from polyplan.decoder.loading import load_chain
from polyplan.decoder.member import stop_token_ids
from polyplan.decoder.result import GenerationResult
from polyplan.decoder.sampling import Sampling

DEFAULT_BLOCK_SIZE = 4


@dataclass(frozen=True)
class TextGeneration:
    """The decoded new text and the full `GenerationResult` behind it."""

    text: str
    result: GenerationResult


def generate_text(
    folders: Sequence[str | Path],
    prompt: str,
    *,
    block_sizes: Sequence[int] | None = None,
    max_new_tokens: int = 64,
    sampling: Sampling = Sampling(),
    seed: int = 0,
    device: str = "cpu",
    raw: bool = False,
) -> TextGeneration:
    """Load the chain (target first), encode `prompt` with the target's tokenizer (through its
    chat template, as one user turn, unless `raw` or it has none), generate until
    `max_new_tokens` or any of the target's EOS ids, and decode the new tokens.

    `block_sizes=None` uses `DEFAULT_BLOCK_SIZE` at every verifying level.
    """
    loaded = load_chain(folders, device=device)
    members = loaded.members
    blocks = [DEFAULT_BLOCK_SIZE] * (len(members) - 1) if block_sizes is None else list(block_sizes)
    prompt_ids = encode_prompt(loaded.tokenizer, prompt, raw=raw)
    generator = torch.Generator(device=device).manual_seed(seed)
    result = generate(
        members,
        prompt_ids,
        max_new_tokens=max_new_tokens,
        block_sizes=blocks,
        sampling=sampling,
        generator=generator,
        eos_token_id=stop_token_ids(members[0]),
    )
    text = loaded.tokenizer.decode(list(result.token_ids), skip_special_tokens=True)
    return TextGeneration(text, result)
