"""A race against llama-server on the results page: read back, tabled and plotted.

A run folder of `docs/results/` may keep, beside the plan it raced, the JSON that
`polyplan bench peers --engine llama.cpp --json` printed (`race.json`), and name that command in
its run.json (`race_command`). `validation.results_page` then puts the race under the run: each
configuration's measured speedup over llama.cpp's target alone (the server's decode-only speedup
where it timed one, else whole calls), with its spread, beside what `polyplan export` predicted
for it. This module reads that JSON at its edge into frozen rows and draws them.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.errors import PolyplanError
from polyplan.validation.figure import agg_figure, save_figure

RACE_FILE = "race.json"


@dataclass(frozen=True)
class RaceRow:
    """One raced configuration: the measured speedup over llama.cpp's target alone (decode-only
    where the server timed it, else whole calls) and its sd over prompts, the export's prediction
    and interval (None: not predicted; `judgement` then says why, as the race printed it), and
    whether the export recommended it; `race_priced`: the same prediction priced on the race's own
    prompts (`engines.llama_cpp.race.priced_on_race`; None: not priced so)."""

    label: str
    measured: float
    sd: float
    decode_only: bool
    predicted: float | None
    interval: tuple[float, float] | None
    exported: bool
    judgement: str = "not modelled"
    race_priced: float | None = None


def read_race(path: Path) -> tuple[RaceRow, ...]:
    """The rows of a `bench peers --json` file that have numbers (a configuration that failed to
    start has none and is left out)."""
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise PolyplanError(f"{path}: not the JSON `polyplan bench peers --json` prints ({error})") from None
    race = []
    for row in rows:
        decode = row.get("decode_speedup")
        measured = decode if decode is not None else row["speedup"]
        if measured is None or not math.isfinite(measured):
            continue
        interval = row.get("predicted_interval")
        race.append(RaceRow(row["label"], float(measured), float(row["decode_speedup_sd"] if decode is not None else row["speedup_sd"]),
                            decode is not None, row.get("predicted_speedup"), None if interval is None else tuple(interval),
                            bool(row.get("exported")), row.get("judgement") or "not modelled", row.get("race_priced")))
    return tuple(race)


def race_lines(rows: tuple[RaceRow, ...]) -> list[str]:
    """The race as a markdown table; with a column of the predictions priced on the race's own
    prompts where the race has them."""
    split = any(row.race_priced is not None for row in rows)
    lines = ["| configuration | measured speedup ± sd | predicted by `export` [interval] | error |"
             + (" priced on the race's prompts (error) |" if split else ""), "| --- | --- | --- | --- |" + (" --- |" if split else "")]
    for row in rows:
        kind = "decode" if row.decode_only else "whole calls"
        if row.predicted is None:
            predicted, error = row.judgement, "–"
        else:
            interval = "" if row.interval is None else f" [{row.interval[0]:.2f}, {row.interval[1]:.2f}]"
            predicted, error = f"{row.predicted:.2f}x{interval}", f"{row.predicted / row.measured - 1:+.1%}"
        mark = " (exported)" if row.exported else ""
        again = "" if not split else (" – |" if row.race_priced is None else
                                      f" {row.race_priced:.2f}x ({row.race_priced / row.measured - 1:+.1%}) |")
        lines.append(f"| {row.label}{mark} | {row.measured:.2f}x ± {row.sd:.2f} ({kind}) | {predicted} | {error} |{again}")
    return lines


def plot_race(rows: tuple[RaceRow, ...], path: Path, title: str) -> Path:
    """Horizontal bars of the measured speedups (sd as whiskers), the export's predictions as
    diamonds with their intervals, a line at 1.0 (llama.cpp's target alone)."""
    figure = agg_figure(7.2, 0.9 + 0.28 * len(rows))
    axes = figure.add_subplot()
    ys = list(range(len(rows)))[::-1]
    axes.barh(ys, [row.measured for row in rows], xerr=[row.sd for row in rows], color=["C1" if row.exported else "C0" for row in rows],
              alpha=0.7, capsize=2, label="measured (± sd over prompts)")
    predicted = [(y, row) for y, row in zip(ys, rows) if row.predicted is not None]
    if predicted:
        bounds = [row.interval or (row.predicted, row.predicted) for _, row in predicted]
        errors = [[row.predicted - low for (_, row), (low, _) in zip(predicted, bounds)],
                  [high - row.predicted for (_, row), (_, high) in zip(predicted, bounds)]]
        axes.errorbar([row.predicted for _, row in predicted], [y for y, _ in predicted], xerr=errors, fmt="D", color="k",
                      markersize=4, capsize=2, label="predicted by export [interval]")
    axes.axvline(1.0, color="0.4", linestyle="--", linewidth=1)
    axes.set_yticks(ys)
    axes.set_yticklabels([row.label + (" (exported)" if row.exported else "") for row in rows], fontsize=7)
    return save_figure(figure, axes, path, xlabel="speedup over llama.cpp's target alone", ylabel="", title=title,
                       legend_size=7, legend_below=True)
