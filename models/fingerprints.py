"""From a models.yaml to the models a profiling run measures, each with the fingerprint that keys
its profile entries (`candidate_fingerprints`): a source entry's files (or hub id when not cached)
with what changes how it runs; a derived entry's derivation added to its base's; an n-gram
drafter's parameters added to the target's. A model has one type per stage: `Candidate` in
models.yaml, `models.loader.LoadedCandidate` once loaded, `ProfiledModel` as the profiler measures it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polyplan.formats.candidates import RULE_DRAFTERS, Candidate, CandidateSet, NGram, NGramSimple, ReducedVocab, base_chain
from polyplan.models.file_fingerprints import file_fingerprint
from polyplan.models.hashing import fingerprint_settings
from polyplan.decoder.member import ChainMember

if TYPE_CHECKING:
    from polyplan.models.loader import LoadedCandidates


@dataclass(frozen=True)
class ProfiledModel:
    """A model as the profiler measures it: its profile name, its chain member and its
    fingerprint (from models.yaml: `LoadedCandidates.profiled`; tests build them directly)."""

    name: str
    member: ChainMember
    fingerprint: str


def candidate_fingerprints(candidates: CandidateSet, names: Iterable[str] | None = None) -> dict[str, str]:
    """The fingerprints of the candidates `names` (default: all) and of the entries they derive from, by name."""
    cache: dict[str, str] = {}
    chosen = candidates.candidates if names is None else tuple(candidates.by_name(name) for name in names)
    for candidate in chosen:
        _fingerprint(candidate, candidates, cache)
    return cache


def _fingerprint(candidate: Candidate, candidates: CandidateSet, cache: dict[str, str]) -> str:
    if candidate.name in cache:
        return cache[candidate.name]
    derive = candidate.derive
    if isinstance(derive, NGram):
        value = fingerprint_settings("ngram", dataclasses.asdict(derive), _fingerprint(candidates.target, candidates, cache))
    elif isinstance(derive, NGramSimple):
        value = fingerprint_settings("ngram-simple", dataclasses.asdict(derive), _fingerprint(candidates.target, candidates, cache))
    elif isinstance(derive, ReducedVocab):
        base = _fingerprint(candidates.by_name(derive.base), candidates, cache)
        kept = {"size": derive.size} if derive.ids is None else {"ids": file_fingerprint(derive.ids)}
        value = fingerprint_settings("ReducedVocab", kept, base, candidate.device)
    elif derive is not None:
        base = _fingerprint(candidates.by_name(derive.base), candidates, cache)
        value = fingerprint_settings(type(derive).__name__, dataclasses.asdict(derive), base, candidate.device)
    elif candidate.engine == "llama.cpp":
        value = fingerprint_settings("source", _source_fingerprint(candidate), *_llama_cpp_engine(candidate))
    else:  # a split model times differently; only when set, so unsplit models' keys stay as they were
        split = () if candidate.device_map is None else ({"device_map": candidate.device_map, "max_memory": [list(item) for item in candidate.max_memory]},)
        value = fingerprint_settings(
            "source", _source_fingerprint(candidate), candidate.dtype, candidate.device, candidate.padded_vocab, *split
        )
    cache[candidate.name] = value
    return value


def _llama_cpp_engine(candidate: Candidate) -> tuple:
    """What changes a llama.cpp member besides its file: the bindings' version (which pins the
    vendored llama.cpp), the file's quantization type and the context it reserves."""
    from polyplan.decoder.llama_cpp import engine_version
    from polyplan.models.gguf_source import read_gguf_info

    file_type = read_gguf_info(candidate.source).metadata.get("general.file_type")
    return ("llama.cpp", engine_version(), {"file_type": file_type, "context": candidate.context})


def _source_fingerprint(candidate: Candidate) -> str:
    if candidate.source_kind == "builtin":
        from polyplan.models.builtin import builtin_folder

        return file_fingerprint(builtin_folder(candidate.source.split(":", 1)[1]))
    if candidate.source_kind in ("local", "gguf"):  # a GGUF file: its contents, as its cache key
        return file_fingerprint(candidate.source)
    from polyplan.models.sources import cached_hub_folder

    folder = cached_hub_folder(candidate.source)  # the cached snapshot's files, when there is one
    return file_fingerprint(folder) if folder is not None else f"hub:{candidate.source}"


def with_device(candidates: CandidateSet, device: str | None) -> CandidateSet:
    """The same candidates, every one placed on `device` (None: left where they are; the n-gram
    drafter stays on the CPU, and a `device_map: auto` model where accelerate puts its layers)."""
    if device is None:
        return candidates
    moved = tuple(
        c if isinstance(c.derive, RULE_DRAFTERS) or base_chain(candidates, c.name)[-1].device_map is not None
        else dataclasses.replace(c, device=device)
        for c in candidates.candidates
    )
    return dataclasses.replace(candidates, candidates=moved)


def load_fingerprinted(candidates: CandidateSet) -> LoadedCandidates:
    """Load every candidate with its fingerprint (`loaded.profiled` is the profiler's input)."""
    from polyplan.models.loader import load_candidates

    fingerprints = candidate_fingerprints(candidates)  # before loading: a source's files as they are
    loaded = load_candidates(candidates)
    items = tuple(dataclasses.replace(item, fingerprint=fingerprints[item.candidate.name]) for item in loaded.candidates)
    return dataclasses.replace(loaded, candidates=items)
