"""A race on the results page: its JSON read back (any version, `formats.race.upgraded`), tabled,
plotted, and a run folder with a race but no command for it refused."""

from __future__ import annotations

import json
import shutil

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.validation import results_page
from polyplan.formats.race import FORMAT, VERSION, Race, RaceRow, race_json, read_race_file
from polyplan.validation.race_results import plot_race, race_lines, read_race


def _row(label, speedup, decode, predicted=None, interval=None, exported=False):
    return {"label": label, "speedup": speedup, "speedup_sd": 0.1, "decode_speedup": decode, "decode_speedup_sd": 0.2,
            "predicted_speedup": predicted, "predicted_interval": interval, "exported": exported, "failure": None}


RACE = {"rows": [_row("llama.cpp target only", 1.0, 1.0, 1.0), _row("ngram-simple (defaults)", 1.09, 1.16, 1.22, [1.02, 1.38], True),
                 _row("draft-simple", 0.59, 0.55), _row("polyplan plan", 1.16, None) | {"judgement": "not judged here (polyplan validate judges the plan)"},
                 _row("too large", float("nan"), None)]}


def test_a_race_reads_back_as_rows_held_against_the_right_measure(tmp_path):
    path = tmp_path / "race.json"
    path.write_text(json.dumps(RACE))
    rows = read_race(path)
    assert [row.label for row in rows] == ["llama.cpp target only", "ngram-simple (defaults)", "draft-simple", "polyplan plan"]
    exported = rows[1]
    assert (exported.measured, exported.measured_sd, exported.predicted, exported.predicted_interval, exported.exported) == (
        1.16, 0.2, 1.22, (1.02, 1.38), True)  # decode-only, not whole calls
    assert "| polyplan plan | 1.16x ± 0.10 (whole calls) | not judged here (polyplan validate judges the plan) | – |" in "\n".join(race_lines(rows))
    assert rows[3].measured == 1.16 and rows[3].decode_speedup is None and rows[3].measured_sd == 0.1  # no decode timing: whole calls
    table = "\n".join(race_lines(rows))
    assert "| ngram-simple (defaults) (exported) | 1.16x ± 0.20 (decode) | 1.22x [1.02, 1.38] | +5.2% |" in table
    assert "| draft-simple | 0.55x ± 0.20 (decode) | not modelled | – |" in table
    assert plot_race(rows, tmp_path / "race.png", "a race").stat().st_size > 5_000
    path.write_text("{}")
    with pytest.raises(PolyplanError, match="bench peers --json"):
        read_race(path)


def test_a_race_with_its_split_tables_the_price_on_its_own_prompts(tmp_path):
    path = tmp_path / "race.json"
    split = {"rows": [RACE["rows"][0], RACE["rows"][1] | {"race_priced": 1.18}, RACE["rows"][2]]}
    path.write_text(json.dumps(split))
    rows = read_race(path)
    assert rows[1].race_priced == 1.18 and rows[0].race_priced is None
    table = race_lines(rows)
    assert table[0].endswith("| priced on the race's prompts (error) |") and table[1].count("---") == 5
    assert "| ngram-simple (defaults) (exported) | 1.16x ± 0.20 (decode) | 1.22x [1.02, 1.38] | +5.2% | 1.18x (+1.7%) |" in table
    assert "| draft-simple | 0.55x ± 0.20 (decode) | not modelled | – | – |" in table
    assert "priced on the race's prompts" not in race_lines(read_race_of(tmp_path, RACE))[0]  # control: a race without it


def read_race_of(folder, race):
    path = folder / "plain.json"
    path.write_text(json.dumps(race))
    return read_race(path)


def test_a_race_goes_on_the_page_under_its_run_and_needs_its_command(tmp_path):
    source = next(folder for folder in sorted(results_page.RESULTS.iterdir()) if (folder / "run.json").is_file())
    copy = tmp_path / source.name
    shutil.copytree(source, copy)
    (copy / "race.json").write_text(json.dumps(RACE))
    manifest = json.loads((copy / "run.json").read_text())
    manifest.pop("race_command", None)
    (copy / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(PolyplanError, match="missing race_command"):
        results_page.read_runs(tmp_path)
    manifest["race_command"] = "polyplan bench peers --engine llama.cpp --plan plan.json --json"
    (copy / "run.json").write_text(json.dumps(manifest))
    page = results_page.page_text(results_page.read_runs(tmp_path))
    assert "against llama-server: `polyplan bench peers --engine llama.cpp --plan plan.json --json`" in page
    assert "| ngram-simple (defaults) (exported) | 1.16x" in page
    (copy / "race.json").unlink()  # control: without a race, race_command is an unknown field
    with pytest.raises(PolyplanError, match="unknown race_command"):
        results_page.read_runs(tmp_path)


def test_a_race_file_reads_back_as_written_and_every_older_file_through_the_converter(tmp_path):
    """Version 2 reads back as the race that wrote it; llama-server's version 1 (the rows of the
    race.json files in docs/results) and the HF race's JSON before it (`configuration` rows per
    category, the exported verdict apart) read through `upgraded`; a newer version is refused."""
    row = RaceRow("ngram-mod (defaults)", 1.1, 0.05, 4, 256, 20.0, decode_speedup=1.2, predicted_speedup=1.25,
                  predicted_interval=(1.1, 1.3), by_category=(("chat", 1.1),), exported=True)
    race = Race("llama.cpp", (row,), 2, 64, 2, 1, "--threads", (("pace", "pace: ..."),), (("logs", "/tmp/l"),))
    path = tmp_path / "race.json"
    path.write_text(json.dumps(race_json(race)))
    assert json.loads(path.read_text())["format"] == FORMAT and read_race_file(path) == race
    assert read_race_file(path).rows[0].judgement() == "1.25x [1.10, 1.30] (+4.2%, inside, exported)"
    old = dict(RACE, memory="memory: ...", pace_note="pace: ...", threads=1, llama_cpp_version="0.3.36")
    path.write_text(json.dumps(old))
    upgraded = read_race_file(path)
    assert upgraded.engine == "llama.cpp" and upgraded.note("pace") == "pace: ..." and upgraded.note("memory") == "memory: ..."
    assert upgraded.rows[3].judgement() == "not judged here (polyplan validate judges the plan)"
    hf = {"prompts": 1, "new_tokens": 8, "repeats": 2, "threads": 1, "hf_overhead": "HF overhead measured",
          "exported": {"configuration": "HF assisted d K=3", "tolerance": 0.1},
          "rows": [{"configuration": label, "category": category, "tokens": 8, "seconds": 1.0, "target_passes": 4,
                    "tokens_per_second": 8.0, "speedup": speedup, "speedup_sd": None, "tokens_per_target_pass": 2.0,
                    "predicted_speedup": predicted, "predicted_whole_call_speedup": whole}
                   for category in ("math", "all") for label, speedup, predicted, whole in
                   (("target only (HF generate)", 1.0, None, None), ("HF assisted d K=3", 1.5, 1.8, 1.6))]}
    path.write_text(json.dumps(hf))
    rows = read_race(path)
    assert [(r.label, r.category) for r in rows] == [("target only (HF generate)", "all"), ("HF assisted d K=3", "all")]
    assert rows[1].exported and rows[1].predicted == 1.6 and rows[1].judgement() == "1.60x (+6.7%, within 10%, exported)"
    path.write_text(json.dumps(race_json(race) | {"version": VERSION + 1}))
    with pytest.raises(PolyplanError, match="version"):
        read_race_file(path)
