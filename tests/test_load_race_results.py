"""A race under load on the results page: its JSON read back as written, tabled per number of
clients, plotted, and a run folder with one but no command for it refused."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.race import LoadLevel, LoadRace, LoadRow, RequestSpan, load_race_json, read_load_race_file
from polyplan.validation import results_page
from polyplan.validation.load_race_results import LOAD_RACE_FILE, load_race_lines, plot_load_race


def _race() -> LoadRace:
    rows = []
    for clients, (spec, predicted) in {1: (1.40, 1.48), 2: (0.97, 0.99), 4: (0.91, 0.88)}.items():
        rows += [LoadRow("llama.cpp target only", clients, 40.0 * clients ** 0.5, 1.0, 40.0, 0.5, 0.2, 0.01, 1.0, 0.0,
                         repeats=2, requests=8, decoded=512, predicted_speedup=1.0, chosen=clients > 1),
                 LoadRow("ngram-simple size-n=3 K=5", clients, 40.0 * spec, 1.0, 40.0 * spec, 0.5, 0.2, 0.01, spec, 0.03,
                         repeats=2, requests=8, decoded=512, predicted_speedup=predicted,
                         predicted_interval=(predicted - 0.2, predicted + 0.2), chosen=clients == 1,
                         timeline=(RequestSpan(0, 0, 0, 0.0, 0.1, 1.6, 64, 40, 30), RequestSpan(0, 1, 1, 0.0, 0.2, 1.9, 64))),
                 LoadRow("llama.cpp default (--spec-default)", clients, 40.0, 1.0, 40.0, 0.5, 0.2, 0.01, 1.05, 0.02,
                         repeats=2, requests=8, decoded=512),
                 LoadRow("too large", clients, failure="not started: memory")]
    levels = tuple(LoadLevel(clients, "ngram-simple size-n=3 K=5" if clients == 1 else "llama.cpp default (--spec-default)",
                             "ngram-simple size-n=3 K=5" if clients == 1 else "llama.cpp target only",
                             "fastest" if clients == 1 else "tied", limit, "llama.cpp default (--spec-default)")
                   for clients, limit in ((1, 2.78), (2, 1.70), (4, 1.32)))
    return LoadRace("llama.cpp", (1, 2, 4), tuple(rows), levels, 8, 64, 2, 2, 512)


def test_a_race_under_load_reads_back_as_written(tmp_path):
    race = _race()
    path = tmp_path / LOAD_RACE_FILE
    path.write_text(json.dumps(load_race_json(race)))
    back = read_load_race_file(path)
    assert back.clients == race.clients and back.levels == race.levels
    assert [row.label for row in back.rows] == [row.label for row in race.rows]
    assert back.rows[1].predicted_interval == race.rows[1].predicted_interval
    assert back.rows[1].timeline == race.rows[1].timeline and back.rows[1].timeline[1].client == 1  # the spans, as written
    assert back.rows[0].timeline == ()
    assert math.isnan(back.rows[3].speedup) and back.rows[3].failure == "not started: memory"
    path.write_text(json.dumps({"format": "polyplan race", "version": 1, "rows": []}))  # control: another format
    with pytest.raises(PolyplanError, match="bench peers --clients"):
        read_load_race_file(path)


def test_a_race_under_load_is_tabled_per_count_and_plotted(tmp_path):
    lines = load_race_lines(_race())
    text = "\n".join(lines)
    assert text.count("| configuration |") == 3
    assert "*4 concurrent requests* (`-np 4`)" in text
    assert "| ngram-simple size-n=3 K=5 (the plan's choice) | 1.40x ± 0.03" in text
    assert "- fastest: llama.cpp default (--spec-default); the plan's choice: llama.cpp target only (tied); physical limit 1.32x" in text
    assert "| too large | not started: memory |" in text
    written = plot_load_race(_race(), tmp_path / "load.png", "under load")
    assert written.stat().st_size > 5000


def test_a_race_with_the_split_tables_both_errors_and_reads_back_as_written(tmp_path):
    import dataclasses

    race = _race()
    assert "priced on this race's own answers" not in "\n".join(load_race_lines(race))  # a race without the split: none
    rows = tuple(dataclasses.replace(row, race_priced=row.speedup * 1.05) if row.label.startswith("ngram-simple") else row
                 for row in race.rows)
    split = dataclasses.replace(race, rows=rows)
    path = tmp_path / LOAD_RACE_FILE
    path.write_text(json.dumps(load_race_json(split)))
    assert read_load_race_file(path).rows[1].race_priced == pytest.approx(1.47)
    text = "\n".join(load_race_lines(split))
    assert "| 1 | ngram-simple size-n=3 K=5 | 1.40x | 1.48x (+5.7%) | 1.47x (+5.0%) |" in text
    assert "mean absolute error over these 3 rows:" in text and "5.0% on the race's answers" in text


def test_a_race_under_load_goes_on_the_page_under_its_run_and_needs_its_command(tmp_path):
    source = next(folder for folder in sorted(results_page.RESULTS.iterdir()) if (folder / "run.json").is_file())
    copy = tmp_path / source.name
    shutil.copytree(source, copy)
    (copy / LOAD_RACE_FILE).write_text(json.dumps(load_race_json(_race())))
    manifest = json.loads((copy / "run.json").read_text())
    manifest.pop("load_race_command", None)
    (copy / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(PolyplanError, match="missing load_race_command"):
        results_page.read_runs(tmp_path)
    manifest["load_race_command"] = "polyplan bench peers --engine llama.cpp --plan plan.json --clients 1,2,4 --json"
    (copy / "run.json").write_text(json.dumps(manifest))
    page = results_page.page_text(results_page.read_runs(tmp_path))
    assert "N concurrent clients: `polyplan bench peers --engine llama.cpp --plan plan.json --clients 1,2,4 --json`" in page
    assert "results_load_race_" in page
    (copy / "race_load_long.json").write_text(json.dumps(load_race_json(_race())))  # a second race, tagged
    with pytest.raises(PolyplanError, match="missing load_race_command_long"):
        results_page.read_runs(tmp_path)
    manifest["load_race_command_long"] = "polyplan bench peers --engine llama.cpp --plan plan.json --clients 1,2 --new-tokens 128"
    (copy / "run.json").write_text(json.dumps(manifest))
    page = results_page.page_text(results_page.read_runs(tmp_path))
    assert "`polyplan bench peers --engine llama.cpp --plan plan.json --clients 1,2 --new-tokens 128`" in page
    assert f"results_load_race_{copy.name}_long.png" in page and f"results_load_race_{copy.name}.png" in page
    (copy / LOAD_RACE_FILE).unlink()  # control: without the file, its command is an unknown field
    with pytest.raises(PolyplanError, match="unknown load_race_command"):
        results_page.read_runs(tmp_path)
