"""`polyplan recommend`: the best chain and block sizes, from a profile or from the models.

With `--profile` alone it reads numbers only (no models, no torch). With `--candidates` it
first profiles whatever the profile (`--profile`, else the user cache) lacks, then plans;
torch is imported only then. With `--profile` and `--prompts` it re-prices the profile for those
prompts first (`pipeline.reprice`: acceptance measured anew, timings kept), then plans for them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli.support import echo_json, fails_cleanly, log_line
from polyplan.cli.commands.options import RawPrompts
from polyplan.formats.errors import PolyplanError
from polyplan.planner.intervals.prediction_interval import stretch_words
from polyplan.planner.search import ChainPlan, Recommendation
from polyplan.formats.sampling import SamplingMode


def _verdicts(plan: ChainPlan) -> str:
    return ", ".join(f"{model}: {verdict}" for model, verdict in plan.insertion_verdicts) or "-"


def _limit_line(result: Recommendation) -> list[str]:
    """The physical limit: what a free drafter that is always right would give (nothing when
    the recommendation has none)."""
    limit = result.limit
    if limit is None:
        return []
    if limit.block_size == 0:
        return [f"physical limit: 1.00x: even a free drafter that is always right loses to {result.target} alone on this "
                "machine (verifying K + 1 tokens costs more than K + 1 steps)"]
    costs = "" if result.overhead is None else ", with the loop's costs"
    where = ""
    if limit.extrapolated:
        timed = limit.timed()
        where = (f"; width {limit.block_size + 1} lies beyond the widest timed ({limit.measured_block_size + 1}), "
                 "extrapolated as the exact model does for the chains that hand it that many tokens"
                 + ("" if timed is None else f"; {timed[1]:.2f}x at K = {timed[0]} within the widths timed"))
    return [f"physical limit: {limit.text()} (a free drafter that is always right: K + 1 tokens per {result.target} "
            f"pass of width K + 1{costs}{where})"]


def _share(result: Recommendation, speedup: float) -> str:
    return "" if result.limit is None else f"{result.limit.share(speedup):.0%}"


def _best_line(result: Recommendation) -> str:
    """`best: …`: the plan's chain with its interval and share of the limit, or, when no chain
    beats the target alone, "don't speculate" beside the best chain there is."""
    intervals = result.intervals

    def speed(plan: ChainPlan) -> str:
        found = None if intervals is None else intervals.of(plan.chain)
        text = f"{plan.exact_speedup:.3f}x" if found is None else f"{plan.exact_speedup:.3f}x [{found.speedup.low:.2f}, {found.speedup.high:.2f}]"
        share = _share(result, plan.exact_speedup)
        return text if not share else f"{text}, {share} of the limit"

    best = result.best
    if len(best.chain) == 1:
        chain = result.best_chain
        other = "no chain could be planned" if chain is None else \
            f"best chain {chain.label()} (K = {chain.blocks_label()}) {speed(chain)}"
        return f"best: don't speculate ({best.chain[0]} only); {other}"
    mean = None if result.workload is None else result.workload.of(best.chain)
    workload = "" if mean is None else (f"; for the workload's mean [{mean.speedup.low:.2f}, {mean.speedup.high:.2f}] "
                                        "(the interval above is for a new set of as many prompts as the profile's)")
    return (
        f"best: {best.label()}  K = {best.blocks_label()}  exact {speed(best)} "
        f"(forwards/token {[round(f, 3) for f in best.exact.forwards_per_token]}, "
        f"tokens/verification {[round(t, 3) for t in best.exact.tokens_per_verification]}){workload}"
    )


def table_lines(result: Recommendation) -> list[str]:
    """The ranked table and the insertion lines."""
    intervals = result.intervals
    level = "" if intervals is None else f" ({intervals.level:.0%} interval)"
    width = max([14] + [len(plan.blocks_label()) for plan in result.ranked])  # "[3 adaptive 1..8]" is wider than a list
    header = (
        f"{'rank':>4}  {'exact' + level:<26}  {'limit':>5}  {'paper':>8}  {'block sizes':<{width}} {'paper phi_i/N':<28} "
        f"{'Thm 3.2 per insertion':<34} chain"
    )
    overhead = result.overhead
    lines = [
        f"Chains for target {result.target} on {result.device} (sampling {result.sampling}, "
        f"max {result.max_levels} levels, K in 1..{result.k_max}); speedups over {result.target} alone",
        "exact model with the decoding loop's own cost: "
        + (f"{overhead.per_step_s * 1e6:.0f} us per step, {overhead.per_round_s * 1e6:.0f} us per verification round"
           if overhead is not None else "none recorded in the profile (forward passes only)")
        + ("; acceptance from the measured agreement runs" if result.acceptance_model == "runs"
           else "; acceptance i.i.d. at each pair's rate alpha"),
        *_limit_line(result),
        header,
    ]
    for rank, plan in enumerate(result.ranked, start=1):
        phi = "[" + ", ".join(f"{value:.3g}" for value in plan.paper.phi_per_token) + "]"
        found = None if intervals is None else intervals.of(plan.chain)
        exact = f"{plan.exact_speedup:.3f}x" if found is None else found.speedup.text()
        lines.append(f"{rank:>4}  {exact:<26}  {_share(result, plan.exact_speedup):>5}  {plan.paper_speedup:>7.3f}x  "
                     f"{plan.blocks_label():<{width}} {phi:<28} {_verdicts(plan):<34} {plan.label()}")
    lines += ["", _best_line(result), *_padding_lines(result.best), "", "Why each model is in or out:"]
    lines += [f"  {note.line}" for note in result.insertions] or ["  (no candidate drafters)"]
    if result.insertion_triples:
        lines += ["", "Insertions (Theorem 3.2: its conditions, lhs vs rhs with alpha = the K the inserted model verifies, "
                      "guarantee a gain when the assumptions hold and c = ceil(E[L1]'/E[L2]') >= 2; "
                      "Lemma 3.1: eq.2 - eq.1; the exact model with vs without):"]
        lines += [f"  {triple.line()}" for triple in result.insertion_triples]
    if intervals is not None:
        lines += ["", intervals.ranking_line(),
                  f"  (bootstrap: {intervals.resamples} resamples of the latency timings ({intervals.latency_source}) and "
                  f"the acceptance data ({intervals.acceptance_source}) for a new prompt set{stretch_words(intervals.prompt_stretch)}; "
                  "block sizes held at their chosen values)"]
        lines += [f"  widened for timing health: {line}" for line in intervals.widened]
    lines += warning_lines(result.warnings)
    return lines


def _padding_lines(plan: ChainPlan) -> list[str]:
    """One line per verifier whose passes the plan pads (its T(k) is not monotone)."""
    return [
        f"padded: {name} verifies " + ", ".join(f"{k} tokens at width {width}" for k, width in widths.pads)
        + " (cheaper there: its T(k) is not monotone)"
        for name, widths in zip(plan.chain, plan.verify_widths) if widths.pads
    ]


def warning_lines(warnings) -> list[str]:
    """The timing warnings, one `warning:` line each (nothing when there is none)."""
    if not warnings:
        return []
    return ["", "Timing warnings (the predictions above may not hold on this machine):"] + [f"  warning: {line}" for line in warnings]


@fails_cleanly
def recommend(
    profile: Annotated[Optional[Path], typer.Option(
        "--profile", help="Profile JSON. With --candidates: resumed and completed (default: the user cache).")] = None,
    candidates: Annotated[Optional[Path], typer.Option(
        "--candidates", help="models.yaml: profile what is missing, then plan.")] = None,
    max_levels: Annotated[int, typer.Option("--max-levels", help="Longest chain, counting the target.")] = 4,
    k_max: Annotated[Optional[int], typer.Option(
        "--k-max", help="Search block sizes 1..k_max (default: up to the widest width the profile timed, at least "
        "8).")] = None,
    search: Annotated[str, typer.Option("--search", help="Block-size search: auto, grid or optuna.")] = "auto",
    sampling: Annotated[Optional[str], typer.Option(
        "--sampling", help="Profile sampling key: 'greedy' or 't<temperature>' (default: greedy; with --profile "
        "alone, the profile's own mode when it has no greedy entries).")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of optuna's TPE sampler.")] = 0,
    out: Annotated[Optional[Path], typer.Option("--out", help="Where to write the plan JSON.")] = Path("plan.json"),
    prompts: Annotated[
        Optional[Path], typer.Option("--prompts", help="With --candidates: prompt file to profile with (default: the one --profile was measured on, else built-in). "
                                     "With --profile alone: re-price the profile for these prompts (acceptance measured anew on them, "
                                     "its timings kept; written to --repriced-out), then plan for them.")
    ] = None,
    repriced_out: Annotated[Optional[Path], typer.Option(
        "--repriced-out", help="With --profile and --prompts: where the re-priced profile goes (default: next to --profile, "
        "<profile stem>.<prompt file stem>.json; never over --profile).")] = None,
    raw_prompts: RawPrompts = False,
    cache_dir: Annotated[Optional[Path], typer.Option(
        "--cache-dir", help="Profile cache folder (default: $POLYPLAN_CACHE_DIR or ~/.cache/polyplan).")] = None,
    device: Annotated[Optional[str], typer.Option("--device", help="With --candidates: put every model on this device.")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", help="With --candidates or --prompts: torch CPU threads (default: those --profile was timed with, else the machine's free cores at start).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the plan as one JSON object.")] = False,
    resamples: Annotated[int, typer.Option(
        "--resamples", help="Bootstrap resamples for each predicted speedup's 95% interval (0: none).")] = 200,
    no_check: Annotated[bool, typer.Option(
        "--no-check", help="With --candidates or --prompts: skip the self-check (a short run of the top chains that fits the "
        "model's error on this machine); the intervals then ignore it.")] = False,
    budget: Annotated[Optional[str], typer.Option(
        "--budget", help="With --candidates: the wall time the command may take, e.g. 5m, 90s, 1h30m (default: "
        f"{DEFAULT_BUDGET}). After the latency curves the acceptance is measured on the prompts that fit beside the "
        "smallest self-check's estimate, decoded runs while they fit, and the self-check takes its 10 % of the "
        "profile's time within what is left; what it "
        "left out is printed. A budget too small for the target alone says the least it needs.")] = None,
    new_tokens: Annotated[Optional[int], typer.Option(
        "--new-tokens", help="The answer length the plan is for: acceptance is read over the first N tokens of each "
        "profiled continuation (it changes along an answer; default: all the profile measured). validate then "
        "decodes N tokens by default.")] = None,
    concurrency: Annotated[str, typer.Option(
        "--concurrency", help="After the plan, llama-server's best configuration at each number of concurrent requests, "
        "comma-separated (e.g. 1,2,4), priced as `polyplan export --engine llama.cpp` prices it (default 1: the plan "
        "alone, as before).")] = "1",
) -> None:
    """Rank every chain of the profiled models with its best block sizes and write the plan.

    Give --profile (numbers only), --candidates (profile what is missing, then plan), or both
    (the profile file is resumed and completed); --profile with --prompts re-prices the profile
    for those prompts (acceptance only, its timings kept), then plans for them.
    """
    _check_up_front(profile, candidates, max_levels, k_max, seed, out, prompts, raw_prompts, resamples, cache_dir, device, threads,
                    new_tokens, repriced_out)
    parsed_budget = _budget(budget, candidates)
    clients = _clients(concurrency, out)
    mode = SamplingMode.parse(sampling or "greedy", "--sampling")
    options = dict(max_levels=max_levels, k_max=k_max, block_sizes=search, sampling=mode.key, seed=seed, resamples=resamples,
                   new_tokens=new_tokens)
    check_lines: tuple[str, ...] = ()
    if candidates is None and prompts is not None:
        choice, repriced, recommended = _reprice(profile, prompts, out, repriced_out, threads, options, raw=raw_prompts,
                                                 check=not no_check)
        result, plan, check_lines = recommended.recommendation, recommended.plan, recommended.check_lines
        if not json_output:
            typer.echo(f"re-priced profile {repriced.path}: {len(repriced.measured)} entries measured, {len(repriced.reused)} reused, "
                       f"for {repriced.prompts} prompts of {repriced.prompt_source}; kept from {repriced.original}: "
                       f"{', '.join(repriced.kept)}; {choice.line}")
    elif candidates is None:
        result, plan = _plan_profile(profile, out, options, sampling)
    else:
        choice, recommended = _recommend_candidates(candidates, out, profile, mode, prompts, cache_dir, device, threads, options,
                                                    raw=raw_prompts, check=not no_check, budget=parsed_budget)
        result, plan, check_lines, profiled = (recommended.recommendation, recommended.plan, recommended.check_lines,
                                               recommended.profiled)
        if not json_output:
            typer.echo(f"profile {profiled.path}: {profiled.measured} entries measured, {profiled.reused} reused "
                       f"{profiled.stages_text}; {choice.line}")
    under_load = None if clients is None else _under_load(out, clients, candidates)  # before printing: a refusal is its one line
    if json_output:
        from polyplan.formats.plan import encode_plan

        payload = encode_plan(plan)  # the plan as saved to --out (profile digest included)
        if under_load is not None:
            from polyplan.engines.load_plan import load_json

            payload = {**payload, "under_load": load_json(*under_load)}  # printed, not saved: the plan file is one request's
        echo_json(payload)
        return
    from polyplan.planner.intervals.width import wide_interval_lines

    typer.echo("\n".join(table_lines(result)))
    if under_load is not None:
        typer.echo("\n".join(_under_load_lines(*under_load)))
    if check_lines:
        typer.echo("\n" + "\n".join(check_lines))
    wide = wide_interval_lines(plan)
    if wide:
        typer.echo("\n" + "\n".join(f"wide interval: {line}" for line in wide))
    if out is not None:
        typer.echo(f"\nwrote {out}")


def _plan_profile(profile: Path | None, out: Path | None, options: dict, sampling: str | None):
    """Plan from the numbers alone (no models, no torch): (result, the plan). The plan keeps the
    models.yaml record the profile holds (None for a profile made before it kept one), so
    `generate --plan` and `validate` find the models. Without `--sampling`, a profile with no
    greedy entries is planned for the mode it has (`planner.profile_sampling`), with a note."""
    from polyplan.formats.profile import read_profile
    from polyplan.planner.plan_builder import planned_from_profile
    from polyplan.planner.profile_sampling import default_sampling
    from polyplan.planner.intervals.sample_size import profile_warning

    if profile is None:
        raise PolyplanError("--profile: give a profile JSON, or --candidates models.yaml to profile the models first")
    profiled_numbers = read_profile(profile)
    key, note = default_sampling(profiled_numbers, sampling)
    options = {**options, "sampling": key}
    record = profiled_numbers.profiler.candidates if profiled_numbers.profiler is not None else None
    planned = planned_from_profile(profiled_numbers, out, profile_path=str(profile),
                                   candidates=dict(record) if record is not None else None, **options)
    if note is not None:  # once planned: a run that fails prints its one error line only
        typer.echo(f"note: {note}", err=True)
    warning = profile_warning(profiled_numbers)
    if warning is not None:
        typer.echo(f"warning: {warning}", err=True)
    return planned.recommendation, planned.plan


def _check_up_front(profile, candidates, max_levels, k_max, seed, out, prompts, raw_prompts, resamples, cache_dir, device, threads,
                     new_tokens=None, repriced_out=None) -> None:
    """Everything that can be wrong with the options, before a profile is read or measured."""
    from polyplan.formats import options
    from polyplan.formats.outputs import check_output_file

    options.at_least(max_levels, 1, "--max-levels")
    if k_max is not None and k_max >= 1:  # below 1 the planner says why
        options.block_size(k_max, "--k-max")
    options.seed(seed)
    options.at_least(new_tokens, 1, "--new-tokens")
    if resamples != 0 and resamples < 20:
        raise PolyplanError(f"--resamples: must be 0 (no intervals) or >= 20, got {resamples}")
    if repriced_out is not None and (candidates is not None or prompts is None):
        raise PolyplanError("--repriced-out: only used with --profile and --prompts without --candidates (it names where the "
                            "re-priced profile goes); drop it")
    if candidates is None and prompts is not None:
        if profile is None:
            raise PolyplanError("--prompts: give --profile to re-price it for these prompts, or --candidates models.yaml to profile them")
        options.unused_without("--candidates", [("--device", device), ("--cache-dir", cache_dir)],
                               "re-pricing keeps the profile's models, device and file")
        options.at_least(threads, 1, "--threads")
        if repriced_out is not None:
            check_output_file(repriced_out, "--repriced-out", inputs=[("--profile", profile), ("--prompts", prompts)])
    elif candidates is None:
        unused = [("--prompts", prompts), ("--raw-prompts", raw_prompts or None), ("--threads", threads), ("--device", device),
                  ("--cache-dir", cache_dir)]
        options.unused_without("--candidates", unused, "recommend --profile reads numbers only, it measures nothing")
    else:
        options.at_least(threads, 1, "--threads")
        if profile is not None:
            check_output_file(profile, "--profile", inputs=[("--candidates", candidates), ("--prompts", prompts)])
    if out is not None:
        check_output_file(out, "--out", inputs=[("--profile", profile), ("--candidates", candidates), ("--prompts", prompts),
                                                ("--repriced-out", repriced_out)])
    if device is not None and candidates is not None:
        from polyplan.models.devices import check_device

        check_device(device)


def _clients(text: str, out: Path | None) -> tuple[int, ...] | None:
    """--concurrency read (None: one request, the plan alone); the section under load exports
    the plan written to --out."""
    from polyplan.planner.llama_cpp.under_load import parse_clients

    clients = parse_clients(text, "--concurrency")
    if clients == (1,):
        return None
    if out is None:
        raise PolyplanError("--concurrency: the section under load exports the plan written to --out; give --out")
    return clients


def _under_load(out: Path, clients: tuple[int, ...], candidates: Path | None):
    """(the llama.cpp export of the plan at `out`, its plan under load), priced as `polyplan
    export --engine llama.cpp --concurrency` prices it (`engines.export.export_from_files`)."""
    from polyplan.engines.export import export_from_files
    from polyplan.engines.load_plan import models_yaml, plan_under_load

    try:
        export = export_from_files(out, "llama.cpp", log=log_line, clients=clients)
    except PolyplanError as error:
        raise PolyplanError(f"--concurrency: llama-server cannot serve this plan ({error}); {out} is written, for one request") from None
    return export, plan_under_load(export, clients, models_yaml(out, candidates))


def _under_load_lines(export, under_load) -> list[str]:
    """The section under load after the plan: how it was priced and the plan per load."""
    from polyplan.engines.load_plan import load_lines

    lines = ["", "polyplan's own decoder (generate, validate) serves one request at a time: the plan above is for one request; "
                 "under load, llama-server as `polyplan export --engine llama.cpp` prices it:"]
    lines += [f"  ({note})" for note in export.ranking_notes]
    return lines + load_lines(export, under_load)


DEFAULT_BUDGET = "30m"  # a guard against runaway profiling of large models; the shipped family needs a few minutes


def _budget(text: str | None, candidates):
    """--budget read (the default with --candidates; refused without it, where nothing is measured)."""
    if candidates is None:
        if text is not None:
            raise PolyplanError("--budget: only used with --candidates (it bounds the profiling); drop it")
        return None
    from polyplan.profiler.budget import parse_budget  # the profiler imports torch: only when profiling

    return parse_budget(DEFAULT_BUDGET if text is None else text)


def _recommend_candidates(candidates, out, profile, mode: SamplingMode, prompts, cache_dir, device, threads, options, *,
                          raw=False, check=True, budget=None):
    """Profile what is missing for the sampling `mode`, then plan (torch is imported only here):
    (the `ThreadChoice` it timed with, the recommendation). Progress goes to stderr, `--json` or not."""
    from polyplan.cli.commands.progress import progress_bars
    from polyplan.pipeline.stages import recommend_candidates
    from polyplan.profiler.profile_cache import resumed_threads
    from polyplan.profiler.prompt_sets import named_prompt_set
    from polyplan.profiler.threads import choose_threads, set_threads

    # a --profile is resumed as it was measured: its threads and prompts unless given (other ones would re-measure it all);
    # a new one is timed on the machine's free cores, as `polyplan profile` would
    choice = choose_threads(threads, resumed_threads(profile))
    set_threads(choice)
    with progress_bars() as progress:
        return choice, recommend_candidates(
            candidates, out, profile_path=profile, prompts=named_prompt_set(prompts, raw=raw), cache_dir=cache_dir,
            device=device, temperature=mode.temperature, progress=progress.profile, check=check,
            check_progress=progress.check, log=log_line, budget=budget, **options,
        )



def _reprice(profile, prompts, out, repriced_out, threads, options, *, raw=False, check=True):
    """Re-price `profile` for `prompts`, then plan (`pipeline.reprice.recommend_repriced`; torch is
    imported only here): (the `ThreadChoice`, the `Repriced`, the recommendation). The threads are
    those the profile was timed with unless given. Progress goes to stderr, `--json` or not."""
    from polyplan.cli.commands.progress import progress_bars
    from polyplan.pipeline.reprice import recommend_repriced
    from polyplan.profiler.profile_cache import resumed_threads
    from polyplan.profiler.prompt_sets import prompt_set
    from polyplan.profiler.threads import choose_threads, set_threads

    prompt_file = prompt_set(prompts, raw=raw)  # a missing or empty file fails before anything loads
    choice = choose_threads(threads, resumed_threads(profile))
    set_threads(choice)
    with progress_bars() as progress:
        repriced, recommended = recommend_repriced(
            profile, prompt_file, out, repriced_out=repriced_out, check=check, progress=progress.profile,
            check_progress=progress.check, log=log_line, **options,
        )
    return choice, repriced, recommended
