"""The validation plots (PNG): predicted against measured speedup, measured speedup with error
bars, and the paper's φ_i against the measured φ_i. Lossy chains are left out of every plot (they
have no measured speedup); figures never touch pyplot's global backend (`validation.figure`).
"""

from __future__ import annotations

from pathlib import Path

from polyplan.validation.figure import agg_figure, save_figure
from polyplan.validation.results import ChainResult, Validation

PLOT_FILES = {
    "predicted_vs_measured": "predicted_vs_measured.png",
    "measured_speedup": "measured_speedup.png",
    "phi": "phi_paper_vs_measured.png",
}


def _short(chain: ChainResult) -> str:
    return " > ".join(chain.chain[1:]) or "target only"


def _identity(axes, low: float, high: float) -> None:
    axes.plot([low, high], [low, high], color="0.4", linestyle="--", linewidth=1, label="identity (perfect prediction)")
    axes.set_xlim(low, high)
    axes.set_ylim(low, high)


def _measured_error(chain: ChainResult) -> list[list[float]]:
    """Asymmetric error bar [[below], [above]]: the paired CI (zero when none was computed)."""
    paired, std = chain.measured.paired, chain.measured.speedup.std
    if paired is None:
        return [[std or 0.0], [std or 0.0]]
    return [[chain.measured_speedup - paired.low], [paired.high - chain.measured_speedup]]


def _predicted_error(chain: ChainResult) -> list[list[float]] | None:
    predicted = chain.predicted
    if predicted.interval is None:
        return None
    return [[predicted.exact - predicted.interval[0]], [predicted.interval[1] - predicted.exact]]


def _plot_predicted_vs_measured(validation: Validation, path: Path) -> None:
    """Predicted (exact model and Lemma 3.1) against measured speedup, one point per chain."""
    chains = [chain for chain in validation.chains if chain.lossless]
    figure = agg_figure(6.4, 5.6)
    axes = figure.add_subplot()
    values = [v for chain in chains for v in (chain.measured_speedup, chain.predicted.exact, chain.predicted.paper,
                                              chain.predicted.retimed or 0.0)]
    low, high = 0.0, max(values + [1.0]) * 1.1
    grid = [low, high]
    axes.fill_between(grid, [0.9 * x for x in grid], [1.1 * x for x in grid], color="tab:blue", alpha=0.08, label="±10% of measured")
    _identity(axes, low, high)
    for chain in chains:
        error, measured, predicted = _measured_error(chain), chain.measured_speedup, chain.predicted
        axes.errorbar(measured, predicted.exact, xerr=error, yerr=_predicted_error(chain), fmt="o", color="tab:blue",
                      capsize=3)
        axes.errorbar(measured, predicted.paper, xerr=error, fmt="^", color="tab:orange", capsize=3)
        if predicted.retimed is not None:
            axes.plot(measured, predicted.retimed, "o", markerfacecolor="none", color="tab:blue")
        axes.annotate(_short(chain), (measured, predicted.exact), textcoords="offset points", xytext=(5, -10), fontsize=7)
    axes.plot([], [], "o", color="tab:blue", label="exact model")
    if any(chain.predicted.retimed is not None for chain in chains):
        axes.plot([], [], "o", markerfacecolor="none", color="tab:blue", label="exact model, latency re-timed in the run")
    axes.plot([], [], "^", color="tab:orange", label="paper (Lemma 3.1)")
    save_figure(figure, axes, path, xlabel="measured speedup over target-only decoding", ylabel="predicted speedup",
                title="Predicted vs measured speedup (same run; bars: measured 95% CI, predicted 95% interval)",
                legend_loc="lower right")


def _plot_measured_speedup(validation: Validation, path: Path) -> None:
    """Measured speedup per chain with its paired 95% CI, predictions as markers."""
    chains = [chain for chain in validation.chains if chain.lossless]
    figure = agg_figure(max(6.4, 1.1 * len(chains) + 2), 4.8)
    axes = figure.add_subplot()
    positions = list(range(len(chains)))
    colours = ["tab:green" if chain.recommended else "tab:gray" for chain in chains]
    errors = [_measured_error(c) for c in chains]
    axes.bar(positions, [c.measured_speedup for c in chains], yerr=[[e[0][0] for e in errors], [e[1][0] for e in errors]],
             color=colours, capsize=4, label="measured (paired 95% CI)")
    axes.plot(positions, [c.predicted.exact for c in chains], "o", color="tab:blue", label="exact model")
    retimed = [(x, c.predicted.retimed) for x, c in zip(positions, chains) if c.predicted.retimed is not None]
    if retimed:
        axes.plot([x for x, _ in retimed], [y for _, y in retimed], "o", markerfacecolor="none", color="tab:blue",
                  markersize=9, label="exact model, latency re-timed in the run")
    axes.plot(positions, [c.predicted.paper for c in chains], "^", color="tab:orange", label="paper (Lemma 3.1)")
    axes.axhline(1.0, color="0.4", linewidth=1)
    axes.set_xticks(positions)
    axes.set_xticklabels([_short(c) + (" *" if c.recommended else "") for c in chains], rotation=25, ha="right", fontsize=7)
    save_figure(figure, axes, path, ylabel="speedup over target-only decoding", title="Measured speedup per chain (* recommended)")


def _plot_phi(validation: Validation, path: Path) -> None:
    """The paper's φ_i / N and the exact model's against the measured forwards per token."""
    figure = agg_figure(6.4, 5.6)
    axes = figure.add_subplot()
    points = [(level, chain) for chain in validation.chains if chain.lossless and len(chain.chain) > 1 for level in chain.levels]
    values = [v for level, _ in points for v in (level.forwards_per_token.measured, level.forwards_per_token.paper,
                                                 level.forwards_per_token.exact)]
    positive = [v for v in values if v > 0] or [1.0]
    low, high = min(positive) / 1.5, max(positive) * 1.5
    axes.set_xscale("log")
    axes.set_yscale("log")
    _identity(axes, low, high)
    for level, chain in points:
        forwards = level.forwards_per_token
        axes.plot(forwards.measured, forwards.paper, "^", color="tab:orange")
        axes.plot(forwards.measured, forwards.exact, "o", color="tab:blue", markersize=4)
        axes.annotate(level.model, (forwards.measured, forwards.paper), textcoords="offset points",
                      xytext=(4, 3), fontsize=6)
    axes.plot([], [], "^", color="tab:orange", label="paper φ_i / N (Lemma 3.1)")
    axes.plot([], [], "o", color="tab:blue", label="exact model")
    save_figure(figure, axes, path, xlabel="measured forward passes per token (φ_i / N)", ylabel="predicted forward passes per token",
                title="Forward passes per token, per model of each chain", legend_loc="upper left")


def write_plots(validation: Validation, folder: Path) -> dict[str, Path]:
    """Write the three plots into `folder`; returns their paths by name (see `PLOT_FILES`)."""
    paths = {name: folder / file for name, file in PLOT_FILES.items()}
    _plot_predicted_vs_measured(validation, paths["predicted_vs_measured"])
    _plot_measured_speedup(validation, paths["measured_speedup"])
    _plot_phi(validation, paths["phi"])
    return paths
