"""planner.exact.whole_call: the whole-`generate`-call prediction, exactly, on synthetic numbers."""

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.planner.exact.engine_overhead import profile_call_seconds
from polyplan.planner.exact.whole_call import CallCount, CallModel, PrefillCurve, prefill_curve, whole_call_speedup
from polyplan.formats.profile import LatencyPoint, ModelProfile, PrefillPoint, Profile
from polyplan.formats.profile import decode_profile


def test_prefill_interpolates_through_the_origin_and_continues_the_last_slope():
    curve = PrefillCurve((100, 300), (0.040, 0.120))
    assert curve(50) == pytest.approx(0.020)  # between (0, 0) and the first point
    assert curve(100) == pytest.approx(0.040)
    assert curve(200) == pytest.approx(0.080)
    assert curve(400) == pytest.approx(0.160)  # slope 0.4 ms/token beyond 300
    assert PrefillCurve((128,), (0.064,))(256) == pytest.approx(0.128)  # one point: the line through the origin


def test_prefill_curve_from_a_profile_and_none_without_prefill_times():
    model = ModelProfile(name="m", fingerprint="f", latency=[LatencyPoint(128, 1, 0.01)],
                         prefill=[PrefillPoint(384, 0.3), PrefillPoint(128, 0.1)])
    assert prefill_curve(model) == PrefillCurve((128, 384), (0.1, 0.3))
    assert prefill_curve(ModelProfile(name="m", fingerprint="f", latency=[LatencyPoint(128, 1, 0.01)])) is None
    with pytest.raises(PolyplanError):
        PrefillCurve((200, 100), (0.1, 0.2))


def test_call_seconds_adds_call_cost_prefills_and_decode_less_the_replaced_passes():
    target = PrefillCurve((100,), (0.100,))  # 1 ms per prompt token
    drafter = PrefillCurve((100,), (0.010,))  # 0.1 ms per prompt token
    baseline = CallModel(per_token_s=0.010, per_call_s=0.005, target_prefill=target, replaced_s=0.008)
    assert baseline.seconds(50, 20) == pytest.approx(0.005 + 0.050 + 20 * 0.010 - 0.008)
    assisted = CallModel(per_token_s=0.004, per_call_s=0.005, target_prefill=target, drafter_prefill=drafter,
                         extra_tokens=4, replaced_s=0.009)
    assert assisted.seconds(50, 20) == pytest.approx(0.005 + 0.054 + 0.005 + 20 * 0.004 - 0.009)
    # without prefill times or a per-call cost the model is the per-token one
    assert CallModel(0.004, 0.0, None).seconds(50, 20) == pytest.approx(0.080)


def test_whole_call_speedup_is_spec_bench_tokens_per_second_ratio():
    target = PrefillCurve((100,), (0.100,))
    baseline = CallModel(per_token_s=0.010, per_call_s=0.005, target_prefill=target, replaced_s=0.010)
    assisted = CallModel(per_token_s=0.005, per_call_s=0.005, target_prefill=target, extra_tokens=0, replaced_s=0.005)
    calls = [CallCount(100, 10), CallCount(200, 30)]
    base_seconds = (0.005 + 0.1 + 0.1 - 0.01) + (0.005 + 0.2 + 0.3 - 0.01)
    ours = (0.005 + 0.1 + 0.05 - 0.005) + (0.005 + 0.2 + 0.15 - 0.005)
    assert whole_call_speedup(baseline, assisted, calls, calls) == pytest.approx((40 / ours) / (40 / base_seconds))
    # long generations: the whole-call speedup tends to the per-token one (2x) from below
    long = [CallCount(100, 100_000)]
    assert 1.99 < whole_call_speedup(baseline, assisted, long, long) < 2.0
    # negative control: the prefill and call costs do change a short call's speedup
    assert whole_call_speedup(baseline, assisted, calls, calls) < 1.5
    with pytest.raises(PolyplanError):
        whole_call_speedup(baseline, assisted, [], calls)


def _version_1(meta: dict) -> Profile:
    """A version-1 profile with `meta` (the engine overhead lived there), read through the migration."""
    return decode_profile({"schema_version": 1, "target": "t", "device": "cpu", "pairs": [], "meta": meta,
                   "models": [{"name": "t", "fingerprint": "fp", "latency": [{"context_length": 8, "k": 1, "median_s": 0.01}]}]})


def test_per_call_cost_read_from_the_stored_entry_and_none_for_old_entries():
    meta = {"engine_overhead": {"hf": {"greedy": {"per_step_s": 1e-4, "per_round_s": 1e-3, "per_call_s": 0.013}}}}
    assert profile_call_seconds(_version_1(meta), "hf", "greedy") == 0.013
    assert profile_call_seconds(_version_1({"engine_overhead": {"hf": {"greedy": {"per_step_s": 1e-4, "per_round_s": 1e-3}}}}), "hf", "greedy") is None
    assert profile_call_seconds(_version_1({}), "hf", "greedy") is None
    with pytest.raises(PolyplanError, match="per_call_s"):
        _version_1({"engine_overhead": {"hf": {"greedy": {"per_step_s": 1e-4, "per_round_s": 1e-3, "per_call_s": -1}}}})
