"""Search: the best chain and block sizes for a profile, with both models' predictions.

`rank_chains(profile)` ranks every chain of ordered candidate drafters by the exact model's
speedup at its best block sizes, with Lemma 3.1 beside it and each candidate's reason for being
in or out. For the target and one drafter at greedy the last level may also draft by a policy
(`formats.plan.DraftPolicy`), planned by replaying it on the measured sequences; deeper chains
keep a fixed K, since their sequences follow the target's own continuation, which only the level
directly under the target verifies against. docs/cost-model.md, "The search".
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

from polyplan.formats.errors import PolyplanError
from polyplan.formats.verbosity import other_output_shown
from polyplan.planner.exact.cost_model import ChainPrediction, ChainSettings, predict_chain
from polyplan.planner.exact.draft_rounds import DraftRounds
from polyplan.planner.exact.ngram_replay import ngram_simple_sizes, target_streams
from polyplan.planner.exact.policy_replay import replayed_rounds
from polyplan.planner.paper.insertion_triples import TripleInsertion, insertion_inputs, triple_insertion
from polyplan.planner.exact.latency import LatencyCurve, curve_from_profile
from polyplan.formats.overhead import NO_SWITCH, LoopOverhead, SwitchCost
from polyplan.planner.exact.overhead import profile_switch_costs
from polyplan.planner.exact.runs import RunSurvival, run_survival, profile_runs
from polyplan.formats.plan import FIXED_DRAFTS, DraftPolicy, VerifyWidths, blocks_text
from polyplan.formats.processor import Processor
from polyplan.planner.exact.verify_width import verify_widths
from polyplan.planner.paper.paper_model import PaperPrediction, paper_prediction
from polyplan.planner.exact.physical_limit import PhysicalLimit, measured_block_size, physical_limit
from polyplan.planner.intervals.prediction_interval import PredictionIntervals
from polyplan.formats.profile import Profile, SamplingStats
from polyplan.formats.options import integer_at_least

_SEARCH_MODES = ("auto", "grid", "optuna")
_ACCEPTANCE_MODELS = ("auto", "iid", "runs")
TOP_CHAINS = 5  # the ranked chains whose every intermediate level gets Theorem 3.2 in `insertion_triples`
_DRAFT_P_MINS = (0.3, 0.5, 0.7, 0.9)  # the confidence stops the search tries (llama.cpp's --spec-draft-p-min)


@dataclass(frozen=True)
class ChainPlan:
    """One chain (target first) with its block sizes and both models' predictions."""

    chain: tuple[str, ...]
    block_sizes: tuple[int, ...]
    acceptances: tuple[float, ...]  # α_{i,i+1} per level
    exact: ChainPrediction
    paper: PaperPrediction
    search: str  # how the block sizes were chosen: "grid", "optuna" or "given"
    # Theorem 3.2 on each intermediate model against this chain without it: (model, "helps" / "no_gain")
    insertion_verdicts: tuple[tuple[str, str], ...] = ()
    verify_widths: tuple[VerifyWidths, ...] = ()  # per verifying level, the widths its passes run at
    draft_policy: DraftPolicy | None = None  # how the last member chooses its draft lengths (None: fixed)

    @property
    def exact_speedup(self) -> float:
        return self.exact.speedup

    @property
    def paper_speedup(self) -> float:
        return self.paper.speedup

    def label(self) -> str:
        return " > ".join(self.chain)

    def blocks_label(self) -> str:
        """`[4, 3]`, or with the last level's draft policy `[4, 3 adaptive 1..8]`, `[6, p_min 0.7]`."""
        return blocks_text(self.block_sizes, self.draft_policy)


@dataclass(frozen=True)
class InsertionNote:
    """Why one candidate model is in or out of the best chain."""

    model: str
    included: bool
    line: str
    exact_speedup_with: float | None
    exact_speedup_without: float | None
    theorem_verdict: str | None  # Theorem 3.2 on the local insertion; None when it does not apply


@dataclass(frozen=True)
class Recommendation:
    """The result of `rank_chains`: the best plan, every chain ranked, and the insertion notes."""

    best: ChainPlan
    ranked: tuple[ChainPlan, ...]  # best first, by exact speedup
    insertions: tuple[InsertionNote, ...]
    target: str
    device: str
    sampling: str
    max_levels: int
    k_max: int
    fingerprints: tuple[tuple[str, str], ...]  # (model name, fingerprint) for every model
    overhead: LoopOverhead | None = None  # the decoding loop's cost the exact model included
    context_length: int | None = None  # where the latency curves were read (None: their average)
    acceptance_model: str = "iid"  # "iid" (rate α per token) or "runs" (measured acceptance runs)
    switch_costs: tuple[tuple[str, SwitchCost], ...] = ()  # (model, seconds per pass after a switch) the exact model included
    intervals: PredictionIntervals | None = None  # bootstrap intervals of the exact speedups (planner.intervals.prediction_interval)
    workload: PredictionIntervals | None = None  # the same for the workload's mean (one prompt draw: `new_set` False)
    warnings: tuple[str, ...] = ()  # what makes the profile's timings doubtful (noisy floor, budget run out)
    limit: PhysicalLimit | None = None  # a free, always-right drafter's speedup (planner.exact.physical_limit)
    insertion_triples: tuple[TripleInsertion, ...] = ()  # Theorem 3.2 on each insertion that matters
    processor: Processor | None = None  # where the profile's timings were taken (None: not recorded)

    @property
    def best_chain(self) -> ChainPlan | None:
        """The fastest chain that speculates (at least one drafter); None when there is none."""
        return next((plan for plan in self.ranked if len(plan.chain) > 1), None)


class _Context:
    """Profile lookups shared by every chain evaluation."""

    def __init__(self, profile: Profile, settings: ChainSettings) -> None:
        sampling, context_length, acceptance_model = settings.sampling, settings.context_length, settings.acceptance_model
        if acceptance_model not in _ACCEPTANCE_MODELS:
            raise PolyplanError(f"acceptance_model: must be one of {', '.join(_ACCEPTANCE_MODELS)}, got {acceptance_model!r}")
        self.profile = profile
        self.sampling = sampling
        self.context_length = context_length
        self.overhead = settings.overhead
        self.runs = {} if acceptance_model == "iid" else profile_runs(profile, sampling)
        if acceptance_model == "runs" and not self.runs:
            raise PolyplanError(f"{profile.source}: acceptance_runs: none recorded for sampling {sampling!r}")
        self.acceptance_model = "runs" if self.runs else "iid"
        self._survivals: dict[tuple[str, str, int], RunSurvival] = {}
        self.switches = profile_switch_costs(profile)
        self.curves: dict[str, LatencyCurve] = {
            model.name: curve_from_profile(model, context_length) for model in profile.models
        }
        self.rule_drafters = ngram_simple_sizes(profile)
        self.streams = target_streams(profile)
        entry = profile.acceptance_runs.get(sampling)
        self.confidences = {} if entry is None or acceptance_model == "iid" else entry.confidences_by_pair()
        self._rounds: dict[tuple, DraftRounds] = {}

    def unplannable(self, chain: Sequence[str]) -> str | None:
        """Why the exact model cannot predict `chain` (None when it can): a rule drafter is
        predicted by replaying the target's greedy streams, so only directly under the target."""
        rules = [name for name in chain if name in self.rule_drafters]
        if not rules:
            return None
        name = rules[0]
        if len(chain) != 2 or chain[1] != name:
            return f"{name} drafts by rule; polyplan predicts it only directly under the target ({chain[0]} > {name})"
        if self.sampling != "greedy":
            return f"{name} drafts by rule; polyplan predicts it at greedy only (its rounds are replayed on the target's greedy streams)"
        if not self.streams:
            return f"{name} drafts by rule and the profile holds no target streams to replay (re-run polyplan profile)"
        return None

    def replayed(self, pair: tuple[str, str], block: int, policy: DraftPolicy) -> DraftRounds:
        """The pair's last-level rounds under `policy` (`planner.exact.policy_replay.replayed_rounds`), cached."""
        key = (pair, block, policy)
        if key not in self._rounds:
            self._rounds[key] = replayed_rounds(pair, block, policy, self.rule_drafters, self.streams, self.runs,
                                                self.confidences)[0]
        return self._rounds[key]

    def policies(self, chain: Sequence[str], k_max: int) -> list[DraftPolicy]:
        """The draft policies the search tries for `chain`'s last level: none unless it is the
        target and one drafter, at greedy, with the sequences to replay."""
        if len(chain) != 2 or self.sampling != "greedy":
            return []
        target, drafter = chain
        if drafter not in self.rule_drafters and (target, drafter) not in self.runs:
            return []
        caps = dict.fromkeys((low, high) for low, high in ((1, min(4, k_max)), (1, k_max), (2, k_max)) if low < high)
        policies = [DraftPolicy(low, high) for low, high in caps]
        if drafter not in self.rule_drafters and (target, drafter) in self.confidences:
            policies += [DraftPolicy(p_min=p_min) for p_min in _DRAFT_P_MINS]
        return policies

    def stats(self, verifier: str, drafter: str) -> SamplingStats:
        return self.profile.stats(verifier, drafter, self.sampling)

    def step_time(self, name: str) -> float:
        return self.curves[name](1)

    def order_time(self, name: str) -> float:
        """T(1) averaged over the profiled contexts: what orders a chain (costliest first) and
        decides who may draft for whom, as the profiler decides which pairs to measure."""
        return curve_from_profile(self.profile.model(name))(1)

    def switch_costs(self, chain: Sequence[str]) -> list[SwitchCost]:
        """Per model of `chain`, its measured switch cost (0 where none is recorded)."""
        return [self.switches.get(name, NO_SWITCH) for name in chain]

    def acceptance(self, verifier: str, drafter: str, block: int, policy: DraftPolicy = FIXED_DRAFTS) -> float | RunSurvival | DraftRounds:
        """What the exact model reads for the pair at a level of block size `block`: a rule
        drafter's replayed rounds, a model drafter's under a draft `policy` (the last level's),
        the measured acceptance runs when the profile has them, else the i.i.d. rate α."""
        if drafter in self.rule_drafters or policy != FIXED_DRAFTS:
            return self.replayed((verifier, drafter), block, policy)
        sequences = self.runs.get((verifier, drafter))
        if sequences is None:
            return self.stats(verifier, drafter).alpha
        key = (verifier, drafter, block)
        if key not in self._survivals:
            self._survivals[key] = run_survival(sequences, block)
        return self._survivals[key]


def _evaluate(context: _Context, chain: Sequence[str], blocks: Sequence[int], search: str,
              policy: DraftPolicy | None = None) -> ChainPlan:
    pair_stats = [context.stats(upper, lower) for upper, lower in zip(chain, chain[1:])]
    acceptances = tuple(stats.alpha for stats in pair_stats)
    read = _reads(context, list(zip(chain, chain[1:])), blocks, policy)
    exact = predict_chain(read, [context.curves[name] for name in chain], blocks, context.overhead, context.switch_costs(chain))
    paper = paper_prediction(pair_stats, [context.step_time(name) for name in chain], blocks)
    widths = tuple(verify_widths(context.curves[name]) for name in chain[:-1])
    return ChainPlan(tuple(chain), tuple(blocks), acceptances, exact, paper, search, verify_widths=widths,
                     draft_policy=None if policy == FIXED_DRAFTS else policy)


def _reads(context: _Context, pairs: Sequence[tuple[str, str]], blocks: Sequence[int], policy: DraftPolicy | None) -> list:
    """The exact model's acceptance input per level, `policy` at the last one."""
    last = len(pairs) - 1
    return [context.acceptance(upper, lower, k, (policy or FIXED_DRAFTS) if level == last else FIXED_DRAFTS)
            for level, ((upper, lower), k) in enumerate(zip(pairs, blocks))]


def evaluate_chain(
    profile: Profile,
    chain: Sequence[str],
    block_sizes: Sequence[int],
    settings: ChainSettings = ChainSettings(),
    *,
    draft_policy: DraftPolicy | None = None,
) -> ChainPlan:
    """Both models' predictions for one given chain (target first) and block sizes (`draft_policy`:
    the last level's, planned for the target and one drafter only)."""
    if not chain or chain[0] != profile.target:
        raise PolyplanError(f"chain: must start with the target {profile.target!r}, got {list(chain)}")
    for name in chain:
        profile.model(name)
    if len(block_sizes) != len(chain) - 1:
        raise PolyplanError(f"block_sizes: need {len(chain) - 1} for a chain of {len(chain)}, got {len(block_sizes)}")
    context = _Context(profile, settings)
    reason = context.unplannable(chain)
    if reason is not None:
        raise PolyplanError(f"chain {' > '.join(chain)}: {reason}")
    if draft_policy is not None and draft_policy != FIXED_DRAFTS:
        if len(chain) != 2:
            raise PolyplanError(f"chain {' > '.join(chain)}: a draft policy is planned directly under the target only (target > drafter)")
        if draft_policy.p_min is not None and chain[1] in context.rule_drafters:
            raise PolyplanError(f"chain {' > '.join(chain)}: p_min stops a model drafter on its confidence; {chain[1]} drafts by rule")
        if draft_policy.p_min is not None and (chain[0], chain[1]) not in context.confidences:
            raise PolyplanError(f"chain {' > '.join(chain)}: p_min needs the drafter's confidences, which the profile does not keep "
                                "(re-run polyplan profile)")
        draft_policy.check_block(block_sizes[-1])
    return _evaluate(context, chain, block_sizes, "given", draft_policy)


def _best_blocks_grid(cost: Callable[[tuple[int, ...]], float], levels: int, k_max: int) -> tuple[int, ...]:
    grid = itertools.product(range(1, k_max + 1), repeat=levels)
    return min(grid, key=lambda blocks: (cost(blocks), blocks))


def _best_blocks_optuna(cost: Callable[[tuple[int, ...]], float], levels: int, k_max: int, trials: int, seed: int) -> tuple[int, ...]:
    import optuna  # slow to import: only when the space is too large for a grid

    verbosity = optuna.logging.get_verbosity()
    if not other_output_shown():  # `polyplan --verbose` keeps optuna's line per trial
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
        study.optimize(
            lambda trial: cost(tuple(trial.suggest_int(f"k{level + 1}", 1, k_max) for level in range(levels))),
            n_trials=trials,
        )
    finally:
        optuna.logging.set_verbosity(verbosity)
    return tuple(int(study.best_params[f"k{level + 1}"]) for level in range(levels))


_SMALLEST_DEFAULT_K_MAX = 8


def default_k_max(profile: Profile) -> int:
    """The largest block size searched when the user names none: the profile's widest common
    timed width less one (a block of K is verified at width K + 1), never below
    `_SMALLEST_DEFAULT_K_MAX`."""
    widest = min(max(point.k for point in model.latency) for model in profile.models)
    return max(_SMALLEST_DEFAULT_K_MAX, widest - 1)


@dataclass(frozen=True)
class SearchSettings(ChainSettings):
    """What `rank_chains` searches, beside how it reads the profile (`ChainSettings`); the
    defaults are `polyplan recommend`'s. `max_levels` counts the target; block sizes run over
    1 … `k_max` (None: `default_k_max`), searched by "grid", "optuna" (TPE, `optuna_trials`,
    `seed`) or "auto" (grid when k_max^levels <= `grid_limit`); `candidates` None: every model
    but the target; `draft_policies` False: a fixed K only."""

    max_levels: int = 4
    k_max: int | None = None
    block_sizes: str = "auto"
    candidates: Sequence[str] | None = None
    grid_limit: int = 1024
    optuna_trials: int = 200
    seed: int = 0
    draft_policies: bool = True


def rank_chains(profile: Profile, settings: SearchSettings = SearchSettings()) -> Recommendation:
    """Rank every chain (target on top) of a validated `profile` with its best block sizes (module
    docstring); `PolyplanError` on settings the profile cannot answer."""
    max_levels, k_max, block_sizes = settings.max_levels, settings.k_max, settings.block_sizes
    sampling, context_length, overhead = settings.sampling, settings.context_length, settings.overhead
    integer_at_least(max_levels, 1, "max_levels")
    if k_max is None:
        k_max = default_k_max(profile)
    integer_at_least(k_max, 1, "k_max, a block size")
    if block_sizes not in _SEARCH_MODES:
        raise PolyplanError(f"block_sizes: must be one of {', '.join(_SEARCH_MODES)}, got {block_sizes!r}")
    context = _Context(profile, settings)
    target = profile.target
    names = [name for name in profile.model_names() if name != target] if settings.candidates is None \
        else list(settings.candidates)
    for name in names:
        if name == target:
            raise PolyplanError(f"candidates: {target!r} is the target, not a drafter")
        profile.model(name)
    target_step = context.order_time(target)
    usable = sorted((name for name in names if context.order_time(name) < target_step), key=lambda n: -context.order_time(n))

    plans: dict[tuple[str, ...], ChainPlan] = {}
    for size in range(0, min(max_levels - 1, len(usable)) + 1):
        for subset in itertools.combinations(usable, size):
            chain = (target,) + subset
            if context.unplannable(chain) is not None:
                continue
            levels = len(chain) - 1
            if levels == 0:
                plans[chain] = _evaluate(context, chain, (), "grid")
                continue
            pairs = list(zip(chain, chain[1:]))
            curves = [context.curves[name] for name in chain]
            switches = context.switch_costs(chain)

            def cost(blocks: tuple[int, ...], pairs=pairs, curves=curves, switches=switches, policy=None) -> float:
                return predict_chain(_reads(context, pairs, blocks, policy), curves, blocks, overhead, switches).cost_per_token

            use_grid = block_sizes == "grid" or (block_sizes == "auto" and k_max**levels <= settings.grid_limit)
            if use_grid:
                best_blocks, how = _best_blocks_grid(cost, levels, k_max), "grid"
            else:
                best_blocks, how = _best_blocks_optuna(cost, levels, k_max, settings.optuna_trials, settings.seed), "optuna"
            policy = None
            if settings.draft_policies:
                best_blocks, policy = _best_policy(cost, context.policies(chain, k_max), best_blocks, k_max)
            plans[chain] = _evaluate(context, chain, best_blocks, how, policy)

    for chain, plan in plans.items():
        verdicts = tuple(
            (name, _local_theorem(context, plan, plans[tuple(m for m in chain if m != name)], name)[0])
            for name in chain[1:-1]
        )
        plans[chain] = dataclasses.replace(plan, insertion_verdicts=verdicts)
    ranked = tuple(sorted(plans.values(), key=lambda plan: (-plan.exact_speedup, len(plan.chain), plan.chain)))
    best = ranked[0]
    notes = tuple(
        _insertion_note(context, plans, best, name, usable, max_levels) for name in names
    )
    target_curve = context.curves[target]
    limit = physical_limit(
        target_curve, overhead=overhead, switch=context.switches.get(target, NO_SWITCH),
        k_max=max(1, measured_block_size(target_curve), *(_widest_handed_up(plan) for plan in ranked)),
    )
    considered = {target, *names}
    return Recommendation(
        best=best,
        ranked=ranked,
        insertions=notes,
        target=target,
        device=profile.device,
        processor=profile.processor,
        sampling=sampling,
        max_levels=max_levels,
        k_max=k_max,
        fingerprints=tuple((model.name, model.fingerprint) for model in profile.models if model.name in considered),
        overhead=overhead,
        context_length=context_length,
        acceptance_model=context.acceptance_model,
        switch_costs=tuple(sorted(context.switches.items())),
        limit=limit,
        insertion_triples=_insertion_triples(context, plans, ranked, usable),
    )


def _best_policy(cost: Callable[..., float], policies: Sequence[DraftPolicy], fixed: tuple[int, ...],
                 k_max: int) -> tuple[tuple[int, ...], DraftPolicy | None]:
    """The last level's draft policy the exact model ranks best, with its block size, against the
    fixed `fixed` (kept unless a policy is strictly cheaper). An adaptive cap starts at k_min or
    at the fixed K (clamped into its range: the cap soon forgets where it started); a confidence
    stop caps at any K from the fixed one up to `k_max` (it stops earlier on its own)."""
    best_cost, best = cost(fixed), (fixed, None)
    for policy in policies:
        if policy.adaptive:
            starts = sorted({policy.k_min, min(policy.k_max, max(policy.k_min, fixed[-1]))})
        else:
            starts = range(fixed[-1], k_max + 1)
        for start in starts:
            blocks = fixed[:-1] + (start,)
            value = cost(blocks, policy=policy)
            if value < best_cost * (1.0 - 1e-12):
                best_cost, best = value, (blocks, policy)
    return best


def _widest_handed_up(plan: ChainPlan) -> int:
    """The most tokens the chain's drafters hand its target in one round (0: target alone)."""
    if not plan.exact.drafted_pmf:
        return 0
    return max(m for m, p in enumerate(plan.exact.drafted_pmf[0]) if p > 0)


def _insertion_triples(
    context: _Context, plans: dict[tuple[str, ...], ChainPlan], ranked: tuple[ChainPlan, ...], usable: list[str]
) -> tuple[TripleInsertion, ...]:
    """Theorem 3.2 on each intermediate level of the top `TOP_CHAINS` chains, then on every
    three-model chain (a model inserted between the target and a cheaper member; by the lower
    member, costliest first), each against its chain without the inserted model."""
    order = {name: index for index, name in enumerate(usable)}
    threes = sorted((chain for chain in plans if len(chain) == 3), key=lambda chain: (order[chain[2]], order[chain[1]]))
    wanted = [(plan.chain, middle) for plan in ranked[:TOP_CHAINS] for middle in plan.chain[1:-1]]
    wanted += [(chain, chain[1]) for chain in threes]
    triples = []
    for chain, middle in dict.fromkeys(wanted):
        with_plan, without_plan = plans[chain], plans[tuple(name for name in chain if name != middle)]
        triples.append(triple_insertion(
            context.profile, middle,
            (with_plan.chain, with_plan.block_sizes, with_plan.exact_speedup),
            (without_plan.chain, without_plan.block_sizes, without_plan.exact_speedup, without_plan.draft_policy),
            sampling=context.sampling, context_length=context.context_length,
        ))
    return tuple(triples)


def _insertion_note(
    context: _Context,
    plans: dict[tuple[str, ...], ChainPlan],
    best: ChainPlan,
    name: str,
    usable: list[str],
    max_levels: int,
) -> InsertionNote:
    rule = context.unplannable((best.chain[0], name)) if name in context.rule_drafters else None
    if rule is not None:
        return InsertionNote(name, False, f"out: {rule}", None, best.exact_speedup, None)
    if name in context.rule_drafters and name not in best.chain and name in usable:
        alone = plans[(best.chain[0], name)]
        line = (
            f"out: {name} drafts by rule and is planned directly under the target only: exact model "
            f"{alone.exact_speedup:.3f}x ({alone.label()}, K = {alone.blocks_label()}) vs {best.exact_speedup:.3f}x ({best.label()})"
        )
        return InsertionNote(name, False, line, alone.exact_speedup, best.exact_speedup, None)
    if name not in usable:
        line = (
            f"out: {name} is not faster than the target "
            f"(T(1) = {context.order_time(name) * 1e3:.3g} ms vs {context.order_time(best.chain[0]) * 1e3:.3g} ms)"
        )
        return InsertionNote(name, False, line, None, best.exact_speedup, None)
    included = name in best.chain
    if included:
        with_plan = best
        without_chain = tuple(member for member in best.chain if member != name)
        without_plan = plans[without_chain]
    else:
        with_chain = tuple(member for member in usable if member in best.chain or member == name)
        with_chain = (best.chain[0],) + with_chain
        without_plan = best
        if with_chain not in plans:
            reason = context.unplannable(with_chain)
            if reason is None:
                line = f"out: adding {name} to {best.label()} would exceed max_levels = {max_levels}"
            else:
                line = f"out: {name} cannot join {best.label()}: {reason}"
            return InsertionNote(name, False, line, None, best.exact_speedup, None)
        with_plan = plans[with_chain]
    delta = with_plan.exact_speedup - without_plan.exact_speedup
    theorem, theorem_text = _local_theorem(context, with_plan, without_plan, name)
    verb = "in" if included else "out"
    line = (
        f"{verb}: {name}: exact model {with_plan.exact_speedup:.3f}x with it "
        f"({with_plan.label()}) vs {without_plan.exact_speedup:.3f}x without ({without_plan.label()}), "
        f"delta {delta:+.3f}x; {theorem_text}"
    )
    return InsertionNote(name, included, line, with_plan.exact_speedup, without_plan.exact_speedup, theorem)


def _local_theorem(context: _Context, with_plan: ChainPlan, without_plan: ChainPlan, name: str) -> tuple[str | None, str]:
    """Theorem 3.2 on the insertion of `name` between its neighbours in `with_plan`."""
    chain = with_plan.chain
    position = chain.index(name)
    if position == len(chain) - 1:
        return None, "Theorem 3.2 does not apply (it would be the smallest drafter, not an intermediate)"
    upper, lower = chain[position - 1], chain[position + 1]
    analysis = insertion_inputs(
        context.profile, chain, with_plan.block_sizes, without_plan.block_sizes, name,
        sampling=context.sampling, context_length=context.context_length,
    ).analyze()
    c1 = analysis.condition1
    text = (
        f"Theorem 3.2 between {upper} and {lower}: {analysis.verdict} "
        f"(condition 1 {c1.lhs:.3g} {'<' if c1.holds else '>='} {c1.rhs:.3g}, "
        f"assumptions {'hold' if analysis.assumptions_hold else 'fail'}, "
        f"eq.2 - eq.1 = {analysis.exact_difference * 1e3:+.3g} ms/token)"
    )
    return analysis.verdict, text
