"""A race on the results page: read back, tabled and plotted.

A run folder of `docs/results/` may keep the JSON `polyplan bench peers --json` printed
(`RACE_FILE`, `formats.race`) and name that command in its run.json (`race_command`);
`validation.results_page` then puts the race under the run.
"""

from __future__ import annotations

import math
from pathlib import Path

from polyplan.formats.race import RaceRow, read_race_file
from polyplan.validation.figure import agg_figure, save_figure

RACE_FILE = "race.json"


def read_race(path: Path) -> tuple[RaceRow, ...]:
    """The overall rows of a race file (`formats.race.read_race_file`, any version) that have
    numbers (a configuration that failed to start has none and is left out)."""
    race = read_race_file(path)
    return tuple(row for row in race.rows if row.category == "all" and math.isfinite(row.measured))


def race_lines(rows: tuple[RaceRow, ...]) -> list[str]:
    """The race as a markdown table; with a column of the predictions priced on the race's own
    prompts where the race has them."""
    split = any(row.race_priced is not None for row in rows)
    lines = ["| configuration | measured speedup ± sd | predicted by `export` [interval] | error |"
             + (" priced on the race's prompts (error) |" if split else ""), "| --- | --- | --- | --- |" + (" --- |" if split else "")]
    for row in rows:
        kind = "decode" if row.decode_speedup is not None else "whole calls"
        if row.predicted is None:
            predicted, error = row.judgement(), "–"
        else:
            predicted, error = row.prediction_text(), f"{row.error:+.1%}"
        mark = " (exported)" if row.exported else ""
        again = "" if not split else (" – |" if row.race_priced is None else
                                      f" {row.race_priced:.2f}x ({row.race_priced_error:+.1%}) |")
        lines.append(f"| {row.label}{mark} | {row.measured:.2f}x ± {row.measured_sd:.2f} ({kind}) | {predicted} | {error} |{again}")
    return lines


def plot_race(rows: tuple[RaceRow, ...], path: Path, title: str) -> Path:
    """Horizontal bars of the measured speedups (sd as whiskers), the export's predictions as
    diamonds with their intervals, a line at 1.0 (llama.cpp's target alone)."""
    figure = agg_figure(7.2, 0.9 + 0.28 * len(rows))
    axes = figure.add_subplot()
    ys = list(range(len(rows)))[::-1]
    axes.barh(ys, [row.measured for row in rows], xerr=[row.measured_sd for row in rows],
              color=["C1" if row.exported else "C0" for row in rows], alpha=0.7, capsize=2, label="measured (± sd over prompts)")
    predicted = [(y, row) for y, row in zip(ys, rows) if row.predicted is not None]
    if predicted:
        bounds = [row.predicted_interval or (row.predicted, row.predicted) for _, row in predicted]
        errors = [[row.predicted - low for (_, row), (low, _) in zip(predicted, bounds)],
                  [high - row.predicted for (_, row), (_, high) in zip(predicted, bounds)]]
        axes.errorbar([row.predicted for _, row in predicted], [y for y, _ in predicted], xerr=errors, fmt="D", color="k",
                      markersize=4, capsize=2, label="predicted by export [interval]")
    axes.axvline(1.0, color="0.4", linestyle="--", linewidth=1)
    axes.set_yticks(ys)
    axes.set_yticklabels([row.label + (" (exported)" if row.exported else "") for row in rows], fontsize=7)
    return save_figure(figure, axes, path, xlabel="speedup over llama.cpp's target alone", ylabel="", title=title,
                       legend_size=7, legend_below=True)
