"""Derived llama.cpp members whose head covers only a subset S of the ids (`reduced_vocab_copy`;
the member: `decoder.llama_cpp_subset`; docs/engines.md, "llama.cpp members"). The copy keeps
only S's rows of the head tensors (`_HEAD_TENSORS`), drops the tokenizer arrays, copies every other
tensor byte for byte and records in its metadata what the member needs (`vocab_subset`). S holds
the end-of-generation and control ids, then the most frequent tokens of `models.corpus` (the
standard library's code and reference prose) or the ids a JSON file lists. `_ARCHITECTURES`: the
graphs that read input embeddings as token embeddings (gemma3 scales them by sqrt(n_embd)).
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

import numpy as np
import torch

from polyplan.decoder.llama_cpp_subset import TokenEmbeddings, VocabSubset
from polyplan.formats.candidates import ReducedVocab
from polyplan.formats.errors import PolyplanError
from polyplan.formats.gguf_header import GGUFHeader, aligned, read_header
from polyplan.models.llama_quantize import cached_copy, copy_path

# architecture -> does its graph scale token embeddings by sqrt(n_embd) (and raw ones not)?
_ARCHITECTURES = {"llama": False, "qwen2": False, "qwen3": False, "gemma3": True}
_HEAD_TENSORS = ("token_embd.weight", "output.weight", "output.bias")  # the tensors with a row per token
CORPUS_CODE_CHARS = 2_000_000  # the standard library's code counted for `vocab: N`
CORPUS_PROSE_CHARS = 1_000_000  # and its reference manual's prose (about 0.5M characters)
_KEPT_IDS = "polyplan.vocab_subset.kept_ids"
_FULL_VOCAB = "polyplan.vocab_subset.vocab"
_END_IDS = "polyplan.vocab_subset.end_ids"
_INPUT_SCALE = "polyplan.vocab_subset.input_scale"
_CONTROL = 3  # llama.cpp's token type of control tokens (`tokenizer.ggml.token_type`)
_UINT32, _INT32, _FLOAT32, _STRING, _ARRAY = 4, 5, 6, 8, 9


def reduced_vocab_copy(base: str | os.PathLike[str], derive: ReducedVocab, tokenizer) -> Path:
    """The cached copy of GGUF file `base` whose head covers the ids `derive` asks for, made on
    first use; `tokenizer` (the base's) counts the corpus for `vocab: N`. PolyplanError for an
    architecture the member cannot feed embeddings to, N outside [kept-always ids, V], or a bad id list."""
    from polyplan.models.gguf_source import read_gguf_info

    base = Path(base)
    read_gguf_info(base)  # a missing, foreign or truncated file: one line
    header = read_header(base)
    vocab = _check_base(header, base)
    listed = None if derive.ids is None else _read_id_list(derive.ids, vocab)
    tag = f"vocab{derive.size}" if listed is None else f"ids-{hashlib.sha256(listed.tobytes()).hexdigest()[:12]}"

    def write(partial: Path) -> None:
        from polyplan.decoder.llama_cpp import file_end_of_generation_ids

        end_ids = file_end_of_generation_ids(base)
        control = np.flatnonzero(header.arrays.get("tokenizer.ggml.token_type", np.zeros(0)) == _CONTROL)
        always = sorted({*end_ids, *control.tolist()})
        if listed is None:
            keep = _frequent_ids(tokenizer, vocab, derive.size, always)
        else:
            keep = np.union1d(listed, np.asarray(always, dtype=np.int64))
        architecture = header.architecture
        width = _tensor(header, "token_embd.weight").shape[0]
        scale = float(np.sqrt(np.float32(width))) if _ARCHITECTURES[architecture] else 1.0
        metadata = [(_KEPT_IDS, _ARRAY, keep.astype(np.int32)), (_FULL_VOCAB, _UINT32, vocab),
                    (_END_IDS, _ARRAY, np.asarray(end_ids, dtype=np.int32)), (_INPUT_SCALE, _FLOAT32, scale),
                    ("tokenizer.ggml.model", _STRING, "none"), (f"{architecture}.vocab_size", _UINT32, len(keep))]
        _write_subset_gguf(base, header, keep, metadata, partial)

    return cached_copy(copy_path(base, tag), write)


def vocab_subset(path: str | os.PathLike[str], base: str | os.PathLike[str]) -> VocabSubset:
    """How the reduced file `path` (`reduced_vocab_copy`) maps to the full vocabulary, reading
    input embeddings from `base`, the file it was made from."""
    header, full = read_header(path), read_header(base)
    if _KEPT_IDS not in header.arrays:
        raise PolyplanError(f"{path}: not a reduced-vocabulary copy (no {_KEPT_IDS})")
    embd = _tensor(full, "token_embd.weight")
    width, vocab = embd.shape[0], int(header.metadata[_FULL_VOCAB])
    embeddings = TokenEmbeddings(base, offset=full.data_start + embd.offset, ggml_type=embd.ggml_type, rows=embd.shape[1],
                                 width=width, scale=float(header.metadata[_INPUT_SCALE]))
    keep = torch.from_numpy(header.arrays[_KEPT_IDS].astype(np.int64))
    return VocabSubset(keep, vocab, embeddings, tuple(int(i) for i in header.arrays[_END_IDS]))


def _read_id_list(path: str | os.PathLike[str], vocab: int) -> np.ndarray:
    """The distinct ids a JSON file lists (a list, or an object with `kept_ids`), sorted;
    PolyplanError for not JSON, not a list of integers, no id, or an id outside [0, vocab)."""
    from polyplan.formats.inputs import read_json_file

    data = read_json_file(path, "id list")
    ids = data.get("kept_ids") if isinstance(data, dict) else data
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise PolyplanError(f"{path}: expected a JSON list of token ids (or an object with 'kept_ids')")
    if not ids:
        raise PolyplanError(f"{path}: the id list covers no token")
    outside = [i for i in ids if not 0 <= i < vocab]
    if outside:
        raise PolyplanError(f"{path}: id {outside[0]} is outside the vocabulary [0, {vocab})")
    return np.unique(np.asarray(ids, dtype=np.int64))


def _frequent_ids(tokenizer, vocab: int, n: int, always: list[int]) -> np.ndarray:
    """The `n` ids: `always`, then the most frequent tokens of the corpus (ties and unseen
    tokens by lowest id, as BPE ids roughly follow merge rank); sorted ascending."""
    from polyplan.models.reduced_vocab import most_frequent_tokens
    from polyplan.models.corpus import read_texts, split_stdlib, stdlib_prose

    if not len(always) <= n <= vocab:
        raise PolyplanError(f"vocab: N = {n} must lie in [{len(always)}, {vocab}] (the end-of-generation and control tokens, the vocabulary)")
    split = split_stdlib()
    texts = read_texts(split.root, split.train, CORPUS_CODE_CHARS) + stdlib_prose(CORPUS_PROSE_CHARS)
    ids = np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in tokenizer.backend_tokenizer.encode_batch(texts)])
    return most_frequent_tokens(torch.from_numpy(ids[ids < vocab]), vocab, n, always=always).numpy()


def _check_base(header: GGUFHeader, path: Path) -> int:
    """The vocabulary size V of a base file the member can run cut; PolyplanError if it cannot."""
    architecture = header.architecture
    if architecture not in _ARCHITECTURES:
        raise PolyplanError(
            f"vocab: {path.name} is a {architecture} model; a reduced vocabulary needs a graph that reads input embeddings "
            f"like token embeddings ({', '.join(_ARCHITECTURES)})"
        )
    if _KEPT_IDS in header.arrays:
        raise PolyplanError(f"vocab: {path.name} is a reduced-vocabulary copy already")
    embd = _tensor(header, "token_embd.weight")
    if embd is None or len(embd.shape) != 2:
        raise PolyplanError(f"vocab: {path.name} has no two-dimensional token_embd.weight")
    vocab = embd.shape[1]
    other = next((t.name for t in header.tensor_table if t.name not in _HEAD_TENSORS and vocab in t.shape), None)
    if other is not None:
        raise PolyplanError(f"vocab: {path.name}: tensor {other} has a row per token too; only the head can be cut")
    return vocab


def _tensor(header: GGUFHeader, name: str):
    return next((t for t in header.tensor_table if t.name == name), None)


def _write_subset_gguf(base: Path, header: GGUFHeader, keep: np.ndarray, metadata: list[tuple[str, int, object]], out: Path) -> None:
    """Write `base` with the rows `keep` of its head tensors (`_HEAD_TENSORS`), without its
    `tokenizer.ggml.*` entries and with `metadata` (key, GGUF type, value) added to `out`."""
    replaced = {key for key, _, _ in metadata}
    entries = [key for key in header.spans if not key.startswith("tokenizer.ggml.") and key not in replaced]
    with open(base, "rb") as source, open(out, "wb") as sink:
        sink.write(b"GGUF" + struct.pack("<IQQ", header.version, len(header.tensor_table), len(entries) + len(metadata)))
        for key in entries:
            start, end = header.spans[key]
            source.seek(start)
            sink.write(source.read(end - start))
        for key, kind, value in metadata:
            sink.write(_string(key) + struct.pack("<I", kind) + _encode(kind, value))
        shapes, offset, offsets = [], 0, []
        for tensor in header.tensor_table:
            cut = tensor.name in _HEAD_TENSORS
            shape = tensor.shape[:-1] + (len(keep),) if cut else tensor.shape
            nbytes = tensor.nbytes // tensor.shape[-1] * len(keep) if cut else tensor.nbytes
            offsets.append(offset)
            shapes.append(shape)
            sink.write(_string(tensor.name) + struct.pack(f"<I{len(shape)}QIQ", len(shape), *shape, tensor.ggml_type, offset))
            offset = aligned(offset + nbytes, header.alignment)
        data_start = aligned(sink.tell(), header.alignment)
        for tensor, start in zip(header.tensor_table, offsets):
            sink.write(b"\0" * (data_start + start - sink.tell()))
            if tensor.name in _HEAD_TENSORS:
                rows = np.memmap(base, dtype=np.uint8, mode="r", offset=header.data_start + tensor.offset,
                                 shape=(tensor.shape[-1], tensor.nbytes // tensor.shape[-1]))
                sink.write(np.ascontiguousarray(rows[keep]).tobytes())
            else:
                source.seek(header.data_start + tensor.offset)
                _copy(source, sink, tensor.nbytes)


def _copy(source, sink, size: int) -> None:
    while size > 0:
        chunk = source.read(min(size, 1 << 24))
        if not chunk:
            raise OSError("the base file ends early")
        sink.write(chunk)
        size -= len(chunk)


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("<Q", len(data)) + data


def _encode(kind: int, value) -> bytes:
    if kind == _UINT32:
        return struct.pack("<I", value)
    if kind == _FLOAT32:
        return struct.pack("<f", value)
    if kind == _STRING:
        return _string(value)
    return struct.pack("<IQ", _INT32, len(value)) + np.asarray(value, dtype="<i4").tobytes()  # an array of int32
