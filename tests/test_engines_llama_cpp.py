"""llama.cpp as a peer: the pinned build, the server's flags, starting and stopping it.

Fast tests check what needs no build: every flag polyplan can print for llama-server is one the
pinned llama.cpp accepts (against `tests/data/llama_server_flags.txt`, that build's `--help`),
the `/completion` answer is read as the server writes it, and the failures are one line (no
build yet, a server that dies at start: a real process, a script standing in for the binary).
The slow tests run the real build: its `--help` is the checked-in list, a real server on
127.0.0.1 answers greedy completions on a tiny GGUF the test writes and is gone afterwards, and
a model it cannot load is one line with the server's last log line and no process left.
"""

from __future__ import annotations

import dataclasses

import os
import socket
import tempfile
import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.engines.llama_cpp import build as llama_cpp_build
from polyplan.engines.llama_cpp.race import NGRAM_TYPES
from polyplan.engines.llama_cpp.server import LlamaServer, _port_is_free, free_port, parse_completion
from polyplan.formats.errors import PolyplanError
from polyplan.planner.llama_cpp.ranking import llama_cpp_spec_flags

FLAGS_FILE = Path(__file__).parent / "data" / "llama_server_flags.txt"
COMMON = ("-t", "-tb", "-c", "-np", "--no-webui", "--no-warmup", "-m", "--host", "--port", "--temp", "--spec-default")


def server_flags(binary: Path) -> set[str]:
    """Every flag `binary --help` lists (what that build accepts)."""
    done = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
    return help_flags(done.stdout + done.stderr)


def help_flags(text: str) -> set[str]:
    """The flags of llama.cpp's `--help` text: at the start of a line, comma-separated aliases
    (`-t, --threads N`), each followed by its value name or the description."""
    flags = set()
    for line in text.splitlines():
        rest = line.strip()
        while rest.startswith("-"):
            flag, _, rest = rest.partition(" ")
            flags.add(flag.rstrip(","))
            if not flag.endswith(","):
                break
            rest = rest.lstrip()
    return flags


def pinned_flags() -> set[str]:
    lines = FLAGS_FILE.read_text(encoding="utf-8").splitlines()
    return {line for line in lines if line and not line.startswith("#")}


def printed_flags() -> set[str]:
    """Every flag an export or a raced configuration can hand llama-server."""
    lists = [llama_cpp_spec_flags("ngram", 3, "", (1, 4)), llama_cpp_spec_flags("draft_model", 5, "d.gguf"),
             llama_cpp_spec_flags("draft_model", 5, "d.gguf", p_min=0.6), list(COMMON)]
    lists += [["--spec-type", kind] for kind in NGRAM_TYPES]
    lists += [list(config.args) + ["--no-repack"] for config in raced_configs()]
    return {item for flags in lists for item in flags if item.startswith("-")}


def raced_configs():
    """The race's configurations for a plan with two GGUF drafters, the export ranking `small` best."""

    from polyplan.engines.llama_cpp.race import server_configs
    from polyplan.formats.candidates import parse_candidates

    with tempfile.TemporaryDirectory(prefix="polyplan-race-") as name:
        folder = Path(name)
        for name in ("big.gguf", "small.gguf"):
            (folder / name).write_bytes(b"GGUF")  # the schema checks that they exist; nothing loads them
        candidates = parse_candidates({"candidates": [
            {"name": "big", "source": "big.gguf", "target": True, "engine": "llama.cpp"},
            {"name": "small", "source": "small.gguf", "engine": "llama.cpp"},
            {"name": "small-q4_0", "derive": {"from": "small", "quantize": "q4_0"}},
            {"name": "ngram", "derive": {"kind": "ngram"}},
        ]}, base_dir=folder)
        return server_configs(None, fake_export(folder), candidates, {"small-q4_0": "small-q4_0.gguf"})


def fake_export(folder: Path, recommend_off: bool = False):
    """An export ranking draft-simple small K=3 (1.2x, recommended unless `recommend_off`),
    ngram-mod at its defaults (1.05x [0.97, 1.12]), ngram-simple at K=5 (0.9x) and off."""
    from types import SimpleNamespace

    from polyplan.planner.llama_cpp.ranking import OFF_CONFIG, RankedConfig

    options = [SimpleNamespace(drafter="small", method="draft_model", block_size=3, prediction=SimpleNamespace(speedup=1.2)),
               SimpleNamespace(drafter="small-q4_0", method="draft_model", block_size=5, prediction=SimpleNamespace(speedup=1.1))]
    small = RankedConfig("draft-simple small K=3", tuple(llama_cpp_spec_flags("draft_model", 3, str(folder / "small.gguf"))), 1.2)
    mod = RankedConfig("ngram-mod (defaults)", ("--spec-type", "ngram-mod"), 1.05, (0.97, 1.12))
    simple = RankedConfig("ngram-simple size-n=4 K=5", tuple(llama_cpp_spec_flags("ngram", 5, "", (1, 4))), 0.9, (0.85, 0.95))
    ranking = (small, mod, OFF_CONFIG, simple)
    return SimpleNamespace(chosen=options[0], options=options, ranking=ranking,
                           recommended=OFF_CONFIG if recommend_off else small, ranking_notes=("replayed",))


def test_the_race_covers_defaults_a_sweep_every_ngram_type_and_a_combination():
    labels = [config.label for config in raced_configs()]
    assert labels[0] == "llama.cpp target only"
    assert "draft-simple small (defaults)" in labels and "draft-simple small-q4_0 (defaults)" in labels
    assert [label for label in labels if "n-max=" in label] == [
        "draft-simple small n-max=4 p-min=0.6", "draft-simple small n-max=8 p-min=0.6", "draft-simple small n-max=8 p-min=0.8"]
    assert "draft-simple small + ngram-mod (defaults)" in labels
    assert all(f"{kind} (defaults)" in labels for kind in NGRAM_TYPES) and len(NGRAM_TYPES) == 5
    exported = [config for config in raced_configs() if config.exported]
    assert [config.label for config in exported] == ["draft-simple small K=3"] and exported[0].predicted_speedup == 1.2


def test_every_configuration_the_export_predicted_is_raced_with_its_prediction():
    """Predictions are matched by flags: ngram-mod's also holds for --spec-default (the same
    flags in the pinned llama.cpp), the target alone is "off", and a ranked configuration the
    race would not run otherwise (ngram-simple at the export's K) is added."""
    by_label = {config.label: config for config in raced_configs()}
    assert by_label["ngram-mod (defaults)"].predicted_speedup == 1.05
    assert by_label["ngram-mod (defaults)"].predicted_interval == (0.97, 1.12)
    assert by_label["llama.cpp default (--spec-default)"].predicted_speedup == 1.05
    assert not by_label["llama.cpp default (--spec-default)"].exported
    assert by_label["llama.cpp target only"].predicted_speedup == 1.0 and not by_label["llama.cpp target only"].exported
    assert by_label["ngram-simple size-n=4 K=5"].predicted_speedup == 0.9
    unmodelled = [label for label, config in by_label.items() if config.predicted_speedup is None]
    assert "ngram-cache (defaults)" in unmodelled and "ngram-map-k (defaults)" in unmodelled
    assert "draft-simple small (defaults)" in unmodelled and "draft-simple small + ngram-mod (defaults)" in unmodelled


def test_an_export_that_says_off_marks_the_target_alone_exported():
    from polyplan.engines.llama_cpp.race import judged, TARGET_ONLY
    from polyplan.engines.race import Contender

    configs = judged([Contender(TARGET_ONLY, ()), Contender("ngram-mod (defaults)", ("--spec-type", "ngram-mod"))],
                     fake_export(Path("/m"), recommend_off=True))
    assert configs[0].exported and configs[0].predicted_speedup == 1.0
    assert not any(config.exported for config in configs[1:])
    # the race predicts for its own requests but marks what `polyplan export` recommends
    from polyplan.planner.llama_cpp.ranking import OFF_CONFIG

    pair = [Contender(TARGET_ONLY, ()), Contender("ngram-mod (defaults)", ("--spec-type", "ngram-mod"))]
    assert [c.exported for c in judged(pair, fake_export(Path("/m")), recommended=OFF_CONFIG)][:2] == [True, False]
    mod = fake_export(Path("/m")).ranking[1]
    assert [c.exported for c in judged(pair, fake_export(Path("/m")), recommended=mod)][:2] == [False, True]


def test_the_race_table_judges_every_prediction_and_says_not_modelled_for_the_rest():
    """Fake rows: each predicted configuration shows its prediction, interval and error against
    the decode speedup (inside or outside its interval); the others say "not modelled"."""
    from polyplan.engines.llama_cpp.race import POLYPLAN, TARGET_ONLY, UNJUDGED, llama_peers_lines
    from polyplan.formats.race import Race, RaceRow

    def row(label, decode, predicted=None, interval=None, exported=False, failure=None):
        return RaceRow(label, decode, 0.01, 4, 40, 10.0, decode_tokens_per_s=20.0 * decode, accepted_per_drafted=0.9, equal_outputs=4,
                       predicted_speedup=predicted, exported=exported, decode_speedup=decode, predicted_interval=interval,
                       failure=failure, unjudged=UNJUDGED if label == POLYPLAN else None)

    rows = (row(TARGET_ONLY, 1.0, 1.0), row("ngram-mod (defaults)", 1.22, 1.05, (0.97, 1.12)),
            row("draft-simple small K=3", 1.25, 1.2, None, True), row("ngram-cache (defaults)", 0.99),
            row("ngram-map-k (defaults)", float("nan"), 1.0, (0.99, 1.02), failure="failed to start: boom"), row(POLYPLAN, 1.1))
    bench = Race("llama.cpp", rows, 2, 64, 2, 1, notes=(("prediction", "predicted: replayed"),))
    lines = {line.split("  ")[0].strip(): line for line in llama_peers_lines(bench)}
    assert "1.05x [0.97, 1.12] (-13.9%, outside)" in lines["ngram-mod (defaults)"]
    assert "1.20x (-4.0%, exported)" in lines["draft-simple small K=3"]
    assert lines["ngram-cache (defaults)"].endswith("not modelled")
    assert lines["ngram-map-k (defaults)"].endswith("failed to start: boom; predicted 1.00x [0.99, 1.02] (not measured)")
    assert lines[POLYPLAN].endswith("not judged here (polyplan validate judges the plan)")
    assert "predicted: replayed" in llama_peers_lines(bench)
    # a configuration that never drafts is predicted as a point; the race's noise may still reach it
    never = dataclasses.replace(row("ngram-map-k4v (defaults)", 1.006, 0.991, (0.991, 0.991)), decode_speedup_sd=0.055, runs=16)
    assert never.judgement() == "0.99x [0.99, 0.99] (-1.5%, within noise)"
    assert dataclasses.replace(never, decode_speedup_sd=0.01).judgement().endswith("outside)")  # control: a tight race does not


def test_a_second_target_alone_server_races_as_a_control_and_widens_each_judgement_by_its_offset():
    """Identical servers differ by their process's own speed (docs/engines.md, "The control");
    the control row measures that offset in the race, predicted as a 1.00x point and never the
    exported one, and every judged row may miss by that much more before it is "outside"."""
    from polyplan.engines.llama_cpp.race import CONTROL, POLYPLAN, TARGET_ONLY, judged, llama_peers_lines, priced_on_race, with_server_spread
    from polyplan.engines.race import Contender
    from polyplan.formats.race import Race, RaceRow
    from polyplan.planner.llama_cpp.ranking import OFF_CONFIG

    by_label = {config.label: config for config in raced_configs()}
    assert [config.label for config in raced_configs()][:2] == [TARGET_ONLY, CONTROL]
    assert (by_label[CONTROL].args, by_label[CONTROL].predicted_speedup, by_label[CONTROL].predicted_interval) == ((), 1.0, (1.0, 1.0))
    off = judged([Contender(TARGET_ONLY, ()), Contender(CONTROL, ())], fake_export(Path("/m"), recommend_off=True))
    assert [config.exported for config in off][:2] == [True, False]  # "off" is the target alone's row, not the control's
    assert priced_on_race(off, fake_export(Path("/m")))[1].race_priced is None

    def row(label, decode, predicted=None, interval=None, sd=0.01, failure=None):
        return RaceRow(label, decode, sd, 16, 160, 10.0, decode_tokens_per_s=20.0 * decode, equal_outputs=16, predicted_speedup=predicted,
                       decode_speedup=decode, decode_speedup_sd=sd, predicted_interval=interval, failure=failure)

    never = row("ngram-map-k (defaults)", 1.008, 0.991, (0.991, 0.991))
    rows = with_server_spread((row(TARGET_ONLY, 1.0, 1.0), row(CONTROL, 1.016, 1.0, (1.0, 1.0)), never, row(POLYPLAN, 1.1)))
    assert [r.server_spread for r in rows] == [0.0, 0.0, pytest.approx(0.016), 0.0]
    assert never.judgement().endswith("outside)")  # 1.7 % above a point, sd 0.01 over 16 runs: alone, outside
    assert rows[2].judgement().endswith("within noise)")  # within the control's 1.6 % offset of it
    assert rows[1].judgement().endswith("outside)")  # the control itself is judged by its own sd only
    far = with_server_spread((row(CONTROL, 1.016, 1.0, (1.0, 1.0)), row("ngram-cache (defaults)", 1.10, 0.991, (0.991, 0.991))))[1]
    assert far.judgement().endswith("outside)")  # negative control: a 11 % miss is not the servers' noise
    assert with_server_spread((row(CONTROL, float("nan"), 1.0, failure="failed to start: x"), never))[1].server_spread == 0.0
    lines = llama_peers_lines(Race("llama.cpp", rows, 16, 64, 1, 1))
    assert any(line.startswith("control: a second server of the target alone measured 1.016x") and "1.6%" in line for line in lines)


def test_the_race_says_how_fast_the_target_alone_stepped_against_its_pricing():
    """The pace line: the target alone's decode seconds over its steps after the first token (the
    prefill gives that one), against T(1) plus the calibrated per-round cost; other servers' runs,
    polyplan's and untimed ones are not read; nothing to say without prices or a timed run."""
    from types import SimpleNamespace

    from polyplan.engines.llama_cpp.race import CONTROL, TARGET_ONLY, race_pace_line
    from polyplan.engines.race import RaceRun
    from polyplan.formats.profile import LatencyPoint, ModelProfile
    from polyplan.planner.llama_cpp.server_loop import ServerLoop

    target = ModelProfile("t", "fp-t", (LatencyPoint(128, 1, 0.025), LatencyPoint(128, 2, 0.040)))
    prices = SimpleNamespace(target=target, loop=ServerLoop(per_round_s=0.001), calibrated_step_s=None)

    def run(config, decode_s, decoded):
        return RaceRun((1,) * decoded, decode_s + 0.1, decode_s=decode_s, decoded=decoded, label=config, category="chat")

    runs = [run(TARGET_ONLY, 0.63 * 1.1, 64), run(TARGET_ONLY, 0.07 * 1.1, 8), run(CONTROL, 9.0, 64), run("polyplan plan", 9.0, 64),
            RaceRun((1, 2), 0.2, label=TARGET_ONLY, prompt=1, category="chat")]
    line = race_pace_line(runs, prices)
    assert line.startswith("pace: llama.cpp target only decoded at 11.0 ms a step in this race (2 requests), priced at 26.0 ms")
    assert "(T(1) 25.0 ms + 1.0 ms a round)" in line and "-57.7%" in line
    faster = race_pace_line([run(TARGET_ONLY, 63 * 0.0286, 64)], prices)  # 28.6 ms a step: +10 %
    assert "+10.0%" in faster and "calibration" not in faster
    calibrated = SimpleNamespace(target=target, loop=ServerLoop(per_round_s=0.001), calibrated_step_s=0.022)
    assert "28.6 ms a step in this race (1 requests), 22.0 ms in the calibration (+30.0%), priced at 26.0 ms" in (
        race_pace_line([run(TARGET_ONLY, 63 * 0.0286, 64)], calibrated))
    assert race_pace_line(runs, None) == "" and race_pace_line(runs[2:4], prices) == ""


def test_the_race_prices_its_replayed_rows_again_on_its_own_prompts_and_prints_the_split():
    """The split: the target alone's answers in the race (first group and repeat) are
    the streams; the export priced on them gives each replayed row (drafted counts: n-gram types)
    a second prediction, matched by flags (`--spec-default` too); a draft model's row and the
    target alone get none. The table prints both errors and the worst of each."""
    from types import SimpleNamespace

    from polyplan.engines.llama_cpp.race import TARGET_ONLY, llama_peers_lines, priced_on_race, race_streams
    from polyplan.engines.race import Contender, RaceRun
    from polyplan.formats.race import Race, RaceRow
    from polyplan.planner.llama_cpp.ranking import OFF_CONFIG, RankedConfig

    runs = [RaceRun((7, 8), 1.0, label=TARGET_ONLY, prompt=1),
            RaceRun((5, 6), 1.0, drafted=2, accepted=1, label="ngram-mod (defaults)"),
            RaceRun((5, 6), 1.0, label=TARGET_ONLY),
            RaceRun((9, 9), 1.0, label=TARGET_ONLY, group=1),  # another group's run: not the stream
            RaceRun((5, 9), 1.0, label=TARGET_ONLY, repeat=1)]  # a second repeat: not the stream
    streams = race_streams(runs, [(1, 2, 3), (4,)])
    assert [(stream.prompt_tokens, stream.ids) for stream in streams] == [(3, (1, 2, 3, 5, 6)), (1, (4, 7, 8))]
    mod = RankedConfig("ngram-mod (defaults)", ("--spec-type", "ngram-mod"), 1.30, drafted=40, accepted=30)
    small = RankedConfig("draft-simple small K=3", ("--spec-type", "draft-simple", "-md", "s.gguf"), 1.5)
    configs = [Contender(TARGET_ONLY, (), 1.0), Contender("ngram-mod (defaults)", ("--spec-type", "ngram-mod"), 1.05),
               Contender("llama.cpp default (--spec-default)", ("--spec-default",), 1.05),
               Contender("draft-simple small K=3", small.flags, 1.2)]
    priced = priced_on_race(configs, SimpleNamespace(ranking=(mod, small, OFF_CONFIG)))
    assert [config.race_priced for config in priced] == [None, 1.30, 1.30, None]

    def row(label, decode, predicted, race_priced=None):
        return RaceRow(label, decode, 0.01, 4, 40, 10.0, decode_tokens_per_s=20.0 * decode, predicted_speedup=predicted,
                       decode_speedup=decode, race_priced=race_priced)

    rows = (row(TARGET_ONLY, 1.0, 1.0), row("ngram-mod (defaults)", 1.25, 1.05, 1.30), row("ngram-simple size-n=3 K=15", 1.57, 1.22, 1.46),
            row("draft-simple small K=3", 1.25, 1.2))
    lines = llama_peers_lines(Race("llama.cpp", rows, 8, 64, 1, 1))
    at = next(i for i, line in enumerate(lines) if line.startswith("the predictions priced on this race's own prompts"))
    assert lines[at + 2].startswith("ngram-mod (defaults)") and "(-16.0%)" in lines[at + 2] and "1.30x (+4.0%)" in lines[at + 2]
    assert lines[at + 3].startswith("ngram-simple size-n=3 K=15") and "(-22.3%)" in lines[at + 3] and "(-7.0%)" in lines[at + 3]
    assert lines[at + 4] == "worst error over these 2 configurations: -22.3% priced on the profile's prompts, -7.0% on this race's"
    # control: without race prices there is no split
    plain = tuple(dataclasses.replace(item, race_priced=None) for item in rows)
    assert not any("this race's own prompts" in line for line in llama_peers_lines(Race("llama.cpp", plain, 8, 64, 1, 1)))


def test_every_flag_polyplan_prints_is_one_the_pinned_server_accepts():
    known = pinned_flags()
    assert len(known) > 300  # the whole --help, not a hand-picked list
    assert printed_flags() <= known, printed_flags() - known
    assert "--draft-max" not in printed_flags()  # the old spelling the pinned server refuses
    assert not {"--not-a-flag"} <= known  # negative control: the check can fail


def test_help_flags_reads_aliases_and_value_names():
    text = "-t,    --threads N                 number of threads\n--ui,  --webui, --no-ui, --no-webui     whether\n  plain text\n"
    assert help_flags(text) == {"-t", "--threads", "--ui", "--webui", "--no-ui", "--no-webui"}


def test_a_completion_is_read_as_the_server_writes_it():
    payload = {"tokens": [5, 6, 7], "timings": {"predicted_n": 3, "predicted_ms": 30.0, "prompt_ms": 4.0, "draft_n": 4, "draft_n_accepted": 2}}
    done = parse_completion(payload, 0.05)
    assert done.token_ids == (5, 6, 7) and done.tokens_per_s == pytest.approx(100.0)
    assert (done.draft_n, done.draft_accepted, done.prompt_ms) == (4, 2, 4.0)
    assert parse_completion({"tokens": [1], "timings": {"predicted_n": 1, "predicted_ms": 5.0}}, 0.01).draft_n == 0


def test_a_traced_server_s_rounds_are_read_from_its_log_after_the_request(tmp_path, monkeypatch):
    """The pinned server's trace line for each verified draft, as it writes them; lines from
    before the request are not read; totals that do not add up (a line not written yet) leave
    the rounds unread (control)."""
    from polyplan.engines.llama_cpp import server as llama_server

    log = tmp_path / "server.log"
    log.write_text("slot update_slots: id  0 | task 1 | accepted  9/ 9 draft tokens\n")  # an earlier request's
    offset = log.stat().st_size
    with open(log, "a") as out:
        out.write("slot update_slots: id  0 | task 3 | accepted  2/ 6 draft tokens\n"
                  "slot print_timing: id  0 | task 3 | draft acceptance rate = 0.50000 (    3 accepted /     6 generated)\n"
                  "slot update_slots: id  0 | task 3 | accepted  1/ 1 draft tokens (restore checkpoint)\n"
                  "slot update_slots: id  0 | task 3 | accepted  0/ 3 draft tokens\n")
    server = LlamaServer(Path("llama-server"), tmp_path / "m.gguf", (), log, trace=True)
    done = parse_completion({"tokens": [1] * 9, "timings": {"predicted_n": 9, "predicted_ms": 9.0, "draft_n": 10, "draft_n_accepted": 3}}, 0.1)
    assert server._traced(done, offset).rounds == ((6, 2), (1, 1), (3, 0))
    monkeypatch.setattr(llama_server, "TRACE_WAIT_S", 0.05)
    more = dataclasses.replace(done, draft_n=11)
    assert server._traced(more, offset).rounds is None


def test_a_taken_port_is_seen_and_a_free_one_found():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        assert not _port_is_free(taken)
        assert free_port() != taken


def test_no_build_is_one_line_naming_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path))
    with pytest.raises(PolyplanError, match="polyplan engines build llama.cpp"):
        llama_cpp_build.require_build()
    status = CliRunner().invoke(app, ["engines", "status"])
    assert status.exit_code == 0 and "not built" in status.output
    plan = tmp_path / "plan.json"
    plan.write_text("{}", encoding="utf-8")
    result = CliRunner().invoke(app, ["bench", "peers", "--engine", "llama.cpp", "--plan", str(plan)])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "polyplan engines build llama.cpp" in result.output


def test_a_build_of_another_llama_cpp_is_refused_with_the_build_command(tmp_path, monkeypatch):
    """A build an older polyplan left (another llama-cpp-python) is not raced: its server may run
    other n-gram rules than the ones replayed, and refuse flags polyplan prints."""
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path))
    old = tmp_path / "engines" / "llama.cpp-0.3.20" / "bin"
    old.mkdir(parents=True)
    for tool in llama_cpp_build.TOOLS:
        (old / tool).write_text("")
    with pytest.raises(PolyplanError, match=rf"built for llama-cpp-python 0.3.20, not {llama_cpp_build.BINDINGS_VERSION}.*polyplan engines build llama.cpp"):
        llama_cpp_build.require_build()
    pinned = tmp_path / "engines" / f"llama.cpp-{llama_cpp_build.BINDINGS_VERSION}" / "bin"
    pinned.mkdir(parents=True)
    for tool in llama_cpp_build.TOOLS:
        (pinned / tool).write_text("")
    assert llama_cpp_build.require_build().root == pinned.parent  # control: the pinned build is used beside it


def test_an_unknown_engine_is_one_line():
    result = CliRunner().invoke(app, ["bench", "peers", "--engine", "vllm"])
    assert result.exit_code == 2 and "vLLM needs a GPU" in result.output
    result = CliRunner().invoke(app, ["engines", "build", "tgi"])
    assert result.exit_code == 2 and "unknown engine 'tgi'" in result.output


def test_a_server_that_dies_at_start_is_one_line_with_its_last_log_line(tmp_path):
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'loading model'\necho 'error: failed to load model' >&2\nexit 1\n", encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    server = LlamaServer(fake, tmp_path / "m.gguf", (), tmp_path / "server.log", start_timeout_s=10)
    with pytest.raises(PolyplanError, match="exited at start \\(error: failed to load model\\)"):
        server.__enter__()
    assert server.process.poll() is not None


# ----------------------------------------------------------------------------- the real build


def real_build():
    found = llama_cpp_build.find_build()
    if found is None:
        pytest.skip(f"llama.cpp is not built; run `{llama_cpp_build.BUILD_COMMAND}`")
    return found


@pytest.mark.slow
def test_the_pinned_builds_help_is_the_checked_in_flag_list():
    assert server_flags(real_build().server) == pinned_flags()


@pytest.mark.slow
def test_a_real_server_answers_greedy_completions_and_is_gone_afterwards(tmp_path):
    pytest.importorskip("llama_cpp")
    import torch

    from polyplan.decoder.llama_cpp import LlamaCppMember
    from tiny_gguf import write_tiny_gguf

    build = real_build()
    model = tmp_path / "tiny.gguf"
    write_tiny_gguf(model)
    prompt = [5, 9, 33, 70, 101]
    with LlamaServer(build.server, model, ("-t", "1", "-c", "256", "-np", "1", "--no-webui"), tmp_path / "server.log") as server:
        pid = server.process.pid
        first = server.complete(prompt, 12)
        again = server.complete(prompt, 12)
    assert first.token_ids == again.token_ids and first.predicted_n == 12
    member = LlamaCppMember(model, context=256)
    logits = member.forward(torch.tensor(prompt), keep_last=1)
    ours = []
    for _ in range(12):
        ours.append(int(logits[-1].argmax()))
        logits = member.forward(torch.tensor(ours[-1:]), keep_last=1)
    assert list(first.token_ids) == ours
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.slow
def test_a_model_the_server_cannot_load_is_one_line_and_no_process(tmp_path):
    build = real_build()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    server = LlamaServer(build.server, broken, ("-t", "1", "--no-webui"), tmp_path / "server.log", start_timeout_s=60)
    with pytest.raises(PolyplanError, match="llama-server exited at start"):
        server.__enter__()
    assert server.process.poll() is not None


def test_a_per_token_prediction_is_held_against_the_decode_only_speedup():
    """Whole calls add the same prefill to both sides and pull every speedup toward 1; the
    server's own decode timing does not, so a per-decoded-token prediction is judged on it."""
    from polyplan.engines.llama_cpp.race import TARGET_ONLY
    from polyplan.engines.race import Contender, RaceRun, race_rows

    def run(config, prompt, call_s, decode_s):
        return RaceRun((1, 2, 3), call_s, decode_s=decode_s, decoded=None if decode_s is None else 3, label=config, prompt=prompt)

    runs = [run(TARGET_ONLY, 0, 1.0, 0.06), run(TARGET_ONLY, 1, 1.0, 0.06), run("ngram", 0, 0.8, 0.04), run("ngram", 1, 0.8, 0.04),
            run("polyplan", 0, 0.8, None), run("polyplan", 1, 0.8, None)]
    _, row, polyplan = race_rows([Contender(TARGET_ONLY), Contender("ngram", predicted_speedup=1.5),
                                  Contender("polyplan", predicted_speedup=1.5)], runs)
    assert row.speedup == pytest.approx(1.25) and row.decode_speedup == pytest.approx(1.5)
    assert row.error == pytest.approx(0.0)  # against whole calls it would read +20%
    assert polyplan.decode_speedup is None and polyplan.error == pytest.approx(0.2)  # no decode timing: whole calls
