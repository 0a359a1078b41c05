"""`polyplan bench peers` against HF transformers' own speculative decoding (`engines.race`).

`run_hf_race` races target-only HF `generate`, HF assisted generation and prompt lookup at the
export's K, and polyplan's plan, greedy on the same prompts; the exported configuration is judged
by its whole-call prediction within `TOLERANCE`. docs/engines.md, "`polyplan bench peers`".
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import torch

from polyplan.decoder.chain import generate
from polyplan.decoder.sampling import Sampling
from polyplan.engines.hf_generate import configure_assistant, hf_generate
from polyplan.engines.hf_overhead import ForwardClock
from polyplan.engines.race import Contender, RaceRun, Timed, category_of, race, race_rows
from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import PlanFile
from polyplan.formats.race import Race, RaceRow
from polyplan.formats.sampling import SamplingMode
from polyplan.planner.engine_export import EngineExport
from polyplan.planner.exact.whole_call import CallCount, whole_call_speedup
from polyplan.profiler.prompts import EncodedPrompt

BASELINE = "target only (HF generate)"
TOLERANCE = 0.10  # how far the exported HF configuration's speedup may lie from its prediction


def _hf_contenders(plan: PlanFile, export: EngineExport, members, eos, *, new_tokens: int,
                  counter: ForwardClock) -> tuple[Contender, ...]:
    """The baseline, HF assisted per loadable drafter, HF prompt lookup, polyplan's chain;
    `counter` counts the target's passes."""
    target = members[plan.target].model
    pad = target.generation_config.pad_token_id
    pad = pad if pad is not None else 0

    def hf(**extra) -> Callable[[Sequence[int]], Timed]:
        def run(prompt: Sequence[int]) -> Timed:
            before, began = counter.calls, time.perf_counter()
            tokens = hf_generate(target, prompt, max_new_tokens=new_tokens, eos=eos, pad=pad, **extra)
            return Timed(tuple(tokens), time.perf_counter() - began, counter.calls - before)

        return run

    contenders = [Contender(BASELINE, run=hf(), call=export.baseline_call)]
    for option in export.options:
        if option.reason is not None:
            continue
        if option.method == "ngram":
            label, run = f"HF prompt lookup {option.drafter} K={option.block_size}", hf(
                prompt_lookup_num_tokens=option.block_size, max_matching_ngram_size=option.ngram_sizes[1])
        else:
            draft = getattr(members[option.drafter], "model", None)
            if draft is None:
                continue
            configure_assistant(draft, option.block_size)
            label, run = f"HF assisted {option.drafter} K={option.block_size}", hf(assistant_model=draft)
        chosen = option is export.chosen
        passes = option.prediction.tokens_per_verification[0] if option.prediction is not None else None
        contenders.append(Contender(label, predicted_speedup=option.speedup, exported=chosen, run=run, call=option.call,
                                    tolerance=TOLERANCE if chosen else None, predicted_tokens_per_pass=passes))
    chain = [members[name] for name in plan.chain]

    def ours(prompt: Sequence[int]) -> Timed:
        began = time.perf_counter()
        result = generate(chain, list(prompt), max_new_tokens=new_tokens, block_sizes=list(plan.block_sizes),
                          sampling=Sampling(temperature=0.0), eos_token_id=eos, draft_policy=plan.best.draft_policy)
        return Timed(tuple(result.token_ids), time.perf_counter() - began, result.levels[0].forward_passes)

    label = "polyplan " + " > ".join(plan.chain) + (f" K={plan.best.blocks_label()}" if plan.block_sizes else "")
    return (*contenders, Contender(label, predicted_speedup=plan.best.exact.speedup, run=ours))


def race_hf(contenders: Sequence[Contender], prompts: Sequence[EncodedPrompt], *, repeats: int, new_tokens: int,
            notes: tuple[tuple[str, str], ...] = ()) -> Race:
    """Race `contenders` (the first is the baseline) on `prompts`: rows per category, then
    overall ("all"), each HF row with its whole-call prediction."""
    if repeats < 1 or new_tokens < 1:
        raise PolyplanError("--repeats and --new-tokens must be >= 1")
    if not prompts:
        raise PolyplanError("--prompts: no prompts")
    runs, failures = race(contenders, prompts, repeats=repeats, warm_up=True)
    categories = (*dict.fromkeys(category_of(prompt.prompt.kind) for prompt in prompts), "all")
    rows = [row for category in categories for row in race_rows(contenders, runs, failures, category=category, pooled=True)]
    by_label = {contender.label: contender for contender in contenders}
    base = contenders[0]
    for index, row in enumerate(rows):
        call = by_label[row.label].call
        if call is not None and base.call is not None and row.label != base.label and row.failure is None:
            calls = [_calls(runs, prompts, label, row.category) for label in (base.label, row.label)]
            rows[index] = dataclasses.replace(row, predicted_call_speedup=whole_call_speedup(base.call, call, *calls))
    return Race("hf", tuple(rows), len(prompts), new_tokens, repeats, torch.get_num_threads(),
                notes=tuple((name, line) for name, line in notes if line))


def _calls(runs: Sequence[RaceRun], prompts: Sequence[EncodedPrompt], label: str, category: str) -> list[CallCount]:
    """`label`'s timed calls in `category` ("all": every one): its prompt's tokens and what it emitted."""
    return [CallCount(len(prompts[run.prompt].ids), len(run.tokens)) for run in runs
            if run.label == label and category in ("all", run.category)]


def hf_race_lines(race: Race) -> list[str]:
    """The tables `polyplan bench peers` prints: per category, then overall with predictions."""
    lines = [f"{race.prompts} prompts x {race.repeats} repeats, greedy, {race.new_tokens} new tokens max, torch threads "
             f"{race.threads}; configurations interleaved round-robin per prompt; speedup = tokens/s over target-only (Spec-Bench)"]
    width = max([len("configuration")] + [len(row.label) for row in race.rows])  # no label is cut
    for category in dict.fromkeys(row.category for row in race.rows):
        lines += ["", f"[{category}]", f"{'configuration':<{width}} {'tokens/s':>9} {'speedup ± sd':>14} {'tokens/pass':>11} "
                                       f"{'per-token':>9} {'whole-call':>10} {'error':>7}"]
        for row in (r for r in race.rows if r.category == category):
            shown = category == "all"
            per_token = "-" if row.predicted_speedup is None or not shown else f"{row.predicted_speedup:.2f}x"
            whole = "-" if row.predicted_call_speedup is None or not shown else f"{row.predicted_call_speedup:.2f}x"
            error = "-" if row.error is None or not shown else f"{row.error:+.0%}"
            lines.append(f"{row.label:<{width}} {row.tokens_per_s:>9.1f} {_speed(row, race):>14} "
                         f"{row.tokens_per_target_pass:>11.2f} {per_token:>9} {whole:>10} {error:>7}")
    lines += ["", "predicted: per-token = the cost model per decoded token (the long-generation limit, what polyplan export "
                  "prints); whole-call = per prompt, HF's per-call cost + prefill of the prompt (target, and the assistant's) "
                  "+ the tokens each call emitted x the per-token cost, summed over these prompts as measured (HF rows); "
                  "error = predicted / measured - 1, from whole-call where there is one"]
    lines += [line for line in (race.note("whole_call"),) if line]
    if race.note("hf_overhead"):
        lines += ["", f"HF predictions' {race.note('hf_overhead')}"]
    lines += ["", _exported_line(race)]
    overall = [row for row in race.rows if row.category == "all"]
    lines += [f"{row.label}: {row.failure}" for row in overall if row.failure]
    differ = [row for row in overall if row.first_difference]
    if differ:
        lines += ["", f"OUTPUTS DIFFER in {sum(row.runs - row.equal_outputs for row in differ)} run(s) (greedy outputs must all "
                      "equal target-only):"]
        lines += [f"  ! {row.label}: {row.first_difference}" for row in differ]
    else:
        lines += ["", "greedy outputs: identical in every configuration"]
    return lines


def _speed(row: RaceRow, race: Race) -> str:
    return f"{row.speedup:.2f}x" + (f" ± {row.speedup_sd:.2f}" if race.repeats > 1 else "")


def exported_row(race: Race) -> RaceRow | None:
    """The exported HF configuration's overall row; None when none was exported or raced."""
    return next((row for row in race.rows if row.category == "all" and row.exported and row.predicted is not None), None)


def _exported_line(race: Race) -> str:
    """Is the exported HF configuration's measured speedup within `TOLERANCE` of its prediction?"""
    row = exported_row(race)
    if row is None:
        return "exported HF configuration: none raced (no drafter HF can load)"
    spread = f" (sd of the measured ratio over repeats {row.speedup_sd:.2f})" if race.repeats > 1 else ""
    passes = "" if row.predicted_tokens_per_pass is None else (
        f"; tokens per target pass predicted {row.predicted_tokens_per_pass:.2f}, measured {row.tokens_per_target_pass:.2f}")
    which = "whole-call" if row.predicted_call_speedup is not None else "per-token (no whole-call model)"
    per_token = "" if row.predicted_call_speedup is None else f" (per-token limit {row.predicted_speedup:.2f}x)"
    return (f"exported HF configuration {row.label}: predicted {row.predicted:.2f}x {which}{per_token}, measured "
            f"{row.speedup:.2f}x{spread}, error {row.error:+.1%}: {row.verdict}{passes}")


def run_hf_race(plan_path, *, prompts_path=None, candidates_path=None, repeats: int = 3, new_tokens: int = 64,
                max_prompts: int | None = None, log=lambda line: None) -> Race:
    """Race the plan's HF export against polyplan's plan on the prompts (default: built-in
    prompts held out from profiling)."""
    from polyplan.engines.export import export_from_files
    from polyplan.formats.plan import read_plan
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
    target = loaded.by_name[plan.target]
    counter = ForwardClock(target.model, sync=lambda: None)  # counts the target's forward calls
    try:
        contenders = _hf_contenders(plan, export, loaded.by_name, target.model.generation_config.eos_token_id,
                                   new_tokens=new_tokens, counter=counter)
        return race_hf(contenders, encode_for(prompts, loaded.tokenizer), repeats=repeats, new_tokens=new_tokens,
                       notes=(("hf_overhead", export.overhead_note), ("whole_call", export.call_note)))
    finally:
        counter.remove()
