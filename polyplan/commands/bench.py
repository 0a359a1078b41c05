"""`polyplan bench …`: benchmarks that print ratios measured side by side (never asserted)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from polyplan.cli_support import echo_json, fails_cleanly

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

    from polyplan import options
    from polyplan.devices import check_device
    from polyplan.locks import timing_lock

    for option, value in (("--threads", threads), ("--prompts", prompts), ("--prompt-length", prompt_length),
                          ("--max-new-tokens", max_new_tokens), ("--repeats", repeats)):
        options.at_least(value, 1, option)
    options.block_size(block_size, "--block-size")
    check_device(device)
    if threads is not None:
        torch.set_num_threads(threads)
    with timing_lock():
        bench = _run(target, draft, prompts, prompt_length, max_new_tokens, block_size, repeats, device)
    _print(bench, json_output)


def _run(target, draft, prompts, prompt_length, max_new_tokens, block_size, repeats, device):
    from polyplan.decoder.bench import run_decoder_benchmark

    return run_decoder_benchmark(
        target,
        draft,
        prompts=prompts,
        prompt_length=prompt_length,
        max_new_tokens=max_new_tokens,
        block_size=block_size,
        repeats=repeats,
        device=device,
    )


def _print(bench, json_output: bool) -> None:
    from polyplan.decoder.bench import report_lines

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
