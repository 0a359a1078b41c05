"""A race under load held against the goals of a plan per load (docs/validation.md, "The results page").

At each number of clients: how many predicted configurations came within `TOLERANCE` of their
measurement and inside their interval or within the control's noise, the one furthest off,
whether the plan's choice was the fastest or tied with it, whether it was slower than the target
alone beyond its measured interval, the physical limit and llama-server's own default. Over the
race: the number of clients from which the plan turns speculation off and the one from which the
target alone measured fastest, and whether the plan's on or off agreed with the measurement at
every number of clients, a tie counting for either. The results page prints them
(`validation.results_page`), so every kept race says for itself where the goals hold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from polyplan.formats.race import CONTROL, TARGET_ONLY, LoadLevel, LoadRace, LoadRow, control_spread, not_slower

TOLERANCE = 0.10  # the goal's bound on |predicted / measured - 1|


@dataclass(frozen=True)
class LevelGoals:
    """The goals at one number of clients (`level_goals`)."""

    clients: int
    predicted: int  # configurations predicted and measured, the target alone and the control aside
    within: int  # of them, |error| <= TOLERANCE
    judged: int  # of them, inside the predicted interval or within the control's noise
    worst: tuple[str, float] | None  # the configuration furthest from its prediction, and its error
    choice: str | None  # LoadLevel.choice: "fastest", "tied", "slower"; None without one
    chosen: str | None
    below_target: bool | None  # the choice measured slower than the target alone beyond its interval and the control's noise
    off: bool  # the plan turned speculation off here
    target_fastest: bool  # the target alone measured the fastest
    target_tied: bool  # the target alone measured the fastest or tied with it
    limit: float | None
    spec_default: float | None  # llama-server's `--spec-default`, measured


@dataclass(frozen=True)
class RaceGoals:
    """A race's goals: one `LevelGoals` per number of clients, and the "off from N" predicted and
    measured (None: on at every N raced)."""

    levels: tuple[LevelGoals, ...]
    off_from_predicted: int | None
    off_from_measured: int | None

    @property
    def off_agrees(self) -> bool:
        """The plan's on or off held at every number of clients: off where the target alone measured
        the fastest or tied with it, on where the choice was not slower than the target alone (a
        tie is either); a level whose choice was not measured agrees with nothing."""
        return all(level.target_tied if level.off else level.below_target is False for level in self.levels)


def _measured(row: LoadRow) -> bool:
    return row.failure is None and math.isfinite(row.speedup)


def level_goals(level: LoadLevel, rows: Sequence[LoadRow]) -> LevelGoals:
    """The goals at `level.clients` from its `rows` (`LevelGoals`)."""
    by_label = {row.label: row for row in rows}
    predicted = [row for row in rows if _measured(row) and row.error is not None and row.label not in (TARGET_ONLY, CONTROL)]
    worst = max(predicted, key=lambda row: abs(row.error), default=None)
    spread = control_spread(rows) or 0.0
    target = by_label.get(TARGET_ONLY)
    chosen = by_label.get(level.chosen) if level.chosen else None
    below = None
    if chosen is not None and target is not None and _measured(chosen) and _measured(target):
        below = not not_slower(chosen, target, spread)
    fastest = by_label.get(level.fastest) if level.fastest else None
    target_fastest = fastest is not None and fastest.label == TARGET_ONLY
    target_tied = target_fastest or (target is not None and fastest is not None and _measured(target)
                                     and not_slower(target, fastest, spread))
    default = by_label.get(level.spec_default) if level.spec_default else None
    return LevelGoals(
        clients=level.clients, predicted=len(predicted),
        within=sum(abs(row.error) <= TOLERANCE for row in predicted),
        judged=sum(row.verdict in ("inside", "within noise") for row in predicted),
        worst=None if worst is None else (worst.label, worst.error), choice=level.choice, chosen=level.chosen,
        below_target=below, off=level.chosen == TARGET_ONLY, target_fastest=target_fastest,
        target_tied=target_tied, limit=level.limit,
        spec_default=default.speedup if default is not None and _measured(default) else None)


def race_goals(race: LoadRace) -> RaceGoals:
    """Every level of `race` against the goals, and where speculation is off from, predicted (the
    plan's choice is the target alone there and at every larger N raced) and measured (the target
    alone the fastest there and above)."""
    levels = tuple(level_goals(level, race.at(level.clients)) for level in sorted(race.levels, key=lambda level: level.clients))
    return RaceGoals(levels, _off_from(levels, lambda goals: goals.off), _off_from(levels, lambda goals: goals.target_fastest))


def _off_from(levels: Sequence[LevelGoals], off) -> int | None:
    """The smallest clients from which `off` holds at every level raced, None where it does not at the largest."""
    start = None
    for goals in reversed(levels):
        if not off(goals):
            break
        start = goals.clients
    return start


def goals_lines(races: Sequence[tuple[str, LoadRace]]) -> list[str]:
    """The markdown table of every (title, race): a row per race and number of clients."""
    lines = ["| race | N | within 10 % | inside or within noise | furthest off | the plan's choice | below the target alone | "
             "off from N (predicted / measured; agrees) | physical limit | llama-server's default |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for title, race in races:
        goals = race_goals(race)
        off = (f"{_from_text(goals.off_from_predicted)} / {_from_text(goals.off_from_measured)}; "
               f"{'yes' if goals.off_agrees else 'no'}")
        for level in goals.levels:
            worst = "–" if level.worst is None else f"{level.worst[0]} ({100 * level.worst[1]:+.1f}%)"
            choice = "–" if level.chosen is None else f"{'off' if level.off else level.chosen}: {level.choice or 'not judged'}"
            below = "–" if level.below_target is None else ("yes" if level.below_target else "no")
            limit = "–" if level.limit is None else f"{level.limit:.2f}x"
            default = "not raced" if level.spec_default is None else f"{level.spec_default:.2f}x"
            lines.append(f"| {title} | {level.clients} | {level.within}/{level.predicted} | {level.judged}/{level.predicted} | "
                         f"{worst} | {choice} | {below} | {off} | {limit} | {default} |")
    return lines


def _from_text(clients: int | None) -> str:
    return "on throughout" if clients is None else f"off from {clients}"
