"""Measure switch costs: how much slower a model's first passes are after another model ran.

The profiler times T_i(k) in a tight loop of one model, whose weights and Python state stay in
the CPU caches. In a chain the models take turns, and a pass after another model's pays for what
that pass evicted, less with each pass after it (docs/profiling.md, "What it measures"). For each
model this times, at one context length, rounds of: one pass of the largest other model, then
`after` one-token passes of the model (cold), then as many again (warm). It stores, per position j
after the switch, median(cold_j) − median(warm), floored at 0, in the profile's `switch_costs`
(see `planner.exact.overhead`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace

import torch

from polyplan.formats.profile import Profile, SwitchCosts
from polyplan.profiler.forward_timing import collector_paused, synchronizer, timed_pass

SWITCH_PASSES_AFTER = 4  # positions after a switch that are timed; later passes count as warm
SWITCH_REPEATS = 15  # timed rounds per model (after one that warms up)


def measure_switch_costs(
    models: Sequence, tokens: Sequence[int], *, context: int = 128, repeats: int = SWITCH_REPEATS, after: int = SWITCH_PASSES_AFTER
) -> dict[str, tuple[float, ...]]:
    """Extra seconds of each model's 1st … `after`-th pass after another model's (module docstring),
    timed `repeats` rounds per model over `context` cached tokens of `tokens` (at least `context + 1`
    real ids). `models`: `models.fingerprints.ProfiledModel`s, whose caches are reset afterwards."""
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
                    costs[name] = (0.0,)
                    continue
                cold: list[list[float]] = [[] for _ in range(after)]
                warm: list[float] = []
                sync = synchronizer(member)
                for round_index in range(repeats + 1):  # the first round warms up
                    timed_pass(members[other], stream[context:], synchronizer(members[other]))
                    times = [timed_pass(member, stream[context:], sync) for _ in range(2 * after)]
                    if round_index > 0:
                        for position in range(after):
                            cold[position].append(times[position])
                        warm.extend(times[after:])
                base = statistics.median(warm)
                costs[name] = tuple(max(statistics.median(samples) - base, 0.0) for samples in cold)
    finally:
        for member in members.values():
            member.reset()
    return costs


def _size(member) -> int:
    model = getattr(member, "model", None)
    return sum(p.numel() * p.element_size() for p in model.parameters()) if model is not None else 0


def store_switch_costs(
    profile: Profile, costs: dict[str, tuple[float, ...]], context: int, fingerprint: str | None = None
) -> Profile:
    """`profile` with the costs, and the `fingerprint` of what they were measured on."""
    return replace(profile, switch_costs=SwitchCosts(
        models={name: tuple(cost) for name, cost in costs.items()},
        context_length=context,
        method="per position j after the largest other model's pass: median 1-token pass j minus the median "
        "of as many passes after those (tight loop)",
        fingerprint=fingerprint,
    ))
