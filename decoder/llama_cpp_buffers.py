"""Whether llama.cpp's extra weight buffers (repacked layouts, AMX tiles) run on this CPU
(`extra_buffers`): where its AMX kernels crash on the first multi-token batch, a child process
(`probe`) dies instead of the member, far from the cause. The verdict is cached under
`<cache>/llama.cpp/extra-buffers.json`; float files are never probed. docs/engines.md, "CPUs where
llama.cpp's AMX kernels crash".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.atomic import write_text_atomically
from polyplan.formats.cache import cache_root
from polyplan.formats.errors import PolyplanError

OVERRIDE_ENV = "POLYPLAN_LLAMA_EXTRA_BUFFERS"
CACHE_FILE = "extra-buffers.json"
_FLOAT_FILE_TYPES = {0, 1, 32}  # llama_ftype: ALL_F32, MOSTLY_F16, MOSTLY_BF16
_FLOAT_TENSOR_TYPES = {0, 1, 30}  # ggml_type: F32, F16, BF16
PROBE_TOKENS = 8
_PROBE_VERSION = 2  # part of the cache key: a verdict of another probe is asked again

_PROBE = r"""
import sys
import llama_cpp
quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)  # kept alive: C calls it later; a freed one segfaults
llama_cpp.llama_log_set(quiet, None)
llama_cpp.llama_backend_init()
params = llama_cpp.llama_model_default_params()
params.use_extra_bufts = True
model = llama_cpp.llama_model_load_from_file(sys.argv[1].encode(), params)
if not model:
    sys.exit(3)
context_params = llama_cpp.llama_context_default_params()
context_params.n_ctx = 64
context_params.n_threads = context_params.n_threads_batch = 1
context = llama_cpp.llama_init_from_model(model, context_params)
n = int(sys.argv[2])
batch = llama_cpp.llama_batch_init(n, 0, 1)
batch.n_tokens = n
for i in range(n):
    batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = i + 1, i, 1, i == n - 1
    batch.seq_id[i][0] = 0
sys.exit(0 if llama_cpp.llama_decode(context, batch) == 0 else 4)
"""


@dataclass(frozen=True)
class ExtraBuffers:
    """The verdict for one file: whether to use llama.cpp's extra buffers, and why."""

    enabled: bool
    reason: str  # "float file", "probed", "cached", "override"


def cpu_model() -> str:
    """The processor's model name (`/proc/cpuinfo`), or the platform's description."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def gguf_file_type(path: str | os.PathLike[str]) -> int | None:
    """The file's `general.file_type` (a llama_ftype); for a file that does not say, 0 (ALL_F32)
    when every tensor is a float type, else None. Read with polyplan's own header reader: gguf's
    `GGUFReader` builds an object per vocabulary string, slow for a large vocabulary."""
    from polyplan.formats.gguf_header import HeaderError, read_header

    try:
        header = read_header(path)
    except (OSError, HeaderError):  # not a GGUF polyplan can read: llama.cpp's loader will say so
        return None
    file_type = header.metadata.get("general.file_type")
    if isinstance(file_type, int) and not isinstance(file_type, bool):
        return file_type
    return 0 if all(tensor.ggml_type in _FLOAT_TENSOR_TYPES for tensor in header.tensor_table) else None


def extra_buffers(path: str | os.PathLike[str], bindings_version: str, *, log=lambda line: None) -> ExtraBuffers:
    """Whether llama.cpp may use its extra weight buffers for GGUF file `path` on this CPU."""
    override = os.environ.get(OVERRIDE_ENV)
    if override in ("0", "1"):
        return ExtraBuffers(override == "1", "override")
    file_type = gguf_file_type(path)
    if file_type in _FLOAT_FILE_TYPES:
        return ExtraBuffers(True, "float file")
    key = f"{cpu_model()} | llama-cpp-python {bindings_version} | file type {file_type} | probe {_PROBE_VERSION}"
    store = cache_root() / "llama.cpp" / CACHE_FILE
    known = _read(store)
    if key in known:
        return ExtraBuffers(bool(known[key]), "cached")
    works = probe(path)
    if not works:
        log(f"llama.cpp's extra weight buffers (AMX, repacking) crash a batched decode on this CPU ({cpu_model()}); "
            "running llama.cpp without them")
    _write(store, {**known, key: works})
    return ExtraBuffers(works, "probed")


def probe(path: str | os.PathLike[str], timeout_s: float = 300.0) -> bool:
    """False when a child process decoding an 8-token batch of `path` with the extra buffers on
    dies by a signal (the crash) or hangs; True otherwise (a file llama.cpp cannot load fails
    later, where the member loads it, with its own message)."""
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, str(path), str(PROBE_TOKENS)], capture_output=True,
                              timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode >= 0


def _read(store: Path) -> dict:
    try:
        data = json.loads(store.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(store: Path, data: dict) -> None:
    """Best effort: a cache that cannot be written only means probing again next time."""
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(store, json.dumps(data, indent=1, sort_keys=True))
    except (OSError, PolyplanError):
        pass
