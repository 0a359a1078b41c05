"""Paired per-prompt speedups with two-stage bootstrap CIs (docs/validation.md, "How it judges").

ρ[p, r] = T_chain[p, r] / T_target-only[p, r] per prompt p and repeat r; ρ_p is its median over
repeats, the cost ratio Σ_p B_p ρ_p / Σ_p B_p (B_p: the median target-only time), the speedup
its inverse. Pairing cancels background load that hits both runs alike. The bootstrap draws
prompts with replacement, then repeats within each: with a fixed seed and one shape every chain
of a validation gets the same draws, which `ratio_interval` relies on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from polyplan.formats.validation_report import SpeedupRatio
from polyplan.planner.intervals.prediction_interval import SpeedupInterval

_PAIRED_RESAMPLES = 1000
_PAIRED_LEVEL = 0.95
_PAIRED_SEED = 0


@dataclass(frozen=True)
class PairedSpeedup(SpeedupInterval):
    """A measured speedup over target-only decoding with its bootstrap CI, printed like a predicted
    interval; `per_prompt`: 1 / ρ_p per prompt; `replicates`: the bootstrap speedups (not in JSON)."""

    per_prompt: tuple[float, ...] = ()
    replicates: tuple[float, ...] = field(default=(), repr=False, compare=False)


def _speedup(ratios: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Speedup from paired ratios ρ[..., P, R] and target-only times B[..., P, R] (module docstring)."""
    per_prompt = np.median(ratios, axis=-1)  # [..., P]
    weights = np.median(base, axis=-1)  # [..., P]
    return (weights.sum(axis=-1)) / (weights * per_prompt).sum(axis=-1)


def paired_speedup(
    chain_s: np.ndarray,
    base_s: np.ndarray,
    *,
    resamples: int = _PAIRED_RESAMPLES,
    level: float = _PAIRED_LEVEL,
    seed: int = _PAIRED_SEED,
) -> PairedSpeedup:
    """The paired speedup of a chain over target-only decoding and its CI, from [prompts, repeats]
    decoding seconds of the chain (`chain_s`) and of target-only decoding in the same cells (`base_s`)."""
    chain_s = np.asarray(chain_s, dtype=float)
    base_s = np.asarray(base_s, dtype=float)
    if chain_s.shape != base_s.shape or chain_s.ndim != 2 or chain_s.size == 0:
        raise ValueError(f"paired_speedup: need two [prompts, repeats] arrays of one shape, got {chain_s.shape}, {base_s.shape}")
    if not (np.all(chain_s > 0) and np.all(base_s > 0)):
        raise ValueError("paired_speedup: times must be > 0")
    ratios = chain_s / base_s
    point = float(_speedup(ratios, base_s))
    prompts, repeats = chain_s.shape
    rng = np.random.default_rng(seed)
    prompt_picks = rng.integers(0, prompts, size=(resamples, prompts))  # [B, P]
    repeat_picks = rng.integers(0, repeats, size=(resamples, prompts, repeats))  # [B, P, R]
    rows = prompt_picks[:, :, None]
    replicates = _speedup(ratios[rows, repeat_picks], base_s[rows, repeat_picks])  # [B]
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return PairedSpeedup(
        point=point,
        low=min(float(low), point),
        high=max(float(high), point),
        level=level,
        per_prompt=tuple(float(1.0 / value) for value in np.median(ratios, axis=1)),
        replicates=tuple(float(value) for value in replicates),
    )


def ratio_interval(a: PairedSpeedup, b: PairedSpeedup) -> SpeedupRatio:
    """A's speedup over B's, with the percentile CI of the paired replicate ratios (both from
    `paired_speedup` with the same seed and shape, so their replicates share draws)."""
    point = a.point / b.point
    if not a.replicates or len(a.replicates) != len(b.replicates):
        return SpeedupRatio(point, point, point, a.level)
    ratios = np.asarray(a.replicates) / np.asarray(b.replicates)
    tail = 100 * (1 - a.level) / 2
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return SpeedupRatio(point, min(float(low), point), max(float(high), point), a.level)
