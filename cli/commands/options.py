"""Options that several commands share, declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

RawPrompts = Annotated[
    bool,
    typer.Option(
        "--raw-prompts",
        help="Send each prompt as raw text; by default a target whose tokenizer has a chat template gets it "
        "wrapped as one user turn with the generation prompt added.",
    ),
]

Candidates = Annotated[Optional[Path], typer.Option("--candidates", help="models.yaml (default: examples/zoo.yaml).")]

PlanCandidates = Annotated[
    Optional[Path], typer.Option("--candidates", help="models.yaml, if not the one recorded in the plan.")
]

CacheDir = Annotated[
    Optional[Path], typer.Option("--cache-dir", help="Profile cache (default: $POLYPLAN_CACHE_DIR or ~/.cache/polyplan).")
]

# the loop's validation settings (demo, bench loop, validate)
PromptsPerKind = Annotated[int, typer.Option("--prompts-per-kind", help="Validation prompts of each of the 4 kinds.")]
NewTokens = Annotated[int, typer.Option("--new-tokens", help="Tokens generated per prompt and chain.")]
ValidationRepeats = Annotated[int, typer.Option("--repeats", help="Validation passes over the prompts.")]
Alternatives = Annotated[int, typer.Option("--top", help="Alternatives validated besides the recommended chain.")]
ReportJson = Annotated[bool, typer.Option("--json", help="Print the report's JSON twin instead of the table.")]
