"""A measured run read back (validation.measured_run): the profile with the plan and report beside
it, as `docs/results/` ships them, and the report's chains paired into measured insertions."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from polyplan.validation.measured_run import read_run

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


@pytest.mark.parametrize("folder", ["family-amd", "family-h200"])
def test_a_shipped_run_reads_with_its_plan_and_report(folder):
    run = read_run(RESULTS / folder / "profile.json")
    assert run.plan is not None and run.report is not None
    assert run.plan.target == run.profile.target
    recommended = next(chain for chain in run.report.chains if chain.recommended)
    assert run.validated(recommended.chain) is recommended
    assert run.validated(("no", "such", "chain")) is None


def test_insertions_pair_each_validated_chain_with_the_same_chain_without_the_middle():
    run = read_run(RESULTS / "family-amd" / "profile.json")
    by_chain = {chain.chain: chain for chain in run.report.chains}
    found = run.insertions(("target", "target-int8", "drafter"))
    assert found, "the AMD run validated target-int8 between the target and the drafter"
    for insertion in found:
        with_chain, without_chain = insertion.with_chain.chain, insertion.without_chain.chain
        position = with_chain.index("target-int8")
        assert with_chain[position - 1: position + 2] == ("target", "target-int8", "drafter")
        assert without_chain == with_chain[:position] + with_chain[position + 1:] and without_chain in by_chain
        assert insertion.measured_delta == pytest.approx(
            by_chain[with_chain].measured_speedup - by_chain[without_chain].measured_speedup)
        assert insertion.predicted_delta == pytest.approx(
            by_chain[with_chain].predicted_speedup.exact - by_chain[without_chain].predicted_speedup.exact)
    # negative control: a middle between neighbours it never sits between
    assert run.insertions(("target", "target-int8", "target-exit2")) == ()


def test_a_profile_alone_is_a_run_without_measurements(tmp_path):
    shutil.copy(RESULTS / "family-amd" / "profile.json", tmp_path / "mine.json")
    run = read_run(tmp_path / "mine.json")
    assert run.plan is None and run.report is None and run.profile.target == "target"
    assert run.validated(("target",)) is None and run.insertions(("target", "drafter", "ngram")) == ()
