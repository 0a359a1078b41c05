"""Will a race's llama-servers fit in memory? The estimate, and groups that fit (`race_groups`).

Each server holds, per GGUF it loads, the weights, its f16 KV cache at the context and
`MODEL_ALLOWANCE`. Weights llama.cpp maps from the file (`--no-repack`) are page cache shared by
every process mapping it, so a group counts each such file once; repacked weights are each
server's own. docs/engines.md, "Memory".
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.errors import PolyplanError

GB = 1e9
F16_BYTES = 2
# Compute buffers, output buffer and runtime per model a process loads, beyond weights and KV
# (what it was sized on: docs/engines.md, "The race harness").
MODEL_ALLOWANCE = 256 * 2**20
# Kept free of MemAvailable: it is a snapshot (other processes grow, the page cache of prompts and
# logs), and the estimate above is one.
_MEMORY_MARGIN = 0.10


@dataclass(frozen=True)
class ModelMemory:
    """One GGUF file: its size (the weights) and its f16 KV cache per token of context."""

    path: str
    file_bytes: int
    kv_bytes_per_token: int


@dataclass(frozen=True)
class MemoryNeed:
    """What one process needs: its own bytes, and the files it maps ((path, bytes); shared by
    every process in memory that maps the same file, so counted once per group)."""

    label: str
    private_bytes: int
    mapped: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class RaceGroups:
    """The servers' labels per group (the base first in each, then the input order), those
    too large even beside the base and the resident process, and the figures behind them."""

    groups: tuple[tuple[str, ...], ...]
    too_large: tuple[tuple[str, int], ...]  # (label, bytes it needs together with the base and the resident process)
    needed: int  # bytes of every process at once
    available: int  # usable bytes (MemAvailable less the margin)
    resident: int  # bytes of the resident process (polyplan's members)


def gguf_memory(path: str | os.PathLike[str]) -> ModelMemory:
    """The size of GGUF file `path` and its f16 KV cache per token, from its header (a file without
    attention metadata, a recurrent model, gets none).

    Raises:
        PolyplanError: the file cannot be read or is not GGUF.
    """
    from polyplan.formats.gguf_header import HeaderError, read_header

    try:
        header = read_header(path)
        size = os.path.getsize(path)
    except (OSError, HeaderError) as error:
        raise PolyplanError(f"{path}: cannot read its GGUF header to estimate its memory ({error})") from None
    arch = header.architecture or ""

    def per_layer(key: str, layers: int) -> list[int]:
        value = header.arrays.get(key, header.metadata.get(key))
        if value is None:
            return []
        if isinstance(value, (int, float)):
            return [int(value)] * layers
        return [int(v) for v in value][:layers]

    layers = header.metadata.get(f"{arch}.block_count")
    layers = layers if isinstance(layers, int) else 0
    heads = per_layer(f"{arch}.attention.head_count", layers)
    kv_heads = per_layer(f"{arch}.attention.head_count_kv", layers) or heads
    embedding = header.metadata.get(f"{arch}.embedding_length")
    widest = max(heads, default=0)
    default = embedding // widest if isinstance(embedding, int) and widest else 0
    key = header.metadata.get(f"{arch}.attention.key_length", default)
    value = header.metadata.get(f"{arch}.attention.value_length", key)
    return ModelMemory(str(Path(path).resolve()), size, sum(kv_heads) * (int(key) + int(value)) * F16_BYTES)


def process_need(label: str, models: Sequence[tuple[ModelMemory, int]], *, mapped: bool, other_bytes: int = 0) -> MemoryNeed:
    """A process loading `models` ((model, context in tokens) each), its weights `mapped` or its
    own, plus `other_bytes` (weights it holds outside llama.cpp)."""
    private = other_bytes + sum(model.kv_bytes_per_token * context + MODEL_ALLOWANCE for model, context in models)
    if not mapped:
        return MemoryNeed(label, private + sum(model.file_bytes for model, _ in models))
    return MemoryNeed(label, private, tuple((model.path, model.file_bytes) for model, _ in models))


def group_bytes(needs: Sequence[MemoryNeed]) -> int:
    """Bytes of these processes at once: each one's own, each mapped file once."""
    files = {path: size for need in needs for path, size in need.mapped}
    return sum(need.private_bytes for need in needs) + sum(files.values())


def race_groups(base: MemoryNeed, others: Sequence[MemoryNeed], resident: MemoryNeed, available: int) -> RaceGroups:
    """Split `others` into groups that fit `available` bytes together with `base` (in every
    group) and `resident` (all along): first fit, largest first; one group when all fit.

    Raises:
        PolyplanError: `base` and `resident` alone do not fit.
    """
    floor = group_bytes([resident, base])
    if floor > available:
        raise PolyplanError(f"memory: {base.label} and {resident.label} need {floor / GB:.1f} GB, "
                            f"{available / GB:.1f} GB available; free memory or use a smaller target or --context")
    packed: list[list[MemoryNeed]] = []
    too_large = []
    for need in sorted(others, key=lambda n: -group_bytes([resident, base, n])):  # sorted() is stable: ties keep their order
        if group_bytes([resident, base, need]) > available:
            too_large.append((need.label, group_bytes([resident, base, need])))
            continue
        spot = next((group for group in packed if group_bytes([resident, base, *group, need]) <= available), None)
        if spot is None:
            packed.append([need])
        else:
            spot.append(need)
    order = {need.label: index for index, need in enumerate(others)}
    groups = [[base.label] + sorted((n.label for n in group), key=order.__getitem__) for group in packed] or [[base.label]]
    groups.sort(key=lambda labels: min((order[label] for label in labels[1:]), default=-1))
    too_large.sort(key=lambda item: order[item[0]])
    return RaceGroups(tuple(map(tuple, groups)), tuple(too_large), group_bytes([resident, base, *others]), available,
                      group_bytes([resident]))


def memory_line(plan: RaceGroups, servers: int) -> str:
    """The race's one line on memory: the need, what is available, and the groups."""
    head = (f"memory: {servers} configurations need {plan.needed / GB:.1f} GB (polyplan's plan in this process "
            f"{plan.resident / GB:.1f} GB), {plan.available / GB:.1f} GB available (MemAvailable less {_MEMORY_MARGIN:.0%})")
    left = f"; too large even beside the target alone: {', '.join(label for label, _ in plan.too_large)}" if plan.too_large else ""
    if len(plan.groups) == 1:
        return f"{head}; racing {'the rest' if plan.too_large else 'them'} all at once{left}"
    listed = "; ".join(f"group {number}: {', '.join(labels[1:])}" for number, labels in enumerate(plan.groups, 1))
    return (f"{head}; racing in {len(plan.groups)} groups, each with {plan.groups[0][0]} and polyplan's plan "
            f"(speedups over its own group's target alone): {listed}{left}")


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int:
    """Bytes the kernel can give without swapping: MemAvailable of `meminfo` (Linux); else
    psutil's figure; else the free physical pages (`os.sysconf`)."""
    try:
        for line in meminfo.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key == "MemAvailable":
                return int(value.split()[0]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def usable_memory(meminfo: Path = Path("/proc/meminfo")) -> int:
    """`available_memory` less `_MEMORY_MARGIN`."""
    return int(available_memory(meminfo) * (1.0 - _MEMORY_MARGIN))


def resident_need(label: str, loaded, *, mapped: bool) -> MemoryNeed:
    """Polyplan's own loaded members (`models.loader.LoadedCandidates`), resident for the whole
    race: each llama.cpp member as a process loading its GGUF at its context would; each
    torch model its tensors' bytes (shared tensors once); n-gram drafters nothing."""
    from polyplan.decoder.llama_cpp import DEFAULT_CONTEXT

    models, seen, tensors = [], set(), 0
    for item in loaded.candidates:
        member = item.member
        path = getattr(member, "path", None)
        if path is not None and str(path).endswith(".gguf"):
            models.append((gguf_memory(path), item.candidate.context or DEFAULT_CONTEXT))
            continue
        module = getattr(member, "model", None)
        if module is None or not hasattr(module, "parameters"):
            continue
        for tensor in (*module.parameters(), *module.buffers()):
            if tensor.data_ptr() not in seen:
                seen.add(tensor.data_ptr())
                tensors += tensor.numel() * tensor.element_size()
    return process_need(label, models, mapped=mapped, other_bytes=tensors)
