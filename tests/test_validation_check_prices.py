"""The self-check's run priced as its own workload (`validation.check_prices`): each prompt by the
exact model on that prompt's acceptance and context, so that C holds what the model lacks and
not how the check's few prompts and short answers differ from the plan's workload."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from polyplan.formats.profile import AgreementRuns, LatencyPoint, ModelProfile, PairAgreement, Profile, SamplingStats, TargetStream
from polyplan.planner.plan_builder import planned_from_profile
from polyplan.planner.exact.cost_model import ChainSettings
from polyplan.planner.search import evaluate_chain
from polyplan.validation.check_prices import PromptPrice, one_prompt, priced_composition, prompt_prices, stream_index
from polyplan.validation.results import RunRecord
from polyplan.validation.self_check import composition, composition_interval, plan_priced, prompt_priced

LENGTH = 32
EASY, HARD = "1" * LENGTH, "10" * (LENGTH // 2)  # the drafter agrees everywhere / on every other token
PROMPTS = {"easy": (1, 2, 3, 4), "hard": (5, 6, 7, 8), "long": tuple(range(100, 400))}


def _profile(agreement=(EASY, HARD, HARD)) -> Profile:
    # T grows with the context (64 -> 320 cached tokens) and with the width
    target = ModelProfile("target", "fp-t", tuple(LatencyPoint(c, k, (0.010 if c == 64 else 0.014) * (1 + 0.05 * (k - 1)))
                                                  for c in (64, 320) for k in (1, 2, 4, 8)))
    draft = ModelProfile("draft", "fp-d", tuple(LatencyPoint(c, k, 0.001) for c in (64, 320) for k in (1, 2, 4, 8)))
    profile = Profile(target="target", device="synthetic", models=(target, draft), pairs=())
    profile = profile.with_stats("target", "draft", "greedy", SamplingStats(alpha=0.75, engine_alpha=0.75))
    streams = tuple(TargetStream(len(ids), ids + tuple(range(1000, 1000 + LENGTH))) for ids in PROMPTS.values())
    runs = AgreementRuns((PairAgreement("target", "draft", agreement, ("80" * LENGTH,) * 3, ("c0" * LENGTH,) * 3),),
                         new_tokens=LENGTH, streams=streams)
    return dataclasses.replace(profile, acceptance_runs={"greedy": runs})


def _plan(tmp_path, profile):
    return planned_from_profile(profile, tmp_path / "plan.json", profile_path="p.json", resamples=0, k_max=4).plan


def _chain(plan):
    return next(planned for planned in plan.alternatives if planned.chain == ("target", "draft"))


def test_a_check_prompt_is_found_by_its_token_ids():
    profile = _profile()
    assert [stream_index(profile, ids) for ids in PROMPTS.values()] == [0, 1, 2]
    assert stream_index(profile, (1, 2, 3)) is None and stream_index(profile, (9, 9, 9, 9)) is None  # a prefix is not the prompt
    single = one_prompt(profile, 1, LENGTH // 2)
    runs = single.acceptance_runs["greedy"]
    assert runs.pairs[0].agreement == (HARD[:LENGTH // 2],)
    assert runs.pairs[0].confidence == ("80" * (LENGTH // 2),) and runs.pairs[0].confidence_top10 == ("c0" * (LENGTH // 2),)
    assert runs.streams == (TargetStream(4, PROMPTS["hard"] + tuple(range(1000, 1000 + LENGTH // 2))),)
    assert single.stats("target", "draft", "greedy").alpha == pytest.approx(0.5)


def test_each_prompt_is_priced_by_its_own_acceptance_and_context(tmp_path):
    profile = _profile()
    plan = _plan(tmp_path, profile)
    chain = _chain(plan)
    prices = prompt_prices(plan, profile, [chain], list(PROMPTS.values()), LENGTH)[chain.chain]
    easy, hard, long = prices
    assert easy.chain_s < hard.chain_s  # the easy prompt's drafts are all accepted
    assert easy.baseline_s == pytest.approx(hard.baseline_s)  # same context: the same target-only step (control)
    assert long.baseline_s > hard.baseline_s and long.chain_s > hard.chain_s  # a long prompt: the curves read at its context


def test_a_check_the_profile_cannot_price_is_priced_by_the_plan(tmp_path):
    profile = _profile()
    plan = _plan(tmp_path, profile)
    assert prompt_prices(plan, profile, [_chain(plan)], [(9, 9, 9, 9)], LENGTH) is None  # a prompt the profile never ran
    assert prompt_prices(dataclasses.replace(plan, sampling="temperature=1"), profile, [_chain(plan)], [PROMPTS["easy"]], LENGTH) is None


def _run(chain: int, prompt: int, seconds: float, tokens: int = LENGTH) -> RunRecord:
    return RunRecord(chain, 0, prompt, seconds, 0.0, tuple(range(tokens)), (1,), (seconds,), ((),), (0,), (0,))


def test_c_is_one_when_every_prompt_runs_as_priced_and_moves_with_a_slower_chain():
    prices = {0: PromptPrice(chain_s=0.004, baseline_s=0.010), 1: PromptPrice(chain_s=0.008, baseline_s=0.012)}
    base = [_run(1, 0, LENGTH * 0.010), _run(1, 1, LENGTH * 0.012)]
    as_priced = [_run(0, 0, LENGTH * 0.004), _run(0, 1, LENGTH * 0.008)]
    assert priced_composition(prices, as_priced, base) == pytest.approx(1.0)  # negative control
    slower = [_run(0, 0, LENGTH * 0.004 * 1.2), _run(0, 1, LENGTH * 0.008 * 1.2)]
    assert priced_composition(prices, slower, base) == pytest.approx(1.2)
    faster_base = [_run(1, p, run.decode_s * 0.8) for p, run in enumerate(base)]  # target-only decoding faster than priced
    assert priced_composition(prices, as_priced, faster_base) == pytest.approx(1.25)


def test_a_check_on_easier_prompts_than_the_plans_is_no_model_error(tmp_path):
    """The check runs only the easy prompt, exactly as the exact model prices that prompt: priced
    by prompt, C = 1; priced by the plan (its seconds per pass over both prompts' workload), the
    easy prompt's wider passes read as a chain slower than planned (the bias this module removes)."""
    profile = _profile()
    plan = _plan(tmp_path, profile)
    chain = _chain(plan)
    reading = ChainSettings(context_length=len(PROMPTS["easy"]) + LENGTH // 2, overhead=plan.loop_overhead, acceptance_model="runs")
    predicted = evaluate_chain(one_prompt(profile, 0, LENGTH), chain.chain, chain.block_sizes, reading, draft_policy=chain.draft_policy).exact
    passes = tuple(round(f * LENGTH) for f in predicted.forwards_per_token)
    seconds = tuple(t * LENGTH for t in predicted.time_per_token)
    runs = [RunRecord(0, 0, 0, predicted.cost_per_token * LENGTH, 0.0, tuple(range(LENGTH)), passes, seconds, ((), ()), (0, 0), (0, 0))]
    step = predicted.speedup * predicted.cost_per_token
    base = [RunRecord(1, 0, 0, step * LENGTH, 0.0, tuple(range(LENGTH)), (LENGTH,), (step * LENGTH,), ((),), (0,), (0,))]
    prices = prompt_prices(plan, profile, [chain], [PROMPTS["easy"]], LENGTH)[chain.chain]
    rng = np.random.default_rng(0)
    assert composition_interval(prompt_priced(prices), runs, base, rng=rng)[0] == pytest.approx(1.0, abs=0.02)
    alone = next(planned for planned in plan.alternatives if len(planned.chain) == 1)
    by_plan = composition(chain, runs, base, alone.exact.time_per_token_s[0] + alone.exact.overhead_per_token_s)
    assert abs(by_plan - 1.0) > 0.05
    assert composition_interval(plan_priced(chain, alone.exact.time_per_token_s[0]), runs, base, rng=rng)[0] == pytest.approx(by_plan)
