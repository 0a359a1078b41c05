"""`polyplan models check`: load every candidate of a models.yaml and check they fit together."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from polyplan.cli.commands.options import Candidates
from polyplan.cli.support import echo_json, fails_cleanly
from polyplan.formats.errors import PolyplanError

app = typer.Typer(help="Inspect the candidate models of a models.yaml.", no_args_is_help=True)


def _role(loaded) -> str:
    candidate = loaded.candidate
    if candidate.is_target:
        return "target"
    derive = candidate.derive
    if derive is None:
        return candidate.source_kind
    kind = type(derive).__name__
    if kind == "Quantize":
        head = "" if derive.head is None else f"+{derive.head} head"
        return f"{derive.kind}{head} of {derive.base}"
    if kind == "EarlyExit":
        return f"{derive.layers} layers of {derive.base}"
    if kind == "ReducedVocab":
        return f"head over {derive.size if derive.ids is None else Path(derive.ids).name} of {derive.base}"
    if kind == "NGramSimple":
        return f"ngram-simple n={derive.size_n}"
    return f"ngram {derive.min_n}..{derive.max_n}"


def _table_lines(result) -> list[str]:
    """One row per candidate: parameters, dtype, device, held-out loss, compatibility (each
    column as wide as its longest entry)."""
    checks = {c.name: c for c in result.compatibility}
    rows = [("name", "role", "parameters", "dtype", "device", "val loss", "compatibility")]
    for loaded in result.candidates:
        name = loaded.candidate.name
        params = "-" if loaded.parameters is None else f"{loaded.parameters / 1e6:.2f}M"
        loss = "-" if loaded.validation_loss is None else f"{loaded.validation_loss:.3f}"
        rows.append((name, _role(loaded), params, loaded.dtype, loaded.device, loss, checks[name].detail))
    widths = [max(len(row[column]) for row in rows) for column in range(6)]
    right = {2, 5}  # numbers
    return [
        " ".join(cell.rjust(width) if column in right else cell.ljust(width)
                 for column, (cell, width) in enumerate(zip(row, widths))) + "  " + row[6]
        for row in rows
    ]


@app.command("check")
@fails_cleanly
def check(
    candidates: Candidates = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
) -> None:
    """Load every candidate and print parameters, dtype, device, held-out loss and compatibility."""
    from polyplan.formats.candidates import default_candidates_path, read_candidates
    from polyplan.models.loader import load_candidates

    path = candidates if candidates is not None else default_candidates_path()
    result = load_candidates(read_candidates(path), require_compatible=False)
    if json_output:
        models = [{"name": loaded.candidate.name, "role": _role(loaded), "parameters": loaded.parameters,
                   "dtype": loaded.dtype, "device": loaded.device,
                   "validation_loss": math.nan if loaded.validation_loss is None else loaded.validation_loss,
                   "compatible": check.ok, "compatibility": check.detail}
                  for loaded, check in zip(result.candidates, result.compatibility)]
        echo_json({"candidates": str(path), "compatible": result.compatible, "models": models})
    else:
        typer.echo("\n".join([f"candidates: {path}", *_table_lines(result)]))
    if not result.compatible:
        failed = next(c for c in result.compatibility if not c.ok)
        raise PolyplanError(f"{path}: candidate {failed.name!r}: {failed.detail}")
