"""What a forward pass pays to attend over more KV cells: the price of llama-server's `--kv-unified`.

llama.cpp attends every row of a pass over the cache's cells up to the highest one in use, padded
to a multiple of 256 (`llama_kv_cache::get_n_kv`, src/llama-kv-cache.cpp; the mask hides other
sequences' cells from a row). With a KV stream per slot (llama-server's default
at `-np N`) a pass reads its own slots' streams; with one stream for every slot
(`--kv-unified`) every pass reads every slot's cells. T(k) is timed at a short context, so a
unified pass costs T(k) plus the seconds per cell at k rows times the cells it reads beyond what
the split server's pass would (`CellCost.extra_s`). The seconds per cell come from T(k) timed
through the bindings at a short and a long context in one sitting (`cell_cost`): cells every row
attends. Another slot's cells are masked for a row, and the CPU kernel skips masked cells, so the
price is an upper bound that is loose at long contexts (docs/cost-model.md, "What it leaves out").
Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polyplan.formats.profile import ModelProfile

KV_PAD = 256  # llama.cpp pads the cells a pass reads to a multiple of this (at least this many)


def padded_cells(cells: int) -> int:
    """The cells a pass reads when the highest cell in use is `cells` (`KV_PAD` at least)."""
    return max(KV_PAD, -(-int(cells) // KV_PAD) * KV_PAD)


@dataclass(frozen=True)
class CellCost:
    """Seconds a pass of k rows pays per KV cell it reads (`per_cell_s[i]` at `ks[i]`): linear
    between the widths measured, flat below the first, proportional to k beyond the last (every
    row attends over every cell); measured between `short` and `long` cached tokens."""

    ks: tuple[int, ...]
    per_cell_s: tuple[float, ...]
    short: int
    long: int

    def __call__(self, k: int) -> float:
        """Seconds per cell read by a pass of `k` rows."""
        if k > self.ks[-1]:
            return self.per_cell_s[-1] * k / self.ks[-1]
        return float(np.interp(k, self.ks, self.per_cell_s))

    def extra_s(self, width: int, cells: int, own_cells: int) -> float:
        """What a pass of `width` rows reading the cells up to `cells` costs beyond one reading up
        to `own_cells` (each padded as llama.cpp pads them; 0 where they pad alike)."""
        more = padded_cells(cells) - padded_cells(own_cells)
        return more * self(width) if more > 0 else 0.0

    def text(self) -> str:
        """The cost of 1,000 cells at the widths measured, in milliseconds."""
        return ", ".join(f"{1e6 * value:.2f} ms per 1,000 cells at {k} row{'s' if k != 1 else ''}"
                         for k, value in zip(self.ks, self.per_cell_s))


def cell_cost(entry: ModelProfile) -> CellCost | None:
    """`CellCost` from a latency entry timed at two or more context lengths (the shortest and the
    longest read): at each width timed at both, their difference over the padded cells between
    them, floored at 0 (timing noise); None where the entry has one context or no common width."""
    by_context: dict[int, dict[int, float]] = {}
    for point in entry.latency:
        by_context.setdefault(point.context_length, {})[point.k] = point.median_s
    if len(by_context) < 2:
        return None
    short, long = min(by_context), max(by_context)
    ks = sorted(set(by_context[short]) & set(by_context[long]))
    cells = [padded_cells(long + k) - padded_cells(short + k) for k in ks]
    pairs = [(k, max(0.0, (by_context[long][k] - by_context[short][k]) / more)) for k, more in zip(ks, cells) if more > 0]
    if not pairs:
        return None
    return CellCost(tuple(k for k, _ in pairs), tuple(value for _, value in pairs), short, long)
