"""llama-server's part of an export: every configuration it can predict, ranked with "off".

`rank_server_configs` predicts each configuration with its two intervals
(`planner.llama_cpp.ranking`), a draft model's round priced by the exact model with llama-server's
own loop where calibrated (`DraftPricing`). docs/engines.md, "polyplan export". Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import NO_SWITCH, LoopOverhead, SwitchCost
from polyplan.formats.plan import FIXED_DRAFTS, DraftPolicy
from polyplan.formats.profile import Profile, TargetStream
from polyplan.formats.sampling import SamplingMode
from polyplan.planner.exact.cost_model import ChainPrediction, ChainSettings, predict_chain
from polyplan.planner.exact.latency import LatencyCurve, constant_curve, curve_from_profile
from polyplan.planner.exact.ngram_replay import replay_prediction, target_streams
from polyplan.planner.intervals.prediction_interval import (DEFAULT_LEVEL, few_prompts_stretch, latency_replicates,
                                                            pair_replicates, percentile_interval, prompt_weights)
from polyplan.planner.llama_cpp.kv_cells import CellCost
from polyplan.planner.llama_cpp.near_ties import NearTies
from polyplan.planner.llama_cpp.ngram_rules import LLAMA_CPP_RULES, LLAMA_CPP_VERSION, NGramSimpleRule, rule_for_flags
from polyplan.planner.llama_cpp.policy import draft_simple_flags, policy_notes, policy_rounds, server_policy, server_view
from polyplan.planner.llama_cpp.ranking import (RankedConfig, Replicates, ReplayWorkload, llama_cpp_spec_flags, ranked,
                                                replayed_config)
from polyplan.planner.llama_cpp.server_loop import NO_SERVER_LOOP, ServerLoop, draft_model_speedup

if TYPE_CHECKING:
    from polyplan.planner.engine_export import EngineOption

RESAMPLES = 200  # bootstrap replicates of a ranked configuration's interval


def best_block(prediction_at: Callable[[int], ChainPrediction], k_max: int) -> tuple[int, ChainPrediction]:
    """The K in 1..k_max whose prediction is fastest (the first of equals), and that prediction."""
    best = None
    for k in range(1, k_max + 1):
        prediction = prediction_at(k)
        if best is None or prediction.speedup > best[1].speedup:
            best = (k, prediction)
    return best


@dataclass(frozen=True)
class DraftPricing:
    """What a drafter's round costs in an export, for any engine: polyplan's loop overhead (None:
    none) or llama-server's own loop, drafter cost ratio and each GGUF drafter's last-row-only
    second decode of a verified batch (`reevals`; `_server_round`). It lives here because
    llama-server's loop is the one engine-specific price; HF and vLLM use it with `loop` None."""

    target_curve: LatencyCurve
    target_switch: SwitchCost
    overhead: LoopOverhead | None
    loop: ServerLoop | None
    ratio: float | None
    profile: Profile
    context_length: int | None
    switches: Mapping[str, SwitchCost]
    reevals: Mapping[str, LatencyCurve] = dataclasses.field(default_factory=dict)

    def predict(self, drafter: str, acceptance, k: int, method: str = "draft_model",
                curves: tuple[LatencyCurve, LatencyCurve] | None = None) -> ChainPrediction:
        """The exact model's prediction of the target and `drafter` at block size `k` with
        `acceptance` (α, a run survival or a replayed `DraftRounds`); `curves`: the target's and
        the drafter's in place of the profile's (a bootstrap replicate's)."""
        if curves is None:
            curves = (self.target_curve, curve_from_profile(self.profile.model(drafter), self.context_length))
        curves = list(curves)
        costs, overhead, verify = [self.target_switch, self.switches.get(drafter, NO_SWITCH)], self.overhead, None
        if self.loop is not None:
            curves, costs, overhead, verify = _server_round(curves, self.loop, method, self.ratio,
                                                            self.reevals.get(drafter, curves[1]))
        return predict_chain([acceptance], curves, [k], overhead, costs, pad_verification=False, verify_curves=verify)


def _server_round(curves: list[LatencyCurve], loop: ServerLoop, method: str, ratio: float | None,
                  reeval: LatencyCurve) -> tuple[list, list, LoopOverhead, list | None]:
    """The exact model's inputs (curves, switch costs, loop overhead, verification curves) for one
    llama-server round (`planner.llama_cpp.server_loop`). Switch costs are none: they are inside
    the calibration. The target's curve is shifted by the per-round cost, so the baseline pays it
    too; a draft model's pass costs T_d(1) times `ratio`; an n-gram drafter priced at α costs the
    per-row cost a token."""
    target = LatencyCurve(curves[0].ks, tuple(value + loop.per_round_s for value in curves[0].seconds))
    if method == "ngram":
        drafter = constant_curve(loop.per_row_s + 1e-9)
        return [target, drafter], [NO_SWITCH, NO_SWITCH], LoopOverhead(per_step_s=0.0, per_round_s=loop.per_ngram_round_s), None
    drafter = constant_curve(curves[1](1) * (1.0 if ratio is None else ratio))
    widths = tuple(sorted(set(target.ks) | set(reeval.ks)))
    verify = LatencyCurve(widths, tuple(target(k) + loop.per_row_s * (k - 1) + loop.reeval * reeval(k) for k in widths))
    return ([target, drafter], [NO_SWITCH, NO_SWITCH], LoopOverhead(per_step_s=0.0, per_round_s=loop.per_draft_round_s),
            [verify, drafter])


def replayed_ngram_simple(profile: Profile, sizes: tuple[int, int], target_curve: LatencyCurve, k_max: int, greedy: bool,
                          loop: ServerLoop = NO_SERVER_LOOP) -> tuple[int | None, ChainPrediction | None, str]:
    """(K, prediction, how) of llama.cpp's `ngram-simple` at lookup size `sizes[1]`, replayed on the
    profile's greedy target streams (K searched in 1..k_max); (None, None, why α is used) without."""
    streams = target_streams(profile)
    if not greedy:
        return None, None, "alpha model: llama.cpp's n-gram drafts are replayed at greedy only"
    if not streams:
        return None, None, ("alpha model: the profile holds no target streams (made by an older polyplan); "
                            "re-run polyplan profile to replay llama.cpp's ngram-simple on them")
    k, prediction = best_block(lambda k: replay_prediction(streams, sizes[1], k, target_curve, loop=loop), k_max)
    return k, prediction, f"replayed llama.cpp's ngram-simple on the profile's {len(streams)} target streams"


def ranking_replicates(profile: Profile, target: str, streams: int, width: int, context_length: int | None,
                       set_size: int | None = None) -> Replicates:
    """The target's T(1..width) and a new prompt set (of `set_size` prompts; None: `streams`)
    per replicate, and the workload's one-draw weights, drawn first so that they do not depend
    on the new set's size. T(k) without the timing-health corrections that only slow it down:
    every ratio here holds the server's calibrated loop fixed, so scaling the target's curve
    alone (a floor read slower in the prices' sitting than in the profile's) only moves each row
    toward its loop costs (docs/cost-model.md, "Under load")."""
    rng = np.random.default_rng(0)
    curves, _, _ = latency_replicates(profile, [target], RESAMPLES, rng, context_length, slower_only=False)
    ks = np.arange(1, width + 1, dtype=float)
    steps = np.stack([curve.many(ks) for curve in curves[target]])
    workload = prompt_weights(streams, RESAMPLES, rng, new_set=False)
    return Replicates(steps, prompt_weights(streams, RESAMPLES, rng, set_size=set_size), few_prompts_stretch(streams, DEFAULT_LEVEL),
                      workload)


@dataclass(frozen=True)
class ServerRanking:
    """What `rank_server_configs` reads besides the export's options; n-gram types and confidence
    stops replay at greedy `sampling` only."""

    pricing: DraftPricing  # the profile as priced (llama.cpp's own numbers applied where measured)
    target: str
    sampling: str
    workload: ReplayWorkload = ReplayWorkload()  # the requests replayed, and the prompt set an interval is for
    price_notes: tuple[str, ...] = ()  # where the numbers came from (`LlamaCppPrices.notes`)
    policy: tuple[str, DraftPolicy] | None = None  # the plan's last drafter and its policy, whose stop gets a row
    k_max: int = 8  # the largest K searched for that row
    replay_also: Sequence[Sequence[str]] = ()  # flags to rank besides the export's own (a race's)
    kv_cells: CellCost | None = None  # the target's seconds per KV cell read (`--kv-unified` under load); None: not priced
    near_ties: NearTies | None = None  # where a wide pass flips the streams' answers (`planner.llama_cpp.near_ties`)
    answers: tuple[tuple[int, tuple[TargetStream, ...]], ...] = ()  # the server's own answers per count of slots (`LlamaCppPrices`)

    @property
    def loop(self) -> ServerLoop:
        return self.pricing.loop or NO_SERVER_LOOP


def rank_server_configs(options: Sequence[EngineOption],
                        request: ServerRanking) -> tuple[tuple[RankedConfig, ...], tuple[str, ...]]:
    """Every llama-server configuration the export can predict, and off, fastest first
    (`planner.llama_cpp.ranking.ranked`); and the notes on how they were predicted."""
    pricing, workload, loop = request.pricing, request.workload, request.loop
    greedy = SamplingMode.parse(request.sampling).greedy
    streams = target_streams(pricing.profile) if greedy else ()
    configs, notes = [], list(request.price_notes)
    replicates = None
    if streams:
        width = max([48, 64, *(o.block_size for o in options if o.block_size)]) + 1
        replicates = ranking_replicates(pricing.profile, request.target, len(streams), width, pricing.context_length,
                                        workload.prompts)
        notes.append(f"n-gram types replayed by llama.cpp's own rules ({LLAMA_CPP_VERSION}) on "
                     f"{workload.words(len(streams))}, its state kept from request to request; "
                     f"the first interval for {workload.set_words(len(streams))}")
        for kind, (make_rule, flags) in LLAMA_CPP_RULES.items():
            configs.append(replayed_config(f"{kind} (defaults)", flags, streams, make_rule, pricing.target_curve, workload,
                                           replicates, loop=loop, near=request.near_ties))
    else:
        why = "at greedy only" if not greedy else "the profile holds no target streams (re-run polyplan profile)"
        notes.append(f"ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache: not modelled ({why})")
    seen = set()
    for option in (o for o in options if o.reason is None and o.method == "ngram"):  # at each n-gram drafter's size and K
        size_n, k = option.ngram_sizes[1], option.block_size
        flags = tuple(llama_cpp_spec_flags("ngram", k, "", option.ngram_sizes))
        if flags in seen:
            continue
        seen.add(flags)
        if streams:
            configs.append(replayed_config(f"ngram-simple size-n={size_n} K={k}", flags, streams,
                                           lambda size_n=size_n, k=k: NGramSimpleRule(size_n, k), pricing.target_curve,
                                           workload, replicates, loop=loop, near=request.near_ties))
        elif option.prediction is not None:
            configs.append(RankedConfig(f"ngram-simple size-n={size_n} K={k}", flags, option.speedup, None, "alpha model (no interval)"))
    for flags in request.replay_also if streams else ():
        rule = rule_for_flags(flags)
        if rule is not None and tuple(flags) not in seen and all(tuple(flags) != config.flags for config in configs):
            seen.add(tuple(flags))
            configs.append(replayed_config(rule[0], flags, streams, rule[1], pricing.target_curve, workload, replicates, loop=loop,
                                           near=request.near_ties))
    requests = _workload_requests(streams, workload) if loop.per_draft_prompt_token_s or loop.per_request_s else []
    server_words = (", the server's per-request cost and the draft model's prefill of each prompt over the replays' requests"
                    if requests else "")
    how = "exact model with alpha and llama-server's draft loop" if pricing.ratio is not None else "exact model with alpha"
    for option in options:
        if option.reason is None and option.method == "draft_model":
            point = _server_speedup(option.prediction, loop, requests)
            configs.append(_draft_row(request, f"draft-simple {option.drafter} K={option.block_size}",
                                      llama_cpp_spec_flags("draft_model", option.block_size, option.source), point,
                                      f"{how}{server_words}", pricing, option.drafter, option.block_size, requests))
    for rows, lines in (_raced_draft_rows(request, configs, options, requests), _policy_row(request, options, requests)):
        configs += rows
        notes += [line for line in lines if line not in notes]
    return ranked(configs), tuple(notes)


def _raced_draft_rows(request: ServerRanking, held_configs: Sequence[RankedConfig], options: Sequence[EngineOption],
                      requests: list[tuple[int, int]]) -> tuple[list[RankedConfig], list[str]]:
    """A row for each configuration of `raced_draft_configs` the ranking does not hold, priced as
    the fixed-K rows (`_server_speedup` over `requests`) with both its intervals; and its notes."""
    drafts, notes = raced_draft_configs(options, request, {config.flags for config in held_configs})
    rows = [_draft_row(request, draft.label, draft.flags,
                       _server_speedup(draft.pricing.predict(draft.drafter, draft.acceptance, draft.k), request.loop, requests),
                       draft.how, draft.pricing, draft.drafter, draft.k, requests, draft.policy)
            for draft in drafts]
    return rows, notes


@dataclass(frozen=True)
class RacedDraft:
    """A race's draft-simple configuration as the replay models it: label, flags, how it is
    priced (`pricing`, on the server's view of the profile behind a confidence stop), the drafter,
    its K (n-max), its acceptance (α, or the stop's replayed rounds) and the stop."""

    label: str
    flags: tuple[str, ...]
    how: str
    pricing: DraftPricing
    drafter: str
    k: int
    acceptance: object
    policy: DraftPolicy = FIXED_DRAFTS


def raced_draft_configs(options: Sequence[EngineOption], request: ServerRanking,
                        held: set[tuple[str, ...]]) -> tuple[list[RacedDraft], list[str]]:
    """Each `draft-simple` configuration of `request.replay_also` (a race's defaults and n-max/p-min
    sweep) whose flags are not in `held` and that the replay models
    (`planner.llama_cpp.policy.draft_simple_flags`): at a fixed K priced by α, behind a stop by
    the stop replayed on the drafter's agreement sequences; and the notes of stops replayed on
    fallback confidences or not replayed (those rows stay "not modelled"). The ranking at one
    request and the ranking under load both price these."""
    by_source = {o.source: o for o in options if o.reason is None and o.method == "draft_model"}
    held = set(held)
    drafts, notes = [], []
    for flags in (tuple(flags) for flags in request.replay_also):
        draft = draft_simple_flags(flags)
        option = None if draft is None else by_source.get(draft.source)
        if flags in held or option is None or not draft.modelled or (draft.policy is not None and request.sampling != "greedy"):
            continue
        held.add(flags)
        k, drafter = draft.n_max, option.drafter
        label = f"draft-simple {drafter} n-max={k}" + ("" if draft.policy is None else f" p-min={draft.p_min:g}")
        if draft.policy is None:
            drafts.append(RacedDraft(label, flags, "exact model with alpha", request.pricing, drafter, k, option.alpha))
            continue
        view, fallback = server_view(request.pricing.profile, request.target, drafter)
        try:
            acceptance = policy_rounds(view, request.target, drafter, draft.p_min)(k)
        except PolyplanError as error:
            notes.append(f"{drafter}'s confidence stop p_min {draft.p_min:g}: not modelled ({error})")
            continue
        notes += [line for line in fallback if line not in notes]
        drafts.append(RacedDraft(label, flags, "its confidence stop replayed on the agreement sequences",
                                 dataclasses.replace(request.pricing, profile=view), drafter, k, acceptance, draft.policy))
    return drafts, notes


@dataclass(frozen=True)
class PolicyStop:
    """The plan's confidence stop as llama-server runs it: its drafter and option, the stop, the
    profile view it is replayed on (`planner.llama_cpp.policy.server_view`), the best K at one
    request, that K's replayed rounds and prediction, and the notes to print with it."""

    drafter: str
    option: EngineOption
    stop: DraftPolicy
    view: Profile
    k: int
    rounds: object
    prediction: ChainPrediction
    notes: tuple[str, ...]

    def flags(self) -> list[str]:
        return llama_cpp_spec_flags("draft_model", self.k, self.option.source, p_min=self.stop.p_min)

    def label(self) -> str:
        return f"draft-simple {self.drafter} K={self.k} p-min={self.stop.p_min:g}"


def policy_stop(options: Sequence[EngineOption], request: ServerRanking) -> tuple[PolicyStop | None, list[str]]:
    """The plan's draft policy as llama-server runs it (`planner.llama_cpp.policy`), its stop at
    the best fixed K up to `request.k_max`; None and the notes (an adaptive cap, fallback
    confidences, or why there is no such row) where it has none."""
    if request.policy is None:
        return None, []
    drafter, plan_policy = request.policy
    option = next((o for o in options if o.drafter == drafter and o.reason is None and o.method == "draft_model"), None)
    if option is None:
        return None, list(policy_notes(drafter, plan_policy, None)) if any(o.drafter == drafter for o in options) else []
    stop = server_policy(plan_policy)
    if stop is None:
        return None, list(policy_notes(drafter, plan_policy, option.block_size))
    if request.sampling != "greedy":
        return None, [f"{drafter}'s confidence stop p_min {stop.p_min:g}: not modelled (replayed at greedy only)"]
    view, fallback = server_view(request.pricing.profile, request.target, drafter)
    try:
        rounds_at = policy_rounds(view, request.target, drafter, stop.p_min)
        k, prediction = best_block(lambda k: request.pricing.predict(drafter, rounds_at(k), k), request.k_max)
    except PolyplanError as error:
        return None, [f"{drafter}'s confidence stop p_min {stop.p_min:g}: not modelled ({error})"]
    notes = (*fallback, *policy_notes(drafter, plan_policy, k))
    return PolicyStop(drafter, option, stop, view, k, rounds_at(k), prediction, notes), list(notes)


def _policy_row(request: ServerRanking, options: Sequence[EngineOption],
                requests: list[tuple[int, int]]) -> tuple[list[RankedConfig], list[str]]:
    """The plan's draft policy as llama-server runs it (`policy_stop`): a draft-simple row with its
    confidence stop at the best fixed K, and the notes."""
    found, notes = policy_stop(options, request)
    if found is None:
        return [], notes
    point = _server_speedup(found.prediction, request.loop, requests)
    row = _draft_row(request, found.label(), found.flags(), point,
                     "the plan's confidence stop replayed on the drafter's agreement sequences",
                     dataclasses.replace(request.pricing, profile=found.view), found.drafter, found.k, requests, found.stop)
    return [row], notes


def _workload_requests(streams: Sequence[TargetStream], workload: ReplayWorkload) -> list[tuple[int, int]]:
    """(prompt tokens, decoded tokens after the prefill's first) of every request `workload`
    sends one server, from the streams' prompts and lengths."""
    requests = []
    for stream in streams:
        generated = len(stream.ids) - stream.prompt_tokens
        if workload.new_tokens is not None:
            generated = min(generated, workload.new_tokens)
        if generated > 1:
            requests.append((stream.prompt_tokens, generated - 1))
    return requests * workload.repeats


def _draft_row(request: ServerRanking, label: str, flags, point: float, how: str, pricing: DraftPricing, drafter: str, k: int,
               requests: list[tuple[int, int]], policy: DraftPolicy = FIXED_DRAFTS) -> RankedConfig:
    """A draft-simple row at `point` with both its intervals (`_draft_interval`)."""
    interval, workload_interval = (_draft_interval(request, pricing, drafter, k, point, requests, policy, new_set)
                                   for new_set in (True, False))
    return RankedConfig(label, tuple(flags), point, interval, how + (" (no interval)" if interval is None else ""),
                        workload_interval=workload_interval)


def _server_speedup(prediction: ChainPrediction, loop: ServerLoop, requests: list[tuple[int, int]]) -> float:
    """A draft model's decode speedup in llama-server, over `requests` where there are any
    (`planner.llama_cpp.server_loop.draft_model_speedup`)."""
    if not requests:
        return prediction.speedup
    return draft_model_speedup(loop, prediction.cost_per_token, prediction.speedup * prediction.cost_per_token, requests)


def _draft_interval(request: ServerRanking, pricing: DraftPricing, drafter: str, k: int, point: float,
                    requests: list[tuple[int, int]], policy: DraftPolicy, new_set: bool) -> tuple[float, float] | None:
    """A draft-simple row's interval, of the plan's kind
    (`planner.intervals.prediction_interval.pair_replicates`), each replicate priced as the point
    with llama-server's loop held fixed; `new_set` False: for the workload's mean. None where the
    profile's sequences hold no complete round at block size `k`."""
    try:
        replicates = pair_replicates(pricing.profile, request.target, drafter, k,
                                     ChainSettings(request.sampling, pricing.context_length), policy=policy,
                                     resamples=RESAMPLES, new_set=new_set, set_size=request.workload.prompts)
    except PolyplanError:
        return None
    measured = _server_speedup(pricing.predict(drafter, replicates.measured, k), request.loop, requests)
    speedups = np.asarray([_server_speedup(pricing.predict(drafter, acceptance, k, curves=(target_curve, drafter_curve)),
                                           request.loop, requests)
                           for acceptance, target_curve, drafter_curve in zip(replicates.acceptance, replicates.target, replicates.drafter)])
    return percentile_interval(point, speedups, measured, replicates.stretch)
