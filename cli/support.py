"""Small helpers every CLI command shares: clean failures and JSON output."""

from __future__ import annotations

import functools
import json
from typing import Any, Callable, TypeVar

import typer

from polyplan.formats.codec import encode
from polyplan.formats.errors import PolyplanError

F = TypeVar("F", bound=Callable[..., Any])


def fails_cleanly(command: F) -> F:
    """Turn a `PolyplanError` raised by `command` into one line on stderr and exit code 2.

    Typer reads the wrapped function's signature through `functools.wraps`, so options are
    declared on the command as usual.
    """

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except PolyplanError as error:
            typer.echo(f"error: {one_line(str(error))}", err=True)
            raise typer.Exit(code=2) from None
        except KeyboardInterrupt:
            typer.echo("interrupted: results measured so far are kept", err=True)
            raise typer.Exit(code=130) from None

    return wrapper  # type: ignore[return-value]


def one_line(text: str) -> str:
    """`text` with its control characters escaped (a name or path from a user's file may hold a
    newline or carriage return): an error stays the one line the contract promises."""
    return "".join(character if character.isprintable() else repr(character)[1:-1] for character in text)


def echo_json(payload: Any) -> None:
    """Print one JSON object (strict: no NaN) on stdout."""
    typer.echo(json.dumps(encode(payload), indent=2, allow_nan=False))  # NaN and infinities as null


def log_line(line: str) -> None:
    """Print one progress line on stderr (stdout stays for results and --json)."""
    typer.echo(line, err=True)


def warn_other_processor(plan: Any, device: str = "cpu") -> None:
    """One `warning:` line on stderr when `plan` (a path or a read `PlanFile`) was profiled on
    another processor than this one (`formats.processor`); nothing when it was not, or when the
    plan records no processor. It warns and goes on: how far off the timings are is worth seeing."""
    from polyplan.formats.plan import PlanFile, read_plan
    from polyplan.profiler.processor import plan_machine_line

    line = plan_machine_line(plan if isinstance(plan, PlanFile) else read_plan(plan), device)
    if line is not None:
        typer.echo(f"warning: {one_line(line)}", err=True)
