"""Derived llama.cpp members: a GGUF cut to its first L transformer blocks (`pruned_copy`), an
early exit as `models.derive.early_exit_model` makes in torch. Tensors outside the blocks and all
metadata are copied byte for byte, except `<arch>.block_count` (L) and the per-layer arrays under
`<arch>.` (cut to L). Files with multi-token-prediction blocks or split over several files are
refused. Cached at `models.llama_quantize.copy_path`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from polyplan.formats.errors import PolyplanError
from polyplan.models import llama_quantize

_BLOCK = re.compile(r"^blk\.(\d+)\.")
# Arrays under `<arch>.` whose length is fixed by the format, not by the depth: never cut.
_NOT_PER_LAYER = ("rope.dimension_sections",)


def copy_path(base: str | os.PathLike[str], layers: int) -> Path:
    """Where the copy of GGUF file `base` cut to its first `layers` blocks lives (made or not)."""
    return llama_quantize.copy_path(base, f"layers{layers}")


def block_count(path: str | os.PathLike[str]) -> int:
    """The number of transformer blocks of GGUF file `path` (`<arch>.block_count`); PolyplanError
    when the file cannot be read as GGUF or has no blocks."""
    from polyplan.models.gguf_source import read_gguf_info

    path = Path(path)
    info = read_gguf_info(path)
    count = info.metadata.get(f"{info.architecture}.block_count")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise PolyplanError(f"{path.name}: no transformer blocks to keep ({info.architecture}.block_count is {count!r})")
    return count


def pruned_copy(base: str | os.PathLike[str], layers: int) -> Path:
    """The cached copy of GGUF file `base` that keeps its first `layers` blocks, made on first
    use; PolyplanError for `layers` outside 1..the block count, or a file that cannot be cut."""
    base = Path(base)
    depth = block_count(base)
    if not 1 <= layers <= depth:
        raise PolyplanError(f"layers {layers}: outside 1..{depth} ({base.name} has {depth} transformer blocks)")
    return llama_quantize.cached_copy(copy_path(base, layers), lambda partial: write_pruned(base, partial, layers))


def write_pruned(base: str | os.PathLike[str], out: str | os.PathLike[str], layers: int) -> None:
    """Write to `out` GGUF file `base` with only its first `layers` blocks (1..depth: `pruned_copy` checks)."""
    import gguf

    reader = gguf.GGUFReader(base, "r")
    architecture = _contents(reader.get_field(gguf.Keys.General.ARCHITECTURE)).decode("utf-8")
    depth_key = f"{architecture}.block_count"
    depth = _contents(reader.get_field(depth_key))
    nextn = reader.get_field(f"{architecture}.nextn_predict_layers")
    if nextn is not None and _contents(nextn):
        raise PolyplanError(f"{Path(base).name}: its last blocks are multi-token-prediction layers; polyplan cannot cut it to {layers} blocks")
    split = reader.get_field(gguf.Keys.Split.LLM_KV_SPLIT_COUNT)
    if split is not None and _contents(split) > 1:
        raise PolyplanError(f"{Path(base).name}: a GGUF split over {_contents(split)} files; merge it (llama-gguf-split --merge) to cut its blocks")
    writer = gguf.GGUFWriter(out, architecture, endianess=reader.endianess)
    for field in reader.fields.values():
        name = field.name
        if name == gguf.Keys.General.ARCHITECTURE or name.startswith("GGUF."):  # the writer's own
            continue
        if name == gguf.Keys.General.ALIGNMENT:
            writer.add_custom_alignment(_contents(field))
            continue
        value = _contents(field)
        if name == depth_key:
            value = layers
        elif _per_layer(name, architecture, value, depth):
            value = value[:layers]
        kind = field.types[0]
        writer.add_key_value(name, value, kind, sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    kept = [tensor for tensor in reader.tensors if _keeps(tensor.name, layers)]
    for tensor in kept:
        writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes, tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in kept:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()


def _contents(field):
    """A metadata field's value as the writer takes it back: strings as their raw bytes (so
    every string is copied byte for byte), numbers as Python numbers, arrays as lists."""
    import gguf

    kind = field.types[0]
    if kind == gguf.GGUFValueType.STRING:
        return bytes(field.parts[-1])
    if kind == gguf.GGUFValueType.ARRAY and field.types[-1] == gguf.GGUFValueType.STRING:
        return [bytes(field.parts[index]) for index in field.data]
    return field.contents()


def _per_layer(name: str, architecture: str, value, depth: int) -> bool:
    """Whether metadata `name` is a per-layer array: under `<arch>.`, one element per block."""
    prefix = f"{architecture}."
    return (isinstance(value, list) and len(value) == depth and name.startswith(prefix)
            and name[len(prefix):] not in _NOT_PER_LAYER)


def _keeps(tensor: str, layers: int) -> bool:
    """Whether a tensor stays: outside the blocks, or in one of the first `layers` blocks."""
    match = _BLOCK.match(tensor)
    return match is None or int(match.group(1)) < layers
