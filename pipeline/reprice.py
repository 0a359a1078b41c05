"""Re-pricing a profile for another prompt file: new acceptance, the same timings.

A drafter's worth is the user's workload (a rule drafter's above all: prompt lookup accepts what
the prompt repeats), while a model's latency curve, the decoding loop's overhead, HF `generate`'s
overhead and the switch costs are the machine's and the models'. `reprice_profile` keeps all of
those from the profile it is given and measures only what the new prompts change: the target's
greedy stream on them, α of every pair under every sampling mode the profile has (the profiling
run itself, `profiler.run.profile_checked_models`, so that each entry is what `polyplan profile
--prompts NEW` would measure), and the agreement runs (`profiler.agreement_runs.ensure_agreement`).
Decoded runs are not re-measured: the agreement runs already price every chain, and decoded runs
were the larger part of a profile's time. The re-priced profile is a new file next to the original
(never over it), written as it is measured, so a rerun measures nothing new.

The profiler's latency fingerprint includes the token stream the curves were timed on, which is
taken from the prompts; re-pricing deliberately keeps curves timed on the original prompts'
stream (docs/profiling.md, "Re-pricing for new prompts", says why that moves nothing but which
tokens were fed), and the re-priced file keeps the original's latency entries as they were.
`recommend_repriced` then plans from the re-priced profile, as `polyplan recommend --profile P
--prompts NEW` does.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyplan.formats.candidates import CandidateSet, parse_candidates
from polyplan.formats.errors import PolyplanError
from polyplan.formats.outputs import check_output_file
from polyplan.formats.plan import PlanFile, write_plan
from polyplan.formats.profile import Profile, read_profile, write_profile
from polyplan.formats.sampling import SamplingMode
from polyplan.models.candidate_file import check_unchanged, read_candidate_file
from polyplan.models.fingerprints import candidate_fingerprints, load_fingerprinted, with_device
from polyplan.models.hashing import fingerprint_settings, fingerprint_tokens
from polyplan.pipeline.loop_costs import LoopCostsRun
from polyplan.pipeline.stages import ProfiledCandidates, Recommended, fitted_prompts, self_checked
from polyplan.planner.intervals.sample_size import too_few_prompts
from polyplan.planner.plan_builder import planned_from_profile
from polyplan.profiler.agreement_runs import ensure_agreement
from polyplan.profiler.checks import check_inputs_fit, check_models, foreign_machine_reason, foreign_models_reason, read_existing
from polyplan.profiler.locks import profile_lock, stderr_line, timing_lock
from polyplan.profiler.processor import this_processor
from polyplan.profiler.profile_cache import recorded_prompts, settings_of
from polyplan.profiler.prompt_sets import PromptSet
from polyplan.profiler.prompts import EncodedPrompt, token_stream
from polyplan.profiler.run import Step, describe_device, profile_checked_models
from polyplan.profiler.settings import ProfileSettings

KEPT = ("latency curves", "loop overhead", "HF overhead", "switch costs")  # what re-pricing never measures
AGREEMENT = Step("agreement", "agreement runs: the target's greedy streams and every pair's agreement")


@dataclass(frozen=True)
class Repriced:
    """A profile re-priced for other prompts: the new profile, where it is, and what was done.

    `measured`: the entries measured (each α entry's label, and `AGREEMENT`'s); `reused`: those an
    earlier re-pricing into the same file had measured already; `kept`: what the original gave
    unchanged (`KEPT`); `skipped`: what the original had that re-pricing does not measure."""

    profile: Profile
    path: Path
    original: Path
    prompt_source: str
    prompts: int  # after fitting them to the models
    measured: tuple[str, ...]
    reused: tuple[str, ...]
    kept: tuple[str, ...]
    skipped: tuple[str, ...]
    seconds: float
    profiled: ProfiledCandidates  # the loaded models and encoded prompts, for planning and the self-check


def repriced_path(original: str | os.PathLike[str], prompts: PromptSet) -> Path:
    """The default file of a re-pricing: `<stem>.<prompt-file-stem>.json` next to `original`."""
    original = Path(original)
    name = "builtin" if prompts.truncate else Path(prompts.source).stem
    return original.with_name(f"{original.stem}.{name}.json")


def reprice_profile(
    profile_path: str | os.PathLike[str],
    prompts: PromptSet,
    *,
    candidates: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] | None = None,
    progress=None,
    log: Callable[[str], None] | None = None,
) -> Repriced:
    """Re-price the profile at `profile_path` for `prompts` (module docstring) into `out` (default:
    `repriced_path`), resuming what an earlier re-pricing into `out` measured.

    The models are those the profile records (its models.yaml, else its recorded contents;
    `candidates`: another models.yaml), checked against the profile's fingerprints before any is
    loaded. This run must be where the profile was timed (same device label, threads included, and
    processor): its timings are kept, and a plan's self-check fits them on this machine.
    `progress`: a `profiler.run.Progress` (the agreement runs count as the last entry); `log`
    (default: stderr) says what is measured and what kept.

    Raises:
        PolyplanError: a missing or broken profile, prompt file or models.yaml; a model whose files
            are missing or changed since the profile, or that the profile never timed; another
            machine or thread count; an `out` that is the original or holds another profile.
    """
    started, log = time.perf_counter(), log or stderr_line
    original_path = Path(profile_path)
    if not original_path.is_file():
        raise PolyplanError(f"--profile: {original_path} not found")
    original = read_profile(original_path)
    path = Path(out) if out is not None else repriced_path(original_path, prompts)
    check_output_file(path, "--out", inputs=[("--profile", original_path), ("--prompts", None if prompts.truncate else prompts.source)])
    candidate_set, record = _candidates_of(original, original_path, candidates)
    names = _check_unchanged(original, original_path, candidate_set)
    settings = settings_of(original)  # as it was measured: other settings would measure other entries
    loaded = load_fingerprinted(candidate_set)
    models = loaded.profiled
    device_label, processor = describe_device(loaded.device), this_processor(loaded.device)
    elsewhere = foreign_machine_reason(original, device_label, processor)
    if elsewhere is not None:
        raise PolyplanError(f"--profile: {original_path} is re-priced only where it was timed, since its timings are kept: "
                            f"{elsewhere} (give --threads as it was timed, or profile anew here)")
    fitted = fitted_prompts(prompts, loaded, settings)
    if not fitted:
        raise PolyplanError(f"--prompts: no prompt of {prompts.source} fits the models' context")
    check_models(models)
    check_inputs_fit(models, fitted, settings)
    measuring = _acceptance_only(settings, original)
    dropped = [model.name for model in original.models if model.name not in names]
    decoded = any(stats.decoded for pair in original.pairs for stats in pair.sampling.values())
    skipped = ("decoded runs",) if decoded else ()
    log(f"re-pricing {original_path} for {len(fitted)} prompts of {prompts.source} into {path}: acceptance measured anew "
        f"(α of every pair under {', '.join(SamplingMode(t).key for t in measuring.acceptance.temperatures)}"
        + (", the agreement runs" if 0.0 in measuring.acceptance.temperatures else "")
        + f"); {', '.join(KEPT)} kept from the original"
        + ("; its decoded runs are not re-measured (the agreement runs price every chain)" if decoded else ""))
    if dropped:
        log(f"note: {', '.join(dropped)} of {original_path} {'is' if len(dropped) == 1 else 'are'} not in its models.yaml: "
            "left out of the re-priced profile (their acceptance cannot be measured here)")
    counted = _Counted(progress)
    with profile_lock(path), timing_lock():
        existing = read_existing(path)
        if existing is not None and foreign_models_reason(existing, models[0]) is not None:
            raise PolyplanError(f"--out: {path} is not extended: {foreign_models_reason(existing, models[0])}; "
                                "it is kept as it is, choose another --out")
        start = _start(original, existing, names, measuring, fitted, device_label)
        outcome = profile_checked_models(models, fitted, path, measuring, device=loaded.device, progress=counted,
                                         existing=start)
        profile = _with_original_timings(outcome.profile, original, names)
        profile = dataclasses.replace(profile, notes=_note(original_path, prompts, len(fitted), decoded), profiler=dataclasses.replace(
            recorded_prompts(profile.profiler, prompts), candidates=record, decoded_prompts=None))
        write_profile(profile, path)  # the timings back as the original has them, before the agreement runs
        agreement_s, agreement_measured = 0.0, False
        if 0.0 in measuring.acceptance.temperatures:
            counted.start(AGREEMENT)
            began = time.perf_counter()
            previous = None if existing is None else existing.acceptance_runs.get("greedy")
            profile, agreement_measured = ensure_agreement(profile, previous, models, [prompt.ids for prompt in fitted],
                                                           new_tokens=measuring.acceptance.new_tokens, seed=measuring.acceptance.seed,
                                                           reads=outcome.greedy)  # the α phase's greedy reads, not read again
            agreement_s = time.perf_counter() - began
            counted.done(AGREEMENT, reused=not agreement_measured)
            write_profile(profile, path)
    warning = too_few_prompts(len(fitted))
    if warning is not None:
        log(f"warning: {warning}")
    measured = tuple(step.label for step in outcome.measured) + ((AGREEMENT.label,) if agreement_measured else ())
    reused = tuple(step.label for step in outcome.reused if step.kind != "latency") + (
        (AGREEMENT.label,) if 0.0 in measuring.acceptance.temperatures and not agreement_measured else ())
    seconds = time.perf_counter() - started
    profiled = ProfiledCandidates(
        profile, path, models, loaded.tokenizer, record, len(measured), len(reused), seconds, outcome, len(fitted),
        LoopCostsRun(int(agreement_measured), agreement_s, 0.0, 0.0, 0.0), tuple(fitted),
    )
    return Repriced(profile, path, original_path, prompts.source, len(fitted), measured, reused, KEPT, skipped, seconds, profiled)


def _candidates_of(original: Profile, label: Path, candidates) -> tuple[CandidateSet, dict[str, Any]]:
    """The models.yaml the profile records (the file while it is there, else its recorded
    contents, relative sources resolved where it was), or `candidates`; and the record to keep.
    A source file that is missing fails here, named (`formats.candidates`)."""
    recorded = original.profiler.candidates if original.profiler is not None else None
    device = None if recorded is None else recorded.get("device")
    if candidates is None and (recorded is None or recorded.get("path") is None):
        raise PolyplanError(f"--profile: {label} does not record its models.yaml (made by an older polyplan); "
                            "profile it again with polyplan profile --candidates models.yaml")
    try:
        if candidates is not None or Path(recorded["path"]).is_file():
            read = read_candidate_file(candidates if candidates is not None else recorded["path"], device)
            return read.candidates, read.record
        moved = parse_candidates(recorded.get("yaml"), base_dir=Path(recorded["path"]).parent, origin=recorded["path"])
        return with_device(moved, device), dict(recorded)
    except PolyplanError as error:
        raise PolyplanError(f"--profile: the models of {label} are not loadable here: {error}") from None


def _check_unchanged(original: Profile, label: Path, candidates: CandidateSet) -> tuple[str, ...]:
    """The candidates' names, target first, once each is known to be the model the profile timed:
    its fingerprint (files, derivation, device) is the profile's. PolyplanError naming the first
    that changed (a source file before what is derived from it), or one the profile never timed."""
    timed = {model.name: model.fingerprint for model in original.models}
    names = tuple(candidate.name for candidate in candidates.candidates)
    if candidates.target.name != original.target:
        raise PolyplanError(f"--profile: {label} was made for the target {original.target!r}, its models.yaml's is "
                            f"{candidates.target.name!r}")
    untimed = [name for name in names if name not in timed]
    if untimed:
        raise PolyplanError(f"--profile: model {untimed[0]!r} of {candidates.origin} has no latency curve in {label} (added "
                            "since?); re-pricing times nothing: profile it first (polyplan profile --candidates ... --profile ...)")
    try:
        now = candidate_fingerprints(candidates)
    except OSError as error:
        raise PolyplanError(f"--profile: the models of {label} are not loadable here ({error})") from None
    check_unchanged(candidates, names, timed, now, label="--profile", since=f"{label} was measured", where="the profile",
                    remedy="its timings no longer hold: profile it again")
    return names


def _acceptance_only(settings: ProfileSettings, original: Profile) -> ProfileSettings:
    """The profile's settings for measuring α only: every sampling mode the profile has (those of
    its settings and any its pairs kept from earlier runs), no decoded runs. Neither changes an α
    entry's fingerprint, so each entry is what a full profiling run would measure."""
    acceptance = settings.acceptance
    modes = {SamplingMode(t).key for t in acceptance.temperatures}
    extra = sorted({mode for pair in original.pairs for mode in pair.sampling} - modes)
    temperatures = acceptance.temperatures + tuple(SamplingMode.parse(mode).temperature for mode in extra)
    return dataclasses.replace(settings, acceptance=dataclasses.replace(acceptance, temperatures=temperatures, decoded=False))


def _start(original: Profile, existing: Profile | None, names: Sequence[str], settings: ProfileSettings,
           prompts: Sequence[EncodedPrompt], device_label: str) -> Profile:
    """What the profiling run extends: the original's models (those of `names`) with latency
    fingerprints as the run computes them for `prompts`, so that it keeps the curves instead of
    timing them on the new prompts' stream; the pairs and agreement runs of an earlier
    re-pricing into the same file (`existing`), else the original's pairs (whose α the run
    measures again, their fingerprints naming other prompts) and no agreement runs, so that the
    file never pairs the new prompts' α with the old prompts' runs."""
    stream = fingerprint_tokens([token_stream([prompt.ids for prompt in prompts], settings.latency.tokens_needed)])
    latency = dataclasses.asdict(settings.latency)
    models = tuple(
        dataclasses.replace(model, latency_fingerprint=fingerprint_settings("latency", model.fingerprint, latency, device_label, stream))
        for model in original.models if model.name in names
    )
    base = existing if existing is not None else dataclasses.replace(original, acceptance_runs={})
    pairs = tuple(pair for pair in base.pairs if pair.verifier in names and pair.drafter in names)
    return dataclasses.replace(base, models=models, pairs=pairs, device=original.device, processor=original.processor,
                               loop_overhead=original.loop_overhead, engine_overhead=original.engine_overhead,
                               switch_costs=original.switch_costs)


def _with_original_timings(profile: Profile, original: Profile, names: Sequence[str]) -> Profile:
    """`profile` with each model's entry exactly as the original has it (its latency fingerprint
    naming the stream it was timed on) and the original's loop costs."""
    models = tuple(original.model(model.name) for model in profile.models if model.name in names)
    return dataclasses.replace(profile, models=models, device=original.device, processor=original.processor,
                               loop_overhead=original.loop_overhead, engine_overhead=original.engine_overhead,
                               switch_costs=original.switch_costs)


def _note(original: Path, prompts: PromptSet, count: int, decoded: bool) -> str:
    return (f"Re-priced by polyplan for {count} prompts of {Path(prompts.source).name}: alpha and the agreement runs measured "
            f"on them; the latency curves, loop overhead, HF overhead and switch costs are those of {original.resolve()} "
            "(timed on its prompts' token stream), kept unchanged"
            + ("; its decoded runs were not re-measured." if decoded else "."))


class _Counted:
    """The run's progress with the agreement runs as one entry more, the last; a run that would
    time a latency curve is stopped before it does (re-pricing keeps the original's curves)."""

    def __init__(self, progress) -> None:
        self.progress = progress

    def total(self, steps: int) -> None:
        if self.progress is not None:
            self.progress.total(steps + 1)

    def start(self, step: Step) -> None:
        if step.kind == "latency":
            raise PolyplanError(f"re-pricing would time {step.label} (the profiler's latency fingerprint changed its "
                                "recipe); nothing was timed, the original profile is unchanged")
        if self.progress is not None:
            self.progress.start(step)

    def done(self, step: Step, reused: bool) -> None:
        if self.progress is not None:
            self.progress.done(step, reused)


def recommend_repriced(
    profile_path: str | os.PathLike[str],
    prompts: PromptSet,
    out: str | os.PathLike[str] | None,
    *,
    repriced_out: str | os.PathLike[str] | None = None,
    candidates: str | os.PathLike[str] | None = None,
    check: bool = True,
    progress=None,
    check_progress=None,
    log: Callable[[str], None] | None = None,
    **plan_options,
) -> tuple[Repriced, Recommended]:
    """Re-price the profile for `prompts` (`reprice_profile`, into `repriced_out`), then plan from
    it as `pipeline.stages.recommend_candidates` does (`plan_options`: `planned_from_profile`'s),
    the plan saying which prompts its numbers are for (`formats.plan.ProfileRecord`), and run the
    self-check on the new prompts (`check` False: skipped, and the plan says so)."""
    from polyplan.validation.self_check import skipped_plan

    log = log or stderr_line
    repriced = reprice_profile(profile_path, prompts, candidates=candidates, out=repriced_out, progress=progress, log=log)
    profiled = repriced.profiled
    log(f"planning for the prompts of {repriced.prompt_source}: every chain ranked with its best block sizes and a bootstrap interval")
    planned = planned_from_profile(repriced.profile, None, profile_path=str(repriced.path), candidates=profiled.record,
                                   drafters=profiled.drafters, **plan_options)
    plan = with_prompts(planned.plan, repriced)
    if out is not None:
        write_plan(plan, out)  # unchecked first: an interrupted check leaves a valid plan
    if check:
        plan, lines = self_checked(plan, profiled, out, check_progress)
    else:
        plan = skipped_plan(plan, "--no-check: the intervals ignore the exact model's own error on this machine")
        lines = ("Self-check skipped (--no-check): the prediction intervals ignore the exact model's own error on this machine",)
        if out is not None:
            write_plan(plan, out)
    return repriced, Recommended(planned.recommendation, profiled, plan, lines)


def with_prompts(plan: PlanFile, repriced: Repriced) -> PlanFile:
    """`plan` recording which prompts its numbers are for and the profile its timings come from."""
    recorded = repriced.profile.profiler
    prompt_file = recorded.prompt_file if recorded is not None and recorded.prompt_file else repriced.prompt_source
    record = dataclasses.replace(plan.profile, prompt_file=prompt_file, prompts=repriced.prompts,
                                 timings_from=str(repriced.original.resolve()))
    return dataclasses.replace(plan, profile=record)
