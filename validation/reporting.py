"""The validation report: the terminal's table, report.md, report.json and the plots.

`write_report(validation, folder)` writes them into `folder`; `report_of` builds report.json's
record (`formats.validation_report`) from a `Validation`, and `--json` prints its encoding.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polyplan.formats.errors import PolyplanError
from polyplan.formats.atomic import write_text_atomically
from polyplan.formats.plan import blocks_text
from polyplan.formats.validation_report import (
    Check,
    MeasuredExact,
    MeasuredInterval,
    PredictedSpeedup,
    ReportChain,
    ValidationReport,
    encode_report,
)
from polyplan.formats import validation_report as report_file
from polyplan.validation.categories import category_lines
from polyplan.validation.plots import write_plots
from polyplan.validation.results import (
    ROLE_ALTERNATIVE,
    ROLE_RECOMMENDED,
    ROLE_TARGET_ONLY,
    ROLE_TWO_MODEL,
    PREDICTION_TOLERANCE,
    ChainResult,
    Validation,
)

REPORT_FILE = "report.md"
JSON_FILE = "report.json"
_ROLE_MARKS = {ROLE_RECOMMENDED: "*", ROLE_TWO_MODEL: "2", ROLE_TARGET_ONLY: "1", ROLE_ALTERNATIVE: ""}


@dataclass(frozen=True)
class ReportFiles:
    """Where the report went, and what report.json holds."""

    report: Path
    json: Path
    plots: tuple[tuple[str, Path], ...]  # (plot name, path)
    contents: ValidationReport | None = field(default=None, repr=False)

    @property
    def payload(self) -> dict[str, Any] | None:
        """report.json's object (what --json prints, without reading the file back)."""
        return None if self.contents is None else encode_report(self.contents)


def _section(title: str, prose: str, table: list[str]) -> list[str]:
    """A report section: heading, how to read it, and its table; nothing when the table is empty."""
    return ["", f"## {title}", "", prose, "", *table] if table else []


def _table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """A markdown table: the header, its rule, then one line a row."""
    return [_table_line(columns), _table_line(("---",) * len(columns)), *(_table_line(row) for row in rows)]


def _table_line(cells: tuple[str, ...]) -> str:
    return "| " + " | ".join(cells) + " |"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def yes_no(value: bool | None) -> str:
    """A check's outcome in a table: yes, NO, or - (not judged)."""
    return {True: "yes", False: "NO", None: "-"}[value]


def _greedy(chain: ChainResult) -> str:
    if chain.measured.near_tie is not None:
        return "near-tie"
    return {True: "equal", False: "DIFFERS", None: "n/a"}[chain.measured.greedy_equal]


def _role(chain: ChainResult) -> str:
    marks = "".join(_ROLE_MARKS[role] for role in chain.roles)
    return marks or f"#{chain.rank}"


def table_lines(validation: Validation) -> list[str]:
    """The chains table (predicted next to measured) and the headline."""
    header = (
        f"{'':>3} {'chain':<40} {'K':<10} {'exact [interval]':>20} {'checked [interval]':>20} {'retimed':>7} {'paper':>6} "
        f"{'measured [CI]':>20} {'err exact':>9} {'checked':>7} {'retimed':>7} {'paper':>7} {'holds':>5} {'greedy':>7} {'tok/s':>6}"
    )
    lines, run = [header], validation.settings
    for chain in validation.chains:
        predicted, errors = chain.predicted, chain.errors
        retimed = "-" if predicted.retimed is None else f"{predicted.retimed:.2f}x"
        lines.append(
            f"{_role(chain):>3} {chain.label():<40} {blocks_text(chain.block_sizes, chain.draft_policy):<10} {predicted.text():>20} "
            f"{predicted.checked_text():>20} {retimed:>7} {predicted.paper:>5.2f}x {chain.measured.text():>20} "
            f"{_pct(errors.exact):>9} {_pct(chain.checked_error):>7} {_pct(errors.exact_retimed):>7} {_pct(errors.paper):>7} "
            f"{yes_no(chain.prediction_holds):>5} {_greedy(chain):>7} {chain.measured.tokens_per_second:>6.1f}"
        )
    lines.append("(* recommended, 2 best two-model chain, 1 target only, #r rank r in the plan; speedups over target-only "
                 f"decoding: paired per-prompt ratio (median over {run.repeats} repeat(s)) of {run.prompts} "
                 f"prompts x {run.new_tokens} tokens with its 95% bootstrap CI; exact: the plan's exact model "
                 "with its 95% prediction interval; checked: exact / C, recommend's self-check on this machine, its interval "
                 "widened by C's; retimed: the same on latency timed during this run; paper: Lemma 3.1; "
                 "err = predicted / measured − 1; holds: measured inside the interval and within 10% of the point "
                 "(the checked one where the plan has it))")
    lines.append("")
    lines.append(validation.headline.record.line)
    return lines


VERDICTS = {True: "holds", False: "does not hold", None: "undecided"}  # a check's outcome, as printed


def check_line(check: Check) -> str:
    """One check as the terminal prints it: its verdict, what it says and the run's facts behind it."""
    return f"{VERDICTS[check.passed]}: {check.name} ({check.detail})"


def _check_lines(validation: Validation) -> list[str]:
    return [f"- {check.name}: **{VERDICTS[check.passed]}** ({check.detail})" for check in validation.headline.checks]


def _diagnostic_lines(validation: Validation) -> list[str]:
    return [f"- {check.name}: {yes_no(check.passed)} ({check.detail})" for check in validation.headline.diagnostics]


def _error_source_lines(validation: Validation) -> list[str]:
    """The exact model's error per chain split by source (`ErrorSources`), as a markdown table."""
    rows = [(chain, chain.error_sources) for chain in validation.chains if chain.error_sources is not None]
    if not rows:
        return []
    columns = ("chain", "total error", "latency (profile vs re-timed T)", "acceptance (profile vs validation prompts)",
               "residual (model and noise)", "validation noise (CI half-width)", "tokens per target pass (predicted vs measured)")
    return _table(columns, [
        (chain.label(), _pct(sources.total), _pct(sources.latency), _pct(sources.acceptance),
         _pct(sources.residual if sources.residual is not None else sources.after_latency), f"±{sources.noise:.1%}",
         _pct(sources.tokens_per_pass))
        for chain, sources in rows
    ])


def _cost_split_lines(validation: Validation) -> list[str]:
    """The exact model's error per chain split by the factors of time per token (`CostSplit`),
    and per member its seconds per pass inside the chain against the plan's and the profile's."""
    rows = [(chain, chain.cost_split) for chain in validation.chains if chain.cost_split is not None]
    if not rows:
        return []
    factors = _table(
        ("chain", "total error", "target-only step (profile vs now)", "passes per token", "seconds per pass", "loop",
         "total-time vs paired ratio", "beyond the sum"),
        [(chain.label(), _pct(split.total), _pct(split.baseline), _pct(split.forwards), _pct(split.per_pass), _pct(split.loop),
          _pct(split.aggregation), _pct(split.model)) for chain, split in rows],
    )
    members = []
    for chain, _ in rows:
        for level in chain.levels:
            timing = level.seconds_per_pass
            if timing is None:
                continue
            profile = "-" if timing.profile is None else f"{timing.profile * 1e3:.3f}"
            ratio = "-" if not timing.profile else f"{timing.measured / timing.profile:.2f}x"
            members.append((chain.label(), level.model, f"{timing.mean_width:.2f}", f"{timing.measured * 1e3:.3f}",
                            f"{timing.exact * 1e3:.3f}", profile, ratio))
    columns = ("chain", "model", "tokens per pass", "ms per pass measured", "the plan's", "the profile's T at these widths",
               "measured / profile")
    return factors + [""] + _table(columns, members)


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _level_table(chain: ChainResult) -> list[str]:
    columns = ("model", "φ/N measured", "φ/N exact", "φ/N paper", "ms/token measured", "ms/token exact", "μ ± σ measured", "μ exact",
               "E[L] paper", "accepted/drafted measured", "accepted/drafted exact", "α")
    rows = []
    for level in chain.levels:
        forwards, seconds = level.forwards_per_token, level.seconds_per_token
        verifications, fraction = level.tokens_per_verification, level.accepted_fraction
        rows.append((
            level.model, f"{forwards.measured:.3f}", f"{forwards.exact:.3f}", f"{forwards.paper:.3f}",
            f"{seconds.measured * 1e3:.3f}", f"{seconds.exact * 1e3:.3f}",
            *(("-", "-", "-") if verifications is None else (f"{verifications.mu:.2f} ± {verifications.sigma:.2f}",
                                                            f"{verifications.exact:.2f}", f"{verifications.paper:.2f}")),
            *(("-", "-", "-") if fraction is None else (_number(fraction.measured), _number(fraction.exact), _number(fraction.alpha))),
        ))
    lines = _table(columns, rows)
    lines.append(f"| (decoding loop) | | | | {chain.measured.loop_seconds_per_token * 1e3:.3f} | "
                 f"{chain.predicted.loop_seconds_per_token * 1e3:.3f} | | | | | | |")
    return lines


def _limit_lines(validation: Validation) -> list[str]:
    """Where each lossless chain's decoding time goes, measured, and "free drafters": the speedup if
    the drafters cost nothing (target-only time per token over the chain's target and loop time)."""
    base = next((chain for chain in validation.chains if len(chain.chain) == 1), None)
    if base is None:
        return []
    step = base.levels[0].seconds_per_token.measured  # one target-only forward per token
    rows = []
    for chain in validation.chains:
        if len(chain.chain) == 1 or not chain.lossless:
            continue
        target, passes = chain.levels[0].seconds_per_token.measured, chain.levels[0].forwards_per_token.measured
        per_pass = target / passes
        drafters = sum(level.seconds_per_token.measured for level in chain.levels[1:])
        rest = target + chain.measured.loop_seconds_per_token
        bound = f"{base.measured.seconds_per_token / rest:.2f}x" if rest > 0 else "-"
        rows.append((chain.label(), f"{1 / passes:.2f}", f"{per_pass / step:.2f}x",
                     f"{target * 1e3:.3f}", f"{drafters * 1e3:.3f}", f"{chain.measured.loop_seconds_per_token * 1e3:.3f}",
                     f"{chain.measured_speedup:.2f}x", bound))
    columns = ("chain", "tokens per target pass", "target pass / target-only step", "target ms/token", "drafters ms/token",
               "loop ms/token", "measured speedup", "with free drafters")
    return _table(columns, rows)


def _acceptance_lines(chain: ChainResult) -> list[str]:
    """Acceptance as users of other engines read it: tokens per target pass, drafted/accepted."""
    levels = [
        f"{level.model} verified {level.tokens_drafted} drafted tokens, accepted {level.tokens_accepted}"
        + (f" ({level.tokens_accepted / level.tokens_drafted:.1%})" if level.tokens_drafted else "")
        for level in chain.levels[:-1]
    ]
    return [f"acceptance: {chain.tokens_per_target_pass:.2f} tokens per target pass" + "".join(f"; {line}" for line in levels), ""]


def _report_markdown(validation: Validation, plots: dict[str, str]) -> str:
    """report.md: settings, the table, the checks and diagnostics, per-model detail and the plots."""
    run = validation.settings
    lines = [
        "# polyplan validation report",
        "",
        f"**{validation.headline.record.line}**",
        "",
        f"- plan: `{run.plan}`; sampling `{run.sampling}`",
        f"- device: {run.device} (plan profiled on: {run.plan_device or 'unknown'})",
        f"- {run.prompts} prompts x {run.new_tokens} new tokens x {run.repeats} repeat(s), seed "
        f"{run.seed}; chains interleaved round-robin per prompt; prefill timed apart, speedups are decoding only",
        f"- exact model: {run.exact_model}",
        f"- wall time {run.wall_time_s:.1f} s",
    ]
    lines += [f"- note: {note}" for note in validation.notes]
    lines += ["", "## Chains", "", "```", *table_lines(validation)[:-2], "```", "", "## Checks", "", *_check_lines(validation)]
    lines += _section("Diagnostics", "How far each prediction's point fell from the measurement, against the "
                      f"{PREDICTION_TOLERANCE:.0%} a prediction holds within: information beside the checks, not verdicts "
                      "(the table above gives every chain's errors).", _diagnostic_lines(validation))
    lines += _section("Where the prediction error comes from",
                      "The exact model is re-evaluated step by step: on the profile (the plan), on latency re-timed "
                      "during this run, then also on the greedy acceptance measured on these validation prompts. "
                      "Each column is the ratio of consecutive steps − 1, so (1 + latency)(1 + acceptance)"
                      "(1 + residual) = 1 + total error: latency is what the machine changed since profiling, "
                      "acceptance what the other prompts changed, the residual the model's own error plus noise, "
                      "which the CI's half-width bounds. (Residual falls back to re-timed vs measured when "
                      "acceptance was not re-measured: sampling runs.) The last column is the acceptance effect in "
                      "plain terms.", _error_source_lines(validation))
    lines += _section("The error by the factors of time per token",
                      "The exact model prices a chain as the target-only step over Σ_i (passes per token × seconds per "
                      "pass) + the loop's time per token. Each column replaces one predicted factor by its measurement "
                      "in this run, so (1 + each column) multiply to 1 + total error: the target-only step (the "
                      "profile's T(1) against target-only decoding now), passes per token (acceptance), seconds per "
                      "pass inside the chain, the loop, and the paired per-prompt ratio against the ratio of total "
                      "times. The second table says which member's passes cost more inside the chain than its "
                      "profile at the same widths and contexts (switching, cache state, numerics).", _cost_split_lines(validation))
    limits = _limit_lines(validation)
    if limits:  # the prose names the target-only chain, which a report without one lacks
        lines += _section("What limits the speedup (measured)",
                          f"Target-only decoding: {next(c for c in validation.chains if len(c.chain) == 1).measured.seconds_per_token * 1e3:.3f} "
                          "ms/token. "
                          "A chain is bounded by its target passes: tokens per pass against the cost of a pass that verifies "
                          "several tokens; the drafters and the loop take the rest.", limits)
    if validation.categories:
        lines += ["", "## Per category (speedup over target-only, tokens per target pass)", "", "```"]
        for item in validation.categories:
            lines += [*category_lines(item.chain, item.rows), ""]
        lines += ["```"]
    lines += ["", "## Per model: forward passes per token (φ_i / N), time, tokens per verification", ""]
    for chain in validation.chains:
        measured = chain.measured
        e2e = "-" if not chain.lossless else f"{measured.end_to_end_speedup:.2f}x"
        lines += [
            f"### {chain.label()}  (K = {blocks_text(chain.block_sizes, chain.draft_policy)}; {', '.join(chain.roles)})",
            "",
            f"measured {measured.text()} (decoding), {e2e} with the prompt prefill; {measured.tokens_per_second:.1f} tokens/s; "
            f"greedy output {_greedy(chain)}" + (f" ({measured.first_difference})" if measured.first_difference else "")
            + (f"; {measured.near_tie}" if measured.near_tie else ""),
            "",
            *_level_table(chain),
            "",
            *_acceptance_lines(chain),
        ]
    lines += ["## Plots", ""]
    titles = {
        "predicted_vs_measured": "Predicted vs measured speedup (exact model and Lemma 3.1, identity line)",
        "measured_speedup": "Measured speedup per chain (error bars: paired 95% CI)",
        "phi": "Paper φ_i vs measured φ_i",
    }
    for name, file in plots.items():
        lines += [f"![{titles.get(name, name)}]({file})", ""]
    return "\n".join(lines)


def write_report(validation: Validation, folder: str | os.PathLike[str]) -> ReportFiles:
    """Write report.md, report.json and the plots into `folder` (created if needed)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise PolyplanError(f"--out: cannot create the folder {folder} ({error.strerror or error})") from None
    if not os.access(folder, os.W_OK):
        raise PolyplanError(f"--out: cannot write into {folder} (permission denied)")
    plots = write_plots(validation, folder)
    report, twin = folder / REPORT_FILE, folder / JSON_FILE
    files = {"report": str(report), "json": str(twin), **{name: str(path) for name, path in plots.items()}}
    contents = report_of(validation, files)
    report_file.write_report(contents, twin)
    write_text_atomically(report, _report_markdown(validation, {name: path.name for name, path in plots.items()}) + "\n")
    return ReportFiles(report, twin, tuple(plots.items()), contents)


# --------------------------------------------------------------------------- report.json's record

_CI_METHOD = "paired per-prompt ratio, median over repeats, two-stage bootstrap (profiler.paired)"


def report_of(validation: Validation, files: dict[str, str] | None = None) -> ValidationReport:
    """What report.json records of `validation` (`files`: what the report wrote, name -> path)."""
    return ValidationReport(
        chains=tuple(_chain_record(chain) for chain in validation.chains),
        headline=validation.headline.record,
        checks=validation.headline.checks,
        diagnostics=validation.headline.diagnostics,
        categories=validation.categories,
        settings=validation.settings,
        notes=validation.notes,
        files=dict(files or {}),
    )


def _chain_record(chain: ChainResult) -> ReportChain:
    lossless, measured, predicted = chain.lossless, chain.measured, chain.predicted
    paired = measured.paired
    return ReportChain(
        chain=chain.chain,
        block_sizes=chain.block_sizes,
        predicted_speedup=PredictedSpeedup(predicted.exact, predicted.paper, predicted.retimed),
        exact_retimed_reaccepted=predicted.reaccepted,
        measured_speedup=chain.measured_speedup,
        greedy_equal=measured.greedy_equal,
        recommended=chain.recommended,
        roles=chain.roles,
        rank=chain.rank,
        speedup_std=measured.speedup.std if lossless else None,
        speedup_per_repeat=measured.speedup.samples if lossless else None,
        error=chain.errors,
        end_to_end_speedup=measured.end_to_end_speedup if lossless else None,
        tokens_per_second=measured.tokens_per_second,
        seconds_per_token=measured.seconds_per_token,
        loop_seconds_per_token=MeasuredExact(measured.loop_seconds_per_token, predicted.loop_seconds_per_token),
        first_difference=measured.first_difference,
        levels=chain.levels,
        tokens_per_target_pass=chain.tokens_per_target_pass,
        predicted_interval=predicted.interval,
        measured_ci=None if paired is None or not lossless else MeasuredInterval(paired.low, paired.high, paired.level, _CI_METHOD),
        inside_interval=chain.inside_interval,
        prediction_holds=chain.prediction_holds,
        error_sources=chain.error_sources,
        near_tie=measured.near_tie,
        per_prompt=measured.prompts,
        cost_split=chain.cost_split,
        checked_speedup=predicted.checked,
        checked_interval=predicted.checked_interval,
        draft_policy=chain.draft_policy,
    )
