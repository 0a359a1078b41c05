"""`polyplan validate`: run the planned chains side by side and measure what was predicted
(docs/validation.md, "What it runs").

`validate_plan` selects the chains (`select_chains`), fits the prompts and runs them interleaved
(`measure_chains`: each chain once per prompt and repeat, in an order rotated from prompt to
prompt, so background load falls on all alike; prefill timed apart by `validation.primed`, the
garbage collector paused, every chain run once untimed first); `validation.results` judges them.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from polyplan.decoder.chain import context_reserve, generate
from polyplan.decoder.member import ChainMember, stop_token_ids
from polyplan.decoder.sampling import Sampling
from polyplan.formats.sampling import SamplingMode
from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import PlanFile
from polyplan.formats.processor import Processor, machine_difference
from polyplan.formats.validation_report import ReportSettings
from polyplan.formats.profile import Profile
from polyplan.formats.options import integer_at_least
from polyplan.planner.intervals.prediction_interval import stretch_words
from polyplan.planner.intervals.width import wide_interval_lines
from polyplan.validation.categories import chain_categories
from polyplan.profiler.forward_timing import synchronizer
from polyplan.profiler.forward_timing import collector_paused
from polyplan.validation.numerics import near_ties
from polyplan.validation.primed import PrimedMember
from polyplan.validation.retime import PassTiming, exact_speedups, reaccepted_profile, retimed_profile, time_passes
from polyplan.profiler.prompts import EncodedPrompt
from polyplan.validation.results import (
    ROLE_ALTERNATIVE,
    ROLE_RECOMMENDED,
    ROLE_TARGET_ONLY,
    ROLE_TWO_MODEL,
    ChainSpec,
    RunRecord,
    Validation,
    headline,
    summarise_chain,
)


@dataclass(frozen=True)
class ValidationSettings:
    """How the chains are run: `new_tokens` per prompt and chain (greedy runs stop early at the
    target's EOS ids, where every chain, emitting the target's tokens, stops alike; sampled runs
    never do, or their times would not compare); `repeats` passes over the prompts (each prompt's
    paired ratio is their median); `top` alternatives besides the recommended chain; prompt i
    decoded with a generator seeded `seed` + i by every chain; `warmup_tokens` of each chain's
    untimed first run."""

    new_tokens: int = 128
    repeats: int = 3
    top: int = 3
    seed: int = 0
    warmup_tokens: int = 16

    def __post_init__(self) -> None:
        for name, option, least in (("new_tokens", "--new-tokens", 1), ("repeats", "--repeats", 1), ("top", "--top", 0)):
            integer_at_least(getattr(self, name), least, option)


@dataclass(frozen=True)
class FittedPrompts:
    """The prompts a validation runs on, and what had to be left out or shortened."""

    prompts: tuple[EncodedPrompt, ...]
    dropped: tuple[str, ...]  # sources of prompts that do not fit the context
    truncated: int  # prompts cut from the left to fit


class ValidationProgress(Protocol):
    """What a validation reports while it works (the CLI draws a progress bar from it)."""

    def total(self, runs: int) -> None: ...

    def advance(self, label: str) -> None: ...


def sampling_of(key: str) -> Sampling:
    """The decoder's `Sampling` for a profile/plan sampling key ("greedy", "t0.7", …)."""
    return Sampling(temperature=SamplingMode.parse(key).temperature)


def top_note(plan: PlanFile, top: int, label: str = "plan.json") -> str | None:
    """What validate says when `top` asks for more alternatives than the plan ranks (it runs them
    all: a default may never fail on a valid plan); None when the plan has enough."""
    alternatives = len(plan.alternatives) - 1
    if top <= alternatives:
        return None
    return f"--top {top}: {label} ranks {alternatives} alternative chain{'s' if alternatives != 1 else ''}; validated all of them"


def select_chains(plan: PlanFile, top: int, label: str = "plan.json") -> tuple[ChainSpec, ...]:
    """The chains to validate: recommended, the next `top` of the ranking (all of them when the
    plan ranks fewer, `top_note`), the best two-model chain and target-only decoding (each once,
    with every role it plays)."""
    ranked = plan.alternatives
    top = min(top, len(ranked) - 1)
    roles: dict[int, list[str]] = {0: [ROLE_RECOMMENDED]}
    for index in range(1, top + 1):
        roles.setdefault(index, []).append(ROLE_ALTERNATIVE)
    special = ((ROLE_TWO_MODEL, 2), (ROLE_TARGET_ONLY, 1))
    for role, size in special:
        index = next((i for i, chain in enumerate(ranked) if len(chain.chain) == size), None)
        if index is not None:
            roles.setdefault(index, []).append(role)
    if not any(ROLE_TARGET_ONLY in r for r in roles.values()):
        raise PolyplanError(f"{label}: alternatives: the target-only chain [{plan.target!r}] is missing")
    return tuple(ChainSpec(ranked[index], tuple(roles[index]), index + 1) for index in sorted(roles))


def fit_prompts(
    prompts: Sequence[EncodedPrompt], limit: int | None, reserve: int, *, truncate: bool, source: str
) -> FittedPrompts:
    """Prompts that leave `reserve` tokens of a `limit`-token context (None: unbounded): with
    `truncate` a longer prompt keeps its last tokens, else it is left out; none usable at all is a
    `PolyplanError` naming `source`."""
    if not prompts:
        raise PolyplanError(f"{source}: no usable prompt (the set is empty)")
    if limit is None:
        return FittedPrompts(tuple(prompts), (), 0)
    room = limit - reserve
    if room < 2:
        raise PolyplanError(
            f"--new-tokens: {reserve} generated and drafted tokens leave no room for a prompt in a context of {limit} tokens"
        )
    kept, dropped, truncated = [], [], 0
    for prompt in prompts:
        if len(prompt.ids) <= room:
            kept.append(prompt)
        elif truncate:
            kept.append(EncodedPrompt(prompt.prompt, prompt.ids[-room:]))
            truncated += 1
        else:
            dropped.append(prompt.prompt.source)
    if not kept:
        raise PolyplanError(
            f"{source}: no usable prompt: all {len(prompts)} are longer than the {room} tokens that fit "
            f"({limit}-token context minus {reserve} generated and drafted tokens)"
        )
    return FittedPrompts(tuple(kept), tuple(dropped), truncated)


def reserve_for(specs: Sequence[ChainSpec], new_tokens: int) -> int:
    """Context a run needs beyond its prompt: new tokens plus the deepest draft lookahead and
    verification padding (`decoder.chain.context_reserve`, what the decoder checks)."""
    return new_tokens + max(context_reserve(spec.planned.block_sizes, spec.planned.verify_widths, spec.planned.draft_policy)
                            for spec in specs)


def context_limit(members: Mapping[str, ChainMember], specs: Sequence[ChainSpec]) -> int | None:
    limits = [members[name].max_context for spec in specs for name in spec.planned.chain]
    limits = [limit for limit in limits if limit is not None]
    return min(limits) if limits else None


def measure_chains(
    specs: Sequence[ChainSpec],
    members: Mapping[str, ChainMember],
    prompts: Sequence[Sequence[int]],
    settings: ValidationSettings,
    sampling: Sampling,
    progress: ValidationProgress | None = None,
    retime: bool = False,
    more: int = 0,
    reuse_prompts: bool = False,
) -> tuple[tuple[RunRecord, ...], tuple[PassTiming, ...]]:
    """The runs of every chain on every prompt, `settings.repeats` times, interleaved, and (with
    `retime`) every model's passes timed after each prompt and repeat on the target-only
    continuation of that prompt (`validation.retime`). `progress` hears of each run, its total
    counting `more` steps the caller reports after these. `reuse_prompts` (not with `retime`): a
    member that ran the same prompt in the chain before keeps its primed prompt
    (`PrimedMember.prime`), so each member prefills a prompt once per repeat, and the runs' prefill
    seconds are that prime's."""
    if reuse_prompts and retime:
        raise ValueError("measure_chains: reuse_prompts needs the members untouched between runs (retime times them)")
    missing = sorted({name for spec in specs for name in spec.planned.chain} - set(members))
    if missing:
        raise PolyplanError(f"models: {missing[0]!r} is in the plan but was not loaded")
    primed = {name: PrimedMember(members[name]) for spec in specs for name in spec.planned.chain}
    device = primed[specs[0].planned.chain[0]].device
    sync = synchronizer(primed[specs[0].planned.chain[0]])
    tensors = [torch.tensor(list(prompt), dtype=torch.int64, device=device) for prompt in prompts]  # (L,) each
    records: list[RunRecord] = []
    timings: list[PassTiming] = []
    baseline = next((i for i, spec in enumerate(specs) if len(spec.planned.chain) == 1), None)
    raw = {name: wrapper.member for name, wrapper in primed.items()}
    if progress is not None:
        progress.total(len(specs) * len(prompts) * settings.repeats + more)
    with torch.inference_mode(), collector_paused():
        for spec in specs:
            _run(spec, primed, tensors[0], 0, min(settings.warmup_tokens, settings.new_tokens), settings.seed, sampling, sync,
                 reuse_prompts)
        for repeat in range(settings.repeats):
            for index, prompt in enumerate(tensors):
                gc.collect()  # between prompts, never inside a timed run
                offset = (repeat * len(tensors) + index) % len(specs)
                for chain in [(offset + step) % len(specs) for step in range(len(specs))]:
                    run = _run(specs[chain], primed, prompt, index, settings.new_tokens, settings.seed + index, sampling, sync,
                               reuse_prompts)
                    records.append(RunRecord(chain, repeat, index, *run))
                    if progress is not None:
                        progress.advance(specs[chain].planned.label())
                if retime and baseline is not None:
                    reference = next(run for run in records[-len(specs):] if run.chain == baseline)
                    continuation = torch.tensor(reference.token_ids, dtype=torch.int64, device=device)
                    half = continuation.shape[0] // 2
                    context = torch.cat([prompt, continuation[:half]])
                    timings.extend(time_passes(raw, context, continuation[half:], sync))
    for member in primed.values():
        member.member.reset()
    return tuple(records), tuple(timings)


def target_only(specs: Sequence[ChainSpec], records: Sequence[RunRecord]) -> tuple[int, list[RunRecord], float]:
    """Target-only decoding among `specs`: its index, its runs among `records`, and the plan's
    seconds per token for it (what `validation.cost_split` calls b̂)."""
    index = next(i for i, spec in enumerate(specs) if ROLE_TARGET_ONLY in spec.roles)
    exact = specs[index].planned.exact
    return index, [run for run in records if run.chain == index], exact.time_per_token_s[0] + exact.overhead_per_token_s


def _run(spec: ChainSpec, primed, prompt: torch.Tensor, index: int, tokens: int, seed: int, sampling: Sampling, sync,
         reuse: bool = False):
    chain = [primed[name] for name in spec.planned.chain]
    prefill = sum(member.prime(prompt[:-1], sync, reuse) for member in chain)
    generator = torch.Generator(device=chain[0].device).manual_seed(seed)
    eos = stop_token_ids(chain[0].member) if sampling.greedy else None
    result = generate(
        chain, prompt, max_new_tokens=tokens, block_sizes=spec.planned.block_sizes, sampling=sampling, generator=generator,
        verify_widths=spec.planned.verify_widths, draft_policy=spec.planned.draft_policy,
        eos_token_id=eos,
    )
    levels = result.levels
    return (
        result.wall_time_s,
        prefill,
        result.token_ids,
        tuple(level.forward_passes for level in levels),
        tuple(level.wall_time_s for level in levels),
        tuple(level.tokens_per_verification for level in levels),
        tuple(level.tokens_drafted for level in levels),
        tuple(level.tokens_accepted for level in levels),
        tuple(level.passes for level in levels),
    )


def validate_plan(
    plan: PlanFile,
    members: Mapping[str, ChainMember],
    prompts: Sequence[EncodedPrompt],
    settings: ValidationSettings = ValidationSettings(),
    *,
    device_label: str,
    plan_path: str | None = None,
    prompt_source: str = "prompts",
    truncate_prompts: bool = False,
    progress: ValidationProgress | None = None,
    profile: Profile | None = None,
    processor: Processor | None = None,
) -> Validation:
    """Validate `plan` (read by `read_plan`) with the loaded `members` on `prompts` (those that do
    not fit the context left out, or shortened from the left with `truncate_prompts`).
    `device_label` and `processor` (None: the labels only) are compared with the plan's in the
    notes; with the plan's `profile`, every model's passes are also timed during the run and the
    exact model re-evaluated on them (`validation.retime`)."""
    started = time.perf_counter()
    label = plan_path or "plan.json"
    specs = select_chains(plan, settings.top, label)
    fitted = fit_prompts(
        prompts, context_limit(members, specs), reserve_for(specs, settings.new_tokens), truncate=truncate_prompts, source=prompt_source
    )
    sampling = sampling_of(plan.sampling)
    agreeing = profile is not None and sampling.greedy  # the agreement runs below: about a target-only run per prompt
    records, timings = measure_chains(
        specs, members, [p.ids for p in fitted.prompts], settings, sampling, progress, retime=profile is not None,
        more=len(fitted.prompts) if agreeing else 0,
    )
    retimed: dict[tuple[str, ...], float] = {}
    reaccepted: dict[tuple[str, ...], float] = {}
    if profile is not None and timings:
        chains_run = [(spec.planned.chain, spec.planned.block_sizes, spec.planned.draft_policy) for spec in specs]
        acceptance_model = plan.search.acceptance_model or "iid"
        overhead = plan.loop_overhead
        retimed = exact_speedups(retimed_profile(profile, timings), chains_run, sampling=plan.sampling, overhead=overhead,
                                 acceptance_model=acceptance_model)
        if sampling.greedy:
            agreement = _validation_agreement(specs, members, [p.ids for p in fitted.prompts], settings)
            reaccepted = exact_speedups(reaccepted_profile(profile, timings, agreement), chains_run, sampling="greedy",
                                        overhead=overhead, acceptance_model=acceptance_model)
    for _ in fitted.prompts if agreeing and progress is not None else ():
        progress.advance("agreement runs on the prompts")
    baseline_index, baseline, predicted_baseline = target_only(specs, records)
    price = _profile_price(profile) if profile is not None else None
    ties = near_ties(specs, records, baseline_index, members[plan.target], [p.ids for p in fitted.prompts]) if sampling.greedy else {}
    chains = tuple(
        summarise_chain(
            spec, [run for run in records if run.chain == index], baseline, sampling.greedy, retimed.get(spec.planned.chain),
            reaccepted.get(spec.planned.chain), ties[index].line() if index in ties else None,
            predicted_baseline=predicted_baseline, price=price,
        )
        for index, spec in enumerate(specs)
    )
    notes = [note] if (note := top_note(plan, settings.top, label)) else []
    machine = machine_difference(plan.device, plan.processor, device_label, processor)
    if machine is not None:
        notes.append(machine)
    if not sampling.greedy:
        notes.append(f"sampling {plan.sampling}: outputs are random, so greedy equality does not apply")
    if fitted.dropped:
        notes.append(f"{len(fitted.dropped)} prompt(s) left out: longer than the context allows")
    if fitted.truncated:
        notes.append(f"{fitted.truncated} prompt(s) shortened from the left to fit the context")
    notes += plan_notes(plan)
    return Validation(
        chains=chains,
        headline=headline(chains),
        settings=ReportSettings(
            sampling=plan.sampling,
            prompts=len(fitted.prompts),
            prompt_sources=tuple(p.prompt.source for p in fitted.prompts),
            dropped_prompts=fitted.dropped,
            truncated_prompts=fitted.truncated,
            new_tokens=settings.new_tokens,
            repeats=settings.repeats,
            seed=settings.seed,
            device=device_label,
            plan_device=plan.device,
            plan=plan_path,
            wall_time_s=time.perf_counter() - started,
            exact_model=_exact_model_description(plan),
        ),
        notes=tuple(notes),
        categories=chain_categories(specs, records, [p.prompt.kind for p in fitted.prompts], baseline_index),
    )


def _profile_price(profile: Profile):
    """(model, width, context) -> the profile's T at that width, its curves read at that context
    (`planner.exact.latency.curve_from_profile`), for pricing a member's passes where the chain ran them."""
    from functools import lru_cache

    from polyplan.planner.exact.latency import curve_from_profile

    @lru_cache(maxsize=None)
    def curve(model: str, context: int):
        return curve_from_profile(profile.model(model), context)

    return lambda model, width, context: curve(model, int(round(context)))(width)


def plan_notes(plan: PlanFile) -> list[str]:
    """What the plan says of its own predictions, for the report's notes: the timing warnings it
    was made with and each model whose interval a failed timing check widened."""
    notes = [f"timing warning from the plan: {line}" for line in plan.warnings]
    if plan.prediction_intervals is not None:
        notes += [f"prediction interval widened for timing health: {line}" for line in plan.prediction_intervals.widened]
        if plan.prediction_intervals.prompt_stretch != 1.0:
            notes.append(f"prediction intervals: acceptance resampled for a new prompt set"
                         f"{stretch_words(plan.prediction_intervals.prompt_stretch)}")
    notes += [f"wide interval: {line}" for line in wide_interval_lines(plan)]
    return notes


def _validation_agreement(specs: Sequence[ChainSpec], members: Mapping[str, ChainMember], prompts: Sequence[Sequence[int]],
                         settings: ValidationSettings) -> dict:
    """Greedy agreement sequences of every adjacent pair of the validated chains on the
    validation prompts (`profiler.agreement_runs.measure_agreement`: the target's continuation of
    `settings.new_tokens` tokens, one teacher-forced pass per model), untimed."""
    from types import SimpleNamespace

    from polyplan.profiler.agreement_runs import measure_agreement

    target = specs[0].planned.chain[0]
    names = [target] + sorted({name for spec in specs for name in spec.planned.chain} - {target})
    models = [SimpleNamespace(name=name, member=members[name], fingerprint=name) for name in names]
    pairs = sorted({pair for spec in specs for pair in zip(spec.planned.chain, spec.planned.chain[1:])})
    with torch.inference_mode():
        entry = measure_agreement(models, pairs, prompts, new_tokens=settings.new_tokens, seed=settings.seed)
    for member in members.values():
        member.reset()
    return entry


def _exact_model_description(plan: PlanFile) -> str:
    """One line on what the plan's exact predictions include (acceptance law, loop, context)."""
    runs = plan.search.acceptance_model == "runs"
    acceptance = "measured acceptance runs (planner.exact.runs)" if runs else "i.i.d. acceptance at rate alpha"
    overhead = plan.loop_overhead
    loop = (
        f"decoding loop {overhead.per_step_s * 1e6:.0f} us/step + {overhead.per_round_s * 1e6:.0f} us/round"
        if overhead is not None
        else "no decoding-loop overhead"
    )
    if plan.switch_costs:
        loop += "; switch costs (extra us of the 1st, 2nd, … pass after another model's) " + ", ".join(
            f"{name} {'/'.join(f'{s * 1e6:.0f}' for s in cost)}" for name, cost in sorted(plan.switch_costs.items())
        )
    context = plan.search.context_length
    where = f"latency read at context {context}" if context else "latency averaged over the profiled contexts"
    return f"{acceptance}; {loop}; {where}"
