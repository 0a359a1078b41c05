"""docs/results.md is generated from the runs' own files (`polyplan.validation.results_page`):
rebuild it with `python -m polyplan.validation.results_page` after adding or replacing a run."""

from __future__ import annotations

import json
import shutil

import pytest

from polyplan.formats.plan import blocks_text
from polyplan.formats.errors import PolyplanError
from polyplan.validation import results_page


def test_the_page_is_what_the_runs_files_generate():
    runs = results_page.read_runs()
    assert runs, "docs/results/ holds no run"
    assert results_page.PAGE.read_text(encoding="utf-8") == results_page.page_text(runs), (
        "docs/results.md is out of date: run `python -m polyplan.validation.results_page`")


def test_every_validated_chain_of_every_run_is_on_the_page():
    page = results_page.PAGE.read_text(encoding="utf-8")
    for run in results_page.read_runs():
        for chain in run.report.chains:
            if chain.measured_speedup is not None and len(chain.chain) > 1:
                assert f"| {run.title} | {' > '.join(chain.chain)} {blocks_text(chain.block_sizes, chain.draft_policy)}" in page
                assert f"{chain.measured_speedup:.2f}x" in page


def test_a_changed_measurement_changes_the_page(tmp_path):
    # negative control: the page follows the files, not the other way round
    source = next(folder for folder in sorted(results_page.RESULTS.iterdir()) if (folder / "run.json").is_file())
    copy = tmp_path / source.name
    shutil.copytree(source, copy)
    before = results_page.page_text(results_page.read_runs(tmp_path))
    report = json.loads((copy / "report.json").read_text())
    chain = next(c for c in report["chains"] if c["measured_speedup"] is not None and len(c["chain"]) > 1)
    chain["measured_speedup"] = chain["measured_speedup"] * 0.5
    (copy / "report.json").write_text(json.dumps(report))
    assert results_page.page_text(results_page.read_runs(tmp_path)) != before


def test_a_run_without_its_provenance_is_refused(tmp_path):
    source = next(folder for folder in sorted(results_page.RESULTS.iterdir()) if (folder / "run.json").is_file())
    copy = tmp_path / source.name
    shutil.copytree(source, copy)
    manifest = json.loads((copy / "run.json").read_text())
    del manifest["commit"]
    (copy / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(PolyplanError, match="missing commit"):
        results_page.read_runs(tmp_path)


def test_the_plots_are_written(tmp_path):
    runs = results_page.read_runs()
    written = results_page.write_plots(runs, tmp_path)
    races = {f"results_race_{run.folder}.png" for run in runs if run.race}
    loaded = {kept.plot(run.folder) for run in runs for kept in run.load_races}
    assert loaded, "the results hold races under load (docs/results/*/race_load.json)"
    assert {path.name for path in written} == set(results_page.PLOTS.values()) | races | loaded
    assert all(path.stat().st_size > 10_000 for path in written)
