"""`polyplan generate`: run a chain of local model folders on a prompt and show per-level counts."""

from __future__ import annotations

import math
import statistics
from typing import Annotated, Optional

import typer

from polyplan.cli_support import echo_json, fails_cleanly
from polyplan.commands.options import RawPrompts
from polyplan.formats.errors import PolyplanError


def _int_list(text: str, option: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise PolyplanError(f"{option}: expected comma-separated integers, got {text!r}") from None


def stats_lines(result) -> list[str]:
    """The per-level statistics table (level 1 = target)."""
    lines = [
        f"{'level':>5}  {'model':<24} {'forwards':>8} {'proposed':>8} {'accepted':>8} {'accept':>7} "
        f"{'tokens/verif.':>14} {'time s':>8}"
    ]
    for index, level in enumerate(result.levels, start=1):
        per = level.tokens_per_verification
        spread = f"{statistics.fmean(per):.2f}±{statistics.pstdev(per):.2f}" if per else "-"
        rate = level.acceptance_rate
        lines.append(
            f"{index:>5}  {level.model[:24]:<24} {level.forward_passes:>8} {level.tokens_proposed:>8} "
            f"{level.tokens_accepted:>8} {('-' if math.isnan(rate) else f'{rate:.3f}'):>7} {spread:>14} "
            f"{level.wall_time_s:>8.3f}"
        )
    tokens = len(result.token_ids)
    lines.append(f"mean tokens per target pass: {result.tokens_per_target_pass:.2f}")
    lines.append(
        f"{tokens} new tokens in {result.wall_time_s:.3f} s ({tokens / result.wall_time_s:.1f} tokens/s)"
        + (", stopped at EOS" if result.stopped_at_eos else "")
    )
    return lines


@fails_cleanly
def generate(
    prompt: Annotated[str, typer.Argument(help="The prompt text.")],
    chain: Annotated[str, typer.Option("--chain", help="TARGET_DIR[,DRAFT_DIR,...]: local model folders, target first.")],
    block_sizes: Annotated[
        Optional[str], typer.Option("--block-sizes", help="K1[,K2,...]: one block size per verifying level (default 4 each).")
    ] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Stop after this many new tokens.")] = 64,
    temperature: Annotated[float, typer.Option("--temperature", help="0 is greedy.")] = 0.0,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="Keep the k most likely tokens.")] = None,
    top_p: Annotated[float, typer.Option("--top-p", help="Nucleus mass in (0, 1].")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sampling generator.")] = 0,
    device: Annotated[str, typer.Option("--device", help="torch device for every model.")] = "cpu",
    raw_prompts: RawPrompts = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text and a table.")] = False,
) -> None:
    """Generate from PROMPT with a speculative chain and print the text and per-level statistics."""
    from polyplan.decoder.sampling import Sampling
    from polyplan.decoder.text import generate_text

    from polyplan.formats import options

    folders = [part.strip() for part in chain.split(",") if part.strip()]
    blocks = None if block_sizes is None else _int_list(block_sizes, "--block-sizes")
    for k in blocks or ():
        if k >= 1:  # below 1 the decoder names the level
            options.block_size(k, "--block-sizes")
    options.at_least(max_new_tokens, 1, "--max-new-tokens")
    options.seed(seed)
    sampling = Sampling(temperature=temperature, top_k=top_k, top_p=top_p)  # its own range checks first
    if temperature == 0:  # greedy: the argmax survives any top-k / top-p filter
        options.unused_without("--temperature > 0", [("--top-k", top_k), ("--top-p", None if top_p == 1.0 else top_p)],
                               "greedy decoding takes the argmax")
    run = generate_text(
        folders,
        prompt,
        block_sizes=blocks,
        max_new_tokens=max_new_tokens,
        sampling=sampling,
        seed=seed,
        device=device,
        raw=raw_prompts,
    )
    result = run.result
    if json_output:
        echo_json(
            {
                "text": run.text,
                "token_ids": list(result.token_ids),
                "levels": [
                    {
                        "model": level.model,
                        "forward_passes": level.forward_passes,
                        "tokens_proposed": level.tokens_proposed,
                        "tokens_accepted": level.tokens_accepted,
                        "tokens_per_verification": list(level.tokens_per_verification),
                        "wall_time_s": level.wall_time_s,
                        "tokens_drafted": level.tokens_proposed,
                        "verifications": level.verifications,
                        "acceptance_rate": level.acceptance_rate,
                        "mean_tokens_per_verification": level.mean_tokens_per_verification,
                    }
                    for level in result.levels
                ],
                "tokens_per_target_pass": result.tokens_per_target_pass,
                "wall_time_s": result.wall_time_s,
                "stopped_at_eos": result.stopped_at_eos,
            }
        )
        return
    typer.echo(run.text)
    typer.echo("")
    typer.echo("\n".join(stats_lines(result)))
