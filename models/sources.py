"""From a `source:` entry of models.yaml to the local Hugging Face folder that holds it
(`source_folder`); docs/models-yaml.md, "Sources". A hub id names its snapshot in the local
Hugging Face cache: polyplan never downloads at run time.
"""

from __future__ import annotations

from pathlib import Path

from polyplan.formats.candidates import Candidate
from polyplan.formats.errors import PolyplanError


def source_folder(candidate: Candidate, label: str) -> Path:
    """The folder `from_pretrained` loads `candidate` (a `source` entry) from; PolyplanError
    prefixed with `label` when it cannot be had."""
    try:
        if candidate.source_kind == "builtin":
            from polyplan.models.builtin import builtin_folder

            return builtin_folder(candidate.source.split(":", 1)[1])
        if candidate.source_kind == "gguf":
            from polyplan.models.gguf_source import hf_folder_for_gguf

            return hf_folder_for_gguf(candidate.source)
        if candidate.source_kind == "hub":
            return _hub_folder(candidate.source)
    except PolyplanError as error:
        raise PolyplanError(f"{label}: {error}") from None
    return Path(candidate.source)


def cached_hub_folder(repo_id: str) -> Path | None:
    """The cached snapshot folder of `repo_id` (the one holding its config.json), or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        config = try_to_load_from_cache(repo_id, "config.json")
    except ValueError:  # huggingface_hub refuses ids it cannot parse
        return None
    return Path(config).parent if isinstance(config, str) else None


def _hub_folder(repo_id: str) -> Path:
    """The cached snapshot folder of `repo_id`; PolyplanError saying how to get it there if it is not."""
    folder = cached_hub_folder(repo_id)
    if folder is None:
        raise PolyplanError(
            f"hub id {repo_id!r} is not in the local cache (polyplan never downloads); fetch it once with "
            f"`hf download {repo_id}` where a network exists, or give a local folder or .gguf file as source"
        )
    return folder
