"""What a profiling run checks before it measures anything (so bad input never costs a result)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from polyplan.decoder.compatibility import incompatibility
from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import SCHEMA_VERSION, Profile, read_profile
from polyplan.formats.processor import Processor, processor_labels
from polyplan.profiler.forward_timing import DEFAULT_CONTEXT_LENGTHS
from polyplan.profiler.prompts import EncodedPrompt, check_fits
from polyplan.profiler.settings import ProfileSettings

if TYPE_CHECKING:
    from polyplan.models.fingerprints import ProfiledModel


def check_models(models: Sequence[ProfiledModel]) -> None:
    """Unique names (the loader checked that models from a models.yaml can share a chain)."""
    names = [model.name for model in models]
    for name in names:
        if names.count(name) > 1:
            raise PolyplanError(f"candidates: duplicate name {name!r}")


def check_handed_models(models: Sequence[ProfiledModel]) -> None:
    """Every model can share a chain with the target (`decoder.compatibility`): for
    `profile_models`, the library entry, which is handed members that did not come through the
    loader."""
    target = models[0]
    for model in models[1:]:
        reason = incompatibility(model.member, target.member, f"the target {target.name!r}")
        if reason is not None:
            raise PolyplanError(f"candidate {model.name!r}: {reason}")


def check_inputs_fit(models: Sequence[ProfiledModel], prompts: Sequence[EncodedPrompt], settings: ProfileSettings) -> None:
    """Every prompt (plus the generated and drafted tokens) and the latency contexts fit every model."""
    acceptance = settings.acceptance
    extra = acceptance.new_tokens + (max(acceptance.block_sizes) if acceptance.decoded else 0)
    for model in models:
        limit = model.member.max_context
        check_fits(prompts, model.name, limit, extra)
        if limit is not None and settings.latency.tokens_needed > limit:
            raise PolyplanError(
                f"--context-lengths: {max(settings.latency.context_lengths)} cached + {max(settings.latency.ks)} new "
                f"tokens does not fit the context of {model.name!r} ({limit} tokens)"
            )


def fit_default_contexts(models: Sequence[ProfiledModel], settings: ProfileSettings) -> tuple[ProfileSettings, str | None]:
    """The default latency context lengths cut to what every model's context holds (a short
    context is valid, and the defaults must not fail on it): the lengths that fit, else the
    longest that does, with a one-line note saying so. Other lengths are left as they are
    (`check_inputs_fit` then names the one that does not fit)."""
    latency = settings.latency
    limits = [(model.member.max_context, model.name) for model in models if model.member.max_context is not None]
    if latency.context_lengths != DEFAULT_CONTEXT_LENGTHS or not limits:
        return settings, None
    limit, name = min(limits, key=lambda item: item[0])  # the first (the target first) of the shortest
    widest = max(latency.ks)
    kept = tuple(length for length in latency.context_lengths if length + widest <= limit) or (limit - widest,)
    if kept == latency.context_lengths or kept[0] < 1:
        return settings, None
    fitted = dataclasses.replace(settings, latency=dataclasses.replace(latency, context_lengths=kept))
    return fitted, (f"--context-lengths: the default {','.join(map(str, latency.context_lengths))} does not fit the "
                    f"{limit}-token context of {name!r} (with k up to {widest}); timing at {','.join(map(str, kept))}")


def read_existing(out: Path) -> Profile | None:
    """The profile already at `out` (None if there is none); refuses anything it must not overwrite."""
    if out.is_dir():
        raise PolyplanError(f"--out: {out} is a folder; give a file path")
    if not out.exists():
        return None
    try:
        return read_profile(out)
    except PolyplanError as error:
        text = str(error)
        if "schema_version" in text:
            raise PolyplanError(
                f"--out: {out} holds a profile of another schema version (this polyplan writes version "
                f"{SCHEMA_VERSION}); move it away or choose another --out"
            ) from None
        raise PolyplanError(f"--out: {out} exists but is not a valid profile ({text}); move it away or choose another --out") from None


def foreign_profile_reason(existing: Profile | None, target: ProfiledModel, device_label: str,
                           processor: Processor | None = None) -> str | None:
    """Why the profile `existing` was made for other models or another machine (None when a
    run on `target` and `device_label` may extend it)."""
    if existing is None:
        return None
    return foreign_models_reason(existing, target) or foreign_machine_reason(existing, device_label, processor)


def foreign_models_reason(existing: Profile, target: ProfiledModel) -> str | None:
    """Why `existing` was made for another target, or for the target's other weights."""
    if existing.target != target.name:
        return f"it was made for the target {existing.target!r}, this run's target is {target.name!r}"
    own = next((model for model in existing.models if model.name == target.name), None)
    if own is not None and own.fingerprint != target.fingerprint:
        return f"its target {target.name!r} had other weights (fingerprint {own.fingerprint[:19]}…, now {target.fingerprint[:19]}…)"
    return None


def foreign_machine_reason(existing: Profile, device_label: str, processor: Processor | None) -> str | None:
    """Why `existing`'s timings were taken elsewhere: another device label (CPU model name or
    thread count, GPU), or, where both are recorded, another processor (`formats.processor`:
    its ISA flags or torch's quantized engine; two virtual machines may share a model name)."""
    if existing.device != device_label:
        return f"it was measured on {existing.device!r}, this run is on {device_label!r}"
    labels = None if existing.processor is None or processor is None else processor_labels(existing.processor, processor)
    if labels is not None:
        return f"it was measured on '{labels[0]}', this run is on '{labels[1]}'"
    return None


def check_same_profile(existing: Profile | None, out: Path, target: ProfiledModel, device_label: str,
                       processor: Processor | None = None) -> None:
    """Refuse to extend (and so overwrite) a profile made for other models or another machine."""
    reason = foreign_profile_reason(existing, target, device_label, processor)
    if reason is not None:
        raise PolyplanError(f"--out: {out} is not extended: {reason}; it is kept as it is, choose another --out")
