"""The prompts a stage of the loop runs on: a user's file, or the built-in held-out prompts.

Profiling takes the first built-in prompts of each kind; validation the next ones, which the
profile never saw. A `PromptSet` says where its prompts came from and what happens to one that
does not fit a model's context: built-in prompts are cut from the left, a user's left out
(`strict`: refused).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass

from polyplan.formats.errors import PolyplanError
from polyplan.profiler.prompts import EncodedPrompt, Prompt, builtin_prompts, encode_prompts, read_prompt_file

_PROFILE_PER_KIND = 4  # the profiler's default built-in set: the first 4 prompts of each kind


@dataclass(frozen=True)
class PromptSet:
    """Prompts for a run: the raw prompts, where they came from, and whether they may be cut."""

    prompts: tuple[Prompt, ...]
    source: str
    truncate: bool  # built-in prompts are cut from the left to fit a small model; a user's are not
    raw: bool = False  # True: never wrap the prompts in the target's chat template
    strict: bool = False  # True: a prompt that does not fit is an error, not left out


def prompt_set(
    prompt_file: str | os.PathLike[str] | None = None,
    *,
    per_kind: int = _PROFILE_PER_KIND,
    skip_per_kind: int = 0,
    max_prompts: int | None = None,
    raw: bool = False,
    strict: bool = False,
) -> PromptSet:
    """A user's prompt file, or built-in prompts: `per_kind` of each kind after the first
    `skip_per_kind` (validation skips the ones the profile was measured on). `raw`: send
    them as they are, never through the target's chat template. `strict`: a prompt of the
    user's file that does not fit a model is an error rather than left out."""
    if max_prompts is not None and max_prompts < 1:
        raise PolyplanError(f"--max-prompts: must be >= 1, got {max_prompts}")
    if per_kind < 1:
        raise PolyplanError(f"--prompts-per-kind: must be >= 1, got {per_kind}")
    if prompt_file is not None:
        return PromptSet(tuple(read_prompt_file(prompt_file)[:max_prompts]), str(prompt_file), False, raw, strict)
    ranked = _builtin(max(2 * _PROFILE_PER_KIND, skip_per_kind + per_kind))
    by_kind: dict[str, list[Prompt]] = {}
    for prompt in ranked:
        by_kind.setdefault(prompt.kind, []).append(prompt)
    kept = {kind: prompts[skip_per_kind:] for kind, prompts in by_kind.items()}
    interleaved = [kept[kind][i] for i in range(per_kind) for kind in by_kind if i < len(kept[kind])]
    if not interleaved:
        raise PolyplanError(f"built-in prompts: none left after skipping the first {skip_per_kind} of each kind")
    label = "built-in prompts" + (f" (held out from profiling: ranks {skip_per_kind + 1}..{skip_per_kind + per_kind} of each kind)"
                                  if skip_per_kind else "")
    return PromptSet(tuple(interleaved[:max_prompts]), label, True, raw)


@functools.lru_cache(maxsize=2)
def _builtin(per_kind: int) -> tuple[Prompt, ...]:
    # Parsing the held-out stdlib files takes seconds; the demo needs the set twice.
    return builtin_prompts(per_kind)


def named_prompt_set(
    prompt_file: str | os.PathLike[str] | None, *, max_prompts: int | None = None, raw: bool = False, strict: bool = False
) -> PromptSet | None:
    """The prompts a command's options name (`prompt_set`), or None when they name none: the
    run then resumes its profile's recorded prompt file, else takes the built-in prompts
    (`pipeline.stages.profile_candidates`)."""
    if prompt_file is None and max_prompts is None and not raw:
        return None
    return prompt_set(prompt_file, max_prompts=max_prompts, raw=raw, strict=strict)


def validation_prompt_set(
    prompt_file: str | os.PathLike[str] | None = None, *, per_kind: int = 4, max_prompts: int | None = None, raw: bool = False
) -> PromptSet:
    """What validation runs on: a user's file, else built-in prompts the profile never saw."""
    return prompt_set(prompt_file, per_kind=per_kind, skip_per_kind=_PROFILE_PER_KIND, max_prompts=max_prompts, raw=raw)


def encode_for(prompts: PromptSet, tokenizer) -> Sequence[EncodedPrompt]:
    """The prompt set under the chain's tokenizer (through its chat template unless `prompts.raw`)."""
    return encode_prompts(prompts.prompts, tokenizer, raw=prompts.raw)
