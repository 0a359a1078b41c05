"""Load a chain of local model folders and check that they share one tokenizer.

Local folders (as written by `save_pretrained`) or `.gguf` files (dequantized once into the
polyplan cache, `decoder.gguf_source`): nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from polyplan.decoder.chain import first_difference
from polyplan.decoder.hf import HFMember
from polyplan.decoder.reduced_vocab import with_saved_subset
from polyplan.formats.errors import PolyplanError, first_line


@dataclass(frozen=True)
class LoadedChain:
    """Members (target first) and the tokenizer that encodes prompts and decodes output."""

    members: tuple[HFMember, ...]
    tokenizer: object


def load_chain(folders: Sequence[str | Path], *, device: str = "cpu", dtype: torch.dtype | None = None) -> LoadedChain:
    """Load every folder as an `HFMember` with its tokenizer; the first is the target.

    Raises:
        PolyplanError: a folder is missing or unreadable, or a member's vocabulary or special
            tokens differ from the target's.
    """
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a "Loading weights" bar per member drowns the output
    try:
        return _load(folders, device, dtype)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _load(folders: Sequence[str | Path], device: str, dtype: torch.dtype | None) -> LoadedChain:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from polyplan.decoder.devices import check_device

    if not folders:
        raise PolyplanError("chain: empty; give at least the target model folder")
    check_device(device)
    for index, folder in enumerate(folders):  # fail before spending time loading the others
        if not Path(folder).is_dir() and not _is_gguf(folder):
            raise PolyplanError(f"chain member {index} ({str(folder)!r}): no such model folder")
    names = [Path(folder).name or str(folder) for folder in folders]
    folders = [_gguf_folder(folder, index) if _is_gguf(folder) else folder for index, folder in enumerate(folders)]
    members, tokenizers = [], []
    for index, folder in enumerate(folders):
        path = Path(folder)
        label = f"chain member {index} ({str(folder)!r})"
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except Exception as error:  # noqa: BLE001 - a broken folder's errors share no base class
            raise PolyplanError(f"{label}: cannot load its tokenizer ({first_line(error)})") from None
        try:
            model = with_saved_subset(AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype), path).to(device)
        except Exception as error:  # noqa: BLE001 - as above
            raise PolyplanError(f"{label}: cannot load a causal language model ({first_line(error)})") from None
        members.append(HFMember(model, name=names[index], tokenizer=tokenizer))
        tokenizers.append(tokenizer)
    check_same_tokenizer(tokenizers, [m.name for m in members])
    return LoadedChain(tuple(members), tokenizers[0])


def _is_gguf(path: str | Path) -> bool:
    return Path(path).suffix.lower() == ".gguf"


def _gguf_folder(path: str | Path, index: int) -> Path:
    """The dequantized folder of a .gguf member (converted once into the cache)."""
    from polyplan.decoder.gguf_source import hf_folder_for_gguf

    try:
        return hf_folder_for_gguf(path)
    except PolyplanError as error:
        raise PolyplanError(f"chain member {index} ({str(path)!r}): {error}") from None


def check_same_tokenizer(tokenizers: Sequence[object], names: Sequence[str]) -> None:
    """Raise `PolyplanError` naming the first member whose token map or special tokens differ
    from the target's (index 0)."""
    reference = tokenizers[0].get_vocab()
    specials = _specials(tokenizers[0])
    for index in range(1, len(tokenizers)):
        label = f"chain member {index} ({names[index]!r})"
        difference = first_difference(reference, tokenizers[index].get_vocab())
        if difference is not None:
            raise PolyplanError(f"{label}: vocabulary differs from the target {names[0]!r}: {difference}")
        other = _specials(tokenizers[index])
        if other != specials:
            kind = next(key for key in sorted(set(specials) | set(other)) if specials.get(key) != other.get(key))
            raise PolyplanError(
                f"{label}: special token {kind} is {other.get(kind)!r}, the target {names[0]!r} has {specials.get(kind)!r}"
            )


def _specials(tokenizer: object) -> dict[str, object]:
    """Special-token name → (token, id), e.g. {'eos_token': ('</s>', 2)}."""
    result = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        token = getattr(tokenizer, key, None)
        if token is not None:
            result[key] = (str(token), tokenizer.convert_tokens_to_ids(str(token)))
    return result
