"""`polyplan export`: the best chain an engine (HF, vLLM, llama.cpp) can run, and what to type."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli.commands.options import PlanCandidates
from polyplan.cli.support import echo_json, fails_cleanly, log_line, warn_other_processor


@fails_cleanly
def export(
    plan: Annotated[Path, typer.Option("--plan", help="plan.json written by polyplan recommend.")],
    engine: Annotated[str, typer.Option("--engine", help="hf, vllm or llama.cpp.")],
    profile: Annotated[Optional[Path], typer.Option(
        "--profile", help="profile.json, if not the one recorded in the plan.")] = None,
    candidates: PlanCandidates = None,
    profile_prices: Annotated[bool, typer.Option(
        "--profile-prices", help="llama.cpp: price with the profile's T(k) and streams and polyplan's loop instead of "
                                 "llama.cpp's own (measured once per file, threads and machine, then cached).")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Export the plan to ENGINE: its best one-drafter chain under the engine's acceptance rule,
    the predicted speedup, what is lost against polyplan's chain, and what to type."""
    from polyplan.engines.export import export_from_files, export_lines, export_to_json

    result = export_from_files(plan, engine, profile_path=profile, candidates_path=candidates, measure=not profile_prices,
                               log=log_line)
    warn_other_processor(plan)  # its predicted speedups are the plan's timings
    if json_output:
        echo_json(export_to_json(result))
        return
    typer.echo("\n".join(export_lines(result)))
