"""The exact model's price of the self-check's own run, prompt by prompt (docs/cost-model.md,
"The self-check").

recommend's self-check (`validation.self_check`) runs a few chains on a few profiling prompts for
a few dozen tokens and fits from it the term C by which the plan's predictions are wrong on this
machine. The plan's predictions are for another workload (every profiling prompt, answers of the
plan's length, the latency curves at its typical context); a check compared with them would read
the difference of workloads as model error. So the check is priced as its own workload: for each
prompt it ran, the exact model with that prompt's measured acceptance alone (cut at the check's
answer length: `planner.exact.runs.at_length`) and its latency curves read at that prompt's mean
context (its length plus half the answer). Over a set of prompts D (all, or a bootstrap draw)

    C(D) = [Σ_D N_j β̂_j / Σ_D b_j] · [Σ_D t_j / Σ_D N_j τ̂_j]

with N_j the tokens decoded, τ̂_j and β̂_j the chain's and target-only decoding's predicted seconds
per token, t_j and b_j their measured decode seconds: the predicted speedup on D over the measured
one. A prompt is matched to the profile's stream by its token ids; a check whose prompts the
profile's greedy runs do not cover is priced by the plan's seconds per pass instead
(`validation.self_check.composition`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from polyplan.formats.errors import PolyplanError
from polyplan.formats.plan import PlanFile, PlannedChain
from polyplan.formats.profile import Profile
from polyplan.planner.exact.runs import at_length, on_prompts
from polyplan.planner.exact.cost_model import ChainSettings
from polyplan.planner.search import evaluate_chain

GREEDY = "greedy"


@dataclass(frozen=True)
class PromptPrice:
    """The exact model's seconds per token on one check prompt: the chain's (τ̂) and target-only
    decoding's (β̂)."""

    chain_s: float
    baseline_s: float


def stream_index(profile: Profile, prompt_ids: Sequence[int]) -> int | None:
    """The index of the profile's greedy stream (and agreement runs) measured on `prompt_ids`
    (None: none was)."""
    entry = profile.acceptance_runs.get(GREEDY)
    if entry is None:
        return None
    wanted = tuple(prompt_ids)
    for index, stream in enumerate(entry.streams):
        if stream.ids[:stream.prompt_tokens] == wanted:
            return index
    return None


def one_prompt(profile: Profile, index: int, new_tokens: int) -> Profile:
    """`profile` with its greedy acceptance reduced to the prompt at `index`, cut at `new_tokens`."""
    return at_length(on_prompts(profile, [index]), new_tokens)


def prompt_prices(plan: PlanFile, profile: Profile, chains: Sequence[PlannedChain], prompts: Sequence[Sequence[int]],
                  new_tokens: int) -> dict[tuple[str, ...], tuple[PromptPrice, ...]] | None:
    """Per chain, the `PromptPrice` of each of `prompts` (module docstring); None when the plan is
    not greedy or a prompt has no stream in the profile (the check is then priced by the plan)."""
    if plan.sampling != GREEDY:
        return None
    indices = [stream_index(profile, ids) for ids in prompts]
    if any(index is None for index in indices):
        return None
    prices: dict[tuple[str, ...], list[PromptPrice]] = {planned.chain: [] for planned in chains}
    for ids, index in zip(prompts, indices):
        single = one_prompt(profile, index, new_tokens)
        context = len(ids) + new_tokens // 2
        for planned in chains:
            try:
                predicted = evaluate_chain(single, planned.chain, planned.block_sizes,
                                           ChainSettings(GREEDY, context, plan.loop_overhead, "runs"),
                                           draft_policy=planned.draft_policy).exact
            except PolyplanError:
                return None  # a chain the one-prompt profile cannot price (a pair without runs): price by the plan
            prices[planned.chain].append(PromptPrice(predicted.cost_per_token, predicted.speedup * predicted.cost_per_token))
    return {chain: tuple(values) for chain, values in prices.items()}


def priced_composition(prices: Mapping[int, PromptPrice], chain_runs: Sequence, baseline_runs: Sequence) -> float:
    """C(D) of the module docstring over the prompts of `chain_runs` (validation.results.RunRecord;
    `prices` by prompt index) and the target-only runs of the same cells."""
    predicted_chain = sum(len(run.token_ids) * prices[run.prompt].chain_s for run in chain_runs)
    predicted_baseline = sum(len(run.token_ids) * prices[run.prompt].baseline_s for run in baseline_runs)
    return (predicted_baseline / sum(run.decode_s for run in baseline_runs)) * (
        sum(run.decode_s for run in chain_runs) / predicted_chain)
