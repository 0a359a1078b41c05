"""Latency curves: T_i(k), one forward pass over k new tokens with a warm KV cache, and prefill.

After a prefill of c real tokens (timed on its own), each timed pass feeds k new tokens and asks
for all k rows of logits, as a verification does; the cache is cropped back outside the timed
region. Block sizes are interleaved within each round, warm-up rounds are never timed, the garbage
collector is paused and the device synchronised around each pass. Each round also times a fixed
*reference workload*, the machine's noise floor; while it is noisier than `max_noise`, more rounds
are timed within a budget, unless the models' own timings show the floor overstating their noise
(`medians_settled`). Each point keeps the median and IQR inside Tukey's far-out fences
(`profiler.stats.robust_spread`). docs/profiling.md, "What it measures".
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from polyplan.decoder.member import ChainMember
from polyplan.formats.errors import PolyplanError
from polyplan.profiler.stats import Spread, robust_spread
from polyplan.profiler.threads import available_cpus, machine_load

_DEFAULT_KS = (1, 2, 3, 4, 6, 8, 12, 16)
DEFAULT_CONTEXT_LENGTHS = (128, 384)
_MAX_ROUNDS_FACTOR = 10  # extra rounds for a noisy floor stop at this many times the planned repeats, budget or not
# The floor stands for the models' own noise only while it is about as noisy as they are: where its
# IQR/median is more than this many times the noisiest model's, the models' own spread judges the
# extra rounds (`medians_settled`; docs/profiling.md, "What the floor measures").
FLOOR_OVERSTATES = 3.0
# Timed prefills stop early, once at least two are timed, when they add up to this many seconds: a
# prefill that long varies by a few percent, and more repeats of a large model's long prefill cost
# tens of seconds that buy nothing the two-pass mean lacks (docs/profiling.md, "What it measures").
_PREFILL_ENOUGH_S = 2.0


@dataclass(frozen=True)
class LatencySettings:
    """How latency curves are measured.

    Attributes:
        ks: new tokens per timed forward pass (T_i(k) for each).
        context_lengths: cached tokens before the timed pass (two or more show how T grows).
        repeats, warmup: timed and untimed rounds per context length, over every k.
        prefill_repeats: timed prefills per context length (after one untimed prefill), at most:
            they stop at two once those add up to `_PREFILL_ENOUGH_S` seconds.
        max_noise: the largest acceptable IQR/median of the reference workload; above it,
            more rounds are timed, for at most `noise_budget_s` extra seconds per context length,
            unless the floor overstates the models' own noise and their medians are already as
            precise as `repeats` rounds at `max_noise` make them (`medians_settled`).
    """

    ks: tuple[int, ...] = _DEFAULT_KS
    context_lengths: tuple[int, ...] = DEFAULT_CONTEXT_LENGTHS
    repeats: int = 15
    warmup: int = 3
    prefill_repeats: int = 5
    max_noise: float = 0.10
    noise_budget_s: float = 20.0

    def __post_init__(self) -> None:
        _positive_ints(self.ks, "ks")
        _positive_ints(self.context_lengths, "context_lengths")
        for name in ("repeats", "prefill_repeats"):
            if getattr(self, name) < 1:
                raise PolyplanError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise PolyplanError(f"warmup: must be >= 0, got {self.warmup}")
        if not self.max_noise > 0:
            raise PolyplanError(f"max_noise: must be > 0, got {self.max_noise}")
        if not 0 <= self.noise_budget_s < float("inf"):
            raise PolyplanError(f"noise_budget_s: must be a finite number >= 0, got {self.noise_budget_s}")

    @property
    def tokens_needed(self) -> int:
        """Length of the token stream `measure_latency` reads (longest context + largest k)."""
        return max(self.context_lengths) + max(self.ks)


@dataclass(frozen=True)
class TimedPoint:
    """T(k) at one context length: the spread of the repeated timings (seconds)."""

    context_length: int
    k: int
    time: Spread


@dataclass(frozen=True)
class PrefillTiming:
    """Time to process `context_length` prompt tokens from an empty cache (seconds)."""

    context_length: int
    time: Spread


@dataclass(frozen=True)
class LatencyMeasurement:
    """Every timed point of one member, its prefill times, and the reference workload's
    timings taken in the same rounds (None when not measured). `budget_exhausted`: the floor
    was still above `max_noise`, and the medians not settled, when the extra rounds' budget ran out."""

    points: tuple[TimedPoint, ...]
    prefill: tuple[PrefillTiming, ...]
    reference: Spread | None = None
    budget_exhausted: bool = False
    threads: int | None = None  # torch's CPU threads while timing
    cpus: int | None = None  # CPU cores this process may run on
    load_average: float | None = None  # `profiler.threads.machine_load` when timing began (None: unknown)

    def at(self, context_length: int, k: int) -> Spread:
        """The timing at (`context_length`, `k`)."""
        for point in self.points:
            if point.context_length == context_length and point.k == k:
                return point.time
        raise KeyError((context_length, k))


def synchronizer(member: ChainMember) -> Callable[[], None]:
    """A function that waits for the member's device to finish queued work (no-op on CPU)."""
    device = getattr(member, "device", None)
    if device is None:
        return lambda: None
    device = torch.device(device)
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    if device.type == "mps":
        return torch.mps.synchronize
    return lambda: None


def measure_latency(
    member: ChainMember,
    tokens: Sequence[int],
    settings: LatencySettings,
    *,
    clock: Callable[[], float] = time.perf_counter,
    workload: Callable[[], None] | None = None,
) -> LatencyMeasurement:
    """Time `member`'s forward passes (module docstring), its cache reset before and after, over
    `tokens` (at least `settings.tokens_needed` real ids: the first c the context, the next k the
    new tokens). `clock`: the timer (tests inject one); `workload`: the reference workload
    (default: `reference_workload` on the member's device).

    Raises:
        PolyplanError: the token stream is too short, or a context does not fit the member.
    """
    return measure_latencies([member], tokens, settings, clock=clock, workload=workload)[0]


def measure_latencies(
    members: Sequence[ChainMember],
    tokens: Sequence[int],
    settings: LatencySettings,
    *,
    clock: Callable[[], float] = time.perf_counter,
    workload: Callable[[], None] | None = None,
) -> tuple[LatencyMeasurement, ...]:
    """Time several members' forward passes *interleaved*, as `measure_latency` times one: in
    every round each member (in a rotated order) runs one untimed pass to bring its weights back
    into the caches, then its timed passes over every k. A lone member takes that pass too: the
    round's reference workload and its own widest passes evict what its first, narrowest timed
    pass would find, so without it T(1) reads the refill. Background load then falls on every
    curve alike, so the ratios of their T's, which decide the chain, hold while the load changes.
    One measurement per member, in order, all with the same floor."""
    if not members:
        raise PolyplanError("latency: no model to time")
    if len(tokens) < settings.tokens_needed:
        raise PolyplanError(
            f"latency: need {settings.tokens_needed} prompt tokens for context "
            f"{max(settings.context_lengths)} + k {max(settings.ks)}, got {len(tokens)}"
        )
    for member in members:
        limit = member.max_context
        if limit is not None and settings.tokens_needed > limit:
            raise PolyplanError(
                f"context_lengths: {max(settings.context_lengths)} cached + {max(settings.ks)} new tokens is longer "
                f"than the context of {member.name!r} ({limit} tokens)"
            )
    load_average = machine_load()
    ids = list(tokens[: settings.tokens_needed])
    streams = [torch.as_tensor(ids, dtype=torch.int64, device=getattr(m, "device", torch.device("cpu"))) for m in members]  # (L,)
    syncs = [synchronizer(member) for member in members]
    points: list[list[TimedPoint]] = [[] for _ in members]
    prefill: list[list[PrefillTiming]] = [[] for _ in members]
    reference: list[float] = []
    exhausted = False
    workload = workload if workload is not None else reference_workload(getattr(members[0], "device", torch.device("cpu")))
    try:
        with torch.inference_mode(), collector_paused():
            for context in settings.context_lengths:
                for i, member in enumerate(members):
                    prefill[i].append(PrefillTiming(context, _time_prefill(member, streams[i][:context], settings, syncs[i], clock)))
                samples, reference_samples, noisy = _time_steps(members, streams, context, settings, syncs, clock, workload)
                for i in range(len(members)):
                    points[i].extend(TimedPoint(context, k, robust_spread(samples[i][k])) for k in settings.ks)
                reference.extend(reference_samples)
                exhausted = exhausted or noisy
    finally:
        for member in members:
            member.reset()
    floor = robust_spread(reference)
    threads, cpus = torch.get_num_threads(), available_cpus()
    return tuple(
        LatencyMeasurement(tuple(points[i]), tuple(prefill[i]), floor, exhausted, threads, cpus, load_average)
        for i in range(len(members))
    )


# The reference workload's matrix side per device type: on a GPU a small product times
# kernel-launch jitter rather than interference, so it is sized for the arithmetic to dominate
# the launches (docs/profiling.md, "What it measures").
REFERENCE_SIZE = {"cpu": 128, "cuda": 1024}  # other devices: the CPU's (not measured there)


def reference_workload(device: torch.device | str, size: int | None = None, products: int = 8) -> Callable[[], None]:
    """A fixed amount of arithmetic on `device`: `products` chained (size x size) matrix
    products, `size` by the device's type (`REFERENCE_SIZE`) unless given. Same inputs every call."""
    device = torch.device(device)
    size = size if size is not None else REFERENCE_SIZE.get(device.type, REFERENCE_SIZE["cpu"])
    generator = torch.Generator().manual_seed(0)
    left = torch.randn(size, size, generator=generator).div_(size**0.5).to(device)
    right = torch.randn(size, size, generator=generator).div_(size**0.5).to(device)

    def run() -> None:
        product = left
        for _ in range(products):
            product = product @ right

    return run


def _time_prefill(member, context_ids, settings, sync, clock) -> Spread:
    """One untimed prefill, then up to `settings.prefill_repeats` timed ones: fewer (never under
    two) once the timed ones add up to `_PREFILL_ENOUGH_S`."""
    times = []
    for repeat in range(settings.prefill_repeats + 1):  # the first one is the warm-up
        member.reset()
        sync()
        began = clock()
        member.forward(context_ids, keep_last=1)
        sync()
        if repeat > 0:
            times.append(clock() - began)
            if len(times) >= 2 and sum(times) >= _PREFILL_ENOUGH_S:
                break
    return robust_spread(times)


def _time_steps(members, streams, context, settings, syncs, clock, workload) -> tuple[list[dict[int, list[float]]], list[float], bool]:
    """Each member's cache holds `context` tokens on entry (the prefill); times forward passes of
    k tokens, member after member within a round (rotated), and the reference `workload` once
    per round; after `settings.repeats` rounds, goes on while the floor is noisier than
    `settings.max_noise`, the medians are not settled (`medians_settled`) and the budget lasts.
    Returns (per member: seconds per k, reference seconds, whether the budget ran out with the
    floor still noisy)."""
    for member, stream in zip(members, streams):
        if member.cache_length != context:
            member.reset()
            member.forward(stream[:context], keep_last=1)
    samples: list[dict[int, list[float]]] = [{k: [] for k in settings.ks} for _ in members]
    reference: list[float] = []
    round_index, extra_began = 0, None
    while True:
        if round_index >= settings.warmup + settings.repeats:
            floor = robust_spread(reference).relative_iqr
            if not floor > settings.max_noise:  # NaN (a zero median): stop
                return samples, reference, False
            if medians_settled(samples, floor, settings.max_noise, settings.repeats):
                return samples, reference, False
            if round_index >= settings.warmup + _MAX_ROUNDS_FACTOR * settings.repeats:
                return samples, reference, True
            extra_began = clock() if extra_began is None else extra_began
            if clock() - extra_began >= settings.noise_budget_s:
                return samples, reference, True
        timed = round_index >= settings.warmup
        order = [(round_index + step) % len(members) for step in range(len(members))]
        round_index += 1
        for i in order:
            member, stream, sync = members[i], streams[i], syncs[i]
            timed_pass(member, stream[context : context + 1], sync, clock)  # untimed: the weights back into the caches
            for k in settings.ks:
                elapsed = timed_pass(member, stream[context : context + k], sync, clock)
                if timed:
                    samples[i][k].append(elapsed)
        syncs[0]()
        began = clock()
        workload()
        syncs[0]()
        if timed:
            reference.append(clock() - began)


def medians_settled(samples: Sequence[dict[int, list[float]]], floor: float, max_noise: float, repeats: int) -> bool:
    """Whether a noisy floor's extra rounds can stop because the models' own timings say they buy
    nothing: each model's noise is the median over its k of the timings' IQR/median, weighted by its
    step against the slowest model's (a rule drafter's microseconds of jitter move no chain's cost);
    where the floor (`floor`, its IQR/median) is more than `FLOOR_OVERSTATES` times the largest of
    those, it is not measuring what the models meet, and the rounds stop once that noise over the
    rounds taken is no more than `max_noise` over `repeats` rounds: a median's standard error
    shrinks as one over the square root of its samples, so the medians are then at least as precise
    as the planned rounds make them on a machine at the acceptable noise. `samples`: per model,
    seconds per k, every model timed the same rounds."""
    if not samples or not samples[0]:
        return False
    smallest = min(samples[0])
    rounds = len(samples[0][smallest])
    if rounds < 2:
        return False
    steps = [float(np.median(member[min(member)])) for member in samples]
    slowest = max(steps)
    if not slowest > 0:
        return False
    noises = [step / slowest * float(np.median([robust_spread(times).relative_iqr for times in member.values()]))
              for step, member in zip(steps, samples)]
    if not all(math.isfinite(noise) for noise in noises):
        return False
    noise = max(noises)
    return floor > FLOOR_OVERSTATES * noise and noise * math.sqrt(repeats / rounds) <= max_noise


def timed_pass(member: ChainMember, new_ids: torch.Tensor, sync: Callable[[], None],
               clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds of one forward pass of `member` over `new_ids` (k,), asking for all k rows of
    logits as a verification does, the device synchronised around it; the member's cache is
    cut back to what it held before, outside the timed region."""
    before = member.cache_length
    sync()
    began = clock()
    member.forward(new_ids, keep_last=new_ids.shape[0])
    sync()
    elapsed = clock() - began
    member.crop(before)
    return elapsed


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (a collection inside a timed pass is noise)."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _positive_ints(values: tuple[int, ...], name: str) -> None:
    if not values:
        raise PolyplanError(f"{name}: give at least one value")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PolyplanError(f"{name}: {value!r} must be an integer >= 1")
    if len(set(values)) != len(values):
        raise PolyplanError(f"{name}: duplicate values in {list(values)}")
