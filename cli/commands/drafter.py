"""`polyplan drafter distill`: a reduced-vocabulary drafter distilled from any target."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli.commands.options import Candidates
from polyplan.cli.support import fails_cleanly, log_line

app = typer.Typer(help="Build drafters for your own target.", no_args_is_help=True)


@app.command("distill")
@fails_cleanly
def distill(
    out: Annotated[Path, typer.Option("--out", help="New folder for the drafter (must not exist).")],
    candidates: Candidates = None,
    target: Annotated[Optional[str], typer.Option("--target", help="Candidate to distil from (default: the target).")] = None,
    vocab: Annotated[Optional[int], typer.Option("--vocab", help="N: the drafter's head covers the N most frequent target tokens [default: 8192].")] = None,
    layers: Annotated[Optional[int], typer.Option("--layers", help="Drafter decoder layers [default: 2].")] = None,
    hidden: Annotated[Optional[int], typer.Option("--hidden", help="Drafter hidden size, a multiple of 32 [default: 256].")] = None,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Distillation steps [default: 300].")] = None,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", help="Windows per step [default: 4].")] = None,
    window: Annotated[Optional[int], typer.Option("--window", help="Tokens per training window [default: 256].")] = None,
    data: Annotated[Optional[Path], typer.Option("--data", help="Your own text to train on: *.jsonl prompts (turns/prompt/text) or text (blank-line separated).")] = None,
    on_policy_tokens: Annotated[Optional[int], typer.Option("--on-policy-tokens", help="Tokens of the target's own continuations to train on (0: none) [default: 16384].")] = None,
    exit_layers: Annotated[Optional[int], typer.Option("--exit-layers", help="Train an early exit instead: the target's first K layers with a trained norm and reduced head.")] = None,
    raw_prompts: Annotated[bool, typer.Option("--raw-prompts", help="Continue --data prompts as raw text, not through the target's chat template.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the initialisation and the batches.")] = 0,
    threads: Annotated[int, typer.Option("--threads", help="torch CPU threads.")] = 1,
    quick: Annotated[bool, typer.Option("--quick", help="Tiny settings for tests and smoke runs (no size options with it).")] = False,
) -> None:
    """Distil a small drafter with a reduced-vocabulary head from the target; print its α."""
    from polyplan.formats.candidates import default_candidates_path
    from polyplan.formats.errors import PolyplanError
    from polyplan.zoo.distill import QUICK, DistillSettings, distill_drafter
    from polyplan.zoo.train import torch_threads

    from polyplan.formats import options

    options.at_least(threads, 1, "--threads")
    options.unused_without("--data", [("--raw-prompts", True if raw_prompts else None)], "it sends the --data prompts as raw text")
    sizes = {"vocab": vocab, "layers": layers, "hidden": hidden, "steps": steps, "batch_size": batch_size, "window": window,
             "on_policy_tokens": on_policy_tokens}
    given = {name: value for name, value in sizes.items() if value is not None}
    if quick and given:
        raise PolyplanError(f"--quick: sets every size itself; drop --{next(iter(given)).replace('_', '-')}")
    settings = QUICK if quick else DistillSettings(seed=seed, **given)
    with torch_threads(threads):
        result = distill_drafter(candidates if candidates is not None else default_candidates_path(), out, settings,
                                 target_name=target, data=data, exit_layers=exit_layers, raw_prompts=raw_prompts,
                                 fit_vocab=vocab is None, log=log_line)
    fit = result.metrics
    typer.echo(
        f"wrote {result.out}: {result.parameters / 1e6:.2f}M parameters, head over {result.kept_tokens} of {result.vocab} "
        f"tokens ({result.kept_mass:.1%} of held-out target tokens); held-out alpha {fit.corpus_before.alpha:.3f} -> "
        f"{fit.corpus_after.alpha:.3f}, greedy agreement {fit.corpus_before.agreement:.3f} -> "
        f"{fit.corpus_after.agreement:.3f}, on-policy alpha {fit.on_policy_before.alpha:.3f} -> "
        f"{fit.on_policy_after.alpha:.3f} (greedy agreement {fit.on_policy_after.agreement:.3f}) "
        f"({result.seconds:.0f} s)"
    )
