"""Derived llama.cpp members: a GGUF requantized by llama.cpp's `llama_model_quantize`
(`quantized_copy`), with `allow_requantize`: the base is usually quantized already, so the copy
loses what both roundings lose. Every derived llama.cpp file lives at `copy_path` (under `FOLDER`,
named by its base file's content hash) and is made by `cached_copy`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from polyplan.decoder.llama_cpp import llama_cpp_module
from polyplan.formats.cache import cache_root
from polyplan.formats.candidates import LLAMA_CPP_QUANTIZATIONS
from polyplan.formats.errors import PolyplanError
from polyplan.models.file_fingerprints import content_sha256

FOLDER = "llama.cpp"


def copy_path(base: str | os.PathLike[str], tag: str) -> Path:
    """Where the copy of GGUF file `base` that `tag` names (a quantization type, "layers9", …) lives."""
    return cache_root() / FOLDER / f"{content_sha256(base)[:24]}-{tag}.gguf"


def quantized_copy(base: str | os.PathLike[str], kind: str) -> Path:
    """The cached copy of GGUF file `base` quantized to `kind` by llama.cpp, made on first use."""
    if kind not in LLAMA_CPP_QUANTIZATIONS:
        raise PolyplanError(f"quantize {kind!r}: not a llama.cpp type (choose one of {', '.join(LLAMA_CPP_QUANTIZATIONS)})")
    llama_cpp = llama_cpp_module()
    ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{kind.upper()}", None)
    if ftype is None:
        raise PolyplanError(f"quantize {kind!r}: the installed llama.cpp ({llama_cpp.__version__}) has no such type")
    base = Path(base)

    def write(partial: Path) -> None:
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.allow_requantize = True
        params.nthread = max(1, os.cpu_count() or 1)
        status = llama_cpp.llama_model_quantize(str(base).encode(), str(partial).encode(), params)
        if status != 0 or not partial.is_file():
            raise PolyplanError(f"quantize {kind}: llama.cpp could not quantize {base} (status {status})")

    return cached_copy(copy_path(base, kind), write)


def cached_copy(out: Path, write: Callable[[Path], None]) -> Path:
    """`out`, made on first use by `write(partial)` into a hidden file renamed when whole (an
    interrupted run leaves nothing that looks whole); PolyplanError where the cache cannot be written."""
    if out.is_file():
        return out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PolyplanError(f"cache: cannot create {out.parent} ({error.strerror or error})") from None
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        write(partial)
        os.replace(partial, out)
    except OSError as error:
        raise PolyplanError(f"cache: cannot write {out} ({error.strerror or error})") from None
    finally:
        partial.unlink(missing_ok=True)
    return out
