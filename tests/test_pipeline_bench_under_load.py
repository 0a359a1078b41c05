"""`polyplan bench loop`: its per-chain lines and goals (fast, from built validation results),
and the whole quiet + loaded loop on the shipped family at tiny settings (slow)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.pipeline.load import LoadReport
from polyplan.pipeline.under_load import LOADED, QUIET, LoopBenchmark, LoopRun, loop_lines

from test_validation_paired import _validate


def _run(label, recommended, other, load=()):
    chains, head = _validate(recommended, other)
    validation = SimpleNamespace(chains=tuple(chains), headline=head, notes=("timing warning from the plan: x",))
    return LoopRun(label, SimpleNamespace(validation=validation), load)


def test_loop_lines_give_every_chain_and_the_goals_per_run():
    bench = LoopBenchmark((_run(QUIET, 1.76, 1.70), _run(LOADED, 1.76, 2.75, (LoadReport(1000, 2.0),))), cores=1)
    lines = loop_lines(bench)
    rows = [line for line in lines if line.startswith((QUIET, LOADED)) and " > " in line.split(":")[0]]
    assert len(rows) == 4  # two chains per run, target-only left out
    assert any("1.75x [1.60, 1.90]" in row and "yes" in row for row in rows if row.startswith(QUIET))
    goals = {line.split(":")[0]: line for line in lines if ": exact model within 10%" in line}
    assert "recommended fastest or tied: yes" in goals[QUIET]
    assert "recommended fastest or tied: NO" in goals[LOADED]  # 1.76x recommended against 2.75x
    assert "load: 1 process(es), 500 matrix products/s" in goals[LOADED]
    assert f"{LOADED}: warning: timing warning from the plan: x" in lines


@pytest.mark.slow
def test_bench_loop_runs_quiet_then_loaded_end_to_end(tmp_path, single_thread):
    family = Path(__file__).resolve().parent.parent / "examples" / "zoo.yaml"
    args = ["bench", "loop", "--quick", "--candidates", str(family), "--prompts-per-kind", "1", "--new-tokens", "16",
            "--repeats", "2", "--top", "1", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "loop")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    for label in (QUIET, LOADED):
        assert (tmp_path / "loop" / label / "report.json").is_file()
        assert f"{label}: checked prediction within 10% on every chain:" in result.stdout  # the demo self-checks


def test_load_shapes_are_named_and_bad_ones_refused():
    from polyplan.formats.errors import PolyplanError
    from polyplan.pipeline.load import SHAPES, load_shape

    assert set(SHAPES) == {"steady", "bursty", "two-process"}
    assert load_shape("two-process").count(1) == 2 and load_shape("bursty").count(3) == 3
    with pytest.raises(PolyplanError, match="'wavy' is not a load shape"):
        load_shape("wavy")


def test_a_bursty_load_alternates_busy_and_asleep_spans(monkeypatch):
    """Fake clock: each look at it takes 1 ms (a product costs a few) and each nap 20 ms; a bursty
    load spends about half its time asleep (spans of 0.1-1.0 s), a steady one none (the negative
    control). The products are of small matrices: on the fake clock their size changes nothing
    but the real seconds the test takes."""
    from polyplan.pipeline import load as load_module
    from polyplan.pipeline.load import run_load

    monkeypatch.setattr(load_module, "SIZE", 8)

    def timed(bursty: bool) -> tuple[int, float]:
        now = [0.0]
        naps = []

        def clock():
            now[0] += 0.001
            return now[0]

        def sleep(seconds):
            naps.append(seconds)
            now[0] += seconds

        report = run_load(8.0, clock=clock, sleep=sleep, bursty=bursty, seed=1)
        return report.products, sum(naps) / report.seconds

    steady_products, steady_asleep = timed(False)
    bursty_products, bursty_asleep = timed(True)
    assert steady_asleep == 0.0
    assert 0.3 < bursty_asleep < 0.7 and bursty_products < 0.8 * steady_products


def test_loop_lines_count_the_measured_speedups_inside_their_intervals():
    bench = LoopBenchmark((_run(QUIET, 1.76, 1.70), _run("two-process", 1.76, 2.75, (LoadReport(100, 2.0),) * 2)), cores=1)
    goals = {line.split(":")[0]: line for line in loop_lines(bench) if ": exact model within 10%" in line}
    assert "two-process" in goals and "load: 2 process(es), 100 matrix products/s" in goals["two-process"]
    assert "measured speedups inside their intervals:" in goals[QUIET]
