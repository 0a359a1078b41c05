"""`polyplan validate`: run a plan's chains side by side and compare measured with predicted."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli.support import echo_json, fails_cleanly
from polyplan.cli.commands.options import PlanCandidates, RawPrompts, ReportJson

DEFAULT_NEW_TOKENS = 128  # validate's answer length when neither --new-tokens nor the plan gives one
DEFAULT_OUT = "polyplan-validation"  # a name of its own: run from the repository root, never the package's validation/


def result_lines(validation, files, said: str | None = None) -> list[str]:
    """The table, the headline and where the report went; the notes but `said` (a warning
    already printed on stderr before the run, kept in the report's notes)."""
    from polyplan.validation.categories import category_lines
    from polyplan.validation.reporting import check_line, table_lines

    lines = table_lines(validation)
    lines += ["", "checks:"] + [f"  {check_line(check)}" for check in validation.headline.checks]
    lines += [f"note: {note}" for note in validation.notes if note != said]
    # the recommended chain's breakdown (the first other chain's when target-only is recommended)
    shown = next((item for item in validation.categories if item.chain == validation.headline.record.recommended),
                 validation.categories[0] if validation.categories else None)
    if shown is not None and len(shown.rows) > 2:  # more than one kind besides "all"
        lines += ["", *category_lines(shown.chain, shown.rows)]
    lines += ["", f"report: {files.report}", f"json:   {files.json}"]
    lines += [f"plot:   {path}" for _, path in files.plots]
    return lines


def _answer_length(plan: Path, new_tokens: int | None) -> int:
    """--new-tokens, else the answer length the plan was made for (`recommend --new-tokens`),
    else 128; one note when the plan was made for another length (acceptance changes along an
    answer: `planner.exact.runs.at_length`)."""
    from polyplan.formats.plan import read_plan

    planned = read_plan(plan).search.new_tokens
    if new_tokens is None:
        return planned or DEFAULT_NEW_TOKENS
    if planned is not None and planned != new_tokens:
        typer.echo(f"note: {plan} read acceptance over {planned}-token answers and these are {new_tokens} tokens: acceptance "
                   f"changes along an answer, so its predictions may not hold (re-plan with recommend --new-tokens {new_tokens})", err=True)
    return new_tokens


@fails_cleanly
def validate(
    plan: Annotated[Path, typer.Option("--plan", help="plan.json written by polyplan recommend.")],
    prompts: Annotated[Optional[Path], typer.Option(
        "--prompts", help="Prompt file (*.jsonl or blank-line separated text). Default: built-in prompts held out "
        "from profiling.")] = None,
    top: Annotated[int, typer.Option("--top", help="Also validate the plan's next N chains.")] = 3,
    new_tokens: Annotated[Optional[int], typer.Option(
        "--new-tokens", help="Tokens generated per prompt and chain (default: the answer length the plan was made "
        "for, recommend --new-tokens, else 128).")] = None,
    repeats: Annotated[int, typer.Option("--repeats", help="Passes over the prompts (per prompt, the median over repeats enters the paired speedup).")] = 3,
    prompts_per_kind: Annotated[Optional[int], typer.Option(
        "--prompts-per-kind", help="Built-in prompts of each kind (default 4; not with --prompts).")] = None,
    max_prompts: Annotated[Optional[int], typer.Option("--max-prompts", help="Use only the first N prompts.")] = None,
    raw_prompts: RawPrompts = False,
    seed: Annotated[int, typer.Option("--seed", help="Prompt i is decoded with seed + i.")] = 0,
    out: Annotated[Path, typer.Option("--out", help="Folder for report.md, report.json and the plots.")] = Path(DEFAULT_OUT),
    candidates: PlanCandidates = None,
    threads: Annotated[
        Optional[int], typer.Option("--threads", help="torch CPU threads (default: as the plan was profiled, else the machine's free cores at start).")
    ] = None,
    json_output: ReportJson = False,
) -> None:
    """Run the recommended chain, the next --top chains, target-only and the best two-model chain
    on the same prompts and seeds, interleaved; report measured against predicted speedups."""
    from polyplan.formats import options
    from polyplan.cli.commands.progress import progress_bars
    from polyplan.pipeline.stages import validate_plan_file
    from polyplan.validation.report_folder import check_validation_folder
    from polyplan.validation.chain_runs import ValidationSettings

    options.seed(seed)
    options.at_least(threads, 1, "--threads")
    options.at_least(prompts_per_kind, 1, "--prompts-per-kind")
    if prompts is not None:
        options.unused_without("the built-in prompts", [("--prompts-per-kind", prompts_per_kind)], "--prompts gives the prompts")
    check_validation_folder(out, [("--plan", plan), ("--prompts", prompts), ("--candidates", candidates)])
    settings = ValidationSettings(new_tokens=_answer_length(plan, new_tokens), repeats=repeats, top=top, seed=seed)
    with progress_bars() as progress:  # on stderr, --json or not
        validated = validate_plan_file(
            plan, out, settings, prompt_file=prompts, prompts_per_kind=4 if prompts_per_kind is None else prompts_per_kind,
            max_prompts=max_prompts, raw_prompts=raw_prompts, candidates_path=candidates, threads=threads,
            progress=progress.validation,
        )
    if json_output:
        echo_json(validated.files.payload)
        return
    typer.echo("\n".join(result_lines(validated.validation, validated.files, validated.warning) + [validated.threads.line]))
