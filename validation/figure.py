"""One PNG figure: a matplotlib `Figure` on its own Agg canvas (pyplot's global backend is never
touched), its labels, legend and file written in one step.
"""

from __future__ import annotations

from pathlib import Path


def agg_figure(width: float, height: float):
    """A `width` × `height` inch figure at 110 dpi on an Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure, axes, path: Path, *, ylabel: str, xlabel: str | None = None, title: str | None = None,
                legend_size: int = 8, legend_loc: str | None = None, legend_below: bool = False) -> Path:
    """Label `axes` (a title in 9 points), draw its legend (`legend_below`: under the axes, for
    long labels), lay the figure out and write it to `path`."""
    if xlabel is not None:
        axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    if title is not None:
        axes.set_title(title, fontsize=9)
    if legend_below:
        # below the x label (about 0.45 inch under the axes whatever their height), two columns
        below = -0.45 * figure.dpi / max(axes.get_window_extent().height, 1.0)
        axes.legend(fontsize=legend_size, loc="upper center", bbox_to_anchor=(0.5, below), frameon=False, ncol=2)
    else:
        axes.legend(fontsize=legend_size, **({} if legend_loc is None else {"loc": legend_loc}))
    figure.tight_layout()
    figure.savefig(path, **({"bbox_inches": "tight"} if legend_below else {}))  # the legend below lies outside the axes
    return path
