"""Sequential measuring: whether more prompts could still change the decision.

The profiler measures acceptance on a growing prefix of the prompts (rounds of 4, 8, 16, …) and
after each round asks `decision_resolved`: rank the chains on the provisional profile
(`planner.search.rank_chains`) and bootstrap their speedups with the timings held as measured
(`acceptance_only`: more prompts cannot reduce latency noise, so it must not keep a run going);
the decision is resolved when no chain's interval overlaps the leader's. docs/profiling.md,
"Sequential measuring", states the design's coverage and why the rule's interval is wider than
the plan's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from polyplan.formats.options import integer_at_least
from polyplan.formats.profile import Profile
from polyplan.planner.exact.overhead import profile_overhead
from polyplan.planner.intervals.prediction_interval import PredictionIntervals, prediction_intervals
from polyplan.planner.search import SearchSettings, rank_chains

FIRST_ROUND = 4  # prompts in the first round; each later round doubles the prefix


@dataclass(frozen=True)
class SequentialSettings:
    """How the stopping rule ranks and bootstraps a provisional profile.

    `level`: the rule's interval level, wider than the plan's 95% because stopping at the first
    round that looks resolved picks the rounds whose estimates look most extreme (docs/profiling.md,
    "Sequential measuring"); `min_prompts`: no decision on fewer prompts (a bootstrap over fewer
    clusters is too coarse); `new_set` False: the interval of the workload's mean, which is what
    more prompts pin down. `max_levels`, `k_max`, `candidates`: as `SearchSettings`'s.
    """

    sampling: str = "greedy"
    level: float = 0.99
    resamples: int = 200
    seed: int = 0
    min_prompts: int = 8
    new_set: bool = False
    max_levels: int = 4
    k_max: int | None = None
    candidates: Sequence[str] | None = None


@dataclass(frozen=True)
class Resolution:
    """What the rule found on one provisional profile: `resolved` (no chain can be told apart
    from `leader` any more), the chains still tied with it, and one line saying why."""

    resolved: bool
    leader: tuple[str, ...]
    tied: tuple[tuple[str, ...], ...]
    reason: str
    prompts: int


def prompt_rounds(total: int, first: int = FIRST_ROUND) -> tuple[int, ...]:
    """The prefix sizes measured in turn: `first`, twice that, … and `total` last (all of them
    when `total` <= `first`)."""
    integer_at_least(total, 1, "prompts")
    rounds, size = [], first
    while size < total:
        rounds.append(size)
        size *= 2
    return tuple(rounds) + (total,)


def acceptance_only(profile: Profile) -> Profile:
    """`profile` with every timing fixed at its median (no stored samples, no IQR, no timing
    health): a bootstrap of it resamples acceptance alone."""
    models = tuple(
        dataclasses.replace(model, timing=None, latency=tuple(
            dataclasses.replace(point, samples_s=None, iqr_s=0.0) for point in model.latency))
        for model in profile.models
    )
    return dataclasses.replace(profile, models=models)


def acceptance_intervals(profile: Profile, settings: SequentialSettings = SequentialSettings()) -> PredictionIntervals:
    """Every chain of `profile` ranked at its best block sizes, with intervals whose replicates
    resample acceptance only (`acceptance_only`), at `settings.level`."""
    search = SearchSettings(sampling=settings.sampling, overhead=profile_overhead(profile, settings.sampling),
                            max_levels=settings.max_levels, k_max=settings.k_max, candidates=settings.candidates,
                            seed=settings.seed)
    ranked = rank_chains(profile, search).ranked
    chains = [(plan.chain, plan.block_sizes, plan.exact_speedup, plan.draft_policy) for plan in ranked]
    return prediction_intervals(acceptance_only(profile), chains, search, resamples=settings.resamples, level=settings.level,
                                seed=settings.seed, new_set=settings.new_set)


def decision_resolved(profile: Profile, settings: SequentialSettings = SequentialSettings()) -> Resolution:
    """Whether more prompts could change the ranking's leader on `profile` (module docstring):
    resolved when the leader is the only chain, or no other chain's acceptance-only interval
    overlaps its own; never on fewer than `settings.min_prompts` prompts (nothing is ranked then)."""
    prompts = profile.profiler.prompts if profile.profiler is not None else 0
    if prompts < settings.min_prompts:  # nothing to rank yet: a bootstrap over so few prompts decides nothing
        return Resolution(False, (), (), f"no decision on fewer than {settings.min_prompts} prompts", prompts)
    intervals = acceptance_intervals(profile, settings)
    return resolution_of(intervals, prompts, settings.min_prompts)


def resolution_of(intervals: PredictionIntervals, prompts: int, min_prompts: int = 0) -> Resolution:
    """The rule on ranked intervals (`decision_resolved`'s last step, apart for tests)."""
    leader = intervals.chains[0].chain
    named = " > ".join(leader)
    tied = tuple(item.chain for item in intervals.tied_with_best())
    level = f"{intervals.level:.0%}"
    if len(intervals.chains) == 1:
        return Resolution(True, leader, (), f"{named} is the only chain", prompts)
    if intervals.without_noise:
        return Resolution(False, leader, tuple(item.chain for item in intervals.chains[1:]),
                          "the acceptance gives the bootstrap nothing to resample", prompts)
    if tied:
        names = ", ".join(" > ".join(chain) for chain in tied[:3]) + (f" and {len(tied) - 3} more" if len(tied) > 3 else "")
        return Resolution(False, leader, tied, f"{named} still tied with {names} on acceptance alone ({level} intervals)",
                          prompts)
    if prompts < min_prompts:
        return Resolution(False, leader, (), f"{named} ahead, but no decision on fewer than {min_prompts} prompts", prompts)
    return Resolution(True, leader, (), f"{named} ahead of every other chain on acceptance alone ({level} intervals)", prompts)
