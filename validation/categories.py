"""Results broken down by prompt category, as Spec-Bench reports them (docs/validation.md, "Per
category"): per kind, Spec-Bench's ratio of total times and tokens per target pass, plus an "all"
row, as report.json keeps them (`formats.validation_report.CategoryEntry`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from polyplan.formats.validation_report import CategoryEntry, ChainCategoryRows

ALL = "all"


@dataclass(frozen=True)
class PromptRun:
    """One chain and target-only on the same prompt and repeat (decoding only, no prefill)."""

    kind: str
    chain_s: float
    target_only_s: float
    tokens: int
    target_passes: int


def category_rows(runs: Sequence[PromptRun]) -> tuple[CategoryEntry, ...]:
    """One row per kind (in order of first appearance), then the "all" row; () without runs."""
    if not runs:
        return ()
    kinds = list(dict.fromkeys(run.kind for run in runs))
    rows = [_row(kind, [run for run in runs if run.kind == kind]) for kind in kinds]
    return tuple(rows + [_row(ALL, list(runs))])


def _row(kind: str, runs: Sequence[PromptRun]) -> CategoryEntry:
    """A category's figures as report.json keeps them (None where a total is zero)."""
    chain = sum(run.chain_s for run in runs)
    baseline = sum(run.target_only_s for run in runs)
    passes = sum(run.target_passes for run in runs)
    return CategoryEntry(
        kind,
        len(runs),
        baseline / chain if chain > 0 else None,
        sum(run.tokens for run in runs) / passes if passes > 0 else None,
    )


def category_lines(label: str, rows: Sequence[CategoryEntry]) -> list[str]:
    """A text table of `rows` for the chain called `label` (nan where a ratio is undefined)."""
    lines = [f"per category, {label}:", f"  {'category':<20} {'runs':>5} {'speedup':>8} {'tokens/target pass':>19}"]
    for row in rows:
        speedup, per_pass = (math.nan if value is None else value for value in (row.speedup, row.tokens_per_target_pass))
        lines.append(f"  {row.category[:20]:<20} {row.runs:>5} {speedup:>7.2f}x {per_pass:>19.2f}")
    return lines


def chain_categories(specs, records, kinds: Sequence[str], baseline: int) -> tuple[ChainCategoryRows, ...]:
    """Per-category rows of every chain but target-only (`baseline`, an index into `specs`), from
    the run records (`validation.results.RunRecord`) and each prompt's kind."""
    reference = {(run.repeat, run.prompt): run for run in records if run.chain == baseline}
    result = []
    for index, spec in enumerate(specs):
        if index == baseline:
            continue
        runs = [
            PromptRun(kinds[run.prompt], run.decode_s, reference[(run.repeat, run.prompt)].decode_s, len(run.token_ids),
                      run.forward_passes[0])
            for run in records
            if run.chain == index and (run.repeat, run.prompt) in reference
        ]
        result.append(ChainCategoryRows(spec.planned.label(), category_rows(runs)))
    return tuple(result)
