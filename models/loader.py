"""The one model loader (`load_candidates`): models.yaml candidates to chain members, for every
command that runs models. `engine: llama.cpp` entries become `decoder.llama_cpp.LlamaCppMember`s,
derived file by file; torch entries derive through `models.derive`; rule drafters take the target's
vocabulary. The compatibility check (`decoder.compatibility`) runs here and only here, once per
candidate against the target, before any model runs; padded logit rows pass only when the entry
declares `padded_vocab: true`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from polyplan.formats.candidates import (RULE_DRAFTERS, Candidate, CandidateSet, EarlyExit, NGram, NGramSimple, Quantize,
                                         ReducedVocab, base_chain)
from polyplan.decoder.compatibility import incompatibility
from polyplan.models.derive import early_exit_model, num_layers, quantize_model
from polyplan.decoder.hf import HFMember
from polyplan.models.reduced_vocab import with_saved_subset
from polyplan.models.sources import source_folder
from polyplan.decoder.member import ChainMember
from polyplan.decoder.ngram import NGramMember
from polyplan.decoder.ngram_simple import NGramSimpleMember
from polyplan.formats.errors import PolyplanError, first_line
from polyplan.models.builtin import cached_validation_loss
from polyplan.models.fingerprints import ProfiledModel

_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class LoadedCandidate:
    """One candidate ready to sit in a chain. `parameters`: the base model's for derived copies (an
    early exit's for the layers it keeps), None for ngram; `dtype` e.g. "int8 (dynamic)", "-" for
    ngram; `validation_loss` (nats/token) measured when the builtin family was trained, for its
    models; `fingerprint` (`models.fingerprints`) only when loaded to be profiled."""

    candidate: Candidate
    member: ChainMember
    parameters: int | None
    dtype: str
    device: str
    validation_loss: float | None
    fingerprint: str | None = None


@dataclass(frozen=True)
class Compatibility:
    """Whether candidate `name` can share a chain with the target; `detail` says why not."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class LoadedCandidates:
    """Every loaded candidate (target first), the target's tokenizer, and the check's results."""

    candidates: tuple[LoadedCandidate, ...]
    tokenizer: object
    compatibility: tuple[Compatibility, ...]

    @property
    def device(self) -> str:
        """Where models.yaml placed the target (what a profile records as its device)."""
        return self.candidates[0].candidate.device

    @property
    def profiled(self) -> tuple[ProfiledModel, ...]:
        """The candidates as the profiler measures them, target first (name, member, fingerprint)."""
        missing = [item.candidate.name for item in self.candidates if item.fingerprint is None]
        if missing:
            raise ValueError(f"not fingerprinted (load them with models.fingerprints.load_fingerprinted): {', '.join(missing)}")
        return tuple(ProfiledModel(item.candidate.name, item.member, item.fingerprint) for item in self.candidates)

    @property
    def compatible(self) -> bool:
        return all(result.ok for result in self.compatibility)

    def member(self, name: str) -> ChainMember:
        for loaded in self.candidates:
            if loaded.candidate.name == name:
                return loaded.member
        raise PolyplanError(f"candidate {name!r}: not among the loaded candidates")

    def chain(self, names: list[str] | tuple[str, ...]) -> list[ChainMember]:
        """Members for a chain M_1 … M_n given by candidate names (target first)."""
        return [self.member(name) for name in names]


@dataclass(frozen=True)
class _Model:
    """A candidate's raw torch model, what its derived copies are built from (an `HFMember` may
    wrap a shallow copy with another head), cached by name while one set loads."""

    model: torch.nn.Module
    tokenizer: object
    parameters: int
    dtype: str
    variant: str | None  # key in the builtin family's cached losses, when builtin
    folder: Path | None


def load_candidates(
    candidates: CandidateSet, *, require_compatible: bool = True, labels: Mapping[str, str] | None = None
) -> LoadedCandidates:
    """Load every candidate and check it against the target; PolyplanError naming the entry that
    cannot be loaded or (`require_compatible`) the first that fails. `labels`: a candidate's name
    in errors (default "<models.yaml>: candidate 'name'"; `models.chain_candidates` names positions)."""
    from polyplan.models.devices import check_device

    label_of = {c.name: f"{candidates.origin}: candidate {c.name!r}" for c in candidates.candidates} | dict(labels or {})
    for candidate in candidates.candidates:  # before any model loads
        check_device(candidate.device, f"{label_of[candidate.name]}: device")
    models: dict[str, _Model] = {}
    loaded: list[LoadedCandidate] = []
    tokenizers: dict[str, object] = {}
    for candidate in candidates.candidates:
        if isinstance(candidate.derive, RULE_DRAFTERS):
            continue
        if candidate.engine == "llama.cpp":
            item = _load_llama_cpp(candidate, candidates, label_of[candidate.name])
            tokenizers[candidate.name] = item.member.tokenizer
            loaded.append(item)
            continue
        model = _load_model(candidate, candidates, models, label_of)
        member = HFMember(model.model, name=candidate.name, tokenizer=model.tokenizer)
        loss = cached_validation_loss(model.folder, model.variant) if model.variant and model.folder else None
        loaded.append(LoadedCandidate(candidate, member, model.parameters, model.dtype, candidate.device, loss))
        tokenizers[candidate.name] = model.tokenizer
    target_tokenizer = tokenizers[candidates.target.name]
    vocab = len(target_tokenizer)
    for candidate in candidates.candidates:
        derive = candidate.derive
        if isinstance(derive, NGram):
            member = NGramMember(vocab, max_n=derive.max_n, min_n=derive.min_n, name=candidate.name)
        elif isinstance(derive, NGramSimple):
            member = NGramSimpleMember(vocab, size_n=derive.size_n, name=candidate.name)
        else:
            continue
        loaded.append(LoadedCandidate(candidate, member, None, "-", "cpu", None))
    order = {c.name: i for i, c in enumerate(candidates.candidates)}
    loaded.sort(key=lambda item: order[item.candidate.name])
    target_member = next(item.member for item in loaded if item.candidate.name == candidates.target.name)
    results = tuple(_compatibility(item, target_member, candidates.target.name) for item in loaded)
    if require_compatible:
        for result in results:
            if not result.ok:
                raise PolyplanError(f"{label_of[result.name]}: {result.detail}")
    return LoadedCandidates(tuple(loaded), target_tokenizer, results)


def _load_model(candidate: Candidate, candidates: CandidateSet, models: dict[str, _Model], labels: Mapping[str, str]) -> _Model:
    if candidate.name in models:
        return models[candidate.name]
    label = labels[candidate.name]
    derive = candidate.derive
    if isinstance(derive, Quantize):
        base = _load_model(candidates.by_name(derive.base), candidates, models, labels)
        model = quantize_model(base.model, derive.kind, candidate.device, derive.head)
        result = _Model(model, base.tokenizer, base.parameters, _quantized_label(derive),
                        _variant(base.variant, f"-{derive.kind}" + ("" if derive.head is None else f"-head{derive.head}")),
                        base.folder)
    elif isinstance(derive, EarlyExit):
        base = _load_model(candidates.by_name(derive.base), candidates, models, labels)
        depth = num_layers(base.model)
        if derive.layers > depth:
            raise PolyplanError(f"{label}: layers {derive.layers} is larger than {derive.base!r}, which has {depth} layers")
        model = early_exit_model(base.model, derive.layers)
        result = _Model(model, base.tokenizer, _count(model), base.dtype,
                        _variant(base.variant, f"-exit{derive.layers}"), base.folder)
    else:
        folder, model, tokenizer = _load_source(candidate, label)
        variant = candidate.source[len("builtin:"):] if candidate.source_kind == "builtin" else None
        result = _Model(model, tokenizer, _count(model), candidate.dtype, variant, folder)
    models[candidate.name] = result
    return result


def _load_llama_cpp(candidate: Candidate, candidates: CandidateSet, label: str) -> LoadedCandidate:
    """A GGUF entry on llama.cpp, or its derived copy: each derivation from the root on applied to
    the file the previous one made; a reduced vocabulary always comes last (its inputs are the
    rows of the file it was cut from)."""
    from transformers import AutoTokenizer

    from polyplan.decoder.llama_cpp import LlamaCppMember
    from polyplan.models.gguf_source import tokenizer_folder_for_gguf
    from polyplan.models.llama_vocab import reduced_vocab_copy, vocab_subset

    chain = base_chain(candidates, candidate.name)
    root = chain[-1]
    path, subset, steps = Path(root.source), None, []
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder_for_gguf(root.source)), local_files_only=True)
        for derived in reversed(chain[:-1]):  # root first
            if isinstance(derived.derive, ReducedVocab):
                reduced = reduced_vocab_copy(path, derived.derive, tokenizer)
                path, subset = reduced, vocab_subset(reduced, path)
            else:
                path, step = _llama_cpp_copy(path, derived.derive)
                steps.append(step)
        member = LlamaCppMember(path, name=candidate.name, tokenizer=tokenizer, context=candidate.context, subset=subset)
    except PolyplanError as error:
        raise PolyplanError(f"{label}: {error}") from None
    what = member.info.description + (f" ({', then '.join(steps)})" if steps else "")
    if subset is not None:
        what += f" (head over {subset.keep.numel()} of {subset.vocab} tokens)"
    return LoadedCandidate(candidate, member, member.info.parameters, f"llama.cpp: {what}", "cpu", None)


def _llama_cpp_copy(path: Path, derive: Quantize | EarlyExit) -> tuple[Path, str]:
    """The cached file one llama.cpp derivation makes from GGUF file `path`, and what it did."""
    from polyplan.models.gguf_prune import block_count, pruned_copy
    from polyplan.models.llama_quantize import quantized_copy

    if isinstance(derive, Quantize):
        return quantized_copy(path, derive.kind), f"requantized by llama.cpp to {derive.kind}"
    depth = block_count(path)
    if not 1 <= derive.layers <= depth:
        raise PolyplanError(f"layers {derive.layers} is outside 1..{depth}: {derive.base!r} has {depth} transformer blocks")
    return pruned_copy(path, derive.layers), f"first {derive.layers} of {depth} blocks"


def _quantized_label(derive: Quantize) -> str:
    """What a quantized copy's weights run in, as `models check` shows it."""
    label = f"{derive.kind} (dynamic)" if derive.kind in ("int8", "int8-head") else derive.kind
    return label if derive.head is None else f"{label}, {derive.head} head (dynamic)"


def _variant(base: str | None, suffix: str) -> str | None:
    return None if base is None else base + suffix


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _load_source(candidate: Candidate, label: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = _TORCH_DTYPES[candidate.dtype]
    folder = source_folder(candidate, label)
    where = str(folder)
    from polyplan.models.hf_bars import hf_progress_bars_off

    with hf_progress_bars_off():  # one "Loading weights" bar per model would drown the table
        try:
            tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=True)
        except Exception as error:  # noqa: BLE001 - a broken folder's errors share no base class
            raise PolyplanError(f"{label}: cannot load its tokenizer from {where} ({first_line(error)})") from None
        try:
            model = AutoModelForCausalLM.from_pretrained(where, local_files_only=True, dtype=dtype, **_placement(candidate))
        except Exception as error:  # noqa: BLE001 - safetensors, HF hub and OS errors share no base class
            corrupt = "corrupt or unreadable weights: " if "safetensor" in type(error).__name__.lower() else ""
            raise PolyplanError(f"{label}: {corrupt}cannot load a causal language model from {where} ({first_line(error)})") from None
    model = with_saved_subset(model, folder)
    placed = model if candidate.device_map is not None else model.to(candidate.device)  # accelerate placed its layers
    return folder, placed.eval(), tokenizer


def _placement(candidate: Candidate) -> dict:
    """`from_pretrained` arguments of a `device_map: auto` entry (accelerate), else none."""
    if candidate.device_map is None:
        return {}
    from polyplan.formats.cache import cache_root

    folder = candidate.offload_folder or str(cache_root() / "offload" / candidate.name)
    limits = {device: limit for device, limit in candidate.max_memory}
    return {"device_map": candidate.device_map, "offload_folder": folder, **({"max_memory": limits} if limits else {})}


def _compatibility(item: LoadedCandidate, target: ChainMember, target_name: str) -> Compatibility:
    name = item.candidate.name
    if isinstance(item.candidate.derive, RULE_DRAFTERS):
        return Compatibility(name, True, "ok (uses the target's vocabulary)")
    reason = incompatibility(item.member, target, f"the target {target_name!r}")
    if reason is not None:
        return Compatibility(name, False, reason)
    rows, tokens = item.member.vocab_size, item.member.valid_vocab_size
    if rows > tokens and not item.candidate.padded_vocab:
        return Compatibility(
            name, False, f"{rows} logit rows for {tokens} tokens; declare 'padded_vocab: true' to mask the padding"
        )
    if rows > tokens:
        return Compatibility(name, True, f"ok ({rows - tokens} padded rows masked)")
    return Compatibility(name, True, "ok")
