"""A target pass never costs more for fewer tokens: the monotone envelope of T(k).

CPU kernels can make T(k) non-monotone: on gemma-3-270m (fp32, 1 thread) verifying 2 tokens
took 262 ms and 4 tokens 245 ms. A verifier can always run a pass over k tokens at a larger
width w (pad it with w − k tokens whose logits are ignored; attention is causal, so the k real
positions get exactly the same distributions) and then crop its cache back. So the time of a
verification pass over k tokens is the envelope

    T̃(k) = min(T(k), min over measured widths j >= k of T(j)),

with T(k) itself read between measured widths as `LatencyCurve` does (piecewise linear: the
minimum over all widths >= k of that piecewise-linear curve is at k or at a measured width).
`verify_widths` records, for every k the envelope pads, the width it chose (the smallest width
reaching the minimum; k itself on a tie), so the plan and the decoder agree on what is run.
Above the largest measured width the curve already never decreases, so nothing is padded there.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.planner.latency import LatencyCurve


@dataclass(frozen=True)
class VerifyWidths:
    """At which width a verification pass over k tokens runs: `pads` lists (k, width) with
    width > k, k increasing; every other k runs at width k."""

    pads: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        ks = [k for k, _ in self.pads]
        if any(b <= a for a, b in zip(ks, ks[1:])):
            raise PolyplanError(f"verify_widths: k values must increase, got {ks}")
        for k, width in self.pads:
            if isinstance(k, bool) or isinstance(width, bool) or not isinstance(k, int) or not isinstance(width, int):
                raise PolyplanError(f"verify_widths: ({k!r}, {width!r}) must be integers")
            if not 1 <= k < width:
                raise PolyplanError(f"verify_widths: width {width} for {k} tokens must be larger than {k} >= 1")

    def width(self, k: int) -> int:
        """The width a pass over `k` tokens runs at (k itself unless padded)."""
        for tokens, width in self.pads:
            if tokens == k:
                return width
        return k

    @property
    def max_padding(self) -> int:
        """The most extra tokens one padded pass adds (0 when none)."""
        return max((width - k for k, width in self.pads), default=0)

    def to_json(self) -> list[list[int]]:
        return [[k, width] for k, width in self.pads]


NO_PADDING = VerifyWidths()


def verify_widths_from_json(value: Any, where: str) -> VerifyWidths:
    """`VerifyWidths` from its JSON form [[k, width], …]; `PolyplanError` naming `where`."""
    if not isinstance(value, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in value):
        raise PolyplanError(f"{where}: must be a list of [k, width] pairs")
    try:
        return VerifyWidths(tuple((pair[0], pair[1]) for pair in value))
    except PolyplanError as error:
        raise PolyplanError(f"{where}: {str(error).removeprefix('verify_widths: ')}") from None


def _integer_grid(curve: LatencyCurve) -> np.ndarray:
    return np.arange(1, max(curve.ks) + 1, dtype=float)


@functools.lru_cache(maxsize=4096)
def _envelope_and_widths(curve: LatencyCurve) -> tuple[LatencyCurve, VerifyWidths]:
    grid = _integer_grid(curve)  # 1 … largest measured width
    values = curve.many(grid)
    measured = np.asarray(curve.ks)
    seconds = np.asarray(curve.seconds)
    envelope, pads = [], []
    for k, own in zip(grid.astype(int), values):
        wider = measured >= k
        best = int(np.argmin(np.where(wider, seconds, np.inf)))  # the first (smallest) width at the minimum
        if wider.any() and seconds[best] < own:
            envelope.append(float(seconds[best]))
            if int(measured[best]) > k:
                pads.append((int(k), int(measured[best])))
        else:
            envelope.append(float(own))
    return LatencyCurve(tuple(int(k) for k in grid), tuple(envelope)), VerifyWidths(tuple(pads))


def monotone_envelope(curve: LatencyCurve) -> LatencyCurve:
    """T̃: the time of a verification pass over k tokens run at the cheapest width >= k
    (exact at every integer k; never decreasing)."""
    return _envelope_and_widths(curve)[0]


def verify_widths(curve: LatencyCurve) -> VerifyWidths:
    """The widths the envelope runs passes at, where they differ from k."""
    return _envelope_and_widths(curve)[1]
