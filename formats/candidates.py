"""The `models.yaml` schema, strictly validated (`read_candidates`, `parse_candidates`): each
violation is one `PolyplanError` line naming the entry. Every key and rule: docs/models-yaml.md,
"Rules".
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyplan.formats.errors import PolyplanError
from polyplan.formats.options import integer_at_least
from polyplan.formats.fetchable import FETCH_PREFIX, fetched_path

_BUILTIN_PREFIX = "builtin:"
DTYPES = ("float32", "float16", "bfloat16")
_QUANTIZATIONS = ("int8", "int8-head", "int4", "bf16")
_MEMBER_ENGINES = ("torch", "llama.cpp")  # what a models.yaml member runs on (its `engine:`)
# llama.cpp's quantizer types a llama.cpp entry's `quantize` may name (its `llama_ftype`s).
LLAMA_CPP_QUANTIZATIONS = ("f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_0", "q5_1", "q4_k_m", "q4_k_s",
                           "q4_0", "q4_1", "q3_k_m", "q3_k_s", "q3_k_l", "q2_k", "iq4_nl", "iq4_xs")
_DEFAULT_LLAMA_CPP_CONTEXT = 4096

_ENTRY_KEYS = frozenset(
    {"name", "source", "derive", "target", "dtype", "device", "padded_vocab", "device_map", "max_memory", "offload_folder",
     "engine", "context"}
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")

# The quantizations without a fast kernel on a device family (docs/models-yaml.md, "Derived copies"); bf16 on a
# CPU without native bf16 matmul needs torch to find out, so `models.derive` checks it when the copy is made.
_REFUSED = {
    ("int8", "cuda"): "dynamic int8 quantization has CPU kernels only",
    ("int8-head", "cuda"): "dynamic int8 quantization has CPU kernels only",
    ("int4", "cpu"): "plain torch has no int4 matmul kernel on CPU",
    ("int4", "cuda"): "plain torch has no int4 matmul kernel (it needs torchao)",
}
_HEADS = ("int8",)  # `head:` of a quantize derivation: the LM head as `int8-head` makes it
_HEAD_KINDS = ("int8", "bf16")  # the quantizations a `head:` can be combined with


def supported_quantization(kind: str, device: str) -> str | None:
    """None when quantization `kind` has a fast kernel on `device`, else the reason why not."""
    if kind not in _QUANTIZATIONS:
        return f"unknown quantization {kind!r} (choose one of {', '.join(_QUANTIZATIONS)})"
    family = "cuda" if device.startswith("cuda") else device
    return _REFUSED.get((kind, family))


@dataclass(frozen=True)
class Quantize:
    """A copy of entry `base` with its linear layers quantized to `kind`; `head` "int8": its LM
    head is int8-head's (dynamic int8, the top logits recomputed in float32 from `base`'s)."""

    base: str
    kind: str
    head: str | None = None


@dataclass(frozen=True)
class EarlyExit:
    """A copy of entry `base` that keeps its first `layers` decoder layers, final norm and head."""

    base: str
    layers: int


@dataclass(frozen=True)
class ReducedVocab:
    """A llama.cpp copy of entry `base` whose output head covers `size` token ids (the most
    frequent, `models.llama_vocab`), or the ids listed in the JSON file `ids` (a resolved path)."""

    base: str
    size: int | None = None
    ids: str | None = None


@dataclass(frozen=True)
class NGram:
    """A prompt-lookup drafter (no weights) matching n-grams from `max_n` down to `min_n`."""

    max_n: int = 3
    min_n: int = 1


@dataclass(frozen=True)
class NGramSimple:
    """llama.cpp's `ngram-simple` drafter (no weights): after the last `size_n` tokens occurred
    before, it drafts the tokens that followed them (up to the chain's block size), and
    nothing otherwise (`decoder.ngram_simple`)."""

    size_n: int = 3


Derivation = Quantize | EarlyExit | ReducedVocab | NGram | NGramSimple
MODEL_DERIVATIONS = (Quantize, EarlyExit, ReducedVocab)  # derivations made from a base entry's weights
RULE_DRAFTERS = (NGram, NGramSimple)  # derivations without weights: drafters made from the context alone


@dataclass(frozen=True)
class Candidate:
    """One validated entry of models.yaml (its keys: docs/models-yaml.md)."""

    name: str
    source: str | None  # "builtin:<name>", a resolved folder or .gguf file, or a hub id; None: derived
    source_kind: str  # "builtin", "local", "gguf", "hub", or "derived"
    derive: Derivation | None
    is_target: bool
    dtype: str
    device: str
    padded_vocab: bool
    device_map: str | None = None  # "auto": accelerate splits the model over devices
    max_memory: tuple[tuple[str | int, str | int], ...] = ()  # accelerate's (device, bytes or size) limits
    offload_folder: str | None = None  # where accelerate offloads layers to disk (None: the polyplan cache)
    engine: str = "torch"  # or "llama.cpp" (derived entries inherit their root's)
    context: int | None = None  # tokens llama.cpp reserves (llama.cpp entries)


@dataclass(frozen=True)
class CandidateSet:
    """All candidates of one models.yaml, target first, then in file order; `yaml` is the
    parsed file they were validated from (what a plan records of them; None for a set made
    by hand, e.g. a chain of folders)."""

    candidates: tuple[Candidate, ...]
    origin: str
    yaml: Any = field(default=None, compare=False, repr=False)

    @property
    def target(self) -> Candidate:
        """The entry marked `target: true`."""
        return self.candidates[0]

    def by_name(self, name: str) -> Candidate:
        """The entry called `name`."""
        for candidate in self.candidates:
            if candidate.name == name:
                return candidate
        raise PolyplanError(f"{self.origin}: no candidate named {name!r}")


def read_candidates(path: str | Path) -> CandidateSet:
    """Read and validate a models.yaml file; local sources resolve relative to its folder, and a
    derived entry takes its root's device (unless it names its own), dtype, padded_vocab and engine."""
    from polyplan.formats.inputs import read_yaml_file

    path = Path(path)
    if not path.is_file():
        raise PolyplanError(f"--candidates: file {path} not found")
    data = read_yaml_file(path, "models.yaml")
    return parse_candidates(data, base_dir=path.parent, origin=str(path))


def parse_candidates(data: Any, *, base_dir: Path, origin: str = "models.yaml") -> CandidateSet:
    """Validate the parsed YAML `data` (the rules: docs/models-yaml.md)."""
    if not isinstance(data, dict) or set(data) != {"candidates"}:
        keys = sorted(data) if isinstance(data, dict) else type(data).__name__
        raise PolyplanError(f"{origin}: expected one top-level key 'candidates', got {keys}")
    entries = data["candidates"]
    if not isinstance(entries, list) or not entries:
        raise PolyplanError(f"{origin}: 'candidates' must be a non-empty list of entries")
    candidates: list[Candidate] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        candidate = _parse_entry(entry, index, base_dir, origin)
        if candidate.name in seen:
            raise PolyplanError(f"{origin}: candidate {candidate.name!r}: duplicate name")
        seen.add(candidate.name)
        candidates.append(candidate)
    targets = [c for c in candidates if c.is_target]
    if not targets:
        raise PolyplanError(f"{origin}: no candidate has 'target: true'; mark exactly one")
    if len(targets) > 1:
        names = ", ".join(repr(c.name) for c in targets)
        raise PolyplanError(f"{origin}: candidate {targets[1].name!r}: a second target ({names}); mark exactly one")
    if targets[0].derive is not None:
        raise PolyplanError(f"{origin}: candidate {targets[0].name!r}: the target must have a 'source', not 'derive'")
    by_name = {c.name: c for c in candidates}
    _check_derivations(by_name, origin)
    candidates = [_inherit_device(c, by_name) for c in candidates]
    for candidate in candidates:
        if candidate.engine == "llama.cpp":
            _check_llama_cpp_derivation(candidate, origin, by_name)
            continue
        if isinstance(candidate.derive, ReducedVocab):
            raise PolyplanError(
                f"{origin}: candidate {candidate.name!r}: derive: vocab cuts a llama.cpp file's head, and "
                f"{_root(candidate, by_name).name!r} runs on torch (give it 'engine: llama.cpp')"
            )
        if isinstance(candidate.derive, Quantize) and candidate.derive.kind not in _QUANTIZATIONS:
            raise PolyplanError(
                f"{origin}: candidate {candidate.name!r}: derive: quantize {candidate.derive.kind!r} is a llama.cpp type, and "
                f"{_root(candidate, by_name).name!r} runs on torch (give it 'engine: llama.cpp', or choose one of {', '.join(_QUANTIZATIONS)})"
            )
        if isinstance(candidate.derive, Quantize) and _root(candidate, by_name).device_map is not None:
            raise PolyplanError(
                f"{origin}: candidate {candidate.name!r}: cannot quantize {candidate.derive.base!r}, which uses "
                "device_map: auto (quantization needs every weight in memory; a split model keeps some elsewhere)"
            )
        if isinstance(candidate.derive, Quantize):
            reason = supported_quantization(candidate.derive.kind, candidate.device)
            what = f"quantize {candidate.derive.kind}"
            if reason is None and candidate.derive.head is not None:
                reason, what = supported_quantization("int8-head", candidate.device), f"head {candidate.derive.head}"
            if reason is not None:
                raise PolyplanError(
                    f"{origin}: candidate {candidate.name!r}: {what} on "
                    f"{candidate.device}: {reason}"
                )
    target = next(c for c in candidates if c.is_target)
    return CandidateSet((target,) + tuple(c for c in candidates if not c.is_target), origin, data)


def _parse_entry(entry: Any, index: int, base_dir: Path, origin: str) -> Candidate:
    if not isinstance(entry, dict):
        raise PolyplanError(f"{origin}: candidates[{index}]: expected a mapping, got {type(entry).__name__}")
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise PolyplanError(f"{origin}: candidates[{index}]: missing 'name' (a non-empty string)")
    label = f"{origin}: candidate {name!r}"
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise PolyplanError(f"{label}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(_ENTRY_KEYS))})")
    has_source, has_derive = "source" in entry, "derive" in entry
    if has_source == has_derive:
        raise PolyplanError(f"{label}: give exactly one of 'source' and 'derive'")
    is_target = _boolean(entry, "target", label)
    padded_vocab = _boolean(entry, "padded_vocab", label)
    dtype = entry.get("dtype", "float32")
    if dtype not in DTYPES:
        raise PolyplanError(f"{label}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    device = entry.get("device", "")
    if device != "" and (not isinstance(device, str) or not _DEVICE.match(device)):
        raise PolyplanError(f"{label}: device {device!r} is not cpu, cuda or cuda:N")
    if has_source:
        source, kind = _resolve_source(entry["source"], base_dir, label)
        derive = None
    else:
        source, kind = None, "derived"
        derive = _parse_derive(entry["derive"], label, base_dir)
        if "dtype" in entry or padded_vocab:
            raise PolyplanError(
                f"{label}: 'dtype' and 'padded_vocab' belong to source entries; a derived entry keeps its base's"
            )
    split = _parse_device_map(entry, has_source, device, base_dir, label)
    engine, context = _parse_engine(entry, kind, label)
    return Candidate(name, source, kind, derive, is_target, dtype, device, padded_vocab, *split, engine=engine, context=context)


def _parse_engine(entry: dict, kind: str, label: str) -> tuple[str, int | None]:
    """(engine, context) of an entry; a derived entry's engine is filled in from its root later."""
    engine = entry.get("engine", "torch")
    if engine not in _MEMBER_ENGINES:
        raise PolyplanError(f"{label}: engine {engine!r} is not one of {', '.join(_MEMBER_ENGINES)}")
    if engine == "torch":
        if "context" in entry:
            raise PolyplanError(f"{label}: 'context' belongs to 'engine: llama.cpp' entries")
        return engine, None
    if kind == "derived":
        raise PolyplanError(f"{label}: 'engine' belongs to source entries; a derived entry runs on its base's engine")
    if kind != "gguf":
        raise PolyplanError(f"{label}: engine llama.cpp runs .gguf files; source {entry['source']!r} is not one")
    torch_keys = sorted({"dtype", "device", "padded_vocab", "device_map"} & set(entry))
    if torch_keys:
        raise PolyplanError(f"{label}: {torch_keys[0]!r} is a torch setting; engine llama.cpp runs the file at its own quantization on the CPU")
    context = entry.get("context", _DEFAULT_LLAMA_CPP_CONTEXT)
    if not isinstance(context, int) or isinstance(context, bool) or context < 16:
        raise PolyplanError(f"{label}: context must be an integer >= 16 (tokens llama.cpp reserves), got {context!r}")
    return engine, context


def _check_llama_cpp_derivation(candidate: Candidate, origin: str, by_name: dict[str, Candidate]) -> None:
    """A derived entry of a llama.cpp base: llama.cpp's quantizer types only, no `head` (a
    `layers` copy is checked like a torch one: >= 1 here, against the depth when loaded), and
    nothing made from a reduced-vocabulary copy."""
    label = f"{origin}: candidate {candidate.name!r}"
    derive = candidate.derive
    base_is_reduced = _base(candidate) is not None and isinstance(by_name[_base(candidate)].derive, ReducedVocab)
    if base_is_reduced:
        raise PolyplanError(f"{label}: derive: {derive.base!r} has a reduced vocabulary; derive from the entry it cuts instead")
    if isinstance(derive, Quantize):
        if derive.head is not None:
            raise PolyplanError(f"{label}: derive: head is a torch derivation; {derive.base!r} runs on llama.cpp")
        if derive.kind not in LLAMA_CPP_QUANTIZATIONS:
            raise PolyplanError(
                f"{label}: derive: quantize {derive.kind!r} is not a llama.cpp type (choose one of {', '.join(LLAMA_CPP_QUANTIZATIONS)})"
            )


def _parse_device_map(entry: dict, has_source: bool, device: str, base_dir: Path, label: str):
    """(device_map, max_memory, offload_folder) of an entry (the rules: docs/models-yaml.md)."""
    if "device_map" not in entry:
        extra = sorted({"max_memory", "offload_folder"} & set(entry))
        if extra:
            raise PolyplanError(f"{label}: {extra[0]!r} needs 'device_map: auto'")
        return None, (), None
    if not has_source:
        raise PolyplanError(f"{label}: 'device_map' belongs to source entries; a derived entry runs where its base's layers are")
    if entry["device_map"] != "auto":
        raise PolyplanError(f"{label}: device_map {entry['device_map']!r} is not supported (only 'auto')")
    if device:
        raise PolyplanError(f"{label}: give 'device' or 'device_map: auto', not both (device_map places the layers itself)")
    limits = entry.get("max_memory", {})
    if not isinstance(limits, dict) or not all(
        isinstance(value, (int, str)) and not isinstance(value, bool) for value in limits.values()
    ):
        raise PolyplanError(f"{label}: max_memory must map devices (0, 1, cpu, ...) to bytes or sizes like '2GiB'")
    folder = entry.get("offload_folder")
    if folder is not None:
        if not isinstance(folder, str) or not folder.strip():
            raise PolyplanError(f"{label}: offload_folder must be a folder path")
        path = Path(folder).expanduser()
        folder = str(path if path.is_absolute() else base_dir / path)
    return "auto", tuple(limits.items()), folder


def _boolean(entry: dict, key: str, label: str) -> bool:
    value = entry.get(key, False)
    if not isinstance(value, bool):
        raise PolyplanError(f"{label}: {key!r} must be true or false, got {value!r}")
    return value


def _resolve_source(source: Any, base_dir: Path, label: str) -> tuple[str, str]:
    if not isinstance(source, str) or not source.strip():
        raise PolyplanError(f"{label}: 'source' must be a folder, a .gguf file, a hub id, fetch:<name> or builtin:<name>")
    if source.startswith(FETCH_PREFIX):
        try:
            return str(fetched_path(source[len(FETCH_PREFIX):])), "gguf"
        except PolyplanError as error:
            raise PolyplanError(f"{label}: {error}") from None
    if source.startswith(_BUILTIN_PREFIX):
        name = source[len(_BUILTIN_PREFIX):]
        if not name:
            raise PolyplanError(f"{label}: 'builtin:' needs a model name, e.g. builtin:target")
        return source, "builtin"
    path = Path(source).expanduser()
    path = path if path.is_absolute() else base_dir / path
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise PolyplanError(f"{label}: GGUF file {source!r} not found (looked in {path})")
        return str(path), "gguf"
    if path.is_dir():
        return str(path), "local"
    looks_local = source.startswith((".", "/", "~")) or path.exists() or not _HUB_ID.match(source)
    if looks_local:
        raise PolyplanError(f"{label}: source folder {source!r} not found (looked in {path})")
    return source, "hub"


def _parse_derive(derive: Any, label: str, base_dir: Path) -> Derivation:
    if not isinstance(derive, dict):
        raise PolyplanError(f"{label}: 'derive' must be a mapping")
    keys = set(derive)
    if derive.get("kind") == "ngram":
        unknown = sorted(keys - {"kind", "max_n", "min_n"})
        if unknown:
            raise PolyplanError(f"{label}: derive: unknown key {unknown[0]!r} for kind ngram (allowed: max_n, min_n)")
        max_n, min_n = derive.get("max_n", 3), derive.get("min_n", 1)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (max_n, min_n)) or not 1 <= min_n <= max_n:
            raise PolyplanError(f"{label}: derive: need integers 1 <= min_n <= max_n, got min_n={min_n!r}, max_n={max_n!r}")
        return NGram(max_n=max_n, min_n=min_n)
    if derive.get("kind") == "ngram-simple":
        unknown = sorted(keys - {"kind", "size_n"})
        if unknown:
            raise PolyplanError(f"{label}: derive: unknown key {unknown[0]!r} for kind ngram-simple (allowed: size_n)")
        size_n = derive.get("size_n", 3)
        integer_at_least(size_n, 1, f"{label}: derive: size_n")
        return NGramSimple(size_n=size_n)
    if "kind" in keys:
        raise PolyplanError(f"{label}: derive: unknown kind {derive['kind']!r} (only 'ngram' or 'ngram-simple')")
    base = derive.get("from")
    if not isinstance(base, str):
        raise PolyplanError(f"{label}: derive: needs 'from: <entry name>' (or kind: ngram / ngram-simple)")
    operations = sorted(keys - {"from"})
    if operations not in (["quantize"], ["head", "quantize"], ["layers"], ["vocab"]):
        raise PolyplanError(
            f"{label}: derive: give exactly one of 'quantize' (optionally with 'head'), 'layers' and 'vocab' besides 'from', got {operations}"
        )
    if operations == ["vocab"]:
        return _parse_vocab(derive["vocab"], base, label, base_dir)
    if "quantize" in operations:
        kind = derive["quantize"]
        if kind not in _QUANTIZATIONS and kind not in LLAMA_CPP_QUANTIZATIONS:
            raise PolyplanError(
                f"{label}: derive: quantize {kind!r} is not one of {', '.join(_QUANTIZATIONS)} (torch) "
                f"or {', '.join(LLAMA_CPP_QUANTIZATIONS)} (llama.cpp)"
            )
        head = derive.get("head")
        if head is not None and head not in _HEADS:
            raise PolyplanError(f"{label}: derive: head {head!r} is not one of {', '.join(_HEADS)}")
        if head is not None and kind not in _HEAD_KINDS:
            raise PolyplanError(f"{label}: derive: head: {head} goes with quantize {' or '.join(_HEAD_KINDS)}, not {kind}")
        return Quantize(base=base, kind=kind, head=head)
    layers = derive["layers"]
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        raise PolyplanError(f"{label}: derive: layers must be an integer >= 1, got {layers!r}")
    return EarlyExit(base=base, layers=layers)


def _parse_vocab(vocab: Any, base: str, label: str, base_dir: Path) -> ReducedVocab:
    """`vocab: N` (an integer >= 1) or `vocab: <ids>.json` (an existing file)."""
    if isinstance(vocab, int) and not isinstance(vocab, bool):
        if vocab < 1:
            raise PolyplanError(f"{label}: derive: vocab must be an integer >= 1 (token ids the head keeps), got {vocab}")
        return ReducedVocab(base=base, size=vocab)
    if not isinstance(vocab, str) or not vocab.lower().endswith(".json"):
        raise PolyplanError(f"{label}: derive: vocab must be an integer >= 1 or a .json file of token ids, got {vocab!r}")
    path = Path(vocab).expanduser()
    path = path if path.is_absolute() else base_dir / path
    if not path.is_file():
        raise PolyplanError(f"{label}: derive: vocab id list {vocab!r} not found (looked in {path})")
    return ReducedVocab(base=base, ids=str(path))


def _base(candidate: Candidate) -> str | None:
    return candidate.derive.base if isinstance(candidate.derive, MODEL_DERIVATIONS) else None


def _check_derivations(by_name: dict[str, Candidate], origin: str) -> None:
    for candidate in by_name.values():
        base = _base(candidate)
        if base is None:
            continue
        if base not in by_name:
            raise PolyplanError(f"{origin}: candidate {candidate.name!r}: derive from unknown entry {base!r}")
        if isinstance(by_name[base].derive, RULE_DRAFTERS):
            raise PolyplanError(f"{origin}: candidate {candidate.name!r}: cannot derive from the n-gram drafter {base!r}")
    for candidate in by_name.values():
        path = [candidate.name]
        current = _base(candidate)
        while current is not None:
            if current in path:
                cycle = " -> ".join(path[path.index(current):] + [current])
                raise PolyplanError(f"{origin}: candidate {candidate.name!r}: derive cycle {cycle}")
            path.append(current)
            current = _base(by_name[current])


def _root(candidate: Candidate, by_name: dict[str, Candidate]) -> Candidate:
    """The `source` entry `candidate` derives from (itself for a source entry)."""
    while (base := _base(candidate)) is not None:
        candidate = by_name[base]
    return candidate


def _inherit_device(candidate: Candidate, by_name: dict[str, Candidate]) -> Candidate:
    """Fill in the device (the entry's own, else its base's, recursively, else cpu) and give a
    derived entry its root's dtype and padded_vocab."""
    current: Candidate | None = candidate
    while current is not None and current.device == "":
        base = _base(current)
        current = by_name[base] if base is not None else None
    device = current.device if current is not None else "cpu"
    root = _root(candidate, by_name)
    if root.engine == "llama.cpp":
        return dataclasses.replace(candidate, device="cpu", engine=root.engine, context=root.context)
    return dataclasses.replace(candidate, dtype=root.dtype, device=device, padded_vocab=root.padded_vocab)


def base_chain(candidates: CandidateSet, name: str) -> tuple[Candidate, ...]:
    """The entry `name` and the entries it derives from, root (a `source` entry) last."""
    chain = [candidates.by_name(name)]
    while (base := _base(chain[-1])) is not None:
        chain.append(candidates.by_name(base))
    return tuple(chain)


def default_candidates_path() -> Path:
    """The embedded family's models.yaml, shipped inside the package (`polyplan/data/zoo.yaml`) so
    that the default works after `pip install .` from any directory."""
    from importlib.resources import files

    path = Path(str(files("polyplan") / "data" / "zoo.yaml"))
    if not path.is_file():
        raise PolyplanError(f"--candidates: the packaged default {path} is missing (a broken install?); pass --candidates models.yaml")
    return path
