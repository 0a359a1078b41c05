"""`polyplan recommend`: the best chain and block sizes for a profile (no models, no torch)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli_support import echo_json, fails_cleanly
from polyplan.planner.plan_file import plan_to_json_dict, write_plan
from polyplan.planner.search import Recommendation, recommend as recommend_chains
from polyplan.profile import load


def table_lines(result: Recommendation) -> list[str]:
    """The ranked table and the insertion lines."""
    header = f"{'rank':>4}  {'exact':>8}  {'paper':>8}  {'block sizes':<14} {'paper phi_i/N':<28} chain"
    lines = [
        f"Chains for target {result.target} on {result.device} (sampling {result.sampling}, "
        f"max {result.max_levels} levels, K in 1..{result.k_max}); speedups over {result.target} alone",
        header,
    ]
    for rank, plan in enumerate(result.ranked, start=1):
        phi = "[" + ", ".join(f"{value:.3g}" for value in plan.paper.phi_per_token) + "]"
        lines.append(
            f"{rank:>4}  {plan.exact_speedup:>7.3f}x  {plan.paper_speedup:>7.3f}x  "
            f"{str(list(plan.block_sizes)):<14} {phi:<28} {plan.label()}"
        )
    best = result.best
    lines += [
        "",
        f"best: {best.label()}  K = {list(best.block_sizes)}  exact {best.exact_speedup:.3f}x "
        f"(forwards/token {[round(f, 3) for f in best.exact.forwards_per_token]}, "
        f"tokens/verification {[round(t, 3) for t in best.exact.tokens_per_verification]})",
        "",
        "Why each model is in or out:",
    ]
    lines += [f"  {note.line}" for note in result.insertions] or ["  (no candidate drafters)"]
    return lines


@fails_cleanly
def recommend(
    profile: Annotated[Path, typer.Option("--profile", help="Profile JSON written by the profiler.")],
    max_levels: Annotated[int, typer.Option("--max-levels", help="Longest chain, counting the target.")] = 4,
    k_max: Annotated[int, typer.Option("--k-max", help="Search block sizes 1..k_max.")] = 8,
    search: Annotated[str, typer.Option("--search", help="Block-size search: auto, grid or optuna.")] = "auto",
    sampling: Annotated[str, typer.Option("--sampling", help="Profile sampling key: 'greedy' or 't<temperature>'.")] = "greedy",
    seed: Annotated[int, typer.Option("--seed", help="Seed of optuna's TPE sampler.")] = 0,
    out: Annotated[Optional[Path], typer.Option("--out", help="Where to write the plan JSON.")] = Path("plan.json"),
    json_output: Annotated[bool, typer.Option("--json", help="Print the plan as one JSON object.")] = False,
) -> None:
    """Rank every chain of the profile's models with its best block sizes and write the plan."""
    result = recommend_chains(
        load(profile), max_levels=max_levels, k_max=k_max, block_sizes=search, sampling=sampling, seed=seed
    )
    if out is not None:
        write_plan(result, out, profile_path=str(profile))
    if json_output:
        echo_json(plan_to_json_dict(result, profile_path=str(profile)))
        return
    typer.echo("\n".join(table_lines(result)))
    if out is not None:
        typer.echo(f"\nwrote {out}")
