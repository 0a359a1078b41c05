"""`polyplan zoo train|refine|measure`: reproduce, refine and time the embedded model family."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli.support import fails_cleanly

app = typer.Typer(help="The embedded model family trained on the Python standard library.", no_args_is_help=True)


@app.command("train")
@fails_cleanly
def train(
    out: Annotated[Path, typer.Option("--out", help="New folder for the family (must not exist).")] = Path("zoo-family"),
    quick: Annotated[bool, typer.Option("--quick", help="A tiny family in under a minute (for tests).")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of every random choice in the recipe.")] = 0,
) -> None:
    """Train the target, its distilled drafter and their tokenizer; write HF folders into OUT.

    The full recipe takes about an hour on 2 CPU cores: run it in the background. A killed run
    leaves only a hidden `.OUT.partial-*` folder, never a folder that looks complete.
    """
    from polyplan.zoo.recipe import FULL, QUICK
    from polyplan.zoo.train import train_family

    report = train_family(QUICK if quick else FULL, out, seed=seed, log=typer.echo)
    typer.echo(f"wrote {out}: " + ", ".join(f"{name} loss {loss:.3f}" for name, loss in report.validation_loss.items()))


@app.command("refine")
@fails_cleanly
def refine(
    out: Annotated[Path, typer.Option("--out", help="New folder for the refined family (must not exist).")],
    family: Annotated[Optional[Path], typer.Option("--family", help="A trained family folder (default: the shipped one).")] = None,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Distillation batches (default: the full recipe's).")] = None,
    threads: Annotated[int, typer.Option("--threads", help="torch CPU threads.")] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the batch sampler.")] = 0,
) -> None:
    """Distil a family's drafter further from its finished, frozen target; write the family to OUT.

    The target is untouched (its fingerprint, and every profile entry measured with it, stay
    valid). The full recipe's schedule takes about half an hour on one CPU core.
    """
    from dataclasses import replace

    from polyplan.formats.errors import PolyplanError
    from polyplan.models.builtin import weights_root
    from polyplan.zoo.recipe import FULL
    from polyplan.zoo.train import refine_family

    refinement = FULL.drafter_refine
    if steps is not None:
        if steps < 1:
            raise PolyplanError(f"--steps: must be >= 1, got {steps}")
        schedule = replace(refinement.schedule, steps=steps, warmup_steps=min(refinement.schedule.warmup_steps, steps))
        refinement = replace(refinement, schedule=schedule)
    metrics = refine_family(family if family is not None else weights_root(), out, refinement,
                            seed=seed, threads=threads, log=typer.echo)
    typer.echo(
        f"wrote {out}: drafter under the target, before -> after (alpha at temperature 1, greedy agreement)\n"
        f"  held-out corpus:           {metrics.corpus_before.alpha:.3f} -> {metrics.corpus_after.alpha:.3f}, "
        f"{metrics.corpus_before.agreement:.3f} -> {metrics.corpus_after.agreement:.3f}\n"
        f"  target's own continuations: {metrics.on_policy_before.alpha:.3f} -> {metrics.on_policy_after.alpha:.3f}, "
        f"{metrics.on_policy_before.agreement:.3f} -> {metrics.on_policy_after.agreement:.3f}\n"
        f"  ({metrics.generation_seconds:.0f} s generating, {metrics.seconds:.0f} s distilling)"
    )


@app.command("measure")
@fails_cleanly
def measure(
    family: Annotated[Optional[Path], typer.Option("--family", help="A trained family folder (default: the shipped one).")] = None,
    threads: Annotated[int, typer.Option("--threads", help="torch threads while timing.")] = 2,
    repeats: Annotated[int, typer.Option("--repeats", help="Timed decode steps per model.")] = 200,
    prompt: Annotated[str, typer.Option("--prompt", help="Prompt of the greedy sample.")] = "def read_config(path):\n",
    new_tokens: Annotated[int, typer.Option("--new-tokens", help="Length of the greedy sample.")] = 80,
) -> None:
    """Decode-step latency of target, int8 copy, early-exit copy and drafter side by side
    (ratio to the target), their held-out numbers from family.json, and a greedy sample."""
    import json

    from transformers import AutoTokenizer

    from polyplan.formats.errors import PolyplanError
    from polyplan.models.builtin import weights_root
    from polyplan.zoo.measure import decode_step_ms, family_variants, greedy_sample
    from polyplan.zoo.train import torch_threads

    folder = family if family is not None else weights_root()
    if not (folder / "family.json").is_file():
        raise PolyplanError(f"--family: {folder} has no family.json; train one with `polyplan zoo train`")
    payload = json.loads((folder / "family.json").read_text())
    report = payload["report"]
    with torch_threads(threads):
        variants = family_variants(folder, payload["recipe"]["early_exit_layers"])
        timings = decode_step_ms(variants, repeats=repeats)
        tokenizer = AutoTokenizer.from_pretrained(folder / "target", local_files_only=True)
        sample = greedy_sample(variants["target"], tokenizer, prompt, new_tokens)
    base = timings["target"].median_ms
    typer.echo(f"family: {folder}  (threads {threads}, {repeats} interleaved one-token steps each, warm cache of 64 tokens)")
    typer.echo(f"{'model':<14} {'step ms':>8} {'IQR ms':>13} {'target/this':>11} {'val loss':>8} {'agree w/ target':>15}")
    for name, timing in timings.items():
        loss = report["validation_loss"].get(name)
        agree = report["greedy_agreement_with_target"].get(name)
        typer.echo(
            f"{name:<14} {timing.median_ms:>8.3f} {f'{timing.q1_ms:.2f}-{timing.q3_ms:.2f}':>13} {base / timing.median_ms:>11.2f} "
            f"{'-' if loss is None else f'{loss:.3f}':>8} {'-' if agree is None else f'{agree:.3f}':>15}"
        )
    typer.echo(f"greedy sample of the target after {prompt!r}:")
    typer.echo(prompt + sample)
