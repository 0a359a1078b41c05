"""A GGUF file on llama.cpp's own kernels as a chain member (`LlamaCppMember`, llama-cpp-python's
C API), at the file's own quantization; `crop` is `llama_memory_seq_rm` on llama.cpp's KV memory.
The bindings are an optional install (`pip install -e '.[llama]'`), imported when a member is
made; docs/engines.md, "llama.cpp members".

    member = LlamaCppMember("gemma-3-270m-q4_k_m.gguf", tokenizer=tokenizer, threads=1)
    logits = member.forward(torch.tensor(prompt_ids), keep_last=1)  # (1, vocab_size)
    token = member.forward_argmax(torch.tensor([7]), keep_last=1)  # (1,): its argmax, no row copied
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from polyplan.decoder.hf import HFMember
from polyplan.decoder import llama_cpp_buffers
from polyplan.decoder.llama_cpp_subset import VocabSubset
from polyplan.formats.errors import PolyplanError
from polyplan.formats.verbosity import other_output_shown

INSTALL_HINT = "install llama.cpp's Python bindings with `pip install -e '.[llama]'` (builds llama-cpp-python from source, a few minutes)"
DEFAULT_CONTEXT = 4096
_DEFAULT_BATCH = 512


def llama_cpp_module():
    """The `llama_cpp` bindings, initialised once a process and silenced unless `formats.verbosity`
    shows other output (llama.cpp logs every tensor it loads); or one line saying how to install them."""
    global _LOG_CALLBACK
    try:
        import llama_cpp
    except ImportError:
        raise PolyplanError(f"engine llama.cpp: the llama-cpp-python bindings are not installed; {INSTALL_HINT}") from None
    if _LOG_CALLBACK is None:
        _LOG_CALLBACK = llama_cpp.llama_log_callback(lambda level, text, data: None)  # kept alive: C holds it
        if not other_output_shown():  # `polyplan --verbose`: llama-cpp-python's own callback prints the log
            llama_cpp.llama_log_set(_LOG_CALLBACK, None)
        llama_cpp.llama_backend_init()
    return llama_cpp


_LOG_CALLBACK = None


@dataclass(frozen=True)
class LlamaCppInfo:
    """What `models check` says about a llama.cpp member."""

    description: str  # llama.cpp's model description, e.g. "gemma3 270M Q4_K - Medium"
    parameters: int


def engine_version() -> str:
    """The bindings' version (which pins the vendored llama.cpp), e.g. "llama-cpp-python 0.3.36"."""
    return f"llama-cpp-python {llama_cpp_module().__version__}"


class LlamaCppMember:
    """A GGUF model run by llama.cpp in a chain (`ChainMember`, `ArgmaxForward`, `ConfidentArgmax`).

    `name` defaults to the file's stem; `tokenizer` (the same file's HF tokenizer) gives the token
    map; `eos_token_ids` default to llama.cpp's end-of-generation ids; `threads` None follows
    `torch.get_num_threads()` at every call, so polyplan's one `--threads` governs every member;
    `context` is `max_context`; `batch` the most tokens one `llama_decode` takes; `subset`: the
    file's head covers only these ids (`decoder.llama_cpp_subset`).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        tokenizer=None,
        eos_token_ids: tuple[int, ...] | None = None,
        threads: int | None = None,
        context: int = DEFAULT_CONTEXT,
        batch: int = _DEFAULT_BATCH,
        subset: VocabSubset | None = None,
    ) -> None:
        llama_cpp = llama_cpp_module()
        self._lib = llama_cpp
        self.path = Path(path)
        self.name = name or self.path.stem
        self.device = torch.device("cpu")  # where its logits live (llama.cpp runs on the CPU here)
        if context < 1 or batch < 1:
            raise PolyplanError(f"chain member {self.name!r}: context and batch must be >= 1, got {context} and {batch}")
        self.extra_buffers = llama_cpp_buffers.extra_buffers(self.path, llama_cpp.__version__, log=_warn_once)
        model_params = llama_cpp.llama_model_default_params()
        model_params.use_extra_bufts = self.extra_buffers.enabled
        self._model = llama_cpp.llama_model_load_from_file(str(self.path).encode(), model_params)
        if not self._model:
            raise PolyplanError(f"chain member {self.name!r}: llama.cpp cannot load {self.path} (not a GGUF it knows, or a damaged file)")
        vocab = llama_cpp.llama_model_get_vocab(self._model)
        self._head_rows = int(llama_cpp.llama_vocab_n_tokens(vocab))  # the file's n_vocab: its logits per row
        self.subset = subset
        width = 0 if subset is None else self._subset_width(subset)
        self._keep = None if subset is None else subset.keep.numpy()
        self.threads = threads
        now = self._thread_count()
        context_params = llama_cpp.llama_context_default_params()
        context_params.n_ctx = context
        context_params.n_batch = context_params.n_ubatch = min(batch, context)
        context_params.n_threads = context_params.n_threads_batch = now
        context_params.n_seq_max = 1
        context_params.no_perf = False  # llama.cpp's own decode timer (`eval_time_ms`); it costs two clock reads
        self._ctx = llama_cpp.llama_init_from_model(self._model, context_params)
        if not self._ctx:
            llama_cpp.llama_model_free(self._model)
            raise PolyplanError(f"chain member {self.name!r}: llama.cpp cannot make a context of {context} tokens for {self.path}")
        self._threads_set = now
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch_size = min(batch, context)
        self._batch = llama_cpp.llama_batch_init(self._batch_size, width, 1)  # width > 0: embeddings in, not ids
        self.vocab_size = self._head_rows if subset is None else subset.vocab
        self.valid_vocab_size = self.vocab_size
        self.tokenizer = tokenizer
        if tokenizer is not None and len(tokenizer) != self.vocab_size:
            raise PolyplanError(
                f"chain member {self.name!r}: llama.cpp reads {self.vocab_size} tokens from {self.path.name}, its tokenizer has {len(tokenizer)}"
            )
        if eos_token_ids is None:
            eos_token_ids = subset.end_ids if subset is not None else _end_of_generation_ids(llama_cpp, vocab, self.vocab_size)
        self.eos_token_ids = tuple(eos_token_ids)
        self.eos_token_id = self.eos_token_ids[0] if self.eos_token_ids else None
        self.max_context = min(context, int(llama_cpp.llama_n_ctx(self._ctx)))  # llama.cpp rounds n_ctx up to 256s
        description = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self._model, description, 256)
        self.info = LlamaCppInfo(description.value.decode("utf-8", "replace"),
                                 int(llama_cpp.llama_model_n_params(self._model)))
        self._token_map: dict[str, int] | None = None
        self._length = 0

    @property
    def cache_length(self) -> int:
        return self._length

    def _subset_width(self, subset: VocabSubset) -> int:
        """The embedding width a subset model reads; PolyplanError when the file does not fit."""
        width = int(self._lib.llama_model_n_embd_inp(self._model))
        if self._head_rows != subset.keep.numel() or subset.embeddings.width != width or subset.embeddings.rows != subset.vocab:
            self._lib.llama_model_free(self._model)
            self._model = None
            raise PolyplanError(
                f"chain member {self.name!r}: {self.path.name} has {self._head_rows} head rows and {width}-wide inputs, "
                f"its subset {subset.keep.numel()} ids and {subset.embeddings.width}-wide embeddings of {subset.embeddings.rows} tokens"
            )
        return width

    def _thread_count(self) -> int:
        return self.threads if self.threads is not None else max(1, torch.get_num_threads())

    def forward(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        return _joined(self._decode_all(new_ids, keep_last, self._logits))

    def forward_argmax(self, new_ids: torch.Tensor, keep_last: int | None = None) -> torch.Tensor:
        """`ArgmaxForward`: numpy scans a view of llama.cpp's buffer, so no row is copied, and no
        candidate array of the whole vocabulary is built per row as llama.cpp's greedy sampler does."""
        return _joined(self._decode_all(new_ids, keep_last, self._argmax))

    def forward_argmax_confidence(self, new_ids: torch.Tensor, keep_last: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """`ConfidentArgmax`, taken in numpy on the buffer's view: no row is copied."""
        parts = self._decode_all(new_ids, keep_last, self._confident_argmax)
        return _joined([ids for ids, _ in parts]), _joined([top for _, top in parts])

    def _decode_all(self, new_ids: torch.Tensor, keep_last: int | None, read) -> list[torch.Tensor]:
        """Decode `new_ids` in batches, with `read(rows)` of each batch's share of the last `keep_last`."""
        k = int(new_ids.shape[0])
        rows = k if keep_last is None else min(keep_last, k)
        if self._length + k > self.max_context:
            raise PolyplanError(
                f"chain member {self.name!r}: {self._length + k} tokens exceed its llama.cpp context of {self.max_context}"
            )
        threads = self._thread_count()
        if threads != self._threads_set:
            self._lib.llama_set_n_threads(self._ctx, threads, threads)
            self._threads_set = threads
        ids = new_ids.tolist()
        parts = []
        for start in range(0, k, self._batch_size):
            chunk = ids[start : start + self._batch_size]
            first_kept = k - rows - start  # index within this chunk of the first row asked for
            wanted = max(0, len(chunk) - max(first_kept, 0))
            self._decode(chunk, wanted)
            if wanted:
                parts.append(read(wanted))
        return parts

    def _decode(self, tokens: list[int], wanted: int) -> None:
        batch, n = self._batch, len(tokens)
        batch.n_tokens = n
        if self.subset is not None:
            width = self.subset.embeddings.width
            inputs = np.ctypeslib.as_array(batch.embd, shape=(self._batch_size, width))
            inputs[:n] = self.subset.embeddings(np.asarray(tokens, dtype=np.int64))
        for i, token in enumerate(tokens):
            if self.subset is None:
                batch.token[i] = token
            batch.pos[i] = self._length + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i >= n - wanted
        status = self._lib.llama_decode(self._ctx, batch)
        if status != 0:
            raise PolyplanError(f"chain member {self.name!r}: llama_decode failed with status {status} at position {self._length}")
        self._length += n

    def _view(self, rows: int) -> np.ndarray:
        """The last decode's output rows as a numpy view `(rows, head rows)`, valid until the next decode."""
        pointer = self._lib.llama_get_logits(self._ctx)  # float[n_outputs * n_vocab], in batch order
        return np.ctypeslib.as_array(pointer, shape=(rows, self._head_rows))

    def _logits(self, rows: int) -> torch.Tensor:
        """The last `rows` rows copied out `(rows, vocab_size)`; a subset's at their ids, −inf elsewhere."""
        view = self._view(rows)
        if self.subset is None:
            return torch.from_numpy(view.copy())
        full = np.full((rows, self.vocab_size), -np.inf, dtype=np.float32)  # `models.reduced_vocab.restrict_logits`, in numpy:
        full[:, self._keep] = view  # torch's fill and index_copy_ would wake its thread pool
        return torch.from_numpy(full)

    def _argmax(self, rows: int) -> torch.Tensor:
        return self._confident_argmax(rows, with_top=False)[0]

    def _confident_argmax(self, rows: int, with_top: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The argmax of the last `rows` rows over the valid vocabulary `(rows,)`, taken in place as
        `decoder.sampling.argmax_ids` takes it, and (`with_top`) each one's softmax probability. A
        subset's head row ids map through `keep` (ascending, so ties still go to the lowest id), and
        its head rows alone make the softmax (its other ids are −inf)."""
        view = self._view(rows)
        if self.subset is None:
            view = view[:, : self.valid_vocab_size]
        columns = np.argmax(view, axis=1)
        ids = torch.from_numpy(np.asarray(columns if self.subset is None else self._keep[columns], dtype=np.int64))
        return ids, (torch.from_numpy(_top_probabilities(view, columns)) if with_top else None)

    def crop(self, length: int) -> None:
        if not 0 <= length <= self._length:
            raise ValueError(f"crop({length}) outside [0, {self._length}]")
        if length < self._length:
            self._lib.llama_memory_seq_rm(self._memory, 0, length, -1)
            self._length = length

    def reset(self) -> None:
        self._lib.llama_memory_clear(self._memory, True)
        self._length = 0

    # the tokenizer's token-to-id map, read once: the same as an HF member's of the same file
    token_map = HFMember.token_map

    def eval_time_ms(self) -> tuple[float, int]:
        """llama.cpp's own timer since `reset_eval_time`: (milliseconds in decode calls, calls)."""
        data = self._lib.llama_perf_context(self._ctx)
        return data.t_eval_ms + data.t_p_eval_ms, data.n_eval + data.n_p_eval

    def reset_eval_time(self) -> None:
        self._lib.llama_perf_context_reset(self._ctx)

    def close(self) -> None:
        """Free llama.cpp's context and model (also when the member is collected)."""
        if getattr(self, "_ctx", None):
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._lib.llama_model_free(self._model)
            self._ctx = self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have unloaded the bindings
            pass


_WARNED: set[str] = set()


def _warn_once(line: str) -> None:
    """A line on stderr, once a process (the extra-buffers verdict is the same for every member)."""
    if line not in _WARNED:
        _WARNED.add(line)
        print(f"note: {line}", file=sys.stderr)


def _top_probabilities(view: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Per row of `view` `(rows, V)`, the softmax probability of its argmax at `columns`:
    1 / Σ exp(l − l_max), in float64."""
    top = view[np.arange(view.shape[0]), columns].astype(np.float64)[:, None]  # (rows, 1)
    return 1.0 / np.exp(view.astype(np.float64) - top).sum(axis=1)


def _joined(parts: list[torch.Tensor]) -> torch.Tensor:
    return parts[0] if len(parts) == 1 else torch.cat(parts)


@contextlib.contextmanager
def file_vocabulary(path: str | Path):
    """GGUF file `path`'s vocabulary alone, loaded by llama.cpp: yields (the bindings' module, the
    vocabulary handle), and frees the model on leaving.

    Raises:
        PolyplanError: the bindings are missing, or llama.cpp cannot load the file's vocabulary.
    """
    llama_cpp = llama_cpp_module()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise PolyplanError(f"llama.cpp cannot load the vocabulary of {path} (not a GGUF it knows, or a damaged file)")
    try:
        yield llama_cpp, llama_cpp.llama_model_get_vocab(model)
    finally:
        llama_cpp.llama_model_free(model)


def file_end_of_generation_ids(path: str | Path) -> tuple[int, ...]:
    """The ids llama.cpp ends a generation at for GGUF file `path` (its vocabulary alone is loaded)."""
    with file_vocabulary(path) as (llama_cpp, vocab):
        return _end_of_generation_ids(llama_cpp, vocab, int(llama_cpp.llama_vocab_n_tokens(vocab)))


def _end_of_generation_ids(llama_cpp, vocab, n_vocab: int) -> tuple[int, ...]:
    """EOS, EOT, then every other token llama.cpp treats as ending a generation."""
    found = [int(llama_cpp.llama_vocab_eos(vocab)), int(llama_cpp.llama_vocab_eot(vocab))]
    found += [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    return tuple(dict.fromkeys(i for i in found if 0 <= i < n_vocab))
