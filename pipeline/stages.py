"""The pipeline: candidates → profile → plan → validation, and the demo that runs it all.

- `profile_candidates`: the one profiling entry point (`polyplan profile`, `recommend
  --candidates`, `demo`, `bench peers`); it measures whatever the profile (the given file, else
  the user cache, `profiler.profile_cache`) lacks for everything the exact model reads: the
  profiling run's entries (`profiler.run`), then `pipeline.loop_costs`, each reused while its
  fingerprint holds.
- `recommend_candidates`: profile, then plan (`planner.plan_builder.plan_from_profile`).
- `validate_plan_file`: a plan's chains, measured side by side on held-out prompts, reported.
- `run_demo`: all three on the embedded family (`pipeline.demo` holds its settings).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Any, Callable

from polyplan.formats.errors import PolyplanError
from polyplan.formats.outputs import check_output_file
from polyplan.formats.plan import PlanFile, read_plan, write_plan
from polyplan.formats.profile import Profile, write_profile
from polyplan.planner.intervals.sample_size import too_few_prompts
from polyplan.planner.intervals.sequential import Resolution, SequentialSettings, decision_resolved
from polyplan.planner.plan_builder import plan_from_profile, planned_from_profile
from polyplan.planner.search import Recommendation
from polyplan.models.candidate_file import CandidateFile, read_candidate_file
from polyplan.models.fingerprints import load_fingerprinted
from polyplan.models.loader import LoadedCandidates
from polyplan.formats.processor import machine_difference
from polyplan.profiler.checks import (
    check_inputs_fit, check_models, fit_default_contexts, foreign_machine_reason, foreign_models_reason, foreign_profile_reason,
)
from polyplan.profiler.locks import profile_lock, stderr_line, timing_lock
from polyplan.pipeline.loop_costs import LoopCostsRun, ensure_loop_costs, provisional_agreement
from polyplan.profiler.profile_cache import (
    cached_profile_path, forget_latency, prompts_of, readable_profile, recorded_prompts, retimed_here,
    settings_of,
)
from polyplan.profiler.prompts import EncodedPrompt
from polyplan.profiler.prompt_sets import PromptSet, encode_for, prompt_set, validation_prompt_set
from polyplan.profiler.processor import this_processor
from polyplan.profiler.acceptance import GreedyReads
from polyplan.formats.sampling import SamplingMode
from polyplan.profiler.run import Decide, ProfileOutcome, Step, describe_device, profile_checked_models
from polyplan.profiler.budget import Budget, BudgetClock, MemberCost
from polyplan.profiler.settings import ProfileSettings
from polyplan.validation.reporting import ReportFiles, write_report
from polyplan.validation.results import Validation
from polyplan.validation.chain_runs import (
    ValidationSettings, context_limit, fit_prompts, reserve_for, select_chains, validate_plan,
)


@dataclass(frozen=True)
class ProfiledCandidates:
    """A profile of the candidates (complete for `settings`), where it is, and the loaded models."""

    profile: Profile
    path: Path
    models: tuple  # profiler.run.ProfiledModel (target first)
    tokenizer: object
    record: dict[str, Any]  # the plan's `candidates` entry
    measured: int  # entries measured: the run's and the loop costs'
    reused: int  # the run's entries reused
    wall_time_s: float
    run: ProfileOutcome  # the profiling run's own steps and phase times
    prompts: int  # prompts profiled with (after fitting them to the models)
    loop_costs: LoopCostsRun  # the agreement runs, loop overhead, HF overhead and switch costs: how many, how long
    encoded: tuple[EncodedPrompt, ...] = ()  # the prompts profiled with, encoded and fitted (what the self-check runs)

    @property
    def drafters(self) -> tuple[str, ...]:
        """The candidates' drafters (the profile may hold more models, kept from earlier runs)."""
        return tuple(model.name for model in self.models[1:])

    @property
    def stage_seconds(self) -> tuple[tuple[str, float], ...]:
        """Seconds each profiling stage took, in order: the run's phases (`profiler.run.PhaseSeconds`;
        the decoded phase holds the replays) and the loop costs' steps (`LoopCostsRun`)."""
        phases, loop = self.run.phases, self.loop_costs
        return (("latency", phases.latency), ("alpha", phases.alpha), ("decoded", phases.decoded),
                ("agreement", loop.agreement_s), ("loop overhead", loop.loop_overhead_s), ("HF overhead", loop.hf_overhead_s),
                ("switch costs", loop.switch_costs_s))

    @property
    def stages_text(self) -> str:
        """`in <wall> s (<stage> <s> s, …)`: the call's wall time and each stage's seconds
        (`stage_seconds`); the rest of the wall time is loading, checks and writing."""
        stages = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in self.stage_seconds)
        return f"in {self.wall_time_s:.0f} s ({stages})"


def profile_candidates(
    candidates_path: str | os.PathLike[str] | CandidateFile,
    *,
    profile_path: str | os.PathLike[str] | None = None,
    settings: ProfileSettings | None = None,
    prompts: PromptSet | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    device: str | None = None,
    temperature: float | None = None,
    fresh_timings: bool = False,
    calibration_tokens: int = 64,
    keep_foreign: bool = True,
    progress=None,
    log=None,
    budget: Budget | None = None,
    sequential: bool | SequentialSettings = False,
    hf_overhead: bool = True,
    reserve: Callable[[MemberCost, Sequence[int]], float] | None = None,
) -> ProfiledCandidates:
    """Profile what is missing (resuming `profile_path`, else the cache) for everything the
    exact model reads (module docstring), saved as it is measured, under the profile's and the
    machine's timing locks.

    `candidates_path`: a models.yaml, or one already read (whose device wins over `device`).
    `settings` None: as the profile being resumed was measured (`settings_of`, adding the sampling
    `temperature` if given); `prompts` None: the prompt file it was measured on, else the built-in
    prompts. `fresh_timings`: re-time the latency curves, the loop overhead and the switch costs
    even when cached (timings go stale with the machine's load; acceptance does not).
    A `profile_path` made for other models or on another machine is never overwritten: with
    `keep_foreign` the run goes to the cache instead and `log` says so; without, it is refused.
    `budget`: the wall time the profiling may take from this call on (`profiler.budget`; None:
    measure everything the settings ask); `log` says how it was spent and what more would buy.
    `reserve`: what the caller runs after the profile within the same budget, priced from the
    target's costs and the prompts' lengths (`profiler.budget.BudgetClock.reserve`).
    `sequential` (True: `SequentialSettings()`'s rule): measure acceptance on rounds of prompts
    until more cannot change the decision (`sequential_rule`; the budget caps the rounds), and a
    pair's decoded runs only until one confirms its teacher-forced μ
    (`AcceptanceSettings.decoded_until_confirmed`); `log` says where it stopped. `hf_overhead`
    False: HF generate's own loop overhead is not measured (the demo: its plan and validation
    never read it; `recommend --candidates` and `bench peers` measure it when their profile lacks
    it, and `export --engine hf` says when it is missing).

    Raises:
        PolyplanError: a bad models.yaml or prompt file, models that cannot share a chain,
            no prompt that fits, an unwritable or foreign profile, an unwritable cache folder.
    """
    started, log = time.perf_counter(), log or stderr_line
    read = candidates_path if isinstance(candidates_path, CandidateFile) else read_candidate_file(candidates_path, device)
    loaded = load_fingerprinted(read.candidates)
    models = loaded.profiled
    fingerprints = {model.name: model.fingerprint for model in models}
    device_label, processor = describe_device(loaded.device), this_processor(loaded.device)
    path = Path(profile_path) if profile_path is not None else cached_profile_path(fingerprints, device_label, cache_dir)
    with contextlib.ExitStack() as held:
        held.enter_context(profile_lock(path))
        existing = readable_profile(path)  # the one reading of the profile this run extends
        if profile_path is not None and keep_foreign:
            foreign = foreign_profile_reason(existing, models[0], device_label, processor)
            if foreign is not None:
                cached = cached_profile_path(fingerprints, device_label, cache_dir)
                if settings is None:  # measure as the file the user pointed at was measured
                    settings = settings_of(existing, temperature)
                prompts = prompts or prompts_of(existing, path)
                held.close()
                held.enter_context(profile_lock(cached))
                elsewhere, existing = existing, readable_profile(cached)
                seeded = existing is None and elsewhere is not None and foreign_models_reason(elsewhere, models[0]) is None
                if seeded:  # the same models timed elsewhere: their acceptance holds here, their timings do not
                    existing = retimed_here(elsewhere, device_label, processor, fingerprints)
                log(f"note: {path} is kept as it is ({foreign}); profiling into {cached} instead"
                                 + (", re-timing every model and keeping its acceptance statistics" if seeded else ""))
                path = cached
        elif profile_path is None and existing is not None:
            # the cache is polyplan's own: one made under this label on another processor (a
            # model name virtual machines share) is re-timed in place, its acceptance kept
            other = foreign_machine_reason(existing, device_label, processor)
            if other is not None:
                log(f"note: {path} {other.removeprefix('it ')}: re-timing every model there, "
                                 "keeping its acceptance statistics")
                existing = retimed_here(existing, device_label, processor, fingerprints)
        if settings is None:
            settings = settings_of(existing, temperature)
        settings, note = fit_default_contexts(models, settings)
        prompts = prompts or prompts_of(existing, path) or prompt_set()
        fitted = fitted_prompts(prompts, loaded, settings)
        check_models(models)  # bad input fails before waiting for another run's timings
        check_inputs_fit(models, fitted, settings)
        check_output_file(path, "--out")
        if note is not None:  # after the checks: a run that fails prints its one error line only
            log(f"note: {note}")
        held.enter_context(timing_lock())
        previous_runs = None if existing is None else existing.acceptance_runs.get("greedy")  # before the run rewrites it
        if fresh_timings and existing is not None:
            existing = forget_latency(existing)
        counted = None if progress is None else _WithLoopCosts(progress)
        clock = None if budget is None else BudgetClock(budget, started, calibration_tokens, reserve)
        rule = None if sequential is False else SequentialSettings() if sequential is True else sequential
        decide = None if rule is None else sequential_rule(models, fitted, settings, rule)
        if rule is not None:  # a plan's measuring: a pair's real decoded runs stop at the first that confirms α
            settings = dataclasses.replace(settings, acceptance=dataclasses.replace(settings.acceptance,
                                                                                    decoded_until_confirmed=True))
        outcome = profile_checked_models(models, fitted, path, settings, device=loaded.device, progress=counted,
                                         existing=existing, budget=clock, decide=decide)
        fitted = fitted[:outcome.prompts] if 0 < outcome.prompts < len(fitted) else fitted  # a budget or the rule may take a prefix
        for line in outcome.budget_lines():
            log(line)
        streams = outcome.streams_line()
        if streams is not None:
            log(streams)
        if outcome.sequential is not None:
            log(outcome.sequential.line())
        for line in outcome.bounded:
            log(f"bounded before measurement (alpha on the first few prompts, no decoded runs): {line}")
        warning = too_few_prompts(len(fitted))
        if warning is not None:
            log(f"warning: {warning}")
        record = dataclasses.replace(recorded_prompts(outcome.profile.profiler, prompts), candidates=read.record)
        if counted is not None:
            counted.start(LOOP_COSTS)
        profile, loop_costs = ensure_loop_costs(
            dataclasses.replace(outcome.profile, profiler=record), models, fitted, settings, previous_runs=previous_runs,
            device_label=device_label, calibration_tokens=calibration_tokens, fresh=fresh_timings, reads=outcome.greedy,
            hf_overhead=hf_overhead,
        )
        if counted is not None:
            counted.done(LOOP_COSTS, reused=loop_costs.measured == 0)
        write_profile(profile, path)
    measured = len(outcome.measured) + loop_costs.measured
    return ProfiledCandidates(profile, path, models, loaded.tokenizer, read.record, measured, len(outcome.reused),
                              time.perf_counter() - started, outcome, len(fitted), loop_costs, tuple(fitted))


def sequential_rule(models, prompts: tuple[EncodedPrompt, ...], settings: ProfileSettings, rule: SequentialSettings) -> Decide:
    """The stopping rule a profiling run calls after each round of prompts (`profiler.run.Decide`):
    the provisional profile with the agreement sequences of the prefix (`provisional_agreement`,
    from the round's greedy reads) judged by `planner.intervals.sequential.decision_resolved` in
    every sampling mode measured, among the candidates; resolved when every mode is (a profile the
    planner refuses is not resolved)."""
    drafters = tuple(model.name for model in models[1:])
    modes = [SamplingMode(t).key for t in settings.acceptance.temperatures]

    def decide(profile: Profile, reads: GreedyReads | None) -> Resolution:
        count = profile.profiler.prompts
        provisional = provisional_agreement(profile, models, [prompt.ids for prompt in prompts[:count]], settings, reads)
        found = None
        for mode in modes:
            try:
                resolution = decision_resolved(provisional, dataclasses.replace(rule, sampling=mode, candidates=drafters))
            except PolyplanError as error:  # a profile the planner cannot rank yet: measure on, and say why
                return Resolution(False, (), (), f"not ranked ({error})", count)
            if len(modes) > 1:
                resolution = dataclasses.replace(resolution, reason=f"{mode}: {resolution.reason}")
            if not resolution.resolved:
                return resolution
            found = found or resolution
        return found

    return decide


LOOP_COSTS = Step("loop costs", "loop costs: agreement runs, loop overhead, HF overhead, switch costs")


class _WithLoopCosts:
    """A profiling run's progress (`profiler.run.Progress`) that counts the loop costs
    (`ensure_loop_costs`, `LOOP_COSTS`) as one entry more, the last: they follow the run's
    entries and take as long as several of them, so the time left counts them too."""

    def __init__(self, progress) -> None:
        self.progress = progress

    def total(self, steps: int) -> None:
        self.progress.total(steps + 1)

    def start(self, step: Step) -> None:
        self.progress.start(step)

    def done(self, step: Step, reused: bool) -> None:
        self.progress.done(step, reused)


_PLANNING = "planning: every chain ranked with its best block sizes and a bootstrap interval"


def fitted_prompts(prompts: PromptSet, loaded: LoadedCandidates, settings: ProfileSettings) -> tuple[EncodedPrompt, ...]:
    """The prompts, encoded, cut or left out to fit every model's context (a strict set is left
    whole: the run refuses a prompt that does not fit)."""
    encoded = encode_for(prompts, loaded.tokenizer)
    if prompts.strict:
        return tuple(encoded)
    acceptance = settings.acceptance
    reserve = acceptance.new_tokens + (max(acceptance.block_sizes) if acceptance.decoded else 0)
    limits = [item.member.max_context for item in loaded.candidates if item.member.max_context is not None]
    return fit_prompts(encoded, min(limits) if limits else None, reserve, truncate=prompts.truncate, source=prompts.source).prompts


@dataclass(frozen=True)
class Recommended:
    """A plan made from freshly completed profiling: the search's result, its profile, the plan."""

    recommendation: Recommendation
    profiled: ProfiledCandidates
    plan: PlanFile
    check_lines: tuple[str, ...] = ()  # what the self-check found (validation.self_check), for the CLI to print


def recommend_candidates(
    candidates_path: str | os.PathLike[str],
    out: str | os.PathLike[str] | None,
    *,
    profile_path: str | os.PathLike[str] | None = None,
    prompts: PromptSet | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    device: str | None = None,
    temperature: float = 0.0,
    progress=None,
    check: bool = True,
    check_progress=None,
    log: Callable[[str], None] | None = None,
    budget: Budget | None = None,
    sequential: bool = True,
    **plan_options,
) -> Recommended:
    """Profile what is missing for the sampling `temperature` (`profile_candidates`), then
    rank the chains (`plan_from_profile` with `plan_options`), run the self-check
    (`validation.self_check`; `check` False: skipped, and the plan says so) and write the plan to `out`.
    `progress`: the profiling's; `check_progress`: the self-check's
    (`validation.chain_runs.ValidationProgress`); `log` (default: stderr) says when planning begins.
    `budget`: the wall time of the whole command; the profiling keeps the smallest self-check's
    estimate for after it (`validation.self_check.least_check_s`, priced once the target's curve is
    timed), and the self-check takes its share of the profile's measuring time within what is
    left of the budget then, never less than its smallest size (`validation.self_check.check_budget`).
    `sequential`: acceptance measured in rounds of prompts until the ranking is decided
    (`profile_candidates`), ranking chains of up to the `max_levels` planned."""
    from polyplan.validation.self_check import least_check_s, skipped_plan

    log, started = log or stderr_line, time.perf_counter()
    profiled = profile_candidates(candidates_path, profile_path=profile_path, prompts=prompts, cache_dir=cache_dir,
                                  device=device, temperature=temperature, progress=progress, log=log, budget=budget,
                                  sequential=_rule(sequential, plan_options),
                                  reserve=least_check_s if check and budget is not None else None)
    log(_PLANNING)
    planned = planned_from_profile(profiled.profile, out, profile_path=str(profiled.path), candidates=profiled.record,
                                   drafters=profiled.drafters, **plan_options)
    if check:
        left = None if budget is None else budget.seconds - (time.perf_counter() - started)
        plan, lines = self_checked(planned.plan, profiled, out, check_progress, left)
    else:
        plan = skipped_plan(planned.plan, "--no-check: the intervals ignore the exact model's own error on this machine")
        lines = ("Self-check skipped (--no-check): the prediction intervals ignore the exact model's own error on this machine",)
        if out is not None:
            write_plan(plan, out)
    return Recommended(planned.recommendation, profiled, plan, lines)


def _rule(sequential: bool, plan_options: dict) -> SequentialSettings | bool:
    """The stopping rule of a plan searched with `plan_options` (False: none)."""
    if not sequential:
        return False
    return SequentialSettings(max_levels=plan_options.get("max_levels", SequentialSettings.max_levels),
                              k_max=plan_options.get("k_max"))


def self_checked(plan: PlanFile, profiled: ProfiledCandidates, out, progress=None,
                 left_s: float | None = None) -> tuple[PlanFile, tuple[str, ...]]:
    """The plan after recommend's self-check (`validation.self_check`, reporting its runs to
    `progress`) on the profiled members and prompts, with what it found, saved over `out` (which
    the planner wrote unchecked first, so an interrupted check leaves a valid plan); a plan with
    target-only alone is returned as is. `left_s`: what is left of the command's `--budget` (None:
    no budget), which caps the check's share of the profile's measuring time (`check_budget`)."""
    from polyplan.validation.self_check import check_budget, self_check

    if len(plan.alternatives) < 2:
        return plan, ()
    members = {model.name: model.member for model in profiled.models}
    budget_s = check_budget(profiled.profile, left_s)
    with timing_lock():
        checked = self_check(plan, members, profiled.encoded, budget_s=budget_s, profile=profiled.profile,
                             progress=progress)
    if out is not None:
        write_plan(checked.plan, out)
    return checked.plan, checked.lines


def plan_profile(planned: PlanFile) -> Profile | None:
    """The profile the plan was made from, if its file is still readable (for the re-timed
    prediction); None otherwise."""
    return None if planned.profile.path is None else readable_profile(Path(planned.profile.path))


@dataclass(frozen=True)
class Validated:
    """A validation and where its report went."""

    validation: Validation
    files: ReportFiles
    threads: Any = None  # the profiler.threads.ThreadChoice it ran with
    warning: str | None = None  # the plan's timings come from another processor: said on stderr before the run


def validate_plan_file(
    plan_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    settings: ValidationSettings,
    *,
    prompt_file: str | os.PathLike[str] | None = None,
    prompts_per_kind: int = 4,
    max_prompts: int | None = None,
    raw_prompts: bool = False,
    candidates_path: str | os.PathLike[str] | None = None,
    threads: int | None = None,
    progress=None,
    log: Callable[[str], None] | None = None,
) -> Validated:
    """Run the plan's chains side by side on held-out prompts (`validation_prompt_set` of the
    prompt options) and write the report into `out`.

    Cheap checks come first (a hand-edited plan, a bad `settings.top`, a model whose files
    changed), before a prompt is read or a model loaded. `threads` None: as the plan's profile
    was measured (`profiler.threads.choose_threads`). A plan profiled on another processor is
    validated all the same, with one `warning:` line to `log` (default: stderr; it also says when
    the report is written) and in the report.
    """
    from polyplan.models.chain_candidates import ChainCandidates
    from polyplan.planner.plan_check import check_plan
    from polyplan.profiler.threads import choose_threads, plan_threads, set_threads

    label = str(plan_path)
    planned = read_plan(plan_path)
    profiled = plan_profile(planned)  # read and checked once, for the plan check and the run
    check_plan(planned, label, profiled)  # a hand-edited plan is refused before any work
    specs = select_chains(planned, settings.top, label)  # a bad --top or a changed model loads nothing
    chains = ChainCandidates.from_plan(planned, models_yaml=candidates_path, also=[spec.planned.chain for spec in specs],
                                       label=label)
    prompts = validation_prompt_set(prompt_file, per_kind=prompts_per_kind, max_prompts=max_prompts, raw=raw_prompts)
    choice = choose_threads(threads, plan_threads(planned.device), recorded_by="the plan's profile")
    set_threads(choice)
    loaded = chains.load()
    members = loaded.by_name
    encoded = encode_for(prompts, loaded.tokenizer)
    # prompts that cannot fit fail now, not after waiting for another run's timings
    fit_prompts(encoded, context_limit(members, specs), reserve_for(specs, settings.new_tokens), truncate=prompts.truncate,
                source=prompts.source)
    device = getattr(members[planned.target], "device", "cpu")
    log = log or stderr_line
    warning = machine_difference(planned.device, planned.processor, describe_device(device), this_processor(device))
    if warning is not None:
        log(f"warning: {warning}")
    with timing_lock():
        validation = _validate(planned, members, encoded, settings, label, prompts, progress, profiled)
    log(f"writing the report and plots into {out}")
    return Validated(validation, write_report(validation, Path(out)), choice, warning)


def _validate(plan: PlanFile, members, encoded, settings: ValidationSettings, plan_label: str, prompts: PromptSet, progress,
              profile: Profile | None) -> Validation:
    device = getattr(members[plan.target], "device", "cpu")
    return validate_plan(plan, members, encoded, settings, device_label=describe_device(device), plan_path=plan_label,
                         prompt_source=prompts.source, truncate_prompts=prompts.truncate, progress=progress,
                         profile=profile, processor=this_processor(device))


@dataclass(frozen=True)
class DemoResult:
    """Where everything went and what was found."""

    candidates: Path
    profile_path: Path
    plan_path: Path
    recommendation: Recommendation
    validation: Validation
    files: ReportFiles
    profile_measured: int
    profile_reused: int
    profile_seconds: float
    wall_time_s: float
    check_lines: tuple[str, ...] = ()  # recommend's self-check (validation.self_check)


def run_demo(settings, *, profile_progress=None, validation_progress=None, check_progress=None, log=lambda line: None,
             threads=None) -> DemoResult:
    """Profile, recommend and validate (`pipeline.demo` says on what; `settings`: a `DemoSettings`).

    1. Profile the candidates, resuming the profile in the user cache: acceptance is reused, the
       timings re-timed, since they go stale with the machine's load.
    2. Recommend a chain with the exact model, run the self-check and write plan.json.
    3. Validate the plan on prompts the profile never saw and write the report.

    Each step reports to its progress (`check_progress`: the self-check's; None: `validation_progress`),
    and `log` says when the steps without one (planning, the report) begin.
    `threads` (a `profiler.threads.ThreadChoice`) is set once the settings pass their checks;
    None leaves torch's threads as they are.
    """
    from polyplan.pipeline.demo import PLAN_FILE, check_settings, demo_candidates, demo_prompt_sets, profile_settings, typical_context

    started = time.perf_counter()
    check_settings(settings)
    candidates = demo_candidates(settings, log)
    read = read_candidate_file(candidates)
    validation_settings = ValidationSettings(new_tokens=settings.new_tokens, repeats=settings.repeats, top=settings.top)
    profiling_prompts, held_out = demo_prompt_sets(settings)
    out = Path(settings.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PolyplanError(f"--out: cannot create the folder {out} ({error.strerror or error})") from None
    if threads is not None:
        from polyplan.profiler.threads import set_threads

        set_threads(threads)

    profiled = profile_candidates(read, settings=profile_settings(settings.quick, settings.new_tokens),
                                  prompts=profiling_prompts, cache_dir=settings.cache_dir, fresh_timings=True,
                                  calibration_tokens=24 if settings.quick else 64, progress=profile_progress,
                                  sequential=SequentialSettings(max_levels=settings.max_levels), hf_overhead=False)
    plan_path = out / PLAN_FILE
    encoded = encode_for(held_out, profiled.tokenizer)
    log(_PLANNING)
    planned = planned_from_profile(
        profiled.profile, plan_path, profile_path=str(profiled.path), candidates=profiled.record, drafters=profiled.drafters,
        max_levels=settings.max_levels, context_length=typical_context(encoded, settings.new_tokens),
    )
    recommendation, plan = planned.recommendation, planned.plan  # as written to plan_path, not read back
    members = {model.name: model.member for model in profiled.models}
    plan, lines = self_checked(plan, profiled, plan_path, validation_progress if check_progress is None else check_progress)
    with timing_lock():
        validation = _validate(plan, members, encoded, validation_settings, str(plan_path), held_out, validation_progress,
                               profiled.profile)
    log(f"writing the report and plots into {out}")
    files = write_report(validation, out)
    return DemoResult(Path(candidates), profiled.path, plan_path, recommendation, validation, files, profiled.measured,
                      profiled.reused, profiled.wall_time_s, time.perf_counter() - started, lines)


def _plan_candidates_greedy(candidates_path, *, log=lambda line: None) -> Path:
    """Profile what the cache lacks for `candidates_path` (built-in profiling prompts, greedy)
    and write the recommended plan next to the cached profile; its path."""
    profiled = profile_candidates(candidates_path, temperature=0.0)
    out = profiled.path.with_name(profiled.path.stem + "-plan.json")
    plan_from_profile(profiled.profile, out, profile_path=str(profiled.path), candidates=profiled.record)
    log(f"profile {profiled.path}: {profiled.measured} entries measured, {profiled.reused} reused; plan {out}")
    return out


def race_peers_of(plan_path, *, candidates_path=None, log=lambda line: None, **options):
    """`bench peers`: race the plan's exported configurations (`engines.hf_race.run_hf_race`); with
    no plan, `candidates_path` is profiled (greedy, built-in profiling prompts, resumed from the
    cache) and planned first, as `polyplan recommend --candidates` does."""
    from polyplan.engines.hf_race import run_hf_race

    if plan_path is None:
        if candidates_path is None:
            raise PolyplanError("--plan: give a plan.json, or --candidates models.yaml to profile and plan first")
        plan_path = _plan_candidates_greedy(candidates_path, log=log)
    return run_hf_race(plan_path, candidates_path=candidates_path, log=log, **options)
