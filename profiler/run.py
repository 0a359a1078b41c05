"""The resumable profiling run: measure what is missing, write the profile after every entry.

An entry is a model's latency curve (`latency`), a pair's α under one sampling mode (`alpha`) or a
pair's decoded μ, σ at one block size (`decoded`), each with a fingerprint of what it was measured
from. A run keeps every entry of the profile at `out` whose fingerprint holds, measures the others
(latency, then α, then decoded) and writes the profile atomically after each one
(docs/profiling.md, "Resumable, never redone"). Pairs: every ordered (verifier, drafter) whose
drafter is cheaper by the measured T(1).
"""

from __future__ import annotations

import datetime
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.latency import LatencyCurve, curve_from_profile
from polyplan.planner.exact.ngram_replay import chain_rounds
from polyplan.planner.exact.pair_bound import PairBound, bounded_pairs, pair_bound
from polyplan.planner.intervals.sequential import Resolution, prompt_rounds
from polyplan.formats.profile import Profile, ProfilerRecord, TargetStream, write_profile
from polyplan.formats.sampling import SamplingMode
from polyplan.profiler.acceptance import (
    TEACHER_FORCING_WIDTH, GreedyReads, TeacherForced, decoded_measurement, measure_decoded, pair_alpha,
    own_greedy_read, replay_counts, target_continuations_past, teacher_forced, teacher_forced_views,
)
from polyplan.decoder.llama_cpp_subset import head_subset
from polyplan.decoder.member import BlockDrafter
from polyplan.decoder.ngram import NGramMember
from polyplan.decoder.ngram_simple import NGramSimpleMember
from polyplan.profiler.entries import decoded_entry, model_entry, ngram_simple_size, refresh_warnings, sampling_entry
from polyplan.models.hashing import fingerprint_settings, fingerprint_tokens
from polyplan.profiler.forward_timing import measure_latencies
from polyplan.profiler.locks import profile_lock, timing_lock
from polyplan.formats.outputs import check_output_file
from polyplan.models.fingerprints import ProfiledModel
from polyplan.profiler.checks import check_handed_models, check_inputs_fit, check_models, check_same_profile, read_existing
from polyplan.profiler.processor import cpu_name, this_processor
from polyplan.profiler.prompts import EncodedPrompt, token_stream
from polyplan.profiler.budget import (
    BudgetClock, BudgetPlan, MemberCost, SkippedMeasurement, acceptance_cost, calibration_seconds, decoded_seconds, plan_budget,
    skipped_lines,
)
from polyplan.profiler.settings import ProfileSettings

_IMPLIED_KS = tuple(range(1, 9))  # μ(K) implied by α is stored for these K (and every decoded K)
BOUNDED_PROMPTS = 4  # α of a pair that cannot pay is read on this many prompts: enough to show the bound, not to rank


@dataclass(frozen=True)
class Step:
    """One profile entry: `kind` is "latency", "alpha" or "decoded"; `label` names it."""

    kind: str
    label: str


class Progress(Protocol):
    """What a run reports while it works (the CLI draws a progress bar from it)."""

    def total(self, steps: int) -> None:
        """The number of entries this run will go through (measured or reused)."""

    def start(self, step: Step) -> None:
        """A measurement begins."""

    def done(self, step: Step, reused: bool) -> None:
        """An entry is in the saved profile (`reused`: it was already there)."""


class _Silent(Progress):
    """Reports nothing (the protocol's methods do nothing)."""


@dataclass(frozen=True)
class PhaseSeconds:
    """Wall time spent measuring each kind of entry (the inputs they needed included)."""

    latency: float
    alpha: float
    decoded: float


# The stopping rule of sequential measuring: after each round of prompts, the provisional profile
# (α on the prefix) and the greedy reads of that prefix (None: the run read none this time) ->
# whether more prompts could change the decision (`planner.intervals.sequential.decision_resolved`).
Decide = Callable[[Profile, GreedyReads | None], Resolution]


@dataclass(frozen=True)
class SequentialRun:
    """How sequential measuring ended: the prompts α was measured on, of how many were offered,
    and the rule's last finding (None: it was never asked, as when one round held every prompt).
    The rule is not asked after the round that measures the last prompt offered: nothing is left
    for it to stop, and the plan's own intervals say what stays tied."""

    prompts: int
    offered: int
    resolution: Resolution | None

    def line(self) -> str:
        """One line for the log: where the acceptance stage stopped, and why."""
        if self.resolution is None:
            return f"acceptance: all {self.prompts} prompts"
        if self.resolution.resolved and self.prompts < self.offered:
            return f"acceptance: decided after {self.prompts} of {self.offered} prompts ({self.resolution.reason})"
        return f"acceptance: all {self.prompts} prompts; after {self.resolution.prompts}: {self.resolution.reason}"


@dataclass(frozen=True)
class ProfileOutcome:
    """What a run did: the final profile, and which entries it measured or reused."""

    profile: Profile
    path: Path
    measured: tuple[Step, ...]
    reused: tuple[Step, ...]
    wall_time_s: float
    phases: PhaseSeconds
    # the greedy continuations and teacher-forced passes this run read (None: it read none), for
    # the agreement runs (`profiler.agreement_runs.measure_agreement`); not written to the profile
    greedy: GreedyReads | None = field(default=None, repr=False, compare=False)
    # each profiled pair's bound from the latency curves (`planner.exact.pair_bound`), in pair order
    bounds: tuple[PairBound, ...] = ()
    budget: BudgetPlan | None = None  # how `--budget` was spent (None: no budget, or nothing to measure under it)
    skipped: tuple[SkippedMeasurement, ...] = ()  # what the budget left out
    bounded: tuple[str, ...] = ()  # the pairs measured briefly because they cannot pay, each with why
    sequential: SequentialRun | None = None  # where sequential measuring stopped (None: it was not asked for)
    # the block size each greedy stream this run decoded was drafted at (`profiler.stream_drafting`; None: plainly)
    stream_blocks: tuple[int | None, ...] = ()

    def streams_line(self) -> str | None:
        """A note for the log on the target's greedy streams this run decoded speculatively (None:
        it drafted none, so they were decoded as always)."""
        count = sum(block is not None for block in self.stream_blocks)
        if not count:
            return None
        drafted = sorted({block for block in self.stream_blocks if block is not None})
        sizes = ("block size " if len(drafted) == 1 else "block sizes ") + ", ".join(str(block) for block in drafted)
        rest = "" if count == len(self.stream_blocks) else ", the others plainly"
        return (f"note: the target's greedy streams: {count} of {len(self.stream_blocks)} decoded speculatively with prompt "
                f"lookup ({sizes}: the same tokens, sooner){rest}")

    @property
    def prompts(self) -> int:
        """Prompts the acceptance entries were measured on (a budget may take a prefix)."""
        return self.profile.profiler.prompts if self.profile.profiler else 0

    def budget_lines(self) -> tuple[str, ...]:
        """How the budget was spent and what more time would buy (none without a budget)."""
        if self.budget is None:
            return ()
        return self.budget.lines() + skipped_lines(self.budget.budget, self.skipped)


def describe_device(device: str | torch.device) -> str:
    """A human label of the device latency is measured on (GPU name, or CPU and threads)."""
    device = torch.device(device)
    if device.type == "cuda":  # "cuda" and "cuda:0" are one GPU: always name its index
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} {torch.cuda.get_device_name(index)}"
    processor = cpu_name() or platform.machine() or "cpu"
    threads = torch.get_num_threads()
    return f"cpu {processor} ({threads} thread{'s' if threads > 1 else ''})"


def profile_models(
    models: Sequence[ProfiledModel],
    prompts: Sequence[EncodedPrompt],
    out: str | os.PathLike[str],
    settings: ProfileSettings = ProfileSettings(),
    *,
    device: str = "cpu",
    progress: Progress | None = None,
) -> ProfileOutcome:
    """Profile `models` (the first is the target) into `out`, resuming what is there.

    Raises:
        PolyplanError: `out` cannot be written or holds a profile this polyplan cannot
            extend; models that cannot share a chain; a prompt that does not fit a model.
    """
    started = time.perf_counter()
    if not models:
        raise PolyplanError("candidates: none to profile")
    if not prompts:
        raise PolyplanError("prompts: none to profile with")
    out = Path(out)
    check_models(models)
    check_handed_models(models)  # not through the loader: checked here, once
    check_inputs_fit(models, prompts, settings)
    check_output_file(out, "--out")
    with profile_lock(out), timing_lock():
        return profile_checked_models(models, prompts, out, settings, device=device, progress=progress, started=started)


def profile_checked_models(
    models: Sequence[ProfiledModel],
    prompts: Sequence[EncodedPrompt],
    out: Path,
    settings: ProfileSettings,
    *,
    device: str = "cpu",
    progress: Progress | None = None,
    existing: Profile | None = None,
    started: float | None = None,
    budget: BudgetClock | None = None,
    decide: Decide | None = None,
) -> ProfileOutcome:
    """`profile_models` for a caller that has checked the models, prompts and `out` and holds
    `out`'s profile lock and the timing lock (`pipeline.stages`, which reads the profile once
    and passes it as `existing`; None: read `out` here, refusing a broken file). `budget`: the
    wall time the command may take (`profiler.budget`): after the latency curves the acceptance
    stage takes the prompts that fit, and decoded runs are measured only while they fit. `decide`:
    measure α sequentially, on rounds of prompts (`planner.intervals.sequential.prompt_rounds`),
    until the rule says more prompts cannot change the decision (None: on every prompt)."""
    started = time.perf_counter() if started is None else started
    if existing is None:
        existing = read_existing(out)
    device_label, processor = describe_device(device), this_processor(device)
    check_same_profile(existing, out, models[0], device_label, processor)
    run = _Run(models, prompts, out, settings, device_label, existing, progress or _Silent(), processor, budget, decide)
    run.execute()
    phases = PhaseSeconds(**run.seconds)
    return ProfileOutcome(run.profile, out, tuple(run.measured), tuple(run.reused), time.perf_counter() - started, phases,
                          run.greedy_reads(), tuple(run.bounds.values()), run.budget_plan, tuple(run.skipped),
                          tuple(why if why.startswith(f"{v} <- {d}") else f"{v} <- {d}: {why}"
                                for (v, d), why in run.moot.items() if run.is_bounded(v, d)), run.sequential,
                          tuple(run.stream_blocks))


# --------------------------------------------------------------------------- the run


class _Run:
    """The state of one profiling run: the profile being built and the lazily computed inputs."""

    def __init__(self, models, prompts, out, settings, device_label, existing, progress, processor=None, budget=None,
                 decide=None) -> None:
        self.budget: BudgetClock | None = budget
        self.decide: Decide | None = decide
        self.sequential: SequentialRun | None = None
        self.budget_plan: BudgetPlan | None = None
        self.skipped: list[SkippedMeasurement] = []
        self.models: list[ProfiledModel] = list(models)
        self.by_name = {model.name: model for model in self.models}
        self.order = {model.name: index for index, model in enumerate(self.models)}
        self.target = self.models[0]
        self.offered = [prompt.ids for prompt in prompts]  # the prompts α may be measured on (a budget may cut them)
        self.prompts = list(self.offered)  # those it is measured on now (sequential measuring: a prefix)
        self.out = out
        self.settings = settings
        self.device_label = device_label
        self.processor = processor
        self.progress = progress
        self.measured: list[Step] = []
        self.seconds = {"latency": 0.0, "alpha": 0.0, "decoded": 0.0}
        self._began = 0.0
        # seconds spent on the entries an earlier run wrote
        self.earlier_seconds = (existing.profiler.seconds or 0.0) if existing is not None and existing.profiler else 0.0
        self.reused: list[Step] = []
        acceptance = settings.acceptance
        count = len(self.prompts) if acceptance.decoded_prompts is None else min(acceptance.decoded_prompts, len(self.prompts))
        self.decoded_prompts = self.prompts[:count]
        self.prompts_fingerprint = fingerprint_tokens(self.prompts)
        self.decoded_prompts_fingerprint = fingerprint_tokens(self.decoded_prompts)
        self.stream = token_stream(self.prompts, settings.latency.tokens_needed)
        self.continuations: dict[float, tuple[tuple[int, ...], ...]] = {}
        self.stream_blocks: list[int | None] = []  # per greedy stream decoded by this run, its drafted block size
        self.forced: dict[tuple[float, str], TeacherForced] = {}
        self.bounds: dict[tuple[str, str], PairBound] = {}  # filled once the latency curves are in
        self.moot: dict[tuple[str, str], str] = {}  # the pairs measured briefly, with why
        self.bounded_forced: dict[tuple[float, str], TeacherForced] = {}  # read over the bounded prefix only
        self.tails: dict[int, tuple[int, ...]] = {}  # prompt -> the target's greedy tokens past its continuation (greedy, decoded)
        # a head cut's name -> (its base's name, the ids it keeps): its teacher-forced read comes from the base's passes
        self.carried: dict[str, tuple[str, torch.Tensor]] = carried_reads(self.models)
        self.profile = self._start_profile(existing)

    # ---- keys
    def latency_key(self, model: ProfiledModel) -> str:
        return fingerprint_settings(
            "latency", model.fingerprint, asdict(self.settings.latency), self.device_label, fingerprint_tokens([self.stream])
        )

    def _acceptance_common(self) -> dict:
        acceptance = self.settings.acceptance
        return {"new_tokens": acceptance.new_tokens, "seed": acceptance.seed, "resamples": acceptance.resamples, "confidence": acceptance.confidence}

    def alpha_key(self, verifier: str, drafter: str, temperature: float, *, bounded: bool | None = None) -> str:
        """The α entry's fingerprint; a bounded pair's (`bounded` None: as this run measures the
        pair) is of the prompts it reads, `BOUNDED_PROMPTS` of them."""
        bounded = self.is_bounded(verifier, drafter) if bounded is None else bounded
        if bounded:
            return fingerprint_settings("alpha", self.by_name[verifier].fingerprint, self.by_name[drafter].fingerprint,
                                        self.target.fingerprint, SamplingMode(temperature).key,
                                        fingerprint_tokens(self.prompts[:BOUNDED_PROMPTS]), self._acceptance_common(),
                                        {"teacher_forcing_width": TEACHER_FORCING_WIDTH, "bounded_prompts": BOUNDED_PROMPTS})
        return fingerprint_settings("alpha", self.by_name[verifier].fingerprint, self.by_name[drafter].fingerprint,
                                    self.target.fingerprint, SamplingMode(temperature).key, self.prompts_fingerprint,
                                    self._acceptance_common(), {"teacher_forcing_width": TEACHER_FORCING_WIDTH})

    def alpha_keys(self, verifier: str, drafter: str, temperature: float) -> tuple[str, ...]:
        """The fingerprints an α entry may have and still hold: a bounded pair keeps an entry of
        all the prompts (measured when it could pay, more than it needs)."""
        if self.is_bounded(verifier, drafter):
            return (self.alpha_key(verifier, drafter, temperature), self.alpha_key(verifier, drafter, temperature, bounded=False))
        return (self.alpha_key(verifier, drafter, temperature),)

    def is_bounded(self, verifier: str, drafter: str) -> bool:
        """Whether the pair's acceptance cannot change the choice (`planner.exact.pair_bound.bounded_pairs`:
        its drafter can pay neither directly nor as an intermediate level), and so gets α on the first `BOUNDED_PROMPTS` prompts and no decoded runs."""
        return (verifier, drafter) in self.moot and len(self.prompts) > BOUNDED_PROMPTS

    def decoded_key(self, verifier: str, drafter: str, temperature: float, k: int) -> str:
        acceptance = self.settings.acceptance
        rule = {"verifications": acceptance.decoded_verifications, "min_prompts": acceptance.decoded_min_prompts}
        if self.rule_replays(verifier, drafter, temperature):  # the rule's rounds on the target's greedy streams
            return fingerprint_settings("decoded-rule-replay", self.by_name[verifier].fingerprint, self.by_name[drafter].fingerprint,
                                        SamplingMode(temperature).key, k, self.decoded_prompts_fingerprint, self._acceptance_common(),
                                        rule)
        if self.replays(verifier, drafter, temperature):  # a replay reads the continuations at the forcing width
            return fingerprint_settings("decoded-replay", self.by_name[verifier].fingerprint, self.by_name[drafter].fingerprint,
                                        SamplingMode(temperature).key, k, self.decoded_prompts_fingerprint, self._acceptance_common(),
                                        rule, {"teacher_forcing_width": TEACHER_FORCING_WIDTH})
        return fingerprint_settings("decoded", self.by_name[verifier].fingerprint, self.by_name[drafter].fingerprint,
                                    SamplingMode(temperature).key, k, self.decoded_prompts_fingerprint, self._acceptance_common(),
                                    rule)

    def replays(self, verifier: str, drafter: str, temperature: float) -> bool:
        """Whether the pair's decoded runs are replayed from the teacher-forced pass (`replay_counts`)
        instead of decoded: greedy, the target verifying, a drafter that drafts token by token (a
        block drafter's later tokens are not its argmax on the target's prefix)."""
        return (temperature == 0.0 and verifier == self.target.name
                and not isinstance(self.by_name[drafter].member, BlockDrafter))

    def rule_replays(self, verifier: str, drafter: str, temperature: float) -> bool:
        """Whether the pair's decoded runs are the rounds of a rule drafter (`ngram-simple`)
        replayed on the target's greedy continuations (`planner.exact.ngram_replay.chain_rounds`,
        what the planner itself reads): greedy, the target verifying. Lossless decoding makes the
        continuation the run's own output, and the rule drafts from that output alone, so the
        replay is the run up to numerics, at no model cost."""
        return (temperature == 0.0 and verifier == self.target.name
                and isinstance(self.by_name[drafter].member, NGramSimpleMember))

    def _rule_beneath(self, verifier: str, drafter: str) -> bool:
        """Whether the pair puts a rule drafter under another model than the target: the planner
        predicts a rule drafter only directly under the target (`planner.search`), so no chain
        it ranks reads the pair's decoded runs."""
        return verifier != self.target.name and isinstance(self.by_name[drafter].member, NGramSimpleMember)

    # ---- profile bookkeeping
    def _start_profile(self, existing: Profile | None) -> Profile:
        acceptance = self.settings.acceptance
        profile = Profile(
            target=self.target.name,
            device=self.device_label,
            processor=self.processor,
            models=(),
            pairs=(),
            created=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            notes=(
                "Measured by polyplan profile. alpha: distribution-based (teacher-forced over target "
                "continuations; greedy = argmax agreement, sampled = E[sum min(p, q)]); decoded: n = 2 "
                "speculative decoding, tokens per verification, bootstrap intervals over prompts."
            ),
            profiler=ProfilerRecord(
                latency=asdict(self.settings.latency),
                acceptance=asdict(acceptance),
                prompts=len(self.prompts),
                decoded_prompts=len(self.decoded_prompts),
                torch=torch.__version__,
            ),
        )
        if existing is None:
            return profile
        fingerprints = {model.name: model.fingerprint for model in self.models}
        # A profile is only ever extended; entries of a candidate whose files changed describe
        # something else (measured again), those of other settings stay until replaced.
        models = tuple(m for m in existing.models if fingerprints.get(m.name, m.fingerprint) == m.fingerprint)
        kept = {m.name for m in models}
        # What other steps measured (`pipeline.loop_costs`) is theirs to keep current, `meta` the user's.
        profile = replace(
            profile, models=models, pairs=tuple(p for p in existing.pairs if p.verifier in kept and p.drafter in kept),
            meta=dict(existing.meta), loop_overhead=existing.loop_overhead, engine_overhead=existing.engine_overhead,
            switch_costs=existing.switch_costs, acceptance_runs=existing.acceptance_runs,
        )
        return self._sorted(profile)

    def _sorted(self, profile: Profile) -> Profile:
        # The candidates in their order, then models kept from earlier runs in theirs.
        rank = {name: index for index, name in enumerate(list(self.order) + [m.name for m in profile.models if m.name not in self.order])}
        return replace(profile, models=tuple(sorted(profile.models, key=lambda m: rank[m.name])),
                       pairs=tuple(sorted(profile.pairs, key=lambda p: (rank[p.verifier], rank[p.drafter]))))

    def save(self) -> None:
        if not any(m.name == self.target.name for m in self.profile.models):
            return  # not yet a valid profile: the previous file (if any) stays as it was
        profiler = replace(self.profile.profiler, seconds=round(self.earlier_seconds + sum(self.seconds.values()), 3))
        self.profile = replace(self._sorted(self.profile), profiler=profiler)
        try:
            write_profile(self.profile, self.out)
        except OSError as error:
            raise PolyplanError(f"--out: cannot write {self.out} ({error.strerror or error})") from None

    def _begin(self, step: Step) -> None:
        self._began = time.perf_counter()
        self.progress.start(step)

    def _finish(self, step: Step, reused: bool) -> None:
        if not reused:
            self.seconds[step.kind] += time.perf_counter() - self._began
        (self.reused if reused else self.measured).append(step)
        self.progress.done(step, reused)

    # ---- phases
    def execute(self) -> None:
        acceptance = self.settings.acceptance
        n = len(self.models)
        per_pair = len(acceptance.temperatures) * (1 + (len(acceptance.block_sizes) if acceptance.decoded else 0))
        self.progress.total(n + n * (n - 1) // 2 * per_pair)
        self._latencies(self.models)
        pairs = self._pairs()
        self.bounds = {(verifier, drafter): pair_bound(self.profile, verifier, drafter) for verifier, drafter in pairs}
        self.moot = bounded_pairs(self.profile, pairs, self.target.name, bounds=self.bounds)
        if self.budget is not None and self._alpha_to_measure(pairs):
            self.budget_plan = self._plan_budget()
            if self.budget_plan.prompts < len(self.prompts):
                self.offered = self.offered[:self.budget_plan.prompts]  # the budget caps what sequential rounds may reach
                self._use_prompts(self.budget_plan.prompts)
        rounds = self._rounds(pairs)
        for index, count in enumerate(rounds):
            self._use_prompts(count)
            measured = [pair for pair in pairs if not self.is_bounded(*pair)]
            decoded_steps = len(acceptance.temperatures) * len(acceptance.block_sizes) if acceptance.decoded else 0
            alpha_steps = len(acceptance.temperatures) * len(pairs)
            self.progress.total(n + len(pairs) * per_pair - (len(pairs) - len(measured)) * decoded_steps + index * alpha_steps)
            for temperature in acceptance.temperatures:
                for verifier, drafter in pairs:
                    self._alpha(verifier, drafter, temperature)
            if self.decide is not None and pairs:
                last = self.sequential.resolution if self.sequential is not None else None
                if count < len(self.offered):  # after the last round there is nothing left to stop
                    last = self.decide(self.profile, self.greedy_reads())
                self.sequential = SequentialRun(count, len(self.offered), last)
                if last is not None and last.resolved:  # the last round keeps the round before's finding, never a resolved one
                    break
        if acceptance.decoded:
            self._all_decoded(measured)
        self._prune(pairs)
        self.save()

    def _all_decoded(self, measured: Sequence[tuple[str, str]]) -> None:
        """The decoded runs of the `measured` pairs in every sampling mode. A plan's measuring
        (`AcceptanceSettings.decoded_until_confirmed`) leaves out what its ranking cannot read
        (`_not_decoded`), and decodes a pair's largest K first, the smaller ones only until a run
        confirms the teacher-forced μ: where α's i.i.d. law errs (bursty n-gram drafts) it errs
        most at the largest K, so a confirmation there is the one that speaks for the smaller."""
        acceptance = self.settings.acceptance
        contention = self._contention()
        for temperature in acceptance.temperatures:
            for verifier, drafter in measured:
                why = self._not_decoded(verifier, drafter, contention)
                if why is not None:
                    for k in acceptance.block_sizes:
                        self._left_out(verifier, drafter, temperature, k, why)
                    continue
                confirmed_at = None
                for k in sorted(acceptance.block_sizes, reverse=acceptance.decoded_until_confirmed):
                    if confirmed_at is not None:
                        self._left_out(verifier, drafter, temperature, k, f"K={confirmed_at} confirmed the teacher-forced μ")
                        continue
                    self._decoded(verifier, drafter, temperature, k)
                    if acceptance.decoded_until_confirmed and self._confirmed(verifier, drafter, temperature, k):
                        confirmed_at = k

    def _not_decoded(self, verifier: str, drafter: str, contention: set[tuple[str, str]] | None) -> str | None:
        """Why a plan's measuring decodes no run of the pair (None: it does, as `polyplan profile`
        always does): a rule drafter under another model (`_rule_beneath`), any other verifier
        than the target, or a pair outside the chains in contention (`_contention`). The exact
        model ranks on the teacher-forced pass and the agreement runs, never on a decoded μ; under
        the target a decoded run checks that pass where it is cheap (replayed, or sampled until
        one run confirms it), while under another verifier it would decode for real only to fill
        Lemma 3.1's column and its disagreement flag, and recommend's self-check decodes the
        leading chains, every level of them, against the plan's own predictions."""
        if not self.settings.acceptance.decoded_until_confirmed:
            return None
        if self._rule_beneath(verifier, drafter):
            return f"{drafter} drafts by rule and is planned only directly under {self.target.name}"
        if verifier != self.target.name:
            return (f"verified by {verifier}, not {self.target.name}: no ranking reads its decoded μ, and the self-check "
                    "decodes the leading chains through it")
        if contention is not None and (verifier, drafter) not in contention:
            return "no chain through the pair is still in contention for the lead"
        return None

    def _rounds(self, pairs: Sequence[tuple[str, str]]) -> tuple[int, ...]:
        """The prompt counts α is measured on in turn: all of them, or with `decide` the sequential
        rounds (`prompt_rounds`) from the largest whose entries all hold (an earlier run's; it is
        judged again, from the stored entries, before more prompts are read)."""
        total = len(self.offered)
        if self.decide is None:
            return (total,)
        rounds = prompt_rounds(total)
        for start in range(len(rounds) - 1, -1, -1):
            self._use_prompts(rounds[start])
            if not self._alpha_to_measure(pairs):
                return rounds[start:]
        return rounds

    # ---- the budget
    def _alpha_to_measure(self, pairs: Sequence[tuple[str, str]]) -> bool:
        """Whether some α entry must be measured (a budget plans only what is measured)."""
        for temperature in self.settings.acceptance.temperatures:
            for verifier, drafter in pairs:
                pair = self.profile.pair(verifier, drafter)
                old = None if pair is None else pair.sampling.get(SamplingMode(temperature).key)
                if old is None or old.fingerprint not in self.alpha_keys(verifier, drafter, temperature) or old.engine_alpha is None:
                    return True
        return False

    def _costs(self) -> dict[str, MemberCost]:
        """Every candidate's latency curve and prefill, as measured, for the budget's prices."""
        costs = {}
        for model in self.models:
            entry = self.profile.model(model.name)
            costs[model.name] = MemberCost(curve_from_profile(entry), tuple((p.context_length, p.median_s) for p in entry.prefill))
        return costs

    def _plan_budget(self) -> BudgetPlan:
        """The prompts the acceptance stage takes within the budget (`profiler.budget.plan_budget`)."""
        acceptance, costs = self.settings.acceptance, self._costs()
        modes = len(acceptance.temperatures)
        cost = acceptance_cost(self.target.name, costs, [len(prompt) for prompt in self.prompts], new_tokens=acceptance.new_tokens,
                               modes=modes, width=TEACHER_FORCING_WIDTH, greedy=0.0 in acceptance.temperatures)
        calibration = calibration_seconds(costs[self.target.name], tokens=self.budget.calibration_tokens, modes=modes, costs=costs,
                                          context=min(self.settings.latency.context_lengths))
        reserve = self.budget.reserve
        kept = 0.0 if reserve is None else reserve(costs[self.target.name], [len(prompt) for prompt in self.offered])
        return plan_budget(self.budget.budget, self.budget.elapsed(time.perf_counter()), cost, calibration, kept)

    def _use_prompts(self, count: int) -> None:
        """Measure acceptance on the first `count` offered prompts (the latency curves keep their stream)."""
        acceptance = self.settings.acceptance
        self.prompts = self.offered[:count]
        self.decoded_prompts = self.prompts[:len(self.prompts) if acceptance.decoded_prompts is None else min(acceptance.decoded_prompts, count)]
        self.prompts_fingerprint = fingerprint_tokens(self.prompts)
        self.decoded_prompts_fingerprint = fingerprint_tokens(self.decoded_prompts)
        self.profile = replace(self.profile, profiler=replace(self.profile.profiler, prompts=count,
                                                              decoded_prompts=len(self.decoded_prompts)))

    def _decoded_fits(self, verifier: str, drafter: str, stats, k: int) -> SkippedMeasurement | None:
        """None when a decoded run fits what the budget has left after the calibrations; else what
        it would have cost."""
        if self.budget is None or self.budget_plan is None:
            return None
        costs = self._costs()
        mu = _expected_mu(stats, k) or 1.0
        seconds = decoded_seconds(costs[verifier], costs[drafter], k, mu, prompts=len(self.decoded_prompts),
                                  new_tokens=self.settings.acceptance.new_tokens)
        left = self.budget.left(time.perf_counter()) - self.budget_plan.calibration_s - self.budget_plan.reserve_s
        if seconds <= left:
            return None
        return SkippedMeasurement(f"{verifier} <- {drafter} K={k}", seconds)

    def _latencies(self, models: Sequence[ProfiledModel]) -> None:
        """Every model whose curve is missing or stale, timed together, interleaved round by round
        (`profiler.forward_timing.measure_latencies`): the load falls on all of them alike."""
        stale = []
        for model in models:
            step = Step("latency", f"latency {model.name}")
            entry = next((m for m in self.profile.models if m.name == model.name), None)
            key = self.latency_key(model)
            if entry is not None:  # what kind of drafter it is follows its fingerprint, not its timing
                entry = replace(entry, ngram_simple=ngram_simple_size(model.member))
                self.profile = self.profile.with_model(entry)
            if entry is not None and entry.latency_fingerprint == key:
                self._finish(step, reused=True)
            else:
                stale.append((model, step, entry, key))
        if not stale:
            return
        self._begin(stale[0][1])
        measurements = measure_latencies([model.member for model, _, _, _ in stale], self.stream, self.settings.latency)
        for (model, step, entry, key), measurement in zip(stale, measurements):
            fresh = replace(model_entry(model.name, model.fingerprint, measurement, key), ngram_simple=ngram_simple_size(model.member))
            if entry is not None:
                fresh = replace(entry, latency=fresh.latency, prefill=fresh.prefill, latency_fingerprint=key,
                                timing=fresh.timing or entry.timing, ngram_simple=fresh.ngram_simple)
            self.profile = self.profile.with_model(fresh)
        self.save()
        share = (time.perf_counter() - self._began) / len(stale)
        for model, step, _, _ in stale:
            self._began = time.perf_counter() - share  # each model's step gets its share of the joint time
            self._finish(step, reused=False)

    def _pairs(self) -> list[tuple[str, str]]:
        """Every (verifier, drafter) with the drafter the cheaper; an n-gram member never
        verifies (it has no distribution of its own to verify with)."""
        step_time = {m.name: curve_from_profile(m)(1) for m in self.profile.models}
        return [
            (verifier.name, drafter.name)
            for verifier in self.models
            for drafter in self.models
            if verifier is not drafter and step_time[drafter.name] < step_time[verifier.name]
            and not isinstance(verifier.member, (NGramMember, NGramSimpleMember))
        ]

    def _alpha(self, verifier: str, drafter: str, temperature: float) -> None:
        mode = SamplingMode(temperature).key
        bounded = self.is_bounded(verifier, drafter)
        label = f"alpha {verifier} <- {drafter} [{mode}]"
        if bounded:
            label += f", bounded: at best x{self.bounds[(verifier, drafter)].speedup:.2f}, first {BOUNDED_PROMPTS} prompts"
        elif self.decide is not None and len(self.prompts) < len(self.offered):
            label += f", first {len(self.prompts)} of {len(self.offered)} prompts"
        step = Step("alpha", label)
        key = self.alpha_key(verifier, drafter, temperature)
        pair = self.profile.pair(verifier, drafter)
        old = None if pair is None else pair.sampling.get(mode)
        # An entry from before the engines' rate was recorded is re-measured to add it.
        if old is not None and old.fingerprint in self.alpha_keys(verifier, drafter, temperature) and old.engine_alpha is not None:
            self._finish(step, reused=True)
            return
        self._begin(step)
        acceptance = self.settings.acceptance
        if bounded:
            upper, lower = self._bounded_forced(temperature, verifier), self._bounded_forced(temperature, drafter)
        else:
            upper, lower = self._forced(temperature, verifier), self._forced(temperature, drafter)
        prompts = BOUNDED_PROMPTS if bounded else len(self.prompts)
        estimate = pair_alpha(upper, lower, resamples=acceptance.resamples, level=acceptance.confidence,
                              rng=np.random.default_rng(_seed_of(key)))
        stats = sampling_entry(estimate, key, sorted(set(_IMPLIED_KS) | set(acceptance.block_sizes)), prompts)
        if bounded:
            stats = replace(stats, alpha_prompts=prompts)
        if old is not None:
            stats = replace(stats, decoded=old.decoded)  # decoded entries carry their own fingerprints
        stats = refresh_warnings(stats, acceptance.disagreement, self._own(verifier), prompts)
        self.profile = self.profile.with_stats(verifier, drafter, mode, stats)
        self.save()
        self._finish(step, reused=False)

    def _decoded(self, verifier: str, drafter: str, temperature: float, k: int) -> None:
        mode = SamplingMode(temperature).key
        step = Step("decoded", f"decoded {verifier} <- {drafter} [{mode}] K={k}")
        key = self.decoded_key(verifier, drafter, temperature, k)
        stats = self.profile.stats(verifier, drafter, mode)
        old = stats.decoded_at(k)
        if old is not None and old.fingerprint == key:
            self._finish(step, reused=True)
            return
        replayed = self.replays(verifier, drafter, temperature) or self.rule_replays(verifier, drafter, temperature)
        if not replayed:
            skipped = self._decoded_fits(verifier, drafter, stats, k)
            if skipped is not None:
                self.skipped.append(skipped)
                self.progress.done(replace(step, label=step.label + " (left out: over the budget)"), True)
                return
        self._begin(step)
        acceptance = self.settings.acceptance
        rng = np.random.default_rng(_seed_of(key))
        if self.rule_replays(verifier, drafter, temperature):
            measurement = decoded_measurement(self._rule_runs(drafter, k), k=k, settings=acceptance, rng=rng, replayed=True)
        elif self.replays(verifier, drafter, temperature):
            measurement = decoded_measurement(self._replayed_runs(drafter, k), k=k, settings=acceptance, rng=rng, replayed=True)
        else:
            measurement = measure_decoded(self.by_name[verifier].member, self.by_name[drafter].member, self.decoded_prompts, k=k,
                                          temperature=temperature, settings=acceptance, rng=rng, expected=_expected_mu(stats, k))
        entry = decoded_entry(measurement, len(measurement.per_prompt), key)
        stats = replace(stats, decoded=tuple(sorted([d for d in stats.decoded if d.k != k] + [entry], key=lambda d: d.k)))
        stats = refresh_warnings(stats, acceptance.disagreement, self._own(verifier), len(self.prompts))
        self.profile = self.profile.with_stats(verifier, drafter, mode, stats)
        self.save()
        self._finish(step, reused=False)

    def _confirmed(self, verifier: str, drafter: str, temperature: float, k: int) -> bool:
        """Whether the pair's decoded run at `k` really decoded and confirmed the μ the
        teacher-forced pass implies (`AcceptanceSettings.decoded_until_confirmed`)."""
        entry = self.profile.stats(verifier, drafter, SamplingMode(temperature).key).decoded_at(k)
        return entry is not None and entry.confirmed and not entry.replayed

    def _left_out(self, verifier: str, drafter: str, temperature: float, k: int, why: str) -> None:
        """Count the decoded run at `k` as left out, saying `why`: the pair's run at another K
        confirmed its teacher-forced μ (eq. 3's μ at `k` stands), or no ranked chain reads it
        (`_rule_beneath`, `_contention`). An entry an earlier run measured at `k` under the same
        settings is kept; `_prune` drops a stale one."""
        mode = SamplingMode(temperature).key
        self.progress.done(Step("decoded", f"decoded {verifier} <- {drafter} [{mode}] K={k} (left out: {why})"), True)

    def _contention(self) -> set[tuple[str, str]] | None:
        """The pairs of the chains the sequential rule last found in contention for the lead (its
        leader and the chains still tied with it); None where it never ranked (no rule, too few
        prompts, a profile it could not rank). The exact model does not read decoded μ (only
        Lemma 3.1's column and the check against the teacher-forced pass do), so a plan's
        measuring decodes no pair outside them: their chains lost on acceptance alone, and their
        Lemma 3.1 column reads eq. 3."""
        resolution = None if self.sequential is None else self.sequential.resolution
        if resolution is None or not resolution.leader:
            return None
        return {pair for chain in (resolution.leader,) + resolution.tied for pair in zip(chain, chain[1:])}

    def _prune(self, pairs: list[tuple[str, str]]) -> None:
        """Drop what a complete run leaves stale among its own candidates: pairs the run does
        not profile, and entries of the sampling modes it measured that other settings made.
        Pairs of models outside the candidates, and sampling modes this run did not measure,
        are kept (a profile is only ever extended)."""
        wanted = set(pairs)
        ours = set(self.by_name)
        modes = {SamplingMode(t).key for t in self.settings.acceptance.temperatures}
        self.profile = replace(self.profile, pairs=tuple(
            p for p in self.profile.pairs if (p.verifier, p.drafter) in wanted or not {p.verifier, p.drafter} <= ours
        ))
        for pair in self.profile.pairs:
            if (pair.verifier, pair.drafter) not in wanted:
                continue
            for mode, stats in pair.sampling.items():
                if mode not in modes:
                    continue
                temperature = SamplingMode.parse(mode).temperature
                if stats.fingerprint not in self.alpha_keys(pair.verifier, pair.drafter, temperature):
                    self.profile = self.profile.with_stats(pair.verifier, pair.drafter, mode, None)
                    continue
                stats = replace(stats, decoded=tuple(
                    d for d in stats.decoded if d.fingerprint == self.decoded_key(pair.verifier, pair.drafter, temperature, d.k)
                ))
                stats = refresh_warnings(stats, self.settings.acceptance.disagreement, self._own(pair.verifier),
                                         stats.alpha_prompts or len(self.prompts))
                self.profile = self.profile.with_stats(pair.verifier, pair.drafter, mode, stats)

    def _own(self, verifier: str) -> str | None:
        return None if verifier == self.target.name else verifier

    # ---- lazily computed inputs
    def greedy_reads(self) -> GreedyReads | None:
        """The greedy continuations and teacher-forced passes of the prompts α is measured on now,
        as far as they were read (None: no continuation of them)."""
        count = len(self.prompts)
        if len(self.continuations.get(0.0, ())) < count:
            return None
        acceptance = self.settings.acceptance
        forced = {name: _first(result, count) for (temperature, name), result in self.forced.items()
                  if temperature == 0.0 and _count(result) >= count}
        return GreedyReads(tuple(tuple(p) for p in self.prompts), acceptance.new_tokens, acceptance.seed,
                           self.continuations[0.0][:count], forced)

    def _continuations(self, temperature: float) -> tuple[tuple[int, ...], ...]:
        """The target's continuation of each prompt α is measured on now; a prefix read in an
        earlier round is extended, never read again (prompt i is seeded seed + i alone)."""
        done = self.continuations.get(temperature, ())
        if len(done) < len(self.prompts):
            acceptance = self.settings.acceptance
            past = self._past_tokens(temperature)
            earlier = [TargetStream(len(prompt), tuple(prompt) + tuple(ids)) for prompt, ids in zip(self.prompts, done)]
            streams = target_continuations_past(
                self.target.member, self.prompts[len(done):], new_tokens=acceptance.new_tokens, temperature=temperature,
                seed=acceptance.seed + len(done), past=past, curve=self._target_curve(), earlier=earlier)
            self.continuations[temperature] = done + tuple(stream.continuation for stream in streams)
            if temperature == 0.0:
                self.stream_blocks.extend(stream.block for stream in streams)
            if past:
                self.tails.update({len(done) + index: stream.past for index, stream in enumerate(streams)})
        return self.continuations[temperature][:len(self.prompts)]

    def _target_curve(self) -> LatencyCurve | None:
        """The target's latency curve where this run has it (it decides whether the target's greedy
        streams are decoded speculatively, `profiler.stream_drafting`); None: they are decoded plainly."""
        entry = next((m for m in self.profile.models if m.name == self.target.name), None)
        return curve_from_profile(entry) if entry is not None and entry.latency else None

    def _past_tokens(self, temperature: float) -> int:
        """How many of the target's greedy tokens past each continuation are read, with it and in
        every model's teacher-forced pass: as many as a replayed run's last verification drafts
        there (greedy runs with decoded μ only), else none."""
        acceptance = self.settings.acceptance
        return max(acceptance.block_sizes) - 1 if acceptance.decoded and temperature == 0.0 else 0

    def _forced(self, temperature: float, name: str) -> TeacherForced:
        """`name`'s teacher-forced pass over the prompts α is measured on now, extending the pass
        of an earlier round's prefix (each prompt is read on its own)."""
        count = len(self.prompts)
        if temperature == 0.0 and name == self.target.name:
            return own_greedy_read(self._continuations(0.0))
        carrier = self._carrier(temperature, name)
        if carrier is not None:  # read along with its base (`carried_reads`)
            self._forced(temperature, carrier)
            return _first(self.forced[(temperature, name)], count)
        done = self.forced.get((temperature, name))
        have = 0 if done is None else _count(done)
        if have < count:
            continuations = self._continuations(temperature)[have:]
            past = [self.tails[index] for index in range(have, count)] if self._past_tokens(temperature) else None
            riders = [rider for rider in self.carried if self._carrier(temperature, rider) == name]
            reads = teacher_forced_views(self.by_name[name].member, self.prompts[have:], continuations,
                                         temperature=temperature, vocab=self.target.member.valid_vocab_size, past=past,
                                         subsets=[self.carried[rider][1] for rider in riders])
            for reader, more in zip([name, *riders], reads):
                earlier = self.forced.get((temperature, reader))
                self.forced[(temperature, reader)] = more if earlier is None else _joined(earlier, more)
        return _first(self.forced[(temperature, name)], count)

    def _carrier(self, temperature: float, name: str) -> str | None:
        """The model whose passes read `name` along (`carried_reads`), or None: `name` reads its
        own; so does a cut of the target when greedy, whose own read is no pass at all."""
        base = self.carried.get(name, (None, None))[0]
        return None if base is None or (temperature == 0.0 and base == self.target.name) else base

    def _bounded_forced(self, temperature: float, name: str) -> TeacherForced:
        """`name`'s teacher-forced pass over the first `BOUNDED_PROMPTS` prompts: a slice of the
        whole pass where another pair needed it, else read over those prompts alone."""
        if temperature == 0.0 and name == self.target.name:
            return own_greedy_read(self._continuations(0.0)[:BOUNDED_PROMPTS])
        if (temperature, name) in self.forced and _count(self.forced[(temperature, name)]) >= BOUNDED_PROMPTS:
            return _first(self.forced[(temperature, name)], BOUNDED_PROMPTS)
        if (temperature, name) not in self.bounded_forced:
            self.bounded_forced[(temperature, name)] = teacher_forced(
                self.by_name[name].member, self.prompts[:BOUNDED_PROMPTS], self._continuations(temperature)[:BOUNDED_PROMPTS],
                temperature=temperature, vocab=self.target.member.valid_vocab_size)
        return self.bounded_forced[(temperature, name)]

    def _replayed_runs(self, drafter: str, k: int):
        """Each decoded prompt's tokens per verification, replayed (`replay_counts`) from the pair's
        agreement along the target's greedy continuation, and past its end where the last
        verification drafts there (the target's tokens there and the drafter's argmax on them,
        read with the continuation and the drafter's teacher-forced pass)."""
        continuations = self._continuations(0.0)
        target, other = self._forced(0.0, self.target.name), self._forced(0.0, drafter)
        for index in range(len(self.decoded_prompts)):
            agree = (target.argmax[index] == other.argmax[index]).tolist()
            length = len(continuations[index])
            counts = replay_counts(agree, length, k)
            if counts is None:
                tail = self.tails[index]  # read with the continuation (`_continuations`), the drafter's argmax there with its pass
                counts = replay_counts(agree + [int(guess) == token for guess, token in zip(other.past_argmax[index].tolist(), tail)],
                                       length, k)
            yield counts

    def _rule_runs(self, drafter: str, k: int):
        """Each decoded prompt's tokens per verification of the target over the rule drafter at
        block size `k`, replayed on the prompt's greedy continuation (`rule_replays`)."""
        continuations = self._continuations(0.0)
        size_n = self.by_name[drafter].member.size_n
        for index, prompt in enumerate(self.decoded_prompts):
            stream = TargetStream(prompt_tokens=len(prompt), ids=tuple(prompt) + tuple(continuations[index]))
            yield tuple(item.accepted + 1 for item in chain_rounds(stream, size_n, k))


def carried_reads(models: Sequence[ProfiledModel]) -> dict[str, tuple[str, torch.Tensor]]:
    """Each model whose teacher-forced read is another's masked to the ids its head keeps
    (`decoder.llama_cpp_subset.head_subset`: a reduced-vocabulary copy of a loaded model's file),
    by name: (that model's name, the ids). Its read then costs nothing: the base's passes give it.
    Its latency curve is still its own (its head is what makes it cheaper)."""
    carried = {}
    for model in models:
        for base in models:
            ids = head_subset(model.member, base.member)
            if ids is not None:
                carried[model.name] = (base.name, ids)
                break
    return carried


def _first(forced: TeacherForced, count: int) -> TeacherForced:
    """`forced` of the first `count` prompts."""
    return TeacherForced(*(None if part is None else part[:count]
                           for part in (forced.argmax, forced.probs, forced.top, forced.top10, forced.past_argmax)))


def _count(forced: TeacherForced) -> int:
    """The prompts `forced` holds."""
    return len(forced.argmax if forced.argmax is not None else forced.probs)


def _joined(first: TeacherForced, then: TeacherForced) -> TeacherForced:
    """`first`'s prompts followed by `then`'s."""
    return TeacherForced(*(None if a is None or b is None else a + b for a, b in zip(
        (first.argmax, first.probs, first.top, first.top10, first.past_argmax),
        (then.argmax, then.probs, then.top, then.top10, then.past_argmax))))


def _expected_mu(stats, k: int) -> float | None:
    """The μ the teacher-forced pass implies for the pair at block size `k` (positional where
    there is one, else eq. 3's), which a decoded run stops on once its interval holds it."""
    implied = next((item for item in stats.implied if item.k == k), None)
    if implied is None:
        return None
    return implied.mu if implied.mu_positional is None else implied.mu_positional


def _seed_of(key: str) -> int:
    return int(key.split(":", 1)[-1][:16], 16)
