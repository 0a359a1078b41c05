"""A plan exported to the engines users deploy on (HF transformers, vLLM and llama.cpp), predicted
under each one's acceptance rule.

Each engine runs ONE drafter with a block size K, so the best chain an engine can express is the
target and one drafter it can load. ``full`` (polyplan's and HF assisted generation's rule) reads
the profile's α; ``argmax`` (vLLM, llama.cpp, HF prompt lookup) its ``engine_alpha``
(docs/engines.md, "The engines' acceptance rules"). The best K per drafter comes from the exact
cost model with the plan's curves, loop overhead and switch costs (HF's own `generate` overhead
where profiled), per decoded token; llama.cpp's ranking is `planner.llama_cpp.export`, and what
to type is rendered by `engines.export`. Pure: no torch, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from polyplan.formats.candidates import RULE_DRAFTERS, Candidate, CandidateSet, EarlyExit, NGram, NGramSimple, Quantize, ReducedVocab
from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import NO_SWITCH
from polyplan.formats.plan import PlanFile
from polyplan.formats.profile import Profile
from polyplan.formats.sampling import SamplingMode
from polyplan.planner.exact.cost_model import ChainPrediction
from polyplan.planner.exact.engine_overhead import prediction_overhead, profile_call_seconds
from polyplan.planner.exact.latency import curve_from_profile
from polyplan.planner.exact.overhead import profile_switch_costs
from polyplan.planner.exact.whole_call import CallCount, CallModel, prefill_curve, whole_call_speedup
from polyplan.planner.llama_cpp.export import DraftPricing, ServerRanking, best_block, rank_server_configs, replayed_ngram_simple
from polyplan.planner.llama_cpp.kv_cells import cell_cost
from polyplan.planner.llama_cpp.policy import plan_policy
from polyplan.planner.llama_cpp.ranking import LlamaCppPrices, RankedConfig, ReplayWorkload, choose_config
from polyplan.planner.llama_cpp.server_loop import NO_SERVER_LOOP

_EXPORT_ENGINES = ("hf", "vllm", "llama.cpp")  # what `polyplan export --engine` exports a plan to
FULL, ARGMAX = "full", "argmax"
_EXAMPLE_NEW_TOKENS = 128  # the whole-call example `polyplan export` prints (Spec-Bench's and bench peers' usual length)
_EXAMPLE_PROMPT_TOKENS = 128  # its prompt length when the plan records no context length


@dataclass(frozen=True)
class EngineOption:
    """One drafter under one engine: its rule, rate, best K and prediction, or why not (`reason`;
    then no K or prediction)."""

    drafter: str
    method: str  # "draft_model" or "ngram"; "" when the engine cannot run it at all
    rule: str  # FULL or ARGMAX
    alpha: float | None  # the per-token acceptance under `rule`
    block_size: int | None
    prediction: ChainPrediction | None
    source: str  # what to hand the engine (a folder, hub id or GGUF file; "" for n-gram)
    reason: str | None
    ngram_sizes: tuple[int, int] | None = None  # (min_n, max_n) of an n-gram drafter
    call: CallModel | None = None  # its whole-`generate`-call cost (`planner.exact.whole_call`), HF only
    model: str = ""  # how the prediction was made, when not by α (llama.cpp's n-gram replay), or why α

    @property
    def speedup(self) -> float | None:
        return None if self.prediction is None else self.prediction.speedup


@dataclass(frozen=True)
class EngineExport:
    """The best chain `engine` can express for a plan, and every drafter considered."""

    engine: str
    target: str
    target_source: str
    sampling: str
    temperature: float  # 0: greedy
    chosen: EngineOption | None  # the exportable option with the highest predicted speedup
    options: tuple[EngineOption, ...]  # best first, then those the engine cannot run
    polyplan_chain: tuple[str, ...]
    polyplan_speedup: float  # the plan's own predicted speedup (its chain may have several drafters)
    overhead_note: str = ""  # which loop overhead the predictions used (`planner.exact.engine_overhead`)
    baseline_call: CallModel | None = None  # target-only `generate`'s whole-call cost (HF only)
    call_note: str = ""  # what the whole-call model lacks in the profile ("" when nothing)
    context_length: int | None = None  # the context the plan was made for (the whole-call example's prompt)
    server_flags: tuple[str, ...] = ()  # llama.cpp only: flags this machine needs (`--no-repack` where its AMX kernels crash)
    ranking: tuple[RankedConfig, ...] = ()  # llama.cpp only: every configuration predicted, and off, fastest first
    recommended: RankedConfig | None = None  # llama.cpp only: what to type (`planner.llama_cpp.ranking.choose_config`)
    ranking_notes: tuple[str, ...] = ()  # llama.cpp only: how the ranking was predicted, and what it leaves out
    unexported: str = ""  # why no drafter is exported (`chosen` None): the target alone is the answer
    prices: LlamaCppPrices | None = None  # llama.cpp only: the numbers it was priced with (None: the profile's)
    server_request: ServerRanking | None = None  # llama.cpp and vLLM: what a ranking under load reads (`planner.llama_cpp.under_load`)

    def whole_call_example(self) -> tuple[int, int, float] | None:
        """(prompt tokens, new tokens, predicted whole-call speedup) of one example `generate`
        call of the chosen option (HF only; None otherwise): the plan's context length as the
        prompt, `_EXAMPLE_NEW_TOKENS` new tokens."""
        option = self.chosen
        if option is None or option.call is None or self.baseline_call is None:
            return None
        calls = [CallCount(self.context_length or _EXAMPLE_PROMPT_TOKENS, _EXAMPLE_NEW_TOKENS)]
        return calls[0].prompt_tokens, calls[0].new_tokens, whole_call_speedup(self.baseline_call, option.call, calls, calls)

    @property
    def loss(self) -> float | None:
        """Fraction of polyplan's predicted speedup the export gives up: 1 − engine / polyplan."""
        if self.chosen is None or self.chosen.speedup is None:
            return None
        return 1.0 - self.chosen.speedup / self.polyplan_speedup


def check_engine(engine: str) -> str:
    """`engine` if polyplan knows it, else a `PolyplanError` naming the known ones."""
    if engine not in _EXPORT_ENGINES:
        raise PolyplanError(f"--engine: unknown engine {engine!r} (choose one of {', '.join(_EXPORT_ENGINES)})")
    return engine


def _is_gguf(candidate: Candidate) -> bool:
    return candidate.source is not None and (candidate.source_kind == "gguf" or candidate.source.lower().endswith(".gguf"))


_IN_PROCESS = "(in process: polyplan's copy)"  # the source of a derived drafter handed to HF as a live model


def loadable(engine: str, candidate: Candidate, file: str | None = None,
             in_process: bool = False) -> tuple[str, str, str | None]:
    """How `engine` runs `candidate`: (method, source to pass, None) or ("", "", reason).

    `file`: what the engine loads for a candidate whose weights polyplan keeps elsewhere: the
    folder of a `builtin:` source, or the GGUF file polyplan made for a llama.cpp copy (quantized
    or cut to its first blocks; None while it has not been made).

    `in_process`: the engine runs in this process and is handed polyplan's own models (HF
    `generate` in `bench peers`), so a derived copy is a drafter it can run too."""
    if isinstance(candidate.derive, RULE_DRAFTERS):
        return "ngram", "", None
    if in_process and engine == "hf" and isinstance(candidate.derive, (Quantize, EarlyExit)):
        return "draft_model", _IN_PROCESS, None
    if engine == "llama.cpp" and candidate.engine == "llama.cpp" and isinstance(candidate.derive, (Quantize, EarlyExit)):
        if file is None:
            what = candidate.derive.kind if isinstance(candidate.derive, Quantize) else f"{candidate.derive.layers}-block"
            return "", "", f"llama.cpp's {what} copy of {candidate.derive.base!r} is not made yet (`polyplan models check` makes it)"
        return "draft_model", file, None
    if isinstance(candidate.derive, Quantize):
        return "", "", (
            f"a copy of {candidate.derive.base!r} that polyplan quantizes to {candidate.derive.kind} in torch at load time; "
            f"{engine} cannot load it (quantize with the engine's own tools instead)"
        )
    if isinstance(candidate.derive, EarlyExit):
        return "", "", (
            f"an early-exit copy (the first {candidate.derive.layers} layers of {candidate.derive.base!r}) that exists only "
            f"inside polyplan; {engine} cannot load it"
        )
    if isinstance(candidate.derive, ReducedVocab):
        return "", "", (
            f"a copy of {candidate.derive.base!r} whose head covers a subset of the tokens; only polyplan's member maps it "
            f"back to the full vocabulary, so {engine} cannot draft with it"
        )
    source = file if file is not None else candidate.source or ""
    if engine == "llama.cpp" and not _is_gguf(candidate):
        return "", "", f"{candidate.source!r} is not a GGUF file; llama.cpp loads only GGUF (convert it with convert_hf_to_gguf.py)"
    if engine == "vllm" and _is_gguf(candidate):
        return "", "", f"{candidate.source!r} is a GGUF file; give vLLM the model's HF folder or hub id"
    return "draft_model", source, None


def ngram_sizes(candidate: Candidate) -> tuple[int, int] | None:
    """(shortest, longest) n-gram an n-gram drafter matches, as the engines' lookup sizes:
    (min_n, max_n) of `kind: ngram`, (size_n, size_n) of `kind: ngram-simple`; None otherwise."""
    derive = candidate.derive
    if isinstance(derive, NGram):
        return derive.min_n, derive.max_n
    if isinstance(derive, NGramSimple):
        return derive.size_n, derive.size_n
    return None


def export_plan(
    plan: PlanFile,
    profile: Profile,
    candidates: CandidateSet,
    engine: str,
    *,
    files: dict[str, str] | None = None,
    k_max: int | None = None,
    in_process: bool = False,
    workload: ReplayWorkload = ReplayWorkload(),
    prices: LlamaCppPrices | None = None,
    replay_also: Sequence[Sequence[str]] = (),
) -> EngineExport:
    """The best chain `engine` can express for `plan`, predicted under the engine's rule; with no
    drafter the engine can run, none is chosen and `unexported` says why.

    Args:
        files: what the engine loads for a candidate, by name, where that is not its `source`
            (a `builtin:` folder, a llama.cpp-made copy).
        k_max: largest K searched (default: the plan's own search limit, else 8).
        in_process: derived drafters count as loadable (`loadable`): for racing HF in this
            process, never for a configuration a user would type.
        workload, prices, replay_also: llama.cpp only (`planner.llama_cpp.export.ServerRanking`);
            `prices` None: the profile's numbers.

    Raises:
        PolyplanError: unknown engine; the engine cannot load the target; the profile lacks
            the plan's target.
    """
    check_engine(engine)
    files = files or {}
    target = candidates.by_name(plan.target)
    _, target_source, reason = loadable(engine, target, files.get(target.name))
    if reason is not None:
        raise PolyplanError(f"--engine {engine}: cannot load the plan's target {target.name!r}: {reason}")
    if k_max is None:
        k_max = plan.search.k_max or 8
    sampling, mode = plan.sampling, SamplingMode.parse(plan.sampling)
    context_length = plan.search.context_length
    used = prediction_overhead(profile, engine, sampling)
    overhead = used.overhead
    prices = prices if engine == "llama.cpp" else None
    loop = None if prices is None else prices.loop
    if prices is not None:
        profile = prices.applied(profile, plan.target)
    if loop is not None:
        overhead = None  # llama-server's own loop instead (`planner.llama_cpp.export.DraftPricing`)
        used = dataclasses.replace(used, note=f"loop overhead: llama-server's own, calibrated ({loop.text()})")
    switches = profile_switch_costs(profile)
    target_curve = curve_from_profile(profile.model(plan.target), context_length)
    greedy = mode.greedy
    stored_call = profile_call_seconds(profile, engine, sampling) if engine == "hf" else None
    per_call = 0.0 if stored_call is None else stored_call
    target_prefill = prefill_curve(profile.model(plan.target))
    missing = [] if stored_call is not None else ["HF's per-call cost"]
    if target_prefill is None:
        missing.append(f"{plan.target}'s prefill")
    baseline_per_token = target_curve(1) + (0.0 if overhead is None else overhead.per_step_s)
    baseline_call = CallModel(baseline_per_token, per_call, target_prefill, replaced_s=target_curve(1)) if engine == "hf" else None
    reevals = {} if prices is None else {name: curve_from_profile(entry) for name, entry in prices.reevaluations.items()}
    pricing = DraftPricing(target_curve, switches.get(plan.target, NO_SWITCH), overhead, loop,
                            None if prices is None else prices.draft_ratio, profile, context_length, switches, reevals)
    options = []
    for pair in profile.pairs:
        if pair.verifier != plan.target or sampling not in pair.sampling:
            continue
        stats = pair.sampling[sampling]
        try:
            candidate = candidates.by_name(pair.drafter)
        except PolyplanError:
            options.append(EngineOption(pair.drafter, "", FULL, None, None, None, "", f"not in {candidates.origin}", None))
            continue
        method, source, reason = loadable(engine, candidate, files.get(candidate.name), in_process)
        rule = FULL if engine == "hf" and method != "ngram" else ARGMAX  # (an unloadable model: as if it were loaded)
        sizes = ngram_sizes(candidate)
        alpha = stats.alpha if (rule == FULL or greedy or method == "ngram") else stats.engine_alpha
        if reason is None and alpha is None:
            reason = (
                f"the profile has no engine-rule acceptance (E[q(argmax p)]) for it at {sampling} "
                "(made by an older polyplan); re-run polyplan profile to add it"
            )
        if reason is not None:
            options.append(EngineOption(pair.drafter, method, rule, alpha, None, None, source, reason, sizes))
            continue
        curves = [target_curve, curve_from_profile(profile.model(pair.drafter), context_length)]
        model = ""
        if engine == "llama.cpp" and method == "ngram":
            k, prediction, model = replayed_ngram_simple(profile, sizes, target_curve, k_max, greedy, loop or NO_SERVER_LOOP)
        if not model.startswith("replayed"):
            k, prediction = best_block(lambda k: pricing.predict(pair.drafter, alpha, k, method), k_max)
        call = None
        if engine == "hf":
            drafter_model = None if method == "ngram" else profile.model(pair.drafter)
            call = CallModel(
                per_token_s=prediction.cost_per_token, per_call_s=per_call, target_prefill=target_prefill,
                drafter_prefill=None if drafter_model is None else prefill_curve(drafter_model), extra_tokens=k,
                replaced_s=target_curve(k + 1) + (0.0 if drafter_model is None else curves[1](1)),
            )
            if drafter_model is not None and call.drafter_prefill is None:
                missing.append(f"{pair.drafter}'s prefill")
        options.append(EngineOption(pair.drafter, method, rule, alpha, k, prediction, source, None, sizes, call, model))
    ranked = sorted((o for o in options if o.reason is None), key=lambda o: -o.speedup)
    others = [o for o in options if o.reason is not None]
    typeable = [o for o in ranked if o.source != _IN_PROCESS]  # what a user can hand the engine
    unexported = ""
    if not typeable:
        unexported = "; ".join(f"{o.drafter}: {o.reason}" for o in others) or f"the profile has no drafter for {plan.target!r}"
    ranking, notes, request = (), (), None
    if engine != "hf":
        attention = None if prices is None or prices.unified is None else cell_cost(prices.unified, prices.unified_long)
        request = ServerRanking(pricing, plan.target, sampling, workload, () if prices is None else prices.notes, plan_policy(plan),
                                k_max, replay_also, attention, None if prices is None else prices.near_ties,
                                () if prices is None else prices.answers)
    if engine == "llama.cpp":
        ranking, notes = rank_server_configs(ranked + others, request)
    return EngineExport(
        engine=engine,
        target=plan.target,
        target_source=target_source,
        sampling=sampling,
        temperature=mode.temperature,
        chosen=typeable[0] if typeable else None,
        options=tuple(ranked + others),
        polyplan_chain=plan.chain,
        polyplan_speedup=plan.best.exact.speedup,
        overhead_note=used.note,
        baseline_call=baseline_call,
        context_length=int(context_length) if isinstance(context_length, (int, float)) else None,
        ranking=ranking,
        recommended=choose_config(ranking) if ranking else None,
        ranking_notes=notes,
        call_note="" if not missing else (
            "whole-call prediction leaves out " + ", ".join(dict.fromkeys(missing)) + " (not in the profile, made by an older "
            "polyplan); re-run polyplan recommend --candidates to measure it"
        ),
        unexported=unexported,
        prices=prices,
        server_request=request,
    )
