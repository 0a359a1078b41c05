"""Latency measurement: procedure (warm-up untimed, crop back, prefill), device sync, errors.

A fake member advances a fake clock by a known cost per call, so medians are exact and
nothing here depends on the machine's speed.
"""

from __future__ import annotations

import pytest
import torch

from conftest import tiny_llama
from polyplan.decoder import HFMember, NGramMember
from polyplan.formats.errors import PolyplanError
from polyplan.profiler import forward_timing as latency_module
from polyplan.profiler.forward_timing import LatencySettings, measure_latency
from polyplan.profiler.stats import spread


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CostMember:
    """A chain member whose forward costs `base + per_token * k + per_cached * cache` fake
    seconds, plus `first_extra` on its first ever call (lazy initialisation)."""

    name = "fake"
    vocab_size = valid_vocab_size = 8
    eos_token_id = None

    def __init__(self, clock: FakeClock, *, max_context: int | None = None, device: str | None = None) -> None:
        self.clock = clock
        self.max_context = max_context
        if device is not None:
            self.device = torch.device(device)
        self.length = 0
        self.calls: list[tuple[int, int, int | None]] = []  # (cache before, k, keep_last)
        self.first_extra = 1.0

    @property
    def cache_length(self) -> int:
        return self.length

    def forward(self, new_ids, keep_last=None):
        k = new_ids.shape[0]
        self.calls.append((self.length, k, keep_last))
        self.clock.now += 0.001 + 0.0005 * k + 0.00001 * self.length + self.first_extra
        self.first_extra = 0.0
        self.length += k
        return torch.zeros(keep_last or k, 8)

    def crop(self, length):
        assert 0 <= length <= self.length
        self.length = length

    def reset(self):
        self.length = 0

    def token_map(self):
        return None


SETTINGS = LatencySettings(ks=(1, 2, 4), context_lengths=(10, 20), repeats=5, warmup=2, prefill_repeats=3)


def test_procedure_with_a_fake_clock():
    clock = FakeClock()
    member = CostMember(clock)
    result = measure_latency(member, list(range(24)), SETTINGS, clock=clock)
    for context in (10, 20):
        for k in (1, 2, 4):
            timing = result.at(context, k)
            assert timing.median == pytest.approx(0.001 + 0.0005 * k + 0.00001 * context)
            assert timing.iqr == pytest.approx(0.0, abs=1e-12)  # the lazy first call was not timed
            assert timing.repeats == 5
    assert [(p.context_length, p.time.repeats) for p in result.prefill] == [(10, 3), (20, 3)]
    assert result.prefill[1].time.median == pytest.approx(0.001 + 0.0005 * 20)
    steps = [call for call in member.calls if call[1] in (1, 2, 4) and call[0] in (10, 20)]
    # every step starts from the context (cropped back), returns the logits of all k rows
    assert all(keep == k for _, k, keep in steps)
    assert len(steps) == 2 * (2 + 5) * (1 + 3)  # each round: the untimed re-warm pass, then k = 1, 2, 4
    assert member.cache_length == 0  # reset afterwards
    assert result.reference is None or result.reference.median == 0  # the default workload leaves a fake clock alone


class LongPrefillMember(CostMember):
    """A member whose prefills (passes over more than 4 tokens) cost `prefill_s` fake seconds."""

    def __init__(self, clock: FakeClock, prefill_s: float) -> None:
        super().__init__(clock)
        self.prefill_s = prefill_s

    def forward(self, new_ids, keep_last=None):
        if new_ids.shape[0] > 4:
            self.clock.now += self.prefill_s
        return super().forward(new_ids, keep_last)


def test_long_prefills_are_timed_twice_and_short_ones_as_often_as_asked():
    settings = LatencySettings(ks=(1, 2, 4), context_lengths=(10, 20), repeats=3, warmup=1, prefill_repeats=5, noise_budget_s=0.0)
    for prefill_s, repeats in ((1.5, 2), (0.9, 3), (0.001, 5)):  # 2 x 1.5 s and 3 x 0.9 s reach 2 s; 5 x 1 ms never does
        clock = FakeClock()
        result = measure_latency(LongPrefillMember(clock, prefill_s), list(range(24)), settings, clock=clock, workload=lambda: None)
        assert [p.time.repeats for p in result.prefill] == [repeats, repeats], prefill_s
        assert result.prefill[0].time.median == pytest.approx(prefill_s + 0.001 + 0.0005 * 10)


def test_reference_workload_is_timed_once_per_timed_round_and_recorded():
    from polyplan.profiler.entries import model_entry

    clock = FakeClock()
    costs = iter([0.002, 0.002, 0.003] * 20)

    def workload() -> None:
        clock.now += next(costs)

    quiet = LatencySettings(ks=(1, 2, 4), context_lengths=(10, 20), repeats=5, warmup=2, prefill_repeats=3, noise_budget_s=0.0)
    result = measure_latency(CostMember(clock), list(range(24)), quiet, clock=clock, workload=workload)
    # 2 contexts x (2 warm-up + 5 timed) rounds; only the timed ones count (no budget for more)
    assert result.reference.repeats == 2 * 5
    assert result.reference.median == pytest.approx(0.002)
    timing = model_entry("fake", "sha256:x", result, "sha256:y").timing
    assert timing.reference_median_s == pytest.approx(0.002)
    assert timing.reference_relative_iqr == pytest.approx(result.reference.iqr / 0.002)


def test_default_reference_workload_runs_on_the_cpu():
    workload = latency_module.reference_workload("cpu", size=16, products=2)
    assert workload() is None


def test_reference_workload_sizes_its_products_by_device_type(monkeypatch):
    # On a GPU 128-wide products are kernel-launch jitter (an H200 read 29% IQR/median, quiet);
    # the GPU's workload is wide enough for its arithmetic to dominate. Negative control: cpu.
    sides = []
    real_randn = torch.randn
    monkeypatch.setattr(latency_module.torch, "randn", lambda *shape, **kw: sides.append(shape[0]) or real_randn(2, 2, **kw))
    monkeypatch.setattr(latency_module.torch.Tensor, "to", lambda self, *a, **kw: self)
    latency_module.reference_workload("cpu")
    latency_module.reference_workload("cuda:0")
    latency_module.reference_workload("cuda", size=64)
    assert sides == [128, 128, 1024, 1024, 64, 64]


def test_a_gpu_is_labelled_by_its_index_whether_or_not_the_device_named_one(monkeypatch):
    from polyplan.profiler import run as run_module
    monkeypatch.setattr(run_module.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(run_module.torch.cuda, "get_device_name", lambda index: f"GPU{index}")
    # "cuda" and "cuda:0" are one GPU: a profile taken on one is no stranger to a run on the other
    assert run_module.describe_device("cuda") == run_module.describe_device("cuda:0") == "cuda:0 GPU0"
    assert run_module.describe_device("cuda:1") == "cuda:1 GPU1"


def test_real_member_gives_positive_times_for_every_point(single_thread):
    member = HFMember(tiny_llama(0), name="tiny")
    settings = LatencySettings(ks=(1, 3), context_lengths=(4, 12), repeats=3, warmup=1, prefill_repeats=2)
    result = measure_latency(member, list(range(4, 40)), settings)
    assert {(p.context_length, p.k) for p in result.points} == {(4, 1), (4, 3), (12, 1), (12, 3)}
    assert all(p.time.median > 0 and p.time.iqr >= 0 for p in result.points)
    ngram = measure_latency(NGramMember(64), list(range(4, 40)), settings)
    assert all(p.time.median > 0 for p in ngram.points)


def test_cuda_members_are_synchronised_around_every_timed_call(monkeypatch):
    synced: list[torch.device] = []
    monkeypatch.setattr(latency_module.torch.cuda, "synchronize", lambda device=None: synced.append(device))
    clock = FakeClock()
    member = CostMember(clock, device="cuda:0")
    # The fake member ignores the tensor's device; the stream is built on the member's
    # device, which this CPU-only machine cannot allocate, so build it on the CPU instead.
    monkeypatch.setattr(latency_module.torch, "as_tensor", lambda data, dtype, device: torch.tensor(data, dtype=dtype))
    measure_latency(member, list(range(24)), SETTINGS, clock=clock, workload=lambda: None)
    # per context: the prefills, then every round's untimed re-warm pass, its 3 block sizes and its reference workload
    timed_calls = 2 * ((SETTINGS.prefill_repeats + 1) + (SETTINGS.warmup + SETTINGS.repeats) * (1 + 3 + 1))
    assert len(synced) == 2 * timed_calls
    assert set(synced) == {torch.device("cuda:0")}
    assert latency_module.synchronizer(CostMember(clock))() is None  # CPU: nothing to wait for


def test_bad_settings_and_contexts_are_named():
    with pytest.raises(PolyplanError, match=r"^ks: 0 must be an integer >= 1$"):
        LatencySettings(ks=(0, 1))
    with pytest.raises(PolyplanError, match=r"^context_lengths: duplicate values"):
        LatencySettings(context_lengths=(8, 8))
    with pytest.raises(PolyplanError, match=r"^repeats: must be >= 1"):
        LatencySettings(repeats=0)
    clock = FakeClock()
    with pytest.raises(PolyplanError, match=r"^context_lengths: 20 cached \+ 4 new tokens is longer than the context of 'fake' \(16 tokens\)$"):
        measure_latency(CostMember(clock, max_context=16), list(range(24)), SETTINGS, clock=clock)
    with pytest.raises(PolyplanError, match=r"^latency: need 24 prompt tokens"):
        measure_latency(CostMember(clock), list(range(5)), SETTINGS, clock=clock)


def test_spread_is_median_and_interquartile_range():
    summary = spread([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (summary.median, summary.iqr, summary.repeats) == (3.0, 2.0, 5)
    assert summary.relative_iqr == pytest.approx(2 / 3)


def _workload(clock: FakeClock, costs):
    stream = iter(costs)

    def run() -> None:
        clock.now += next(stream)

    return run


class JitterMember(CostMember):
    """A CostMember whose passes cost (1 + jitter) and (1 - jitter) times as much, two calls by
    two calls, for its first `calls` calls (every call when None), then exactly as much: with one
    k, a round is the untimed re-warm pass and one timed pass, so the timed passes alternate, an
    IQR/median of 2 x jitter."""

    def __init__(self, clock, jitter, calls=None):
        super().__init__(clock)
        self.jitter, self.calls_left, self.count = jitter, calls, 0
        self.first_extra = 0.0

    def forward(self, new_ids, keep_last=None):
        before = self.clock.now
        result = super().forward(new_ids, keep_last)
        if self.calls_left is None or self.count < self.calls_left:
            sign = 1.0 if (self.count // 2) % 2 == 0 else -1.0
            self.clock.now = before + (self.clock.now - before) * (1.0 + sign * self.jitter)
        self.count += 1
        return result


def test_a_noisy_floor_is_repeated_until_it_settles():
    """Floor timings alternate 1 and 3 ms for the first 10 rounds (IQR/median far above 10%),
    then stay at 2 ms, and the model's passes are as noisy while the floor is: more rounds are
    timed until the floor's IQR/median is acceptable."""
    clock = FakeClock()
    settings = LatencySettings(ks=(1,), context_lengths=(10,), repeats=6, warmup=0, prefill_repeats=1, noise_budget_s=60.0)
    costs = [0.001, 0.003] * 5 + [0.002] * 200
    member = JitterMember(clock, 0.5, calls=22)  # 2 prefills (one untimed) first, then the 10 noisy rounds' 2 passes each
    result = measure_latency(member, list(range(24)), settings, clock=clock, workload=_workload(clock, costs))
    assert result.reference.repeats + result.reference.outliers > 6
    assert result.reference.relative_iqr <= settings.max_noise
    assert not result.budget_exhausted


def test_a_floor_that_stays_noisy_exhausts_the_budget_and_says_so():
    """Negative control: the floor alternates 1 and 3 ms forever, and the model's passes are as
    noisy; the budget (0.05 fake s) runs out and the measurement is flagged, in the profile
    entry's timing health too."""
    from polyplan.profiler.entries import model_entry

    clock = FakeClock()
    settings = LatencySettings(ks=(1,), context_lengths=(10,), repeats=6, warmup=0, prefill_repeats=1, noise_budget_s=0.05)
    result = measure_latency(JitterMember(clock, 0.5), list(range(24)), settings, clock=clock,
                             workload=_workload(clock, [0.001, 0.003] * 1000))
    assert result.budget_exhausted
    assert result.reference.relative_iqr > settings.max_noise
    assert model_entry("fake", "sha256:x", result, "sha256:y").timing.noise_budget_exhausted is True


def _rounds(result) -> int:
    return result.reference.repeats + result.reference.outliers


def test_a_floor_far_noisier_than_the_models_buys_no_extra_rounds():
    """The floor alternates 1 and 3 ms forever (IQR/median 100%) while the models' passes vary by
    4% (the Xeon at 2 threads: a floor of 50-64% beside models of 4.5-6%, docs/profiling.md): the
    floor is not measuring what the models meet, their medians are as precise as planned, and
    the run stops at the planned rounds, not flagged; the budget would have bought hundreds."""
    clock = FakeClock()
    settings = LatencySettings(ks=(1, 2), context_lengths=(10,), repeats=6, warmup=1, prefill_repeats=1, noise_budget_s=60.0)
    result = measure_latency(JitterMember(clock, 0.02), list(range(24)), settings, clock=clock,
                             workload=_workload(clock, [0.001, 0.003] * 1000))
    assert _rounds(result) == 6
    assert result.reference.relative_iqr > settings.max_noise
    assert not result.budget_exhausted


def test_models_noisier_than_planned_take_rounds_until_their_medians_are_as_precise():
    """The floor at 100% and a model at 15% (floor > 3 x model): the floor overstates, but 6
    rounds at 15% are less precise than 6 at the acceptable 10%; rounds go on to 6 x (15/10)^2 =
    13.5, i.e. 14, and stop there unflagged. Negative control: a model as noisy as its floor
    (both 100%) runs to the rounds' cap, flagged."""
    settings = LatencySettings(ks=(1,), context_lengths=(10,), repeats=6, warmup=0, prefill_repeats=1, noise_budget_s=60.0)
    clock = FakeClock()
    result = measure_latency(JitterMember(clock, 0.075), list(range(24)), settings, clock=clock,
                             workload=_workload(clock, [0.001, 0.003] * 1000))
    assert 13 <= _rounds(result) <= 16 and not result.budget_exhausted
    clock = FakeClock()
    noisy = measure_latency(JitterMember(clock, 0.5), list(range(24)), settings, clock=clock,
                            workload=_workload(clock, [0.001, 0.003] * 1000))
    assert _rounds(noisy) == 10 * 6 and noisy.budget_exhausted


def test_medians_settled_weighs_each_model_by_its_step():
    """A rule drafter's timings jitter by 40% at 30 us beside a 100 ms target at 4%: weighted by
    its step it counts 0.012%, and the target decides; the same jitter on a model as slow as the
    target keeps the rounds going. A floor as noisy as the models never settles by this rule."""
    from polyplan.profiler.forward_timing import medians_settled

    def times(step, jitter, rounds=15):
        return [step * (1 + (jitter / 2 if i % 2 else -jitter / 2)) for i in range(rounds)]

    target = {1: times(0.1, 0.04), 4: times(0.2, 0.04)}
    rule = {1: times(3e-5, 0.4), 4: times(3e-5, 0.4)}
    slow_and_noisy = {1: times(0.09, 0.4), 4: times(0.18, 0.4)}
    assert medians_settled([target, rule], floor=0.56, max_noise=0.10, repeats=15)
    assert not medians_settled([target, slow_and_noisy], floor=0.56, max_noise=0.10, repeats=15)
    assert not medians_settled([target], floor=0.10, max_noise=0.10, repeats=15)  # floor not 3x the model's 4%
    assert not medians_settled([{1: [0.1]}], floor=0.56, max_noise=0.10, repeats=15)  # one round: no spread yet


def test_a_slowed_pass_is_dropped_as_an_outlier_and_counted():
    """One timed pass of 20 (k=1, context 10) is 50 ms slower: the outlier rule drops it, the
    median is the undisturbed cost and the profile entry keeps the count and the kept samples."""
    from polyplan.profiler.entries import model_entry

    clock = FakeClock()
    member = CostMember(clock)
    original = member.forward
    calls = {"n": 0}

    def forward(new_ids, keep_last=None):
        calls["n"] += 1
        if calls["n"] == 12:  # a timed step pass, past prefill and warm-up
            clock.now += 0.05
        return original(new_ids, keep_last)

    member.forward = forward
    settings = LatencySettings(ks=(1,), context_lengths=(10,), repeats=20, warmup=1, prefill_repeats=1, noise_budget_s=0.0)
    result = measure_latency(member, list(range(24)), settings, clock=clock)
    timing = result.at(10, 1)
    assert timing.outliers == 1 and timing.repeats == 19
    assert timing.median == pytest.approx(0.001 + 0.0005 + 0.0001)
    point = model_entry("fake", "sha256:x", result, "sha256:y").latency[0]
    assert point.outliers == 1 and len(point.samples_s) == 19


class LoadedMember(CostMember):
    """A CostMember whose passes cost `factor` times more once the fake clock passes `burst`
    (a background job starting partway through the profiling)."""

    def __init__(self, clock, scale, burst, factor=2.0):
        super().__init__(clock)
        self.scale, self.burst, self.factor = scale, burst, factor
        self.first_extra = 0.0

    def forward(self, new_ids, keep_last=None):
        before = self.clock.now
        result = super().forward(new_ids, keep_last)
        cost = (self.clock.now - before) * self.scale
        self.clock.now = before + cost * (self.factor if before >= self.burst else 1.0)
        return result


def test_models_timed_together_keep_their_ratio_when_the_load_changes():
    """A load doubling every pass starts 0.48 fake s in (when the target's timed rounds are more than
    half done timed alone; under half into the interleaved run). Timed interleaved, the target's and the
    drafter's T(1) are both doubled and their ratio (what decides the chain) stays 5; timed one
    after the other (the negative control) the drafter alone is doubled and the ratio is off 2x."""
    from polyplan.profiler.forward_timing import measure_latencies

    settings = LatencySettings(ks=(1,), context_lengths=(10,), repeats=20, warmup=0, prefill_repeats=1, noise_budget_s=0.0)

    def ratio(together: bool) -> float:
        clock = FakeClock()
        target, drafter = LoadedMember(clock, 10.0, 0.48), LoadedMember(clock, 2.0, 0.48)
        if together:
            a, b = measure_latencies([target, drafter], list(range(24)), settings, clock=clock)
        else:
            a = measure_latency(target, list(range(24)), settings, clock=clock)
            b = measure_latency(drafter, list(range(24)), settings, clock=clock)
        return a.at(10, 1).median / b.at(10, 1).median

    assert ratio(True) == pytest.approx(5.0, rel=0.01)
    assert ratio(False) == pytest.approx(2.5, rel=0.05)


class EvictedMember(CostMember):
    """A CostMember whose first pass after the reference workload costs `refill` fake seconds more:
    the workload (and a round's widest passes) evicted its weights from the caches."""

    def __init__(self, clock, refill):
        super().__init__(clock)
        self.refill, self.cold, self.first_extra = refill, False, 0.0

    def forward(self, new_ids, keep_last=None):
        result = super().forward(new_ids, keep_last)
        self.clock.now += self.refill if self.cold else 0.0
        self.cold = False
        return result


def test_a_lone_member_rewarms_before_its_timed_passes():
    """The prices' sweep times one GGUF alone, its reference workload between rounds: T(1), the
    first timed pass of each round, must not pay the refill the workload causes."""
    clock = FakeClock()
    member = EvictedMember(clock, refill=0.01)

    def workload() -> None:
        member.cold = True

    result = measure_latency(member, list(range(24)), SETTINGS, clock=clock, workload=workload)
    for k in (1, 2, 4):
        assert result.at(10, k).median == pytest.approx(0.001 + 0.0005 * k + 0.00001 * 10)
