"""docs/results.md: the current run of each benchmark, regenerated from the files the runs wrote
(docs/validation.md, "The results page": a run folder's files and its run.json).

`python -m polyplan.validation.results_page` rebuilds the page and its plots (`--check`: only say
whether the page is current). Nothing on the page is typed by hand.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import PlanFile, blocks_text
from polyplan.formats.profile import Profile
from polyplan.formats.validation_report import ReportChain, ValidationReport
from polyplan.planner.exact.latency import curve_from_profile
from polyplan.validation.figure import agg_figure, save_figure
from polyplan.validation.measured_run import read_plan_and_report, read_run as read_measured
from polyplan.formats.race import LoadRace, RaceRow
from polyplan.validation.load_goals import goals_lines
from polyplan.validation.load_race_results import LOAD_RACE_FILE, load_race_lines, plot_load_race, read_load_race
from polyplan.validation.race_results import RACE_FILE, plot_race, race_lines, read_race

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
PAGE = ROOT / "docs" / "results.md"
_IMAGES = ROOT / "docs" / "img"
_MANIFEST_KEYS = ("title", "group", "command", "commit", "date", "machine", "threads")
_RACE_KEY = "race_command"  # run.json's command of the race.json beside it (`validation.race_results`)
_LOAD_RACE_KEY = "load_race_command"  # run.json's command of the race_load.json beside it (`validation.load_race_results`)
PLOTS = {"predicted_vs_measured": "results_predicted_vs_measured.png", "latency": "results_latency_curves.png",
         "load": "results_load_shapes.png"}


@dataclass(frozen=True)
class ResultRun:
    """One run's files and what produced them."""

    folder: str  # the folder's name under docs/results/
    title: str
    group: str
    command: str
    commit: str
    date: str
    machine: str
    threads: str
    report: ValidationReport
    plan: PlanFile | None
    profile: Profile | None
    race: tuple[RaceRow, ...] = ()  # a race of the run's plan against llama-server, where kept
    race_command: str | None = None
    load_races: tuple[KeptLoadRace, ...] = ()  # its races under load against llama-server, where kept


@dataclass(frozen=True)
class KeptLoadRace:
    """A race under load kept in a run folder: `race_load.json` (tag "") or `race_load_<tag>.json`,
    with run.json's `load_race_command` or `load_race_command_<tag>` saying what produced it."""

    tag: str
    race: LoadRace
    command: str

    def plot(self, folder: str) -> str:
        return f"results_load_race_{folder}{_suffix(self.tag)}.png"


def _suffix(tag: str) -> str:
    """What a tagged race under load adds to its file, its run.json key and its plot ("" untagged)."""
    return f"_{tag}" if tag else ""


def read_runs(results: Path = RESULTS) -> tuple[ResultRun, ...]:
    """Every run under `results` (folders with a run.json), by group then folder name."""
    runs = [_read_run(folder) for folder in sorted(results.iterdir()) if (folder / "run.json").is_file()]
    return tuple(sorted(runs, key=lambda run: (run.group, run.folder)))


def _read_run(folder: Path) -> ResultRun:
    manifest = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    raced = (folder / RACE_FILE).is_file()
    stem = LOAD_RACE_FILE.removesuffix(".json")
    tags = sorted(path.stem[len(stem) + 1:] for path in folder.glob(f"{stem}*.json"))  # "" for race_load.json itself
    kept = ((_RACE_KEY,) if raced else ()) + tuple(_LOAD_RACE_KEY + _suffix(tag) for tag in tags)
    missing = [key for key in _MANIFEST_KEYS + kept if not isinstance(manifest.get(key), str)]
    unknown = sorted(set(manifest) - set(_MANIFEST_KEYS) - set(kept))
    if missing or unknown:
        raise PolyplanError(f"{folder / 'run.json'}: needs text fields {', '.join(_MANIFEST_KEYS)}"
                            f"{'; missing ' + ', '.join(missing) if missing else ''}{'; unknown ' + ', '.join(unknown) if unknown else ''}")
    if (folder / "profile.json").is_file():
        measured = read_measured(folder / "profile.json")
        plan, report, profile = measured.plan, measured.report, measured.profile
    else:
        (plan, report), profile = read_plan_and_report(folder), None
    if report is None:
        raise PolyplanError(f"{folder}: a run folder needs the report.json its validation wrote")
    race = read_race(folder / RACE_FILE) if raced else ()
    load_races = tuple(KeptLoadRace(tag, read_load_race(folder / f"{stem}{_suffix(tag)}.json"), manifest[_LOAD_RACE_KEY + _suffix(tag)])
                       for tag in tags)
    return ResultRun(folder=folder.name, report=report, plan=plan, profile=profile, race=race, race_command=manifest.get(_RACE_KEY),
                     load_races=load_races, **{key: manifest[key] for key in _MANIFEST_KEYS})


def page_text(runs: tuple[ResultRun, ...]) -> str:
    """The markdown page (plots referenced from docs/img/)."""
    lines = ["# Results", "",
             "The current run of each benchmark, generated by `python -m polyplan.validation.results_page` from the files",
             "the runs wrote (`docs/results/<run>/`: report.json, plan.json, profile.json, and run.json saying what",
             "produced them); do not edit by hand. Speedups are over target-only decoding with the same decoder:",
             "predicted before the run (the plan's exact model, corrected by recommend's self-check where it ran),",
             "measured as paired per-prompt ratios with a 95% bootstrap CI. A prediction holds when the measurement",
             "is inside its interval and within 10% of its point.", ""]
    for group in dict.fromkeys(run.group for run in runs):
        lines += _group(group, [run for run in runs if run.group == group])
    kept = [(_load_title(run, race), race.race) for run in runs for race in run.load_races]
    if kept:
        lines += ["## Under load: the goals", "",
                  "Every race under load above against the goals of a plan per load (docs/validation.md, \"The results "
                  "page\"): a row per race and number of concurrent requests N. Each race's predictions are those its "
                  "commit made (its command above says which); a race run with `--configs` raced some configurations only.", ""] + goals_lines(kept) + [""]
    lines += ["## Plots", "",
              f"![Predicted against measured speedup, every validated chain of every run](img/{PLOTS['predicted_vs_measured']})", "",
              f"![T(k)/T(1) of each run's target: what a k-token verification costs](img/{PLOTS['latency']})", ""]
    if _load_groups(runs):
        lines += [f"![Prediction error per chain in each run of a group with several runs (load shapes, workloads, threads)](img/{PLOTS['load']})", ""]
    return "\n".join(lines)


def _load_groups(runs: tuple[ResultRun, ...]) -> list[str]:
    """The groups with more than one run (one benchmark under several load shapes, workloads or threads)."""
    groups = [run.group for run in runs]
    return [group for group in dict.fromkeys(groups) if groups.count(group) > 1]


def _group(group: str, runs: list[ResultRun]) -> list[str]:
    lines = [f"## {group}", ""]
    for run in runs:
        threads = "thread" if run.threads == "1" else "threads"
        lines += [f"**{run.title}** ({run.date}, commit {run.commit}, {run.machine}, {run.threads} {threads}): `{run.command}`", ""]
    lines += ["| run | chain [K] | predicted [95% interval] | measured [95% CI] | error | holds |",
              "| --- | --- | --- | --- | --- | --- |"]
    for run in runs:
        for chain in run.report.chains:
            if chain.measured_speedup is None or len(chain.chain) < 2:
                continue
            lines.append(_chain_row(run, chain))
    lines.append("")
    for run in runs:
        limit = run.plan.physical_limit if run.plan is not None else None
        recommended = next((c for c in run.report.chains if c.recommended), None)
        if limit is not None and recommended is not None and recommended.measured_speedup is not None:
            interval = f" [{limit.interval[0]:.2f}, {limit.interval[1]:.2f}]" if limit.interval else ""
            lines.append(f"- {run.title}: physical limit (a free drafter that is always right) {limit.speedup:.2f}x{interval} "
                         f"at K = {limit.block_size}; the recommended chain's measured {recommended.measured_speedup:.2f}x is "
                         f"{recommended.measured_speedup / limit.speedup:.0%} of it.")
    lines.append("")
    for run in runs:
        if run.race:
            lines += [f"The plan of \"{run.title}\" raced against llama-server: `{run.race_command}`", ""] + race_lines(run.race)
            lines += ["", f"![{run.title}: the race against llama-server](img/{_race_plot(run)})", ""]
        for kept in run.load_races:
            lines += [f"The plan of \"{run.title}\" under load, raced against llama-server with N concurrent clients: "
                      f"`{kept.command}`", ""] + load_race_lines(kept.race)
            lines += [f"![{run.title}: speedup against concurrent requests](img/{kept.plot(run.folder)})", ""]
    return lines


def _tagged(kept: KeptLoadRace) -> str:
    race = kept.race
    return f" ({race.prompts} prompts x {race.new_tokens} tokens, {race.repeats} repeats)" if kept.tag else ""


def _load_title(run: ResultRun, kept: KeptLoadRace) -> str:
    """A race under load named in the goals' table: its run's title, and its tag and shape where tagged."""
    race = kept.race
    return run.title + (f" ({kept.tag}: {race.prompts} prompts x {race.new_tokens} tokens)" if kept.tag else "")


def _race_plot(run: ResultRun) -> str:
    return f"results_race_{run.folder}.png"


def _chain_row(run: ResultRun, chain: ReportChain) -> str:
    predicted, interval, kind = _prediction(chain)
    low_high = f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else ""
    ci = f" [{chain.measured_ci.low:.2f}, {chain.measured_ci.high:.2f}]" if chain.measured_ci else ""
    mark = " (recommended)" if chain.recommended else ""
    holds = {True: "yes", False: "no", None: "–"}[chain.prediction_holds]
    return (f"| {run.title} | {' > '.join(chain.chain)} {blocks_text(chain.block_sizes, chain.draft_policy)}{mark} | {predicted:.2f}x{low_high} ({kind}) "
            f"| {chain.measured_speedup:.2f}x{ci} | {predicted / chain.measured_speedup - 1:+.1%} | {holds} |")


def _prediction(chain: ReportChain) -> tuple[float, tuple[float, float] | None, str]:
    if chain.checked_speedup is not None:
        return chain.checked_speedup, chain.checked_interval, "checked"
    return chain.predicted_speedup.exact, chain.predicted_interval, "exact"


def write_plots(runs: tuple[ResultRun, ...], images: Path = _IMAGES) -> list[Path]:
    """The page's PNGs (matplotlib's object API on an Agg canvas: no global backend touched)."""
    images.mkdir(parents=True, exist_ok=True)
    written = [_plot_predicted(runs, images / PLOTS["predicted_vs_measured"]), _plot_latency(runs, images / PLOTS["latency"])]
    if _load_groups(runs):
        written.append(_plot_load(runs, images / PLOTS["load"]))
    written += [plot_race(run.race, images / _race_plot(run), f"{run.title}: the race against llama-server") for run in runs if run.race]
    written += [plot_load_race(kept.race, images / kept.plot(run.folder), f"{run.title}: under load{_tagged(kept)}")
                for run in runs for kept in run.load_races]
    return written


def _plot_predicted(runs: tuple[ResultRun, ...], path: Path) -> Path:
    figure = agg_figure(6.8, 5.6)
    axes = figure.add_subplot()
    low, high = 1.0, 1.0
    for index, run in enumerate(runs):
        chains = [c for c in run.report.chains if c.measured_speedup is not None and len(c.chain) > 1]
        for chain in chains:
            predicted, interval, _ = _prediction(chain)
            below = predicted - interval[0] if interval else 0.0
            above = interval[1] - predicted if interval else 0.0
            ci = chain.measured_ci
            left = chain.measured_speedup - ci.low if ci else 0.0
            right = ci.high - chain.measured_speedup if ci else 0.0
            axes.errorbar(chain.measured_speedup, predicted, xerr=[[left], [right]], yerr=[[below], [above]], fmt="o",
                          color=f"C{index % 10}", markersize=4, capsize=2, alpha=0.8,
                          label=f"{run.group}: {run.title}" if chain is chains[0] else None)
            high = max(high, chain.measured_speedup + right, predicted + above)
            low = min(low, chain.measured_speedup - left, predicted - below)
    high *= 1.05
    low = 0.95 * max(low, 0.0)  # chains slower than the target alone stay on the plot
    axes.plot([low, high], [low, high], color="0.4", linestyle="--", linewidth=1)
    axes.fill_between([low, high], [0.9 * low, 0.9 * high], [1.1 * low, 1.1 * high], color="0.85", alpha=0.5, label="within 10%")
    axes.axvline(1.0, color="0.7", linewidth=0.8)
    axes.axhline(1.0, color="0.7", linewidth=0.8)
    axes.set_xlim(low, high)
    axes.set_ylim(low, high)
    return save_figure(figure, axes, path, xlabel="measured speedup (95% CI)", ylabel="predicted speedup (95% interval)",
                       legend_size=7, legend_below=True)


def _plot_latency(runs: tuple[ResultRun, ...], path: Path) -> Path:
    figure = agg_figure(6.4, 4.4)
    axes = figure.add_subplot()
    seen: set[str] = set()
    for index, run in enumerate(runs):
        curve = _target_curve(run)
        if curve is None or run.machine + run.group in seen:
            continue
        seen.add(run.machine + run.group)
        ks = sorted(curve)
        axes.plot(ks, [curve[k] for k in ks], marker="o", markersize=3, color=f"C{index % 10}", label=f"{run.group}")
    axes.set_ylim(0.0, max([2.0] + [1.2 * line.get_ydata().max() for line in axes.get_lines()]))
    axes.axhline(1.0, color="0.6", linestyle="--", linewidth=1, label="T(k) = T(1) (free verification)")
    return save_figure(figure, axes, path, xlabel="tokens per pass k", ylabel="T(k) / T(1) of the target", legend_size=7)


def _target_curve(run: ResultRun) -> dict[int, float] | None:
    """T(k)/T(1) of the run's target: from its profile, else from the plan's physical limit
    (S(K) = (K+1)·T(1)/T(K+1), so T(K+1)/T(1) = (K+1)/S(K))."""
    if run.profile is not None and run.plan is not None:
        curve = curve_from_profile(run.profile.model(run.plan.target))
        return {k: curve(k) / curve(1) for k in curve.ks}
    if run.plan is not None and run.plan.physical_limit is not None:
        return {1: 1.0} | {k + 1: (k + 1) / s for k, s in enumerate(run.plan.physical_limit.speedups, start=1)}
    return None


def _plot_load(runs: tuple[ResultRun, ...], path: Path) -> Path:
    figure = agg_figure(7.2, 4.4)
    axes = figure.add_subplot()
    groups = _load_groups(runs)
    bars = [(run, chain) for run in runs if run.group in groups for chain in run.report.chains
            if chain.measured_speedup is not None and len(chain.chain) > 1]
    labels = sorted({" > ".join(chain.chain) for _, chain in bars})
    shapes = list(dict.fromkeys(run.title for run, _ in bars))
    width = 0.8 / max(1, len(shapes))
    for s, shape in enumerate(shapes):
        errors = []
        for label in labels:
            match = [(r, c) for r, c in bars if r.title == shape and " > ".join(c.chain) == label]
            errors.append(100 * (_prediction(match[0][1])[0] / match[0][1].measured_speedup - 1) if match else 0.0)
        axes.bar([i + s * width for i in range(len(labels))], errors, width=width, label=shape, color=f"C{s % 10}")
    axes.axhline(10, color="0.5", linestyle="--", linewidth=1)
    axes.axhline(-10, color="0.5", linestyle="--", linewidth=1)
    axes.set_xticks([i + width * (len(shapes) - 1) / 2 for i in range(len(labels))])
    axes.set_xticklabels([label.replace("target > ", "") for label in labels], rotation=20, fontsize=7, ha="right")
    return save_figure(figure, axes, path, ylabel="prediction error, % (predicted / measured − 1)", legend_size=7)


def main(argv: list[str] | None = None) -> int:
    """Rebuild docs/results.md and its plots; `--check` only says whether the page is current."""
    args = sys.argv[1:] if argv is None else argv
    runs = read_runs()
    text = page_text(runs)
    if "--check" in args:
        current = PAGE.is_file() and PAGE.read_text(encoding="utf-8") == text
        print("docs/results.md is current" if current else "docs/results.md is out of date")
        return 0 if current else 1
    PAGE.write_text(text, encoding="utf-8")
    for path in write_plots(runs):
        print(f"wrote {path.relative_to(ROOT)}")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
