"""The closed loop's plumbing: candidates → cached profile → plan, and plan → the same models.

- `profile_candidates`: load a models.yaml, profile whatever the cached profile lacks through
  the profiler's resumable run (`profiler.run.profile_models`), then measure the decoding
  loop's own overhead (`profiler.overhead`) and, for greedy decoding, every pair's agreement
  sequence (`profiler.runs`, the exact model's acceptance runs), each model's switch cost
  (`profiler.switching`) and HF `generate`'s own loop overhead (`profiler.engine_overhead`,
  kept while its fingerprint holds), all in the profile's typed fields.
  Planning then is `planner.plan_file.plan_from_profile`, with `candidates=record` so that
  plan.json says which models.yaml (path, contents, device) it was made from.
- `plan_candidates`: the models.yaml a plan names, refusing models whose fingerprints
  changed since the plan was made.

The profile cache lives in a user cache folder, never inside the installed package:
`--cache-dir`, else `$POLYPLAN_CACHE_DIR`, else `$XDG_CACHE_HOME/polyplan`, else
`~/.cache/polyplan`. A cached profile is named by a hash of the candidates' fingerprints and
the device, so changed weights or another thread count start (or resume) another file.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyplan.formats.cache import CACHE_ENV, cache_root  # noqa: F401 - re-exported: callers import them from here
from polyplan.formats.candidates import CandidateSet, parse_candidates
from polyplan.formats.errors import PolyplanError
from polyplan.profiler.locks import profile_lock, timing_lock
from polyplan.formats.plan import PlanFile
from polyplan.formats.profile import AgreementRuns, LoopCalibration, Profile
from polyplan.formats.sampling import SamplingMode
from polyplan.profiler.candidates import candidate_fingerprints, with_device
from polyplan.profiler.fingerprint import fingerprint_settings
from polyplan.profiler.prompts import EncodedPrompt, Prompt, builtin_prompts, encode_prompts, read_prompt_file
from polyplan.profiler.settings import ProfileSettings


def _ensure_folder(folder: Path, option: str) -> Path:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PolyplanError(f"{option}: cannot create {folder} ({error.strerror or error})") from None
    return folder


def read_candidate_set(path: str | os.PathLike[str], device: str | None = None) -> tuple[CandidateSet, dict[str, Any]]:
    """The validated candidates (on `device` if given) and the plan's record of them."""
    from polyplan.formats.inputs import read_yaml_file

    path = Path(path)
    if not path.is_file():
        raise PolyplanError(f"--candidates: file {path} not found")  # as read_candidates says it
    data = read_yaml_file(path, "models.yaml")
    candidates = parse_candidates(data, base_dir=path.parent, origin=str(path))
    record = {"path": str(path.resolve()), "yaml": data, "device": device}
    return (with_device(candidates, device) if device is not None else candidates), record


@dataclass(frozen=True)
class PromptSet:
    """Prompts for a run: the raw prompts, where they came from, and whether they may be cut."""

    prompts: tuple[Prompt, ...]
    source: str
    truncate: bool  # built-in prompts are cut from the left to fit a small model; a user's are not
    raw: bool = False  # True: never wrap the prompts in the target's chat template


PROFILE_PER_KIND = 4  # the profiler's default built-in set: the first 4 prompts of each kind


def prompt_set(
    prompt_file: str | os.PathLike[str] | None = None,
    *,
    per_kind: int = PROFILE_PER_KIND,
    skip_per_kind: int = 0,
    max_prompts: int | None = None,
    raw: bool = False,
) -> PromptSet:
    """A user's prompt file, or built-in prompts: `per_kind` of each kind after the first
    `skip_per_kind` (validation skips the ones the profile was measured on). `raw`: send
    them as they are, never through the target's chat template."""
    if max_prompts is not None and max_prompts < 1:
        raise PolyplanError(f"--max-prompts: must be >= 1, got {max_prompts}")
    if per_kind < 1:
        raise PolyplanError(f"--prompts-per-kind: must be >= 1, got {per_kind}")
    if prompt_file is not None:
        return PromptSet(tuple(read_prompt_file(prompt_file)[:max_prompts]), str(prompt_file), False, raw)
    ranked = _builtin(max(2 * PROFILE_PER_KIND, skip_per_kind + per_kind))
    by_kind: dict[str, list[Prompt]] = {}
    for prompt in ranked:
        by_kind.setdefault(prompt.kind, []).append(prompt)
    kept = {kind: prompts[skip_per_kind:] for kind, prompts in by_kind.items()}
    interleaved = [kept[kind][i] for i in range(per_kind) for kind in by_kind if i < len(kept[kind])]
    if not interleaved:
        raise PolyplanError(f"built-in prompts: none left after skipping the first {skip_per_kind} of each kind")
    label = "built-in prompts" + (f" (held out from profiling: ranks {skip_per_kind + 1}..{skip_per_kind + per_kind} of each kind)"
                                  if skip_per_kind else "")
    return PromptSet(tuple(interleaved[:max_prompts]), label, True, raw)


@functools.lru_cache(maxsize=2)
def _builtin(per_kind: int) -> tuple[Prompt, ...]:
    # Parsing the held-out stdlib files takes seconds; the demo needs the set twice.
    return builtin_prompts(per_kind)


def validation_prompt_set(
    prompt_file: str | os.PathLike[str] | None = None, *, per_kind: int = 4, max_prompts: int | None = None, raw: bool = False
) -> PromptSet:
    """What validation runs on: a user's file, else built-in prompts the profile never saw."""
    return prompt_set(prompt_file, per_kind=per_kind, skip_per_kind=PROFILE_PER_KIND, max_prompts=max_prompts, raw=raw)


@dataclass(frozen=True)
class ProfiledCandidates:
    """A profile of the candidates (complete for `settings`), where it is, and the loaded models."""

    profile: Profile
    path: Path
    models: tuple  # profiler.run.ProfiledModel (target first)
    tokenizer: object
    record: dict[str, Any]  # the plan's `candidates` entry
    measured: int
    reused: int
    wall_time_s: float

    @property
    def drafters(self) -> tuple[str, ...]:
        """The candidates' drafters (the profile may hold more models, kept from earlier runs)."""
        return tuple(model.name for model in self.models[1:])


def cached_profile_path(fingerprints: dict[str, str], device_label: str, cache_dir: str | os.PathLike[str] | None) -> Path:
    """The cache file for these candidates on this device."""
    key = fingerprint_settings("profile-cache", sorted(fingerprints.items()), device_label).split(":", 1)[1][:20]
    return _ensure_folder(cache_root(cache_dir) / "profiles", "--cache-dir") / f"{key}.json"


def resumed_settings(path: str | os.PathLike[str] | None, temperature: float | None = None) -> ProfileSettings:
    """The settings the profile at `path` was measured with (its `profiler` record), else the defaults
    (with only `temperature` as sampling mode, when given); `temperature` is always among the
    modes. Resuming with other settings would re-measure every entry, since each entry's
    fingerprint includes its settings."""
    import dataclasses

    from polyplan.formats.profile_codec import load
    from polyplan.profiler.latency import LatencySettings
    from polyplan.profiler.settings import AcceptanceSettings

    settings = ProfileSettings() if temperature is None else ProfileSettings(acceptance=AcceptanceSettings(temperatures=(temperature,)))
    if path is not None and Path(path).is_file():
        recorded = load(path).profiler
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


def profile_candidates(
    candidates_path: str | os.PathLike[str],
    *,
    profile_path: str | os.PathLike[str] | None = None,
    settings: ProfileSettings | None = None,
    prompts: PromptSet | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    device: str | None = None,
    temperature: float | None = None,
    fresh_latency: bool = False,
    calibration_tokens: int = 64,
    progress=None,
    log=None,
) -> ProfiledCandidates:
    """Profile what is missing (resuming `profile_path`, else the cache), then the greedy
    agreement sequences (reused when unchanged) and the loop overhead, into the profile.

    `settings` None: as the profile being resumed was measured (`resumed_settings`, which
    adds the sampling `temperature` if given). `fresh_latency`: re-time every latency curve
    even when cached (latency is the part of a profile that goes stale with the machine's
    load; acceptance statistics do not), keeping everything else. `calibration_tokens`: tokens
    per timed call of the loop-overhead calibration (fewer: faster, noisier). A `profile_path`
    made for other models or on another machine is never overwritten: the run goes to the
    cache instead and `log` (default: stderr) says so. The profile file is locked while the
    run works, and the machine's timing lock is held (`polyplan.profiler.locks`).

    Raises:
        PolyplanError: a bad models.yaml or prompt file, models that cannot share a chain,
            no prompt that fits, an unwritable profile or cache folder.
    """
    from polyplan.profiler.candidates import load_models
    from polyplan.profiler.checks import foreign_profile_reason
    from polyplan.profiler.run import describe_device

    started = time.perf_counter()
    _, record = read_candidate_set(candidates_path, device)
    loaded = load_models(candidates_path, device=device)
    models, target_device = loaded.models, loaded.device
    fingerprints = {model.name: model.fingerprint for model in models}
    device_label = describe_device(target_device)
    path = Path(profile_path) if profile_path is not None else cached_profile_path(fingerprints, device_label, cache_dir)
    with contextlib.ExitStack() as held:
        held.enter_context(profile_lock(path))
        if profile_path is not None:
            foreign = foreign_profile_reason(_readable_profile(path), models[0], device_label)
            if foreign is not None:
                cached = cached_profile_path(fingerprints, device_label, cache_dir)
                if settings is None:  # measure as the file the user pointed at was measured
                    settings = resumed_settings(path, temperature)
                (log or _stderr)(f"note: {path} is kept as it is ({foreign}); profiling into {cached} instead")
                held.close()
                path = cached
                held.enter_context(profile_lock(path))
        held.enter_context(timing_lock())
        return _profile_into(path, models, loaded, record, settings, prompts, temperature, fresh_latency,
                             calibration_tokens, progress, target_device, started, log or _stderr)


def _profile_into(path, models, loaded, record, settings, prompts, temperature, fresh_latency, calibration_tokens,
                  progress, target_device, started, log) -> ProfiledCandidates:
    """The body of `profile_candidates`, with the profile `path` locked."""
    from polyplan.profiler.run import profile_models
    from polyplan.profiler.runs import ensure_agreement
    from polyplan.profiler.switching import measure_switch_costs, store_switch_costs
    from polyplan.profiler.sample_size import too_few_prompts
    from polyplan.profiler.validation_runs import fit_prompts

    if settings is None:
        settings = resumed_settings(path, temperature)
    prompts = prompts or prompt_set()
    acceptance = settings.acceptance
    reserve = acceptance.new_tokens + (max(acceptance.block_sizes) if acceptance.decoded else 0)
    limits = [model.member.max_context for model in models if model.member.max_context is not None]
    fitted = fit_prompts(
        encode_for(prompts, loaded.tokenizer), min(limits) if limits else None, reserve,
        truncate=prompts.truncate, source=prompts.source,
    )
    previous = _previous_runs(path)
    if fresh_latency:
        _forget_latency(path)
    outcome = profile_models(models, fitted.prompts, path, settings, device=target_device, progress=progress)
    warning = too_few_prompts(len(fitted.prompts))
    if warning is not None:
        log(f"warning: {warning}")
    profile = outcome.profile
    measured = len(outcome.measured)
    if 0.0 in acceptance.temperatures:
        ids = [prompt.ids for prompt in fitted.prompts]
        measured += ensure_agreement(profile, previous, models, ids, new_tokens=acceptance.new_tokens, seed=acceptance.seed)
    profile.loop_overhead = {
        SamplingMode(temperature).key: loop_overhead_entry(models[0].member, temperature, calibration_tokens)
        for temperature in acceptance.temperatures
    }
    context = min(settings.latency.context_lengths)
    flat = [token for prompt in fitted.prompts for token in prompt.ids]
    from polyplan.profiler.engine_overhead import ensure_hf_overhead  # HF generate's own loop (export, bench peers)

    measured += ensure_hf_overhead(profile, models, fitted.prompts[0].ids, acceptance.temperatures, tokens=calibration_tokens)
    stream = (flat * (context // max(len(flat), 1) + 2))[: context + 1]
    store_switch_costs(profile, measure_switch_costs(models, stream, context=context), context)
    profile.save(path)
    return ProfiledCandidates(
        profile, path, models, loaded.tokenizer, record, measured, len(outcome.reused), time.perf_counter() - started
    )


def _readable_profile(path: Path) -> Profile | None:
    """The profile at `path` if it is one (the run itself reports a broken file)."""
    from polyplan.formats.profile_codec import load

    try:
        return load(path) if path.is_file() else None
    except PolyplanError:
        return None


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _forget_latency(path: Path) -> None:
    """Drop the latency fingerprints of the profile at `path`, so the run re-times the curves."""
    profile = _readable_profile(path)
    if profile is None:
        return
    for model in profile.models:
        model.latency_fingerprint = None
    profile.save(path)


def _previous_runs(path: Path) -> AgreementRuns | None:
    """The greedy agreement runs of the profile at `path` before a run rewrites it."""
    profile = _readable_profile(path)
    return None if profile is None else profile.acceptance_runs.get("greedy")


def loop_overhead_entry(target, temperature: float, tokens: int = 64) -> LoopCalibration:
    """The loop overhead measured for the target's vocabulary and device (the profile's entry)."""
    import torch

    from polyplan.decoder.sampling import Sampling
    from polyplan.profiler.overhead import measure_loop_overhead

    overhead = measure_loop_overhead(
        target.valid_vocab_size, sampling=Sampling(temperature=temperature), device=getattr(target, "device", "cpu"),
        tokens=tokens, repeats=3, verifier=target,
    )
    return LoopCalibration(
        overhead.per_step_s, overhead.per_round_s, vocab=target.valid_vocab_size, threads=torch.get_num_threads(),
        method="decoding loop time outside forward passes, the target verifying a stand-in drafter "
               "at block sizes 1..8 and decoding alone, fitted per step and per round (profiler.overhead)",
    )


def plan_candidates(plan: PlanFile, label: str, candidates_path: str | os.PathLike[str] | None = None) -> CandidateSet:
    """The candidates of `plan` (its recorded models.yaml, or `candidates_path`), checked
    against the fingerprints the plan recorded (nothing is loaded yet).

    Raises:
        PolyplanError: the plan records no models.yaml and none was given; a model of the plan
            is missing; a model's files or derivation changed since the plan was made.
    """
    record = plan.candidates
    device = None if record is None else record.device
    if candidates_path is not None:
        candidates, _ = read_candidate_set(candidates_path, device)
    elif record is not None and record.path is not None:
        if Path(record.path).is_file():
            candidates, _ = read_candidate_set(record.path, device)
        else:  # the file moved: its recorded contents, relative sources resolved where it was
            candidates = parse_candidates(record.yaml, base_dir=Path(record.path).parent, origin=record.path)
            candidates = with_device(candidates, device) if device is not None else candidates
    else:
        raise PolyplanError(
            f"{label}: candidates: the plan does not record its models.yaml (made by `recommend --profile` alone); "
            "pass --candidates models.yaml"
        )
    now = candidate_fingerprints(candidates)
    for name, fingerprint in sorted(plan.profiled_fingerprints.items()):
        if name not in now:
            raise PolyplanError(f"{label}: model {name!r} of the plan is not in {candidates.origin}")
        if now[name] != fingerprint:
            raise PolyplanError(
                f"{label}: model {name!r} changed since the plan was made (fingerprint {fingerprint[:19]}… in the plan, "
                f"{now[name][:19]}… now); re-run polyplan recommend"
            )
    return candidates


def encode_for(prompts: PromptSet, tokenizer) -> Sequence[EncodedPrompt]:
    """The prompt set under the chain's tokenizer (through its chat template unless `prompts.raw`)."""
    return encode_prompts(prompts.prompts, tokenizer, raw=prompts.raw)
