"""Load a validated models.yaml (`polyplan.formats.candidates.CandidateSet`) into chain members.

Sources (`decoder.sources`): `builtin:<name>` (the shipped zoo family), a local HF folder, a
`.gguf` file (dequantized once into the cache), or a hub id (from the local Hugging Face cache
only; an uncached one is a clear error). Derived entries are built from their (loaded) base:
`quantize` → `derive.quantize_model`, `layers` → `derive.early_exit_model`, `kind: ngram` →
`NGramMember` over the target's vocabulary.

The compatibility check compares every candidate with the target: identical token-to-id
maps, identical special tokens, and as many logit rows as tokens unless the entry declares
`padded_vocab: true` (then the extra rows are masked by `HFMember.valid_vocab_size`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from polyplan.formats.candidates import Candidate, CandidateSet, EarlyExit, NGram, Quantize
from polyplan.decoder.chain import first_difference
from polyplan.decoder.derive import early_exit_model, num_layers, quantize_model
from polyplan.decoder.hf import HFMember
from polyplan.decoder.reduced_vocab import with_saved_subset
from polyplan.decoder.sources import source_folder
from polyplan.decoder.member import ChainMember
from polyplan.decoder.ngram import NGramMember
from polyplan.formats.errors import PolyplanError, first_line
from polyplan.zoo.builtin import cached_validation_loss

_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class LoadedCandidate:
    """One candidate ready to sit in a chain.

    Attributes:
        parameters: Parameter count (of the base model for derived copies; shared weights of
            an early-exit copy counted once for the layers it keeps); None for ngram.
        dtype: What its weights run in, e.g. "float32" or "int8 (dynamic)"; "-" for ngram.
        validation_loss: Held-out loss (nats/token) measured when the builtin family was
            trained, when this candidate is that family's model or variant; else None.
    """

    candidate: Candidate
    member: ChainMember
    parameters: int | None
    dtype: str
    device: str
    validation_loss: float | None


@dataclass(frozen=True)
class Compatibility:
    """Whether candidate `name` can share a chain with the target; `detail` says why not."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class LoadedCandidates:
    """Every loaded candidate (target first), the target's tokenizer, and the check result."""

    candidates: tuple[LoadedCandidate, ...]
    tokenizer: object
    compatibility: tuple[Compatibility, ...]

    @property
    def compatible(self) -> bool:
        """True when every candidate passed the compatibility check."""
        return all(result.ok for result in self.compatibility)

    def member(self, name: str) -> ChainMember:
        """The chain member of candidate `name`."""
        for loaded in self.candidates:
            if loaded.candidate.name == name:
                return loaded.member
        raise PolyplanError(f"candidate {name!r}: not among the loaded candidates")

    def chain(self, names: list[str] | tuple[str, ...]) -> list[ChainMember]:
        """Members for a chain M_1 … M_n given by candidate names (target first)."""
        return [self.member(name) for name in names]


@dataclass
class _Model:
    """A loaded HF model with what the check needs (internal, mutable while loading)."""

    model: torch.nn.Module
    tokenizer: object
    parameters: int
    dtype: str
    variant: str | None  # key in the builtin family's cached losses, when builtin
    folder: Path | None


def load_candidates(candidates: CandidateSet, *, require_compatible: bool = True) -> LoadedCandidates:
    """Load every candidate and run the compatibility check against the target.

    Raises:
        PolyplanError: naming the entry: a folder or builtin that cannot be loaded, a corrupt
            weights file, `layers` deeper than the model, an offline hub id, or (when
            `require_compatible`) the first candidate that fails the compatibility check.
    """
    from polyplan.decoder.devices import check_device

    for candidate in candidates.candidates:  # before any model loads
        check_device(candidate.device, f"{candidates.origin}: candidate {candidate.name!r}: device")
    models: dict[str, _Model] = {}
    loaded: list[LoadedCandidate] = []
    for candidate in candidates.candidates:
        if isinstance(candidate.derive, NGram):
            continue
        model = _load_model(candidate, candidates, models)
        rows, tokens = model.model.get_output_embeddings().out_features, len(model.tokenizer)
        if rows < tokens:
            raise PolyplanError(
                f"{candidates.origin}: candidate {candidate.name!r}: its tokenizer has {tokens} tokens "
                f"but the model only {rows} logit rows"
            )
        member = HFMember(model.model, name=candidate.name, tokenizer=model.tokenizer)
        loss = cached_validation_loss(model.folder, model.variant) if model.variant and model.folder else None
        loaded.append(LoadedCandidate(candidate, member, model.parameters, model.dtype, candidate.device, loss))
    target = models[candidates.target.name]
    vocab = len(target.tokenizer)
    for candidate in candidates.candidates:
        if isinstance(candidate.derive, NGram):
            derive = candidate.derive
            member = NGramMember(vocab, max_n=derive.max_n, min_n=derive.min_n, name=candidate.name)
            loaded.append(LoadedCandidate(candidate, member, None, "-", "cpu", None))
    order = {c.name: i for i, c in enumerate(candidates.candidates)}
    loaded.sort(key=lambda item: order[item.candidate.name])
    results = tuple(_compatibility(item, models, candidates.target.name) for item in loaded)
    if require_compatible:
        for result in results:
            if not result.ok:
                raise PolyplanError(f"{candidates.origin}: candidate {result.name!r}: {result.detail}")
    return LoadedCandidates(tuple(loaded), target.tokenizer, results)


def _load_model(candidate: Candidate, candidates: CandidateSet, models: dict[str, _Model]) -> _Model:
    if candidate.name in models:
        return models[candidate.name]
    label = f"{candidates.origin}: candidate {candidate.name!r}"
    derive = candidate.derive
    if isinstance(derive, Quantize):
        base = _load_model(candidates.by_name(derive.base), candidates, models)
        model = quantize_model(base.model, derive.kind, candidate.device)
        result = _Model(model, base.tokenizer, base.parameters, _quantized_dtype(derive.kind),
                        _variant(base.variant, f"-{derive.kind}"), base.folder)
    elif isinstance(derive, EarlyExit):
        base = _load_model(candidates.by_name(derive.base), candidates, models)
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


def _quantized_dtype(kind: str) -> str:
    """What a quantized copy's weights run in, as `models check` shows it."""
    return f"{kind} (dynamic)" if kind in ("int8", "int8-head") else kind


def _variant(base: str | None, suffix: str) -> str | None:
    return None if base is None else base + suffix


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _load_source(candidate: Candidate, label: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = _TORCH_DTYPES[candidate.dtype]
    folder = source_folder(candidate, label)
    where = str(folder)
    from transformers.utils import logging as hf_logging

    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # one "Loading weights" bar per model would drown the table
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(where, local_files_only=True, dtype=dtype, **_placement(candidate))
    except Exception as error:  # noqa: BLE001 - safetensors, HF hub and OS errors share no base class
        reason = first_line(error)
        kind = "corrupt or unreadable weights" if "safetensor" in type(error).__name__.lower() else "cannot load"
        raise PolyplanError(f"{label}: {kind} in {where} ({reason})") from None
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()
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


def _specials(tokenizer: object) -> dict[str, tuple[str, int]]:
    """Special-token role → (token, id), e.g. {'eos_token': ('<|endoftext|>', 0)}."""
    result = {}
    for role in ("bos_token", "eos_token", "unk_token", "pad_token"):
        token = getattr(tokenizer, role, None)
        if token is not None:
            result[role] = (str(token), tokenizer.convert_tokens_to_ids(str(token)))
    return result


def _compatibility(item: LoadedCandidate, models: dict[str, _Model], target_name: str) -> Compatibility:
    name = item.candidate.name
    if isinstance(item.candidate.derive, NGram):
        return Compatibility(name, True, "ok (uses the target's vocabulary)")
    mine, target = models[name], models[target_name]
    difference = first_difference(target.tokenizer.get_vocab(), mine.tokenizer.get_vocab())
    if difference is not None:
        return Compatibility(name, False, f"tokenizer differs from the target {target_name!r}: {difference}")
    specials, reference = _specials(mine.tokenizer), _specials(target.tokenizer)
    if specials != reference:
        role = next(r for r in sorted(set(specials) | set(reference)) if specials.get(r) != reference.get(r))
        return Compatibility(
            name, False, f"special token {role} is {specials.get(role)!r}, the target {target_name!r} has {reference.get(role)!r}"
        )
    rows, tokens = item.member.vocab_size, len(mine.tokenizer)
    if rows > tokens and not item.candidate.padded_vocab:
        return Compatibility(
            name, False, f"{rows} logit rows for {tokens} tokens; declare 'padded_vocab: true' to mask the padding"
        )
    if rows > tokens:
        return Compatibility(name, True, f"ok ({rows - tokens} padded rows masked)")
    return Compatibility(name, True, "ok")
