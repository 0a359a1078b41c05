"""Why an interval is wide (`planner.intervals.width`): each source's share read back from the
plan, the largest named with its remedy, and no line for a narrow interval (the control)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from polyplan.formats.plan import ChainCheck, ExactRecord, PaperRecord, PlannedChain
from polyplan.planner.intervals.width import WIDE, wide_interval_line, width_sources


def planned(interval, workload, check=None) -> PlannedChain:
    return PlannedChain(
        chain=("t", "i", "d"), block_sizes=(3, 3),
        exact=ExactRecord(speedup=1.8, acceptances=(0.8, 0.7), forwards_per_token=(0.4, 0.8, 2.0), tokens_per_verification=(2.5, 2.2),
                          drafted_per_verification=(3.0, 3.0), time_per_token_s=(0.004, 0.002, 0.001), overhead_per_token_s=0.0,
                          interval=interval, workload_interval=workload),
        paper=PaperRecord(speedup=2.0, phi_per_token=(0.4, 0.8, 2.0), mean_lengths=(2.5, 2.2)),
        check=check,
    )


def test_the_new_prompt_set_is_named_when_it_dominates():
    chain = planned((1.14, 2.74), (1.5, 2.1))
    sources = width_sources(chain, floor=None)
    assert sources.largest() == "new_set"
    total = math.log(2.74 / 1.14)
    assert math.hypot(sources.new_set, sources.profile) == pytest.approx(total)
    line = wide_interval_line(chain, floor=None)
    assert line.startswith("t > i > d: interval [1.14, 2.74] spans x2.40, mostly a new prompt set's own acceptance spread")
    assert "workload interval" in line


def test_a_noisy_floor_is_named_with_its_remedy_and_a_quiet_one_is_not():
    chain = planned((1.1, 2.6), (1.12, 2.55))
    noisy = width_sources(chain, floor=0.50)
    assert noisy.largest() == "floor" and noisy.floor == pytest.approx(2 * 1.96 * 0.5 * 0.50 / 1.349, rel=1e-3)
    assert math.hypot(noisy.floor, noisy.profile) == pytest.approx(math.log(2.55 / 1.12))
    assert "quieter machine" in wide_interval_line(chain, floor=0.50)
    assert width_sources(chain, floor=0.05).floor == 0.0  # below the health threshold: not a source
    assert width_sources(chain, floor=0.05).largest() == "profile"


def test_the_check_is_named_when_its_term_is_the_widest_part():
    check = ChainCheck(1.0, 0.7, 1.4, 1.8, (1.0, 2.9), 1.8)
    chain = planned((1.6, 2.0), (1.65, 1.95), check)
    assert width_sources(chain, None).largest() == "check"
    assert "self-check" in wide_interval_line(chain, None)


def test_a_narrow_interval_gets_no_line():
    chain = planned((1.5, 1.5 * WIDE * 0.99), (1.6, 2.0))
    assert wide_interval_line(chain, floor=0.5) is None
    assert wide_interval_line(replace(chain, exact=replace(chain.exact, interval=None)), None) is None


def test_recommend_says_why_a_wide_interval_is_wide(tmp_path):
    """The Qwen pair's recorded profile (docs/results) plans chains whose intervals span about 2x:
    recommend names each with its largest source; the family's narrower ones get no line (control)."""
    from pathlib import Path

    from typer.testing import CliRunner

    from polyplan.cli.app import app

    results = Path(__file__).resolve().parent.parent / "docs" / "results"
    wide = CliRunner().invoke(app, ["recommend", "--profile", str(results / "qwen-code-amd" / "profile.json"),
                                    "--out", str(tmp_path / "qwen.json")])
    assert wide.exit_code == 0, wide.output
    assert "wide interval: qwen-1.5b > qwen-0.5b: interval [" in wide.output and "mostly " in wide.output
    narrow = CliRunner().invoke(app, ["recommend", "--profile", str(results / "family-amd" / "profile.json"),
                                      "--out", str(tmp_path / "family.json")])
    assert narrow.exit_code == 0, narrow.output
    assert "wide interval" not in narrow.output
