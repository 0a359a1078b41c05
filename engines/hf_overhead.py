"""Measure HF transformers `generate`'s own loop overhead (`planner.exact.engine_overhead`), which
the HF export and `bench peers` read: both compare HF assisted with HF target-only `generate`,
so both pay HF's loop, not polyplan's. docs/engines.md, "HF generate's own loop".

A call's loop time is its wall time minus the time inside the models' forward calls (forward
hooks, device-synchronised). Target-only calls run at two lengths (`min_new_tokens` = the maximum,
so EOS never cuts one short); assisted calls with the cheapest drafter HF can load at K = 1, 2
and 4. Configurations are interleaved in a rotated order after one untimed call each, with
the reference workload timed once a round as the machine's floor and the cyclic collector paused;
the medians are fitted to calls × per_call + steps × per_step + rounds × per_round.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from polyplan.engines.hf_generate import configure_assistant, transformers_errors_only
from polyplan.planner.exact.engine_overhead import (
    HF, EngineOverhead, LoopCounts, engine_overhead_entry, fit_engine_overhead, stored_fingerprint,
)
from polyplan.formats.profile import Profile
from polyplan.formats.sampling import SamplingMode
from polyplan.models.hashing import fingerprint_settings
from polyplan.profiler.forward_timing import collector_paused, reference_workload, synchronizer
from polyplan.profiler.stats import Spread, robust_spread

_BLOCK_SIZES = (1, 2, 4)
_METHOD = (
    "HF generate wall time minus the time inside the models' forward calls (forward hooks): target-only at "
    "two lengths and assisted with the cheapest HF-loadable drafter at K = 1, 2, 4, interleaved; medians fitted "
    "per call, per step and per round (planner.exact.engine_overhead)"
)


@dataclass(frozen=True)
class _HFOverheadMeasurement:
    """The fitted overhead, each configuration's median counts, loop seconds and seconds inside
    the target's and the drafter's forward calls (for comparison with the profile's curves), and
    the floor."""

    overhead: EngineOverhead
    labels: tuple[str, ...]
    counts: tuple[LoopCounts, ...]
    loop_seconds: tuple[float, ...]
    forward_seconds: tuple[tuple[float, float], ...]
    floor: Spread


class ForwardClock:
    """Forward calls of one HF model and the seconds spent inside them (device-synchronised)."""

    def __init__(self, model, sync) -> None:
        self.calls = 0
        self.seconds = 0.0
        self._sync = sync
        self._began = 0.0
        self._handles = (model.register_forward_pre_hook(self._enter), model.register_forward_hook(self._leave))

    def _enter(self, module, inputs) -> None:
        self._sync()
        self._began = time.perf_counter()

    def _leave(self, module, inputs, output) -> None:
        self._sync()
        self.seconds += time.perf_counter() - self._began
        self.calls += 1

    def take(self) -> tuple[int, float]:
        calls, seconds = self.calls, self.seconds
        self.calls, self.seconds = 0, 0.0
        return calls, seconds

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def _sampling_arguments(temperature: float) -> dict:
    return {"do_sample": False} if temperature == 0 else {"do_sample": True, "temperature": temperature}


def _measure_hf_overhead(target, drafter, prompt: Sequence[int], *, temperature: float = 0.0, tokens: int = 64,
                         repeats: int = 3, seed: int = 0, sync=lambda: None) -> _HFOverheadMeasurement:
    """HF `generate`'s per-call, per-step and per-round costs (module docstring) for HF models
    `target` and `drafter` sharing a tokenizer on one device, every call started from `prompt`:
    greedy at `temperature` 0, else HF's sampling, seeded (torch's global generators restored
    after); `tokens` (>= 2) new tokens in the longer target-only and every assisted call;
    `repeats` timed calls per configuration; `sync` waits for an asynchronous device."""
    if tokens < 2 or repeats < 1:
        raise ValueError("_measure_hf_overhead: tokens >= 2 and repeats >= 1")
    ids = torch.tensor([list(prompt)], device=target.device)
    pad = target.generation_config.pad_token_id
    base = dict(attention_mask=torch.ones_like(ids), pad_token_id=0 if pad is None else pad, **_sampling_arguments(temperature))
    configurations = [("target-only", tokens // 2, None), ("target-only", tokens, None)]
    configurations += [("assisted", tokens, k) for k in _BLOCK_SIZES]
    target_clock, drafter_clock = ForwardClock(target, sync), ForwardClock(drafter, sync)
    saved = {name: getattr(drafter.generation_config, name, None) for name in ("num_assistant_tokens",
             "num_assistant_tokens_schedule", "assistant_confidence_threshold")}
    samples: list[list[tuple[LoopCounts, float, tuple[float, float]]]] = [[] for _ in configurations]
    floor: list[float] = []
    workload = reference_workload(target.device)

    def call(index: int) -> tuple[LoopCounts, float, tuple[float, float]]:
        _, new, k = configurations[index]
        extra = {}
        if k is not None:
            configure_assistant(drafter, k)
            extra["assistant_model"] = drafter
        with transformers_errors_only():  # outside the timed span
            sync()
            began = time.perf_counter()
            target.generate(ids, max_new_tokens=new, min_new_tokens=new, **base, **extra)
            sync()
            wall = time.perf_counter() - began
        target_calls, target_s = target_clock.take()
        drafter_calls, drafter_s = drafter_clock.take()
        if k is None:
            return LoopCounts(1, target_calls, 0), wall - target_s, (target_s, drafter_s)
        return LoopCounts(1, drafter_calls, target_calls), wall - target_s - drafter_s, (target_s, drafter_s)

    try:
        rng_devices = [ids.device] if ids.device.type == "cuda" else []
        with torch.random.fork_rng(devices=rng_devices), torch.inference_mode(), collector_paused():
            torch.manual_seed(seed)
            for index in range(len(configurations)):  # warm-up
                call(index)
            for repeat in range(repeats):
                began = time.perf_counter()
                workload()
                floor.append(time.perf_counter() - began)
                for step in range(len(configurations)):
                    index = (step + repeat) % len(configurations)
                    samples[index].append(call(index))
    finally:
        target_clock.remove()
        drafter_clock.remove()
        for name, value in saved.items():
            setattr(drafter.generation_config, name, value)
    medians = tuple(statistics.median(seconds for _, seconds, _ in rows) for rows in samples)
    typical = tuple(LoopCounts(*(round(statistics.median(getattr(row, field) for row, _, _ in rows))
                                 for field in ("calls", "steps", "rounds"))) for rows in samples)
    labels = tuple(f"{kind} {new} tokens" + ("" if k is None else f" K={k}") for kind, new, k in configurations)
    inside = tuple(tuple(statistics.median(pair[j] for _, _, pair in rows) for j in (0, 1)) for rows in samples)
    return _HFOverheadMeasurement(fit_engine_overhead(typical, medians), labels, typical, medians, inside, robust_spread(floor))


def _cheapest_hf_drafter(profile: Profile, models: Sequence):
    """The `models.fingerprints.ProfiledModel` of the fastest drafter (T(1) in the profile) that HF can
    use as an assistant as it is (an HF model with the target's logit count and config
    vocabulary: a reduced-vocabulary head would need HF's universal assisted decoding), else None."""
    target = models[0].member

    def usable(member) -> bool:
        model = getattr(member, "model", None)
        return (
            hasattr(model, "generate")
            and getattr(member, "vocab_size", None) == getattr(target, "vocab_size", None)
            and _config_vocab(model) == _config_vocab(target.model)
        )

    hf = [m for m in models[1:] if usable(m.member)]
    if not hf:
        return None
    names = set(profile.model_names())
    return min(hf, key=lambda m: _t1(profile, m.name) if m.name in names else float("inf"))


def _config_vocab(model) -> int | None:
    return getattr(model.config.get_text_config(decoder=True), "vocab_size", None)


def _t1(profile: Profile, name: str) -> float:
    points = [p for p in profile.model(name).latency if p.k == 1]
    return min(p.median_s for p in points) if points else float("inf")


def ensure_hf_overhead(
    profile: Profile, models: Sequence, prompt: Sequence[int], temperatures: Sequence[float], *, tokens: int = 64, repeats: int = 3
) -> tuple[Profile, int]:
    """`profile` with HF's overhead in `engine_overhead["hf"]` for every sampling mode whose
    entry is missing or was measured on other models or settings (the entry's fingerprint);
    entries still valid are kept. Also how many were measured (0 also when the target or
    every drafter is not an HF model: the export then says it used polyplan's loop)."""
    import transformers

    target = models[0]
    if not hasattr(getattr(target.member, "model", None), "generate"):
        return profile, 0
    drafter = _cheapest_hf_drafter(profile, models)
    if drafter is None:
        return profile, 0
    prompt = list(prompt)[-64:]
    measured = 0
    table = dict(profile.engine_overhead.get(HF, {}))
    for temperature in temperatures:
        key = SamplingMode(temperature).key
        fingerprint = fingerprint_settings(
            "hf-overhead", target.fingerprint, drafter.fingerprint, prompt, temperature, tokens, repeats,
            torch.get_num_threads(), transformers.__version__, _BLOCK_SIZES,
        )
        if stored_fingerprint(profile, HF, key) == fingerprint:
            continue
        result = _measure_hf_overhead(
            target.member.model, drafter.member.model, prompt, temperature=temperature, tokens=tokens, repeats=repeats,
            sync=synchronizer(target.member),
        )
        table[key] = engine_overhead_entry(result.overhead, fingerprint=fingerprint, details={
            "drafter": drafter.name,
            "configurations": {
                label: {"calls": c.calls, "steps": c.steps, "rounds": c.rounds, "loop_s": s,
                        "target_forward_s": inside[0], "drafter_forward_s": inside[1]}
                for label, c, s, inside in zip(result.labels, result.counts, result.loop_seconds, result.forward_seconds)
            },
            "reference_median_s": result.floor.median,
            "reference_relative_iqr": result.floor.relative_iqr,
            "threads": torch.get_num_threads(),
            "transformers": transformers.__version__,
            "method": _METHOD,
        })
        measured += 1
    return replace(profile, engine_overhead={**profile.engine_overhead, HF: table}), measured
