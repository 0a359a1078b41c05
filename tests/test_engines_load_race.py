"""llama-server under load (`bench peers --clients`): the load generator, its arithmetic, and the rows.

Fast tests run against a fake llama-server: a small Python script standing in for the binary,
started and stopped by `LlamaServer` as the real one is, answering `/health` and streamed
`/completion` requests with canned timings (and one that dies after a few requests). They check
that a load run is bounded (every client thread joined, every process gone), the aggregate
throughput's union of decode intervals by hand, that one client reduces to the race at one
request, a dying server's row, the judgement against a ranking under load, the split (the race's
answers are the target alone's; n-gram rows and draft models whose agreement was measured are
priced on them, nothing else), and bad input. The slow test races a real llama-server at `-np 2`
on a tiny GGUF.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.engines.llama_cpp import load_race
from polyplan.engines.llama_cpp.load_race import (SPEC_DEFAULT, LoadRequest, LoadRun, aggregate_tokens_per_s, load_groups,
                                                  load_race_lines, load_rows, race_under_load, request_tokens_per_s, run_load,
                                                  union_seconds)
from polyplan.engines.llama_cpp.race import CONTROL, TARGET_ONLY
from polyplan.engines.llama_cpp.race_memory import GB, ModelMemory
from polyplan.engines.llama_cpp.server import Completion, LlamaServer, slot_args, stream_completion
from polyplan.engines.race import Contender, RaceRun, race_rows
from polyplan.formats.errors import PolyplanError
from polyplan.formats.race import load_race_json

FAKE_SERVER = textwrap.dedent('''\
    """A stand-in for llama-server: /health, and /completion streamed with canned timings."""
    import json, os, sys, threading, time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    die_after = int(args[args.index("--fake-die-after") + 1]) if "--fake-die-after" in args else None
    step_s = float(args[args.index("--fake-step-ms") + 1]) / 1000 if "--fake-step-ms" in args else 0.002
    lock = threading.Lock()
    served = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"status": "ok"}')

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                served[0] += 1
                if die_after is not None and served[0] > die_after:
                    print(f"fake: out of memory after {die_after} requests", flush=True)
                    os._exit(1)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            prompt, n = body["prompt"], body["n_predict"]
            if not body.get("ignore_eos", True):  # its "end of sequence": half way
                n = max(1, n // 2)
            began = time.perf_counter()
            for i in range(n):
                time.sleep(step_s)
                chunk = {"content": "x", "tokens": [(sum(prompt) + i) % 97], "stop": False}
                self.wfile.write(("data: " + json.dumps(chunk) + "\\n\\n").encode())
                self.wfile.flush()
            decode_ms = 1000 * (time.perf_counter() - began)
            final = {"content": "", "tokens": [], "stop": True,
                     "timings": {"predicted_n": n, "predicted_ms": decode_ms, "prompt_ms": 1.0, "draft_n": 2 * n, "draft_n_accepted": n}}
            self.wfile.write(("data: " + json.dumps(final) + "\\n\\n").encode())
            self.wfile.flush()

    print("fake llama-server listening", flush=True)
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
''')


@pytest.fixture()
def fake_binary(tmp_path) -> Path:
    script = tmp_path / "fake-llama-server"
    script.write_text(f"#!{sys.executable}\n" + FAKE_SERVER, encoding="utf-8")
    script.chmod(0o755)
    return script


def fake_start(binary: Path, folder: Path, started: list):
    """`race_under_load`'s `start`: a fake server with N slots, each remembered (to check it is gone)."""
    def start(config: Contender, clients: int) -> LlamaServer:
        server = LlamaServer(binary, folder / "m.gguf", (*slot_args(clients, 64), *config.args),
                             folder / f"server-{clients}-{len(started)}.log", start_timeout_s=20)
        started.append(server)
        return server

    return start


def request(end: float, decode: float, decoded: int, prompt: int = 0, client: int = 0, tokens=(1,), first=0.1) -> LoadRequest:
    return LoadRequest(client, prompt, end - decode - 0.05, end, tuple(tokens), decoded, decode, first)


def client_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name.startswith("polyplan-load-client")]


# ----------------------------------------------------------------------------- the arithmetic


def test_the_aggregate_is_the_decoded_tokens_over_the_union_of_decode_intervals_by_hand():
    """[1, 3] and [2, 4] overlap into [1, 4] (3 s), [9, 10] adds 1 s: 25 tokens over 4 s. The
    per-request speed is each one's own rate, averaged."""
    requests = [request(3.0, 2.0, 10), request(4.0, 2.0, 10), request(10.0, 1.0, 5)]
    assert union_seconds([r.decode_interval for r in requests]) == pytest.approx(4.0)
    assert aggregate_tokens_per_s(requests) == pytest.approx(25 / 4.0)
    assert request_tokens_per_s(requests) == pytest.approx(5.0)
    assert union_seconds([(0.0, 5.0), (1.0, 2.0), (5.0, 6.0)]) == pytest.approx(6.0)  # nested and touching
    assert union_seconds([]) == 0.0 and math.isnan(aggregate_tokens_per_s([]))


def test_at_one_client_the_numbers_reduce_to_the_race_at_one_request():
    """One client sends its requests one after another: the union is the sum of the decode times,
    so the aggregate is the pooled decode rate; the paired per-request speedup is the decode
    speedup `engines.race.race_rows` gives on the same runs; the speedup is the ratio of the
    aggregates (what the replay predicts: total decode times)."""
    decode = {TARGET_ONLY: [0.50, 0.40, 0.55, 0.45], "ngram": [0.30, 0.35, 0.25, 0.40]}
    runs, race_runs = [], []
    for label, times in decode.items():
        for repeat in range(2):
            clock, requests = 0.0, []
            for prompt in range(2):
                seconds = times[2 * repeat + prompt]
                clock += 0.1 + seconds
                requests.append(LoadRequest(0, prompt, clock - seconds - 0.1, clock, (1, 2), 20, seconds, 0.05))
                race_runs.append(RaceRun((1, 2), seconds + 0.1, None, 0, 0, seconds, 20, label=label, prompt=prompt, repeat=repeat))
            runs.append(LoadRun(label, 1, repeat, tuple(requests)))
    configs = [Contender(TARGET_ONLY), Contender("ngram", ("--spec-type", "ngram-simple"))]
    rows, _ = load_rows(configs, runs, {}, (1,))
    row = rows[1]
    ours = race_rows(configs, race_runs)[1]
    assert row.request_speedup == pytest.approx(ours.decode_speedup)
    assert row.request_speedup_sd == pytest.approx(ours.decode_speedup_sd)
    pooled = [40 / sum(decode["ngram"][2 * r:2 * r + 2]) / (40 / sum(decode[TARGET_ONLY][2 * r:2 * r + 2])) for r in range(2)]
    assert row.speedup == pytest.approx(statistics.fmean(pooled)) and row.speedup_sd == pytest.approx(statistics.stdev(pooled))
    assert row.tokens_per_s == pytest.approx(40 / 0.65) and rows[0].tokens_per_s == pytest.approx(statistics.fmean([40 / 0.90, 40 / 1.00]))
    assert row.speedup != pytest.approx(ours.decode_speedup, abs=1e-6)  # control: the two means do differ here
    assert rows[0].speedup == pytest.approx(1.0) and rows[0].equal_outputs == 4
    # the row's timeline: every request of every repeat, its decode starting its server decode time before its end
    assert [(span.repeat, span.prompt) for span in row.timeline] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    first = row.timeline[0]
    assert (first.start_s, first.end_s, first.decoded) == pytest.approx((0.0, 0.40, 20))
    assert first.decode_start_s == pytest.approx(first.end_s - decode["ngram"][0]) and first.decode_start_s > first.start_s
    assert sum(span.end_s - span.decode_start_s for span in row.timeline) == pytest.approx(sum(decode["ngram"]))


# ----------------------------------------------------------------------------- the load generator


def test_a_load_run_shares_the_prompts_among_clients_ends_by_itself_and_joins_every_thread():
    """Prompt i goes to client i mod N; a client whose request fails stops (its later prompts are
    never sent) while the others finish; the run returns with no client thread left."""
    sent: dict[int, str] = {}
    lock = threading.Lock()

    def send(ids):
        with lock:
            sent[ids[0]] = threading.current_thread().name
        if ids[0] == 4:
            raise PolyplanError("llama-server did not answer (connection refused)")
        return Completion(tuple(ids), 3, 30.0, 1.0, 0, 0, 0.05, first_token_s=0.01)

    run = run_load(send, [[i] for i in range(10)], 3, label="x")
    assert not client_threads()
    assert {prompt: int(name.rsplit("-", 1)[1]) for prompt, name in sent.items() if prompt != 4} == \
        {prompt: prompt % 3 for prompt in sent if prompt != 4}
    assert 7 not in sent and {0, 1, 2, 3, 5, 6, 8, 9} <= set(sent)  # client 1 stopped at prompt 4; the others finished
    assert run.failure.startswith("client 2 of 3, prompt 4: llama-server did not answer")
    assert sorted(r.prompt for r in run.requests) == [0, 1, 2, 3, 5, 6, 8, 9]
    assert all(r.decode_s == pytest.approx(0.03) and r.first_token_s == 0.01 for r in run.requests)


def test_a_streamed_completion_times_its_first_token(fake_binary, tmp_path):
    with LlamaServer(fake_binary, tmp_path / "m.gguf", ("--fake-step-ms", "20"), tmp_path / "s.log", start_timeout_s=20) as server:
        done = server.stream([3, 4], 5)
        pid = server.process.pid
    assert done.token_ids == tuple((7 + i) % 97 for i in range(5)) and done.predicted_n == 5
    assert (done.draft_n, done.draft_accepted, done.prompt_ms) == (10, 5, 1.0)
    assert 0.015 < done.first_token_s < done.wall_s and done.predicted_ms > 80
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(PolyplanError, match="did not answer"):
        stream_completion(server.url, [1], 2, timeout_s=2)  # control: nothing listens any more


def test_a_server_that_dies_mid_run_gives_a_row_saying_why_and_the_others_complete(fake_binary, tmp_path):
    started: list[LlamaServer] = []
    dying = Contender("dies", ("--fake-die-after", "3"))
    configs = [Contender(TARGET_ONLY), Contender(CONTROL), dying]
    groups = {1: (tuple(configs),), 2: (tuple(configs),)}
    lines: list[str] = []
    counted: list[tuple[int, int]] = []
    runs, failures = race_under_load(groups, fake_start(fake_binary, tmp_path, started), [[i, i + 1] for i in range(4)],
                                     repeats=2, new_tokens=3, timeout_s=10, log=lines.append,
                                     on_run=lambda done, total, label: counted.append((done, total)))
    assert not client_threads()
    assert len(started) == 6 and all(server.process.poll() is not None for server in started)  # no process left
    for clients in (1, 2):
        assert "fake: out of memory after 3 requests" in failures[("dies", clients)]
        assert failures[("dies", clients)].startswith("stopped answering: client")
    rows, levels = load_rows(configs, runs, failures, (1, 2))
    for clients in (1, 2):
        by_label = {row.label: row for row in rows if row.clients == clients}
        assert by_label["dies"].failure is not None and "out of memory" in by_label["dies"].failure
        assert by_label[TARGET_ONLY].repeats == 2 and by_label[TARGET_ONLY].requests == 8
        assert by_label[CONTROL].repeats == 2 and math.isfinite(by_label[CONTROL].speedup)
        assert by_label[CONTROL].equal_outputs == 8 and by_label[CONTROL].first_token_s > 0
    assert counted[-1][0] == counted[-1][1]  # the count ends at its total, the dead server's runs taken out
    text = "\n".join(load_race_lines(race_of(rows, levels)))
    assert "out of memory after 3 requests" in text


def test_at_two_clients_the_slots_decode_together(fake_binary, tmp_path):
    """Two clients against a server that serves them in parallel: their decode intervals overlap,
    so the aggregate exceeds the per-request speed (control: one client, they are equal)."""
    started: list[LlamaServer] = []
    start = fake_start(fake_binary, tmp_path, started)
    out = {}
    for clients in (1, 2):
        with start(Contender(TARGET_ONLY, ("--fake-step-ms", "10")), clients) as server:
            out[clients] = run_load(lambda ids: server.stream(ids, 5, 10), [[i] for i in range(4)], clients)
    one, two = out[1], out[2]
    assert aggregate_tokens_per_s(two.requests) > 1.5 * request_tokens_per_s(two.requests)
    assert aggregate_tokens_per_s(one.requests) == pytest.approx(request_tokens_per_s(one.requests), rel=0.1)
    assert {r.client for r in two.requests} == {0, 1}


def test_a_race_under_load_that_stops_at_eos_asks_the_server_to_and_decodes_what_it_answers(fake_binary, tmp_path):
    """`race_under_load(ignore_eos=False)` sends each request with end of sequence honoured (the
    fake server then ends half way); by default every request decodes exactly its new tokens."""
    started: list[LlamaServer] = []
    groups = {2: ((Contender(TARGET_ONLY), Contender("a", ("--spec-type", "ngram-mod"))),)}
    decoded = {}
    for ignore in (True, False):
        runs, failures = race_under_load(groups, fake_start(fake_binary, tmp_path, started), [[1, 2], [3], [4, 5]], repeats=1,
                                         new_tokens=8, ignore_eos=ignore)
        assert not failures
        decoded[ignore] = {request.decoded for run in runs for request in run.requests}
    assert decoded == {True: {8}, False: {4}}
    assert all(server.process is None or server.process.poll() is not None for server in started)


# ----------------------------------------------------------------------------- predicted against measured


@dataclass(frozen=True)
class FakeLoaded:
    label: str
    flags: tuple[str, ...]
    clients: int
    speedup: float
    interval: tuple[float, float] | None
    workload_interval: tuple[float, float] | None = None
    tokens_per_s: float = 10.0
    request_tokens_per_s: float = 5.0
    note: str = ""
    overlap: float | None = None


@dataclass(frozen=True)
class FakeRanking:
    clients: int
    configs: tuple
    chosen: FakeLoaded
    limit: float
    target_tokens_per_s: float = 10.0
    unified: FakeLoaded | None = None


def measured_runs(speedups: dict[str, list[float]], clients: int) -> list[LoadRun]:
    """Runs whose aggregate speedups over the target alone are `speedups` (per repeat)."""
    runs = []
    for label, values in speedups.items():
        for repeat, value in enumerate(values):
            requests = tuple(LoadRequest(c, c, 0.0, 1.0, (5,), round(100 * value), 1.0, 0.2) for c in range(clients))
            runs.append(LoadRun(label, clients, repeat, requests))
    return runs


def race_of(rows, levels):
    from polyplan.formats.race import LoadRace

    return LoadRace("llama.cpp", tuple(sorted({row.clients for row in rows})), rows, levels, 4, 3, 2, 1, 64,
                    notes=(("prediction", "predicted: fake"),), about=(("logs", "/tmp/logs"),))


def test_each_row_is_judged_at_its_clients_and_the_plans_choice_against_the_fastest():
    from polyplan.planner.llama_cpp.ranking import OFF

    ngram = Contender("ngram-mod (defaults)", ("--spec-type", "ngram-mod"))
    configs = [Contender(TARGET_ONLY), Contender(CONTROL), ngram, Contender("ngram-simple (defaults)", ("--spec-type", "ngram-simple")),
               Contender(SPEC_DEFAULT, ("--spec-default",))]
    off = FakeLoaded(OFF, (), 2, 1.0, (1.0, 1.0))
    mod = FakeLoaded("ngram-mod (defaults)", ("--spec-type", "ngram-mod"), 2, 1.30, (1.20, 1.40))
    simple = FakeLoaded("ngram-simple (defaults)", ("--spec-type", "ngram-simple"), 2, 1.10, (1.05, 1.12))
    rankings = {1: FakeRanking(1, (mod, simple, off), mod, 3.0), 2: FakeRanking(2, (simple, mod, off), simple, 2.0)}
    runs = (measured_runs({TARGET_ONLY: [1, 1], CONTROL: [1.0, 1.02], "ngram-mod (defaults)": [1.30, 1.32],
                           "ngram-simple (defaults)": [1.10, 1.10], SPEC_DEFAULT: [1.30, 1.32]}, 1)
            + measured_runs({TARGET_ONLY: [1, 1], CONTROL: [1.0, 1.0], "ngram-mod (defaults)": [1.50, 1.50],
                             "ngram-simple (defaults)": [1.20, 1.20], SPEC_DEFAULT: [1.50, 1.50]}, 2))
    rows, levels = load_rows(configs, runs, {}, (1, 2), rankings)
    at = {(row.label, row.clients): row for row in rows}
    assert at[("ngram-mod (defaults)", 1)].verdict == "inside" and at[("ngram-mod (defaults)", 1)].chosen
    assert at[("ngram-mod (defaults)", 1)].server_spread == pytest.approx(0.01)  # the control's offset at 1 client
    assert at[("ngram-mod (defaults)", 2)].verdict == "outside" and not at[("ngram-mod (defaults)", 2)].chosen
    assert at[("ngram-simple (defaults)", 2)].verdict == "outside" and at[("ngram-simple (defaults)", 2)].chosen
    assert at[(SPEC_DEFAULT, 1)].predicted_speedup == 1.30 and not at[(SPEC_DEFAULT, 1)].chosen  # ranked as ngram-mod
    assert at[(TARGET_ONLY, 2)].predicted_speedup == 1.0 and at[(CONTROL, 2)].predicted_interval == (1.0, 1.0)
    first, second = levels
    assert (first.fastest, first.chosen, first.choice, first.limit) == ("ngram-mod (defaults)", "ngram-mod (defaults)", "fastest", 3.0)
    assert second.chosen == "ngram-simple (defaults)" and second.choice == "slower" and second.limit == 2.0
    text = "\n".join(load_race_lines(race_of(rows, levels)))
    assert "physical limit at 2 client(s) (a free, perfect drafter): 2.00x" in text
    assert f"{SPEC_DEFAULT}: 1.50x" in text and "slower than the fastest" in text
    payload = load_race_json(race_of(rows, levels))
    assert payload["format"] == "polyplan load race" and payload["levels"][1]["choice"] == "slower"
    assert {row["verdict"] for row in payload["rows"] if row["label"] == "ngram-mod (defaults)"} == {"inside", "outside"}


def test_a_rows_overlap_is_measured_from_its_timeline_beside_the_simulations(tmp_path):
    """Per repeat, the requests' decode seconds over the union of their decode intervals, the
    mean over repeats: [0, 2] and [1, 3] overlap 4/3, two identical spans 2, disjoint ones 1;
    no timeline, None. The table prints it with the simulation's in brackets; the JSON keeps both."""
    from polyplan.formats.race import LoadRow, RequestSpan, read_load_race_file
    from polyplan.planner.llama_cpp.ranking import OFF

    def span(repeat, began, ended):
        return RequestSpan(repeat, 0, 0, began - 0.1, began, ended, 10)

    row = LoadRow("x", 2, timeline=(span(0, 0.0, 2.0), span(0, 1.0, 3.0), span(1, 0.0, 1.0), span(1, 0.0, 1.0)))
    assert row.overlap == pytest.approx((4 / 3 + 2.0) / 2)
    assert LoadRow("x", 2, timeline=(span(0, 0.0, 1.0), span(0, 2.0, 3.0))).overlap == pytest.approx(1.0)
    assert LoadRow("x", 2).overlap is None
    configs = [Contender(TARGET_ONLY), Contender(CONTROL)]
    rankings = {2: FakeRanking(2, (FakeLoaded(OFF, (), 2, 1.0, (1.0, 1.0), overlap=1.9),),
                               FakeLoaded(OFF, (), 2, 1.0, (1.0, 1.0), overlap=1.9), 2.0)}
    rows, levels = load_rows(configs, measured_runs({TARGET_ONLY: [1, 1], CONTROL: [1.0, 1.0]}, 2), {}, (2,), rankings)
    target = next(row for row in rows if row.label == TARGET_ONLY)
    assert target.predicted_overlap == 1.9 and target.predicted_request_tokens_per_s == 5.0
    text = "\n".join(load_race_lines(race_of(rows, levels)))
    assert "overlap (pred)" in text and f"{target.overlap:.2f} (1.90)" in text
    path = tmp_path / "race.json"
    path.write_text(json.dumps(load_race_json(race_of(rows, levels))))
    again = next(row for row in read_load_race_file(path).rows if row.label == TARGET_ONLY)
    assert again.predicted_overlap == 1.9 and again.overlap == pytest.approx(target.overlap)


def test_the_races_answers_are_the_target_alones_at_its_fewest_clients_in_the_prompts_order():
    def run(label, clients, repeat, answers):
        return LoadRun(label, clients, repeat, tuple(LoadRequest(0, prompt, 0.0, 1.0, tokens, len(tokens), 1.0)
                                                     for prompt, tokens in answers.items()))

    runs = [run("ngram-mod (defaults)", 1, 0, {0: (9, 9), 1: (9, 9)}), run(TARGET_ONLY, 2, 0, {1: (7, 7), 0: (6, 6)}),
            run(TARGET_ONLY, 1, 1, {0: (5, 5)}), run(TARGET_ONLY, 1, 0, {1: (3, 4), 0: (1, 2)})]
    streams = load_race.load_streams(runs, [(10, 11), (12,), (13,)])
    assert [(s.prompt_tokens, s.ids) for s in streams] == [(2, (10, 11, 1, 2)), (1, (12, 3, 4))]  # the third: no answer


def test_the_split_prices_n_gram_rows_and_measured_draft_models_and_nothing_else():
    from polyplan.formats.race import LoadRow
    from polyplan.planner.llama_cpp.ranking import OFF

    mod = Contender("ngram-mod (defaults)", ("--spec-type", "ngram-mod"))
    measured = Contender("draft-simple a K=2", ("--spec-type", "draft-simple", "-md", "/m/a.gguf", "--spec-draft-n-max", "2"))
    unmeasured = Contender("draft-simple b K=2", ("--spec-type", "draft-simple", "-md", "/m/b.gguf", "--spec-draft-n-max", "2"))
    configs = [Contender(TARGET_ONLY), Contender(CONTROL), mod, measured, unmeasured]
    ranked = [FakeLoaded(OFF, (), 2, 1.0, None), FakeLoaded(mod.label, mod.args, 2, 0.8, None),
              FakeLoaded(measured.label, measured.args, 2, 0.6, None), FakeLoaded(unmeasured.label, unmeasured.args, 2, 0.7, None)]
    rankings = {2: FakeRanking(2, tuple(ranked), ranked[0], 2.0)}
    rows = [LoadRow(config.label, 2, speedup=0.5) for config in configs] + [LoadRow(mod.label, 4, speedup=0.5)]
    out = {(row.label, row.clients): row for row in load_race.priced_on_answers(rows, configs, rankings, frozenset({"/m/a.gguf"}))}
    assert out[(mod.label, 2)].race_priced == 0.8 and out[(mod.label, 2)].race_priced_error == pytest.approx(0.6)
    assert out[(measured.label, 2)].race_priced == 0.6
    assert out[(unmeasured.label, 2)].race_priced is None  # its agreement with the answers was not measured
    assert out[(TARGET_ONLY, 2)].race_priced is None and out[(CONTROL, 2)].race_priced is None
    assert out[(mod.label, 4)].race_priced is None  # no ranking at 4 clients on the answers
    judged = [dataclasses.replace(row, predicted_speedup=1.0) for row in out.values()]
    lines = load_race.split_lines(judged)
    assert len([line for line in lines if line.strip().startswith("2 ")]) == 2
    assert "mean |error| over these 2 rows: 100.0% priced on the profile's prompts, 40.0% on this race's answers" in lines[-1]
    assert load_race.split_lines([dataclasses.replace(row, race_priced=None) for row in judged]) == []


def test_a_choice_within_its_measured_interval_of_the_fastest_is_tied():
    configs = [Contender(TARGET_ONLY), Contender("a", ("--spec-type", "ngram-mod")), Contender("b", ("--spec-type", "ngram-simple"))]
    a = FakeLoaded("a", ("--spec-type", "ngram-mod"), 1, 1.2, (1.1, 1.3))
    b = FakeLoaded("b", ("--spec-type", "ngram-simple"), 1, 1.1, (1.0, 1.2))
    ranking = {1: FakeRanking(1, (a, b), a, 2.0)}
    noisy = measured_runs({TARGET_ONLY: [1, 1, 1], "a": [1.10, 1.30, 1.20], "b": [1.22, 1.22, 1.22]}, 1)
    assert load_rows(configs, noisy, {}, (1,), ranking)[1][0].choice == "tied"
    sharp = measured_runs({TARGET_ONLY: [1, 1, 1], "a": [1.15, 1.15, 1.15], "b": [1.22, 1.22, 1.22]}, 1)
    assert load_rows(configs, sharp, {}, (1,), ranking)[1][0].choice == "slower"  # control: no spread, no tie


def test_off_is_tied_with_a_fastest_within_the_controls_offset():
    """The plan's choice the target alone (off): its speedup is 1 with no spread of its own, so
    a configuration faster by less than the control's offset is a tie, not "slower"."""
    from polyplan.planner.llama_cpp.ranking import OFF

    configs = [Contender(TARGET_ONLY), Contender(CONTROL), Contender("a", ("--spec-type", "ngram-mod"))]
    off = FakeLoaded(OFF, (), 2, 1.0, (1.0, 1.0))
    a = FakeLoaded("a", ("--spec-type", "ngram-mod"), 2, 0.9, (0.8, 1.0))
    ranking = {2: FakeRanking(2, (off, a), off, 1.5)}
    near = measured_runs({TARGET_ONLY: [1, 1], CONTROL: [0.96, 0.96], "a": [1.02, 1.02]}, 2)
    assert load_rows(configs, near, {}, (2,), ranking)[1][0].choice == "tied"
    far = measured_runs({TARGET_ONLY: [1, 1], CONTROL: [0.96, 0.96], "a": [1.08, 1.08]}, 2)
    assert load_rows(configs, far, {}, (2,), ranking)[1][0].choice == "slower"  # control: beyond the offset


def test_a_fastest_row_whose_repeats_disagree_is_tied_with_the_choice():
    """The target alone chosen, a row measured 1.20x on average but 0.75x and 1.65x in its two
    repeats: its own interval reaches 1, so it is not called faster; the same mean with repeats
    that agree (negative control) is."""
    from polyplan.planner.llama_cpp.ranking import OFF

    configs = [Contender(TARGET_ONLY), Contender(CONTROL), Contender("a", ("--spec-type", "ngram-mod"))]
    off = FakeLoaded(OFF, (), 4, 1.0, (1.0, 1.0))
    a = FakeLoaded("a", ("--spec-type", "ngram-mod"), 4, 0.9, (0.8, 1.0))
    ranking = {4: FakeRanking(4, (off, a), off, 1.5)}
    spread = measured_runs({TARGET_ONLY: [1, 1], CONTROL: [1.0, 1.0], "a": [0.75, 1.65]}, 4)
    assert load_rows(configs, spread, {}, (4,), ranking)[1][0].choice == "tied"
    agreed = measured_runs({TARGET_ONLY: [1, 1], CONTROL: [1.0, 1.0], "a": [1.19, 1.21]}, 4)
    assert load_rows(configs, agreed, {}, (4,), ranking)[1][0].choice == "slower"


def test_the_race_under_load_races_every_ranked_configuration_at_each_clients_and_leaves_nothing(fake_binary, tmp_path):
    """`race_load`: the raced configurations and a ranked one none of them runs, each at 1 and 2
    clients on fake servers of N slots, a row per (configuration, clients), the plan's choice
    judged at each; a configuration too large for memory is a row saying so."""
    from polyplan.planner.llama_cpp.ranking import OFF

    started: list[LlamaServer] = []
    contexts: list[int] = []

    def start(config: Contender, clients: int, context: int, name: str) -> LlamaServer:
        contexts.append(context)
        server = LlamaServer(fake_binary, tmp_path / "m.gguf", (*slot_args(clients, context), *config.args),
                             tmp_path / f"server-{name}.log", start_timeout_s=20)
        started.append(server)
        return server

    raced = [Contender(TARGET_ONLY), Contender(CONTROL), Contender("big", ("-md", "/big.gguf"))]
    ranked = FakeLoaded("ranked only", ("--spec-type", "ngram-map-k"), 1, 1.1, (0.9, 1.3))
    off = FakeLoaded(OFF, (), 1, 1.0, (1.0, 1.0))
    rankings = {n: FakeRanking(n, (ranked, off), ranked, 2.0) for n in (1, 2)}
    target = ModelMemory("/t.gguf", 1000, 10)
    big = ModelMemory("/big.gguf", 10**12, 10)
    rows, levels, context, _ = load_race.race_load(raced, rankings, [[1, 2, 3], [4, 5]], start, (1, 2), target, mapped=True,
                                                repeats=2, new_tokens=3, timeout_s=10, available=10**11,
                                                memory=lambda path: big)
    assert context == 256 and set(contexts) == {context}  # 3 + 3 + 64 tokens, padded as llama.cpp pads
    assert [(row.label, row.clients) for row in rows] == [(label, n) for n in (1, 2)
                                                          for label in (TARGET_ONLY, CONTROL, "big", "ranked only")]
    assert all(server.process.poll() is not None for server in started) and len(started) == 6 and not client_threads()
    assert "-np 2 -c 512" in (tmp_path / "server-2-3.log").read_text().splitlines()[0]
    at = {(row.label, row.clients): row for row in rows}
    assert at[("big", 2)].failure.startswith("not started: 2 slots need")
    assert at[("ranked only", 2)].chosen and at[("ranked only", 2)].requests == 4 and at[("ranked only", 2)].repeats == 2
    assert at[("ranked only", 1)].verdict in ("inside", "within noise", "outside")
    assert [level.chosen for level in levels] == ["ranked only", "ranked only"] and levels[1].limit == 2.0


def test_a_kv_unified_row_races_from_two_clients_against_its_own_prediction(fake_binary, tmp_path):
    """The plan's best with --kv-unified at 2 clients is raced there (its server started with the
    flag) and judged against that prediction; at one client it has no row and no server."""
    from polyplan.planner.llama_cpp.ranking import OFF

    started: list[tuple[str, int]] = []

    def start(config: Contender, clients: int, context: int, name: str) -> LlamaServer:
        started.append((config.label, clients))
        return LlamaServer(fake_binary, tmp_path / "m.gguf", (*slot_args(clients, context), *config.args),
                           tmp_path / f"server-{name}.log", start_timeout_s=20)

    mod = FakeLoaded("ngram-mod (defaults)", ("--spec-type", "ngram-mod"), 1, 1.1, (0.9, 1.3))
    unified = FakeLoaded("ngram-mod (defaults) --kv-unified", ("--spec-type", "ngram-mod", "--kv-unified"), 2, 1.2, (1.0, 1.4))
    off = FakeLoaded(OFF, (), 1, 1.0, (1.0, 1.0))
    rankings = {1: FakeRanking(1, (mod, off), mod, 2.0), 2: FakeRanking(2, (mod, off), mod, 2.0, unified=unified)}
    raced = [Contender(TARGET_ONLY), Contender(CONTROL), Contender("ngram-mod (defaults)", ("--spec-type", "ngram-mod"))]
    rows, _, _, _ = load_race.race_load(raced, rankings, [[1, 2, 3], [4, 5]], start, (1, 2), ModelMemory("/t.gguf", 1000, 10),
                                        mapped=True, repeats=1, new_tokens=3, timeout_s=10, available=10**11)
    at = {(row.label, row.clients): row for row in rows}
    assert (unified.label, 1) not in at and (unified.label, 1) not in started
    assert (unified.label, 2) in started and at[(unified.label, 2)].predicted_speedup == 1.2
    assert at[(unified.label, 2)].failure is None and at[(unified.label, 2)].requests == 2
    assert "--kv-unified" in (tmp_path / "server-2-3.log").read_text().splitlines()[0]


def test_configs_narrows_the_race_but_keeps_the_target_its_control_and_each_choice():
    """`only_configs`: the labels holding a word, plus the target alone, the control and the
    plan's choice at each count (never "off"); a word naming nothing is one error listing the labels."""
    from polyplan.planner.llama_cpp.ranking import OFF

    configs = [Contender(TARGET_ONLY), Contender(CONTROL), Contender("draft-simple d K=2"), Contender("ngram-mod (defaults)"),
               Contender("ngram-simple (defaults)"), Contender("ngram-cache (defaults)")]
    mod = FakeLoaded("ngram-mod (defaults)", ("--spec-type", "ngram-mod"), 1, 1.1, (0.9, 1.3))
    off = FakeLoaded(OFF, (), 2, 1.0, (1.0, 1.0))
    rankings = {1: FakeRanking(1, (mod, off), mod, 2.0), 2: FakeRanking(2, (off, mod), off, 1.5)}
    assert load_race.only_configs(configs, None, rankings) == configs
    kept = [config.label for config in load_race.only_configs(configs, ["draft-simple", "cache"], rankings)]
    assert kept == [TARGET_ONLY, CONTROL, "draft-simple d K=2", "ngram-mod (defaults)", "ngram-cache (defaults)"]
    with pytest.raises(PolyplanError, match=r"'eagle' names no configuration.*ngram-simple \(defaults\)"):
        load_race.only_configs(configs, ["draft", "eagle"], rankings)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("args", [["--configs", "draft"], ["--clients", "1,2", "--configs", " , "]])
def test_bad_configs_are_one_line_and_exit_2(args, tmp_path):
    result = CliRunner().invoke(app, ["bench", "peers", "--engine", "llama.cpp", "--plan", str(tmp_path / "p.json"), *args])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "--configs" in result.output, result.output


@pytest.mark.parametrize("flag", ["--stop-at-eos", "--past-eos"])
def test_where_requests_end_without_clients_is_one_line_and_exit_2(tmp_path, flag):
    result = CliRunner().invoke(app, ["bench", "peers", "--engine", "llama.cpp", "--plan", str(tmp_path / "p.json"), flag])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and flag in result.output, result.output


@pytest.mark.parametrize("value", ["0", "two", "1,,2", "-1", ""])
def test_bad_clients_are_one_line_and_exit_2(value, tmp_path):
    result = CliRunner().invoke(app, ["bench", "peers", "--engine", "llama.cpp", "--plan", str(tmp_path / "p.json"),
                                      "--clients", value])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "--clients" in result.output


def test_the_race_says_which_prompts_the_plan_is_for_and_how_to_re_price_for_its_own(tmp_path):
    """The plan re-priced for the race's own file: said so; priced on another file: both named and
    the re-pricing command given with the race's file and counts; a race on built-in prompts:
    said that the profile never saw them; a plan whose profile cannot be read is for built-in
    prompts."""
    from types import SimpleNamespace

    from polyplan.formats.plan import ProfileRecord
    from polyplan.profiler.prompt_sets import PromptSet

    mine, other = tmp_path / "mine.jsonl", tmp_path / "other.jsonl"
    plan = SimpleNamespace(profile=ProfileRecord(path=str(tmp_path / "profile.json"), prompt_file=str(mine)))
    sent = PromptSet((), str(mine), False)
    assert load_race.prompts_note(plan, sent, (1, 2)) == "prompts: the plan's numbers are for this race's own prompts (mine.jsonl)"
    note = load_race.prompts_note(plan, PromptSet((), str(other), False), (1, 2, 4))
    assert "for mine.jsonl, this race sends other.jsonl" in note
    assert note.endswith(f"polyplan recommend --profile {tmp_path / 'profile.json'} --prompts {other} --concurrency 1,2,4 "
                         "(the target's streams and the agreement runs only)")
    built_in = load_race.prompts_note(plan, PromptSet((), "built-in prompts", True), (2,))
    assert "built-in validation prompts, which the profile never saw" in built_in
    unread = SimpleNamespace(profile=ProfileRecord(path=str(tmp_path / "missing.json")))
    assert "for built-in prompts, this race sends mine.jsonl" in load_race.prompts_note(unread, sent, (2,))


def test_a_race_on_the_first_prompts_of_a_longer_file_is_on_the_plans_own_prompts(tmp_path):
    """A plan re-priced for the first 2 prompts of a file, raced with `--max-prompts 2` on the whole
    file: the same prompts, in order, so no re-pricing command; the first 3 are not the plan's."""
    import json
    from types import SimpleNamespace

    from polyplan.formats.plan import ProfileRecord
    from polyplan.profiler.prompt_sets import validation_prompt_set

    texts = ["def add(a, b):", "class Stack:", "import os"]
    whole, first = tmp_path / "whole.jsonl", tmp_path / "first2.jsonl"
    whole.write_text("".join(json.dumps({"prompt": text}) + "\n" for text in texts), encoding="utf-8")
    first.write_text("".join(json.dumps({"prompt": text}) + "\n" for text in texts[:2]), encoding="utf-8")
    plan = SimpleNamespace(profile=ProfileRecord(path=str(tmp_path / "profile.json"), prompt_file=str(first)))
    note = load_race.prompts_note(plan, validation_prompt_set(whole, max_prompts=2), (1, 2))
    assert note == "prompts: the plan's numbers are for this race's own prompts (whole.jsonl, the same 2 as first2.jsonl)"
    assert "re-price the plan first" in load_race.prompts_note(plan, validation_prompt_set(whole, max_prompts=3), (1, 2))


def test_clients_on_the_hf_engine_is_one_line():
    result = CliRunner().invoke(app, ["bench", "peers", "--clients", "1,2"])
    assert result.exit_code == 2 and "--engine llama.cpp" in result.output and result.output.count("\n") == 1


def test_more_slots_than_memory_allows_is_refused_with_the_estimate():
    target = ModelMemory("/t.gguf", int(1 * GB), 100_000)  # 100 kB of KV cache a token
    configs = [Contender(TARGET_ONLY), Contender(CONTROL), Contender("draft", ("-md", "/d.gguf"))]
    draft = ModelMemory("/d.gguf", int(0.5 * GB), 50_000)
    # a slot: 4096 x 100 kB = 0.41 GB of the target's KV (0.20 GB of the draft's), each model 0.27 GB more, weights mapped once
    groups, too_large = load_groups(configs, target, (1, 2), 4096, int(6 * GB), mapped=True, memory=lambda path: draft)
    assert [len(groups[n]) for n in (1, 2)] == [1, 1] and not too_large  # 4.0 and 5.4 GB
    with pytest.raises(PolyplanError) as caught:  # the target alone at 16 slots: 7.8 GB
        load_groups(configs, target, (1, 16), 4096, int(6 * GB), mapped=True, memory=lambda path: draft)
    message = str(caught.value)
    assert message.startswith("--clients 16: ") and "16 slots x 0.410 GB" in message and "at most 11 fit" in message
    groups, too_large = load_groups(configs, target, (4,), 4096, int(5 * GB), mapped=True, memory=lambda path: draft)
    assert [config.label for group in groups[4] for config in group] == [TARGET_ONLY, CONTROL]
    assert too_large[("draft", 4)].startswith("not started: 4 slots need")


# ----------------------------------------------------------------------------- the real build


@pytest.mark.slow
def test_a_real_server_with_two_slots_races_under_load_and_is_gone_afterwards(tmp_path):
    from polyplan.engines.llama_cpp import build as llama_cpp_build
    from tiny_gguf import write_tiny_gguf

    build = llama_cpp_build.find_build()
    if build is None:
        pytest.skip(f"llama.cpp is not built; run `{llama_cpp_build.BUILD_COMMAND}`")
    model = tmp_path / "tiny.gguf"
    write_tiny_gguf(model)
    started: list[LlamaServer] = []

    def start(config: Contender, clients: int) -> LlamaServer:
        server = LlamaServer(build.server, model, ("-t", "1", *slot_args(clients, 512), "--no-webui", *config.args),
                             tmp_path / f"server-{clients}-{len(started)}.log")
        started.append(server)
        return server

    configs = (Contender(TARGET_ONLY), Contender("ngram-simple (defaults)", ("--spec-type", "ngram-simple")))
    prompts = [[5, 9, 33, 70, 101], [7, 7, 7, 7], [12, 40, 3], [99, 98, 97, 96, 95]]
    runs, failures = race_under_load({2: (configs,)}, start, prompts, repeats=2, new_tokens=12, timeout_s=60)
    assert not failures and not client_threads()
    assert all(server.process.poll() is not None for server in started)
    rows, levels = load_rows(configs, runs, failures, (2,))
    target, ngram = rows
    assert target.requests == 8 and target.decoded == 8 * 12 and target.speedup == pytest.approx(1.0)
    assert ngram.requests == 8 and ngram.decoded == 8 * 12  # (greedy answers may part where batches change the numerics)
    assert target.first_token_s > 0 and math.isfinite(ngram.speedup)
    assert {request.client for run in runs for request in run.requests} == {0, 1}
    log = (tmp_path / "server-2-0.log").read_text()
    assert "-np 2 -c 1024" in log.splitlines()[0] and "n_ctx_seq (512)" in log  # -c is divided among the slots


@pytest.mark.slow
def test_bench_peers_clients_races_a_tiny_plan_end_to_end(tmp_path, monkeypatch, short_calibrations):
    """The command itself on a tiny profiled GGUF pair (its own cache; the pinned build; priced
    from the profile, as a plan whose target llama.cpp's own calibration cannot run is): a row
    per configuration and clients, a level per clients; then more slots than memory allows is one
    line and exit 2, before any server starts."""
    import json

    import yaml

    from polyplan.engines.llama_cpp import build as llama_cpp_build
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices
    from polyplan.engines.llama_cpp import race_memory
    from polyplan.formats.profile import read_profile
    from polyplan.planner.plan_builder import planned_from_profile
    from tiny_gguf import TARGET_LAYERS, write_tiny_gguf

    pytest.importorskip("llama_cpp")
    build = llama_cpp_build.find_build()
    if build is None:
        pytest.skip(f"llama.cpp is not built; run `{llama_cpp_build.BUILD_COMMAND}`")
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(llama_cpp_build, "find_build", lambda *a: build)
    monkeypatch.setattr(llama_cpp_prices, "export_prices", lambda *a, **k: None)  # priced from the profile: no calibration
    # the target clearly costlier than the 1-layer drafter: the profiler pairs a drafter only with a
    # costlier verifier, and 2 layers against 1 are within the timing noise of so small a model
    write_tiny_gguf(tmp_path / "target.gguf", layers=TARGET_LAYERS)
    write_tiny_gguf(tmp_path / "small.gguf", seed=1, layers=1)
    lines = [json.dumps({"turns": [" ".join(f"w{(7 * i + j) % 60 + 4}" for j in range(20))]}) for i in range(3)]
    (tmp_path / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    models = tmp_path / "models.yaml"
    models.write_text("candidates:\n  - {name: target, source: ./target.gguf, target: true, engine: llama.cpp}\n"
                      "  - {name: small, source: ./small.gguf, engine: llama.cpp}\n"
                      "  - {name: ngram, derive: {kind: ngram-simple, size_n: 2}}\n")
    done = CliRunner().invoke(app, ["profile", "--candidates", str(models), "--prompts", str(tmp_path / "prompts.jsonl"),
                                    "--out", str(tmp_path / "profile.json"), "--threads", "1", "--temperatures", "0",
                                    "--no-decoded", "--new-tokens", "12", "--latency-ks", "1,2,3,4,6,8,12,16,18", "--context-lengths", "8,16",
                                    "--repeats", "3", "--warmup", "1", "--noise-budget", "0"])
    assert done.exit_code == 0, done.output
    plan = tmp_path / "plan.json"
    planned_from_profile(read_profile(tmp_path / "profile.json"), plan, profile_path=str(tmp_path / "profile.json"),
                         candidates={"path": str(models), "yaml": yaml.safe_load(models.read_text()), "device": None},
                         k_max=8)  # 2 slots at K up to 8 read widths up to 18, all profiled
    command = ["bench", "peers", "--engine", "llama.cpp", "--plan", str(plan), "--prompts", str(tmp_path / "prompts.jsonl"),
               "--max-prompts", "2", "--repeats", "1", "--new-tokens", "8", "--threads", "1"]
    result = CliRunner().invoke(app, [*command, "--clients", "1,2", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["format"] == "polyplan load race" and payload["clients"] == [1, 2]
    labels = {row["label"] for row in payload["rows"]}
    assert {TARGET_ONLY, CONTROL, SPEC_DEFAULT} <= labels
    unified = {label for label in labels if label.endswith("--kv-unified")}  # one slot has nothing to split: raced at 2 only
    assert all(sum(row["label"] == label for row in payload["rows"]) == 2 for label in labels - unified)
    assert all([row["clients"] for row in payload["rows"] if row["label"] == label] == [2] for label in unified)
    target = [row for row in payload["rows"] if row["label"] == TARGET_ONLY]
    assert all(row["failure"] is None and row["requests"] == 2 and row["speedup"] == pytest.approx(1.0) for row in target)
    assert [level["clients"] for level in payload["levels"]] == [1, 2]
    assert payload["notes"]["prediction"].startswith("predicted: the plan under load")  # every width 2 slots read was profiled
    assert payload["notes"]["prediction"].endswith("in the order it sent them")  # the race's own order (ReplayWorkload.sent)
    assert all(row["predicted_speedup"] == 1.0 for row in target) and all(level["chosen"] for level in payload["levels"])
    assert all(level["limit"] >= 1.0 and level["spec_default"] == SPEC_DEFAULT for level in payload["levels"])
    assert sum(row["chosen"] for row in payload["rows"]) == 2  # one choice at each clients
    # the split: every n-gram row and the draft model's fixed-K rows priced again on the race's answers (the tiny
    # drafter's agreement with them measured for real), at each clients; the target alone and its control not
    priced = {(row["label"], row["clients"]) for row in payload["rows"] if row["race_priced"] is not None}
    assert {(SPEC_DEFAULT, 1), (SPEC_DEFAULT, 2)} <= priced
    assert any(label.startswith("draft-simple small K=") for label, _ in priced)
    assert not any(label in (TARGET_ONLY, CONTROL) for label, _ in priced)
    from polyplan.formats.race import read_load_race_file

    (tmp_path / "race.json").write_text(result.stdout)
    text = "\n".join(load_race_lines(read_load_race_file(tmp_path / "race.json")))
    assert "the predictions priced on this race's answers" in text and "mean |error| over these" in text
    monkeypatch.setattr(race_memory, "available_memory", lambda *a: int(0.3 * GB))
    refused = CliRunner().invoke(app, [*command, "--clients", "64"])
    assert refused.exit_code == 2 and "--clients 64:" in refused.output and "ask fewer clients" in refused.output, refused.output


def test_a_sigterm_to_the_command_stops_its_llama_server(fake_binary, tmp_path):
    """`kill` of a running polyplan command unwinds it as Ctrl-C does (`cli.app.main`): the
    server it started goes with it instead of outliving it."""
    import signal
    import subprocess

    script = textwrap.dedent(f'''\
        import time
        from pathlib import Path
        from polyplan.cli import app
        from polyplan.engines.llama_cpp.server import LlamaServer

        def serve():
            with LlamaServer(Path({str(fake_binary)!r}), Path({str(tmp_path / "m.gguf")!r}), (), Path({str(tmp_path / "s.log")!r}),
                             start_timeout_s=20) as server:
                print(server.process.pid, flush=True)
                time.sleep(60)

        app.app = serve
        app.main()
        ''')
    command = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(command.stdout.readline())
        command.send_signal(signal.SIGTERM)
        assert command.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        command.kill()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _alive(server_pid):
        time.sleep(0.1)
    assert not _alive(server_pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
