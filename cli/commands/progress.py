"""Progress bars on stderr for the long commands (profiling, validation), drawn with rich.

A bar appears only when its work reports its size (`total`), so an error found before any
measurement leaves stderr with nothing but its one line. Bars of one command share one
display (rich allows one live display at a time).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class _Display:
    """One rich `Progress`, started when the first bar needs it."""

    def __init__(self, disable: bool) -> None:
        self.disable = disable
        self.progress = None

    def add(self, label: str, size: int):
        if self.progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            columns = (TextColumn("{task.description:<56}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            self.progress = Progress(*columns, console=Console(stderr=True), transient=True, disable=self.disable)
            self.progress.start()
        return self.progress.add_task(label, total=size)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


class _Bar:
    """One task of a display, created on the first `total` call."""

    def __init__(self, display: _Display, label: str) -> None:
        self.display = display
        self.label = label
        self.task = None

    def total(self, size: int) -> None:
        if self.task is None:
            self.task = self.display.add(self.label, size)
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
    """`profiler.validation_runs.ValidationProgress` callbacks."""

    def advance(self, label: str) -> None:
        self.update(f"validate: {label}", 1)


@contextmanager
def progress_bars(disable: bool = False) -> Iterator[tuple[_ProfileBar, _ValidationBar]]:
    """Profiling and validation callbacks `(profile, validation)` drawn on one display on stderr."""
    display = _Display(disable)
    try:
        yield _ProfileBar(display, "profiling"), _ValidationBar(display, "validating")
    finally:
        display.stop()
