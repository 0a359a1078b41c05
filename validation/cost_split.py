"""The exact model's error on one chain split into the terms it multiplies (docs/validation.md,
"The error by the factors of time per token", which gives each term's formula).

The exact model predicts b̂ / t̂, the target-only step over the chain's seconds per token
t̂ = Σ_i f̂_i ŝ_i + l̂; replacing one predicted factor at a time by its measurement gives an exact
product 1 + total = Π (1 + term). Each term is signed like the total error (predicted / measured
− 1): positive where the prediction was too optimistic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from polyplan.decoder.result import PassTally
from polyplan.formats.validation_report import CostSplit

Price = Callable[[str, int, float], float]  # (model, width, context) -> the profile's seconds for one pass


@dataclass(frozen=True)
class LevelCosts:
    """One member's part of a chain's time per emitted token, predicted and measured."""

    forwards: float  # measured passes per token
    predicted_forwards: float
    seconds_per_pass: float  # measured
    predicted_seconds_per_pass: float  # the plan's (switch costs included)

    @classmethod
    def per_token(cls, forwards: float, seconds: float, predicted_forwards: float, predicted_seconds: float) -> LevelCosts:
        """From passes and seconds per emitted token, measured and predicted (0 s a pass without passes)."""
        return cls(forwards, predicted_forwards, seconds / forwards if forwards else 0.0,
                   predicted_seconds / predicted_forwards if predicted_forwards else 0.0)


def _chain_seconds(levels: Sequence[LevelCosts], loop: float, *, forwards: bool, per_pass: bool) -> float:
    """Σ_i f_i s_i + l, each factor measured (True) or predicted (False); `loop` as given."""
    return sum(
        (level.forwards if forwards else level.predicted_forwards)
        * (level.seconds_per_pass if per_pass else level.predicted_seconds_per_pass)
        for level in levels
    ) + loop


def cost_split(
    levels: Sequence[LevelCosts],
    *,
    loop: float,
    predicted_loop: float,
    baseline: float,
    predicted_baseline: float,
    predicted_speedup: float,
    measured_speedup: float,
) -> CostSplit:
    """The split of the module docstring (all times in seconds per emitted token)."""
    planned = _chain_seconds(levels, predicted_loop, forwards=False, per_pass=False)
    counted = _chain_seconds(levels, predicted_loop, forwards=True, per_pass=False)
    timed = _chain_seconds(levels, predicted_loop, forwards=True, per_pass=True)
    measured = _chain_seconds(levels, loop, forwards=True, per_pass=True)
    return CostSplit(
        total=predicted_speedup / measured_speedup - 1.0,
        baseline=predicted_baseline / baseline - 1.0,
        forwards=counted / planned - 1.0,
        per_pass=timed / counted - 1.0,
        loop=measured / timed - 1.0,
        aggregation=(baseline / measured) / measured_speedup - 1.0,
        model=predicted_speedup / (predicted_baseline / planned) - 1.0,
    )


def composition(levels: Sequence[LevelCosts], *, loop: float, predicted_loop: float, baseline: float,
                predicted_baseline: float) -> float:
    """C = (1 + baseline)(1 + per_pass)(1 + loop) of `cost_split`, in closed form (b̂ / b) · t(f, s, l) /
    t(f, ŝ, l̂): the error on time per token with acceptance as measured (`validation.self_check`)."""
    measured = _chain_seconds(levels, loop, forwards=True, per_pass=True)
    modelled = _chain_seconds(levels, predicted_loop, forwards=True, per_pass=False)
    return (predicted_baseline / baseline) * measured / modelled


def merged_tallies(runs: Sequence[Sequence[PassTally]]) -> tuple[PassTally, ...]:
    """One member's pass tallies of several runs, merged by width (contexts averaged by pass)."""
    by_width: dict[int, list[float]] = {}
    for tallies in runs:
        for tally in tallies:
            slot = by_width.setdefault(tally.width, [0, 0.0, 0.0])
            slot[0] += tally.passes
            slot[1] += tally.seconds
            slot[2] += tally.mean_context * tally.passes
    return tuple(PassTally(width, int(n), seconds, context / n) for width, (n, seconds, context) in sorted(by_width.items()) if n)


def profile_seconds_per_pass(model: str, tallies: Sequence[PassTally], price: Price) -> float | None:
    """The profile's mean seconds per pass at the widths and contexts of `tallies` (None: no pass)."""
    passes = sum(tally.passes for tally in tallies)
    if not passes:
        return None
    return sum(tally.passes * price(model, tally.width, tally.mean_context) for tally in tallies) / passes


def mean_width(tallies: Sequence[PassTally]) -> float | None:
    """Tokens per pass, averaged over passes (None: no pass)."""
    passes = sum(tally.passes for tally in tallies)
    return sum(tally.passes * tally.width for tally in tallies) / passes if passes else None
