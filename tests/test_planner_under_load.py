"""llama-server under load (`planner.llama_cpp.under_load`): B requests in flight.

Checked: at one request in flight every row, point and both intervals, is
`rank_server_configs`'s on a realistic export (replayed n-gram types, ngram-simple at its K, a
draft model at its K and behind the plan's confidence stop, llama-server's calibrated loop); a
two-slot case computed by hand (one slot's n-gram found nothing); the target alone gains
aggregate throughput at B on a sub-linear T(k) and gains nothing on a linear one (control);
speculation that pays at one request pays less at more on a CPU-like T(k) ≈ k·T(1); a prompt
delays the other slot's decode; the physical limit at one request is `physical_limit`'s and
falls with B; bad client counts; the ranges of one choice and the count from which it is off.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import DraftPolicy
from polyplan.formats.profile import AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats, TargetStream
from polyplan.planner import engine_export
from polyplan.planner.exact.latency import LatencyCurve
from polyplan.planner.exact.ngram_replay import ReplayRound
from polyplan.planner.exact.physical_limit import physical_limit
from polyplan.planner.llama_cpp import under_load
from polyplan.planner.llama_cpp.export import rank_server_configs
from polyplan.planner.llama_cpp.ranking import OFF, LlamaCppPrices
from polyplan.planner.llama_cpp.server_loop import NGRAM, NO_SERVER_LOOP, TARGET_ALONE, ServerLoop
from polyplan.planner.llama_cpp.under_load import (LoadedConfig, LoadRanking, load_limit, load_ranges, off_from,
                                                   parse_clients, rank_under_load, simulate_load)
from polyplan.planner.plan_builder import plan_of
from polyplan.planner.search import SearchSettings, rank_chains


def _cpu_curve(k: float) -> float:
    """A CPU-like T(k): a 40 ms step, each further row 60 % of one."""
    return 0.04 * (1 + 0.6 * (k - 1))


def _streams() -> tuple[TargetStream, ...]:
    rng = np.random.default_rng(3)
    streams = []
    for i in range(6):
        motif = tuple(int(t) for t in rng.integers(10, 40, size=4 + i % 3))
        noise = tuple(int(t) for t in rng.integers(40, 90, size=6))
        body = (motif * 6)[: 18 + 3 * i] + noise + motif * 3
        streams.append(TargetStream(5 + i, tuple(range(100 + i, 105 + 2 * i)) + body))
    return tuple(streams)


def _agreement(streams) -> tuple[str, ...]:
    rng = np.random.default_rng(4)
    return tuple("".join("1" if rng.random() < 0.7 else "0" for _ in range(len(s.ids) - s.prompt_tokens)) for s in streams)


def _profile() -> Profile:
    ks = tuple(range(1, 17))
    target = ModelProfile("target", "fp-target", tuple(LatencyPoint(64, k, _cpu_curve(k), 0.002, 5, None) for k in ks))
    draft = ModelProfile("draft", "fp-draft", tuple(LatencyPoint(64, k, 0.006 * (1 + 0.5 * (k - 1)), 0.0004) for k in ks))
    ngram = ModelProfile("ngram", "fp-ngram", (LatencyPoint(64, 1, 0.0001),), ngram_simple=2)
    profile = Profile(target="target", device="synthetic", models=(target, draft, ngram), pairs=())
    profile = profile.with_stats("target", "draft", "greedy", SamplingStats(alpha=0.7, engine_alpha=0.7))
    profile = profile.with_stats("target", "ngram", "greedy", SamplingStats(alpha=0.3, engine_alpha=0.3))
    streams = _streams()
    agreement = _agreement(streams)
    confidence = tuple("".join("e6" if bit == "1" else "40" for bit in text) for text in agreement)
    pair = PairAgreement("target", "draft", agreement, confidence)
    return dataclasses.replace(profile, acceptance_runs={"greedy": AgreementRuns((pair,), streams=streams)})


LOOP = ServerLoop(per_request_s=0.004, per_round_s=0.002, per_row_s=0.0005, per_ngram_round_s=0.0003,
                  per_draft_round_s=0.001, per_draft_pass_s=0.006, per_draft_prompt_token_s=0.0002, draft_reeval=0.9)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """The options and request `export_plan` hands `rank_server_configs` on a realistic plan,
    and what that returned."""
    from polyplan.formats.candidates import parse_candidates

    root = tmp_path_factory.mktemp("load")
    for name in ("target.gguf", "draft.gguf"):
        (root / name).write_bytes(b"GGUF")
    candidates = parse_candidates({"candidates": [
        {"name": "target", "source": "target.gguf", "target": True, "engine": "llama.cpp"},
        {"name": "draft", "source": "draft.gguf", "engine": "llama.cpp"},
        {"name": "ngram", "derive": {"kind": "ngram-simple", "size_n": 2}},
    ]}, base_dir=root)
    profile = _profile()
    plan = plan_of(rank_chains(profile, SearchSettings(max_levels=2, k_max=4, draft_policies=False)))
    best = dataclasses.replace(plan.best, chain=("target", "draft"), block_sizes=(3,), draft_policy=DraftPolicy(p_min=0.5))
    plan = dataclasses.replace(plan, alternatives=(best, *plan.alternatives[1:]))
    reeval = ModelProfile("draft", "fp-draft-last", tuple(LatencyPoint(64, k, 0.005 + 0.001 * k) for k in range(1, 17)))
    prices = LlamaCppPrices(profile.model("target"), loop=LOOP, draft_ratio=1.2, reevaluations={"draft": reeval})
    seen = {}

    def spy(options, request):
        seen["args"] = (options, request)
        seen["result"] = rank_server_configs(options, request)
        return seen["result"]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_export, "rank_server_configs", spy)
        engine_export.export_plan(plan, profile, candidates, "llama.cpp", k_max=4, prices=prices,
                                  replay_also=[("--spec-type", "draft-simple", "-md", str(root / "draft.gguf"),
                                                "--spec-draft-n-max", "2")])
    return seen


def test_at_one_request_every_row_is_the_exports_own(captured):
    options, request = captured["args"]
    today, _ = captured["result"]
    labels = {config.label for config in today}
    assert any(label.startswith("ngram-mod") for label in labels)
    assert any(label.startswith("ngram-simple size-n=2") for label in labels)
    assert any(label.startswith("draft-simple draft K=") and "p-min" not in label for label in labels)
    assert any("p-min=0.5" in label for label in labels)
    assert any("n-max=2" in label for label in labels)
    (load,) = rank_under_load(options, request, (1,))
    assert [config.label for config in load.configs] == [config.label for config in today]
    for mine, theirs in zip(load.configs, today):
        assert mine.speedup == pytest.approx(theirs.speedup, rel=1e-9, abs=1e-12), mine.label
        for got, want in ((mine.interval, theirs.interval), (mine.workload_interval, theirs.workload_interval)):
            assert (got is None) == (want is None), mine.label
            if want is not None:
                assert got == pytest.approx(want, rel=1e-9), mine.label
    replayed = [config for config in today if config.interval is not None]
    assert len(replayed) >= 6  # every row above has its interval
