"""A profile is only ever extended, never overwritten by a run for other models or another
machine, and concurrent runs take turns (issue 15)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import target_early_ngram
from polyplan.formats.errors import PolyplanError
from polyplan.formats.processor import Processor
from polyplan.formats.codec import encode
from polyplan.formats.profile import read_profile, write_profile
from polyplan.profiler.locks import profile_lock, timing_lock
from polyplan.profiler import AcceptanceSettings, LatencySettings, ProfiledModel, ProfileSettings, profile_models
from polyplan.profiler.prompts import EncodedPrompt, Prompt

SETTINGS = ProfileSettings(
    latency=LatencySettings(ks=(1, 2), context_lengths=(8,), repeats=2, warmup=1, prefill_repeats=1),
    acceptance=AcceptanceSettings(temperatures=(0.0,), block_sizes=(2,), new_tokens=6, decoded=False, resamples=20),
)

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def models(single_thread) -> list[ProfiledModel]:
    return target_early_ngram()


def _prompts() -> list[EncodedPrompt]:
    return [EncodedPrompt(Prompt("", "user", f"p:{i}"), tuple(range(4 + i, 20 + i))) for i in range(2)]


@pytest.fixture(scope="module")
def full(models, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("full") / "profile.json"
    profile_models(models, _prompts(), out, SETTINGS)
    return out


def test_a_run_on_fewer_candidates_keeps_the_other_models_entries(models, full, tmp_path):
    out = tmp_path / "profile.json"
    out.write_bytes(full.read_bytes())
    before = read_profile(out)
    outcome = profile_models([models[0], models[2]], _prompts(), out, SETTINGS)
    assert outcome.measured == ()  # everything the two models need was there
    after = read_profile(out)
    assert after.model_names() == ["target", "ngram", "early"]  # the candidates first, then what was kept
    assert sorted(after.model_names()) == sorted(before.model_names())
    assert {(p.verifier, p.drafter) for p in after.pairs} == {(p.verifier, p.drafter) for p in before.pairs}
    # every pair's statistics kept as they were (which pairs exist depends on which model timed faster: a
    # drafter is paired only under a slower verifier, so name none of them here)
    for pair in before.pairs:
        kept = after.pair(pair.verifier, pair.drafter)
        assert {key: entry.alpha for key, entry in kept.sampling.items()} == {key: entry.alpha for key, entry in pair.sampling.items()}


def test_recommend_on_an_extended_profile_plans_with_the_current_candidates_only(full):
    from polyplan.planner.plan_builder import plan_from_profile

    result = plan_from_profile(read_profile(full), None, profile_path=str(full), drafters=("ngram",))
    assert {name for plan in result.ranked for name in plan.chain} <= {"target", "ngram"}
    assert dict(result.fingerprints).keys() == {"target", "ngram"}


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: replace(p, target="early", models=(p.models[1], p.models[0], *p.models[2:])), "made for the target 'early'"),
        (lambda p: replace(p, device="cuda:0 NVIDIA H100"), "measured on 'cuda:0 NVIDIA H100'"),
        (lambda p: p.with_model(replace(p.models[0], fingerprint="sha256:other")), "had other weights"),
        # the same device label, another processor (virtual machines share a model name): a fake record
        (lambda p: replace(p, processor=Processor("Fake CPU 1", flags=("avx2",))), "measured on 'Fake CPU 1 \\(avx2"),
    ],
)
def test_a_profile_for_other_models_or_another_machine_is_never_overwritten(models, full, tmp_path, edit, message):
    out = tmp_path / "other.json"
    write_profile(edit(read_profile(full)), out)
    before = out.read_bytes()
    with pytest.raises(PolyplanError, match=rf"--out: .*other.json is not extended: .*{message}.*choose another --out"):
        profile_models(models, _prompts(), out, SETTINGS)
    assert out.read_bytes() == before


def test_a_second_run_on_a_busy_profile_waits_or_says_it_is_busy(models, full, tmp_path, monkeypatch):
    out = tmp_path / "busy.json"
    out.write_bytes(full.read_bytes())
    before = out.read_bytes()
    monkeypatch.setenv("POLYPLAN_LOCK_TIMEOUT", "0")
    held, release, errors = threading.Event(), threading.Event(), []

    def holder():
        with profile_lock(out):
            held.set()
            release.wait(60)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(60)
        with pytest.raises(PolyplanError, match=r"profile .*busy.json is busy: another polyplan run is writing it"):
            profile_models(models, _prompts(), out, SETTINGS)
    finally:
        release.set()
        thread.join(60)
    assert out.read_bytes() == before and not errors
    profile_models(models, _prompts(), out, SETTINGS)  # free again: the run goes through


_WAITER = """
import sys
from polyplan.profiler.locks import {lock}
with {lock}({arg}):
    print("acquired", flush=True)
"""


@pytest.mark.parametrize("kind", ["profile", "timing"])
def test_another_process_waits_for_the_lock_and_says_so(tmp_path, monkeypatch, kind):
    """Two processes: the second blocks while the first holds the lock, prints one `waiting:`
    line on stderr, and goes on once the lock is released (no timing is asserted)."""
    monkeypatch.setenv("POLYPLAN_LOCK_DIR", str(tmp_path))
    monkeypatch.delenv("POLYPLAN_LOCK_TIMEOUT", raising=False)
    target = tmp_path / "p.json"
    lock = profile_lock(target) if kind == "profile" else timing_lock()
    code = _WAITER.format(lock=f"{kind}_lock", arg=repr(str(target)) if kind == "profile" else "")
    with lock:
        waiter = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = waiter.stderr.readline()  # blocks until the waiter reports that it waits
        assert line.startswith("waiting: ") and ("busy" in line or "taking timings" in line), line
        assert waiter.poll() is None  # still waiting while we hold the lock
    out, err = waiter.communicate(timeout=120)
    assert waiter.returncode == 0 and out.strip() == "acquired", err


def test_locks_are_reentrant_within_a_run(tmp_path, monkeypatch):
    """Taking a lock the run already holds neither waits (the timeout is 0: it would raise)
    nor, on release, frees the outer hold: another process is still refused until the outer
    one ends, and gets the lock after (the negative control)."""
    monkeypatch.setenv("POLYPLAN_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("POLYPLAN_LOCK_TIMEOUT", "0")
    code = _WAITER.format(lock="profile_lock", arg=repr(str(tmp_path / "p.json")))

    def other_process_gets_it() -> bool:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        return done.returncode == 0 and done.stdout.strip() == "acquired"

    with profile_lock(tmp_path / "p.json"), timing_lock():
        with profile_lock(tmp_path / "p.json"), timing_lock():
            pass
        assert not other_process_gets_it()  # the inner release left the outer hold in place
    assert other_process_gets_it()


def _recommend_on_an_edited_profile(tmp_path, edit, profile_options=()):
    """Profile the candidate workspace into other.json, let `edit` change its JSON payload, then run
    `recommend --candidates --profile other.json`; checks that recommend succeeded and left
    other.json byte for byte, and returns its result and the edited payload."""
    from typer.testing import CliRunner

    from conftest import write_candidate_workspace
    from polyplan.cli.app import app

    workspace = write_candidate_workspace(tmp_path / "ws")
    other = tmp_path / "other.json"
    made = CliRunner().invoke(app, ["profile", "--candidates", str(workspace / "models.yaml"), "--prompts", str(workspace / "prompts.jsonl"),
                                    "--out", str(other), "--new-tokens", "8", "--latency-ks", "1,2", "--context-lengths", "8",
                                    "--repeats", "2", "--warmup", "1", "--no-decoded", "--temperatures", "0", *profile_options])
    assert made.exit_code == 0, made.output
    payload = json.loads(other.read_text())
    edit(payload)
    other.write_text(json.dumps(payload))
    before = other.read_bytes()
    result = CliRunner().invoke(app, ["recommend", "--candidates", str(workspace / "models.yaml"), "--profile", str(other),
                                      "--prompts", str(workspace / "prompts.jsonl"), "--out", str(tmp_path / "plan.json"),
                                      "--threads", "1", "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 0, result.output
    assert other.read_bytes() == before
    return result, payload


@pytest.mark.slow
def test_recommend_candidates_on_a_foreign_profile_profiles_into_the_cache(tmp_path):
    """`recommend --candidates --profile other.json` where other.json was made for another
    target: other.json is left byte for byte, the run says where it profiled instead."""

    def another_target(payload):
        payload["target"] = payload["models"][0]["name"] = "someone-else"
        payload["pairs"] = [pair for pair in payload["pairs"] if "target" not in (pair["verifier"], pair["drafter"])]

    result, _ = _recommend_on_an_edited_profile(tmp_path, another_target)
    assert "is kept as it is (it was made for the target 'someone-else'" in result.stderr
    assert list((tmp_path / "cache" / "profiles").glob("*.json"))


@pytest.mark.slow
def test_recommend_candidates_on_a_profile_from_another_processor_re_times_it_in_the_cache(tmp_path):
    """`recommend --candidates --profile other.json` where other.json was timed on another
    processor (a fake record, same device label): other.json is left byte for byte; the cache
    file starts from its acceptance statistics, re-times every model here, and records this
    processor, so the timings of two processors never share a profile."""
    from polyplan.profiler.processor import this_processor

    def another_processor(payload):
        assert payload["processor"]["name"] == this_processor().name  # what a run here records
        payload["processor"] = encode(Processor("Fake CPU 1", flags=("avx2",)))

    result, payload = _recommend_on_an_edited_profile(tmp_path, another_processor, ("--threads", "1"))
    assert "is kept as it is (it was measured on 'Fake CPU 1 (avx2, unknown engine)', this run is on" in result.stderr
    assert "re-timing every model and keeping its acceptance statistics" in result.stderr
    cached = read_profile(next((tmp_path / "cache" / "profiles").glob("*.json")))
    assert not cached.processor.differs(this_processor())
    kept = {(p["verifier"], p["drafter"]): p["sampling"]["greedy"]["alpha"] for p in payload["pairs"]}
    assert {(p.verifier, p.drafter): p.sampling["greedy"].alpha for p in cached.pairs if (p.verifier, p.drafter) in kept} == {
        pair: alpha for pair, alpha in kept.items() if cached.pair(*pair) is not None}
    assert any(cached.pair(*pair) is not None for pair in kept)
    counts = re.search(r": (\d+) entries measured, (\d+) reused", result.stdout)
    assert counts is not None, result.stdout
    measured, reused = int(counts.group(1)), int(counts.group(2))
    assert measured >= len(cached.models)  # every latency curve re-timed here
    assert reused >= len(cached.pairs)  # every α entry kept (they depend on the models and prompts, not the processor)
    assert json.loads((tmp_path / "plan.json").read_text())["processor"]["name"] == this_processor().name
