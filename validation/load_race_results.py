"""A race under load on the results page: read back, tabled per number of clients and plotted.

A run folder of `docs/results/` may keep the JSON `polyplan bench peers --clients ... --json`
printed (`LOAD_RACE_FILE`, `formats.race.LoadRace`) and name that command in its run.json
(`load_race_command`); `validation.results_page` then puts the race under load under the run: a
table per number of clients, the split where the race has one, and a plot of speedup against it,
predicted with its interval and measured with its spread over repeats.
"""

from __future__ import annotations

import math
from pathlib import Path

from polyplan.formats.race import LoadRace, LoadRow, load_split, read_load_race_file
from polyplan.validation.figure import agg_figure, save_figure

LOAD_RACE_FILE = "race_load.json"
_CONTROL_WORD = "(control)"


def read_load_race(path: Path) -> LoadRace:
    """The race under load in `path` (`formats.race.read_load_race_file`)."""
    return read_load_race_file(path)


def _measured(row: LoadRow) -> bool:
    return row.failure is None and math.isfinite(row.speedup)


def load_race_lines(race: LoadRace) -> list[str]:
    """The race under load as markdown: per number of clients, a table of every configuration
    (aggregate speedup ± sd over repeats, aggregate and per-request decode tokens/s, time to first
    token, the prediction and its judgement) and a line on the fastest, the plan's choice and the
    physical limit there."""
    lines = []
    for level in race.levels:
        rows = sorted(race.at(level.clients), key=lambda row: -row.speedup if _measured(row) else math.inf)
        lines += [f"*{level.clients} concurrent request{'s' if level.clients > 1 else ''}* (`-np {level.clients}`):", "",
                  "| configuration | aggregate speedup ± sd | aggregate tok/s ± sd | per request tok/s | first token (s) | predicted [interval] (error, verdict) |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for row in rows:
            mark = " (the plan's choice)" if row.chosen else ""
            if not _measured(row):
                lines.append(f"| {row.label}{mark} | {row.failure or 'not measured'} | – | – | – | – |")
                continue
            lines.append(f"| {row.label}{mark} | {row.speedup:.2f}x ± {row.speedup_sd:.2f} | {row.tokens_per_s:.1f} ± "
                         f"{row.tokens_per_s_sd:.1f} | {row.request_tokens_per_s:.1f} | {row.first_token_s:.2f} | {row.judgement()} |")
        limit = "" if level.limit is None else f"; physical limit {level.limit:.2f}x"
        choice = "" if level.choice is None else f" ({level.choice})"
        lines += ["", f"- fastest: {level.fastest or '–'}; the plan's choice: {level.chosen or '–'}{choice}{limit}"
                      + (f"; {level.note}" if level.note else ""), ""]
    return lines + _split_lines(race)


def _split_lines(race: LoadRace) -> list[str]:
    """The split, where the race has one (`formats.race.load_split`): each prediction priced on the
    profile's prompts and on the race's own answers, against the measurement, and the mean
    absolute error of each."""
    split = load_split(race.rows)
    if split is None:
        return []
    lines = ["*The predictions priced on this race's own answers* (the target alone's outputs, as long as "
             "the race decoded them, and each draft model's agreement with them): what is left of an error is the "
             "cost model's.", "",
             "| clients | configuration | measured | on the profile's prompts | on the race's answers |", "| --- | --- | --- | --- | --- |"]
    lines += [f"| {row.clients} | {row.label} | {row.speedup:.2f}x | {row.predicted_speedup:.2f}x ({100 * row.error:+.1f}%) | "
              f"{row.race_priced:.2f}x ({100 * row.race_priced_error:+.1f}%) |" for row in split.rows]
    return lines + ["", f"- mean absolute error over these {len(split.rows)} rows: {100 * split.profiled:.1f}% on the profile's "
                        f"prompts, {100 * split.answered:.1f}% on the race's answers", ""]


def plot_load_race(race: LoadRace, path: Path, title: str) -> Path:
    """Speedup against the number of clients: each configuration the plan predicted (its
    prediction as a square with its interval, dashed) and its measurement (mean ± sd over
    repeats, solid), llama-server's own default measured, and the physical limit (dotted)."""
    predicted = {row.label for row in race.rows if row.predicted_speedup is not None and row.label != "off (no speculation)"}
    defaults = {level.spec_default for level in race.levels if level.spec_default}
    labels = [label for label in dict.fromkeys(row.label for row in race.rows)
              if (label in predicted or label in defaults) and _CONTROL_WORD not in label]
    figure = agg_figure(7.2, 4.0 + 0.11 * len(labels))  # room for the legend below: two entries a configuration, two columns
    axes = figure.add_subplot()
    for index, label in enumerate(labels):
        rows = sorted((row for row in race.rows if row.label == label and _measured(row)), key=lambda row: row.clients)
        if not rows:
            continue
        shift = 1 + 0.025 * (index - len(labels) / 2)
        xs = [row.clients * shift for row in rows]
        color = f"C{index % 10}"
        axes.errorbar(xs, [row.speedup for row in rows], yerr=[row.speedup_sd for row in rows], fmt="o-", color=color,
                      capsize=2, markersize=4, label=f"{label}: measured")
        with_prediction = [(x, row) for x, row in zip(xs, rows) if row.predicted_speedup is not None]
        if with_prediction:
            bounds = [row.predicted_interval or (row.predicted_speedup, row.predicted_speedup) for _, row in with_prediction]
            errors = [[row.predicted_speedup - low for (_, row), (low, _) in zip(with_prediction, bounds)],
                      [high - row.predicted_speedup for (_, row), (_, high) in zip(with_prediction, bounds)]]
            axes.errorbar([x for x, _ in with_prediction], [row.predicted_speedup for _, row in with_prediction], yerr=errors,
                          fmt="s--", color=color, alpha=0.45, capsize=2, markersize=4, label=f"{label}: predicted")
    limits = [(level.clients, level.limit) for level in race.levels if level.limit is not None]
    if limits:
        axes.plot([c for c, _ in limits], [value for _, value in limits], ":", color="k", label="physical limit")
    axes.axhline(1.0, color="0.4", linestyle="--", linewidth=1)
    axes.set_xscale("log", base=2)
    axes.set_xticks(list(race.clients))
    axes.set_xticklabels([str(count) for count in race.clients])
    return save_figure(figure, axes, path, xlabel="concurrent requests N (llama-server -np N)",
                       ylabel="aggregate decode speedup over the target alone at N", title=title, legend_size=6,
                       legend_below=True)
