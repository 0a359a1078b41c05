"""A plan per load: `polyplan export --concurrency` and `polyplan recommend --concurrency`
(`engines.load_plan`).

Fast tests, no model runs: the default (one request) prints exactly what the export and recommend
printed before; one llama-server command when one configuration is chosen over the whole range,
the ranges and a command per range when the choice changes, "off from N requests"; vLLM's
per-batch-size schedule written into its speculative config, with the version it is for and what
it was predicted from; the widths llama.cpp's prices measure for N requests (and the cache keyed by
them); and every bad input one line and exit 2. The rankings under load are fakes where a test is
about what is printed (the cost model under load has its own tests); one test runs the real one
through the CLI (at one request it is the export's own ranking); the widths refusal is the cost
model's own.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.engines import load_plan
from polyplan.engines.export import export_from_files, export_lines, export_to_json
from polyplan.formats.candidates import parse_candidates
from polyplan.formats.plan import write_plan
from polyplan.formats.profile import LatencyPoint, ModelProfile, Profile, ProfilerRecord, SamplingStats, write_profile
from polyplan.models.fingerprints import candidate_fingerprints
from polyplan.planner.llama_cpp.ranking import OFF
from polyplan.planner.llama_cpp.under_load import LoadedConfig, LoadRanking
from polyplan.planner.plan_builder import plan_of
from polyplan.planner.search import SearchSettings, rank_chains

pytestmark = pytest.mark.usefixtures("no_tie_check")

TIMES = {"target": 0.1, "draft": 0.01, "ngram": 0.0005}
ALPHAS = {"draft": 0.8, "ngram": 0.5}
SOURCES = {"llama.cpp": ("./target.gguf", "./draft.gguf"), "vllm": ("./target", "./draft")}


def _yaml(engine: str) -> dict:
    target, draft = SOURCES[engine]
    return {"candidates": [{"name": "target", "source": target, "target": True}, {"name": "draft", "source": draft},
                           {"name": "ngram", "derive": {"kind": "ngram", "max_n": 3, "min_n": 2}}]}


def _profile(ks=(1, 2, 4, 8)) -> Profile:
    models = tuple(ModelProfile(name, f"fp-{name}", tuple(LatencyPoint(64, k, seconds * (1 + 0.1 * (k - 1))) for k in ks))
                   for name, seconds in TIMES.items())
    profile = Profile(target="target", device="synthetic", models=models, pairs=())
    for name, alpha in ALPHAS.items():
        profile = profile.with_stats("target", name, "greedy", SamplingStats(alpha=alpha, engine_alpha=alpha))
    return profile


def _workspace(root: Path, engine: str, ks=(1, 2, 4, 8)) -> Path:
    """A plan of the synthetic profile (T(k) timed at `ks`) whose target and draft model `engine`
    can load (dummy files: nothing is loaded), with its profile and models.yaml recorded."""
    root.mkdir(parents=True, exist_ok=True)
    for source in SOURCES[engine]:
        path = root / source
        path.mkdir() if not path.suffix else path.write_bytes(b"GGUF-dummy-" + path.name.encode())
    yaml = _yaml(engine)
    candidates = parse_candidates(yaml, base_dir=root, origin="models.yaml")
    prints = candidate_fingerprints(candidates)
    profile = _profile(ks)
    profile = dataclasses.replace(profile, models=tuple(dataclasses.replace(m, fingerprint=prints[m.name]) for m in profile.models),
                                  profiler=ProfilerRecord(candidates={"path": str(root / "models.yaml"), "yaml": yaml}))
    write_profile(profile, root / "profile.json")
    result = rank_chains(profile, SearchSettings(sampling="greedy", max_levels=2, k_max=8))
    plan = root / "plan.json"
    write_plan(plan_of(result, profile_path=str(root / "profile.json"),
                       candidates={"path": str(root / "models.yaml"), "yaml": yaml}), plan)
    return plan


@pytest.fixture()
def llama_plan(tmp_path) -> Path:
    return _workspace(tmp_path / "llama", "llama.cpp")


@pytest.fixture()
def vllm_plan(tmp_path) -> Path:
    return _workspace(tmp_path / "vllm", "vllm")


def _invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _row(label: str, flags, clients: int, speedup: float, low: float, high: float) -> LoadedConfig:
    return LoadedConfig(label, tuple(flags), clients, speedup, (low - 0.05, high + 0.05), (low, high),
                        100.0 * speedup * clients, 100.0 * speedup)


def _off(clients: int) -> LoadedConfig:
    return LoadedConfig(OFF, (), clients, 1.0, None, None, 100.0 * clients, 100.0)


def _fake_rankings(monkeypatch, choices, unified=None):
    """Replace the ranking under load by `choices`: {clients: [rows]}, the first row chosen (the
    rows fastest first, off added last where absent), and `unified`: {clients: the best row with
    --kv-unified}, chosen instead where it pays and is faster, as the ranker chooses; the widths
    check passes."""

    def rank(options, request, clients, unified_too=True, **kwargs):
        out = []
        for count in clients:
            rows = list(choices[count])
            if all(row.label != OFF for row in rows):
                rows.append(_off(count))
            chosen = rows[0] if rows[0].low > 1.0 else next(row for row in rows if row.label == OFF)
            best = (unified or {}).get(count) if kwargs.get("unified", True) else None
            if best is not None and best.low > 1.0 and best.speedup > chosen.speedup:
                chosen = best
            out.append(LoadRanking(count, tuple(rows), chosen, 1.5 + 0.1 * count, 100.0 * count, unified=best))
        return tuple(out)

    monkeypatch.setattr(load_plan, "rank_under_load", rank)
    monkeypatch.setattr(load_plan, "check_widths", lambda *args, **kwargs: None)


NGRAM_FLAGS = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "4")
DRAFT_FLAGS = ("--spec-type", "draft-simple", "-md", "draft.gguf", "--spec-draft-n-max", "3")


def _server_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if "llama-server -m " in line]


# --------------------------------------------------------------------------- the default


def test_the_default_prints_what_the_export_printed_before(llama_plan):
    """No --concurrency, and --concurrency 1: the export's own lines and JSON, byte for byte."""
    export = export_from_files(llama_plan, "llama.cpp", measure=False)
    before = "\n".join(export_lines(export)) + "\n"
    for extra in ((), ("--concurrency", "1")):
        result = _invoke("export", "--plan", llama_plan, "--engine", "llama.cpp", "--profile-prices", *extra)
        assert result.exit_code == 0, result.output
        assert result.stdout == before
        payload = json.loads(_invoke("export", "--plan", llama_plan, "--engine", "llama.cpp", "--profile-prices", "--json",
                                     *extra).stdout)
        assert "under_load" not in payload and payload == json.loads(json.dumps(export_to_json(export)))
    assert "under load" not in before  # control: the section is what --concurrency adds


def test_recommend_by_default_prints_what_it_printed_before(llama_plan, tmp_path):
    profile = llama_plan.parent / "profile.json"
    plain = _invoke("recommend", "--profile", profile, "--max-levels", 2, "--out", tmp_path / "a.json")
    one = _invoke("recommend", "--profile", profile, "--max-levels", 2, "--out", tmp_path / "a.json", "--concurrency", "1")
    assert plain.exit_code == one.exit_code == 0, plain.output
    assert one.stdout == plain.stdout and "under load" not in plain.stdout


# --------------------------------------------------------------------------- llama-server


def test_one_command_when_one_configuration_is_chosen_over_the_whole_range(llama_plan, monkeypatch):
    _fake_rankings(monkeypatch, {count: [_row("ngram-simple size-n=3 K=4", NGRAM_FLAGS, count, 1.4 - 0.05 * count, 1.2, 1.5)]
                                 for count in (1, 2, 4)})
    result = _invoke("export", "--plan", llama_plan, "--engine", "llama.cpp", "--profile-prices", "--concurrency", "4,1,2")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "under load: llama-server with N requests in flight (-np N), N = 1, 2, 4" in out
    assert "one configuration for 1-4 requests: ngram-simple size-n=3 K=4" in out and "off from" not in out
    commands = _server_lines(out.split("under load:", 1)[1])
    assert len(commands) == 1, commands
    assert " ".join(NGRAM_FLAGS) in commands[0] and commands[0].endswith("-np 4 -c 16384")
    table = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit() and "tok/s" in line]
    assert [row[0] for row in table] == ["1", "2", "4"]
    assert table[1][5:7] == ["[1.20,", "1.50]"] and table[1][7] == "1.70x" and table[1][8:10] == ["200.0", "tok/s"]


def test_a_kv_unified_row_faster_than_the_choice_but_not_sure_to_pay_gets_its_own_table_and_command(llama_plan, monkeypatch):
    """At 4 requests the choice is off; one KV stream makes ngram-simple faster there, its
    interval reaching below 1 (so not chosen): the section says so with its own command (the flag
    in it); at 2 the unified row is no better and is not shown; the JSON carries each count's
    unified row."""
    unified = ("--kv-unified",)
    _fake_rankings(monkeypatch, {1: [_row("ngram-simple size-n=3 K=4", NGRAM_FLAGS, 1, 1.4, 1.2, 1.5)],
                                 2: [_row("ngram-simple size-n=3 K=4", NGRAM_FLAGS, 2, 1.2, 1.05, 1.3)],
                                 4: [_row("ngram-simple size-n=3 K=4", NGRAM_FLAGS, 4, 0.9, 0.8, 1.0)]},
                   {2: _row("ngram-simple size-n=3 K=4 --kv-unified", NGRAM_FLAGS + unified, 2, 1.15, 1.0, 1.3),
                    4: _row("ngram-simple size-n=3 K=4 --kv-unified", NGRAM_FLAGS + unified, 4, 1.25, 0.98, 1.4)})
    result = _invoke("export", "--plan", llama_plan, "--engine", "llama.cpp", "--profile-prices", "--concurrency", "1,2,4")
    assert result.exit_code == 0, result.output
    section = result.stdout.split("with --kv-unified", 1)[1]
    rows = [line.split() for line in section.splitlines() if line.strip()[:1].isdigit() and "tok/s" in line]
    assert [row[0] for row in rows] == ["4"] and "1.25x" in rows[0]
    commands = [line for line in section.splitlines() if line.strip().startswith("4 requests: llama-server")]
    assert len(commands) == 1 and "--kv-unified" in commands[0] and commands[0].endswith("-np 4 -c 16384")
    payload = json.loads(_invoke("export", "--plan", llama_plan, "--engine", "llama.cpp", "--profile-prices",
                                 "--concurrency", "1,2,4", "--json").stdout)
    kept = {ranking["clients"]: ranking["kv_unified"] for ranking in payload["under_load"]["rankings"]}
    assert kept[1] is None and kept[4]["flags"][-1] == "--kv-unified" and kept[4]["predicted_speedup"] == 1.25


def test_a_kv_unified_row_that_pays_and_is_fastest_is_the_choice_with_its_command(llama_plan, monkeypatch):
    """At 2 and 4 requests one KV stream makes ngram-simple the fastest that pays: it is the choice
    there, and since one slot has one KV stream anyway the same server serves 1 request too: one
    range 1-4 and one command with the flag, not said to be tied, no section aside; the JSON's
    choice at 1 is the split row (what was priced there), at 2 and 4 the unified one."""
    unified = ("--kv-unified",)
    label = "ngram-simple size-n=3 K=4 --kv-unified"
    _fake_rankings(monkeypatch, {1: [_row("ngram-simple size-n=3 K=4", NGRAM_FLAGS, 1, 1.4, 1.2, 1.5)],
                                 2: [_row("ngram-simple size-n=3 K=4", NGRAM_FLAGS, 2, 1.1, 0.95, 1.3)],
                                 4: [_row("ngram-simple size-n=3 K=4", NGRAM_FLAGS, 4, 0.9, 0.8, 1.0)]},
                   {2: _row(label, NGRAM_FLAGS + unified, 2, 1.3, 1.1, 1.5), 4: _row(label, NGRAM_FLAGS + unified, 4, 1.25, 1.1, 1.4)})
    result = _invoke("export", "--plan", llama_plan, "--engine", "llama.cpp", "--profile-prices", "--concurrency", "1,2,4")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "with --kv-unified (" not in out and "off from" not in out
    assert f"one configuration for 1-4 requests: {label}\n" in out
    commands = _server_lines(out.split("under load:", 1)[1])
    assert len(commands) == 1 and "--kv-unified" in commands[0] and commands[0].endswith("-np 4 -c 16384"), commands
    payload = json.loads(_invoke("export", "--plan", llama_plan, "--engine", "llama.cpp", "--profile-prices", "--concurrency",
                                 "1,2,4", "--json").stdout)["under_load"]
    assert [ranking["chosen"]["label"] for ranking in payload["rankings"]] == ["ngram-simple size-n=3 K=4", label, label]
    assert [(item["first"], item["last"]) for item in payload["ranges"]] == [(1, 4)]


def test_a_table_and_a_command_per_range_when_the_choice_changes(llama_plan, monkeypatch):
    """ngram-simple pays at 1 and 2 requests, nothing beyond its interval at 4: two ranges, two
    commands, and off from 4 requests; the JSON carries every ranking."""
    _fake_rankings(monkeypatch, {
        1: [_row("ngram-simple size-n=3 K=4", NGRAM_FLAGS, 1, 1.5, 1.3, 1.7)],
        2: [_row("ngram-simple size-n=3 K=4", NGRAM_FLAGS, 2, 1.2, 1.1, 1.3)],
        4: [_row("ngram-simple size-n=3 K=4", NGRAM_FLAGS, 4, 0.8, 0.7, 0.9)],
    })
    result = _invoke("export", "--plan", llama_plan, "--engine", "llama.cpp", "--profile-prices", "--concurrency", "1,2,4")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "off from 4 requests: speculation stops paying there" in out
    assert "the choice changes with load:" in out
    commands = _server_lines(out.split("under load:", 1)[1])
    assert len(commands) == 2, commands
    assert commands[0].strip().startswith("1-2 requests: llama-server") and " ".join(NGRAM_FLAGS) in commands[0]
    assert commands[0].endswith("-np 2 -c 8192")
    assert commands[1].strip().startswith("4 requests: llama-server") and "--spec-type" not in commands[1]
    assert commands[1].endswith("-np 4 -c 16384")
    payload = json.loads(_invoke("export", "--plan", llama_plan, "--engine", "llama.cpp", "--profile-prices", "--concurrency",
                                 "1,2,4", "--json").stdout)["under_load"]
    assert [ranking["clients"] for ranking in payload["rankings"]] == [1, 2, 4] and payload["off_from"] == 4
    assert [ranking["chosen"]["label"] for ranking in payload["rankings"]] == ["ngram-simple size-n=3 K=4"] * 2 + [OFF]
    assert all(len(ranking["configs"]) == 2 for ranking in payload["rankings"])  # every row, off included
    assert [(item["first"], item["last"]) for item in payload["ranges"]] == [(1, 2), (4, 4)]


def test_off_at_every_count_says_so(llama_plan, monkeypatch):
    _fake_rankings(monkeypatch, {count: [_row("ngram-simple size-n=3 K=4", NGRAM_FLAGS, count, 0.9, 0.8, 0.95)]
                                 for count in (2, 3)})
    result = _invoke("export", "--plan", llama_plan, "--engine", "llama.cpp", "--profile-prices", "--concurrency", "2,3")
    assert result.exit_code == 0, result.output
    assert "off from 2 requests: speculation pays at none of the counts asked" in result.stdout
    commands = _server_lines(result.stdout.split("under load:", 1)[1])
    assert len(commands) == 1 and "--spec-type" not in commands[0] and commands[0].endswith("-np 3 -c 12288")


def test_recommend_adds_the_section_under_load_priced_as_the_export(llama_plan, tmp_path, monkeypatch):
    from polyplan.engines.llama_cpp import prices

    monkeypatch.setattr(prices, "bindings_missing", lambda: "no bindings in this test")  # the profile's numbers price it
    _fake_rankings(monkeypatch, {count: [_row("ngram-simple size-n=3 K=4", NGRAM_FLAGS, count, 1.3, 1.1, 1.4)]
                                 for count in (1, 2)})
    result = _invoke("recommend", "--profile", llama_plan.parent / "profile.json", "--max-levels", 2, "--out", tmp_path / "plan.json",
                     "--concurrency", "1,2")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.index("best:") < out.index("serves one request at a time") < out.index("under load: llama-server")
    assert "priced from the profile" in out and "no bindings in this test" in out
    assert "one configuration for 1-2 requests" in out and out.rstrip().endswith(f"wrote {tmp_path / 'plan.json'}")
    payload = json.loads(_invoke("recommend", "--profile", llama_plan.parent / "profile.json", "--max-levels", 2, "--out", tmp_path / "plan.json",
                                 "--concurrency", "1,2", "--json").stdout)
    assert payload["under_load"]["clients"] == [1, 2]
    assert "under_load" not in json.loads((tmp_path / "plan.json").read_text())  # the plan file is one request's


def test_the_model_under_load_is_wired_to_the_exports_own_ranking(tmp_path):
    """The real ranking under load (no fake), on a profile timed to the widths 4 requests need:
    at one request its choice is the export's recommendation at the same speedup, and the
    aggregate tokens/s it prints are the target alone's times that speedup."""
    plan = _workspace(tmp_path / "llama", "llama.cpp", ks=(1, 2, 4, 8, 16, 32, 64))
    result = _invoke("export", "--plan", plan, "--engine", "llama.cpp", "--profile-prices", "--concurrency", "1,4", "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    first, last = payload["under_load"]["rankings"]
    assert first["chosen"]["label"] == payload["recommended"]["label"]
    assert first["chosen"]["predicted_speedup"] == pytest.approx(payload["recommended"]["predicted_speedup"], rel=1e-9)
    for ranking in (first, last):
        chosen = ranking["chosen"]
        assert chosen["tokens_per_s"] == pytest.approx(chosen["predicted_speedup"] * ranking["target_tokens_per_s"], rel=1e-6)
    assert last["clients"] == 4 and last["target_tokens_per_s"] > first["target_tokens_per_s"]


# --------------------------------------------------------------------------- vLLM


def test_vllm_gets_its_per_batch_size_schedule_and_says_what_it_is_for(vllm_plan, monkeypatch):
    """The export's drafter pays at 1 and 2 requests and not at 4: K up to batch size 3, 0 from 4
    (control: the single-request config has no schedule)."""
    export = export_from_files(vllm_plan, "vllm")
    option = export.chosen
    from polyplan.planner.llama_cpp.ranking import llama_cpp_spec_flags

    flags = llama_cpp_spec_flags(option.method, option.block_size, option.source, option.ngram_sizes)
    _fake_rankings(monkeypatch, {1: [_row("x", flags, 1, 1.6, 1.4, 1.8)], 2: [_row("x", flags, 2, 1.2, 1.05, 1.3)],
                                 4: [_row("x", flags, 4, 1.02, 0.9, 1.1)]})
    result = _invoke("export", "--plan", vllm_plan, "--engine", "vllm", "--concurrency", "1,2,4")
    assert result.exit_code == 0, result.output
    out = result.stdout
    k = option.block_size
    schedule = f'"num_speculative_tokens_per_batch_size": [[1, 3, {k}], [4, 4, 0]]'
    assert schedule in out and "written for vLLM 0.24.0 or newer" in out
    assert "polyplan does not model vLLM's own costs under load" in out and "the profile's T(k) (timed on synthetic)" in out
    assert f"off from 4 requests: {option.drafter} stops paying there" in out
    payload = json.loads(_invoke("export", "--plan", vllm_plan, "--engine", "vllm", "--concurrency", "1,2,4", "--json").stdout)
    assert payload["under_load"]["vllm"]["schedule"] == [[1, 3, k], [4, 4, 0]]
    assert payload["under_load"]["vllm"]["config"]["num_speculative_tokens"] == k
    assert payload["under_load"]["vllm"]["version"] == "0.24.0"
    assert "num_speculative_tokens_per_batch_size" not in payload["config"]  # one request: today's config


def test_a_vllm_schedule_starts_at_one_and_merges_equal_neighbours():
    steps = tuple(load_plan.VllmStep(count, None, k) for count, k in ((2, 5), (4, 5), (8, 0), (16, 0)))
    plan = load_plan.LoadPlan("vllm", (2, 4, 8, 16), (), (), 8, steps)
    assert load_plan.vllm_schedule(plan) == [[1, 7, 5], [8, 16, 0]]
    paying = dataclasses.replace(plan, vllm=steps[:2] + (load_plan.VllmStep(8, None, 3),))
    assert load_plan.vllm_schedule(paying) == [[1, 7, 5], [8, 8, 3]]


# --------------------------------------------------------------------------- widths


def test_llama_cpps_prices_measure_the_widths_n_requests_reach():
    from polyplan.engines.llama_cpp.prices import PRICE_KS, draft_widths, price_widths

    assert price_widths() == price_widths((1,)) == PRICE_KS  # one request: as before
    assert price_widths((1, 2, 4)) == PRICE_KS + (96, 128, 192, 256)
    assert price_widths((3,)) == PRICE_KS + (96, 128, 192)
    assert max(price_widths((8,))) == 8 * PRICE_KS[-1] and max(price_widths((2,), k_max=99)) == 200
    # a draft model: its draft step B rows wide, its second decode of the verified batches B·(K + 1)
    assert draft_widths((1,), k_max=8) == ((1, 2, 4, 8), tuple(range(1, 17)))
    assert draft_widths((1, 4), k_max=8) == ((1, 2, 4, 8), tuple(range(1, 17)) + (24, 32, 36))
    assert draft_widths((16,), k_max=3)[0] == (1, 2, 4, 8, 12, 16)


def test_an_export_that_times_the_target_times_its_draft_models_with_it():
    """`one_sitting`: the profile's llama.cpp entries are taken as they are only where the target's
    is; where the target is timed now (its T(k) lacks the widths under load, or it is not a
    llama.cpp member), every draft model is timed with it, never beside a profile of another day."""
    from polyplan.engines.llama_cpp.prices import one_sitting, price_widths

    both = {"target", "draft"}
    assert one_sitting(both, "target", 8, price_widths((1,))) == both  # one request: the profile's own entries
    assert one_sitting(both, "target", 256, price_widths((1, 4))) == both  # a profile timed as wide as 4 requests reach
    assert one_sitting(both, "target", 8, price_widths((1, 4))) == frozenset()  # the target timed now, its draft model too
    assert one_sitting({"draft"}, "target", 256, price_widths((1,))) == frozenset()  # a torch target: timed now, with it


def test_the_widths_are_in_the_prices_cache_key(tmp_path, monkeypatch):
    pytest.importorskip("llama_cpp")
    from polyplan.engines.llama_cpp import prices

    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "target.gguf"
    target.write_bytes(b"GGUF-dummy")
    timed = []

    def latency(path, threads, ks, fingerprint, key, log, **kwargs):
        timed.append(tuple(ks))
        return ModelProfile(path.stem, fingerprint, tuple(LatencyPoint(128, k, 0.01 * k) for k in ks), latency_fingerprint=key)

    source = prices.PriceSource(target, {}, 1, (), 8)
    for clients in ((1,), (1, 4), (1, 4), (1,)):
        priced = prices.prices_for(source, _profile(), "target", latency=latency, ks=prices.price_widths(clients))
    assert timed == [prices.PRICE_KS, prices.price_widths((1, 4))]  # each set of widths measured once, then kept
    assert max(point.k for point in priced.target.latency) == prices.PRICE_KS[-1]
    assert any("k = 1 … 256" in note for note in
               prices.prices_for(source, _profile(), "target", latency=latency, ks=prices.price_widths((4,))).notes)


def test_a_profile_without_the_widths_names_the_command_that_measures_them(llama_plan):
    """The profile's T(k) (timed to 8) cannot be re-timed by an export: one line, exit 2."""
    result = _invoke("export", "--plan", llama_plan, "--engine", "llama.cpp", "--profile-prices", "--concurrency", "1,2,4")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--latency-ks" in lines[0], result.stderr
    assert "polyplan profile --candidates" in lines[0] and result.stdout == ""
    assert lines[0].endswith("--latency-ks 1,2,3,4,6,8,12,16,20")  # 4 requests at the ranked rows' K up to 4
    wide = load_plan.profile_command("models.yaml", 200)
    assert "--latency-ks 1,2,3,4,6,8,12,16,24,32,48,64,96,128,192,200 (--latency-ks takes widths up to 128" in wide


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("text", ["0", "-2", "two", "", "1.5", "1,,2"])
@pytest.mark.parametrize("command", ["export", "recommend"])
def test_a_bad_concurrency_is_one_line_and_exit_2(llama_plan, tmp_path, command, text):
    if command == "export":
        args = ["export", "--plan", llama_plan, "--engine", "llama.cpp", "--profile-prices"]
    else:
        args = ["recommend", "--profile", llama_plan.parent / "profile.json", "--max-levels", 2, "--out", tmp_path / "p.json"]
    result = _invoke(*args, "--concurrency", text)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --concurrency"), result.stderr
    assert result.stdout == "" and not (tmp_path / "p.json").exists()  # refused before anything is planned


def test_concurrency_with_hf_is_one_line_and_exit_2(vllm_plan):
    result = _invoke("export", "--plan", vllm_plan, "--engine", "hf", "--concurrency", "1,2")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "serves one request at a time" in lines[0], result.stderr
