"""The race harness says how far it is (`engines.race.race`'s `on_run`, `race_servers` across
memory groups) and `bench peers` prints it with the time left (`cli.commands.progress.RaceLines`)."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from polyplan.cli.commands.progress import RaceLines
from polyplan.engines.race import Contender, Timed, race
from polyplan.formats.errors import PolyplanError


def _prompts(count: int):
    return [SimpleNamespace(ids=[1, 2, index], prompt=SimpleNamespace(kind="chat")) for index in range(count)]


def _contender(label: str, calls: list[str], fail_after: int | None = None) -> Contender:
    def run(ids):
        calls.append(label)
        if fail_after is not None and calls.count(label) > fail_after:
            raise PolyplanError("the server went away")
        return Timed((7, 8), 0.01)

    return Contender(label, run=run)


def test_the_race_reports_every_run_once_warm_ups_included():
    calls, heard = [], []
    contenders = [_contender(label, calls) for label in ("target alone", "draft K=3", "polyplan")]
    runs, failures = race(contenders, _prompts(4), repeats=2, warm_up=True, on_run=lambda *args: heard.append(args))
    assert not failures and len(runs) == 3 * 4 * 2
    assert len(heard) == len(calls) == 3 * 4 * 3  # one report per run: 4 warm-ups and 8 timed runs each
    assert [done for done, _, _ in heard] == list(range(1, len(calls) + 1))
    assert {total for _, total, _ in heard} == {len(calls)}
    assert [label for _, _, label in heard] == [label if i >= 12 else f"warm-up: {label}" for i, label in enumerate(calls)]


def test_a_contender_that_fails_takes_its_runs_left_out_of_the_total():
    calls, heard = [], []
    contenders = [_contender("target alone", calls), _contender("flaky", calls, fail_after=3)]
    runs, failures = race(contenders, _prompts(3), repeats=2, on_run=lambda *args: heard.append(args))
    assert "flaky" in failures and len(heard) == len(calls) == 6 + 4  # its 4th run fails; none after it
    assert heard[-1][:2] == (10, 10)  # the count ends where the total does
    assert heard[0][1] == 12  # planned: 2 contenders x 3 prompts x 2 repeats


def test_race_servers_counts_every_group_in_one_total():
    from polyplan.engines.llama_cpp.race import TARGET_ONLY, race_servers

    class Server:
        def complete(self, ids, new_tokens):
            return SimpleNamespace(token_ids=(7,) * new_tokens, wall_s=0.01, draft_n=0, draft_accepted=0, predicted_ms=5.0,
                                   predicted_n=new_tokens, rounds=None)

    groups = [[Contender(TARGET_ONLY), Contender("a")], [Contender(TARGET_ONLY), Contender("b"), Contender("c")]]
    heard = []
    runs, failures = race_servers(groups, lambda config: contextlib.nullcontext(Server()), lambda ids: Timed((7, 7), 0.01),
                                  _prompts(2), repeats=2, new_tokens=2, on_run=lambda *args: heard.append(args))
    total = (3 + 4) * 2 * 2  # each group's servers and polyplan's plan, 2 prompts x 2 repeats
    assert not failures and len(runs) == len(heard) == total
    assert [done for done, _, _ in heard] == list(range(1, total + 1)) and {t for _, t, _ in heard} == {total}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_race_lines_print_a_tenth_at_a_time_with_the_time_left():
    clock, lines = Clock(), []
    progress = RaceLines(lines.append, clock)
    for done in range(1, 41):
        clock.now += 5  # a run every 5 s (the first run's end starts the clock)
        progress(done, 40, "draft K=3")
    assert [line.split(" (")[0] for line in lines] == [f"[polyplan] race {done}/40" for done in range(4, 41, 4)]
    assert lines[0] == "[polyplan] race 4/40 (draft K=3), 15s elapsed, ~3m00s left"  # 5 s a run, 36 left
    assert lines[-1] == "[polyplan] race 40/40 (draft K=3), 3m15s elapsed"
    slow, lines[:] = RaceLines(lines.append, clock), []
    for done in range(1, 4):
        clock.now += 40  # slower than half a minute a run: a line each
        slow(done, 40, "polyplan")
    assert lines == ["[polyplan] race 2/40 (polyplan), 40s elapsed, ~25m20s left",  # the first run only starts the clock
                     "[polyplan] race 3/40 (polyplan), 1m20s elapsed, ~24m40s left"]


@pytest.mark.parametrize("total", [1, 3])
def test_a_short_race_says_when_it_ends(total):
    clock, lines = Clock(), []
    progress = RaceLines(lines.append, clock)
    for done in range(1, total + 1):
        clock.now += 1
        progress(done, total, "x")
    assert lines[-1].startswith(f"[polyplan] race {total}/{total} (x), ") and "left" not in lines[-1]
