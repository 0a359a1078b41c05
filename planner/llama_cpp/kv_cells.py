"""What a forward pass pays to hold other slots' KV cells in its view: the price of llama-server's
`--kv-unified`.

llama.cpp attends every row of a pass over the cache's cells up to the highest one in use, padded
to a multiple of 256 (`llama_kv_cache::get_n_kv`, src/llama-kv-cache.cpp). With a KV stream per
slot (llama-server's default at `-np N`) a pass reads its slots' streams, each as long as the
longest; with one stream for every slot (`--kv-unified`) every pass reads every slot's cells, the
other slots' masked for a row. A masked cell is cheaper than one a row attends (the CPU kernel
skips it, and skips a whole tile where every row of the tile masks it) but not free, and how much
cheaper depends on how the rows of a pass spread over the slots. So it is measured as the server
runs it (`UnifiedSteps`): the target's decode step of `sequences` sequences of `cells` cached
tokens each, its rows spread over them (`spread_rows`), in one stream per sequence and in one
unified stream, in one sitting; the seconds per extra cell at k rows (`cell_cost`) are their
difference over the padded cells the unified step reads beyond the split one. A masked cell costs
more over longer slots, so the step is timed at two lengths and read at the pass's own slots'
(`CellCost.longer`). A unified pass then costs T(k) plus that times its extra cells
(`CellCost.extra_s`). docs/cost-model.md, "What it
leaves out". Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KV_PAD = 256  # llama.cpp pads the cells a pass reads to a multiple of this (at least this many)


def padded_cells(cells: int) -> int:
    """The cells a pass reads when the highest cell in use is `cells` (`KV_PAD` at least)."""
    return max(KV_PAD, -(-int(cells) // KV_PAD) * KV_PAD)


def spread_rows(k: int, sequences: int) -> tuple[int, ...]:
    """The rows of a k-row pass per sequence, as evenly as they go (the first sequences one more):
    every slot of a loaded server decodes in each pass, one row or a draft's."""
    return tuple(k // sequences + (i < k % sequences) for i in range(sequences))


@dataclass(frozen=True)
class UnifiedSteps:
    """One sitting of the target's decode step over `sequences` sequences of `cells` cached tokens
    each, k rows spread over them (`spread_rows`) at each of `ks`: median seconds with a KV stream
    per sequence (`split_s`) and with one stream for all (`unified_s`), timed in turn."""

    sequences: int
    cells: int
    ks: tuple[int, ...]
    split_s: tuple[float, ...]
    unified_s: tuple[float, ...]

    def extra_cells(self, k: int) -> int:
        """The padded cells the unified step of k rows reads beyond the split one."""
        return padded_cells(self.sequences * self.cells + k) - padded_cells(self.cells + max(spread_rows(k, self.sequences)))


@dataclass(frozen=True)
class CellCost:
    """Seconds a pass of k rows pays per KV cell of other slots in its view (`per_cell_s[i]` at
    `ks[i]`): linear between the widths measured, flat below the first, proportional to k beyond
    the last; measured over `sequences` sequences of `cells` cached tokens each (`UnifiedSteps`).
    `longer`: the same measured over longer slots; a pass whose own slots hold more than `cells`
    cells reads the two linearly between their lengths, the longer's beyond it."""

    ks: tuple[int, ...]
    per_cell_s: tuple[float, ...]
    sequences: int
    cells: int
    longer: CellCost | None = None

    def __call__(self, k: int, length: int | None = None) -> float:
        """Seconds per extra cell in the view of a pass of `k` rows whose own slots hold `length`
        cells (None: at the length measured)."""
        here = self.per_cell_s[-1] * k / self.ks[-1] if k > self.ks[-1] else float(np.interp(k, self.ks, self.per_cell_s))
        if self.longer is None or length is None or length <= self.cells:
            return here
        there = self.longer(k)
        if length >= self.longer.cells:
            return there
        return here + (there - here) * (length - self.cells) / (self.longer.cells - self.cells)

    def extra_s(self, width: int, cells: int, own_cells: int) -> float:
        """What a pass of `width` rows reading the cells up to `cells` costs beyond one reading up
        to `own_cells` (each padded as llama.cpp pads them; 0 where they pad alike), at the cost
        per cell of slots of `own_cells`."""
        more = padded_cells(cells) - padded_cells(own_cells)
        return more * self(width, own_cells) if more > 0 else 0.0

    def text(self) -> str:
        """The cost of 1,000 cells at the widths measured, in milliseconds (and over the longer slots)."""
        own = ", ".join(f"{1e6 * value:.2f} ms per 1,000 cells at {k} row{'s' if k != 1 else ''}"
                        for k, value in zip(self.ks, self.per_cell_s))
        return own if self.longer is None else f"{own}; over slots of {self.longer.cells} tokens: {self.longer.text()}"


def cell_cost(steps: UnifiedSteps, longer: UnifiedSteps | None = None) -> CellCost | None:
    """`CellCost` from a sitting of split and unified steps: at each width, the unified step's
    seconds beyond the split one's over the extra cells it reads, floored at 0 (timing noise);
    None where no width reads more cells unified. `longer`: the steps over longer slots, read
    where a pass's own slots are longer (`CellCost.longer`; left out where not longer)."""
    pairs = [(k, max(0.0, (unified - split) / steps.extra_cells(k)))
             for k, split, unified in zip(steps.ks, steps.split_s, steps.unified_s) if steps.extra_cells(k) > 0]
    if not pairs:
        return None
    far = cell_cost(longer) if longer is not None and longer.cells > steps.cells else None
    return CellCost(tuple(k for k, _ in pairs), tuple(value for _, value in pairs), steps.sequences, steps.cells, far)
