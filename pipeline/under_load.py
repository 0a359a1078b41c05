"""`polyplan bench loop`: the closed loop (profile → recommend → validate) quiet, then under loads.

Each run is `polyplan demo` (`pipeline.stages.run_demo`) into its own folder, `<out>/quiet` and
one per load shape (`<out>/steady`, …), with `pipeline.load.background_load` running that shape for
the whole run. The timings are re-timed in each run and acceptance reused, so a loaded run plans on
timings taken under its load, as a user on a busy machine would; `loop_lines` reports each chain's
prediction against its measurement and each run's headline checks (docs/validation.md).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from polyplan.pipeline.demo import DemoSettings
from polyplan.pipeline.stages import DemoResult, run_demo
from polyplan.pipeline.load import MAX_SECONDS, SHAPES, LoadReport, background_load
from polyplan.validation.reporting import yes_no
from polyplan.validation.results import CHECK_FASTEST, CHECK_HOLDS, DIAGNOSTIC_CHECKED, DIAGNOSTIC_EXACT

QUIET = "quiet"
LOADED = "steady"  # the shape `bench loop` runs when no other is asked for


@dataclass(frozen=True)
class LoopRun:
    """One profile → recommend → validate run and the load it ran under (none when quiet)."""

    label: str
    result: DemoResult
    load: tuple[LoadReport, ...]


@dataclass(frozen=True)
class LoopBenchmark:
    runs: tuple[LoopRun, ...]
    cores: int


def run_load_loop(settings: DemoSettings, *, cores: int = 1, shapes: tuple[str, ...] = (LOADED,),
                  load_seconds: float = MAX_SECONDS, log=lambda line: None,
                  profile_progress=None, validation_progress=None) -> LoopBenchmark:
    """Run the demo quiet, then under each load shape in `shapes` (module docstring)."""
    runs = []
    out = Path(settings.out)
    for label in (QUIET, *shapes):
        log(f"{label} run: profile -> recommend -> validate into {out / label}")
        run_settings = dataclasses.replace(settings, out=out / label)
        if label == QUIET:
            result, load = run_demo(run_settings, profile_progress=profile_progress, validation_progress=validation_progress,
                                    log=log), ()
        else:
            with background_load(load_seconds, cores, SHAPES[label]) as running:
                result = run_demo(run_settings, profile_progress=profile_progress, validation_progress=validation_progress,
                                  log=log)
            load = running.reports
        runs.append(LoopRun(label, result, tuple(load)))
    return LoopBenchmark(tuple(runs), cores)


def loop_lines(bench: LoopBenchmark) -> list[str]:
    """Per run and chain: predicted [interval], measured [CI], error, inside, holds; the goals."""
    lines = [
        f"{'run':<11} {'chain':<40} {'predicted [95% interval]':>25} {'measured [95% CI]':>22} {'error':>7} "
        f"{'inside':>6} {'holds':>5}"
    ]
    goals = []
    for run in bench.runs:
        validation = run.result.validation
        for chain in validation.chains:
            if len(chain.chain) == 1:
                continue
            error = "-" if chain.judged_error is None else f"{chain.judged_error:+.1%}"
            lines.append(
                f"{run.label:<11} {chain.label() + (' *' if chain.recommended else ''):<40} {chain.predicted.judged_text():>25} "
                f"{chain.measured.text():>22} {error:>7} {yes_no(chain.inside_interval):>6} {yes_no(chain.prediction_holds):>5}"
            )
        head = validation.headline
        ranking, holds = head.find(CHECK_FASTEST), head.find(CHECK_HOLDS)
        checked = head.find(DIAGNOSTIC_CHECKED)
        within = checked if checked is not None and checked.passed is not None else head.find(DIAGNOSTIC_EXACT)
        inside = [chain.inside_interval for chain in validation.chains if len(chain.chain) > 1 and chain.lossless]
        judged = [value for value in inside if value is not None]
        load = ""
        if run.load:
            rate = sum(report.products_per_second for report in run.load)
            load = f"; load: {len(run.load)} process(es), {rate:.0f} matrix products/s"
        goals += [
            f"{run.label}: {'checked prediction' if within is checked else 'exact model'} within 10% on every chain: "
            f"{yes_no(within.passed)} ({within.detail}); "
            f"measured speedups inside their intervals: {sum(judged)} of {len(judged)}; "
            f"every prediction holds: {yes_no(holds.passed)}; recommended fastest or tied: {yes_no(ranking.passed)} "
            f"({ranking.detail}){load}",
        ]
        goals += [f"{run.label}: warning: {note}" for note in validation.notes if note.startswith("timing warning")]
    lines += ["(* recommended; predicted: the plan's prediction with its interval, the exact model corrected by the "
              "self-check where it ran (checked), else the exact model's bootstrap interval; measured: paired per-prompt speedup over "
              "target-only decoding with its CI; error = predicted / measured - 1; holds: inside and within 10%)", ""]
    return lines + goals
