"""`polyplan export`: the best chain an engine (HF, vLLM, llama.cpp) can run, and what to type."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli.commands.options import PlanCandidates
from polyplan.cli.support import echo_json, fails_cleanly, log_line, warn_other_processor
from polyplan.formats.errors import PolyplanError


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
    concurrency: Annotated[str, typer.Option(
        "--concurrency", help="llama.cpp, vllm: concurrent requests to plan for, comma-separated (e.g. 1,2,4): the best "
                              "configuration at each, where speculation stops paying, and what to type (default 1: one "
                              "request, as before).")] = "1",
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Export the plan to ENGINE: its best one-drafter chain under the engine's acceptance rule,
    the predicted speedup, what is lost against polyplan's chain, and what to type; with
    --concurrency, the plan at each number of concurrent requests."""
    from polyplan.engines.export import export_from_files, export_lines, export_to_json
    from polyplan.planner.engine_export import check_engine
    from polyplan.planner.llama_cpp.under_load import parse_clients

    clients = parse_clients(concurrency, "--concurrency")
    loaded = clients != (1,)
    if loaded and check_engine(engine) == "hf":
        from polyplan.engines.load_plan import ONE_AT_A_TIME

        raise PolyplanError(ONE_AT_A_TIME)
    result = export_from_files(plan, engine, profile_path=profile, candidates_path=candidates, measure=not profile_prices,
                               log=log_line, clients=clients)
    under_load = None
    if loaded:
        from polyplan.engines.load_plan import models_yaml, plan_under_load

        under_load = plan_under_load(result, clients, models_yaml(plan, candidates))
    warn_other_processor(plan)  # its predicted speedups are the plan's timings
    if json_output:
        payload = export_to_json(result)
        if under_load is not None:
            from polyplan.engines.load_plan import load_json

            payload["under_load"] = load_json(result, under_load)
        echo_json(payload)
        return
    lines = export_lines(result)
    if under_load is not None:
        from polyplan.engines.load_plan import load_lines

        lines += load_lines(result, under_load)
    typer.echo("\n".join(lines))
