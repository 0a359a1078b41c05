"""`polyplan bench peers`: HF transformers' own speculative decoding against polyplan's chain.

One interleaved run on the same prompts, greedy (so every configuration must emit the target's
own output, token for token):
- target-only HF `generate` (the baseline);
- HF assisted generation with each drafter, at the K the HF export predicts best for it
  (`planner.engine_export`, HF's rule), drafting exactly K per round (`engines.hf_generate.configure_assistant`);
  polyplan's derived copies (quantized, early exit) are handed to `generate` as the live
  models polyplan runs, so HF races with every drafter polyplan has;
- HF prompt lookup (`prompt_lookup_num_tokens`) for each n-gram candidate, at its exported K;
- polyplan's recommended chain (the plan's chain and block sizes) in polyplan's decoder.
Prompts are taken round-robin: for each prompt and repeat every configuration runs once, in an
order rotated by one each time, so machine noise hits all alike; each prompt first runs once
untimed per configuration (warm-up, and the equality check).

The HF rows' predictions are the HF export's (`planner.engine_export`): the exact cost model with HF
`generate`'s own loop overhead when the profile has it (`planner.exact.engine_overhead`), else
polyplan's (the report says which). A last line says whether the exported HF configuration's
measured speedup is within 10% of its prediction, with its predicted and measured tokens per
target pass (an acceptance rate that differs on these prompts shows there first).
Those predictions are per decoded token; each HF row also gets the whole-call prediction
(`planner.exact.whole_call`: HF's per-call cost and the prompt's prefills added per call, summed
over this run's prompts with their lengths and the tokens each call emitted), which models
what is measured here, and the verdict is judged by it.

Speedup is Spec-Bench's: a configuration's tokens/s (its new tokens over its wall time, summed
over the prompts of a category) over the baseline's. Tokens per target pass are new tokens
over forward calls of the target model (a forward hook counts HF's calls; polyplan's decoder
counts its own, the prefill included in both).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from polyplan.engines.hf_generate import configure_assistant, hf_generate
from polyplan.decoder.chain import generate
from polyplan.decoder.sampling import Sampling
from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.engine_overhead import prediction_error
from polyplan.planner.engine_export import EngineExport
from polyplan.formats.plan import PlanFile
from polyplan.formats.sampling import SamplingMode
from polyplan.planner.exact.whole_call import CallCount, CallModel, whole_call_speedup
from polyplan.engines.hf_overhead import _ForwardClock
from polyplan.profiler.prompts import EncodedPrompt

BASELINE = "target only (HF generate)"


@dataclass(frozen=True)
class PeerConfig:
    """One configuration of the race: `run(prompt ids)` → (new token ids, target passes)."""

    label: str
    predicted_speedup: float | None  # the HF export's prediction (None: baseline, polyplan)
    run: Callable[[Sequence[int]], tuple[list[int], int]]
    exported: bool = False  # the configuration `polyplan export --engine hf` recommends
    call: CallModel | None = None  # its whole-call cost (`planner.exact.whole_call`; None: not an HF export row)


@dataclass(frozen=True)
class PeerRow:
    """One configuration's totals over the prompts of one category (or all: category "all")."""

    label: str
    category: str
    tokens: int
    seconds: float
    target_passes: int
    speedup: float  # Spec-Bench: (tokens / seconds) / baseline's (tokens / seconds)
    predicted_speedup: float | None
    speedup_sd: float | None = None  # standard deviation of the same ratio over repeats (None: 1 repeat)
    predicted_call_speedup: float | None = None  # whole generate calls: prefill and per-call cost too

    @property
    def tokens_per_target_pass(self) -> float:
        return self.tokens / self.target_passes if self.target_passes else float("nan")


@dataclass(frozen=True)
class PeersBenchmark:
    """Every configuration per category and overall, and whether outputs were all equal."""

    rows: tuple[PeerRow, ...]
    categories: tuple[str, ...]
    mismatches: tuple[str, ...]  # "<config>: prompt i: first differing token j" for each unequal output
    prompts: int
    new_tokens: int
    repeats: int
    threads: int
    exported_label: str | None = None  # the exported HF configuration's row label
    overhead_note: str = ""  # which loop overhead the HF predictions used
    exported_tokens_per_pass: float | None = None  # the export's predicted tokens per target pass
    call_note: str = ""  # what the whole-call prediction lacks ("" when nothing)


def _category(prompt: EncodedPrompt) -> str:
    kind = prompt.prompt.kind
    return kind.split(":", 1)[1] if kind.startswith("spec_bench:") else kind


def peer_configs(
    plan: PlanFile, export: EngineExport, members, eos, *, new_tokens: int, counter: _ForwardClock
) -> tuple[PeerConfig, ...]:
    """The race's configurations: baseline, HF assisted per loadable drafter, HF prompt lookup,
    polyplan's chain. `members`: candidate name → loaded chain member; `export`: the HF export;
    `counter`: the target's forward clock (its `calls`: one per target pass of `generate`)."""
    target = members[plan.target].model
    pad = target.generation_config.pad_token_id
    pad = pad if pad is not None else 0

    def hf(**extra) -> Callable[[Sequence[int]], tuple[list[int], int]]:
        def run(prompt: Sequence[int]) -> tuple[list[int], int]:
            before = counter.calls
            tokens = hf_generate(target, prompt, max_new_tokens=new_tokens, eos=eos, pad=pad, **extra)
            return tokens, counter.calls - before

        return run

    configs = [PeerConfig(BASELINE, None, hf(), call=export.baseline_call)]
    for option in export.options:
        if option.reason is not None:
            continue
        if option.method == "ngram":
            lookup = dict(prompt_lookup_num_tokens=option.block_size, max_matching_ngram_size=option.ngram_sizes[1])
            label = f"HF prompt lookup {option.drafter} K={option.block_size}"
            configs.append(PeerConfig(label, option.speedup, hf(**lookup), option is export.chosen, option.call))
            continue
        draft = getattr(members[option.drafter], "model", None)
        if draft is None:
            continue
        configure_assistant(draft, option.block_size)
        label = f"HF assisted {option.drafter} K={option.block_size}"
        configs.append(PeerConfig(label, option.speedup, hf(assistant_model=draft), option is export.chosen, option.call))
    chain = [members[name] for name in plan.chain]
    greedy = Sampling(temperature=0.0)

    def ours(prompt: Sequence[int]) -> tuple[list[int], int]:
        result = generate(chain, list(prompt), max_new_tokens=new_tokens, block_sizes=list(plan.block_sizes), sampling=greedy,
                          eos_token_id=eos, draft_policy=plan.best.draft_policy)
        return list(result.token_ids), result.levels[0].forward_passes

    label = "polyplan " + " > ".join(plan.chain) + (f" K={plan.best.blocks_label()}" if plan.block_sizes else "")
    configs.append(PeerConfig(label, plan.best.exact.speedup, ours))
    return tuple(configs)


def race_peers(configs: Sequence[PeerConfig], prompts: Sequence[EncodedPrompt], *, repeats: int, new_tokens: int) -> PeersBenchmark:
    """Run `configs` (the first is the baseline) round-robin per prompt; see the module docstring."""
    if repeats < 1 or new_tokens < 1:
        raise PolyplanError("--repeats and --new-tokens must be >= 1")
    if not prompts:
        raise PolyplanError("--prompts: no prompts")
    count = len(configs)
    totals = {}  # (config, category) -> [tokens, seconds, passes]
    calls = {}  # (config, category) -> [CallCount of every timed call]
    mismatches = []
    turn = 0
    for index, prompt in enumerate(prompts):
        category = _category(prompt)
        reference = None
        for position, config in enumerate(configs):  # warm-up and equality check
            tokens, _ = config.run(prompt.ids)
            if reference is None:
                reference = tokens
            elif tokens != reference:
                where = next((j for j, (a, b) in enumerate(zip(tokens, reference)) if a != b), min(len(tokens), len(reference)))
                mismatches.append(f"{config.label}: prompt {index + 1}: output differs from target-only from token {where}")
        for repeat in range(repeats):
            for step in range(count):
                position = (step + turn) % count
                config = configs[position]
                began = time.perf_counter()
                tokens, passes = config.run(prompt.ids)
                seconds = time.perf_counter() - began
                for key in ((position, category), (position, "all"), (position, category, repeat), (position, "all", repeat)):
                    entry = totals.setdefault(key, [0, 0.0, 0])
                    entry[0] += len(tokens)
                    entry[1] += seconds
                    entry[2] += passes
                for key in ((position, category), (position, "all")):
                    calls.setdefault(key, []).append(CallCount(len(prompt.ids), len(tokens)))
            turn += 1
    categories = tuple(dict.fromkeys(_category(p) for p in prompts)) + ("all",)
    rows = []
    for category in categories:
        base_tokens, base_seconds, _ = totals[(0, category)]
        base_rate = base_tokens / base_seconds
        for position, config in enumerate(configs):
            tokens, seconds, passes = totals[(position, category)]
            ratios = [
                (totals[(position, category, r)][0] / totals[(position, category, r)][1])
                / (totals[(0, category, r)][0] / totals[(0, category, r)][1])
                for r in range(repeats)
            ]
            spread = statistics.stdev(ratios) if repeats > 1 else None
            whole = None
            if config.call is not None and configs[0].call is not None and position > 0:
                whole = whole_call_speedup(configs[0].call, config.call, calls[(0, category)], calls[(position, category)])
            rows.append(
                PeerRow(config.label, category, tokens, seconds, passes, (tokens / seconds) / base_rate, config.predicted_speedup, spread,
                        whole)
            )
    exported = next((config.label for config in configs if config.exported), None)
    return PeersBenchmark(tuple(rows), categories, tuple(mismatches), len(prompts), new_tokens, repeats, torch.get_num_threads(),
                          exported)


def peers_lines(bench: PeersBenchmark) -> list[str]:
    """The tables `polyplan bench peers` prints: per category, then overall with predictions."""
    lines = [
        f"{bench.prompts} prompts x {bench.repeats} repeats, greedy, {bench.new_tokens} new tokens max, torch threads "
        f"{bench.threads}; configurations interleaved round-robin per prompt; speedup = tokens/s over target-only (Spec-Bench)"
    ]
    width = max([len("configuration")] + [len(row.label) for row in bench.rows])  # no label is cut
    for category in bench.categories:
        lines += ["", f"[{category}]", f"{'configuration':<{width}} {'tokens/s':>9} {'speedup ± sd':>14} {'tokens/pass':>11} "
                                            f"{'per-token':>9} {'whole-call':>10} {'error':>7}"]
        for row in (r for r in bench.rows if r.category == category):
            shown = category == "all"
            per_token = "-" if row.predicted_speedup is None or not shown else f"{row.predicted_speedup:.2f}x"
            whole = "-" if row.predicted_call_speedup is None or not shown else f"{row.predicted_call_speedup:.2f}x"
            predicted = _predicted(row)
            error = "-" if predicted is None or not shown else f"{prediction_error(predicted, row.speedup):+.0%}"
            lines.append(
                f"{row.label:<{width}} {row.tokens / row.seconds:>9.1f} {_speed(row):>14} {row.tokens_per_target_pass:>11.2f} "
                f"{per_token:>9} {whole:>10} {error:>7}"
            )
    lines += ["", "predicted: per-token = the cost model per decoded token (the long-generation limit, what polyplan export "
                  "prints); whole-call = per prompt, HF's per-call cost + prefill of the prompt (target, and the assistant's) "
                  "+ the tokens each call emitted x the per-token cost, summed over these prompts as measured (HF rows); "
                  "error = predicted / measured - 1, from whole-call where there is one"]
    if bench.call_note:
        lines.append(bench.call_note)
    if bench.overhead_note:
        lines += ["", f"HF predictions' {bench.overhead_note}"]
    lines += exported_check_lines(bench)
    if bench.mismatches:
        lines += ["", f"OUTPUTS DIFFER in {len(bench.mismatches)} run(s) (greedy outputs must all equal target-only):"]
        lines += [f"  ! {line}" for line in bench.mismatches]
    else:
        lines += ["", "greedy outputs: identical in every configuration"]
    return lines


TOLERANCE = 0.10  # the promise: the exported HF configuration's speedup within 10% of its prediction


def exported_check(bench: PeersBenchmark) -> tuple[PeerRow, float] | None:
    """The exported HF configuration's overall row and its prediction error (predicted /
    measured − 1), None when no HF configuration was exported or raced."""
    row = next((r for r in bench.rows if r.category == "all" and r.label == bench.exported_label), None)
    if row is None or _predicted(row) is None:
        return None
    return row, prediction_error(_predicted(row), row.speedup)


def _predicted(row: PeerRow) -> float | None:
    """The prediction a row is judged by: whole generate calls when modelled, else per token."""
    return row.predicted_call_speedup if row.predicted_call_speedup is not None else row.predicted_speedup


def exported_check_lines(bench: PeersBenchmark) -> list[str]:
    """One line: is the exported HF configuration's measured speedup within 10% of its prediction?"""
    check = exported_check(bench)
    if check is None:
        return ["", "exported HF configuration: none raced (no drafter HF can load)"]
    row, error = check
    verdict = "WITHIN" if abs(error) <= TOLERANCE else "NOT within"
    spread = "" if row.speedup_sd is None else f" (sd of the measured ratio over repeats {row.speedup_sd:.2f})"
    passes = "" if bench.exported_tokens_per_pass is None else (
        f"; tokens per target pass predicted {bench.exported_tokens_per_pass:.2f}, measured {row.tokens_per_target_pass:.2f}"
    )
    which = "whole-call" if row.predicted_call_speedup is not None else "per-token (no whole-call model)"
    per_token = "" if row.predicted_call_speedup is None else f" (per-token limit {row.predicted_speedup:.2f}x)"
    return ["", f"exported HF configuration {row.label}: predicted {_predicted(row):.2f}x {which}{per_token}, measured "
                f"{row.speedup:.2f}x{spread}, error {error:+.1%}: {verdict} {TOLERANCE:.0%}{passes}"]


def _speed(row: PeerRow) -> str:
    return f"{row.speedup:.2f}x" + ("" if row.speedup_sd is None else f" ± {row.speedup_sd:.2f}")


def peers_json(bench: PeersBenchmark) -> dict:
    """The JSON object of `polyplan bench peers --json`."""
    return {
        "prompts": bench.prompts,
        "new_tokens": bench.new_tokens,
        "repeats": bench.repeats,
        "threads": bench.threads,
        "outputs_equal": not bench.mismatches,
        "hf_overhead": bench.overhead_note or None,
        "whole_call_note": bench.call_note or None,
        "exported": _exported_json(bench),
        "mismatches": list(bench.mismatches),
        "rows": [
            {
                "configuration": row.label,
                "category": row.category,
                "tokens": row.tokens,
                "seconds": row.seconds,
                "target_passes": row.target_passes,
                "tokens_per_second": row.tokens / row.seconds,
                "speedup": row.speedup,
                "speedup_sd": row.speedup_sd,
                "tokens_per_target_pass": row.tokens_per_target_pass,
                "predicted_speedup": row.predicted_speedup,
                "predicted_whole_call_speedup": row.predicted_call_speedup,
            }
            for row in bench.rows
        ],
    }


def _exported_json(bench: PeersBenchmark) -> dict | None:
    check = exported_check(bench)
    if check is None:
        return None
    row, error = check
    return {"configuration": row.label, "predicted_speedup": _predicted(row), "predicted_per_token_speedup": row.predicted_speedup,
            "predicted_whole_call_speedup": row.predicted_call_speedup, "speedup": row.speedup,
            "predicted_tokens_per_target_pass": bench.exported_tokens_per_pass, "tokens_per_target_pass": row.tokens_per_target_pass,
            "speedup_sd": row.speedup_sd, "error": error, "within_tolerance": abs(error) <= TOLERANCE, "tolerance": TOLERANCE}


def run_peers(
    plan_path,
    *,
    prompts_path=None,
    candidates_path=None,
    repeats: int = 3,
    new_tokens: int = 64,
    max_prompts: int | None = None,
    log=lambda line: None,
) -> PeersBenchmark:
    """Load the plan's models (or `candidates_path`'s), export the plan to HF for each drafter's
    K and predicted speedup, and race every configuration on the prompts (default: built-in
    prompts held out from profiling). `pipeline.stages.race_peers_of` plans first when there is
    no plan."""
    from polyplan.formats.plan import read_plan
    from polyplan.engines.export import export_from_files
    from polyplan.models.chain_candidates import ChainCandidates
    from polyplan.profiler.prompt_sets import encode_for, validation_prompt_set

    if repeats < 1 or new_tokens < 1:
        raise PolyplanError("--repeats and --new-tokens must be >= 1")
    plan = read_plan(plan_path)
    if not SamplingMode.parse(plan.sampling).greedy:
        raise PolyplanError(f"{plan_path}: sampling {plan.sampling!r}: bench peers compares greedy outputs; use a greedy plan")
    export = export_from_files(plan_path, "hf", candidates_path=candidates_path, in_process=True)
    raced = [(option.drafter,) for option in export.options if option.reason is None]  # each assisted drafter's model
    chain = ChainCandidates.from_plan(plan, models_yaml=candidates_path, also=raced, label=str(plan_path))
    prompts = validation_prompt_set(prompts_path, max_prompts=max_prompts)
    loaded = chain.load()
    members = loaded.by_name
    target = members[plan.target]
    eos = target.model.generation_config.eos_token_id
    counter = _ForwardClock(target.model, sync=lambda: None)  # counts the target's forward calls
    try:
        configs = peer_configs(plan, export, members, eos, new_tokens=new_tokens, counter=counter)
        bench = race_peers(configs, encode_for(prompts, loaded.tokenizer), repeats=repeats, new_tokens=new_tokens)
    finally:
        counter.remove()
    chosen = export.chosen.prediction if export.chosen is not None else None
    return dataclasses.replace(bench, overhead_note=export.overhead_note, call_note=export.call_note,
                               exported_tokens_per_pass=None if chosen is None else chosen.tokens_per_verification[0])
