"""Measure switch costs: how much slower a model's first forward pass is after another model ran.

The profiler times T_i(k) in a tight loop of one model, so its weights and Python state stay
in the CPU caches. In a chain the models take turns: every verification pass, and the first
step of each drafting loop, follows another model's pass, which has evicted part of that
state. For each model this measures, at one context length, one-token passes in a tight loop
(warm) and one-token passes each right after a pass of another model (cold: the largest
other model, which evicts the most), interleaved pass by pass, and stores the difference of
the medians (floored at 0) as the model's switch cost in the profile's
`meta["switch_cost"]["models"]` (see `planner.overhead`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch

from polyplan.planner.overhead import SWITCH_KEY
from polyplan.profile import Profile
from polyplan.profiler.latency import synchronizer
from polyplan.profiler.latency import collector_paused


def measure_switch_costs(models: Sequence, tokens: Sequence[int], *, context: int = 128, repeats: int = 15) -> dict[str, float]:
    """Seconds of extra time of each model's first pass after another model's (module docstring).

    Args:
        models: `profiler.run.ProfiledModel`s; their `member` caches are reset afterwards.
        tokens: real token ids, at least `context + 1` of them.
        context: cached tokens before every timed pass.
        repeats: timed passes per model and condition.
    """
    members = {model.name: model.member for model in models}
    sizes = {name: _size(member) for name, member in members.items()}
    device = getattr(models[0].member, "device", torch.device("cpu"))
    stream = torch.as_tensor(list(tokens[: context + 1]), dtype=torch.int64, device=device)  # (context + 1,)
    costs = {}
    try:
        with torch.inference_mode(), collector_paused():
            for member in members.values():
                member.reset()
                member.forward(stream[:context], keep_last=1)
            for name, member in members.items():
                other = max((n for n in members if n != name), key=lambda n: sizes[n], default=None)
                if other is None:
                    costs[name] = 0.0
                    continue
                warm, cold = [], []
                sync = synchronizer(member)
                for _ in range(repeats + 1):  # the first round warms up
                    _pass(members[other], stream, context, synchronizer(members[other]))
                    cold.append(_pass(member, stream, context, sync))
                    warm.append(_pass(member, stream, context, sync))  # right after its own pass
                costs[name] = max(statistics.median(cold[1:]) - statistics.median(warm[1:]), 0.0)
    finally:
        for member in members.values():
            member.reset()
    return costs


def _pass(member, stream: torch.Tensor, context: int, sync) -> float:
    """Seconds of one pass over one new token at `context` cached tokens; the cache is cut back."""
    sync()
    began = time.perf_counter()
    member.forward(stream[context : context + 1], keep_last=1)
    sync()
    elapsed = time.perf_counter() - began
    member.crop(context)
    return elapsed


def _size(member) -> int:
    model = getattr(member, "model", None)
    return sum(p.numel() * p.element_size() for p in model.parameters()) if model is not None else 0


def store_switch_costs(profile: Profile, costs: dict[str, float], context: int) -> None:
    """Write the costs into the profile's meta."""
    profile.meta[SWITCH_KEY] = {
        "models": dict(costs),
        "context_length": context,
        "method": "median 1-token pass right after the largest other model's pass minus median in a tight loop",
    }
