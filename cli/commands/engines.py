"""`polyplan engines build llama.cpp` and `polyplan engines status`: the other engines' own tools."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from polyplan.cli.support import fails_cleanly, log_line
from polyplan.formats.errors import PolyplanError

app = typer.Typer(help="Build and inspect the other engines polyplan races (llama.cpp's server).", no_args_is_help=True)


@app.command("build")
@fails_cleanly
def build(
    engine: Annotated[str, typer.Argument(help="llama.cpp")],
    jobs: Annotated[Optional[int], typer.Option("--jobs", help="Parallel compile jobs (default: every core).")] = None,
) -> None:
    """Build ENGINE's tools from source into the polyplan cache, once (llama.cpp: llama-server and
    llama-bench from the pinned llama-cpp-python's source distribution, fetched by pip)."""
    from polyplan.engines.llama_cpp.build import build as build_llama_cpp
    from polyplan.engines.llama_cpp.build import find_build

    if engine != "llama.cpp":
        raise PolyplanError(f"engines build: unknown engine {engine!r} (only llama.cpp is built from source)")
    already = find_build()
    made = already or build_llama_cpp(jobs=jobs, log=log_line)
    typer.echo(f"{'already built' if already else 'built'}: {made.server} and {made.bench} (llama.cpp of llama-cpp-python {made.version})")


@app.command("status")
@fails_cleanly
def status() -> None:
    """Say which engine tools are built and where."""
    from polyplan.engines.llama_cpp.build import BINDINGS_VERSION, BUILD_COMMAND, build_root, find_build

    found = find_build()
    if found is None:
        typer.echo(f"llama.cpp {BINDINGS_VERSION}: not built (run `{BUILD_COMMAND}`; it goes to {build_root()})")
    else:
        typer.echo(f"llama.cpp {BINDINGS_VERSION}: built in {found.root} (llama-server, llama-bench)")
    typer.echo("vLLM: not run here (it needs a GPU); `polyplan export --engine vllm` predicts on paper")
