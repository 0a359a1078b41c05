"""Latency curves T_i(k): the time of one forward pass over k new tokens, between measurements.

Interpolation is piecewise linear in k between measured points. Below the smallest measured k
the curve is flat (the value there). Above the largest it grows from the last point along the
least-squares slope of the points in the upper half of the measured widths (k >= k_max / 2, at
least the last two), floored at 0: for large k a forward is compute-bound and grows about
linearly, and a fit over several widths is not flattened by one non-monotone pair at the end
(CHANGELOG.md tells the case). A curve with one point is constant.

Profiles measure at several context lengths; `curve_from_profile` averages the median times
over the measured context lengths at each k (a typical context), or interpolates linearly
between the two nearest measured context lengths when one is requested (clamped at the ends).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import ModelProfile


@dataclass(frozen=True)
class LatencyCurve:
    """T(k) in seconds from measured points `ks` (increasing) and `seconds`."""

    ks: tuple[int, ...]
    seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.ks or len(self.ks) != len(self.seconds):
            raise PolyplanError("latency: need as many times as block sizes, and at least one")
        if any(b <= a for a, b in zip(self.ks, self.ks[1:])):
            raise PolyplanError(f"latency: k values must increase, got {list(self.ks)}")
        for k, value in zip(self.ks, self.seconds):
            if not (math.isfinite(value) and value > 0):
                raise PolyplanError(f"latency: T({k}) must be a finite time > 0, got {value!r}")

    def __call__(self, k: float) -> float:
        """T(k) for one k >= 1 (kept per k: a simulation under load reads the same widths
        millions of times)."""
        known = self.__dict__.setdefault("_called", {})
        value = known.get(k)
        if value is None:
            value = known[k] = float(self.many(np.asarray([k], dtype=float))[0])
        return value

    def many(self, ks: np.ndarray) -> np.ndarray:
        """T(k) for an array of k (float64, same shape)."""
        xs = np.asarray(self.ks, dtype=float)
        ys = np.asarray(self.seconds, dtype=float)
        values = np.interp(ks, xs, ys)
        above = ks > xs[-1]
        if len(xs) >= 2 and above.any():
            values = np.where(above, ys[-1] + self.slope_above * (ks - xs[-1]), values)
        return values

    @cached_property
    def slope_above(self) -> float:
        """Seconds per extra token beyond the widest measured k (module docstring), >= 0; fitted
        once per curve (the search reads T(k) many times)."""
        xs = np.asarray(self.ks, dtype=float)
        ys = np.asarray(self.seconds, dtype=float)
        if len(xs) < 2:
            return 0.0
        upper = xs >= xs[-1] / 2
        if upper.sum() < 2:
            upper[-2:] = True
        slope = np.polyfit(xs[upper], ys[upper], 1)[0]
        return max(float(slope), 0.0)


def constant_curve(seconds: float) -> LatencyCurve:
    """A curve with the same time for every k (the paper's single T_i)."""
    return LatencyCurve(ks=(1,), seconds=(float(seconds),))


def curve_from_profile(model: ModelProfile, context_length: int | None = None) -> LatencyCurve:
    """The latency curve of a profiled model (see the module docstring for context handling)."""
    by_context: dict[int, dict[int, float]] = {}
    for point in model.latency:
        by_context.setdefault(point.context_length, {})[point.k] = point.median_s
    contexts = sorted(by_context)
    if not contexts:
        raise PolyplanError(f"models[{model.name!r}].latency: no points")
    curves = [_curve(by_context[c]) for c in contexts]
    ks = sorted({k for points in by_context.values() for k in points})
    grid = np.asarray(ks, dtype=float)
    stacked = np.stack([curve.many(grid) for curve in curves])  # [contexts, ks]
    if context_length is None or len(contexts) == 1:
        values = stacked.mean(axis=0)
    else:
        values = np.array([np.interp(float(context_length), contexts, stacked[:, j]) for j in range(len(ks))])
    return LatencyCurve(ks=tuple(ks), seconds=tuple(float(v) for v in values))


def _curve(points: dict[int, float]) -> LatencyCurve:
    ks = sorted(points)
    return LatencyCurve(ks=tuple(ks), seconds=tuple(points[k] for k in ks))
