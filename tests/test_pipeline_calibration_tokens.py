"""How many tokens the loop-overhead and HF-overhead calibrations decode per call: the most
asked for, fewer for a slow target (a fixed time per call), a power of two, never below 16."""

from __future__ import annotations

import pytest

from polyplan.formats.profile import LatencyPoint, ModelProfile, Profile
from polyplan.pipeline.loop_costs import CALIBRATION_CALL_S, MIN_CALIBRATION_TOKENS, calibration_tokens_for


def _profile(step_s: float | None) -> Profile:
    points = () if step_s is None else (LatencyPoint(128, 1, step_s), LatencyPoint(128, 4, 3 * step_s))
    return Profile(target="target", device="synthetic", models=(ModelProfile("target", "sha256:t", points),), pairs=())


@pytest.mark.parametrize(("step_s", "most", "expected"), [
    (0.005, 64, 64),  # the embedded family: a call of 64 tokens is well within the budget
    (0.075, 64, 32),  # gemma-3-270m on one CPU thread: 2.5 s / 75 ms = 33 -> 32
    (0.075, 24, 24),  # never more than asked (the demo's quick setting)
    (0.300, 64, MIN_CALIBRATION_TOKENS),  # a very slow target still gets enough steps to fit
    (None, 64, 64),  # no T(1) in the profile: as asked
])
def test_calibration_tokens(step_s, most, expected):
    assert calibration_tokens_for(_profile(step_s), "target", most) == expected


def test_a_call_fits_the_budget_when_it_can():
    tokens = calibration_tokens_for(_profile(0.040), "target", 64)
    assert tokens * 0.040 <= CALIBRATION_CALL_S and (tokens & (tokens - 1)) == 0 and tokens * 2 * 0.040 > CALIBRATION_CALL_S


def test_an_unknown_target_gets_what_was_asked():
    assert calibration_tokens_for(_profile(0.075), "other", 64) == 64


@pytest.mark.parametrize(("step_s", "stand_ins"), [(0.057, True), (0.020, True), (0.005, False), (None, False)])
def test_a_slow_target_has_its_loop_calibrated_around_a_stand_in_verifier(monkeypatch, step_s, stand_ins):
    """The loop overhead is fitted around the target where its step is short (the embedded family:
    the loop's cost is a real share of it), around a stand-in verifier where the step takes at
    least `STAND_IN_STEP_S` (a 1.5B model: minutes of the target's passes to fit well under 1 % of
    a step); the entry's fingerprint and method say which."""
    from polyplan.decoder import NGramMember
    from polyplan.formats.overhead import LoopOverhead
    from polyplan.pipeline import loop_costs
    from polyplan.profiler import loop_overhead
    from polyplan.profiler import ProfiledModel

    verifiers = []
    monkeypatch.setattr(loop_overhead, "measure_loop_overhead", lambda vocab, **kw: verifiers.append(kw["verifier"])
                        or LoopOverhead(per_step_s=1e-5, per_round_s=1e-4))
    target = ProfiledModel("target", NGramMember(64), "sha256:t")
    assert loop_costs.loop_with_stand_ins(_profile(step_s), "target") is stand_ins
    profile, measured = loop_costs._ensure_loop_overhead(_profile(step_s), target, (0.0,), 32, "cpu")
    assert measured == 1 and verifiers == [None if stand_ins else target.member]
    entry = profile.loop_overhead["greedy"]
    assert ("stand-in verifier (the target's step is long)" in entry.method) is stand_ins
    other, _ = loop_costs._ensure_loop_overhead(_profile(0.005 if stand_ins else 0.057), target, (0.0,), 32, "cpu")
    assert other.loop_overhead["greedy"].fingerprint != entry.fingerprint  # measured one way, never reused for the other
