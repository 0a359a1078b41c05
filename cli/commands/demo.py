"""`polyplan demo`: profile → recommend → validate on the embedded family, ending with one table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli.support import echo_json, fails_cleanly, log_line
from polyplan.cli.commands.options import (Alternatives, CacheDir, Candidates, NewTokens, PromptsPerKind, RawPrompts,
                                           ReportJson, ValidationRepeats)


@fails_cleanly
def demo(
    quick: Annotated[bool, typer.Option("--quick", help="Reduced profiling (a CI-sized demo); without --candidates, on the "
                                        "tiny family of `zoo train --quick`, trained once into the cache.")] = False,
    candidates: Candidates = None,
    prompts_per_kind: PromptsPerKind = 4,
    prompts: Annotated[Optional[Path], typer.Option(
        "--prompts", help="Prompt file (*.jsonl, e.g. Spec-Bench question.jsonl, or blank-line separated text): "
        "prompts 1, 3, 5, … profile, prompts 2, 4, 6, … validate (held out). Default: built-in prompts.")] = None,
    raw_prompts: RawPrompts = False,
    new_tokens: NewTokens = 128,
    repeats: ValidationRepeats = 3,
    top: Alternatives = 3,
    max_levels: Annotated[int, typer.Option("--max-levels", help="Longest chain, counting the target.")] = 4,
    out: Annotated[Path, typer.Option("--out", help="Folder for plan.json, the report and the plots.")] = Path("polyplan-demo"),
    cache_dir: CacheDir = None,
    threads: Annotated[Optional[int], typer.Option(
        "--threads", help="torch CPU threads (default: the machine's free cores at start, from the load average; the "
        "profile records them and validation uses the same).")] = None,
    json_output: ReportJson = False,
) -> None:
    """Profile the embedded family, recommend a chain, validate it against target-only decoding,
    the best two-model chain and the runners-up, and print one table with the report's paths."""
    from polyplan.cli.commands.progress import progress_bars
    from polyplan.profiler.threads import choose_threads
    from polyplan.cli.commands.validate import result_lines
    from polyplan.pipeline.demo import DemoSettings
    from polyplan.pipeline.stages import run_demo

    choice = choose_threads(threads)
    settings = DemoSettings(candidates=candidates, quick=quick, prompts_per_kind=prompts_per_kind, prompts=prompts,
                            raw_prompts=raw_prompts, new_tokens=new_tokens, repeats=repeats, top=top,
                            max_levels=max_levels, out=out, cache_dir=cache_dir)
    with progress_bars() as progress:  # on stderr, --json or not: the JSON alone goes to stdout
        result = run_demo(settings, profile_progress=progress.profile, validation_progress=progress.validation,
                          check_progress=progress.check, log=log_line, threads=choice)
    if json_output:
        echo_json(result.files.payload)
        return
    recommendation = result.recommendation
    best = recommendation.best
    found = None if recommendation.intervals is None else recommendation.intervals.of(best.chain)
    predicted = f"{best.exact_speedup:.2f}x" if found is None else found.speedup.text()
    ranking = "" if recommendation.intervals is None else recommendation.intervals.ranking_line() + "\n"
    typer.echo(
        f"profile {result.profile_path}: {result.profile_measured} entries measured, {result.profile_reused} reused "
        f"({result.profile_seconds:.0f} s); {choice.line}\n"
        f"plan {result.plan_path}: {best.label()} K = {best.blocks_label()}, predicted {predicted} "
        f"(exact model), {best.paper_speedup:.2f}x (Lemma 3.1)\n{ranking}"
    )
    # the plan's timing warnings are said once, among the validation's notes ("timing warning from the plan")
    if result.check_lines:
        typer.echo("\n".join(result.check_lines) + "\n")
    typer.echo("\n".join(result_lines(result.validation, result.files)))
    typer.echo(f"\ndemo finished in {result.wall_time_s:.0f} s")
