"""Do the acceptance intervals cover a new prompt set? A check on the profile's own prompts.

Split the profile's prompts at random into a profiling set and a new set, predict from the first
alone and hold its interval against the exact model on the second's acceptance (latency held as
profiled). docs/cost-model.md, "Checking the intervals on your prompts".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.cost_model import ChainSettings
from polyplan.formats.plan import DraftPolicy, blocks_text
from polyplan.formats.profile import Profile
from polyplan.formats.options import integer_at_least
from polyplan.planner.intervals.prediction_interval import DEFAULT_LEVEL, prediction_intervals
from polyplan.planner.exact.runs import on_prompts
from polyplan.planner.search import evaluate_chain

_DEFAULT_SPLITS = 100
_MIN_SPLITS = 10


@dataclass(frozen=True)
class ChainCoverage:
    """One chain over every split: how often its interval held the new set's speedup."""

    chain: tuple[str, ...]
    block_sizes: tuple[int, ...]
    covered: int
    splits: int
    interval_spread: float  # median over splits of the interval's width in log-speedup / (2 z)
    actual_spread: float  # sd over splits of log(new set's speedup / the profiling set's point)
    draft_policy: DraftPolicy | None = None  # the last level's (None: a fixed K)


@dataclass(frozen=True)
class IntervalCoverage:
    """The result of `interval_coverage`."""

    chains: tuple[ChainCoverage, ...]
    prompts: int  # the profile's prompts the splits were drawn from
    split: int  # prompts in each of P and V
    splits: int
    level: float
    expected: tuple[int, int]  # a calibrated interval's count lies here with 95% probability (binomial)
    seed: int


def nothing_to_check(profile: Profile, sampling: str = "greedy", split: int | None = None) -> str | None:
    """Why a valid greedy plan's profile leaves the check nothing to do (None when it does not):
    no drafter (every chain is the target alone, whose interval is exact), or, with the default
    `split`, too few prompts for two sets of 2 (a default may never fail on valid input; an
    explicit `split` that does not fit stays an error in `interval_coverage`)."""
    if sampling != "greedy":
        return None
    runs = profile.acceptance_runs.get("greedy")
    if not profile.pairs and (runs is None or not runs.pairs):
        return (f"{profile.source} has no drafter: every chain is {profile.target} alone, whose interval is exact; "
                "nothing to check")
    if split is None and runs is not None and runs.pairs and len(runs.pairs[0].agreement) < 4:
        prompts = len(runs.pairs[0].agreement)
        return (f"{profile.source} has {prompts} prompt{'s' if prompts != 1 else ''}, too few to split into two sets of "
                "at least 2; nothing to check (profile on more prompts, e.g. 48)")
    return None


def interval_coverage(
    profile: Profile,
    chains: Sequence[tuple[Sequence[str], Sequence[int]] | tuple[Sequence[str], Sequence[int], DraftPolicy | None]],
    settings: ChainSettings = ChainSettings(),
    *,
    split: int | None = None,
    splits: int = _DEFAULT_SPLITS,
    level: float = DEFAULT_LEVEL,
    resamples: int = 200,
    seed: int = 0,
) -> IntervalCoverage:
    """Coverage of each chain's acceptance interval over `splits` random splits (module docstring);
    `split` None: half the profile's prompts in each set. A chain may carry its last level's draft
    policy as a third item (`formats.plan.DraftPolicy`; None: a fixed K).

    Raises:
        PolyplanError: the profile has no greedy agreement runs, too few prompts for two sets
            of `split`, or a setting out of range.
    """
    runs = profile.acceptance_runs.get("greedy")
    if settings.sampling != "greedy" or runs is None or not runs.pairs:
        raise PolyplanError("the profile has no greedy agreement runs to split (profile at temperature 0 first)")
    prompts = len(runs.pairs[0].agreement)
    split = prompts // 2 if split is None else split
    integer_at_least(split, 2, "--split")
    if 2 * split > prompts:
        raise PolyplanError(f"--split {split}: the profile has {prompts} prompts, two sets of {split} need {2 * split} "
                            f"(profile on more prompts, or give a smaller --split)")
    integer_at_least(splits, _MIN_SPLITS, "--splits")
    if not chains:
        raise PolyplanError("chains: give at least one chain")
    fixed = _fixed_latency(profile)
    rng = np.random.default_rng(seed)
    covered = np.zeros(len(chains), dtype=int)
    widths = np.empty((len(chains), splits))
    errors = np.empty((len(chains), splits))

    chains = [(chain, blocks, rest[0] if rest else None) for chain, blocks, *rest in chains]

    def speedup(part: Profile, chain, blocks, policy) -> float:
        return evaluate_chain(part, chain, blocks, settings, draft_policy=policy).exact_speedup

    z = _z(level)
    for s in range(splits):
        order = rng.permutation(prompts)
        profiled, new = on_prompts(fixed, order[:split]), on_prompts(fixed, order[split:2 * split])
        points = [speedup(profiled, *item) for item in chains]
        intervals = prediction_intervals(
            profiled, [(chain, blocks, point, policy) for (chain, blocks, policy), point in zip(chains, points)], settings,
            resamples=resamples, level=level, seed=seed + s,
        )
        for i, (item, point) in enumerate(zip(chains, points)):
            truth = speedup(new, *item)
            interval = intervals.chains[i].speedup
            covered[i] += interval.contains(truth)
            widths[i, s] = np.log(interval.high / interval.low) / (2 * z)
            errors[i, s] = np.log(truth / point)
    items = tuple(
        ChainCoverage(tuple(chain), tuple(int(k) for k in blocks), int(covered[i]), splits,
                      float(np.median(widths[i])), float(np.std(errors[i])), policy)
        for i, (chain, blocks, policy) in enumerate(chains)
    )
    return IntervalCoverage(items, prompts, split, splits, level, _binomial_range(splits, level), seed)


def coverage_lines(result: IntervalCoverage) -> list[str]:
    """The printed table: per chain, covered/splits and the spreads."""
    low, high = result.expected
    lines = [
        f"acceptance intervals on new prompt sets: {result.splits} random splits of the profile's {result.prompts} "
        f"prompts into {result.split} to profile and {result.split} new (latency held as profiled)",
        "",
        f"{'chain':<56} {'covered':>9} {'interval sd':>12} {'actual sd':>10}",
    ]
    for item in result.chains:
        mark = "" if low <= item.covered <= high else ("  (wide)" if item.covered > high else "  (NARROW)")
        lines.append(f"{' > '.join(item.chain) + ' ' + blocks_text(item.block_sizes, item.draft_policy):<56} "
                     f"{item.covered:>4}/{item.splits:<4} {item.interval_spread:>12.4f} {item.actual_spread:>10.4f}{mark}")
    lines += [
        "",
        f"(covered: splits whose new set's exact speedup fell inside the {result.level:.0%} interval made from the "
        f"profiling set; a calibrated interval covers {low}..{high} of {result.splits} with 95% probability; "
        "interval sd: median half-width in log-speedup / z; actual sd: spread of log(new / predicted))",
    ]
    return lines


def _fixed_latency(profile: Profile) -> Profile:
    """`profile` with every latency point a fixed median (no timings to resample, no timing
    health to widen by): only acceptance is judged. The whole profile's α intervals are dropped
    too: each part's α comes from its own prompts (`planner.exact.runs.on_prompts`)."""
    fixed = dataclasses.replace(profile, models=tuple(
        dataclasses.replace(model, latency=tuple(dataclasses.replace(point, iqr_s=0.0, samples_s=None) for point in model.latency),
                            timing=None)
        for model in profile.models
    ))
    for pair in fixed.pairs:
        if "greedy" in pair.sampling:
            fixed = fixed.with_stats(pair.verifier, pair.drafter, "greedy", dataclasses.replace(pair.sampling["greedy"], alpha_ci=None))
    return fixed


def _z(level: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + level / 2))


def _binomial_range(splits: int, level: float) -> tuple[int, int]:
    from scipy.stats import binom

    return int(binom.ppf(0.025, splits, level)), int(binom.ppf(0.975, splits, level))


