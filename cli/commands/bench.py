"""`polyplan bench …`: benchmarks that print ratios measured side by side (never asserted)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli.support import echo_json, fails_cleanly, log_line, warn_other_processor
from polyplan.formats.errors import PolyplanError
from polyplan.cli.commands.options import (Alternatives, CacheDir, Candidates, NewTokens, PlanCandidates, PromptsPerKind,
                                           RawPrompts, ValidationRepeats)

app = typer.Typer(help="Benchmarks printing side-by-side ratios measured in one run.", no_args_is_help=True)


def _prompt_option(value: str) -> tuple[int, list[str] | None]:
    """`--prompts`: a count, or a prompt file (its prompts' texts)."""
    if value.strip().isdigit():
        return int(value), None
    from polyplan.profiler.prompts import read_prompt_file

    texts = [prompt.text for prompt in read_prompt_file(value)]
    return len(texts), texts


@app.command("decoder")
@fails_cleanly
def decoder(
    target: Annotated[Optional[str], typer.Option("--target", help="Target model folder (default: a random 8-layer Llama).")] = None,
    draft: Annotated[Optional[str], typer.Option("--draft", help="Draft model folder (default: the random target's first layer).")] = None,
    prompts: Annotated[str, typer.Option(
        "--prompts", help="Number of prompts, or a prompt file (*.jsonl, e.g. Spec-Bench question.jsonl, or "
        "blank-line separated text; needs --target/--draft) whose prompts are run instead.")] = "4",
    raw_prompts: RawPrompts = False,
    prompt_length: Annotated[int, typer.Option("--prompt-length", help="Tokens per random prompt (random models only).")] = 16,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="New tokens per prompt.")] = 64,
    block_size: Annotated[int, typer.Option("--block-size", help="K: tokens drafted per round, both sides.")] = 4,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed runs per prompt and side.")] = 3,
    threads: Annotated[Optional[int], typer.Option("--threads", help="torch CPU threads (default: the machine's free cores at start).")] = None,
    device: Annotated[str, typer.Option("--device", help="torch device.")] = "cpu",
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Race polyplan's decoding loop against Hugging Face generate (plain and assisted), greedy."""
    from polyplan.formats import options
    from polyplan.models.devices import check_device
    from polyplan.profiler.locks import timing_lock
    from polyplan.profiler.threads import choose_threads, set_threads

    for option, value in (("--threads", threads), ("--prompt-length", prompt_length),
                          ("--max-new-tokens", max_new_tokens), ("--repeats", repeats)):
        options.at_least(value, 1, option)
    options.block_size(block_size, "--block-size")
    check_device(device)
    choice = choose_threads(threads)
    set_threads(choice)
    count, texts = _prompt_option(prompts)
    options.at_least(count, 1, "--prompts")
    from polyplan.engines.hf_generate import benchmark_json, report_lines, run_decoder_benchmark

    with timing_lock():
        bench = run_decoder_benchmark(target, draft, prompts=count, texts=texts, raw=raw_prompts, prompt_length=prompt_length,
                                      max_new_tokens=max_new_tokens, block_size=block_size, repeats=repeats, device=device)
    if json_output:
        echo_json(benchmark_json(bench))
    else:
        typer.echo("\n".join(report_lines(bench) + [choice.line]))


@app.command("peers")
@fails_cleanly
def peers(
    plan: Annotated[
        Optional[Path], typer.Option("--plan", help="plan.json (greedy) written by polyplan recommend. Default: "
                                     "profile and plan --candidates first (cached).")
    ] = None,
    prompts: Annotated[
        Optional[Path], typer.Option("--prompts", help="Prompt file (Spec-Bench question.jsonl: per-category tables). "
                                     "Default: built-in prompts held out from profiling.")
    ] = None,
    candidates: PlanCandidates = None,
    new_tokens: Annotated[int, typer.Option("--new-tokens", help="New tokens per prompt (EOS stops earlier).")] = 64,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed runs per prompt and configuration.")] = 3,
    max_prompts: Annotated[Optional[int], typer.Option("--max-prompts", help="Use only the first N prompts.")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", help="CPU threads of every engine (default: as the plan's "
                                         "profile was measured, else the machine's free cores at start).")] = None,
    engine: Annotated[str, typer.Option("--engine", help="hf (in this process) or llama.cpp (a real llama-server "
                                        "on 127.0.0.1; build it once with `polyplan engines build llama.cpp`).")] = "hf",
    clients: Annotated[Optional[str], typer.Option("--clients", help="llama.cpp only: race under load instead, at each of "
                                                   "these numbers of concurrent clients (e.g. 1,2,4): llama-server with -np N "
                                                   "slots, N clients sharing the prompts.")] = None,
    configs: Annotated[Optional[str], typer.Option("--configs", help="With --clients: race only the configurations whose "
                                                   "label contains one of these comma-separated words (the target alone, its "
                                                   "control and the plan's choice at each N are always raced).")] = None,
    stop_at_eos: Annotated[Optional[bool], typer.Option("--stop-at-eos/--past-eos", help="With --clients: each request ends "
                                                        "at the target's end of sequence (or after --new-tokens), as a server's "
                                                        "requests do, and is predicted so (the default); --past-eos: every "
                                                        "request decodes exactly --new-tokens.", show_default=False)] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Race another engine's configurations against polyplan's chain, greedy: HF generate (plain,
    assisted per drafter, prompt lookup), or llama-server (target alone, each GGUF drafter, its
    n-gram types, its default); with --clients, llama-server's configurations under load."""
    from polyplan.engines.hf_race import hf_race_lines
    from polyplan.formats.race import race_json
    from polyplan.pipeline.stages import race_peers_of
    from polyplan.profiler.threads import set_threads

    if engine not in ("hf", "llama.cpp"):
        raise PolyplanError(f"--engine: {engine!r} is not raced here (hf or llama.cpp; vLLM needs a GPU)")
    if configs is not None and clients is None:
        raise PolyplanError("--configs: narrows a race under load; add --clients (e.g. --clients 1,2,4)")
    if stop_at_eos is not None and clients is None:
        flag = "--stop-at-eos" if stop_at_eos else "--past-eos"
        raise PolyplanError(f"{flag}: says where the requests of a race under load end; add --clients (e.g. --clients 1,2,4)")
    if clients is not None:
        _load_race(plan, prompts, candidates, new_tokens, repeats, max_prompts, threads, engine, clients, json_output, configs,
                   stop_at_eos is not False)
        return
    if engine == "llama.cpp":
        race, lines, threads_line = _llama_cpp_race(plan, prompts, candidates, new_tokens, repeats, max_prompts, threads)
    else:
        choice = _plan_threads(plan, threads)
        if plan is not None:
            warn_other_processor(plan)  # the race compares with the plan's predictions
        set_threads(choice)
        race = race_peers_of(plan, prompts_path=prompts, candidates_path=candidates, repeats=repeats, new_tokens=new_tokens,
                             max_prompts=max_prompts, log=log_line)
        lines, threads_line = hf_race_lines, choice.line
    if json_output:
        echo_json(race_json(race))
    else:
        typer.echo("\n".join(lines(race) + [threads_line]))
    differ = [row for row in race.rows if race.engine == "hf" and row.category == "all" and row.first_difference]
    if differ:  # HF's greedy outputs must equal target-only's; a server's may part by llama.cpp's batch numerics
        raise PolyplanError(f"greedy outputs differ from target-only in {sum(row.runs - row.equal_outputs for row in differ)} "
                            f"run(s): {differ[0].label}: {differ[0].first_difference}")


@app.command("load")
@fails_cleanly
def load(
    seconds: Annotated[float, typer.Option("--seconds", help="How long the load runs (it then stops by itself; at most 4 h).")],
    cores: Annotated[int, typer.Option("--cores", help="Cores kept busy (one process each).")] = 1,
) -> None:
    """Keep CPU cores busy with matrix products for --seconds, then stop (a bounded, documented load).

    Each load process is one thread multiplying 256-by-256 matrices; it exits at its time limit,
    when this command ends, or when its parent dies. Prints the products each process ran.
    """
    from polyplan.pipeline.load import run_load_processes

    for index, report in enumerate(run_load_processes(seconds, cores), start=1):
        typer.echo(f"load process {index}: {report.products} matrix products in {report.seconds:.1f} s "
                   f"({report.products_per_second:.0f}/s)")


@app.command("loop")
@fails_cleanly
def loop(
    quick: Annotated[bool, typer.Option("--quick", help="Reduced profiling on the tiny quick family (as `demo --quick`).")] = False,
    candidates: Candidates = None,
    prompts_per_kind: PromptsPerKind = 4,
    new_tokens: NewTokens = 128,
    repeats: ValidationRepeats = 3,
    top: Alternatives = 3,
    cores: Annotated[int, typer.Option("--cores", help="Load processes of the steady and bursty shapes (one core each).")] = 1,
    shapes: Annotated[str, typer.Option("--shapes", help="Load shapes, a run each after the quiet one: steady, bursty, "
                                        "two-process (comma-separated).")] = "steady",
    out: Annotated[Path, typer.Option("--out", help="Folder for the runs (quiet/ and one per shape).")] = Path("polyplan-loop"),
    cache_dir: CacheDir = None,
    threads: Annotated[Optional[int], typer.Option("--threads", help="torch CPU threads (default: the machine's free cores "
                                                 "at start less the --cores the load will keep busy).")] = None,
) -> None:
    """Run profile -> recommend -> validate quiet, then under each load shape, and print per run
    and chain: predicted [interval], measured [CI], error, inside, and the ranking check."""
    from polyplan.cli.commands.progress import progress_bars
    from polyplan.profiler.threads import choose_threads, set_threads
    from polyplan.pipeline.demo import DemoSettings
    from polyplan.pipeline.load import check_cores, load_shape
    from polyplan.pipeline.under_load import loop_lines, run_load_loop

    names = tuple(name.strip() for name in shapes.split(",") if name.strip())
    if not names or len(set(names)) != len(names):
        raise PolyplanError(f"--shapes: give each load shape once, comma-separated, got {shapes!r}")
    reserved = max(load_shape(name, "--shapes").count(check_cores(cores)) for name in names)
    choice = choose_threads(threads, reserved=reserved)
    set_threads(choice)
    settings = DemoSettings(candidates=candidates, quick=quick, prompts_per_kind=prompts_per_kind, new_tokens=new_tokens,
                            repeats=repeats, top=top, out=out, cache_dir=cache_dir)
    with progress_bars() as progress:
        bench = run_load_loop(settings, cores=cores, shapes=names, log=log_line,
                              profile_progress=progress.profile, validation_progress=progress.validation)
    typer.echo("\n".join(loop_lines(bench) + [choice.line]))
    typer.echo(f"\nreports: {', '.join(str(run.result.files.report) for run in bench.runs)}")


@app.command("intervals")
@fails_cleanly
def intervals(
    plan: Annotated[Path, typer.Option("--plan", help="A plan.json; its profile's prompts are split (profile on more "
                                       "prompts than usual, e.g. 48, for a sharp check).")],
    split: Annotated[Optional[int], typer.Option("--split", help="Prompts in each of the profiling and new sets "
                                                 "(default: half the profile's prompts).")] = None,
    splits: Annotated[int, typer.Option("--splits", help="Random splits.")] = 100,
    top: Annotated[int, typer.Option("--top", help="The plan's best chains checked.")] = 6,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the splits and the bootstrap.")] = 0,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Check the plan's acceptance intervals on the profile's own prompts: split them at random
    into a profiling set and a new set, predict from the first, and count how often the
    interval holds the second's exact speedup (no model runs; latency held as profiled)."""
    import dataclasses

    from polyplan.formats import options
    from polyplan.formats.plan import read_plan
    from polyplan.pipeline.stages import plan_profile
    from polyplan.planner.exact.cost_model import ChainSettings
    from polyplan.planner.intervals.interval_coverage import coverage_lines, interval_coverage, nothing_to_check

    options.at_least(top, 1, "--top")
    planned = read_plan(plan)
    profile = plan_profile(planned)
    if profile is None:
        raise PolyplanError(f"{plan}: its profile {planned.profile.path} cannot be read (it was moved or deleted)")
    idle = nothing_to_check(profile, planned.sampling, split)
    if idle is not None:  # a valid plan: say why there is nothing to check, and succeed
        if json_output:
            echo_json({"chains": [], "note": idle})
        else:
            typer.echo(f"note: {idle}")
        return
    chains = [(item.chain, item.block_sizes, item.draft_policy) for item in planned.alternatives[:top]]
    result = interval_coverage(
        profile, chains, ChainSettings(planned.sampling, planned.search.context_length, planned.loop_overhead,
                                       planned.search.acceptance_model or "auto"),
        split=split, splits=splits, seed=seed,
    )
    if json_output:
        echo_json(dataclasses.asdict(result))
    else:
        typer.echo("\n".join(coverage_lines(result)))


def _llama_cpp_race(plan, prompts, candidates, new_tokens, repeats, max_prompts, threads):
    """`bench peers --engine llama.cpp` (`engines.llama_cpp.race`): the race, its lines, its threads' line."""
    from polyplan.cli.commands.progress import RaceLines
    from polyplan.engines.llama_cpp.race import llama_peers_lines, run_llama_peers
    from polyplan.profiler.threads import ThreadChoice

    if plan is None:
        raise PolyplanError("--engine llama.cpp: give --plan plan.json (profile and recommend a GGUF target first)")
    race = run_llama_peers(plan, prompts_path=prompts, candidates_path=candidates, threads=threads, repeats=repeats,
                           new_tokens=new_tokens, max_prompts=max_prompts, log=log_line, on_run=RaceLines())
    return race, llama_peers_lines, ThreadChoice(race.threads, race.threads_source).line


def _load_race(plan, prompts, candidates, new_tokens, repeats, max_prompts, threads, engine, clients, json_output, configs,
               stop_at_eos: bool = True) -> None:
    """`bench peers --engine llama.cpp --clients N,...` (`engines.llama_cpp.load_race`)."""
    from polyplan.cli.commands.progress import RaceLines
    from polyplan.formats.race import load_race_json
    from polyplan.planner.llama_cpp.under_load import parse_clients
    from polyplan.profiler.threads import ThreadChoice

    counts = parse_clients(clients, "--clients")
    if engine != "llama.cpp":
        raise PolyplanError(f"--clients: races llama-server under load; add --engine llama.cpp ({engine} serves one request at a time)")
    if plan is None:
        raise PolyplanError("--engine llama.cpp: give --plan plan.json (profile and recommend a GGUF target first)")
    from polyplan.engines.llama_cpp.load_race import load_race_lines, run_llama_load_race

    race = run_llama_load_race(plan, counts, prompts_path=prompts, candidates_path=candidates, threads=threads, repeats=repeats,
                               new_tokens=new_tokens, max_prompts=max_prompts, log=log_line, on_run=RaceLines(),
                               only=None if configs is None else _words(configs, "--configs"), stop_at_eos=stop_at_eos)
    if json_output:
        echo_json(load_race_json(race))
    else:
        typer.echo("\n".join(load_race_lines(race) + [ThreadChoice(race.threads, race.threads_source).line]))


def _words(text: str, option: str) -> list[str]:
    """The comma-separated, non-empty words of `text`."""
    words = [word.strip() for word in text.split(",") if word.strip()]
    if not words:
        raise PolyplanError(f"{option}: give at least one word, e.g. {option} draft-simple,ngram-simple")
    return words


def _plan_threads(plan: Path | None, threads: int | None):
    """The race's threads: --threads, else those the plan's profile was measured with (its
    prediction holds there), else the machine's free cores (`profiler.threads`)."""
    from polyplan.formats.plan import read_plan
    from polyplan.profiler.threads import choose_threads, plan_threads

    recorded = plan_threads(read_plan(plan).device) if plan is not None and threads is None else None
    return choose_threads(threads, recorded, recorded_by="the plan's profile")

