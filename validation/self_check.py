"""recommend's self-check: a short run of the top chains that measures the exact model's error on
this machine (docs/cost-model.md, "The self-check").

How a chain's separately timed parts compose when it runs depends on the processor, so `self_check`
runs the best chains beside target-only decoding on a few profiling prompts and fits for each a
composition term C = Ŝ(check) / S(check): the exact model's speedup on the check's own run, priced
prompt by prompt (`validation.check_prices`) or, where the profile cannot, by the plan's parts
(`composition`), over the measured one. The plan then predicts exact / C, re-ranked.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from polyplan.decoder.member import ChainMember
from polyplan.formats.plan import PRICED_BY_PLAN, PRICED_BY_PROMPT, ChainCheck, PlanFile, PlannedChain, SelfCheckRecord
from polyplan.formats.profile import Profile
from polyplan.planner.exact.whole_call import prefill_curve
from polyplan.profiler.budget import MemberCost
from polyplan.profiler.prompts import EncodedPrompt
from polyplan.validation.chain_runs import (
    ValidationProgress, ValidationSettings, context_limit, fit_prompts, measure_chains, reserve_for, sampling_of, select_chains,
    target_only,
)
from polyplan.validation.check_prices import PromptPrice, priced_composition, prompt_prices
from polyplan.validation.cost_split import LevelCosts
from polyplan.validation.cost_split import composition as cost_composition
from polyplan.validation.results import ROLE_TARGET_ONLY, ChainSpec, RunRecord
from polyplan.validation.shrinkage import (
    CheckEvidence, WeighedTerm, bootstrap_variance, floor_variance, pass_variance, weigh,
)

_CHECK_TOP = 2  # chains checked besides the recommended one (the plan's next best)
_CHECK_PROMPTS = 4  # profiling prompts run (the built-in set alternates kinds: one of each)
_CHECK_TOKENS = 64  # tokens per prompt and chain
CHECK_REPEATS = 2  # interleaved passes over the same prompts: their spread is the machine's share of C's noise
CHECK_BUDGET_SHARE = 0.10  # of the profile's measuring time
# sizes tried, largest first, until the plan's own predictions say the run fits the budget; never
# fewer than _CHECK_PROMPTS prompts: a bootstrap over 2 or 3 prompts reads C's spread as next to
# none (docs/cost-model.md); a budget too small for the smallest is exceeded, and the output says so
CHECK_SIZES = ((_CHECK_PROMPTS, _CHECK_TOKENS), (_CHECK_PROMPTS, 48), (_CHECK_PROMPTS, 32))
_WARMUP_TOKENS = 8
_RESAMPLES = 500
_LEVEL = 0.95


def check_budget(profile: Profile | None, left_s: float | None = None) -> float | None:
    """The seconds the self-check may take: `CHECK_BUDGET_SHARE` of the profile's measuring time,
    never more than `left_s`, what is left of the command's `--budget` where there is one (None
    when neither is known: a profile from before its time was recorded, and no budget). The
    share, not the rest of the budget: a budget bounds the command (the default is a guard
    against runaway profiling), and a check sized to fill it would cost a quick plan minutes
    that buy a slightly narrower C. The smallest check runs whatever either says
    (`fitted_check`): a shorter one fits no C."""
    seconds = profile.profiler.seconds if profile is not None and profile.profiler is not None else None
    share = None if seconds is None else CHECK_BUDGET_SHARE * seconds
    if left_s is None:
        return share
    return max(0.0, left_s) if share is None else min(share, max(0.0, left_s))


def least_check_s(target: MemberCost, lengths: Sequence[int]) -> float:
    """About what the smallest check costs, known before any chain is ranked (what a `--budget`
    keeps for it, `profiler.budget.BudgetClock.reserve`): the last of `CHECK_SIZES` on the first
    prompts of `lengths`, run by target-only decoding and one chain at target-only's pace each
    (a chain recommended above it is faster), every repeat priming the target once a prompt (the
    members keep a primed prompt from one chain's run to the next, `measure_chains(reuse_prompts=True)`)."""
    prompts, tokens = CHECK_SIZES[-1]
    prefill = sum(target.prefill(max(length - 1, 0)) for length in list(lengths)[:prompts])
    return CHECK_REPEATS * (2 * prompts * (tokens + _WARMUP_TOKENS) * target.curve(1) + prefill)


def estimated_seconds(specs: Sequence[ChainSpec], prompts: int, new_tokens: int, repeats: int, prefill_s: float = 0.0) -> float:
    """What the check's run takes by the plan's own exact model: every chain (target-only
    included) decodes warm-up + `new_tokens` tokens on each prompt, `repeats` times, and each
    member prefills the prompts once per repeat (`prefill_s`: one pass's prefills, `prefill_seconds`)."""
    per_token = sum(_seconds_per_token(spec.planned) for spec in specs)
    return repeats * (prompts * (new_tokens + _WARMUP_TOKENS) * per_token + prefill_s)


def prefill_seconds(specs: Sequence[ChainSpec], profile: Profile | None, lengths: Sequence[int]) -> float:
    """Seconds one pass over prompts of `lengths` tokens spends priming the chains' members,
    each member once per prompt (`measure_chains(reuse_prompts=True)`), by the profile's prefill
    curves (0 for a member without one, and without a profile)."""
    if profile is None:
        return 0.0
    names = sorted({name for spec in specs for name in spec.planned.chain})
    curves = [prefill_curve(model) for model in profile.models if model.name in names]
    return sum(curve(max(length - 1, 0)) for curve in curves if curve is not None for length in lengths)


def _seconds_per_token(planned: PlannedChain) -> float:
    exact = planned.exact
    if exact.cost_per_token_s is not None:
        return exact.cost_per_token_s
    return sum(exact.time_per_token_s) + exact.overhead_per_token_s


def check_size(specs: Sequence[ChainSpec], budget_s: float | None, repeats: int = CHECK_REPEATS,
               prefill_s: float = 0.0) -> tuple[int, int, float]:
    """(prompts, tokens, estimated seconds): the largest of `CHECK_SIZES` whose estimate fits
    `budget_s` (None: the largest), else the smallest: a check too short to fit C is no check.
    `prefill_s`: one pass's prefills of the check's prompts (`prefill_seconds`)."""
    for prompts, tokens in CHECK_SIZES:
        estimate = estimated_seconds(specs, prompts, tokens, repeats, prefill_s)
        if budget_s is None or estimate <= budget_s:
            break
    return prompts, tokens, estimate


def fitted_check(specs: Sequence[ChainSpec], budget_s: float | None, repeats: int = CHECK_REPEATS,
                 prefill: Callable[[Sequence[ChainSpec]], float] = lambda specs: 0.0
                 ) -> tuple[tuple[ChainSpec, ...], tuple[int, int, float]]:
    """(the chains run, `check_size` of them): all of `specs` where one of `CHECK_SIZES` fits
    `budget_s`; else the lowest-ranked checked chain is left out, one at a time, until the smallest
    size fits, never target-only nor the best-ranked speculating chain, whose run may then still
    exceed the budget, and the output says so. Where the plan recommends the target alone, its
    best speculating chain stands in for the recommended one: a check of target-only decoding
    against itself measures nothing. A chain left out takes the pooled C of the checked chains most
    like it (`pooled_term`), so the check costs what its budget allows rather than whatever the
    chain count makes it. `prefill`: one pass's prefills of the chains given (`prefill_seconds`)."""
    kept = list(specs)
    while True:
        size = check_size(kept, budget_s, repeats, prefill(kept))
        speculating = sorted((spec for spec in kept if len(spec.planned.chain) > 1 and ROLE_TARGET_ONLY not in spec.roles),
                             key=lambda spec: spec.rank)
        droppable = speculating[1:]
        if budget_s is None or size[2] <= budget_s or not droppable:
            return tuple(kept), size
        kept.remove(max(droppable, key=lambda spec: spec.rank))


@dataclass(frozen=True)
class SelfCheck:
    """The plan with its checked predictions (how the check ran: `plan.self_check`) and what recommend prints."""

    plan: PlanFile
    lines: tuple[str, ...]


def composition(planned: PlannedChain, runs: Sequence[RunRecord], baseline: Sequence[RunRecord],
                predicted_baseline: float) -> float:
    """C of the module docstring (`validation.cost_split.composition`) over `runs` and the
    target-only `baseline` runs of the same cells."""
    tokens, exact = sum(len(run.token_ids) for run in runs), planned.exact
    levels = [LevelCosts.per_token(sum(run.forward_passes[i] for run in runs) / tokens,
                                   sum(run.forward_seconds[i] for run in runs) / tokens,
                                   exact.forwards_per_token[i], exact.time_per_token_s[i]) for i in range(len(planned.chain))]
    inside = sum(sum(run.forward_seconds) for run in runs)
    return cost_composition(
        levels, loop=(sum(run.decode_s for run in runs) - inside) / tokens, predicted_loop=exact.overhead_per_token_s,
        baseline=sum(run.decode_s for run in baseline) / sum(len(run.token_ids) for run in baseline),
        predicted_baseline=predicted_baseline,
    )


def composition_interval(fit: Callable[[Sequence[RunRecord], Sequence[RunRecord]], float], runs: Sequence[RunRecord],
                         baseline: Sequence[RunRecord], *, rng: np.random.Generator) -> tuple[float, float, float]:
    """(C, low, high): `fit` (chain runs, target-only runs -> C) over every run, and its percentile
    bootstrap interval over prompts."""
    prompts = sorted({run.prompt for run in runs})
    mine = {p: [run for run in runs if run.prompt == p] for p in prompts}
    theirs = {p: [run for run in baseline if run.prompt == p] for p in prompts}
    point = fit(runs, baseline)
    if len(prompts) < 2:
        return point, point, point
    draws = []
    for _ in range(_RESAMPLES):
        picked = rng.choice(prompts, size=len(prompts), replace=True)
        draws.append(fit([r for p in picked for r in mine[p]], [r for p in picked for r in theirs[p]]))
    tail = (1.0 - _LEVEL) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return point, float(min(low, point)), float(max(high, point))


def check_evidence(fit: Callable[[Sequence[RunRecord], Sequence[RunRecord]], float], runs: Sequence[RunRecord],
                   baseline: Sequence[RunRecord], *, rng: np.random.Generator) -> CheckEvidence:
    """One chain's evidence (`validation.shrinkage.CheckEvidence`): ln C over every run with its
    bootstrap variance over prompts (`composition_interval`), and ln C of each pass alone."""
    point, low, high = composition_interval(fit, runs, baseline, rng=rng)
    repeats = sorted({run.repeat for run in runs})
    passes = tuple(math.log(fit([run for run in runs if run.repeat == repeat],
                                [run for run in baseline if run.repeat == repeat])) for repeat in repeats)
    return CheckEvidence(math.log(point), bootstrap_variance(point, low, high), passes if len(passes) > 1 else ())


def profile_floor(profile: Profile | None) -> float | None:
    """The machine floor's IQR/median while the profile was timed (the median over its models; None
    when it recorded none)."""
    floors = [] if profile is None else [model.timing.reference_relative_iqr for model in profile.models
                                         if model.timing is not None and model.timing.reference_relative_iqr is not None]
    return statistics.median(floors) if floors else None


def shared_variance(evidence: Sequence[CheckEvidence], floor: float | None) -> float:
    """The variance of ln C that every chain's check shares with the machine's state: the larger of
    what the interleaved passes show (`validation.shrinkage.pass_variance`) and what the profile's
    floor implies (`floor_variance`); passes seconds apart miss the slower drift the floor sees."""
    return max(pass_variance(evidence) or 0.0, floor_variance(floor))


def plan_priced(planned: PlannedChain, predicted_baseline: float) -> Callable[[Sequence[RunRecord], Sequence[RunRecord]], float]:
    """C by the plan's own seconds per pass and target-only step (`composition`): how a check is
    priced when the profile cannot price its prompts (`validation.check_prices`)."""
    return lambda runs, baseline: composition(planned, runs, baseline, predicted_baseline)


def prompt_priced(prices: Sequence[PromptPrice]) -> Callable[[Sequence[RunRecord], Sequence[RunRecord]], float]:
    """C by the exact model on each check prompt (`validation.check_prices.priced_composition`)."""
    by_prompt = dict(enumerate(prices))
    return lambda runs, baseline: priced_composition(by_prompt, runs, baseline)


def combined(point: float, exact: tuple[float, float] | None, term: tuple[float, float, float]) -> tuple[float, float] | None:
    """The interval of exact / C around `point` (= exact point / C): the exact interval's and C's
    log deviations added in quadrature on each side, as independent errors (the profile's
    resampling, the check's prompts) add, not bound by bound."""
    if exact is None:
        return None
    c, low, high = term
    exact_point = point * c
    below = math.hypot(math.log(exact_point / exact[0]), math.log(high / c))  # a low speedup: a high C
    above = math.hypot(math.log(exact[1] / exact_point), math.log(c / low))
    return point * math.exp(-below), point * math.exp(above)


def _checked(planned: PlannedChain, term: WeighedTerm, measured: float | None, pooled: bool) -> PlannedChain:
    """`planned` with its check: exact / C, both exact intervals widened by C's (`combined`)."""
    point = planned.exact.speedup / term.composition
    bounds = (term.composition, term.low, term.high)
    return replace(planned, check=ChainCheck(
        term.composition, term.low, term.high, point, combined(point, planned.exact.interval, bounds), measured, pooled,
        combined(point, planned.exact.workload_interval, bounds), measured_composition=term.measured, weight=term.weight,
        noise=term.noise,
    ))


def self_check(
    plan: PlanFile,
    members: Mapping[str, ChainMember],
    prompts: Sequence[EncodedPrompt],
    *,
    top: int = _CHECK_TOP,
    budget_s: float | None = None,
    repeats: int = CHECK_REPEATS,
    seed: int = 0,
    profile: Profile | None = None,
    progress: ValidationProgress | None = None,
) -> SelfCheck:
    """The plan with checked predictions, re-ranked, from a run of its best chains beside target-only
    decoding on the first few of the profiling `prompts` (cut from the left to fit). `budget_s`: the
    seconds it may take (`check_size`); `profile`: the plan's, to price the run prompt by prompt
    (without it, or where it cannot, the plan's parts price it); `progress` hears of each run."""
    started = time.perf_counter()
    wanted = [spec for spec in select_chains(plan, top) if spec.rank <= top + 1 or ROLE_TARGET_ONLY in spec.roles]
    lengths = [len(prompt.ids) for prompt in list(prompts)[:_CHECK_PROMPTS]]
    specs, (count, new_tokens, estimate) = fitted_check(wanted, budget_s, repeats,
                                                        lambda chosen: prefill_seconds(chosen, profile, lengths))
    specs = list(specs)
    fitted = fit_prompts(list(prompts)[:count], context_limit(members, specs), reserve_for(specs, new_tokens),
                         truncate=True, source="the profiling prompts").prompts
    settings = ValidationSettings(new_tokens=new_tokens, repeats=repeats, top=top, seed=seed, warmup_tokens=_WARMUP_TOKENS)
    records, _ = measure_chains(specs, members, [p.ids for p in fitted], settings, sampling_of(plan.sampling), progress,
                                reuse_prompts=True)
    prices = None if profile is None else prompt_prices(plan, profile, [spec.planned for spec in specs], [p.ids for p in fitted],
                                                        new_tokens)
    baseline_index, baseline, predicted_baseline = target_only(specs, records)
    rng = np.random.default_rng(seed)
    evidence: dict[tuple[str, ...], CheckEvidence] = {}
    measured: dict[tuple[str, ...], float] = {}
    for index, spec in enumerate(specs):
        if index == baseline_index:
            continue
        runs = [run for run in records if run.chain == index]
        measured[spec.planned.chain] = sum(run.decode_s for run in baseline) / sum(run.decode_s for run in runs)
        fit = plan_priced(spec.planned, predicted_baseline) if prices is None else prompt_priced(prices[spec.planned.chain])
        evidence[spec.planned.chain] = check_evidence(fit, runs, baseline, rng=rng)
    floor = profile_floor(profile)
    shared = shared_variance(list(evidence.values()), floor)
    weighed = weigh(evidence, shared)
    terms = {chain: (term, measured[chain]) for chain, term in weighed.items()}
    record = SelfCheckRecord(prompts=len(fitted), new_tokens=new_tokens, repeats=repeats,
                             seconds=time.perf_counter() - started, budget_s=budget_s, estimated_s=estimate,
                             priced=PRICED_BY_PLAN if prices is None else PRICED_BY_PROMPT,
                             shared_noise=math.sqrt(shared), floor=floor,
                             left_out=tuple(spec.planned.chain for spec in wanted if spec not in specs))
    return _checked_plan(plan, terms, specs, record)


def pooled_term(chain: Sequence[str], terms: Mapping[tuple[str, ...], tuple[WeighedTerm, float]]) -> WeighedTerm:
    """C for a chain the check did not run: the median C of the checked chains whose drafters are most
    like its own (drafters in common over drafters in either), with an interval spanning theirs;
    of all of them when none shares a drafter; 1 when nothing was checked."""
    if not terms:
        return _UNCHECKED
    mine = set(chain[1:])
    likeness = {other: len(set(other[1:]) & mine) / len(set(other[1:]) | mine) for other in terms}
    most = max(likeness.values())
    nearest = [terms[other][0] for other, like in likeness.items() if like == most]
    return WeighedTerm(statistics.median(term.composition for term in nearest), min(term.low for term in nearest),
                       max(term.high for term in nearest), statistics.median(term.measured for term in nearest),
                       statistics.median(term.weight for term in nearest), max(term.noise for term in nearest))


_UNCHECKED = WeighedTerm(1.0, 1.0, 1.0, 1.0, 1.0, 0.0)  # target-only is its own baseline; nothing checked: no term


def _checked_plan(plan: PlanFile, terms, specs: Sequence[ChainSpec], record: SelfCheckRecord) -> SelfCheck:
    """The plan with every chain's check (target-only keeps C = 1: it is its own baseline), re-ranked."""
    ranked = []
    for planned in plan.alternatives:
        if len(planned.chain) == 1:
            ranked.append(_checked(planned, _UNCHECKED, 1.0, False))
        elif planned.chain in terms:
            term, measured = terms[planned.chain]
            ranked.append(_checked(planned, term, measured, False))
        else:
            ranked.append(_checked(planned, pooled_term(planned.chain, terms), None, True))
    ranked.sort(key=lambda chain: -chain.predicted_speedup)  # stable: ties keep the model's order
    record = replace(record, checked=tuple(spec.planned.chain for spec in specs if len(spec.planned.chain) > 1))
    new_plan = replace(plan, alternatives=tuple(ranked), self_check=record)
    return SelfCheck(new_plan, tuple(_check_lines(plan, new_plan, record)))


def _check_lines(before: PlanFile, after: PlanFile, record: SelfCheckRecord) -> list[str]:
    """What recommend prints of the self-check."""
    priced = ("each prompt priced by the exact model on its own acceptance and context" if record.priced == PRICED_BY_PROMPT
              else "priced by the plan's seconds per pass, acceptance as measured")
    lines = [f"Self-check ({len(record.checked)} chain(s) beside target-only decoding, {record.prompts} profiling prompt(s) x "
             f"{record.new_tokens} tokens x {record.repeats} interleaved pass(es), {record.seconds:.1f} s{_budget_text(record)}): "
             f"composition term C = the exact model's error on this machine ({priced}); C as measured is shrunk toward 1 "
             f"by its evidence ({_noise_text(record)}); checked prediction = exact / C"]
    for planned in after.alternatives:
        check = planned.check
        if check is None or len(planned.chain) == 1 or check.pooled:
            continue
        interval = "" if check.interval is None else f" [{check.interval[0]:.2f}, {check.interval[1]:.2f}]"
        workload = "" if check.workload_interval is None else \
            f" (workload [{check.workload_interval[0]:.2f}, {check.workload_interval[1]:.2f}])"
        weighed = "" if check.measured_composition is None else \
            f"measured C = {check.measured_composition:.3f} ± {check.noise:.1%}, {check.weight:.0%} of it kept: "
        lines.append(f"  {planned.label():<44} exact {planned.exact.speedup:.2f}x, measured {check.measured:.2f}x, "
                     f"{weighed}C = {check.composition:.3f} [{check.composition_low:.3f}, {check.composition_high:.3f}] -> "
                     f"{check.speedup:.2f}x{interval}{workload}")
    pooled = [planned for planned in after.alternatives if planned.check is not None and planned.check.pooled]
    if pooled:
        lines.append(f"  the {len(pooled)} other chain(s) take C from the checked chain(s) whose drafters are most like theirs "
                     "(their median, the interval spanning theirs), e.g. " + "; ".join(
                         f"{planned.label()} C = {planned.check.composition:.3f} -> {planned.check.speedup:.2f}x" for planned in pooled[:2]))
    if after.best.chain != before.best.chain:
        lines.append(f"  re-ranked: {after.best.label()} (K = {after.best.blocks_label()}) is now first, "
                     f"checked {after.best.predicted_speedup:.2f}x")
    return lines


def _noise_text(record: SelfCheckRecord) -> str:
    """The check's noise shared by its prompts, and where it was read."""
    if record.shared_noise is None:
        return "its prompts' spread"
    floor = "" if record.floor is None else f"; the profile's machine floor IQR/median {record.floor:.1%}"
    return f"its prompts' spread and the machine's, ± {record.shared_noise:.1%} shared by every prompt{floor}"


def _budget_text(record: SelfCheckRecord) -> str:
    """", of a B s budget (...)": the budget, the plan's estimate, and whether the run kept to it
    (the estimate counts the prompts' prefills by the profile and leaves out setup, which
    dominates on tiny models). A run whose smallest size was estimated above the budget ran whole
    by design and says so; "OVER it" is for a run the estimate said would fit."""
    if record.budget_s is None:
        return ""
    estimate = "" if record.estimated_s is None else f"; estimated {record.estimated_s:.1f} s"
    smallest = record.estimated_s is not None and record.estimated_s > record.budget_s
    over = "" if record.seconds <= record.budget_s else \
        ", the smallest check run whole above it (a shorter one fits no C)" if smallest else ", OVER it"
    left = "" if not record.left_out else \
        f"; left out to fit it: {', '.join(' > '.join(chain) for chain in record.left_out)}"
    return f" of a {record.budget_s:.1f} s budget{over} ({CHECK_BUDGET_SHARE:.0%} of the profile's measuring time, within what --budget left{estimate}{left})"


def skipped_plan(plan: PlanFile, reason: str) -> PlanFile:
    """The plan with a record that no self-check ran, and why."""
    return replace(plan, self_check=SelfCheckRecord(skipped=reason))
