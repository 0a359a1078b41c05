"""Validation without models: chain selection, prompt fitting, aggregation, headline, JSON, and
the exact model's loop-overhead term. Everything here is deterministic arithmetic."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from conftest import shipped_paper_profile
from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.cost_model import predict_chain
from polyplan.formats.overhead import LoopOverhead
from polyplan.planner.exact.overhead import profile_overhead
from polyplan.formats.plan import read_plan
from polyplan.planner.plan_builder import plan_from_profile
from polyplan.formats.profile import LoopCalibration, read_profile
from polyplan.profiler.prompts import EncodedPrompt, Prompt
from polyplan.validation.chain_runs import fit_prompts, select_chains
from polyplan.validation.results import (
    CHECK_FASTEST,
    CHECK_GREEDY,
    CHECK_HOLDS,
    CHECK_NO_WORSE,
    ROLE_ALTERNATIVE,
    ROLE_RECOMMENDED,
    ROLE_TARGET_ONLY,
    ROLE_TWO_MODEL,
    RunRecord,
    headline,
    summarise_chain,
)

EXAMPLE = shipped_paper_profile()


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory):
    """The paper's Table 1 profile planned with a loop overhead: 4 ranked chains."""
    profile = dataclasses.replace(read_profile(EXAMPLE), loop_overhead={"greedy": LoopCalibration(per_step_s=1e-4, per_round_s=3e-4)})
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    plan_from_profile(profile, path, profile_path=str(EXAMPLE))
    return path


@pytest.fixture(scope="module")
def plan(plan_path):
    return read_plan(plan_path)


def test_overhead_adds_per_step_and_per_round_costs_exactly():
    curves, alphas, blocks = [0.025, 0.007, 0.004], [0.8, 0.7], [4, 3]
    overhead = LoopOverhead(per_step_s=2e-4, per_round_s=5e-4)
    bare = predict_chain(alphas, curves, blocks)
    loaded = predict_chain(alphas, curves, blocks, overhead)
    phi = bare.forwards_per_token
    # Every round at a verifying level is one forward of that level's model; every forward of
    # the last model is one autoregressive step.
    expected = overhead.per_round_s * sum(phi[:-1]) + overhead.per_step_s * phi[-1]
    assert loaded.overhead_per_token == pytest.approx(expected, rel=1e-12)
    assert loaded.cost_per_token == pytest.approx(bare.cost_per_token + expected, rel=1e-12)
    assert loaded.forwards_per_token == bare.forwards_per_token
    assert loaded.speedup == pytest.approx((0.025 + 2e-4) / loaded.cost_per_token)
    alone = predict_chain([], [0.025], [], overhead)
    assert alone.speedup == 1.0 and alone.cost_per_token == pytest.approx(0.025 + 2e-4)


def test_switch_costs_are_paid_on_every_verification_pass_and_on_the_first_k_drafting_steps():
    curves, alphas, blocks = [0.025, 0.007, 0.004], [0.8, 0.7], [4, 3]
    bare = predict_chain(alphas, curves, blocks)
    switched = predict_chain(alphas, curves, blocks, switch_costs=[1e-3, 5e-4, 2e-4])
    phi = bare.forwards_per_token
    # M_1 and M_2 pay on each of their passes (all follow another model's); M_3 once per call of
    # its drafting loop, i.e. once per M_2 pass.
    extra = [1e-3 * phi[0], 5e-4 * phi[1], 2e-4 * phi[1]]
    assert switched.cost_per_token == pytest.approx(bare.cost_per_token + sum(extra), rel=1e-12)
    assert [a - b for a, b in zip(switched.time_per_token, bare.time_per_token)] == pytest.approx(extra, rel=1e-9)
    assert predict_chain([], [0.025], [], switch_costs=[1.0]).cost_per_token == 0.025  # alone: never switches
    with pytest.raises(PolyplanError, match=r"switch_costs\[1\]: must be a finite number of seconds >= 0"):
        predict_chain(alphas, curves, blocks, switch_costs=[1e-3, -1.0, 0.0])
    with pytest.raises(PolyplanError, match="switch_costs: need 3"):
        predict_chain(alphas, curves, blocks, switch_costs=[1e-3, 0.0])
    # Per position after a switch: a verifier pays its 1st-pass excess only; the last model's
    # drafting loop of K_2 = 3 steps pays its first three (the 4th value is never reached).
    tail = predict_chain(alphas, curves, blocks, switch_costs=[[1e-3, 9.0], [5e-4, 9.0], [2e-4, 1e-4, 5e-5, 9.0]])
    extra = [1e-3 * phi[0], 5e-4 * phi[1], (2e-4 + 1e-4 + 5e-5) * phi[1]]
    assert tail.cost_per_token == pytest.approx(bare.cost_per_token + sum(extra), rel=1e-12)


def test_plan_records_overhead_predictions_and_verdicts_for_every_ranked_chain(plan, plan_path):
    chains = plan.alternatives
    assert [c.chain for c in chains][0] == plan.chain
    assert {c.chain for c in chains} == {
        ("vicuna-7b",), ("vicuna-7b", "eagle"), ("vicuna-7b", "vicuna-7b-w4"), ("vicuna-7b", "vicuna-7b-w4", "eagle")
    }
    assert all(c.exact.overhead_per_token_s > 0 for c in chains)
    payload = json.loads(plan_path.read_text())
    assert payload["loop_overhead"] == {"per_step_s": 1e-4, "per_round_s": 3e-4}
    assert plan.loop_overhead == LoopOverhead(1e-4, 3e-4)
    three = next(a for a in payload["alternatives"] if len(a["chain"]) == 3)
    assert three["insertion_verdicts"] == [{"model": "vicuna-7b-w4", "verdict": "helps"}]
    assert profile_overhead(read_profile(EXAMPLE), "greedy") is None


def test_old_plan_without_per_chain_predictions_is_refused(plan, plan_path, tmp_path):
    payload = dict(json.loads(plan_path.read_text()), alternatives=[{"chain": list(plan.chain), "block_sizes": list(plan.block_sizes)}])
    path = tmp_path / "old.json"
    path.write_text(json.dumps(payload))
    with pytest.raises(PolyplanError, match=r"alternatives\[0\]: no predictions recorded .* re-run polyplan recommend"):
        read_plan(path).alternatives


def test_select_chains_gives_each_chain_every_role_it_plays(plan):
    specs = select_chains(plan, top=1)
    roles = {spec.planned.chain: spec.roles for spec in specs}
    assert roles[plan.chain] == (ROLE_RECOMMENDED,)
    second = plan.alternatives[1].chain
    assert len(second) == 2 and roles[second] == (ROLE_ALTERNATIVE, ROLE_TWO_MODEL)
    assert roles[("vicuna-7b",)] == (ROLE_TARGET_ONLY,)
    assert len(specs) == 3 and [s.rank for s in specs] == sorted(s.rank for s in specs)
    assert len(select_chains(plan, top=3)) == 4


def test_top_larger_than_the_alternatives_validates_them_all_and_says_so(plan):
    from polyplan.validation.chain_runs import top_note

    assert select_chains(plan, top=99) == select_chains(plan, top=3)  # a valid plan never fails on a default
    assert top_note(plan, 3) is None
    assert top_note(plan, 4) == "--top 4: plan.json ranks 3 alternative chains; validated all of them"


def _prompts(*lengths):
    return [EncodedPrompt(Prompt(f"p{n}", "user", f"file:{i + 1}"), tuple(range(n))) for i, n in enumerate(lengths)]


def test_fit_prompts_drops_or_truncates_and_names_the_file_when_none_fit():
    kept = fit_prompts(_prompts(5, 50, 10), limit=40, reserve=20, truncate=False, source="p.txt")
    assert [len(p.ids) for p in kept.prompts] == [5, 10] and kept.dropped == ("file:2",)
    cut = fit_prompts(_prompts(5, 50), limit=40, reserve=20, truncate=True, source="builtin")
    assert [p.ids for p in cut.prompts][1] == tuple(range(30, 50)) and cut.truncated == 1
    with pytest.raises(PolyplanError, match=r"^p.txt: no usable prompt: all 2 are longer than the 20 tokens that fit"):
        fit_prompts(_prompts(30, 50), limit=40, reserve=20, truncate=False, source="p.txt")
    assert len(fit_prompts(_prompts(500), limit=None, reserve=20, truncate=False, source="x").prompts) == 1


def _record(chain, repeat, prompt, decode, tokens=(1, 2, 3, 4), levels=1):
    return RunRecord(
        chain=chain, repeat=repeat, prompt=prompt, decode_s=decode, prefill_s=0.01, token_ids=tuple(tokens),
        forward_passes=(2,) * levels, forward_seconds=(decode / 2,) * levels,
        tokens_per_verification=((2, 2),) + ((),) * (levels - 1), tokens_drafted=(4,) + (0,) * (levels - 1),
        tokens_accepted=(2,) + (0,) * (levels - 1),
    )


def test_speedups_are_paired_per_repeat_and_a_lossy_chain_gets_none(plan):
    specs = {spec.planned.chain: spec for spec in select_chains(plan, top=3)}
    target = specs[("vicuna-7b",)]
    base = [_record(0, r, p, 1.0 + r) for r in range(3) for p in range(2)]  # repeat r is (1 + r) slow
    best = specs[plan.chain]
    fast = [_record(1, r, p, (1.0 + r) / 2.5, levels=3) for r in range(3) for p in range(2)]
    result = summarise_chain(best, fast, base, greedy=True)
    assert result.measured.speedup.samples == pytest.approx((2.5, 2.5, 2.5)) and result.measured.speedup.std == pytest.approx(0.0)
    assert result.measured.greedy_equal is True and result.measured_speedup == pytest.approx(2.5)
    assert result.errors.exact == pytest.approx(result.predicted.exact / 2.5 - 1)
    assert result.levels[0].forwards_per_token.measured == pytest.approx(0.5) and result.levels[0].tokens_per_verification.mu == 2.0
    # acceptance as engines report it: 4 tokens per 2 target passes; 6 runs x 4 drafted, 2 accepted
    assert result.tokens_per_target_pass == pytest.approx(2.0)
    assert (result.levels[0].tokens_drafted, result.levels[0].tokens_accepted) == (24, 12)
    two = next(spec for spec in specs.values() if ROLE_TWO_MODEL in spec.roles)
    lossy_runs = [_record(2, r, p, (1.0 + r) / 4, tokens=(1, 2, 9, 4), levels=2) for r in range(3) for p in range(2)]
    lossy = summarise_chain(two, lossy_runs, base, greedy=True)
    assert lossy.measured.greedy_equal is False and lossy.measured_speedup is None and lossy.errors.exact is None
    assert lossy.measured.first_difference == "prompt 1, repeat 1: token 3 differs from target-only decoding"
    alone = summarise_chain(target, base, base, greedy=True)
    head = headline([result, lossy, alone])
    assert head.record.fastest == result.label()  # the lossy chain looks 4x faster but is excluded
    assert head.record.over_two_model is None and head.record.measured_speedup == pytest.approx(2.5)
    # checks: every prediction holds (2.5x measured is outside the Table 1 plan's zero-width interval: that profile
    # has no noise), recommended fastest, greedy output equal (the lossy chain is not), the self-check made nothing
    # worse (undecided: the plan ran none)
    assert [check.name for check in head.checks] == [CHECK_HOLDS, CHECK_FASTEST, CHECK_GREEDY, CHECK_NO_WORSE]
    assert [check.passed for check in head.checks] == [False, True, False, None]
    assert "differs: prompt 1, repeat 1: token 3" in head.find(CHECK_GREEDY).detail
    # diagnostics, not verdicts: the exact model, the checked prediction (none) and re-timed (not re-timed)
    assert [check.passed for check in head.diagnostics][1:] == [None, None]
    sampled = summarise_chain(two, lossy_runs, base, greedy=False)
    assert sampled.measured.greedy_equal is None and sampled.measured_speedup == pytest.approx(4.0)


def test_recommended_within_noise_of_the_fastest_uses_the_paired_ratio(plan):
    specs = select_chains(plan, top=3)
    base = [_record(0, r, 0, 1.0) for r in range(4)]
    noisy = [1 / 2.0, 1 / 2.2, 1 / 1.9, 1 / 2.1]
    rec = summarise_chain(specs[0], [_record(1, r, 0, t, levels=3) for r, t in enumerate(noisy)], base, greedy=True)
    slightly = summarise_chain(specs[1], [_record(2, r, 0, t * 0.99, levels=2) for r, t in enumerate(noisy)], base, greedy=True)
    clearly = summarise_chain(specs[1], [_record(2, r, 0, t * 0.8, levels=2) for r, t in enumerate(noisy)], base, greedy=True)
    alone = summarise_chain(specs[-1], base, base, greedy=True)
    # A constant 1% gap in every repeat is not noise; neither is 25%: the paired ratio has no spread.
    assert headline([rec, slightly, alone]).record.recommended_within_noise is False
    wobble = [t * f for t, f in zip(noisy, (0.97, 1.03, 0.98, 1.02))]
    close = summarise_chain(specs[1], [_record(2, r, 0, t, levels=2) for r, t in enumerate(wobble)], base, greedy=True)
    assert headline([rec, close, alone]).record.recommended_within_noise is True
    assert headline([rec, clearly, alone]).record.fastest == clearly.label()


def test_json_twin_has_the_documented_shape(plan):
    from polyplan.formats.validation_report import ReportSettings, encode_report
    from polyplan.validation.reporting import report_of
    from polyplan.validation.results import Validation

    specs = select_chains(plan, top=1)
    base = [_record(0, 0, 0, 1.0)]
    chains = tuple(
        summarise_chain(spec, [_record(i, 0, 0, 0.5, levels=len(spec.planned.chain))], base, greedy=True)
        for i, spec in enumerate(specs)
    )
    settings = ReportSettings(sampling="greedy", prompts=1, prompt_sources=("x",), dropped_prompts=(), truncated_prompts=0,
                              new_tokens=4, repeats=1, seed=0, device="cpu", plan_device="cpu", plan="plan.json", wall_time_s=1.0)
    validation = Validation(chains=chains, headline=headline(chains), settings=settings, notes=())
    payload = encode_report(report_of(validation))
    json.dumps(payload, allow_nan=False)
    assert set(payload) >= {"report_version", "chains", "headline", "checks", "settings"}
    assert payload["report_version"] == 1
    for entry in payload["chains"]:
        assert set(entry) >= {"chain", "block_sizes", "predicted_speedup", "measured_speedup", "greedy_equal", "recommended"}
        assert set(entry["predicted_speedup"]) == {"exact", "paper", "exact_retimed"}
        assert len(entry["block_sizes"]) == len(entry["chain"]) - 1
        assert entry["tokens_per_target_pass"] == pytest.approx(2.0)
        assert {"tokens_drafted", "tokens_accepted"} <= set(entry["levels"][0])
    assert [entry["recommended"] for entry in payload["chains"]].count(True) == 1
    assert payload["chains"][0]["chain"] == list(plan.chain)


def test_cache_root_prefers_the_option_then_the_environment_and_never_the_package(monkeypatch, tmp_path):
    from polyplan.formats.cache import cache_root

    monkeypatch.delenv("POLYPLAN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "polyplan"
    monkeypatch.setenv("POLYPLAN_CACHE_DIR", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env"
    assert cache_root(tmp_path / "option") == tmp_path / "option"
    monkeypatch.delenv("POLYPLAN_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "polyplan"


def test_validate_runs_with_the_thread_count_the_plan_was_profiled_with():
    from polyplan.profiler.threads import plan_threads

    assert plan_threads("cpu AMD EPYC (2 threads)") == 2 and plan_threads("cpu x (1 thread)") == 1
    assert plan_threads("cuda:0 NVIDIA H100 (3 threads)") is None and plan_threads("the paper's Table 1") is None


def test_held_out_prompts_never_overlap_the_profiling_prompts():
    from polyplan.profiler.prompt_sets import prompt_set, validation_prompt_set

    profiled, held_out = prompt_set(), validation_prompt_set(per_kind=2)
    assert len(profiled.prompts) == 16 and len(held_out.prompts) == 8
    assert not {p.source for p in profiled.prompts} & {p.source for p in held_out.prompts}
    assert [p.kind for p in held_out.prompts[:4]] == ["function_body", "docstring", "repetitive_edit", "long_context"]
