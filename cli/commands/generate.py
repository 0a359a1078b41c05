"""`polyplan generate`: run a plan's chain, or one named with --chain (models.yaml names or
local model folders), on a prompt; stream the text, then show per-level counts."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from polyplan.formats import options
from polyplan.cli.support import echo_json, fails_cleanly, warn_other_processor
from polyplan.cli.commands.options import RawPrompts
from polyplan.formats.errors import PolyplanError

if TYPE_CHECKING:
    from polyplan.models.chain_candidates import ChainCandidates


def _int_list(text: str, option: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise PolyplanError(f"{option}: expected comma-separated integers, got {text!r}") from None


def _stats_lines(result) -> list[str]:
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
            f"{index:>5}  {level.model[:24]:<24} {level.forward_passes:>8} {level.tokens_drafted:>8} "
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


def _draft_policy(cap: str | None, p_min: float | None):
    """The last member's draft policy from --draft-cap MIN..MAX and --p-min (None: a fixed K)."""
    from polyplan.formats.plan import DraftPolicy

    if cap is None and p_min is None:
        return None
    bounds: tuple[int | None, int | None] = (None, None)
    if cap is not None:
        low, _, high = cap.partition("..")  # without "..", high is "" and not an integer
        try:
            bounds = (int(low), int(high))
        except ValueError:
            raise PolyplanError(f"--draft-cap: expected MIN..MAX (two integers), got {cap!r}") from None
    return DraftPolicy(*bounds, p_min)


def _chain(plan: Path | None, chain: str | None, block_sizes: str | None, temperature: float | None,
           candidates: Path | None, device: str | None, cap: str | None = None, p_min: float | None = None) -> ChainCandidates:
    """The chain --plan or --chain asks for, resolved (no model is loaded yet); one line for a
    bad combination of options."""
    import dataclasses

    from polyplan.formats.candidates import default_candidates_path
    from polyplan.models.chain_candidates import ChainCandidates

    if (plan is None) == (chain is None):
        raise PolyplanError("--plan, --chain: give one (a plan names its chain; --chain names one itself)")
    if plan is not None:
        for option, value in (("--block-sizes", block_sizes), ("--temperature", temperature), ("--draft-cap", cap),
                              ("--p-min", p_min)):
            if value is not None:
                raise PolyplanError(f"{option}: the plan sets it; drop {option}, or run a chain of your own with --chain")
        return ChainCandidates.from_plan(plan, models_yaml=candidates, device=device)
    blocks = None if block_sizes is None else tuple(_int_list(block_sizes, "--block-sizes"))
    for k in blocks or ():
        if k >= 1:  # below 1 the decoder names the level
            options.block_size(k, "--block-sizes")
    policy = _draft_policy(cap, p_min)
    entries = [part.strip() for part in chain.split(",") if part.strip()]
    resolved = ChainCandidates.from_names(candidates if candidates is not None else default_candidates_path(), entries,
                                          device=device, block_sizes=blocks, temperature=temperature or 0.0)
    return resolved if policy is None else dataclasses.replace(resolved, draft_policy=policy)


def _sampling(temperature: float, top_k: int | None, top_p: float):
    """The decoder's sampling; --top-k/--top-p refused when greedy (they cannot change the argmax)."""
    from polyplan.decoder.sampling import Sampling

    sampling = Sampling(temperature=temperature, top_k=top_k, top_p=top_p)  # its own range checks first
    if sampling.greedy:
        options.unused_without("--temperature > 0", [("--top-k", top_k), ("--top-p", None if top_p == 1.0 else top_p)],
                               "greedy decoding takes the argmax")
    return sampling


_LEVEL_FIELDS = ("model", "forward_passes", "tokens_accepted", "tokens_per_verification", "wall_time_s", "tokens_drafted",
                 "verifications", "acceptance_rate", "mean_tokens_per_verification")


def _json(run) -> dict:
    result = run.result
    return {
        "text": run.text,
        "token_ids": result.token_ids,
        "levels": [{name: getattr(level, name) for name in _LEVEL_FIELDS} for level in result.levels],
        "tokens_per_target_pass": result.tokens_per_target_pass,
        "wall_time_s": result.wall_time_s,
        "stopped_at_eos": result.stopped_at_eos,
    }


@fails_cleanly
def generate(
    prompt: Annotated[str, typer.Argument(help="The prompt text.")],
    chain: Annotated[Optional[str], typer.Option(
        "--chain", help="TARGET[,DRAFT,...]: names from --candidates (derived ones too, e.g. target-int8) or local "
        "model folders, target first.")] = None,
    plan: Annotated[Optional[Path], typer.Option(
        "--plan", help="plan.json from `polyplan recommend`: run its chain, block sizes and sampling.")] = None,
    candidates: Annotated[Optional[Path], typer.Option(
        "--candidates", help="models.yaml the --chain names come from (default: the packaged family); with --plan, "
        "instead of the one the plan records.")] = None,
    block_sizes: Annotated[Optional[str], typer.Option(
        "--block-sizes", help="K1[,K2,...]: one block size per verifying level (default 4 each).")] = None,
    draft_cap: Annotated[Optional[str], typer.Option(
        "--draft-cap", help="MIN..MAX: the last drafter's cap adapts to the acceptance, starting at its block size "
        "(+2 after a fully accepted round, -1 otherwise).")] = None,
    p_min: Annotated[Optional[float], typer.Option(
        "--p-min", help="A model drafter at the bottom stops before a token whose top probability is below this, in "
        "(0, 1).")] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Stop after this many new tokens.")] = 64,
    temperature: Annotated[Optional[float], typer.Option("--temperature", help="0 is greedy (the default).")] = None,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="Keep the k most likely tokens.")] = None,
    top_p: Annotated[float, typer.Option("--top-p", help="Nucleus mass in (0, 1].")] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sampling generator.")] = 0,
    device: Annotated[Optional[str], typer.Option(
        "--device", help="torch device for every model (default: the candidates' own; folders: cpu).")] = None,
    raw_prompts: RawPrompts = False,
    threads: Annotated[Optional[int], typer.Option(
        "--threads", help="CPU threads of every member (default: as the plan was profiled, else the machine's free "
        "cores at start).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text and a table.")] = False,
) -> None:
    """Generate from PROMPT with a speculative chain (a plan's, or one named with --chain),
    streaming the text as tokens are accepted, then print per-level statistics."""
    from polyplan.decoder.text import generate_text
    from polyplan.models.devices import check_device
    from polyplan.profiler.threads import choose_threads, plan_threads, set_threads

    options.at_least(max_new_tokens, 1, "--max-new-tokens")
    options.seed(seed)
    if device is not None:
        check_device(device)
    resolved = _chain(plan, chain, block_sizes, temperature, candidates, device, draft_cap, p_min)
    sampling = _sampling(resolved.temperature, top_k, top_p)
    planned = resolved.plan
    if planned is not None:
        warn_other_processor(planned, resolved.candidates.target.device)
    choice = choose_threads(threads, None if planned is None else plan_threads(planned.device), recorded_by="the plan's profile")
    set_threads(choice)
    loaded = resolved.load()
    run = generate_text(list(loaded.members), loaded.tokenizer, prompt, block_sizes=resolved.block_sizes,
                        max_new_tokens=max_new_tokens, sampling=sampling, seed=seed, raw=raw_prompts,
                        verify_widths=resolved.verify_widths, draft_policy=resolved.draft_policy,
                        on_text=None if json_output else (lambda piece: typer.echo(piece, nl=False)))
    if json_output:
        echo_json(_json(run) | {"threads": choice.threads})
        return
    typer.echo("\n")  # ends the streamed text's line, then one blank line
    typer.echo("\n".join(_stats_lines(run.result) + [choice.line]))
