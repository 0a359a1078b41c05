"""A llama.cpp export priced with llama.cpp's own numbers (`engines.llama_cpp.prices`,
`planner.llama_cpp.server_loop`).

Fast tests: the server-loop fit recovers known costs from synthetic requests (and from a fake
server's answers through the calibration's own bookkeeping, with a negative control: costs
left out of the timings fit to zero); the replay with the server's costs reduces to the bindings'
T(k) without them and charges them with; the measurements are cached by the file's
fingerprint (a second export measures nothing, a changed file is measured again); the server's
calibration is kept by machine, files, threads, flags and build (other prompts or a re-timed
profile reuse it) and its fit subtracts the T(k) timed in its own sitting, on polyplan's fixed
prompts in the target's own vocabulary; a plan whose
target is a torch member of a GGUF is measured for that GGUF and says so, one that already is a
llama.cpp member reuses the profile and says so; without the bindings, or without a built
server, one line says what priced the export instead; a plan whose GGUF changed since
profiling is one line and exit 2 naming the file. At several slots: a slot's per-round cost
is the one-slot cost where not calibrated and linear between calibrated counts, is recovered from
a fake server at -np 4 that answers only when all four requests are in flight (T(k) timed between
rounds), and is calibrated once per count asked and kept. The slow tests calibrate against the
real pinned server on a tiny GGUF, at one slot and at two.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from polyplan.cli.app import app
from polyplan.engines.llama_cpp.server import Completion
from polyplan.formats.errors import PolyplanError
from polyplan.formats.profile import TargetStream
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.planner.llama_cpp.kv_cells import UnifiedSteps, cell_cost
from polyplan.planner.llama_cpp.ngram_rules import NGramSimpleRule, replay_request, replay_session
from polyplan.planner.llama_cpp.server_loop import (DRAFT_MODEL, NGRAM, NO_SERVER_LOOP, TARGET_ALONE, ServerLoop, ServerRequest,
                                                fit_server_loop)
from polyplan.planner.llama_cpp.ranking import session_speedup


pytestmark = pytest.mark.usefixtures("no_tie_check")

STEP = LatencyCurve((1, 2, 4, 8, 16, 64), (0.010, 0.011, 0.013, 0.017, 0.025, 0.080))
DRAFT_STEP = LatencyCurve((1, 2, 4, 8), (0.002, 0.007, 0.008, 0.010))  # llama.cpp's jump from one token to two
KNOWN = ServerLoop(per_request_s=0.004, per_round_s=0.002, per_row_s=0.0003, per_ngram_round_s=0.0005,
                   per_draft_round_s=0.001, per_draft_pass_s=0.0025, per_draft_prompt_token_s=0.0008, draft_reeval=0.7)


def request_seconds(loop: ServerLoop, step: Callable[[int], float], request: ServerRequest,
                    draft_step: Callable[[int], float] | None = None) -> float:
    """`request`'s decode seconds as `loop` charges them (its decode_s is not read): its rounds'
    T(L + 1) and the server's costs (`draft_step`: the draft model's T_d(k), for a draft model's);
    the model `fit_server_loop` inverts."""
    prefill = loop.per_draft_prompt_token_s * request.prompt_tokens if request.kind == DRAFT_MODEL else 0.0
    passes = request.round_passes()
    return loop.per_request_s + prefill + sum(step(item + 1) + loop.round_s(item, request.kind, count, draft_step)
                                              for item, count in zip(request.drafted, passes))


def _timed(loop: ServerLoop, kind: str, widths: tuple[int, ...], prompt: int = 0, passes=None, step=STEP,
           draft_step=DRAFT_STEP) -> ServerRequest:
    """A request of `kind` whose decode time is what `loop` charges for its rounds (on `step`)."""
    request = ServerRequest(kind, widths, 0.0, prompt, passes)
    return dataclasses.replace(request, decode_s=request_seconds(loop, step, request, draft_step))


def _synthetic(loop: ServerLoop, step=STEP, draft_step=DRAFT_STEP) -> list[ServerRequest]:
    requests = [_timed(loop, TARGET_ALONE, (0,) * (n - 1), step=step, draft_step=draft_step) for n in (8, 24, 40)]
    for widths in ((0, 3, 0, 8, 1), (2, 2, 0, 0, 0, 0, 5), (8, 8, 8), (0, 1, 0, 1, 0, 6, 0, 0)):
        requests.append(_timed(loop, NGRAM, widths, step=step, draft_step=draft_step))
    for widths, prompt in (((2,) * 10, 30), ((6,) * 4 + (3,), 120), ((2,) * 20, 64), ((6,) * 7, 30), ((6,) * 3, 200)):
        requests.append(_timed(loop, DRAFT_MODEL, widths, prompt, step=step, draft_step=draft_step))
    for widths, prompt in (((0, 1, 0, 0, 1, 1, 0), 40), ((1, 1, 0, 1), 90)):  # n-max 1 behind a confidence stop
        requests.append(_timed(loop, DRAFT_MODEL, widths, prompt, (1,) * len(widths), step=step, draft_step=draft_step))
    return requests


def test_the_fit_recovers_known_server_costs():
    fitted = fit_server_loop(_synthetic(KNOWN), STEP, DRAFT_STEP)
    for name in ("per_request_s", "per_round_s", "per_row_s", "per_ngram_round_s", "per_draft_round_s", "per_draft_pass_s",
                 "per_draft_prompt_token_s", "draft_reeval"):
        assert getattr(fitted, name) == pytest.approx(getattr(KNOWN, name), abs=1e-9), name


def test_a_round_that_drafted_nothing_costs_one_pass_and_the_batch_again_not_a_drafted_token():
    """An empty round (a confidence stop before the first token) pays the draft model's per-round
    cost, one pass and the draft model's second decode of the one-token batch; a round that drafted
    one token at a fixed K pays one pass too, and its two-token batch again."""
    empty = KNOWN.round_s(0, DRAFT_MODEL, 1, DRAFT_STEP)
    assert empty == pytest.approx(KNOWN.per_round_s + KNOWN.per_draft_round_s + KNOWN.per_draft_pass_s + 0.7 * DRAFT_STEP(1))
    one = KNOWN.round_s(1, DRAFT_MODEL, None, DRAFT_STEP)
    assert one - empty == pytest.approx(KNOWN.per_row_s + 0.7 * (DRAFT_STEP(2) - DRAFT_STEP(1)))
    stopped = KNOWN.round_s(2, DRAFT_MODEL, 3, DRAFT_STEP)  # two drafted, the third pass stopped
    assert stopped - KNOWN.round_s(2, DRAFT_MODEL, None, DRAFT_STEP) == pytest.approx(KNOWN.per_draft_pass_s)
    with pytest.raises(PolyplanError, match="T_d"):
        KNOWN.round_s(1, DRAFT_MODEL)


def test_negative_control_costs_the_timings_do_not_hold_fit_to_zero_and_no_draft_model_gives_none():
    plain = dataclasses.replace(KNOWN, per_ngram_round_s=0.0, per_row_s=0.0)
    fitted = fit_server_loop([r for r in _synthetic(plain) if r.kind != DRAFT_MODEL], STEP)
    assert fitted.per_ngram_round_s == pytest.approx(0.0, abs=1e-9) and fitted.per_row_s == pytest.approx(0.0, abs=1e-9)
    assert fitted.per_round_s == pytest.approx(KNOWN.per_round_s) and fitted.per_draft_pass_s is None and fitted.draft_reeval is None
    flat = dataclasses.replace(KNOWN, draft_reeval=0.0)
    assert fit_server_loop(_synthetic(flat), STEP, DRAFT_STEP).draft_reeval == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(PolyplanError, match="no target-alone request"):
        fit_server_loop([r for r in _synthetic(KNOWN) if r.kind == NGRAM], STEP)
    with pytest.raises(PolyplanError, match="draft model's T_d"):
        fit_server_loop(_synthetic(KNOWN), STEP)


def test_the_replay_with_no_server_costs_is_the_bindings_and_with_them_charges_each_round():
    stream = TargetStream(8, (1, 2, 3, 4, 5, 6, 7, 4) + (5, 6, 7, 4) * 15)
    session = replay_session([stream], lambda: NGramSimpleRule(2, 6))
    rounds = [item for request in session.requests for item in request]
    tokens = sum(item.accepted + 1 for item in rounds)
    bindings = STEP(1) * tokens / sum(STEP(item.drafted + 1) for item in rounds)
    assert session_speedup(session, STEP) == pytest.approx(bindings)
    assert session_speedup(session, STEP, NO_SERVER_LOOP) == pytest.approx(bindings)
    loop = ServerLoop(per_request_s=0.0, per_round_s=0.0, per_ngram_round_s=0.004)
    slower = STEP(1) * tokens / sum(STEP(item.drafted + 1) + 0.004 for item in rounds)
    assert session_speedup(session, STEP, loop) == pytest.approx(slower) and slower < bindings


# --------------------------------------------------------------------------- calibration against a fake server


class FakeServer:
    """Answers as llama-server would with `KNOWN` costs: greedy output = the stream's
    continuation; an n-gram server's drafts by the replayed rule, a draft model's K a round
    with one accepted."""

    def __init__(self, args, streams, traced=True, events=None):
        self.args, self.streams, self.traced, self.events = tuple(args), streams, traced, events

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def complete(self, prompt, n):
        if self.events is not None:
            self.events.append("request")
        stream = next(s for s in self.streams if list(s.ids[:s.prompt_tokens]) == list(prompt))
        output = stream.ids[stream.prompt_tokens:stream.prompt_tokens + n]
        if "ngram-simple" in self.args:
            rounds = replay_request(NGramSimpleRule(2, 8), stream, n)
            widths, kind, passes = tuple(r.drafted for r in rounds), NGRAM, None
            drafted, accepted = sum(widths), sum(r.accepted for r in rounds)
        elif "draft-simple" in self.args:
            k = int(self.args[self.args.index("--spec-draft-n-max") + 1])
            stop = float(self.args[self.args.index("--spec-draft-p-min") + 1]) > 0
            widths, made, accepted = [], 1, 0
            while made < n:
                room = n - made - 1
                width = min(k, room) if not stop else min(len(widths) % 2, room)  # behind the stop: every other round empty
                widths.append(width)
                gain = min(1, width)
                accepted += gain
                made += gain + 1
            widths, kind, drafted = tuple(widths), DRAFT_MODEL, sum(widths)
            passes = (1,) * len(widths) if stop else None
            traced = tuple((width, min(1, width)) for width in widths if width)  # as a traced server logs them
        else:
            widths, kind, drafted, accepted, passes = (0,) * (n - 1), TARGET_ALONE, 0, 0, None
        seconds = request_seconds(KNOWN, STEP, ServerRequest(kind, widths, 0.0, len(prompt), passes), DRAFT_STEP)
        rounds = traced if kind == DRAFT_MODEL and self.traced else None
        return Completion(tuple(output), n, 1000 * seconds, 1.0, drafted, accepted, seconds, rounds)


def _streams():
    return (TargetStream(6, (9, 1, 2, 3, 1, 2) + (3, 1, 2, 4) * 12),
            TargetStream(5, (7, 7, 8, 9, 7) + (8, 9, 7, 5, 5) * 10),
            TargetStream(4, (3, 4, 5, 6) + tuple(range(20, 70))))


def _entry(name: str, curve: LatencyCurve, stamp: str = "key"):
    """A profile entry whose T(k) is `curve` at its widths."""
    from polyplan.formats.profile import LatencyPoint, ModelProfile

    return ModelProfile(name, "fp-" + name, tuple(LatencyPoint(128, k, s) for k, s in zip(curve.ks, curve.seconds)),
                        latency_fingerprint=stamp)


def test_a_calibration_on_a_fake_server_recovers_its_costs(tmp_path, cache):
    """Through the calibration's own bookkeeping; the target's T(k) and the draft model's
    last-row T_d(k) are timed in the same sitting, with the servers up: after their untimed first
    requests, before the first timed request and after each round of them."""
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices

    streams, events = _streams(), []
    target, small = tmp_path / "t.gguf", tmp_path / "small.gguf"
    target.write_bytes(b"not read")
    small.write_bytes(b"not read either")

    def sitting(path, threads, ks, fingerprint, key, log=None, last_row_only=False):
        events.append("T_d(k)" if path == small else "T(k)")
        assert last_row_only == (path == small)  # the server's draft passes and re-decodes ask for the last row only
        return _entry(path.stem, LatencyCurve(tuple(ks), tuple((DRAFT_STEP if path == small else STEP)(k) for k in ks)))

    calibration = llama_cpp_prices.calibrate_server(None, target, 1, {"small": str(small)}, (), streams=streams,
                                                    latency=sitting,
                                                    server_factory=lambda args, log: FakeServer(args, streams, events=events))
    requests = calibration.requests
    assert events.count("T_d(k)") == 3 and len(calibration.draft_steps) == 3
    assert all(events[i + 1] == "T(k)" for i, event in enumerate(events) if event == "T_d(k)")  # each beside the target's
    assert calibration.draft_step().ks == tuple(range(1, 8))  # one pass, and every T_d(L + 1) up to K = 6 re-decodes
    events = [event for event in events if event != "T_d(k)"]
    servers = 6  # the target alone, ngram-simple, the draft model at three K and behind the stop
    assert events[:servers] == ["request"] * servers and events[servers] == "T(k)" and events[-1] == "T(k)"
    assert events.count("T(k)") == 3 and len(calibration.target_steps) == 3 and calibration.streams == streams
    rounds = "".join("T" if event == "T(k)" else "r" for event in events[servers:])
    assert rounds.strip("T").count("T") == 1  # one timing between the two rounds of requests
    assert calibration.step().ks == tuple(range(1, 10))  # every T(L + 1) the rounds paid: ngram-simple drafts up to 8
    kinds = {request.kind for request in requests}
    assert kinds == {TARGET_ALONE, NGRAM, DRAFT_MODEL} and any(sum(r.drafted) for r in requests if r.kind == NGRAM)
    stopped = [r for r in requests if r.passes is not None]
    assert stopped and all(r.passes == (1,) * len(r.drafted) and 0 in r.drafted for r in stopped)  # the empty-round probe
    fitted = fit_server_loop(requests, calibration.step(), calibration.draft_step())
    for name in ("per_request_s", "per_round_s", "per_draft_round_s", "per_draft_pass_s", "per_draft_prompt_token_s", "draft_reeval"):
        assert getattr(fitted, name) == pytest.approx(getattr(KNOWN, name), rel=1e-6), name


SITTING = LatencyCurve(tuple(range(1, 10)), tuple(0.004 + 0.0003 * (k - 1) for k in range(1, 10)))  # not the profile's T(k)


class _Profile:
    """What `prices_for` reads of a profile whose target is already llama.cpp's: the target's
    entry (T(k) = `base` + 0.1 ms a row, stamped `stamp`) and no greedy streams."""

    def __init__(self, base: float, stamp: str):
        self.entry = _entry("target", LatencyCurve((1, 2, 64), (base, base + 0.0001, base + 0.0063)), stamp)
        self.acceptance_runs = {}

    def model(self, name):
        assert name == "target"
        return self.entry


def _sitting_calibration(calls, draft_step, draft_pace: float | None = None):
    """A fake `calibrate_server`: `KNOWN`'s costs on `SITTING` (timed before the requests 0.5 ms
    faster and after them 0.5 ms slower, so the sitting's mean is `SITTING`), each call recorded.
    `draft_pace`: the sitting also times the draft model, `draft_step()` times this (each timing
    read 5 % either side of it), and `KNOWN`'s draft-model seconds are the sitting's; None: it
    times no draft model, and the requests read `draft_step()`."""
    from polyplan.engines.llama_cpp.prices import ServerCalibration

    def calibrate(build, target, threads, drafters, server_flags, log):
        calls.append((build.version, target, threads, dict(drafters), tuple(server_flags)))
        shifted = [LatencyCurve(SITTING.ks, tuple(s + d for s in SITTING.seconds)) for d in (-0.0005, 0.0005)]
        if draft_pace is None:
            return ServerCalibration(tuple(_synthetic(KNOWN, SITTING, draft_step())), tuple(_entry("target", c) for c in shifted))
        curve = draft_step()
        own = LatencyCurve(curve.ks, tuple(draft_pace * value for value in curve.seconds))
        timed = [LatencyCurve(own.ks, tuple(f * value for value in own.seconds)) for f in (0.95, 1.05)]
        return ServerCalibration(tuple(_synthetic(KNOWN, SITTING, own)), tuple(_entry("target", c) for c in shifted), (),
                                 tuple(_entry("small", c) for c in timed))
    return calibrate


def _gguf_pair(folder: Path) -> tuple[Path, Path]:
    """A target and a drafter file the fakes never load (named as `_fixed_latency_entry` prices them)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "target.gguf").write_bytes(b"target " + folder.name.encode())
    (folder / "small.gguf").write_bytes(b"drafter " + folder.name.encode())
    return folder / "target.gguf", folder / "small.gguf"


def test_the_calibration_is_kept_per_machine_file_threads_flags_and_build_not_per_prompts_or_profile(cache, tmp_path, monkeypatch):
    """A second `prices_for` with other user prompts, and a third with the target's T(k) re-timed
    in the profile, calibrate nothing (and a draft model of the same file under another name);
    another processor, target file, draft model file, thread count, server flags or build
    calibrates again, each once."""
    import polyplan.profiler.processor as processor
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices
    from polyplan.engines.llama_cpp.build import LlamaCppBuild
    from polyplan.planner.exact.latency import curve_from_profile

    calls = []
    target, small = _gguf_pair(tmp_path / "a")
    build = LlamaCppBuild(tmp_path, "b1")
    source = llama_cpp_prices.PriceSource(target, {"small": small}, 1, ((1, 2, 3),), 8)
    draft = lambda: curve_from_profile(_fixed_latency_entry(small, 1, llama_cpp_prices.REEVAL_KS, "fp", "key"))  # noqa: E731
    measure = dict(latency=_fixed_latency_entry, decode_streams=lambda path, threads, prompts, new, log: _streams(),
                   calibrate=_sitting_calibration(calls, draft))

    def price(changed=source, profile=_Profile(0.002, "profiled"), reuse=frozenset(), on=build):
        return llama_cpp_prices.prices_for(changed, profile, "target", reuse=reuse, build=on, **measure)

    first = price()
    assert len(calls) == 1 and first.loop is not None
    price(dataclasses.replace(source, prompts=((7, 8, 9, 10),), new_tokens=16))  # another prompt file
    retimed = price(profile=_Profile(0.003, "re-timed"), reuse={"target"})  # the profile's T(k) timed again
    price(dataclasses.replace(source, drafters={"renamed": small}))
    assert len(calls) == 1  # nothing calibrated again
    assert retimed.loop == first.loop and retimed.target.latency_fingerprint == "re-timed"  # the prediction's T(k) is the profile's
    other_target, other_small = _gguf_pair(tmp_path / "b")
    elsewhere = dataclasses.replace(processor.this_processor(), name="another processor")
    with monkeypatch.context() as patch:
        patch.setattr(processor, "this_processor", lambda *a, **k: elsewhere)
        price()
    assert len(calls) == 2
    for changed, on in ((dataclasses.replace(source, target=other_target), build),
                        (dataclasses.replace(source, drafters={"small": other_small}), build),
                        (dataclasses.replace(source, threads=2), build),
                        (dataclasses.replace(source, server_flags=("--no-repack",)), build),
                        (source, LlamaCppBuild(tmp_path, "b2"))):
        before = len(calls)
        price(changed, on=on)
        assert len(calls) == before + 1, changed
    assert [call[2] for call in calls].count(2) == 1 and calls[-1][0] == "b2" and calls[-2][4] == ("--no-repack",)
    price()
    assert len(calls) == 7  # the first key still kept


def _no_answers(build, source, slots, log):
    """A built server's answers, none (the tests that use it price the server's loop only)."""
    return ()


def test_the_fit_subtracts_the_t_k_timed_in_the_calibrations_sitting(cache, tmp_path):
    """The requests cost `KNOWN` on the sitting's T(k) (`SITTING`, 2 ms above the profile's):
    the export's loop is the fit on the sitting's mean and recovers `KNOWN`; the same requests
    fitted on the prices' T(k) (negative control) put the sitting's extra 2 ms a pass into the
    server's per-round cost. The prediction's T(k) stays the prices'."""
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices
    from polyplan.engines.llama_cpp.build import LlamaCppBuild
    from polyplan.planner.exact.latency import curve_from_profile

    calls = []
    target, small = _gguf_pair(tmp_path / "a")
    draft = lambda: curve_from_profile(_fixed_latency_entry(small, 1, llama_cpp_prices.REEVAL_KS, "fp", "key"))  # noqa: E731
    source = llama_cpp_prices.PriceSource(target, {"small": small}, 1, ((1, 2, 3),), 8)
    prices = llama_cpp_prices.prices_for(source, _Profile(0.002, "profiled"), "target", reuse={"target"},
                                         build=LlamaCppBuild(tmp_path, "b1"), latency=_fixed_latency_entry,
                                         calibrate=_sitting_calibration(calls, draft), server_streams=_no_answers)
    for name in ("per_request_s", "per_round_s", "per_row_s", "per_ngram_round_s", "per_draft_round_s", "per_draft_pass_s",
                 "per_draft_prompt_token_s", "draft_reeval"):
        assert getattr(prices.loop, name) == pytest.approx(getattr(KNOWN, name), abs=1e-9), name
    step = curve_from_profile(prices.target)
    assert step(1) == pytest.approx(0.002) and prices.target.latency_fingerprint == "profiled"
    requests = _synthetic(KNOWN, SITTING, draft())
    control = fit_server_loop(requests, step, draft())
    assert control.per_round_s > KNOWN.per_round_s + 0.001  # the profile's faster T(k) leaves the sitting's pace to the server
    notes = "\n".join(prices.notes)
    assert "subtracts the target's T(k) timed in its own sitting: T(1) 3.50 ms before its requests, 4.50 ms after" in notes
    assert "(the prices' T(1): 2.00 ms)" in notes


def test_a_draft_models_passes_are_fitted_at_the_sittings_pace_and_priced_at_the_prices(cache, tmp_path):
    """The sitting's draft model ran 25 % slower than in the prices' sitting, and the requests
    cost `KNOWN` on its own T_d(k): the fit reads them against the sitting's T_d(k) and recovers
    `KNOWN`'s factor on the re-decode, and the draft model's pass and prefill are priced at the
    prices' pace, `KNOWN`'s over 1.25; every cost of the target's stays `KNOWN`'s. Negative control:
    fitted on the prices' T_d(k), as before the sitting timed the draft model, the re-decode's
    factor takes the sitting's slower pace."""
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices
    from polyplan.engines.llama_cpp.build import LlamaCppBuild
    from polyplan.planner.exact.latency import curve_from_profile

    target, small = _gguf_pair(tmp_path / "a")
    draft = lambda: curve_from_profile(_fixed_latency_entry(small, 1, llama_cpp_prices.REEVAL_KS, "fp", "key"))  # noqa: E731
    source = llama_cpp_prices.PriceSource(target, {"small": small}, 1, ((1, 2, 3),), 8)
    prices = llama_cpp_prices.prices_for(source, _Profile(0.002, "profiled"), "target", reuse={"target"},
                                         build=LlamaCppBuild(tmp_path, "b1"), latency=_fixed_latency_entry,
                                         calibrate=_sitting_calibration([], draft, draft_pace=1.25), server_streams=_no_answers)
    for name in ("per_request_s", "per_round_s", "per_row_s", "per_ngram_round_s", "per_draft_round_s", "draft_reeval"):
        assert getattr(prices.loop, name) == pytest.approx(getattr(KNOWN, name), abs=1e-9), name
    assert prices.loop.per_draft_pass_s == pytest.approx(KNOWN.per_draft_pass_s / 1.25)
    assert prices.loop.per_draft_prompt_token_s == pytest.approx(KNOWN.per_draft_prompt_token_s / 1.25)
    assert prices.draft_ratio == pytest.approx(KNOWN.per_draft_pass_s / (1.25 * draft()(1)))  # a pass over the sitting's T_d(1)
    assert "priced at the prices' pace (-20.0%)" in "\n".join(prices.notes)
    own = LatencyCurve(draft().ks, tuple(1.25 * value for value in draft().seconds))
    control = fit_server_loop(_synthetic(KNOWN, SITTING, own), SITTING, draft())
    assert control.draft_reeval > KNOWN.draft_reeval * 1.2


def test_the_calibration_prompts_ship_with_polyplan_and_read_in_the_targets_own_vocabulary(tmp_path):
    """The fixed prompts are package data (pyproject's globs hold the file), of three lengths,
    tokenized by llama.cpp with the file's own vocabulary (its HF tokenizer reads the ids back as the text), and
    repeat themselves (an n-gram drafter finds drafts in the target's continuation of them)."""
    import fnmatch
    import tomllib

    from polyplan.engines.llama_cpp import prices as llama_cpp_prices

    texts = llama_cpp_prices.calibration_texts()
    assert len(texts) == 3 and len(texts[0]) < len(texts[1]) < len(texts[2])
    root = Path(__file__).resolve().parents[1]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["polyplan"]
    assert any(fnmatch.fnmatch(f"data/{llama_cpp_prices.CALIBRATION_PROMPTS}", glob) for glob in globs)
    assert (root / "polyplan" / "data" / llama_cpp_prices.CALIBRATION_PROMPTS).is_file()
    pytest.importorskip("llama_cpp")
    from tokenizers import Tokenizer

    from polyplan.models.builtin import weights_root
    from tiny_gguf import write_tiny_gguf

    write_tiny_gguf(tmp_path / "t.gguf")
    hf = Tokenizer.from_file(str(next(weights_root().rglob("tokenizer.json"))))
    ids = [llama_cpp_prices.gguf_tokens(tmp_path / "t.gguf", text) for text in texts]
    assert [hf.decode(list(tokens)) for tokens in ids] == list(texts)  # the file's vocabulary, read back to the text
    assert [len(tokens) for tokens in ids] == pytest.approx([len(hf.encode(text).ids) for text in texts], rel=0.1)
    streams = llama_cpp_prices.calibration_streams(tmp_path / "t.gguf", 1)
    assert [stream.ids[:stream.prompt_tokens] for stream in streams] == ids
    assert all(0 < len(stream.ids) - stream.prompt_tokens <= 24 for stream in streams)
    for prompt in ids[1:]:  # the prompt's second half, read as if generated, drafts and accepts by ngram-simple
        rounds = replay_request(NGramSimpleRule(2, 8), TargetStream(len(prompt) // 2, prompt), len(prompt) - len(prompt) // 2)
        assert sum(r.accepted for r in rounds) > len(prompt) // 10
    with pytest.raises(PolyplanError, match="cannot load the vocabulary"):
        (tmp_path / "bad.gguf").write_bytes(b"not a gguf")
        llama_cpp_prices.gguf_tokens(tmp_path / "bad.gguf", "text")


# --------------------------------------------------------------------------- the export, on tiny GGUFs


TINY = ["--threads", "1", "--temperatures", "0", "--no-decoded", "--new-tokens", "12", "--latency-ks", "1,2",
        "--context-lengths", "8,16", "--repeats", "3", "--warmup", "1", "--noise-budget", "0"]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, short_calibrations):
    """Tiny GGUF target and drafter, an ngram-simple drafter, and a plan of each kind of target:
    a llama.cpp member (`plan-llama.json`) and a torch member of the same GGUF (`plan-torch.json`)."""
    pytest.importorskip("llama_cpp")
    import yaml

    from polyplan.formats.profile import read_profile
    from polyplan.planner.plan_builder import planned_from_profile
    from tiny_gguf import TARGET_LAYERS, write_tiny_gguf

    root = tmp_path_factory.mktemp("prices")
    # the target clearly costlier than the 1-layer drafter: the profiler pairs a drafter only with a
    # costlier verifier, and 2 layers against 1 are within the timing noise of so small a model
    write_tiny_gguf(root / "target.gguf", layers=TARGET_LAYERS)
    write_tiny_gguf(root / "small.gguf", seed=1, layers=1)
    lines = [json.dumps({"turns": [" ".join(f"w{(7 * i + j) % 60 + 4}" for j in range(20))]}) for i in range(3)]
    (root / "prompts.jsonl").write_text("\n".join(lines) + "\n")
    cache = root / "cache"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("POLYPLAN_CACHE_DIR", str(cache))
        for kind, engine in (("llama", ", engine: llama.cpp"), ("torch", "")):
            yaml_path = root / f"models-{kind}.yaml"
            yaml_path.write_text("candidates:\n"
                                 f"  - {{name: target, source: ./target.gguf, target: true{engine}}}\n"
                                 "  - {name: small, source: ./small.gguf, engine: llama.cpp}\n"
                                 "  - {name: ngram, derive: {kind: ngram-simple, size_n: 2}}\n")
            done = CliRunner().invoke(app, ["profile", "--candidates", str(yaml_path), "--prompts", str(root / "prompts.jsonl"),
                                            "--out", str(root / f"p-{kind}.json"), *TINY])
            assert done.exit_code == 0, done.output
            planned_from_profile(read_profile(root / f"p-{kind}.json"), root / f"plan-{kind}.json",
                                 profile_path=str(root / f"p-{kind}.json"),
                                 candidates={"path": str(yaml_path), "yaml": yaml.safe_load(yaml_path.read_text()), "device": None})
    return root


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _export(plan: Path, **options):
    from polyplan.engines.export import export_from_files

    return export_from_files(plan, "llama.cpp", **options)


def test_a_torch_target_of_a_gguf_is_measured_once_for_that_file_and_says_so(workspace, cache, monkeypatch):
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices

    calls = []
    real_latency, real_streams = llama_cpp_prices.measure_latency_entry, llama_cpp_prices.decode_greedy_streams
    monkeypatch.setattr(llama_cpp_prices, "measure_latency_entry", lambda *a, **k: calls.append(("latency", a[0].name)) or real_latency(*a, **k))
    monkeypatch.setattr(llama_cpp_prices, "decode_greedy_streams", lambda *a, **k: calls.append(("streams", a[0].name)) or real_streams(*a, **k))
    export = _export(workspace / "plan-torch.json")
    notes = "\n".join(export.ranking_notes)
    assert "the plan's target 'target' runs on torch" in notes and f"measured for {workspace / 'target.gguf'}" in notes
    assert "priced by llama.cpp: T(k), k = 1 … 64, measured through the bindings on target.gguf, 1 thread" in notes
    assert "the target's 3 greedy streams decoded through the bindings on target.gguf, 1 thread" in notes  # no build here
    assert "not calibrated (llama.cpp's server is not built" in notes  # the fallback line: no build in this cache
    # the drafter, a profiled llama.cpp member, is timed with the target all the same: one sitting (`one_sitting`)
    assert sorted(calls) == [("latency", "small.gguf"), ("latency", "target.gguf"), ("streams", "target.gguf")]
    assert "draft models' T_d(k) measured through the bindings at 1 thread(s): small" in notes
    calls.clear()
    again = _export(workspace / "plan-torch.json")
    assert calls == [] and [c.speedup for c in again.ranking] == [c.speedup for c in export.ranking]  # kept: nothing measured
    assert len(list(llama_cpp_prices.prices_folder().glob("*.json"))) == 4  # T(k), T_d(k), the streams, their near-ties


def test_a_changed_file_is_measured_again(workspace, cache, monkeypatch, tmp_path):
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices
    from polyplan.formats.profile import read_profile
    from polyplan.models.file_fingerprints import file_fingerprint
    from tiny_gguf import write_tiny_gguf

    measured = []
    monkeypatch.setattr(llama_cpp_prices, "measure_latency_entry",
                        lambda path, *a, **k: measured.append(file_fingerprint(path)) or read_profile(workspace / "p-torch.json").model("small"))
    monkeypatch.setattr(llama_cpp_prices, "decode_greedy_streams", lambda *a, **k: _streams())
    profile = read_profile(workspace / "p-torch.json")
    file = tmp_path / "copy.gguf"
    write_tiny_gguf(file)
    source = llama_cpp_prices.PriceSource(file, {}, 1, ((1, 2, 3),), 8)
    llama_cpp_prices.prices_for(source, profile, "target")
    llama_cpp_prices.prices_for(source, profile, "target")
    assert len(measured) == 1
    write_tiny_gguf(file, seed=3)  # another file at the same path
    llama_cpp_prices.prices_for(source, profile, "target")
    assert len(measured) == 2 and measured[0] != measured[1]
    llama_cpp_prices.prices_for(dataclasses.replace(source, threads=2), profile, "target")
    assert len(measured) == 3  # threads are in the key too


def test_a_llama_cpp_target_reuses_the_profile_and_says_so(workspace, cache, monkeypatch):
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices

    monkeypatch.setattr(llama_cpp_prices, "measure_latency_entry", lambda *a, **k: pytest.fail("measured"))
    monkeypatch.setattr(llama_cpp_prices, "decode_greedy_streams", lambda *a, **k: pytest.fail("decoded"))
    export = _export(workspace / "plan-llama.json")
    assert any("priced from the profile: T(k) of 'target' is llama.cpp's on target.gguf, 1 thread"
               in note for note in export.ranking_notes)


def test_an_export_priced_on_other_streams_replays_those_and_prices_the_rest_alike(workspace, cache, monkeypatch):
    """`streams` (bench peers' split: the race's own prompts) replace the profile's in the replay:
    the profile's own streams give the same ranking; on streams that repeat a short pattern
    ngram-mod accepts more, and a row replayed on no streams (a draft model) keeps its point
    (without a server loop nothing else moves it)."""
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices
    from polyplan.formats.profile import TargetStream, read_profile
    from polyplan.planner.exact.ngram_replay import target_streams

    monkeypatch.setattr(llama_cpp_prices, "measure_latency_entry", lambda *a, **k: pytest.fail("measured"))
    plan = workspace / "plan-llama.json"
    base = _export(plan)
    own = target_streams(read_profile(workspace / "p-llama.json"))
    same = _export(plan, streams=own)
    assert [(c.label, c.speedup) for c in same.ranking] == [(c.label, c.speedup) for c in base.ranking]
    repeating = tuple(TargetStream(s.prompt_tokens, s.ids[:s.prompt_tokens] + (5, 6, 7) * 20) for s in own)
    other = {c.label: c for c in _export(plan, streams=repeating).ranking}
    mod = next(c for c in base.ranking if c.label == "ngram-mod (defaults)")
    assert other["ngram-mod (defaults)"].accepted > max(50, mod.accepted)  # (the tiny model's T(k) decides whether it pays)
    assert {label: (c.speedup, c.drafted) for label, c in other.items() if c.drafted is None} == \
        {c.label: (c.speedup, c.drafted) for c in base.ranking if c.drafted is None and "size-n" not in c.label}
    # a raced configuration's own flags (ngram-simple at a K the export did not choose on these streams) are replayed too
    from polyplan.planner.llama_cpp.ranking import llama_cpp_spec_flags

    flags = next(flags for k in range(3, 12) if (flags := tuple(llama_cpp_spec_flags("ngram", k, "", (1, 2))))
                 not in {c.flags for c in other.values()})
    also = {c.label: c for c in _export(plan, streams=repeating, replay_also=[flags, ("--spec-type", "draft-simple")]).ranking}
    added = next(c for c in also.values() if c.flags == flags)
    assert added.label == f"ngram-simple size-n=2 K={flags[-1]}" and added.drafted > 0
    assert len(also) == len(other) + 1  # the draft-simple flags are not replayed


def test_a_whole_race_with_stand_in_servers_judges_and_splits_every_replayed_row(workspace, cache, monkeypatch, tmp_path):
    """`run_llama_peers` end to end on the tiny plan, every llama-server a stand-in that answers
    each prompt with the same repeating tokens at a fixed decode time: each replayed row carries
    its prediction, an interval for a new set of the race's 2 prompts (wider than the profile's
    3 would give) and its price on the race's own prompts, and so does each draft model's row
    (the tiny drafter's agreement with the stand-ins' answers measured for real); polyplan's own
    chain ran in this process."""
    from polyplan.engines.llama_cpp import race as llama_peers
    from polyplan.engines.llama_cpp.build import LlamaCppBuild
    from polyplan.engines.llama_cpp.server import Completion

    answer = tuple(range(20, 28)) * 2

    class StandIn:
        def __init__(self, binary, model, args, log_path, trace=False):
            self.args, self.trace = tuple(args), trace

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def complete(self, ids, new_tokens):
            drafting = "--spec-type" in self.args or "--spec-default" in self.args
            return Completion(answer[:new_tokens], new_tokens, 100.0 if drafting else 120.0, 5.0, 6 if drafting else 0,
                              3 if drafting else 0, 0.2, ((3, 2), (3, 1)) if drafting and self.trace else () if self.trace else None)

    monkeypatch.setattr(llama_peers, "require_build", lambda: LlamaCppBuild(tmp_path, "stand-in"))
    monkeypatch.setattr(llama_peers, "LlamaServer", StandIn)
    bench = llama_peers.run_llama_peers(workspace / "plan-llama.json", prompts_path=workspace / "prompts.jsonl", max_prompts=2,
                                        new_tokens=16, repeats=1, threads=1)
    rows = {row.label: row for row in bench.rows}
    assert bench.prompts == 2 and rows[llama_peers.POLYPLAN].runs == 2
    # the servers' traces: per prompt 12 rounds (16 tokens, the prefill's first, 3 accepted), 2 of them drafted 3
    assert rows["ngram-mod (defaults)"].drafted_rounds == (2 * 10, 0, 0, 2 * 2)
    assert rows[llama_peers.POLYPLAN].drafted_rounds is None and rows[llama_peers.TARGET_ONLY].drafted_rounds is None
    mod = rows["ngram-mod (defaults)"]
    assert mod.decode_speedup == pytest.approx(1.2) and mod.predicted_speedup is not None and mod.race_priced is not None
    # a draft model's rows are priced on the race's answers too (its agreement with them measured), but not a combination
    assert all(row.race_priced is not None for label, row in rows.items() if label.startswith("draft-simple") and "+" not in label)
    assert rows["draft-simple small + ngram-mod (defaults)"].race_priced is None
    # a draft model's defaults and its n-max/p-min sweep are predicted at their own flags; a combination is not modelled
    assert rows["draft-simple small (defaults)"].predicted_speedup is not None
    assert all(row.predicted_speedup is not None for label, row in rows.items() if "p-min=" in label)
    assert rows["draft-simple small + ngram-mod (defaults)"].judgement() == "not modelled"
    simple = next(row for label, row in rows.items() if label.startswith("ngram-simple size-n="))
    assert simple.race_priced is not None  # at the raced K, whatever K the race's streams would choose
    text = "\n".join(llama_peers.llama_peers_lines(bench))
    assert "the predictions priced on this race's own prompts" in text and "worst error over these" in text
    from polyplan.engines.export import export_from_files
    from polyplan.planner.llama_cpp.ranking import ReplayWorkload

    profiled = export_from_files(workspace / "plan-llama.json", "llama.cpp", workload=ReplayWorkload(16, 1))
    three = next(c for c in profiled.ranking if c.label == "ngram-mod (defaults)")
    if three.interval[1] - three.interval[0] > 1e-9:  # (a row that never drafts has a point interval either way)
        assert mod.predicted_interval[1] - mod.predicted_interval[0] >= three.interval[1] - three.interval[0] - 1e-9


def test_a_draft_models_agreement_with_a_races_answers_is_what_it_would_verify(workspace):
    """`race_agreement`: the target GGUF agrees with its own greedy answers everywhere (its argmax
    is the answer), the tiny drafter where its argmax is the answer's token; confidences are kept
    per position; `with_race_agreement` sets the pair's greedy α to the share that agrees."""
    from polyplan.engines.llama_cpp.prices import decode_greedy_streams
    from polyplan.engines.llama_cpp.race_agreement import race_agreement, with_race_agreement
    from polyplan.formats.profile import TargetStream, read_profile

    prompts = [tuple(range(5 + i, 25 + i)) for i in range(3)]
    streams = decode_greedy_streams(workspace / "target.gguf", 1, prompts, 12)
    itself = race_agreement(workspace / "target.gguf", 1, "target", "target", streams)
    assert [len(s) for s in itself.agreement] == [len(s.ids) - s.prompt_tokens for s in streams]
    assert all(set(s) == {"1"} for s in itself.agreement)
    small = race_agreement(workspace / "small.gguf", 1, "target", "small", streams)
    assert small.confidences() is not None and len(small.confidence_top10) == 3
    noise = tuple(TargetStream(s.prompt_tokens, s.ids[:s.prompt_tokens] + tuple((7 * j + 3) % 50 + 2 for j in range(12))) for s in streams)
    assert sum(s.count("1") for s in race_agreement(workspace / "target.gguf", 1, "target", "target", noise).agreement) < 12  # control
    profile = read_profile(workspace / "p-llama.json")
    priced = with_race_agreement(profile, small)
    share = sum(s.count("1") for s in small.agreement) / sum(len(s) for s in small.agreement)
    assert priced.stats("target", "small", "greedy").alpha == pytest.approx(min(share, 0.999))
    assert priced.acceptance_runs["greedy"].by_pair()[("target", "small")] == small.sequences()


def test_without_the_bindings_one_line_says_the_profile_priced_it(workspace, cache, monkeypatch):
    from polyplan.decoder.llama_cpp import INSTALL_HINT
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices

    monkeypatch.setattr(llama_cpp_prices, "bindings_missing", lambda: f"the bindings are not installed; {INSTALL_HINT}")
    export = _export(workspace / "plan-torch.json")
    assert export.ranking_notes[0].startswith("priced from the profile ('target' as the plan ran it) and polyplan's loop: ")
    assert "pip install -e '.[llama]'" in export.ranking_notes[0]
    quiet = _export(workspace / "plan-torch.json", measure=False)
    assert quiet.ranking_notes[0] == "priced from the profile and polyplan's loop (--profile-prices)"


def _fixed_latency_entry(path, threads, ks, fingerprint, key, log=None, last_row_only=False, contexts=(128,)):
    """What `measure_latency_entry` returns, without timing anything: T(k) = base + 0.1 ms per
    extra row (base 2 ms for the target's file, 0.5 ms for a drafter's), plus 10 ns per row and
    cached token beyond 128 at each of `contexts`."""
    from polyplan.formats.profile import LatencyPoint, ModelProfile

    base = 0.002 if path.name == "target.gguf" else 0.0005
    points = tuple(LatencyPoint(context, k, base + 0.0001 * (k - 1) + 1e-8 * k * (context - 128)) for context in contexts for k in ks)
    return ModelProfile(path.stem, fingerprint, points, latency_fingerprint=key)


def test_a_calibrated_server_loop_prices_the_ranking(workspace, cache, monkeypatch):
    """With a (fake) build, the calibration's fit prices every replayed configuration and the
    draft model, and its note says so; a dearer server loop predicts every drafting
    configuration slower (negative control: without a build, the same T(k) priced with
    polyplan's loop). T(k) is a fixed curve, not timed, so the two exports differ only in the
    loop they price with (the bindings' timing is tested above)."""
    from polyplan.engines.llama_cpp import build as llama_cpp_build
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices

    monkeypatch.setattr(llama_cpp_prices, "measure_latency_entry", _fixed_latency_entry)
    monkeypatch.setattr(llama_cpp_build, "find_build", lambda *a: None)
    bare = _export(workspace / "plan-torch.json")
    assert any(note.startswith("llama-server's own loop: not calibrated") for note in bare.ranking_notes)
    build = llama_cpp_build.LlamaCppBuild(Path("/nonexistent"), llama_cpp_build.BINDINGS_VERSION)
    monkeypatch.setattr(llama_cpp_build, "find_build", lambda *a: build)
    monkeypatch.setattr(llama_cpp_prices, "calibrate_server", lambda *a, **k: llama_cpp_prices.ServerCalibration(
        (ServerRequest(TARGET_ALONE, (0,) * 7, 0.0), ServerRequest(TARGET_ALONE, (0,) * 23, 0.0)), (_entry("t", STEP),)))
    monkeypatch.setattr(llama_cpp_prices, "fit_server_loop", lambda requests, step, draft_step: KNOWN)
    monkeypatch.setattr(llama_cpp_prices, "server_answers", lambda build, source, slots, log: llama_cpp_prices.decode_greedy_streams(
        source.target, source.threads, source.prompts, source.new_tokens, log))  # the server's answers: the bindings' here
    priced = _export(workspace / "plan-torch.json")
    assert any(note.startswith("llama-server's own loop, calibrated on target.gguf, 1 thread: 4.00 ms/request, 2.00 ms/round")
               for note in priced.ranking_notes)
    assert any("draft model 'small' in llama-server's loop: 2.50 ms per pass" in note for note in priced.ranking_notes)
    assert "llama-server's own" in priced.overhead_note
    by_label = {c.label: c.speedup for c in bare.ranking}
    compared = [config.label for config in priced.ranking if config.drafted or config.label.startswith("draft-simple")]
    assert compared  # the ranking has drafting configurations to compare
    for config in priced.ranking:
        if config.label in compared:
            assert config.speedup < by_label[config.label], config.label


def test_a_plan_whose_gguf_changed_since_profiling_is_one_line_naming_the_file(workspace, cache, tmp_path):
    import shutil

    from tiny_gguf import write_tiny_gguf

    copy = tmp_path / "ws"
    shutil.copytree(workspace, copy, ignore=shutil.ignore_patterns("cache"))
    plan = json.loads((copy / "plan-torch.json").read_text())
    plan["candidates"]["path"] = str(copy / "models-torch.yaml")
    (copy / "plan-torch.json").write_text(json.dumps(plan))
    write_tiny_gguf(copy / "target.gguf", seed=5)
    result = CliRunner().invoke(app, ["export", "--plan", str(copy / "plan-torch.json"), "--engine", "llama.cpp",
                                      "--profile", str(workspace / "p-torch.json")])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output, result.output
    assert "model 'target' changed since the plan was made" in result.output and str(copy / "target.gguf") in result.output


@pytest.mark.slow
def test_a_real_server_calibration_fits_non_negative_costs_that_explain_its_decode_times(tmp_path):
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices
    from polyplan.engines.llama_cpp.build import require_build
    from tiny_gguf import pinned_server_and_tiny_gguf, write_tiny_gguf

    _, model = pinned_server_and_tiny_gguf(tmp_path)
    build = require_build()
    write_tiny_gguf(model, context_length=1024)  # the calibration's fixed prompts need more than the tiny model's own 256
    drafter = tmp_path / "small.gguf"
    write_tiny_gguf(drafter, seed=1, layers=1, context_length=1024)
    from polyplan.planner.exact.latency import curve_from_profile

    calibration = llama_cpp_prices.calibrate_server(build, model, 1, {"small": str(drafter)}, ())  # polyplan's fixed prompts
    requests, step = calibration.requests, calibration.step()
    assert {r.kind for r in requests} == {TARGET_ALONE, NGRAM, DRAFT_MODEL} and len(calibration.streams) == 3
    draft_step = curve_from_profile(llama_cpp_prices.measure_latency_entry(drafter, 1, llama_cpp_prices.REEVAL_KS, "fp-d", "key-d",
                                                                           last_row_only=True))
    assert any(r.passes is not None for r in requests)  # the empty-round probe ran
    loop = fit_server_loop(requests, step, draft_step)
    assert loop.per_round_s >= 0 and loop.per_draft_pass_s is not None and loop.draft_reeval is not None
    predicted = [request_seconds(loop, step, r, draft_step) for r in requests]
    measured = [r.decode_s for r in requests]
    assert sum(predicted) == pytest.approx(sum(measured), rel=0.25)
    from polyplan.engines.llama_cpp.server import LlamaServer

    flags = ("-t", "1", "-c", "1024", "-np", "1", "--no-webui", "--spec-type", "draft-simple", "-md", str(drafter),
             "--spec-draft-n-max", "3", "--spec-draft-n-min", "0", "--spec-draft-p-min", "0")
    with LlamaServer(build.server, model, flags, tmp_path / "traced.log", trace=True) as server:
        done = server.complete(list(calibration.streams[0].ids[:calibration.streams[0].prompt_tokens]), 24)
    assert done.draft_n > 0 and done.rounds is not None and all(0 < m <= 3 for m, _ in done.rounds)  # the trace is read


@pytest.mark.slow
def test_a_real_server_at_two_slots_decodes_its_requests_together_and_fits_a_non_negative_cost(tmp_path):
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices
    from polyplan.engines.llama_cpp.build import require_build
    from polyplan.planner.llama_cpp.server_loop import slot_round_cost
    from tiny_gguf import pinned_server_and_tiny_gguf, write_tiny_gguf

    _, model = pinned_server_and_tiny_gguf(tmp_path)
    write_tiny_gguf(model, context_length=1024)
    calibration = llama_cpp_prices.calibrate_slots(require_build(), model, 1, 2, ())  # polyplan's fixed prompts
    assert calibration.slots == 2 and calibration.step().ks == (1, 2)
    assert [rounds for _, rounds in calibration.requests] == [llama_cpp_prices._SLOT_LENGTH - 1] * (2 * llama_cpp_prices._SLOT_REPEATS)
    assert slot_round_cost(2, calibration.requests, calibration.step()(2)) >= 0.0


# --------------------------------------------------------------------------- the race's own fit


def test_the_race_fits_the_servers_loop_from_its_own_requests_as_the_calibration_does():
    """A race against fake servers with `KNOWN` costs: its target-alone, ngram-simple and fixed-K
    draft-simple requests, read and fitted as the calibration's are, explain every request's
    decode time, printed beside the calibration's; a stateful n-gram type, a varying draft,
    polyplan's own runs and a second draft model are left out (control: without the target
    alone nothing is fitted)."""
    from types import SimpleNamespace

    from polyplan.engines.llama_cpp.race import TARGET_ONLY, race_loop_line, race_requests, race_servers
    from polyplan.engines.race import Contender, Timed
    from polyplan.formats.profile import LatencyPoint, ModelProfile
    from polyplan.planner.llama_cpp.ranking import LlamaCppPrices

    streams = _streams()
    configs = [Contender(TARGET_ONLY, ()),
               Contender("ngram-simple 2/8", ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2",
                                                 "--spec-ngram-simple-size-m", "8")),
               Contender("ngram-mod (defaults)", ("--spec-type", "ngram-mod")),
               Contender("draft K=2", ("--spec-type", "draft-simple", "-md", "d.gguf", "--spec-draft-n-max", "2",
                                          "--spec-draft-n-min", "0", "--spec-draft-p-min", "0")),
               Contender("draft K=6", ("--spec-type", "draft-simple", "-md", "d.gguf", "--spec-draft-n-max", "6",
                                          "--spec-draft-n-min", "0", "--spec-draft-p-min", "0")),
               Contender("draft p-min", ("--spec-type", "draft-simple", "-md", "d.gguf", "--spec-draft-n-max", "6",
                                            "--spec-draft-n-min", "0", "--spec-draft-p-min", "0.7")),
               Contender("other draft K=3", ("--spec-type", "draft-simple", "-md", "e.gguf", "--spec-draft-n-max", "3",
                                                "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"))]
    prompts = [SimpleNamespace(ids=list(s.ids[:s.prompt_tokens]), prompt=SimpleNamespace(kind="chat")) for s in streams]
    ours = lambda ids: Timed((), 1.0)  # noqa: E731
    runs, failures = race_servers([configs], lambda config: FakeServer(config.args, streams), ours, prompts, repeats=2, new_tokens=24)
    assert not failures
    requests, draft = race_requests(configs, runs, [p.ids for p in prompts])
    assert len(requests) == 24 and {r.kind for r in requests} == {TARGET_ALONE, NGRAM, DRAFT_MODEL}  # 4 configurations x 3 x 2
    assert draft == "d.gguf"
    fitted = fit_server_loop(requests, STEP, DRAFT_STEP)
    for request in requests:  # one length only: the fit need not split per-request from per-round costs, but explains every request
        assert request_seconds(fitted, STEP, request, DRAFT_STEP) == pytest.approx(request.decode_s, rel=1e-6)
    curve = lambda name, c: ModelProfile(name, "fp-" + name, tuple(LatencyPoint(128, k, v) for k, v in zip(c.ks, c.seconds)))  # noqa: E731
    prices = LlamaCppPrices(curve("t", STEP), loop=dataclasses.replace(KNOWN, per_round_s=0.003),
                            reevaluations={"small": curve("small", DRAFT_STEP)})
    line = race_loop_line(configs, runs, [p.ids for p in prompts], prices, [("small", "d.gguf"), ("other", "e.gguf")])
    assert line == (f"llama-server's loop fitted from this race's 24 requests (target alone, ngram-simple, draft-simple at a "
                    f"fixed K): {fitted.text()}; calibrated: {prices.loop.text()}")
    alone = [run for run in runs if run.label != TARGET_ONLY]
    assert "not fitted (server calibration: no target-alone request)" in race_loop_line(configs, alone, [p.ids for p in prompts], prices)
    assert "not fitted (the export was priced from the profile" in race_loop_line(configs, runs, [p.ids for p in prompts], None)


def test_the_calibrations_pace_is_the_target_alones_decode_step():
    """Its decode seconds over its rounds (one token each; the first token comes from the
    prefill); other kinds' requests are not read; none without a target-alone request."""
    from polyplan.engines.llama_cpp.prices import calibrated_step
    from polyplan.planner.llama_cpp.server_loop import DRAFT_MODEL, TARGET_ALONE, ServerRequest

    requests = [ServerRequest(TARGET_ALONE, (0,) * 7, 0.07, 100), ServerRequest(TARGET_ALONE, (0,) * 23, 0.25, 100),
                ServerRequest(DRAFT_MODEL, (3, 3), 9.0, 100)]
    assert calibrated_step(requests) == pytest.approx(0.32 / 30)
    assert calibrated_step(requests[2:]) is None


# --------------------------------------------------------------------------- the loop at several slots


def test_a_slots_round_cost_is_the_one_slots_where_not_calibrated_and_linear_between_counts():
    plain = ServerLoop(per_round_s=0.002)
    assert [plain.per_round_at(n) for n in (1, 2, 8)] == [0.002] * 3
    loop = ServerLoop(per_round_s=0.002, per_row_s=0.0001, slot_rounds=((4, 0.0002), (2, 0.0008)))
    assert [loop.per_round_at(n) for n in (1, 2, 4, 16)] == pytest.approx([0.002, 0.0008, 0.0002, 0.0002])
    assert loop.per_round_at(3) == pytest.approx(0.0005)
    assert loop.round_s(3, NGRAM, slots=2) == pytest.approx(0.0008 + 0.0003)
    assert loop.round_s(3, NGRAM) == pytest.approx(0.002 + 0.0003)  # one slot: as before
    fixed = loop.at(3)
    assert fixed.per_round_s == pytest.approx(0.0005) and fixed.slot_rounds == () and fixed.per_round_at(1) == fixed.per_round_s
    assert "0.80 ms/round a slot at 2 slots" in loop.text() and "0.20 ms/round a slot at 4 slots" in loop.text()


def test_a_slots_round_cost_is_the_iterations_seconds_less_the_sittings_t_n_shared_by_the_slots():
    from polyplan.planner.llama_cpp.server_loop import slot_round_cost

    # four slots, T(4) = 20 ms in the sitting, each slot 1 ms a round: an iteration 24 ms; 3 ms per request
    timed = [(0.003 + 31 * 0.024, 31), (0.003 + 31 * 0.025, 31), (0.003 + 31 * 0.023, 31)]
    assert slot_round_cost(4, timed, 0.020, per_request_s=0.003) == pytest.approx(0.001)
    assert slot_round_cost(4, timed, 0.030, per_request_s=0.003) == 0.0  # cheaper than the bindings' pass: noise, not a refund
    with pytest.raises(PolyplanError, match="1 slot"):
        slot_round_cost(1, timed, 0.020)
    with pytest.raises(PolyplanError, match="no request decoded a round"):
        slot_round_cost(2, [(0.01, 0)], 0.020)


class FakeSlots:
    """llama-server at -np N serving the target alone: a request answers only once all N are in
    flight together (a barrier: requests sent one after another fail), each iteration costs
    T(N) + N x `cost`, a request `per_request` besides."""

    def __init__(self, args, step, cost, per_request, events):
        self.args, self.step, self.cost, self.per_request, self.events = tuple(args), step, cost, per_request, events
        self.slots = int(self.args[self.args.index("-np") + 1])
        import threading

        self.barrier = threading.Barrier(self.slots, timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def complete(self, prompt, n):
        self.events.append("request")
        self.barrier.wait()
        seconds = self.per_request + (n - 1) * (self.step(self.slots) + self.slots * self.cost)
        return Completion(tuple(range(n)), n, 1000 * seconds, 1.0, 0, 0, seconds, None)


def test_a_calibration_at_n_slots_sends_n_requests_at_once_and_recovers_a_slots_round_cost(tmp_path, cache):
    """Through `calibrate_slots`' own bookkeeping on a fake server at -np 4 (a context of 4 x 1024):
    an untimed round first, T(1) and T(4) timed before the timed rounds and after each, and the
    fit gives back the server's 0.7 ms a slot a round."""
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices
    from polyplan.planner.llama_cpp.server_loop import slot_round_cost

    target = tmp_path / "t.gguf"
    target.write_bytes(b"not read")
    events, started = [], []

    def sitting(path, threads, ks, fingerprint, key, log=None):
        events.append("T(k)")
        return _entry("t", LatencyCurve(tuple(ks), tuple(STEP(k) for k in ks)))

    def factory(args, log_path):
        started.append(args)
        return FakeSlots(args, STEP, 0.0007, 0.004, events)

    prompts = [(1, 2, 3), (4, 5, 6), (7, 8, 9), (10, 11, 12)]
    calibration = llama_cpp_prices.calibrate_slots(None, target, 2, 4, ("--no-repack",), server_factory=factory,
                                                   prompts=prompts, latency=sitting)
    (args,) = started
    assert args[args.index("-np") + 1] == "4" and args[args.index("-c") + 1] == "4096" and "--no-repack" in args
    repeats = llama_cpp_prices._SLOT_REPEATS
    assert "".join("T" if e == "T(k)" else "r" for e in events) == "rrrr" + "T" + "rrrrT" * repeats
    assert calibration.slots == 4 and len(calibration.requests) == 4 * repeats and len(calibration.target_steps) == repeats + 1
    assert calibration.step().ks == (1, 4)
    assert slot_round_cost(4, calibration.requests, calibration.step()(4), 0.004) == pytest.approx(0.0007)


def test_the_prices_calibrate_each_count_above_one_once_and_the_loop_charges_it(cache, tmp_path):
    """`prices_for` at clients 1, 2 and 4 calibrates 2 and 4 once each (a second export, and one
    at 1 and 4, calibrate nothing), the loop carries each count's cost and a note says it; at one
    client alone no count is calibrated and the loop is the one-slot fit. Under load the target is
    also timed over several sequences split and unified (`--kv-unified`'s price per cell), once
    (kept), at one client not."""
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices
    from polyplan.engines.llama_cpp.build import LlamaCppBuild
    from polyplan.planner.exact.latency import curve_from_profile

    calls, counts, unified = [], [], []
    target, small = _gguf_pair(tmp_path / "a")

    def unified_steps(path, threads, ks, sequences, cells, repeats, log):  # 10 ns a row and extra cell
        unified.append((path, threads, ks, sequences, cells))
        split = tuple(0.01 * k for k in ks)
        extra = [UnifiedSteps(sequences, cells, ks, split, split).extra_cells(k) for k in ks]
        return UnifiedSteps(sequences, cells, ks, split, tuple(s + 1e-8 * k * e for s, k, e in zip(split, ks, extra)))
    draft = lambda: curve_from_profile(_fixed_latency_entry(small, 1, llama_cpp_prices.REEVAL_KS, "fp", "key"))  # noqa: E731
    source = llama_cpp_prices.PriceSource(target, {"small": small}, 1, ((1, 2, 3),), 8)

    def at_slots(build, path, threads, slots, flags, log):
        counts.append(slots)
        step = LatencyCurve((1, slots), (0.004, 0.003 + 0.001 * slots))
        rounds = [(KNOWN.per_request_s + 31 * (step(slots) + slots * 0.0001 * slots), 31)] * 3
        return llama_cpp_prices.SlotCalibration(slots, tuple(rounds), (_entry("target", step),))

    def price(clients):
        return llama_cpp_prices.prices_for(source, _Profile(0.002, "profiled"), "target", reuse={"target"},
                                           build=LlamaCppBuild(tmp_path, "b1"), latency=_fixed_latency_entry,
                                           calibrate=_sitting_calibration(calls, draft), calibrate_at=at_slots,
                                           clients=clients, unified_steps=unified_steps, server_streams=_no_answers)

    alone = price((1,))
    assert counts == [] and alone.loop.slot_rounds == ()
    loaded = price((1, 2, 4))
    assert counts == [2, 4]
    assert [slots for slots, _ in loaded.loop.slot_rounds] == [2, 4]
    assert [cost for _, cost in loaded.loop.slot_rounds] == pytest.approx([0.0002, 0.0004], abs=1e-9)
    assert dataclasses.replace(loaded.loop, slot_rounds=()) == alone.loop  # the one-slot costs unchanged
    assert "0.20 ms a slot at 2 slots" in "\n".join(loaded.notes) and "0.40 ms a slot at 4 slots" in "\n".join(loaded.notes)
    price((1, 2, 4))
    price((4,))
    assert counts == [2, 4]  # kept
    assert alone.unified is None  # one request: no `--kv-unified` to price
    assert unified == [(target, 1, llama_cpp_prices.UNIFIED_KS, llama_cpp_prices.UNIFIED_SEQUENCES, cells)
                       for cells in (llama_cpp_prices.UNIFIED_CELLS, llama_cpp_prices.UNIFIED_LONG_CELLS)]  # timed once, kept
    assert loaded.unified_long.cells == llama_cpp_prices.UNIFIED_LONG_CELLS and alone.unified_long is None
    cells = cell_cost(loaded.unified, loaded.unified_long)
    assert cells.longer.cells == llama_cpp_prices.UNIFIED_LONG_CELLS
    assert (cells.sequences, cells.cells) == (llama_cpp_prices.UNIFIED_SEQUENCES, llama_cpp_prices.UNIFIED_CELLS)
    assert cells.ks == llama_cpp_prices.UNIFIED_KS
    assert cells.per_cell_s == pytest.approx([1e-8 * k for k in llama_cpp_prices.UNIFIED_KS], rel=1e-9)
    assert any("a KV stream each against one unified stream" in note for note in loaded.notes)


def test_a_built_server_prices_over_its_own_answers_at_each_count_kept_once(cache, tmp_path):
    """With a build, the target's streams are llama-server's own answers (`server_answers`), taken
    at one slot for the one-request ranking and kept per count, and a second export asks for none;
    given `decode_streams` (the bindings') no server is asked (negative control)."""
    from polyplan.engines.llama_cpp import prices as llama_cpp_prices
    from polyplan.engines.llama_cpp.build import LlamaCppBuild
    from polyplan.planner.exact.latency import curve_from_profile
    from polyplan.planner.llama_cpp.near_ties import NearTies

    asked = []
    target, small = _gguf_pair(tmp_path / "a")
    source = llama_cpp_prices.PriceSource(target, {"small": small}, 1, ((1, 2, 3),), 8)
    draft = lambda: curve_from_profile(_fixed_latency_entry(small, 1, llama_cpp_prices.REEVAL_KS, "fp", "key"))  # noqa: E731

    def answers(build, source, slots, log):
        asked.append(slots)
        return (TargetStream(3, (1, 2, 3, 40 + slots, 41)),)

    def price(**measure):
        return llama_cpp_prices.prices_for(source, _Profile(0.002, "profiled"), "target", reuse={"target"},
                                           build=LlamaCppBuild(tmp_path, "b1"), latency=_fixed_latency_entry,
                                           calibrate=_sitting_calibration([], draft), near_ties=lambda *a, **k: NearTies((16, 64), ()),
                                           **measure)

    first = price(server_streams=answers)
    assert asked == [1] and first.streams == (TargetStream(3, (1, 2, 3, 41, 41)),)
    assert first.answers == ((1, first.streams),)
    assert any(note.startswith("the target's 1 greedy answers, which the n-gram rules are replayed over: llama-server's own")
               for note in first.notes)
    price(server_streams=answers)
    assert asked == [1]  # kept
    bindings = price(server_streams=answers, decode_streams=lambda *a: pytest.fail("decoded"))
    assert asked == [1] and bindings.answers == ()  # the profile's streams, reused, and no server asked
