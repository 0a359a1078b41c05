"""The self-check's composition term C weighed by its evidence (docs/validation.md, "How the
self-check weighs its evidence").

A check measures ln Ĉ on a few prompts for a few seconds; the exact model it corrects was fitted on
minutes of profiling. Ĉ is uncertain in two ways: the prompts it ran (a bootstrap over prompts
sees this) and the machine's state during those seconds, which every prompt of the check shares
and no resampling of prompts can see. Here both enter the check's variance v, and the correction
is shrunk toward C = 1 (the exact model right) by how sure it is:

    ln C_true ~ N(0, τ²)            how far off the exact model's composition is on this machine
    ln Ĉ | C_true ~ N(ln C_true, v)  what one check measures
    posterior: mean B·ln Ĉ, variance B·v, with B = τ² / (τ² + v)

τ² is estimated from the k checked chains themselves (empirical Bayes: the mean of (ln Ĉ)² beyond
their noise, never below `PRIOR_FLOOR`²), so a machine on which the exact model is clearly off
(every chain's Ĉ far from 1 compared with its noise) keeps the correction, and a noisy check of a
model that is about right moves the point little and widens the interval instead. Since τ² is
itself estimated from few chains, the interval's variance adds Morris's term for that,
2 (1 − B)² (ln Ĉ)² / max(k − 2, 1), to B·v (C. Morris, "Parametric empirical Bayes inference",
JASA 1983).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from polyplan.planner.intervals.prediction_interval import FLOOR_DRIFT_SHARE, IQR_TO_SD

# The least spread of ln C assumed: the exact model is never taken to be exactly right
# (docs/validation.md argues the value from the exact model's measured errors).
PRIOR_FLOOR = 0.05
_Z = 1.959964  # two-sided 95%


@dataclass(frozen=True)
class CheckEvidence:
    """What one chain's check measured: ln Ĉ over every run, its variance over prompts (the
    bootstrap's), and ln Ĉ of each interleaved pass over the same prompts."""

    log_c: float
    prompt_variance: float
    passes: tuple[float, ...] = ()


@dataclass(frozen=True)
class WeighedTerm:
    """C after weighing: the applied term with its 95% interval, the measured one, and how much of
    the measured correction was kept (`weight`, B) on a check noise of `noise` (√v, log)."""

    composition: float
    low: float
    high: float
    measured: float
    weight: float
    noise: float

    @property
    def log_half_width(self) -> float:
        """The stated uncertainty of the applied term: half its 95% interval, in log."""
        return max(math.log(self.high / self.composition), math.log(self.composition / self.low))


def bootstrap_variance(point: float, low: float, high: float) -> float:
    """The variance of ln C read off a percentile interval (half its log width over z)."""
    return ((math.log(high) - math.log(low)) / (2 * _Z)) ** 2 if low > 0 and high > 0 else 0.0


def pass_variance(evidence: Sequence[CheckEvidence]) -> float | None:
    """The variance of ln Ĉ from the machine's state as the passes see it: the spread of each
    chain's per-pass ln Ĉ about its mean, pooled over chains, over the number of passes (the
    estimate uses all of them). None with fewer than two passes."""
    squares, freedom, passes = 0.0, 0, 0
    for item in evidence:
        if len(item.passes) < 2:
            continue
        mean = statistics.fmean(item.passes)
        squares += sum((value - mean) ** 2 for value in item.passes)
        freedom += len(item.passes) - 1
        passes = len(item.passes)
    return None if freedom == 0 else squares / freedom / passes


def floor_variance(floor_relative_iqr: float | None) -> float:
    """The variance of ln Ĉ that the machine floor's measured spread implies: a check's speedup is
    a ratio of two sums of many passes on that floor, which move with the machine's level, not with
    the spread of one call (`FLOOR_DRIFT_SHARE` of the floor's IQR/median over `IQR_TO_SD`, as a log
    standard deviation, as the prediction intervals widen a curve). 0 when the profile recorded no floor."""
    if floor_relative_iqr is None or not floor_relative_iqr > 0:
        return 0.0
    return (FLOOR_DRIFT_SHARE * math.log1p(floor_relative_iqr) / IQR_TO_SD) ** 2


def weigh(evidence: Mapping[tuple[str, ...], CheckEvidence], shared_variance: float,
          prior_floor: float = PRIOR_FLOOR) -> dict[tuple[str, ...], WeighedTerm]:
    """Each chain's C shrunk toward 1 by its evidence (module docstring). `shared_variance`: the
    variance every chain's ln Ĉ takes from the machine's state (`pass_variance`, `floor_variance`)."""
    if not evidence:
        return {}
    variances = {chain: item.prompt_variance + shared_variance for chain, item in evidence.items()}
    excess = statistics.fmean(item.log_c**2 for item in evidence.values()) - statistics.fmean(variances.values())
    prior = max(prior_floor**2, excess)
    estimated = 2.0 / max(len(evidence) - 2, 1)  # Morris's factor for a prior fitted on these chains
    weighed = {}
    for chain, item in evidence.items():
        weight = prior / (prior + variances[chain])
        mean = weight * item.log_c
        sd = math.sqrt(weight * variances[chain] + estimated * ((1.0 - weight) * item.log_c) ** 2)
        weighed[chain] = WeighedTerm(math.exp(mean), math.exp(mean - _Z * sd), math.exp(mean + _Z * sd),
                                     math.exp(item.log_c), weight, math.sqrt(variances[chain]))
    return weighed
