"""From a `source:` entry of models.yaml to the local Hugging Face folder that holds it.

- `builtin:<name>`: the shipped zoo family's folder;
- a local folder: itself;
- a `.gguf` file: its dequantized copy in the polyplan cache (`models.gguf_source`, made once);
- a hub id: its snapshot in the local Hugging Face cache (`models.hub_source`, never downloaded).
"""

from __future__ import annotations

from pathlib import Path

from polyplan.formats.candidates import Candidate
from polyplan.formats.errors import PolyplanError


def source_folder(candidate: Candidate, label: str) -> Path:
    """The folder `from_pretrained` loads candidate `candidate` from (a `source` entry).

    Raises:
        PolyplanError: prefixed with `label`: the GGUF file cannot be converted, the hub id is
            not cached, or the builtin model is unknown.
    """
    try:
        if candidate.source_kind == "builtin":
            from polyplan.models.builtin import builtin_folder

            return builtin_folder(candidate.source.split(":", 1)[1])
        if candidate.source_kind == "gguf":
            from polyplan.models.gguf_source import hf_folder_for_gguf

            return hf_folder_for_gguf(candidate.source)
        if candidate.source_kind == "hub":
            from polyplan.models.hub_source import hub_folder

            return hub_folder(candidate.source)
    except PolyplanError as error:
        raise PolyplanError(f"{label}: {error}") from None
    return Path(candidate.source)
