"""The target's decode step over several sequences with a KV stream each and with one unified
stream, through llama.cpp's bindings (`measure_unified_steps`): what `--kv-unified` costs a loaded
llama-server per cell of other slots in a pass's view (`planner.llama_cpp.kv_cells`).

The first sequence is decoded once in each context and copied to the others, so the prefill is
paid twice, not twice per sequence: in the unified context through its state
(`llama_state_seq_get_data` / `set_data`, which lays the copy in cells of its own), in the split
one by `llama_memory_seq_cp` (a copy of the stream). The copies hold the same tokens; timing does
not depend on which. Each round times every width in both contexts, their order alternating
(A B, B A), each step's rows removed after it.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from polyplan.formats.errors import PolyplanError
from polyplan.planner.llama_cpp.kv_cells import UnifiedSteps, spread_rows

_BATCH = 256  # tokens per decode while filling the sequences


def measure_unified_steps(path: Path, threads: int, ks: Sequence[int], sequences: int, cells: int, repeats: int,
                          log: Callable[[str], None] = lambda line: None) -> UnifiedSteps:
    """The medians of `repeats` timed rounds (after one untimed) of the GGUF at `path`'s decode
    step of k rows spread over `sequences` sequences of `cells` cached tokens (`spread_rows`), at
    each of `ks`, split and unified, at `threads` threads.

    Raises:
        PolyplanError: the bindings are missing, or llama.cpp cannot load the file or make a context.
    """
    from polyplan.decoder import llama_cpp_buffers
    from polyplan.decoder.llama_cpp import llama_cpp_module

    lib = llama_cpp_module()
    log(f"timing {path.name}'s step over {sequences} sequences of {cells} cached tokens, with a KV stream each and one "
        f"unified stream, k = {', '.join(map(str, ks))}, at {threads} thread(s) (once; cached)")
    params = lib.llama_model_default_params()
    params.use_extra_bufts = llama_cpp_buffers.extra_buffers(path, lib.__version__).enabled
    model = lib.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise PolyplanError(f"kv-unified timing: llama.cpp cannot load {path}")
    vocab = int(lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model)))
    width = max(max(ks), _BATCH)
    batch = lib.llama_batch_init(width, 0, 1)
    contexts = []
    try:
        for unified in (False, True):
            contexts.append(_context(lib, model, threads, sequences, sequences * (cells + max(ks)) + 256, width, unified))
        split, joined = contexts
        for context in contexts:
            for start in range(0, cells, _BATCH):
                _decode(lib, context, batch, [(0, position) for position in range(start, min(cells, start + _BATCH))], vocab)
        for sequence in range(1, sequences):
            _copy_sequence(lib, joined, sequence)
            lib.llama_memory_seq_cp(lib.llama_get_memory(split), 0, sequence, -1, -1)
        times = {(unified, k): [] for unified in (False, True) for k in ks}
        for round_ in range(repeats + 1):
            order = (False, True) if round_ % 2 == 0 else (True, False)
            for unified in order:
                context = contexts[unified]
                for k in ks:
                    rows = [(sequence, cells + j) for sequence, count in enumerate(spread_rows(k, sequences))
                            for j in range(count)]
                    began = time.perf_counter()
                    _decode(lib, context, batch, rows, vocab)
                    elapsed = time.perf_counter() - began
                    memory = lib.llama_get_memory(context)
                    for sequence in range(sequences):
                        lib.llama_memory_seq_rm(memory, sequence, cells, -1)
                    if round_ > 0:
                        times[(unified, k)].append(elapsed)
    finally:
        for context in contexts:
            lib.llama_free(context)
        lib.llama_batch_free(batch)
        lib.llama_model_free(model)
    return UnifiedSteps(sequences, cells, tuple(ks), tuple(statistics.median(times[(False, k)]) for k in ks),
                        tuple(statistics.median(times[(True, k)]) for k in ks))


def _context(lib, model, threads: int, sequences: int, n_ctx: int, batch: int, unified: bool):
    params = lib.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = params.n_ubatch = batch
    params.n_threads = params.n_threads_batch = threads
    params.n_seq_max = sequences
    params.kv_unified = unified
    context = lib.llama_init_from_model(model, params)
    if not context:
        raise PolyplanError(f"kv-unified timing: llama.cpp cannot make a context of {n_ctx} tokens for {sequences} sequences")
    return context


def _decode(lib, context, batch, rows: Sequence[tuple[int, int]], vocab: int) -> None:
    """One `llama_decode` of `rows` (sequence, position), every row's logits asked for as a
    verification asks; the token ids are spread over the vocabulary (timing does not depend on which)."""
    batch.n_tokens = len(rows)
    for i, (sequence, position) in enumerate(rows):
        batch.token[i] = (17 + 7919 * (position + 131 * sequence)) % max(vocab - 1, 1) + 1
        batch.pos[i] = position
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = sequence
        batch.logits[i] = True
    status = lib.llama_decode(context, batch)
    if status != 0:
        raise PolyplanError(f"kv-unified timing: llama_decode failed with status {status}")


def _copy_sequence(lib, context, sequence: int) -> None:
    """Sequence 0's cells copied into new cells of `sequence` in the same (unified) context."""
    size = int(lib.llama_state_seq_get_size(context, 0))
    buffer = (ctypes.c_ubyte * size)()
    written = int(lib.llama_state_seq_get_data(context, buffer, size, 0))
    if written == 0 or int(lib.llama_state_seq_set_data(context, buffer, written, sequence)) == 0:
        raise PolyplanError(f"kv-unified timing: llama.cpp could not copy sequence 0 to sequence {sequence}")
