"""`polyplan zoo train`: reproduce the embedded model family from its seeded recipe."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from polyplan.cli_support import fails_cleanly

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
