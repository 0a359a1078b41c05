"""A `.gguf` file as a model source (`hf_folder_for_gguf`): transformers dequantizes every tensor
of a GGUF on each load, so it is done once into `<cache>/gguf/<sha256[:24]>/`, written under a
hidden name and renamed when whole (an interrupted conversion leaves nothing a later run trusts).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.atomic import current_umask
from polyplan.formats.cache import cache_root
from polyplan.formats.errors import PolyplanError, first_line
from polyplan.models.hf_bars import hf_progress_bars_off

_GGUF_FOLDER = "gguf"
SOURCE_RECORD = "polyplan-gguf.json"  # written into the folder: which file it came from
_CHUNK = 1 << 20


@dataclass(frozen=True)
class GGUFInfo:
    """What the file's header says: its architecture and its metadata."""

    architecture: str
    metadata: dict  # scalar and string metadata values by key (arrays left out)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's contents, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def read_gguf_info(path: str | os.PathLike[str]) -> GGUFInfo:
    """Read and check a GGUF file's header and tensor table (`formats.gguf_header`, no tensor
    read); PolyplanError for no such file, not GGUF, or a truncated or corrupt one."""
    from polyplan.formats.gguf_header import HeaderError, read_header

    path = Path(path)
    if not path.is_file():
        raise PolyplanError(f"{path}: no such GGUF file")
    try:
        header = read_header(path)
    except HeaderError as error:
        if str(error).startswith("it does not start"):
            raise PolyplanError(f"{path}: not a GGUF file ({error})") from None
        raise PolyplanError(f"{path}: truncated or corrupt GGUF file ({error})") from None
    except OSError as error:
        raise PolyplanError(f"{path}: cannot read the GGUF file ({error.strerror or error})") from None
    size = path.stat().st_size
    if header.data_end > size:
        raise PolyplanError(f"{path}: truncated or corrupt GGUF file (its tensors need {header.data_end} bytes, the file has {size})")
    architecture = header.architecture
    if architecture is None:
        raise PolyplanError(f"{path}: truncated or corrupt GGUF file (no general.architecture)")
    return GGUFInfo(architecture, header.metadata)


def cached_folder(sha256: str) -> Path:
    """Where the dequantized folder of a file with this content hash lives."""
    return cache_root() / _GGUF_FOLDER / sha256[:24]


def hf_folder_for_gguf(path: str | os.PathLike[str]) -> Path:
    """The cached Hugging Face folder of GGUF file `path`, converting it on first use;
    PolyplanError for a bad file, an architecture transformers cannot load, or an unwritable cache."""
    from polyplan.models.file_fingerprints import content_sha256

    path = Path(path).expanduser()
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    info = read_gguf_info(path)  # cheap checks before hashing hundreds of megabytes
    if not {info.architecture, info.architecture.replace("-", "_")} & set(GGUF_SUPPORTED_ARCHITECTURES):
        raise PolyplanError(
            f"{path}: GGUF architecture {info.architecture!r} cannot be loaded by transformers "
            f"(it reads: {', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))})"
        )
    sha256 = content_sha256(path)  # hashed once while the file is unchanged
    folder = cached_folder(sha256)
    if (folder / SOURCE_RECORD).is_file():
        return folder

    def fill(partial: Path) -> None:
        with hf_progress_bars_off():  # loading and saving ("Writing model shards") alike
            _convert(path, partial, sha256, info)

    return _publish(folder, fill)


def _publish(folder: Path, fill: Callable[[Path], None]) -> Path:
    """`folder`, filled by `fill(partial)` in a hidden partial folder next to it and renamed when
    whole; when another process finished first, its folder is kept."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}.partial-", dir=folder.parent))
    except OSError as error:
        raise PolyplanError(f"cache: cannot create a folder in {folder.parent} ({error.strerror or error})") from None
    try:
        fill(partial)
        _honour_umask(partial)
        try:
            os.rename(partial, folder)
        except OSError:
            if not (folder / SOURCE_RECORD).is_file():  # not another process that finished first
                raise
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    return folder


def _convert(path: Path, out: Path, sha256: str, info: GGUFInfo) -> None:
    """Load `path` through transformers (dequantized to float32) and save it into `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, local_files_only=True, dtype=torch.float32
        )
    except Exception as error:  # noqa: BLE001 - transformers' GGUF path raises ValueError, KeyError, OSError, RuntimeError…
        raise PolyplanError(
            f"{path}: transformers cannot load this {info.architecture} GGUF file ({first_line(error)})"
        ) from None
    model.generation_config.eos_token_id = list(_end_of_generation_ids(info, model.generation_config.eos_token_id))
    model.hf_quantizer = None  # float32 by now, but marked "gguf quantized", which refuses to save
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    try:
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        record = {"gguf_file": str(path.resolve()), "sha256": sha256, "architecture": info.architecture}
        (out / SOURCE_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    except OSError as error:
        raise PolyplanError(f"cache: cannot write the dequantized model into {out} ({error.strerror or error})") from None


def _end_of_generation_ids(info: GGUFInfo, eos: int | list[int] | None) -> tuple[int, ...]:
    """`eos` and the file's end-of-turn and end-of-message ids (llama.cpp's "end of generation"
    tokens, e.g. `<end_of_turn>`, `<|im_end|>`), which transformers does not carry over."""
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        value = info.metadata.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            ids.append(value)
    return tuple(dict.fromkeys(ids))


def _honour_umask(folder: Path) -> None:
    """Give mkdtemp's private (0700) folder and its files the umask's modes (the cache may be shared)."""
    umask = current_umask()
    os.chmod(folder, 0o777 & ~umask)
    for file in folder.iterdir():
        os.chmod(file, 0o666 & ~umask)


def tokenizer_folder_for_gguf(path: str | os.PathLike[str]) -> Path:
    """A cached folder of only the tokenizer of GGUF file `path` (all a llama.cpp member needs from
    transformers), or the dequantized folder where that exists; PolyplanError as `hf_folder_for_gguf`.

    The folder is keyed by the tokenizer's own metadata (`tokenizer_sha256`), not by the file.
    transformers' GGUF reader is slow to build a large vocabulary, and a family's members share
    theirs, often with chat templates that differ in a character: a file whose vocabulary another
    folder already holds gets that folder's tokenizer with its own chat template (loaded from the
    saved folder), not a second build (docs/models-yaml.md)."""
    from polyplan.models.file_fingerprints import content_sha256

    path = Path(path).expanduser()
    info = read_gguf_info(path)
    sha256 = content_sha256(path)  # hashed once while the file is unchanged
    full = cached_folder(sha256)
    if (full / SOURCE_RECORD).is_file():
        return full
    whole, vocabulary = tokenizer_sha256(path)
    folder = cache_root() / _GGUF_FOLDER / f"tokenizer-{whole[:24]}"
    if (folder / SOURCE_RECORD).is_file():
        return folder
    sibling = next((other for other in sorted(folder.parent.glob("tokenizer-*"))
                    if _record(other).get("vocabulary_sha256") == vocabulary), None)

    def fill(partial: Path) -> None:
        from transformers import AutoTokenizer

        try:
            if sibling is None:
                tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
            else:
                tokenizer = AutoTokenizer.from_pretrained(str(sibling), local_files_only=True)
                tokenizer.chat_template = info.metadata.get("tokenizer.chat_template")
        except Exception as error:  # noqa: BLE001 - transformers' GGUF path raises ValueError, KeyError, OSError…
            raise PolyplanError(f"{path}: transformers cannot read the tokenizer of this {info.architecture} GGUF file ({first_line(error)})") from None
        tokenizer.save_pretrained(partial)
        record = {"gguf_file": str(path.resolve()), "sha256": sha256, "architecture": info.architecture, "tokenizer_only": True,
                  "vocabulary_sha256": vocabulary, "vocabulary_from": None if sibling is None else sibling.name}
        (partial / SOURCE_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")

    return _publish(folder, fill)


def tokenizer_sha256(path: str | os.PathLike[str]) -> tuple[str, str]:
    """Hex sha256s of what transformers builds a GGUF file's tokenizer from, the architecture (it
    picks the converter) and every `tokenizer.*` metadata entry byte for byte as the file holds
    it: (all of them, all but `tokenizer.chat_template`: the vocabulary alone). One header read."""
    from polyplan.formats.gguf_header import read_header

    header = read_header(path)
    whole, vocabulary = (hashlib.sha256((header.architecture or "").encode()) for _ in range(2))
    with open(path, "rb") as stream:
        for key, (begin, end) in sorted(header.spans.items()):
            if key.startswith("tokenizer."):
                stream.seek(begin)
                entry = stream.read(end - begin)
                whole.update(entry)
                if key != "tokenizer.chat_template":
                    vocabulary.update(entry)
    return whole.hexdigest(), vocabulary.hexdigest()


def _record(folder: Path) -> dict:
    """A cached folder's source record ({} where it has none or it cannot be read)."""
    try:
        return json.loads((folder / SOURCE_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
