"""A hub id as a model source, resolved from the local Hugging Face cache only.

polyplan never downloads at run time: `org/name` names a model that `hf download org/name`
(or an earlier `from_pretrained`) already put into the Hugging Face cache ($HF_HOME/hub).
"""

from __future__ import annotations

from pathlib import Path

from polyplan.formats.errors import PolyplanError


def cached_hub_folder(repo_id: str) -> Path | None:
    """The cached snapshot folder of `repo_id` (the one holding its config.json), or None."""
    from huggingface_hub import try_to_load_from_cache

    try:
        config = try_to_load_from_cache(repo_id, "config.json")
    except ValueError:  # huggingface_hub refuses ids it cannot parse
        return None
    return Path(config).parent if isinstance(config, str) else None


def hub_folder(repo_id: str) -> Path:
    """The cached snapshot folder of `repo_id`.

    Raises:
        PolyplanError: it is not in the local cache (with how to get it there).
    """
    folder = cached_hub_folder(repo_id)
    if folder is None:
        raise PolyplanError(
            f"hub id {repo_id!r} is not in the local cache (polyplan never downloads); fetch it once with "
            f"`hf download {repo_id}` where a network exists, or give a local folder or .gguf file as source"
        )
    return folder
