"""Progress on stderr for the long commands (profiling, recommend's self-check, validation).

On a terminal, rich bars on one display per command (rich allows one live display at a time),
each appearing only when its work reports its size (`total`), so that an error found before any
measurement leaves stderr with nothing but its one line. Elsewhere (a log, CI, `--json` piped
on), lines a person can follow: one per measured profile entry, one per tenth of the self-check's
or validation's runs or half minute, each with the time elapsed and an estimate of the time left
(docs/profiling.md shows one). Progress never touches stdout, so `--json` keeps it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from polyplan.cli.support import log_line

if TYPE_CHECKING:  # for the annotations only: importing them imports torch
    from polyplan.profiler.run import Progress
    from polyplan.validation.chain_runs import ValidationProgress

_PREFIX = "[polyplan]"
_VALIDATION_LINES = 10  # validation: a line per tenth of the runs ...
_VALIDATION_EVERY_S = 30.0  # ... or when this long has passed since the last line


class _Display:
    """One rich `Progress`, started when the first bar needs it."""

    def __init__(self, disable: bool) -> None:
        self.disable, self.progress = disable, None

    def add(self, label: str, size: int):
        if self.progress is None:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self.progress = Progress(TextColumn("{task.description:<56}"), BarColumn(), MofNCompleteColumn(),
                                     TimeElapsedColumn(), TimeRemainingColumn(), console=Console(stderr=True),
                                     transient=True, disable=self.disable)
            self.progress.start()
        return self.progress.add_task(label, total=size)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


class _Bar:
    """One task of a display, created on the first `total` call."""

    def __init__(self, display: _Display, label: str) -> None:
        self.display, self.label, self.task = display, label, None

    def total(self, size: int) -> None:
        if self.task is None:
            self.task = self.display.add(self.label, size)
        elif next(task for task in self.display.progress.tasks if task.id == self.task).finished:  # a next run: count afresh
            self.display.progress.reset(self.task, total=size)
        else:
            self.display.progress.update(self.task, total=size)

    def update(self, description: str, advance: int) -> None:
        if self.task is not None:
            self.display.progress.update(self.task, advance=advance, description=description)


class _ProfileBar(_Bar):
    """`profiler.run.Progress` callbacks."""

    def start(self, step) -> None:
        self.update(f"profile: {step.label}", 0)

    def done(self, step, reused: bool) -> None:
        self.update(("profile: reused " if reused else "profile: ") + step.label, 1)


class _ValidationBar(_Bar):
    """`validation.chain_runs.ValidationProgress` callbacks; `verb` names the run."""

    def __init__(self, display: _Display, label: str, verb: str) -> None:
        super().__init__(display, label)
        self.verb = verb

    def advance(self, label: str) -> None:
        self.update(f"{self.verb}: {label}", 1)


def duration(seconds: float) -> str:
    """A span for a log line: `12s`, `4m50s`, `2h05m`."""
    whole = max(0, round(seconds))
    if whole < 60:
        return f"{whole}s"
    minutes, whole = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m{whole:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _timing(elapsed: float, mean: float, left: int) -> str:
    """`1m12s elapsed, ~4m50s left` (no estimate once nothing is left)."""
    return f"{duration(elapsed)} elapsed" + (f", ~{duration(mean * left)} left" if left > 0 else "")


class _Lines:
    """A count of `size` things done, the clock since the count began, and where lines go."""

    def __init__(self, write: Callable[[str], None] = log_line, clock: Callable[[], float] = time.monotonic) -> None:
        self.write, self.clock = write, clock
        self.size = self.count = 0
        self.began = clock()
        self.restart()

    def total(self, size: int) -> None:
        if self.count >= self.size:  # the first run, or another after the last one ended
            self.began, self.count = self.clock(), 0
            self.restart()
        self.size = size

    def restart(self) -> None:
        """A new run begins (the count and clock are reset already)."""


class ProfileLines(_Lines):
    """`profiler.run.Progress` as one line per measured entry (reused entries print none; the
    next line counts them); the time left is the mean measured entry's times the entries left.
    The latency curves are timed together before any of their entries is done (and a noisy floor
    repeats rounds), so their start says so in a line of its own."""

    def restart(self) -> None:
        self.measured, self.measured_s, self.since = 0, 0.0, self.clock()

    def start(self, step) -> None:
        self.since = self.clock()
        if step.kind == "latency":
            self.write(f"{_PREFIX} profile: timing the models' latency curves together, round by round (a noisy machine "
                       "floor repeats rounds, up to the noise budget, unless the models' own timings are steady)")

    def done(self, step, reused: bool) -> None:
        now = self.clock()
        self.count += 1
        if not reused:
            self.measured, self.measured_s = self.measured + 1, self.measured_s + now - self.since
            timing = _timing(now - self.began, self.measured_s / self.measured, self.size - self.count)
            self.write(f"{_PREFIX} profile {self.count}/{self.size} ({step.label}) done, {timing}")
        self.since = now


class ValidationLines(_Lines):
    """`validation.chain_runs.ValidationProgress` as a line per tenth of the runs, or when
    `_VALIDATION_EVERY_S` has passed since the last line, and after the last run; the time left
    is the mean run's times the runs left. `verb` names the run (validate, self-check)."""

    def __init__(self, write: Callable[[str], None] = log_line, clock: Callable[[], float] = time.monotonic,
                 verb: str = "validate") -> None:
        self.verb = verb
        super().__init__(write, clock)

    def restart(self) -> None:
        self.printed, self.printed_at = 0, self.clock()

    def advance(self, label: str) -> None:
        now = self.clock()
        self.count += 1
        every = max(1, self.size // _VALIDATION_LINES)
        if self.count < self.size and self.count - self.printed < every and now - self.printed_at < _VALIDATION_EVERY_S:
            return
        elapsed = now - self.began
        self.write(f"{_PREFIX} {self.verb} {self.count}/{self.size} ({label}), {_timing(elapsed, elapsed / self.count, self.size - self.count)}")
        self.printed, self.printed_at = self.count, now


class RaceLines:
    """`engines.race.race`'s `on_run(done, total, label)` as a line per tenth of the runs, or when
    `_VALIDATION_EVERY_S` has passed since the last line, and after the last run; the clock starts
    at the first run's end (servers start before it), so the time left is the mean run since then
    times the runs left."""

    def __init__(self, write: Callable[[str], None] = log_line, clock: Callable[[], float] = time.monotonic) -> None:
        self.write, self.clock = write, clock
        self.first = self.first_at = self.printed = self.printed_at = None

    def __call__(self, done: int, total: int, label: str) -> None:
        now = self.clock()
        if self.first is None:
            self.first, self.first_at, self.printed, self.printed_at = done, now, 0, now
        every = max(1, total // _VALIDATION_LINES)
        if done < total and done - self.printed < every and now - self.printed_at < _VALIDATION_EVERY_S:
            return
        runs = done - self.first
        mean = (now - self.first_at) / runs if runs > 0 else None
        left = f", ~{duration(mean * (total - done))} left" if mean is not None and done < total else ""
        self.write(f"{_PREFIX} race {done}/{total} ({label}), {duration(now - self.first_at)} elapsed{left}")
        self.printed, self.printed_at = done, now


@dataclass(frozen=True)
class Callbacks:
    """What a command hands its runs: `profile` (`profiler.run.Progress`), `check` (recommend's
    self-check) and `validation` (both `validation.chain_runs.ValidationProgress`)."""

    profile: Progress
    check: ValidationProgress
    validation: ValidationProgress


@contextmanager
def progress_bars(disable: bool = False) -> Iterator[Callbacks]:
    """Progress callbacks on stderr: bars on one display on a terminal, else lines
    (`ProfileLines`, `ValidationLines`), `--json` or not; nothing with `disable` (tests)."""
    if not disable and not sys.stderr.isatty():
        yield Callbacks(ProfileLines(), ValidationLines(verb="self-check"), ValidationLines())
        return
    display = _Display(disable)
    try:
        yield Callbacks(_ProfileBar(display, "profiling"), _ValidationBar(display, "self-checking", "self-check"),
                        _ValidationBar(display, "validating", "validate"))
    finally:
        display.stop()
