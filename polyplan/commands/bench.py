"""`polyplan bench …`: benchmarks that print ratios measured side by side (never asserted)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli_support import echo_json, fails_cleanly
from polyplan.errors import PolyplanError

app = typer.Typer(help="Benchmarks printing side-by-side ratios measured in one run.", no_args_is_help=True)


@app.command("decoder")
@fails_cleanly
def decoder(
    target: Annotated[Optional[str], typer.Option("--target", help="Target model folder (default: a random 8-layer Llama).")] = None,
    draft: Annotated[Optional[str], typer.Option("--draft", help="Draft model folder (default: the random target's first layer).")] = None,
    prompts: Annotated[int, typer.Option("--prompts", help="Number of prompts.")] = 4,
    prompt_length: Annotated[int, typer.Option("--prompt-length", help="Tokens per random prompt (random models only).")] = 16,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="New tokens per prompt.")] = 64,
    block_size: Annotated[int, typer.Option("--block-size", help="K: tokens drafted per round, both sides.")] = 4,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed runs per prompt and side.")] = 3,
    threads: Annotated[Optional[int], typer.Option("--threads", help="torch CPU threads (default: torch's choice).")] = None,
    device: Annotated[str, typer.Option("--device", help="torch device.")] = "cpu",
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Race polyplan's decoding loop against Hugging Face generate (plain and assisted), greedy."""
    import torch

    from polyplan.decoder.bench import report_lines, run_decoder_benchmark

    if threads is not None:
        torch.set_num_threads(threads)
    bench = run_decoder_benchmark(
        target,
        draft,
        prompts=prompts,
        prompt_length=prompt_length,
        max_new_tokens=max_new_tokens,
        block_size=block_size,
        repeats=repeats,
        device=device,
    )
    if json_output:
        echo_json(
            {
                "target": bench.target,
                "draft": bench.draft,
                "prompts": bench.prompts,
                "max_new_tokens": bench.max_new_tokens,
                "block_size": bench.block_size,
                "repeats": bench.repeats,
                "threads": bench.threads,
                "races": [
                    {
                        "race": race.label,
                        "polyplan_s": race.polyplan_s,
                        "huggingface_s": race.huggingface_s,
                        "ratio": race.ratio,
                        "tokens_equal": race.tokens_equal,
                        "mean_tokens_per_verification": race.mean_tokens_per_verification,
                    }
                    for race in bench.races
                ],
            }
        )
        return
    typer.echo("\n".join(report_lines(bench)))


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
    candidates: Annotated[
        Optional[Path], typer.Option("--candidates", help="models.yaml, if not the one recorded in the plan.")
    ] = None,
    new_tokens: Annotated[int, typer.Option("--new-tokens", help="New tokens per prompt (EOS stops earlier).")] = 64,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed runs per prompt and configuration.")] = 3,
    max_prompts: Annotated[Optional[int], typer.Option("--max-prompts", help="Use only the first N prompts.")] = None,
    threads: Annotated[Optional[int], typer.Option("--threads", help="torch CPU threads (default: torch's choice).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Race HF generate (plain, assisted per drafter, prompt lookup) against polyplan's chain, greedy."""
    from polyplan.commands.recommend import set_threads
    from polyplan.profiler.peers import peers_json, peers_lines, run_peers

    set_threads(threads)
    bench = run_peers(plan, prompts_path=prompts, candidates_path=candidates, repeats=repeats, new_tokens=new_tokens,
                      max_prompts=max_prompts, log=lambda line: typer.echo(line, err=True))
    if json_output:
        echo_json(peers_json(bench))
    else:
        typer.echo("\n".join(peers_lines(bench)))
    if bench.mismatches:
        raise PolyplanError(f"greedy outputs differ from target-only in {len(bench.mismatches)} run(s): {bench.mismatches[0]}")
