"""The exact model's error on one chain split into the terms it multiplies (docs/validation.md).

The exact model predicts a chain's speedup as b̂ / t̂: the target-only step b̂ over the chain's
seconds per emitted token t̂ = Σ_i f̂_i ŝ_i + l̂, where for each member M_i f̂_i is its forward
passes per token (what acceptance decides), ŝ_i its seconds per pass (T_i at the widths and
contexts it runs, switch costs included) and l̂ the decoding loop's own seconds per token.
A validation run measures every one of these: b (target-only decoding's seconds per token in the
same repeats), f_i and s_i (passes and time inside each member's forward, `decoder.result.PassTally`),
l (decode time outside any forward). Replacing one predicted factor at a time by its
measurement gives an exact product:

    1 + total = (1 + baseline)(1 + forwards)(1 + per_pass)(1 + loop)(1 + aggregation)(1 + model)

- baseline = b̂ / b − 1: the profile's target step against target-only decoding measured now;
- forwards = t(f, ŝ, l̂) / t(f̂, ŝ, l̂) − 1: passes per token (acceptance, the chain's shape);
- per_pass = t(f, s, l̂) / t(f, ŝ, l̂) − 1: seconds per pass inside the chain against the plan's;
- loop = t(f, s, l) / t(f, s, l̂) − 1: the loop's own time;
- aggregation = (b / t) / measured − 1: the ratio of total times against the paired per-prompt
  speedup the report headlines (their weighting differs);
- model = Ŝ / (b̂ / t̂) − 1: what the plan's speedup holds beyond this sum (0 for the exact
  model; kept so that the product is exact for any plan).

Each term is signed like the total error (predicted / measured − 1): positive where the
prediction was too optimistic. `per_pass` has a finer reading per member: the profile's T_i at
the very widths and contexts the chain ran (`LevelPassSeconds.profile`) separates "the chain
ran other widths than planned" from "the member is slower inside the chain than alone".
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


def chain_seconds(levels: Sequence[LevelCosts], loop: float, *, forwards: bool, per_pass: bool) -> float:
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
    planned = chain_seconds(levels, predicted_loop, forwards=False, per_pass=False)
    counted = chain_seconds(levels, predicted_loop, forwards=True, per_pass=False)
    timed = chain_seconds(levels, predicted_loop, forwards=True, per_pass=True)
    measured = chain_seconds(levels, loop, forwards=True, per_pass=True)
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
    """C = (1 + baseline)(1 + per_pass)(1 + loop) of `cost_split`, in closed form
    (b̂ / b) · t(f, s, l) / t(f, ŝ, l̂): the error on time per token with acceptance as measured
    (`validation.self_check` corrects predictions by it)."""
    measured = chain_seconds(levels, loop, forwards=True, per_pass=True)
    modelled = chain_seconds(levels, predicted_loop, forwards=True, per_pass=False)
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
