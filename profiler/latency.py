"""Latency curves: T_i(k), one forward pass over k new tokens with a warm KV cache, and prefill.

For each context length c the member first processes c real tokens (the prefill, timed on
its own from an empty cache), then the timed loop repeatedly feeds k new tokens, asking for
the logits of all k rows exactly as a verification does (`keep_last = k`), and crops the
cache back to c outside the timed region. Block sizes are interleaved round-robin within
each repeat, so a burst of background load spreads over every k instead of distorting one
point of the curve. Warm-up rounds run first (lazy initialisation, allocator growth and any
compilation happen there and are never timed); the garbage collector is paused while timing.

Each round also times a fixed *reference workload* (the same matrix products every time, no
model involved). Its spread is the machine's own noise floor during the measurement: on a
shared virtual machine even a fixed loop of arithmetic varies by tens of percent from one
run to the next, and a model's T(1) cannot be steadier than that. The profile records it
beside each model's curve so that a wide IQR can be told apart from a flaw in the procedure.

On CUDA (and MPS) the device is synchronised before starting and before stopping the clock,
so the time is the kernels' and not their launch.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from polyplan.decoder.member import ChainMember
from polyplan.errors import PolyplanError
from polyplan.profiler.stats import Spread, spread

DEFAULT_KS = (1, 2, 3, 4, 6, 8, 12, 16)
DEFAULT_CONTEXT_LENGTHS = (128, 384)


@dataclass(frozen=True)
class LatencySettings:
    """How latency curves are measured.

    Attributes:
        ks: numbers of new tokens per timed forward pass (T_i(k) for each).
        context_lengths: cached tokens before the timed pass (at least one; two or more
            show how T grows with context).
        repeats: timed forward passes per (context length, k).
        warmup: untimed rounds over every k before timing, per context length.
        prefill_repeats: timed prefills per context length (after one untimed prefill).
    """

    ks: tuple[int, ...] = DEFAULT_KS
    context_lengths: tuple[int, ...] = DEFAULT_CONTEXT_LENGTHS
    repeats: int = 15
    warmup: int = 3
    prefill_repeats: int = 5

    def __post_init__(self) -> None:
        _positive_ints(self.ks, "ks")
        _positive_ints(self.context_lengths, "context_lengths")
        for name in ("repeats", "prefill_repeats"):
            if getattr(self, name) < 1:
                raise PolyplanError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise PolyplanError(f"warmup: must be >= 0, got {self.warmup}")

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
    timings taken in the same rounds (None when not measured)."""

    points: tuple[TimedPoint, ...]
    prefill: tuple[PrefillTiming, ...]
    reference: Spread | None = None

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
    """Time `member`'s forward passes (see the module docstring for the procedure).

    Args:
        member: any chain member; its cache is reset before and after.
        tokens: real token ids, at least `settings.tokens_needed` of them: the first c form
            the context, the next k are the new tokens.
        settings: block sizes, context lengths, repeats.
        clock: the timer (tests inject a fake one).
        workload: the reference workload (default: `reference_workload` on the member's device).

    Raises:
        PolyplanError: the token stream is too short, or a context does not fit the member.
    """
    if len(tokens) < settings.tokens_needed:
        raise PolyplanError(
            f"latency: need {settings.tokens_needed} prompt tokens for context "
            f"{max(settings.context_lengths)} + k {max(settings.ks)}, got {len(tokens)}"
        )
    limit = member.max_context
    if limit is not None and settings.tokens_needed > limit:
        raise PolyplanError(
            f"context_lengths: {max(settings.context_lengths)} cached + {max(settings.ks)} new tokens is longer "
            f"than the context of {member.name!r} ({limit} tokens)"
        )
    device = getattr(member, "device", torch.device("cpu"))
    stream = torch.as_tensor(list(tokens[: settings.tokens_needed]), dtype=torch.int64, device=device)  # (L,)
    sync = synchronizer(member)
    points: list[TimedPoint] = []
    prefill: list[PrefillTiming] = []
    reference: list[float] = []
    workload = workload if workload is not None else reference_workload(device)
    try:
        with torch.inference_mode(), collector_paused():
            for context in settings.context_lengths:
                prefill.append(PrefillTiming(context, _time_prefill(member, stream[:context], settings, sync, clock)))
                samples, reference_samples = _time_steps(member, stream, context, settings, sync, clock, workload)
                points.extend(TimedPoint(context, k, spread(samples[k])) for k in settings.ks)
                reference.extend(reference_samples)
    finally:
        member.reset()
    return LatencyMeasurement(tuple(points), tuple(prefill), spread(reference))


def reference_workload(device: torch.device | str, size: int = 128, products: int = 8) -> Callable[[], None]:
    """A fixed amount of arithmetic on `device`: `products` chained (size x size) matrix
    products (about a millisecond on one CPU core at the defaults). Same inputs every call."""
    generator = torch.Generator().manual_seed(0)
    left = torch.randn(size, size, generator=generator).div_(size**0.5).to(device)
    right = torch.randn(size, size, generator=generator).div_(size**0.5).to(device)

    def run() -> None:
        product = left
        for _ in range(products):
            product = product @ right

    return run


def _time_prefill(member, context_ids, settings, sync, clock) -> Spread:
    times = []
    for repeat in range(settings.prefill_repeats + 1):  # the first one is the warm-up
        member.reset()
        sync()
        began = clock()
        member.forward(context_ids, keep_last=1)
        sync()
        if repeat > 0:
            times.append(clock() - began)
    return spread(times)


def _time_steps(member, stream, context, settings, sync, clock, workload) -> tuple[dict[int, list[float]], list[float]]:
    """Cache holds `context` tokens on entry (the prefill); times forward passes of k tokens,
    and the reference `workload` once per round. Returns (seconds per k, reference seconds)."""
    if member.cache_length != context:
        member.reset()
        member.forward(stream[:context], keep_last=1)
    samples: dict[int, list[float]] = {k: [] for k in settings.ks}
    reference: list[float] = []
    for round_index in range(settings.warmup + settings.repeats):
        timed = round_index >= settings.warmup
        for k in settings.ks:
            elapsed = timed_pass(member, stream[context : context + k], sync, clock)
            if timed:
                samples[k].append(elapsed)
        sync()
        began = clock()
        workload()
        sync()
        if timed:
            reference.append(clock() - began)
    return samples, reference


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
