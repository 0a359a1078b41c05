"""A target pass never costs more for fewer tokens: the monotone envelope of T(k).

CPU kernels can make T(k) non-monotone (docs/cost-model.md, "Verification widths"). A verifier
can always run a pass over k tokens at a larger width w, padded with tokens whose logits are
ignored (attention is causal, so the k real positions get the same distributions), and crop its
cache back. So a verification pass over k tokens costs the envelope

    T̃(k) = min(T(k), min over measured widths j >= k of T(j)),

T(k) read between measured widths as `LatencyCurve` does. `verify_widths` records, for every k
the envelope pads, the width it chose (the smallest reaching the minimum; k itself on a tie), so
the plan and the decoder agree on what is run. Above the largest measured width the curve never
decreases, so nothing is padded there.
"""

from __future__ import annotations

import functools
import numpy as np

from polyplan.formats.plan import VerifyWidths
from polyplan.planner.exact.latency import LatencyCurve


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
