"""Progress bars on stderr for the long commands (profiling, validation), drawn with rich."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class _ProfileBar:
    """`profiler.run.Progress` callbacks drawn as one bar."""

    def __init__(self, progress) -> None:
        self.progress = progress
        self.task = progress.add_task("profiling", total=None)

    def total(self, steps: int) -> None:
        self.progress.update(self.task, total=steps)

    def start(self, step) -> None:
        self.progress.update(self.task, description=f"profile: {step.label}")

    def done(self, step, reused: bool) -> None:
        self.progress.update(self.task, advance=1, description=("profile: reused " if reused else "profile: ") + step.label)


class _ValidationBar:
    """`profiler.validate.ValidationProgress` callbacks drawn as one bar."""

    def __init__(self, progress) -> None:
        self.progress = progress
        self.task = progress.add_task("validating", total=None)

    def total(self, runs: int) -> None:
        self.progress.update(self.task, total=runs)

    def advance(self, label: str) -> None:
        self.progress.update(self.task, advance=1, description=f"validate: {label}")


@contextmanager
def _bar(kind, disable: bool) -> Iterator:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description:<56}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True, disable=disable) as progress:
        yield kind(progress)


def profile_bar(disable: bool = False):
    """A context manager yielding profiling progress callbacks (a bar on stderr unless disabled)."""
    return _bar(_ProfileBar, disable)


def validation_bar(disable: bool = False):
    """A context manager yielding validation progress callbacks (a bar on stderr unless disabled)."""
    return _bar(_ValidationBar, disable)
