"""The engines' rules: a plan exported to the engines users deploy on (HF transformers, vLLM and
llama.cpp), predicted under each one's acceptance rule.

Each engine runs ONE drafter (a draft model, or n-gram prompt lookup) with a block size K, so
the best chain an engine can express is the target and one drafter it can load. Engines also
accept drafts by different rules. Notation as everywhere in polyplan (docs/design.md): p is the
DRAFTER's distribution, q the VERIFIER's (the target's here).

- ``full`` (polyplan's own rule, and HF assisted generation with a draft model: when sampling
  it draws the draft from p and accepts x with min(1, q(x)/p(x))): the profile's α = E[Σ min(p, q)].
- ``argmax`` (vLLM: the draft is argmax p and q is compared with a one-hot draft
  distribution, so x̂ is accepted with probability q(x̂); llama.cpp: the draft is argmax p and
  is kept only when it equals the target's sample, also probability q(x̂); HF prompt lookup:
  the n-gram's one-hot proposal): the profile's ``engine_alpha`` = E[q(argmax p)].
At greedy both are the argmax agreement rate. For an n-gram drafter p is one-hot, so both
rules give the same rate.

For every drafter the engine can load, the best K under that engine's rule comes from the
exact cost model (`planner.exact.cost_model.predict_chain`) with the profile's latency curves,
loop overhead and switch costs, as the plan's own chains, except that for HF the loop overhead
is HF `generate`'s own when the profile has it (`planner.exact.engine_overhead`): the prediction is
then of HF assisted tokens/s over HF target-only tokens/s, what `bench peers` measures; the loss is measured against the
plan's predicted speedup. The predictions are per decoded token (the long-generation limit);
for HF each option also carries its whole-`generate`-call cost (`planner.exact.whole_call`: per-call
set-up and prefills), which `bench peers` sums over its prompts. llama.cpp's n-gram drafter
(`ngram-simple`) drafts only where the stream repeats itself, which α does not say: where the
profile holds the target's greedy streams it is predicted by replaying that drafter on them
(`planner.exact.ngram_replay`), else by α with a note saying so. A llama.cpp export can be priced
with llama.cpp's own numbers instead of the profile's (`planner.llama_cpp.ranking.LlamaCppPrices`:
the GGUF's T(k) and greedy streams, and llama-server's own loop, `planner.llama_cpp.server_loop`,
in place of polyplan's); a plan's confidence stop is ranked as llama-server runs it
(`planner.llama_cpp.policy`). A member an engine cannot load is
listed with the reason, never exported. What to type for the chosen drafter (commands, flags,
snippets) and the export's report are rendered by `engines.export`. Pure: no torch, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from polyplan.formats.candidates import RULE_DRAFTERS, Candidate, CandidateSet, EarlyExit, NGram, NGramSimple, Quantize, ReducedVocab
from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.cost_model import ChainPrediction, predict_chain
from polyplan.planner.exact.engine_overhead import profile_call_seconds, prediction_overhead
from polyplan.planner.exact.latency import LatencyCurve, constant_curve, curve_from_profile
from polyplan.planner.llama_cpp.server_loop import NO_SERVER_LOOP, ServerLoop, draft_model_speedup
from polyplan.formats.overhead import LoopOverhead, SwitchCost
from polyplan.planner.llama_cpp.policy import (draft_simple_flags, plan_policy, policy_notes, policy_rounds,
                                               server_policy, server_view)
from polyplan.planner.llama_cpp.ranking import (LlamaCppPrices, RankedConfig, Replicates, ReplayWorkload, llama_cpp_spec_flags,
                                                recommend, replayed_config)
from polyplan.planner.llama_cpp.ranking import ranked as rank_configs
from polyplan.planner.exact.ngram_replay import replay_prediction, target_streams
from polyplan.planner.llama_cpp.ngram_rules import LLAMA_CPP_RULES, LLAMA_CPP_VERSION, NGramSimpleRule, rule_for_flags
from polyplan.formats.overhead import NO_SWITCH
from polyplan.planner.exact.overhead import profile_switch_costs
from polyplan.formats.plan import FIXED_DRAFTS, DraftPolicy, PlanFile
from polyplan.planner.intervals.prediction_interval import pair_replicates, percentile_interval
from polyplan.planner.exact.whole_call import CallCount, CallModel, prefill_curve, whole_call_speedup
from polyplan.formats.profile import Profile
from polyplan.formats.sampling import SamplingMode

EXPORT_ENGINES = ("hf", "vllm", "llama.cpp")  # what `polyplan export --engine` exports a plan to
FULL, ARGMAX = "full", "argmax"
EXAMPLE_NEW_TOKENS = 128  # the whole-call example `polyplan export` prints (Spec-Bench's and bench peers' usual length)
EXAMPLE_PROMPT_TOKENS = 128  # its prompt length when the plan records no context length


@dataclass(frozen=True)
class EngineOption:
    """One drafter under one engine: its rule, rate, best K and prediction, or why not.

    Attributes:
        drafter: the candidate's name.
        method: "draft_model" or "ngram"; "" when the engine cannot run it at all.
        rule: FULL or ARGMAX (see the module docstring).
        alpha: the per-token acceptance under `rule` (None: not measured, see `reason`).
        block_size: the best K under the exact model (None when not exportable).
        prediction: the exact model's prediction at that K (None when not exportable).
        source: what to hand the engine (a folder, hub id or GGUF file; "" for n-gram).
        reason: None when exportable, else one line saying why not.
        ngram_sizes: (min_n, max_n) of an n-gram drafter, else None.
    """

    drafter: str
    method: str
    rule: str
    alpha: float | None
    block_size: int | None
    prediction: ChainPrediction | None
    source: str
    reason: str | None
    ngram_sizes: tuple[int, int] | None = None
    call: CallModel | None = None  # its whole-`generate`-call cost (`planner.exact.whole_call`), HF only
    model: str = ""  # how the prediction was made, when not by α (llama.cpp's n-gram replay), or why α

    @property
    def speedup(self) -> float | None:
        return None if self.prediction is None else self.prediction.speedup


@dataclass(frozen=True)
class EngineExport:
    """The best chain `engine` can express for a plan, and every drafter considered.

    Attributes:
        chosen: the exportable option with the highest predicted speedup (None: none is).
        options: every drafter of the profile under this engine, best first, then the others.
        polyplan_speedup: the plan's own predicted speedup (its chain may have several drafters).
        temperature: the sampling temperature the plan was made for (0: greedy).
    """

    engine: str
    target: str
    target_source: str
    sampling: str
    temperature: float
    chosen: EngineOption | None
    options: tuple[EngineOption, ...]
    polyplan_chain: tuple[str, ...]
    polyplan_speedup: float
    overhead_note: str = ""  # which loop overhead the predictions used (`planner.exact.engine_overhead`)
    baseline_call: CallModel | None = None  # target-only `generate`'s whole-call cost (HF only)
    call_note: str = ""  # what the whole-call model lacks in the profile ("" when nothing)
    context_length: int | None = None  # the context the plan was made for (the whole-call example's prompt)
    server_flags: tuple[str, ...] = ()  # llama.cpp only: flags this machine needs (`--no-repack` where its AMX kernels crash)
    ranking: tuple[RankedConfig, ...] = ()  # llama.cpp only: every configuration predicted, and off, fastest first
    recommended: RankedConfig | None = None  # llama.cpp only: what to type (`llama_cpp_ranking.recommend`)
    ranking_notes: tuple[str, ...] = ()  # llama.cpp only: how the ranking was predicted, and what it leaves out
    unexported: str = ""  # why no drafter is exported (`chosen` None): the target alone is the answer
    prices: LlamaCppPrices | None = None  # llama.cpp only: the numbers it was priced with (None: the profile's)

    def whole_call_example(self) -> tuple[int, int, float] | None:
        """(prompt tokens, new tokens, predicted whole-call speedup) of one example `generate`
        call of the chosen option (HF only; None otherwise): the plan's context length as the
        prompt, `EXAMPLE_NEW_TOKENS` new tokens."""
        option = self.chosen
        if option is None or option.call is None or self.baseline_call is None:
            return None
        calls = [CallCount(self.context_length or EXAMPLE_PROMPT_TOKENS, EXAMPLE_NEW_TOKENS)]
        return calls[0].prompt_tokens, calls[0].new_tokens, whole_call_speedup(self.baseline_call, option.call, calls, calls)

    @property
    def loss(self) -> float | None:
        """Fraction of polyplan's predicted speedup the export gives up: 1 − engine / polyplan."""
        if self.chosen is None or self.chosen.speedup is None:
            return None
        return 1.0 - self.chosen.speedup / self.polyplan_speedup


def check_engine(engine: str) -> str:
    """`engine` if polyplan knows it, else a `PolyplanError` naming the known ones."""
    if engine not in EXPORT_ENGINES:
        raise PolyplanError(f"--engine: unknown engine {engine!r} (choose one of {', '.join(EXPORT_ENGINES)})")
    return engine


def _is_gguf(candidate: Candidate) -> bool:
    return candidate.source is not None and (candidate.source_kind == "gguf" or candidate.source.lower().endswith(".gguf"))


def _weights_source(candidate: Candidate, file: str | None) -> str:
    if file is not None:
        return file
    return candidate.source or ""


IN_PROCESS = "(in process: polyplan's copy)"  # the source of a derived drafter handed to HF as a live model


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
        return "draft_model", IN_PROCESS, None
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
    source = _weights_source(candidate, file)
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


def _llama_cpp_ngram(profile: Profile, sizes: tuple[int, int], target_curve, k_max: int,
                     greedy: bool, loop: ServerLoop = NO_SERVER_LOOP) -> tuple[int | None, ChainPrediction | None, str]:
    """(K, prediction, how) of llama.cpp's `ngram-simple` with lookup size `sizes[1]`: replayed
    on the profile's greedy target streams where it holds them (K = --spec-ngram-simple-size-m
    searched in 1..k_max), else (None, None, why α is used)."""
    streams = target_streams(profile)
    if not greedy:
        return None, None, "alpha model: llama.cpp's n-gram drafts are replayed at greedy only"
    if not streams:
        return None, None, ("alpha model: the profile holds no target streams (made by an older polyplan); "
                            "re-run polyplan profile to replay llama.cpp's ngram-simple on them")
    k, prediction = _best_block(lambda k: replay_prediction(streams, sizes[1], k, target_curve, loop=loop), k_max)
    return k, prediction, f"replayed llama.cpp's ngram-simple on the profile's {len(streams)} target streams"


RESAMPLES = 200  # bootstrap replicates of a replayed configuration's interval


def _replicates(profile: Profile, target: str, streams: int, width: int, context_length: int | None,
                set_size: int | None = None) -> Replicates:
    """The target's T(1..width) and a new prompt set (of `set_size` prompts; None: `streams`)
    per replicate (`llama_cpp_ranking`)."""
    import numpy as np

    from polyplan.planner.intervals.prediction_interval import DEFAULT_LEVEL, prompt_weights, few_prompts_stretch, latency_replicates

    rng = np.random.default_rng(0)
    curves, _, _ = latency_replicates(profile, [target], RESAMPLES, rng, context_length)
    ks = np.arange(1, width + 1, dtype=float)
    steps = np.stack([curve.many(ks) for curve in curves[target]])
    workload = prompt_weights(streams, RESAMPLES, rng, new_set=False)  # first: the same draw whatever the new set's size
    return Replicates(steps, prompt_weights(streams, RESAMPLES, rng, set_size=set_size), few_prompts_stretch(streams, DEFAULT_LEVEL),
                      workload)


def _llama_cpp_ranking(profile: Profile, target: str, options: list[EngineOption], target_curve, greedy: bool,
                       workload: ReplayWorkload, context_length: int | None,
                       prices: LlamaCppPrices | None = None, pricing: "_DraftPricing | None" = None,
                       policy: tuple[str, DraftPolicy] | None = None, k_max: int = 8,
                       sampling: str = "greedy",
                       replay_also: Sequence[Sequence[str]] = ()) -> tuple[tuple[RankedConfig, ...], tuple[str, ...]]:
    """Every llama-server configuration the export can predict, and off, fastest first; and
    the notes on how (`planner.llama_cpp.ranking`; `prices`: llama.cpp's own numbers, already
    in `profile`, and llama-server's loop; `policy`: the plan's last drafter and its draft
    policy, whose confidence stop gets a row of its own, `planner.llama_cpp.policy`; `replay_also`:
    flags replayed too, `export_plan`)."""
    streams = target_streams(profile) if greedy else ()
    loop = NO_SERVER_LOOP if prices is None or prices.loop is None else prices.loop
    configs, notes = [], list(() if prices is None else prices.notes)
    ngrams = [o for o in options if o.reason is None and o.method == "ngram"]
    replicates = None
    if streams:
        width = max([48, 64, *(o.block_size for o in options if o.block_size)]) + 1
        replicates = _replicates(profile, target, len(streams), width, context_length, workload.prompts)
        notes.append(f"n-gram types replayed by llama.cpp's own rules ({LLAMA_CPP_VERSION}) on "
                     f"{workload.words(len(streams))}, its state kept from request to request; "
                     f"the first interval for {workload.set_words(len(streams))}")
        for kind, (make_rule, flags) in LLAMA_CPP_RULES.items():
            configs.append(replayed_config(f"{kind} (defaults)", flags, streams, make_rule, target_curve, workload, replicates,
                                           loop=loop))
    else:
        why = "at greedy only" if not greedy else "the profile holds no target streams (re-run polyplan profile)"
        notes.append(f"ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache: not modelled ({why})")
    seen = set()
    for option in ngrams:  # ngram-simple at each n-gram drafter's size and chosen K
        size_n, k = option.ngram_sizes[1], option.block_size
        flags = tuple(llama_cpp_spec_flags("ngram", k, "", option.ngram_sizes))
        if flags in seen:
            continue
        seen.add(flags)
        if streams:
            configs.append(replayed_config(f"ngram-simple size-n={size_n} K={k}", flags, streams,
                                           lambda size_n=size_n, k=k: NGramSimpleRule(size_n, k), target_curve, workload, replicates,
                                           loop=loop))
        elif option.prediction is not None:
            configs.append(RankedConfig(f"ngram-simple size-n={size_n} K={k}", flags, option.speedup, None, "alpha model (no interval)"))
    for flags in replay_also if streams else ():
        rule = rule_for_flags(flags)
        if rule is not None and tuple(flags) not in seen and all(tuple(flags) != config.flags for config in configs):
            seen.add(tuple(flags))
            configs.append(replayed_config(rule[0], flags, streams, rule[1], target_curve, workload, replicates, loop=loop))
    requests = _workload_requests(streams, workload)
    in_server = bool(requests) and bool(loop.per_draft_prompt_token_s or loop.per_request_s)
    server_words = (", the server's per-request cost and the draft model's prefill of each prompt over the replays' requests"
                    if in_server else "")
    for option in options:
        if option.reason is None and option.method == "draft_model" and option.source != IN_PROCESS:
            how = ("exact model with alpha and llama-server's draft loop" if prices is not None and prices.draft_ratio is not None
                   else "exact model with alpha")
            point = _server_speedup(option.prediction, loop, requests if in_server else [])
            configs.append(_draft_config(f"draft-simple {option.drafter} K={option.block_size}",
                                         llama_cpp_spec_flags("draft_model", option.block_size, option.source), point, f"{how}{server_words}",
                                         pricing, target, option.drafter, option.block_size, loop, requests if in_server else [],
                                         sampling, FIXED_DRAFTS, workload.prompts))
    if pricing is not None:
        rows, lines = _raced_draft_rows(replay_also, configs, options, profile, target, pricing, loop, requests if in_server else [],
                                        sampling, workload.prompts)
        configs += rows
        notes += [line for line in lines if line not in notes]
    if policy is not None and pricing is not None:
        row, lines = _policy_config(profile, target, options, policy, pricing, loop, requests if in_server else [], sampling, k_max,
                                    workload.prompts)
        configs += row
        notes += [line for line in lines if line not in notes]
    return rank_configs(configs), tuple(notes)


def _raced_draft_rows(replay_also: Sequence[Sequence[str]], ranked: list[RankedConfig], options: list[EngineOption],
                      profile: Profile, target: str, pricing: "_DraftPricing", loop: ServerLoop, requests: list[tuple[int, int]],
                      sampling: str, set_size: int | None) -> tuple[list[RankedConfig], list[str]]:
    """A row for each `draft-simple` configuration among `replay_also` that the ranking does not
    hold and the replay models (`planner.llama_cpp.policy.draft_simple_flags`: a race's
    defaults and its n-max/p-min sweep): its drafter found by file among `options`, exactly n-max
    tokens a round priced by the exact model with α as the fixed-K rows are, or the confidence
    stop replayed on the drafter's agreement sequences as the plan's policy row is; each with
    both intervals, under the flags as given. Also one line each where a stop fell back to the
    whole-vocabulary confidences or could not be replayed (its row then stays "not modelled")."""
    by_source = {o.source: o for o in options if o.reason is None and o.method == "draft_model" and o.source != IN_PROCESS}
    held = {config.flags for config in ranked}
    rows, notes = [], []
    for flags in (tuple(flags) for flags in replay_also):
        draft = draft_simple_flags(flags)
        option = None if draft is None else by_source.get(draft.source)
        if flags in held or option is None or not draft.modelled or (draft.policy is not None and sampling != "greedy"):
            continue
        held.add(flags)
        k, drafter = draft.n_max, option.drafter
        if draft.policy is None:
            row_pricing, acceptance, how = pricing, option.alpha, "exact model with alpha"
        else:
            view, fallback = server_view(profile, target, drafter)
            try:
                acceptance = policy_rounds(view, target, drafter, draft.p_min)(k)
            except PolyplanError as error:
                notes.append(f"{drafter}'s confidence stop p_min {draft.p_min:g}: not modelled ({error})")
                continue
            notes += [line for line in fallback if line not in notes]
            row_pricing, how = dataclasses.replace(pricing, profile=view), "its confidence stop replayed on the agreement sequences"
        point = _server_speedup(row_pricing.predict(drafter, acceptance, k), loop, requests)
        label = f"draft-simple {drafter} n-max={k}" + ("" if draft.policy is None else f" p-min={draft.p_min:g}")
        rows.append(_draft_config(label, flags, point, how, row_pricing, target, drafter, k, loop, requests, sampling,
                                  draft.policy or FIXED_DRAFTS, set_size))
    return rows, notes


def _draft_config(label: str, flags, point: float, how: str, pricing: "_DraftPricing | None", target: str, drafter: str, k: int,
                  loop: ServerLoop, requests: list[tuple[int, int]], sampling: str, policy: DraftPolicy,
                  set_size: int | None) -> RankedConfig:
    """A draft-simple row at `point` with both its intervals (`_draft_interval`: for a new set of
    `set_size` prompts, and for the workload's mean; none without `pricing`), `how` it was
    predicted saying where it has no interval."""
    interval, workload_interval = (
        None if pricing is None else _draft_interval(pricing, target, drafter, k, point, loop, requests, sampling, policy, new_set, set_size)
        for new_set in (True, False))
    return RankedConfig(label, tuple(flags), point, interval, how + (" (no interval)" if interval is None else ""),
                        workload_interval=workload_interval)


def _server_speedup(prediction: ChainPrediction, loop: ServerLoop, requests: list[tuple[int, int]]) -> float:
    """A draft model's decode speedup in llama-server: the exact model's, with the server's
    per-request cost and the draft model's prefill of each prompt over `requests` where
    there are any (`planner.llama_cpp.server_loop.draft_model_speedup`)."""
    if not requests:
        return prediction.speedup
    return draft_model_speedup(loop, prediction.cost_per_token, prediction.speedup * prediction.cost_per_token, requests)


@dataclass(frozen=True)
class _DraftPricing:
    """What a draft model's round costs in the export: the target's curve and switch cost, the
    loop overhead (polyplan's, None: none) or llama-server's own loop and drafter cost ratio
    (`_server_draft_model`), each drafter's curve (from `profile` at `context_length`) and
    switch cost, and in llama-server each GGUF drafter's second decode of a verified batch
    (`reevals`: its pass over k tokens asking for the last row only)."""

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
            curves, costs, overhead, verify = _server_draft_model(curves, self.loop, method, self.ratio,
                                                                  self.reevals.get(drafter, curves[1]))
        return predict_chain([acceptance], curves, [k], overhead, costs, pad_verification=False, verify_curves=verify)


def _draft_interval(pricing: _DraftPricing, target: str, drafter: str, k: int, point: float, loop: ServerLoop,
                    requests: list[tuple[int, int]], sampling: str, policy: DraftPolicy = FIXED_DRAFTS,
                    new_set: bool = True, set_size: int | None = None) -> tuple[float, float] | None:
    """A draft-simple row's interval, of the same kind as the plan's and the n-gram rows'
    (`planner.intervals.prediction_interval.pair_replicates`): the target's and the drafter's
    T(k) resampled from their stored timings, the drafter's agreement runs (or its policy's
    replayed rounds) resampled by prompt as a new prompt set, each replicate priced as the point
    is and its deviation from the inputs as measured stretched for few prompts; llama-server's
    loop held fixed. None where the profile's sequences hold no complete round at block size `k`.
    `new_set` False: for the workload's mean (one prompt draw); `set_size`: the new set's prompt
    count (None: the profile's)."""
    try:
        replicates = pair_replicates(pricing.profile, target, drafter, k, policy=policy, sampling=sampling,
                                     context_length=pricing.context_length, resamples=RESAMPLES, new_set=new_set,
                                     set_size=set_size)
    except PolyplanError:
        return None
    measured = _server_speedup(pricing.predict(drafter, replicates.measured, k), loop, requests)
    speedups = np.asarray([_server_speedup(pricing.predict(drafter, acceptance, k, curves=(target_curve, drafter_curve)), loop, requests)
                           for acceptance, target_curve, drafter_curve in zip(replicates.acceptance, replicates.target, replicates.drafter)])
    return percentile_interval(point, speedups, measured, replicates.stretch)


def _policy_config(profile: Profile, target: str, options: list[EngineOption], policy: tuple[str, DraftPolicy],
                   pricing: _DraftPricing, loop: ServerLoop, requests: list[tuple[int, int]], sampling: str,
                   k_max: int, set_size: int | None = None) -> tuple[list[RankedConfig], list[str]]:
    """The plan's draft policy as llama-server runs it (`planner.llama_cpp.policy`): a
    draft-simple row with its confidence stop at the best fixed K (its rounds replayed on the
    drafter's agreement sequences and its 10-best confidences, `server_view`), and a line where
    the plan's policy is more than that (an adaptive cap) or the replay falls back to the
    whole-vocabulary confidences, or why no row."""
    drafter, plan_policy_ = policy
    option = next((o for o in options if o.drafter == drafter and o.reason is None and o.method == "draft_model"
                   and o.source != IN_PROCESS), None)
    if option is None:
        return [], list(policy_notes(drafter, plan_policy_, None)) if any(o.drafter == drafter for o in options) else []
    stop = server_policy(plan_policy_)
    if stop is None:
        return [], list(policy_notes(drafter, plan_policy_, option.block_size))
    if sampling != "greedy":
        return [], [f"{drafter}'s confidence stop p_min {stop.p_min:g}: not modelled (replayed at greedy only)"]
    view, fallback = server_view(profile, target, drafter)
    try:
        rounds_at = policy_rounds(view, target, drafter, stop.p_min)
        k, prediction = _best_block(lambda k: pricing.predict(drafter, rounds_at(k), k), k_max)
    except PolyplanError as error:
        return [], [f"{drafter}'s confidence stop p_min {stop.p_min:g}: not modelled ({error})"]
    label = f"draft-simple {drafter} K={k} p-min={stop.p_min:g}"
    point = _server_speedup(prediction, loop, requests)
    row = _draft_config(label, llama_cpp_spec_flags("draft_model", k, option.source, p_min=stop.p_min), point,
                        "the plan's confidence stop replayed on the drafter's agreement sequences",
                        dataclasses.replace(pricing, profile=view), target, drafter, k, loop, requests, sampling, stop, set_size)
    return [row], [*fallback, *policy_notes(drafter, plan_policy_, k)]


def _server_draft_model(curves: list[LatencyCurve], loop: ServerLoop, method: str, ratio: float | None,
                        reeval: LatencyCurve) -> tuple[list, list, LoopOverhead, list | None]:
    """The exact model's inputs for one llama-server round with a drafter (`planner.llama_cpp.server_loop`):
    curves, switch costs (none: they are inside the calibration), loop overhead and verification
    curves. Every target pass pays the server's per-round cost (the target's curve shifted by
    it, so the baseline pays it too). A draft model's pass, drafted token or confidence stop,
    costs the bindings' T_d(1) times the calibrated `ratio` (1 without one); its verification
    of L + 1 tokens pays the server's per-row cost for the L drafted rows and the draft model's
    second decode of that batch (`ServerLoop.reeval` times `reeval`(L + 1): the draft
    model's pass asking for the last row only, or its `curves` entry where that was not
    measured); every round its per-round cost. An n-gram drafter without streams (priced at α)
    costs the per-row cost a token and its per-round cost."""
    target = LatencyCurve(curves[0].ks, tuple(value + loop.per_round_s for value in curves[0].seconds))
    if method == "ngram":  # an n-gram drafter without streams: α, at a free drafter
        drafter = constant_curve(loop.per_row_s + 1e-9)
        return [target, drafter], [NO_SWITCH, NO_SWITCH], LoopOverhead(per_step_s=0.0, per_round_s=loop.per_ngram_round_s), None
    drafter = constant_curve(curves[1](1) * (1.0 if ratio is None else ratio))
    widths = tuple(sorted(set(target.ks) | set(reeval.ks)))
    verify = LatencyCurve(widths, tuple(target(k) + loop.per_row_s * (k - 1) + loop.reeval * reeval(k) for k in widths))
    return ([target, drafter], [NO_SWITCH, NO_SWITCH], LoopOverhead(per_step_s=0.0, per_round_s=loop.per_draft_round_s),
            [verify, drafter])


def _workload_requests(streams, workload: ReplayWorkload) -> list[tuple[int, int]]:
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


def _best_block(prediction_at, k_max: int) -> tuple[int, ChainPrediction]:
    best = None
    for k in range(1, k_max + 1):
        prediction = prediction_at(k)
        if best is None or prediction.speedup > best[1].speedup:
            best = (k, prediction)
    return best


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
    """The best chain `engine` can express for `plan`, predicted under the engine's rule.

    Args:
        files: what the engine loads for a candidate, by name, where that is not its `source`:
            the folder of a `builtin:<name>` source, the file of a llama.cpp-quantized copy.
        k_max: largest K searched (default: the plan's own search limit, else 8).
        in_process: derived drafters count as loadable (`loadable`): for racing HF in this
            process, never for a configuration a user would type.
        workload: llama.cpp only: the requests its n-gram types are replayed on (default: each
            of the profile's streams once, whole).
        prices: llama.cpp only: llama.cpp's own T(k) and greedy streams in place of the
            profile's, and llama-server's own loop in place of polyplan's
            (`planner.llama_cpp.ranking.LlamaCppPrices`; None: the profile's numbers).
        replay_also: llama.cpp only: the flags of configurations to replay and rank besides
            the export's own, where the replay models them (`planner.llama_cpp.ngram_rules.rule_for_flags`):
            a race's, whose ngram-simple K was chosen on other streams.

    A plan whose profile has no drafter the engine can run (a target-only plan, or drafters it
    cannot load) is valid: the export then chooses none (`chosen` None) and says why in
    `unexported`: the engine runs the target alone.

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
        overhead = None  # llama-server's own loop instead (`_server_draft_model`)
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
    pricing = _DraftPricing(target_curve, switches.get(plan.target, NO_SWITCH), overhead, loop,
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
            k, prediction, model = _llama_cpp_ngram(profile, sizes, target_curve, k_max, greedy, loop or NO_SERVER_LOOP)
        if not model.startswith("replayed"):
            k, prediction = _best_block(lambda k: pricing.predict(pair.drafter, alpha, k, method), k_max)
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
    typeable = [o for o in ranked if o.source != IN_PROCESS]  # what a user can hand the engine
    unexported = ""
    if not typeable:
        unexported = "; ".join(f"{o.drafter}: {o.reason}" for o in others) or f"the profile has no drafter for {plan.target!r}"
    ranking, notes = ((), ())
    if engine == "llama.cpp":
        ranking, notes = _llama_cpp_ranking(profile, plan.target, ranked + others, target_curve, greedy, workload,
                                            context_length, prices, pricing, plan_policy(plan), k_max, sampling, replay_also)
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
        recommended=recommend(ranking) if ranking else None,
        ranking_notes=notes,
        call_note="" if not missing else (
            "whole-call prediction leaves out " + ", ".join(dict.fromkeys(missing)) + " (not in the profile, made by an older "
            "polyplan); re-run polyplan recommend --candidates to measure it"
        ),
        unexported=unexported,
        prices=prices,
    )
