"""Where the pipeline keeps a profile, and what it reads back from one before extending it.

The profile cache lives in a user cache folder, never inside the installed package
(`formats.cache.cache_root`). A cached profile is named by a hash of the candidates' fingerprints
and the device label, so changed weights or another thread count start (or resume) another file.
The label names the CPU model, not its flags: a cached profile whose recorded processor differs
(virtual machines share a model name) is re-timed in place, its acceptance kept (`retimed_here`),
rather than keyed apart, which would orphan every cached profile.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from polyplan.formats.cache import cache_root
from polyplan.formats.errors import PolyplanError
from polyplan.formats.processor import Processor
from polyplan.formats.profile import Profile, ProfilerRecord, read_profile
from polyplan.models.hashing import fingerprint_settings
from polyplan.profiler.forward_timing import LatencySettings
from polyplan.profiler.prompt_sets import PromptSet, prompt_set
from polyplan.profiler.settings import AcceptanceSettings, ProfileSettings
from polyplan.profiler.threads import plan_threads


def cached_profile_path(fingerprints: dict[str, str], device_label: str, cache_dir: str | os.PathLike[str] | None) -> Path:
    """The cache file for these candidates on this device."""
    key = fingerprint_settings("profile-cache", sorted(fingerprints.items()), device_label).split(":", 1)[1][:20]
    folder = cache_root(cache_dir) / "profiles"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PolyplanError(f"--cache-dir: cannot create {folder} ({error.strerror or error})") from None
    return folder / f"{key}.json"


def readable_profile(path: Path) -> Profile | None:
    """The profile at `path` if it is one (the run itself reports a broken file)."""
    try:
        return read_profile(path) if path.is_file() else None
    except PolyplanError:
        return None


def settings_of(profile: Profile | None, temperature: float | None = None) -> ProfileSettings:
    """The settings `profile` was measured with (its `profiler` record), else the defaults (with
    only `temperature` as sampling mode, when given); `temperature` is always among the modes.
    Other settings would re-measure every entry (each entry's fingerprint includes them)."""
    settings = ProfileSettings() if temperature is None else ProfileSettings(acceptance=AcceptanceSettings(temperatures=(temperature,)))
    if profile is not None:
        recorded = profile.profiler
        try:
            latency = {key: tuple(value) if isinstance(value, list) else value for key, value in recorded.latency.items()}
            acceptance = {key: tuple(value) if isinstance(value, list) else value for key, value in recorded.acceptance.items()}
            settings = ProfileSettings(latency=LatencySettings(**latency), acceptance=AcceptanceSettings(**acceptance))
        except (KeyError, TypeError, AttributeError, PolyplanError):
            pass  # written by another polyplan: measure afresh with the defaults
    if temperature is not None and temperature not in settings.acceptance.temperatures:
        acceptance = dataclasses.replace(settings.acceptance, temperatures=settings.acceptance.temperatures + (temperature,))
        settings = dataclasses.replace(settings, acceptance=acceptance)
    return settings


def prompts_of(profile: Profile | None, path: str | os.PathLike[str] | None) -> PromptSet | None:
    """The prompt file `profile` (read from `path`) was measured on (its `profiler` record), as
    the run read it; None when there is no such profile or it used the built-in prompts.

    Raises:
        PolyplanError: the recorded file is gone (one line naming it and the way out).
    """
    recorded = profile.profiler if profile is not None else None
    if recorded is None or recorded.prompt_file is None:
        return None
    if not Path(recorded.prompt_file).is_file():
        raise PolyplanError(
            f"--prompts: {path} was measured on the prompts in {recorded.prompt_file}, which is not there any more; "
            "pass --prompts FILE (entries measured on other prompts are measured again)"
        )
    return prompt_set(recorded.prompt_file, raw=recorded.raw_prompts)  # as read then: prompts that did not fit were left out


def resumed_threads(path: str | os.PathLike[str] | None) -> int | None:
    """The CPU threads the profile at `path` was timed with (its device label); None without a
    readable one (the run itself reports a broken profile)."""
    profile = readable_profile(Path(path)) if path is not None else None
    return plan_threads(profile.device) if profile is not None else None


def recorded_prompts(record: ProfilerRecord | None, prompts: PromptSet) -> ProfilerRecord:
    """`record` with the prompt file of `prompts` (an absolute path; None for built-in prompts)."""
    record = record if record is not None else ProfilerRecord()
    prompt_file = None if prompts.truncate else str(Path(prompts.source).resolve())
    return dataclasses.replace(record, prompt_file=prompt_file, raw_prompts=prompts.raw)


def forget_latency(profile: Profile) -> Profile:
    """`profile` without its latency fingerprints (in memory, before a run extends it), so the
    run re-times the curves."""
    return dataclasses.replace(profile, models=tuple(dataclasses.replace(model, latency_fingerprint=None) for model in profile.models))


def retimed_here(profile: Profile, device_label: str, processor: Processor | None, fingerprints: dict[str, str]) -> Profile:
    """A copy of `profile`, measured on another processor or device, for a run here to extend:
    its acceptance statistics and agreement runs kept (they do not depend on the processor for
    float models), every timing dropped so that the run takes it again, and the models not among
    `fingerprints` (this run's candidates) left out with their pairs, since their timings could
    not be re-taken. Timings of two machines are never mixed."""
    models = tuple(dataclasses.replace(model, latency_fingerprint=None, timing=None)
                   for model in profile.models if model.name in fingerprints)
    kept = {model.name for model in models}
    return dataclasses.replace(
        profile, models=models, pairs=tuple(pair for pair in profile.pairs if pair.verifier in kept and pair.drafter in kept),
        device=device_label, processor=processor, loop_overhead={}, engine_overhead={}, switch_costs=None,
    )

