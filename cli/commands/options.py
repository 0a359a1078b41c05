"""Options that several commands share, declared once."""

from __future__ import annotations

from typing import Annotated

import typer

RawPrompts = Annotated[
    bool,
    typer.Option(
        "--raw-prompts",
        help="Send each prompt as raw text; by default a target whose tokenizer has a chat template gets it "
        "wrapped as one user turn with the generation prompt added.",
    ),
]
