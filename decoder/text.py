"""Text in, text out: run a chain of local model folders on a prompt (what `polyplan generate` calls)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from polyplan.decoder.chain import generate
from polyplan.decoder.loading import load_chain
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
) -> TextGeneration:
    """Load the chain (target first), encode `prompt` with the target's tokenizer, generate
    until `max_new_tokens` or the target's EOS, and decode the new tokens.

    `block_sizes=None` uses `DEFAULT_BLOCK_SIZE` at every verifying level.
    """
    loaded = load_chain(folders, device=device)
    members = loaded.members
    blocks = [DEFAULT_BLOCK_SIZE] * (len(members) - 1) if block_sizes is None else list(block_sizes)
    prompt_ids = loaded.tokenizer(prompt)["input_ids"]
    generator = torch.Generator(device=device).manual_seed(seed)
    result = generate(
        members,
        prompt_ids,
        max_new_tokens=max_new_tokens,
        block_sizes=blocks,
        sampling=sampling,
        generator=generator,
        eos_token_id=members[0].eos_token_id,
    )
    text = loaded.tokenizer.decode(list(result.token_ids), skip_special_tokens=True)
    return TextGeneration(text, result)
