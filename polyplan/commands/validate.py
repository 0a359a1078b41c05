"""`polyplan validate`: run a plan's chains side by side and compare measured with predicted."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli_support import echo_json, fails_cleanly
from polyplan.commands.options import RawPrompts

_THREADS = re.compile(r"\((\d+) threads?\)")


def plan_threads(device_label: str) -> int | None:
    """The CPU thread count in a profile's device label ("cpu … (2 threads)"), if any."""
    match = _THREADS.search(device_label) if device_label.startswith("cpu") else None
    return int(match.group(1)) if match else None


def plan_profile(planned):
    """The profile the plan was made from, if its file is still readable (for the re-timed
    prediction); None otherwise."""
    from polyplan.formats.errors import PolyplanError
    from polyplan.formats.profile_codec import load

    path = planned.profile.path
    if path is None or not Path(path).is_file():
        return None
    try:
        return load(path)
    except PolyplanError:
        return None


def result_lines(validation, files) -> list[str]:
    """The table, the headline and where the report went."""
    from polyplan.profiler.categories import category_lines
    from polyplan.profiler.validation_report import table_lines

    lines = table_lines(validation)
    lines += ["", "checks:"] + [
        f"  {({True: 'met', False: 'NOT met', None: 'undecided'})[check.passed]}: {check.name} ({check.detail})"
        for check in validation.headline.checks
    ]
    lines += [f"note: {note}" for note in validation.notes]
    # the recommended chain's breakdown (the first other chain's when target-only is recommended)
    shown = next((item for item in validation.categories if item.label == validation.headline.recommended),
                 validation.categories[0] if validation.categories else None)
    if shown is not None and len(shown.rows) > 2:  # more than one kind besides "all"
        lines += ["", *category_lines(shown.label, shown.rows)]
    lines += ["", f"report: {files.report}", f"json:   {files.json}"]
    lines += [f"plot:   {path}" for _, path in files.plots]
    return lines


@fails_cleanly
def validate(
    plan: Annotated[Path, typer.Option("--plan", help="plan.json written by polyplan recommend.")],
    prompts: Annotated[
        Optional[Path],
        typer.Option("--prompts", help="Prompt file (*.jsonl or blank-line separated text). Default: built-in "
                     "prompts held out from profiling."),
    ] = None,
    top: Annotated[int, typer.Option("--top", help="Also validate the plan's next N chains.")] = 3,
    new_tokens: Annotated[int, typer.Option("--new-tokens", help="Tokens generated per prompt and chain.")] = 128,
    repeats: Annotated[int, typer.Option("--repeats", help="Passes over the prompts (per prompt, the median over repeats enters the paired speedup).")] = 3,
    prompts_per_kind: Annotated[
        Optional[int], typer.Option("--prompts-per-kind", help="Built-in prompts of each kind (default 4; not with --prompts).")
    ] = None,
    max_prompts: Annotated[Optional[int], typer.Option("--max-prompts", help="Use only the first N prompts.")] = None,
    raw_prompts: RawPrompts = False,
    seed: Annotated[int, typer.Option("--seed", help="Prompt i is decoded with seed + i.")] = 0,
    out: Annotated[Path, typer.Option("--out", help="Folder for report.md, report.json and the plots.")] = Path("validation"),
    candidates: Annotated[
        Optional[Path], typer.Option("--candidates", help="models.yaml, if not the one recorded in the plan.")
    ] = None,
    threads: Annotated[
        Optional[int], typer.Option("--threads", help="torch CPU threads (default: as the plan was profiled).")
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the report's JSON twin instead of the table.")] = False,
) -> None:
    """Run the recommended chain, the next --top chains, target-only and the best two-model chain
    on the same prompts and seeds, interleaved; report measured against predicted speedups."""
    from polyplan.commands.progress import progress_bars
    from polyplan.commands.recommend import set_threads
    from polyplan.formats.plan import read_plan
    from polyplan.decoder.candidates_loader import load_candidates
    from polyplan.profiler.pipeline import encode_for, plan_candidates, validation_prompt_set
    from polyplan.profiler.run import describe_device
    from polyplan.profiler.validation_runs import ValidationSettings, select_chains, validate_plan
    from polyplan.profiler.validation_report import write_report

    from polyplan.formats import options
    from polyplan.profiler.locks import timing_lock
    from polyplan.planner.plan_check import check_plan
    from polyplan.profiler.report_folder import check_validation_folder

    settings = ValidationSettings(new_tokens=new_tokens, repeats=repeats, top=top, seed=seed)
    options.seed(seed)
    options.at_least(threads, 1, "--threads")
    options.at_least(prompts_per_kind, 1, "--prompts-per-kind")
    if prompts is not None:
        options.unused_without("the built-in prompts", [("--prompts-per-kind", prompts_per_kind)], "--prompts gives the prompts")
    check_validation_folder(out, [("--plan", plan), ("--prompts", prompts), ("--candidates", candidates)])
    planned = read_plan(plan)
    profiled = plan_profile(planned)  # read and checked once, for the plan check and the run
    check_plan(planned, str(plan), profiled)  # a hand-edited plan is refused before any work
    select_chains(planned, top, str(plan))  # cheap checks first: a bad --top or changed model loads nothing
    candidate_set = plan_candidates(planned, str(plan), candidates)
    prompt_set = validation_prompt_set(prompts, per_kind=4 if prompts_per_kind is None else prompts_per_kind, max_prompts=max_prompts, raw=raw_prompts)
    set_threads(threads if threads is not None else plan_threads(planned.device))
    loaded = load_candidates(candidate_set)
    members = {item.candidate.name: item.member for item in loaded.candidates}
    target = members[planned.target]
    with progress_bars(disable=json_output) as (_, progress), timing_lock():
        validation = validate_plan(
            planned,
            members,
            encode_for(prompt_set, loaded.tokenizer),
            settings,
            device_label=describe_device(getattr(target, "device", "cpu")),
            plan_path=str(plan),
            prompt_source=prompt_set.source,
            truncate_prompts=prompt_set.truncate,
            progress=progress,
            profile=profiled,
        )
    files = write_report(validation, out)
    if json_output:
        echo_json(json.loads(files.json.read_text(encoding="utf-8")))
        return
    typer.echo("\n".join(result_lines(validation, files)))
