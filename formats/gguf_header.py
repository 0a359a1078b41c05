"""A GGUF file's header (`read_header`), read by polyplan itself: `gguf.GGUFReader` builds a numpy
object per metadata element (slow for a large vocabulary) and transformers' reader refuses some
quantization types its loader handles. String arrays are skipped; each entry's place in the file is
kept so a derived file can copy it byte for byte (`models.llama_vocab`).

Layout (GGUF v2/v3, little-endian): magic "GGUF", u32 version, u64 tensor count, u64 metadata
count; metadata entries (string key, u32 type, value); tensor infos (string name, u32 dims,
u64 × dims sizes, u32 ggml type, u64 offset); padding to `general.alignment` (32); the data.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8", 12: "<f8"}


class HeaderError(ValueError):
    """The bytes do not form a GGUF header (cut short, or not GGUF at all)."""


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table: `shape` in GGUF order (ggml's ne: the row length first),
    `offset` from the start of the data section, `nbytes` its size in the file."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class GGUFHeader:
    """What polyplan reads of a GGUF file: scalar and string `metadata` and number `arrays` by
    key, where each metadata entry lies (`spans`, (start, end)), the `tensor_table` in file order,
    and the data section's `data_start`, `data_end` (the file must be this long) and `alignment`."""

    version: int
    metadata: dict[str, object]
    data_end: int
    arrays: dict[str, np.ndarray]
    spans: dict[str, tuple[int, int]]
    tensor_table: tuple[TensorInfo, ...]
    data_start: int
    alignment: int

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else None


def read_header(path) -> GGUFHeader:
    """Parse the header and tensor table of the GGUF file at `path`; HeaderError when it is not
    GGUF, of an unknown version or value type, or cut short; OSError when it cannot be read."""
    with open(path, "rb") as stream:
        if stream.read(4) != b"GGUF":
            raise HeaderError("it does not start with 'GGUF'")
        version, tensors, entries = _unpack(stream, "<IQQ")
        if version not in (2, 3):
            raise HeaderError(f"GGUF version {version} (polyplan reads 2 and 3)")
        metadata: dict[str, object] = {}
        arrays: dict[str, np.ndarray] = {}
        spans: dict[str, tuple[int, int]] = {}
        for _ in range(entries):
            begin = stream.tell()
            key = _string(stream)
            value = _value(stream, _unpack(stream, "<I")[0])
            if isinstance(value, np.ndarray):
                arrays[key] = value
            else:
                metadata[key] = value
            spans[key] = (begin, stream.tell())
        table = []
        for _ in range(tensors):
            name = _string(stream)
            (dims,) = _unpack(stream, "<I")
            shape = _unpack(stream, f"<{dims}Q")
            ggml_type, offset = _unpack(stream, "<IQ")
            table.append(TensorInfo(name, shape, ggml_type, offset, _nbytes(ggml_type, shape)))
        alignment = metadata.get("general.alignment", 32)
        alignment = alignment if isinstance(alignment, int) and alignment > 0 else 32
        start = aligned(stream.tell(), alignment)
    end = start + max((t.offset + t.nbytes for t in table), default=0)
    return GGUFHeader(version, metadata, end, arrays, spans, tuple(table), start, alignment)


def aligned(offset: int, alignment: int) -> int:
    """`offset` rounded up to a multiple of `alignment`."""
    return (offset + alignment - 1) // alignment * alignment


def _read(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise HeaderError("the header is cut short")
    return data


def _unpack(stream: BinaryIO, fmt: str) -> tuple:
    return struct.unpack(fmt, _read(stream, struct.calcsize(fmt)))


def _string(stream: BinaryIO) -> str:
    return _read(stream, _unpack(stream, "<Q")[0]).decode("utf-8", errors="replace")


def _value(stream: BinaryIO, kind: int) -> object:
    """A metadata value; an array of numbers as a numpy array, other arrays skipped (None)."""
    if kind in _SCALARS:
        return _unpack(stream, _SCALARS[kind])[0]
    if kind == _STRING:
        return _string(stream)
    if kind == _ARRAY:
        element, count = _unpack(stream, "<IQ")
        if element in _SCALARS:
            return np.frombuffer(_read(stream, count * struct.calcsize(_SCALARS[element])), dtype=_NUMPY[element])
        for _ in range(count):
            _value(stream, element)
        return None
    raise HeaderError(f"unknown metadata value type {kind}")


def _nbytes(ggml_type: int, shape: tuple[int, ...]) -> int:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise HeaderError(f"unknown ggml tensor type {ggml_type}") from None
    return math.prod(shape) // block * size
