"""Progress lines for a log (`cli/commands/progress.py`): elapsed time and time left, on a fake clock."""

from __future__ import annotations

import pytest

from polyplan.cli.commands.progress import ProfileLines, ValidationLines, duration, progress_bars
from polyplan.profiler.run import Step


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (12.4, "12s"), (59.6, "1m00s"), (72, "1m12s"), (290, "4m50s"),
                                               (3599, "59m59s"), (7500, "2h05m"), (-1, "0s")])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_profile_lines_one_per_measured_entry_with_the_mean_entry_time_left():
    clock, lines = Clock(), []
    progress = ProfileLines(lines.append, clock)
    progress.total(5)
    clock.now += 2  # loading before the first entry counts as elapsed, not as an entry's time
    progress.start(Step("latency", "latency target"))
    clock.now += 10
    progress.done(Step("latency", "latency target"), reused=False)
    progress.done(Step("latency", "latency small"), reused=True)  # no line of its own
    progress.start(Step("alpha", "alpha target <- small [greedy]"))
    clock.now += 30
    progress.done(Step("alpha", "alpha target <- small [greedy]"), reused=False)
    assert lines == [
        "[polyplan] profile: timing the models' latency curves together, round by round (a noisy machine floor repeats "
        "rounds, up to the noise budget, unless the models' own timings are steady)",  # the joint timing says it began
        "[polyplan] profile 1/5 (latency target) done, 12s elapsed, ~40s left",  # 10 s a entry, 4 left
        "[polyplan] profile 3/5 (alpha target <- small [greedy]) done, 42s elapsed, ~40s left",  # 20 s, 2 left
    ]
    for label in ("a", "b"):
        progress.start(Step("alpha", label))
        clock.now += 20
        progress.done(Step("alpha", label), reused=False)
    assert lines[-1] == "[polyplan] profile 5/5 (b) done, 1m22s elapsed"  # nothing left: no estimate


def test_profile_lines_follow_a_refined_total_and_start_over_for_a_new_run():
    clock, lines = Clock(), []
    progress = ProfileLines(lines.append, clock)
    progress.total(10)
    progress.start(Step("latency", "x"))
    clock.now += 5
    progress.done(Step("latency", "x"), reused=False)
    progress.total(3)  # the run knows its pairs now: fewer entries, same count and clock
    progress.start(Step("alpha", "y"))
    clock.now += 5
    progress.done(Step("alpha", "y"), reused=False)
    assert lines[-1] == "[polyplan] profile 2/3 (y) done, 10s elapsed, ~5s left"
    progress.done(Step("alpha", "z"), reused=True)
    clock.now += 100
    progress.total(2)  # the next run (bench loop): counted and timed afresh
    progress.start(Step("latency", "x"))
    clock.now += 4
    progress.done(Step("latency", "x"), reused=False)
    assert lines[-1] == "[polyplan] profile 1/2 (x) done, 4s elapsed, ~4s left"


def test_validation_lines_every_tenth_of_the_runs_or_half_minute_and_at_the_end():
    clock, lines = Clock(), []
    progress = ValidationLines(lines.append, clock)
    progress.total(40)  # a line every 4 runs
    for _ in range(8):
        clock.now += 1
        progress.advance("target > small, K = [3]")
    assert lines == ["[polyplan] validate 4/40 (target > small, K = [3]), 4s elapsed, ~36s left",
                     "[polyplan] validate 8/40 (target > small, K = [3]), 8s elapsed, ~32s left"]
    clock.now += 31  # a slow run: the half minute passes before the next tenth
    progress.advance("target")
    assert lines[-1] == "[polyplan] validate 9/40 (target), 39s elapsed, ~2m14s left"  # 39/9 s a run, 31 left
    progress.advance("target")
    assert len(lines) == 3  # neither a tenth nor half a minute since the last line
    for _ in range(30):
        progress.advance("target")
    assert lines[-1] == "[polyplan] validate 40/40 (target), 39s elapsed"


def test_a_short_validation_prints_every_run():
    clock, lines = Clock(), []
    progress = ValidationLines(lines.append, clock)
    progress.total(3)
    for label in ("a", "b", "c"):
        clock.now += 60
        progress.advance(label)
    assert [line.split(",")[0] for line in lines] == ["[polyplan] validate 1/3 (a)", "[polyplan] validate 2/3 (b)",
                                                     "[polyplan] validate 3/3 (c)"]


def test_self_check_lines_name_the_self_check():
    clock, lines = Clock(), []
    progress = ValidationLines(lines.append, clock, verb="self-check")
    progress.total(2)
    for label in ("target", "target > small"):
        clock.now += 3
        progress.advance(label)
    assert lines == ["[polyplan] self-check 1/2 (target), 3s elapsed, ~3s left", "[polyplan] self-check 2/2 (target > small), 6s elapsed"]


def test_lines_off_a_terminal_and_nothing_when_disabled(capsys):
    with progress_bars() as progress:  # pytest's captured stderr is not a terminal
        assert isinstance(progress.profile, ProfileLines) and isinstance(progress.validation, ValidationLines)
        progress.check.total(1)
        progress.check.advance("target")
        progress.validation.total(1)
        progress.validation.advance("target")
    with progress_bars(disable=True) as progress:  # tests: no progress at all
        assert not isinstance(progress.profile, ProfileLines)
        progress.validation.total(1)
        progress.validation.advance("target")
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["[polyplan] self-check 1/1 (target), 0s elapsed", "[polyplan] validate 1/1 (target), 0s elapsed"]
    assert captured.out == ""  # stdout stays for results and --json
