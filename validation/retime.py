"""Latency re-timed inside a validation run, and the exact model's prediction from it.

On a shared machine the load when profiling and during validation differ, and a chain's measured
speed follows today's T_i(k). So `polyplan validate` also times every model's forward passes
during the run, interleaved with the chains (each model prefilled with the prompt and half the
target's continuation, then one pass over k of the next tokens for each k), and evaluates the same
exact model on curves made of those passes' medians. Nothing of a chain's own timing enters it:
it separates "the model is wrong" from "the machine changed since profiling".
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from polyplan.decoder.member import ChainMember
from polyplan.formats.overhead import LoopOverhead
from polyplan.planner.exact.runs import with_agreement_alphas
from polyplan.planner.exact.cost_model import ChainSettings
from polyplan.planner.search import evaluate_chain
from polyplan.formats.profile import AgreementRuns, LatencyPoint, Profile
from polyplan.profiler.forward_timing import timed_pass

_CALIBRATION_KS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class PassTiming:
    """One timed forward pass of `model` over `k` new tokens with `context` tokens cached."""

    model: str
    k: int
    context: int
    seconds: float


def time_passes(
    members: Mapping[str, ChainMember], context: torch.Tensor, new: torch.Tensor, sync, ks: Sequence[int] = _CALIBRATION_KS
) -> list[PassTiming]:
    """Prefill each member with `context` (L,), then time one pass over new[:k] per k (crop after each)."""
    timings = []
    for name, member in members.items():
        member.reset()
        member.forward(context, keep_last=1)
        for k in ks:
            if k <= new.shape[0]:
                timings.append(PassTiming(name, k, int(context.shape[0]), timed_pass(member, new[:k], sync)))
        member.reset()
    return timings


def retimed_profile(profile: Profile, timings: Sequence[PassTiming]) -> Profile:
    """A copy of `profile` whose latency curves are the medians of `timings` (one context: the
    median context of the passes); models without timings keep their curves."""
    context = int(statistics.median(t.context for t in timings))
    models = []
    for model in profile.models:
        mine = [t for t in timings if t.model == model.name]
        ks = sorted({t.k for t in mine})
        if ks:
            model = dataclasses.replace(model, latency=tuple(
                LatencyPoint(context_length=context, k=k, median_s=statistics.median(t.seconds for t in mine if t.k == k),
                             repeats=sum(t.k == k for t in mine))
                for k in ks
            ))
        models.append(model)
    return dataclasses.replace(profile, models=tuple(models))


def exact_speedups(
    profile: Profile,
    chains: Sequence[tuple[tuple[str, ...], tuple[int, ...]]],
    *,
    sampling: str,
    overhead: LoopOverhead | None,
    acceptance_model: str,
) -> dict[tuple[str, ...], float]:
    """The exact model's speedup of each (chain, block sizes[, the last level's draft policy]) on
    `profile` (`retimed_profile` or `reaccepted_profile`)."""
    model = "runs" if acceptance_model == "runs" else "iid"
    return {
        chain: evaluate_chain(profile, chain, blocks, ChainSettings(sampling, None, overhead, model),
                              draft_policy=rest[0] if rest else None).exact_speedup
        for chain, blocks, *rest in chains
    }


def reaccepted_profile(profile: Profile, timings: Sequence[PassTiming], agreement: AgreementRuns) -> Profile:
    """The re-timed profile (`retimed_profile`) with the greedy acceptance measured on the
    validation's own prompts: `agreement` is what `profiler.agreement_runs.measure_agreement` returns; it
    replaces the profile's agreement sequences, and each pair's α becomes its agreement rate
    there (what the i.i.d. reading uses). Pairs it does not cover keep the profile's values. The
    exact model on it leaves only its own error (the loop, switches, independence of rounds) and
    the validation's noise."""
    revised = retimed_profile(profile, timings)
    revised = dataclasses.replace(revised, acceptance_runs={**revised.acceptance_runs, "greedy": agreement})
    return with_agreement_alphas(revised, agreement.pairs)

