"""The `polyplan` app: the command groups of `cli/commands/`, assembled."""

from __future__ import annotations

import signal
from typing import Annotated

import typer

from polyplan.cli.commands import (bench, demo, drafter, engines, export, fetch, generate, models, profile, quiet,
                                    recommend, theory, validate, zoo)

app = typer.Typer(
    name="polyplan",
    help="Plan, run and validate polybasic (multi-drafter) speculative decoding chains.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def general_options(
    verbose: Annotated[
        bool,
        typer.Option("--verbose", help="Show other libraries' progress bars, warnings and logs (transformers, huggingface_hub, "
                     "tqdm, llama.cpp, Python warnings); by default stderr carries only polyplan's own lines."),
    ] = False,
) -> None:
    """Plan, run and validate polybasic (multi-drafter) speculative decoding chains."""
    quiet.quiet_other_libraries(verbose)


# Command registration (one line per command module; keep alphabetical).
app.add_typer(bench.app, name="bench")
app.command("demo")(demo.demo)
app.add_typer(drafter.app, name="drafter")
app.add_typer(engines.app, name="engines")
app.command("export")(export.export)
app.command("fetch")(fetch.fetch)
app.command("generate")(generate.generate)
app.add_typer(models.app, name="models")
app.command("profile")(profile.profile)
app.command("recommend")(recommend.recommend)
app.add_typer(theory.app, name="theory")
app.command("validate")(validate.validate)
app.add_typer(zoo.app, name="zoo")


def main() -> None:
    """Console-script entry point. A SIGTERM (a `kill`, a job scheduler's stop) unwinds the command
    as Ctrl-C does, so no llama-server, lock or half-written file outlives it (Python's default
    ends the process without leaving any `with` block)."""
    signal.signal(signal.SIGTERM, _terminated)
    app()


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)
