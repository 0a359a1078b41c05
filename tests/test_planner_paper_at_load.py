"""The paper's theory at B sequences in flight (planner.paper.at_load): at B = 1 it is the
one-sequence functions exactly; the limit on a linear T(k) is 1 at every B and on a flat T(k) is
K_max + 1; hand-computed B = 2 cases of Lemma 3.1 and Theorem 3.2."""

from __future__ import annotations

import pytest

from polyplan.formats.errors import PolyplanError
from polyplan.formats.overhead import LoopOverhead
from polyplan.planner.exact.latency import LatencyCurve, constant_curve
from polyplan.planner.exact.physical_limit import physical_limit
from polyplan.planner.exact.verify_width import monotone_envelope
from polyplan.planner.llama_cpp.under_load import load_limit
from polyplan.planner.paper.at_load import (
    BATCHED,
    SEQUENTIAL,
    drafting_step,
    ideal_time_at_load,
    insertion_at_load,
    limit_at_load,
    loaded_times,
    speedup_at_load,
    target_alone_time,
)
from polyplan.planner.paper.insertion import analyze_insertion
from polyplan.planner.paper.lemma31 import ideal_time

# a CPU-shaped target whose T(k) is not monotone (T(12) > T(16)), so the envelope pads: seconds
TARGET = LatencyCurve((1, 2, 4, 8, 12, 16), (0.010, 0.0165, 0.0258, 0.0447, 0.0548, 0.0522))
MIDDLE = LatencyCurve((1, 2, 4, 8, 16), (0.0056, 0.0062, 0.0066, 0.0074, 0.0107))
DRAFTER = LatencyCurve((1, 2, 4, 8, 16), (0.0010, 0.0011, 0.0012, 0.0015, 0.0022))
LOOP = LoopOverhead(per_step_s=2e-5, per_round_s=2.2e-4)
SWITCH = (3e-4, 1e-4)


# --------------------------------------------------------------------------- B = 1 is the one-sequence theory


def test_at_one_request_the_limit_is_the_physical_limit_exactly():
    for overhead, switch in ((None, (0.0, 0.0)), (LOOP, SWITCH)):
        for k_max in (None, 5, 20):
            assert limit_at_load(TARGET, 1, overhead=overhead, switch=switch, k_max=k_max) == physical_limit(
                TARGET, overhead=overhead, switch=switch, k_max=k_max)


def test_at_one_request_lemma31_is_the_printed_lemma_fed_the_widths_it_verifies():
    lengths, blocks = (3.1, 2.4), (4, 3)
    at_one = ideal_time_at_load(lengths, (TARGET, MIDDLE, DRAFTER), blocks, clients=1)
    envelope = monotone_envelope
    times = (envelope(TARGET)(5), envelope(MIDDLE)(4), DRAFTER(1))
    assert at_one == ideal_time(lengths, times, alpha_scale=3.0)
    for drafting in (BATCHED, SEQUENTIAL):  # one sequence drafts alone either way
        assert ideal_time_at_load(lengths, (TARGET, MIDDLE, DRAFTER), blocks, clients=1, drafting=drafting) == at_one


def test_with_flat_curves_at_one_request_it_is_the_paper_as_printed():
    """The paper's T_i is one number per model: flat curves at B = 1 give Lemma 3.1 and Theorem 3.2
    exactly as `planner.paper` evaluates them, speedup included."""
    t1, t2, t2_new = 0.025, 0.004, 0.007  # the paper's Table 1: Vicuna-7B, EAGLE, its 4-bit copy
    flat = (constant_curve(t1), constant_curve(t2_new), constant_curve(t2))
    printed = ideal_time((4.34, 4.36), (t1, t2_new, t2), alpha_scale=7.0)
    assert ideal_time_at_load((4.34, 4.36), flat, (7, 7), clients=1) == printed
    assert speedup_at_load((6.26,), (flat[0], flat[2]), (7,), clients=1) == pytest.approx(
        t1 / ideal_time((6.26,), (t1, t2), alpha_scale=7.0).total, rel=1e-15)
    loaded = insertion_at_load(upper=flat[0], middle=flat[1], lower=flat[2], l1=6.26, l1_new=4.34, l2_new=4.36,
                               top_block=7, middle_block=7, clients=1)
    assert loaded.analysis == analyze_insertion(t1=t1, t2=t2, t2_new=t2_new, l1=6.26, l1_new=4.34, l2_new=4.36,
                                                alpha_scale=7.0)


def test_at_one_request_theorem_32_reads_the_verification_widths():
    loaded = insertion_at_load(upper=TARGET, middle=MIDDLE, lower=DRAFTER, l1=2.2, l1_new=3.3, l2_new=2.6,
                               top_block=3, middle_block=2, clients=1)
    t1, t2_new, t2 = monotone_envelope(TARGET)(4), monotone_envelope(MIDDLE)(3), DRAFTER(1)
    assert (loaded.t1, loaded.t2, loaded.t2_new) == (t1, t2, t2_new)
    assert loaded.analysis == analyze_insertion(t1=t1, t2=t2, t2_new=t2_new, l1=2.2, l1_new=3.3, l2_new=2.6,
                                                alpha_scale=2.0)


# --------------------------------------------------------------------------- the limit at B


def test_on_a_linear_curve_the_limit_is_one_at_every_load():
    """T(k) = k·c: B (K + 1) tokens cost as many target-alone steps' worth, whatever B."""
    timed = LatencyCurve(tuple(range(1, 257)), tuple(0.5 * k for k in range(1, 257)))  # every width asked is timed
    for clients in range(1, 17):
        limit = limit_at_load(timed, clients, k_max=15)
        assert limit.speedups == (1.0,) * 15 and (limit.speedup, limit.block_size) == (1.0, 0)
    extrapolated = LatencyCurve((1, 2, 4, 8, 16), (0.003, 0.006, 0.012, 0.024, 0.048))  # read beyond 16 by its slope
    for clients in range(1, 17):
        limit = limit_at_load(extrapolated, clients, k_max=15)
        assert limit.speedups == pytest.approx([1.0] * 15, rel=1e-9) and limit.speedup == pytest.approx(1.0)


def test_on_a_flat_curve_the_limit_is_the_largest_block_plus_one_at_every_load():
    for clients in range(1, 17):
        limit = limit_at_load(constant_curve(0.02), clients, k_max=7)
        assert limit.speedups == pytest.approx([k + 1 for k in range(1, 8)], rel=1e-15)
        assert (limit.speedup, limit.block_size) == (pytest.approx(8.0, rel=1e-15), 7)


def test_on_a_roofline_the_limit_shares_the_free_width_among_the_requests():
    """T(k) = max(T(1), c·k) is flat up to k* = T(1)/c and linear beyond: the limit at B is
    max(1, min(K_max + 1, k*/B)) (docs/theory.md), falling with B; the negative control, the
    flat curve, does not fall."""
    roofline = LatencyCurve((1, 32, 1024), (32.0, 32.0, 1024.0))  # k* = 32
    limits = [limit_at_load(roofline, clients, k_max=15).speedup for clients in (1, 2, 4, 8, 16, 32, 64)]
    assert limits == pytest.approx([16, 16, 8, 4, 2, 1, 1], rel=1e-12)
    flat = [limit_at_load(constant_curve(32.0), clients, k_max=15).speedup for clients in (1, 4, 16, 64)]
    assert flat == pytest.approx([16.0] * 4, rel=1e-15)


def test_the_limit_says_which_widths_were_timed():
    assert [limit_at_load(TARGET, clients, k_max=15).measured_block_size for clients in (1, 2, 4, 8, 9, 16, 17)] == [
        15, 7, 3, 1, 0, 0, 0]
    limit = limit_at_load(TARGET, 4, k_max=15)
    assert limit.extrapolated == (limit.block_size > 3)


def test_the_limit_at_two_requests_by_hand():
    """B = 2: S(K) = (K + 1) T(2) / T̃(2 (K + 1)); widths 12 and 14 pad to 16 (T(16) < T(12))."""
    limit = limit_at_load(TARGET, 2, k_max=7)
    by_hand = [2 * 0.0165 / 0.0258, 3 * 0.0165 / ((0.0447 - 0.0258) / 4 * 2 + 0.0258), 4 * 0.0165 / 0.0447,
               5 * 0.0165 / ((0.0447 + 0.0548) / 2), 6 * 0.0165 / 0.0522, 7 * 0.0165 / 0.0522, 8 * 0.0165 / 0.0522]
    assert limit.speedups == pytest.approx(by_hand, rel=1e-12)
    assert (limit.block_size, limit.speedup) == (7, pytest.approx(8 * 0.0165 / 0.0522))


# --------------------------------------------------------------------------- Lemma 3.1 and Theorem 3.2 at B = 2


def test_a_drafter_that_pays_at_one_request_loses_at_four():
    """Target T(1) = T(2) = 10, T(4) = 16, T(8) = 32; a drafter of T = 1; K = 1, E[L] = 1.8.
    S_B = E[L] T_1(B) / (T̃_1(2B) + T_d(B)): 18/11 at B = 1, 18/17 at B = 2, 28.8/33 at B = 4."""
    target = LatencyCurve((1, 2, 4, 8), (10.0, 10.0, 16.0, 32.0))
    drafter = constant_curve(1.0)
    speedups = [speedup_at_load((1.8,), (target, drafter), (1,), clients=clients) for clients in (1, 2, 4)]
    assert speedups == pytest.approx([18 / 11, 18 / 17, 28.8 / 33], rel=1e-12)
    assert speedups[0] > 1 > speedups[2]
    # the aggregate time per token at B = 2 by hand: (T(4) + T_d(2)) / (2 E[L]); the target alone T(2) / 2
    assert ideal_time_at_load((1.8,), (target, drafter), (1,), clients=2).total == pytest.approx(17 / 3.6, rel=1e-12)
    assert target_alone_time(target, 2) == 5.0


def test_drafting_one_sequence_after_another_costs_b_steps():
    assert drafting_step(DRAFTER, 4, BATCHED) == DRAFTER(4)
    assert drafting_step(DRAFTER, 4, SEQUENTIAL) == 4 * DRAFTER(1)
    assert loaded_times((TARGET, DRAFTER), (3,), 4, SEQUENTIAL) == (monotone_envelope(TARGET)(16), 4 * DRAFTER(1))


def test_an_insertion_that_helps_at_one_request_does_not_at_two():
    """Upper flat at 10 (its pass costs the same at any width), middle linear T_2'(k) = 3k, lower flat
    at 1; K_1 = K_2 = 3 (α = 3), E[L_1] = 2, E[L_1]' = 3, E[L_2]' = 2.5, so c = ⌈3/2.5⌉ = 2.
    eq. 1 = T_1/2 + 3 T_2/2; eq. 2 = T_1/3 + (T_2' + 3 T_2)/5.
    B = 1: T_2' = T_2'(4) = 12: eq. 1 = 6.5, eq. 2 = 10/3 + 3 = 6.333: helps.
    B = 2 batched: T_2' = T_2'(8) = 24, T_2 = T_2(2) = 1: eq. 2 = 10/3 + 5.4 = 8.733 > 6.5: no gain.
    B = 2 sequential: T_2 = 2 T_2(1) = 2: eq. 1 = 8, eq. 2 = 10/3 + 6 = 9.333: no gain."""
    upper, middle, lower = constant_curve(10.0), LatencyCurve((1, 2, 4, 8), (3.0, 6.0, 12.0, 24.0)), constant_curve(1.0)

    def at(clients, drafting=BATCHED):
        return insertion_at_load(upper=upper, middle=middle, lower=lower, l1=2.0, l1_new=3.0, l2_new=2.5,
                                 top_block=3, middle_block=3, clients=clients, drafting=drafting)

    one, two, two_sequential = at(1), at(2), at(2, SEQUENTIAL)
    assert (one.t1, one.t2, one.t2_new) == (10.0, 1.0, 12.0)
    assert one.analysis.ceiling == 2
    assert (one.analysis.two_model_time, one.analysis.three_model_time) == pytest.approx((6.5, 10 / 3 + 3.0))
    assert one.analysis.verdict == "helps"
    assert (two.t1, two.t2, two.t2_new) == (10.0, 1.0, 24.0)
    assert (two.analysis.two_model_time, two.analysis.three_model_time) == pytest.approx((6.5, 10 / 3 + 5.4))
    assert two.analysis.verdict == "no_gain"
    assert not two.analysis.condition1.holds and two.analysis.condition1.lhs == pytest.approx(2.4)
    assert (two_sequential.t2, two_sequential.analysis.two_model_time) == (2.0, pytest.approx(8.0))
    assert two_sequential.analysis.three_model_time == pytest.approx(10 / 3 + 6.0)
    assert two_sequential.analysis.verdict == "no_gain"


@pytest.mark.parametrize("shape", ["flat", "linear"])
def test_when_every_curve_has_one_shape_the_verdict_does_not_move_with_load(shape):
    """Flat or linear alike for all three models (batched drafting): every batched time is B^e times
    the one-request time (e = 0 or 1), so eq. 2 − eq. 1 scales by B^e and its sign stays."""
    widths = tuple(range(1, 129))

    def curve(scale):
        return LatencyCurve(widths, tuple(scale * (1.0 if shape == "flat" else k) for k in widths))

    upper, middle, lower = curve(10.0), curve(3.0), curve(0.5)
    difference = {}
    for clients in (1, 2, 4, 8):
        loaded = insertion_at_load(upper=upper, middle=middle, lower=lower, l1=2.0, l1_new=3.0, l2_new=2.5,
                                   top_block=3, middle_block=3, clients=clients)
        difference[clients] = loaded.analysis.exact_difference
    power = 0 if shape == "flat" else 1
    assert all(difference[b] == pytest.approx(difference[1] * b**power, rel=1e-12) for b in difference)


def test_bad_input_names_the_culprit():
    with pytest.raises(PolyplanError, match="clients"):
        limit_at_load(TARGET, 0)
    with pytest.raises(PolyplanError, match="clients"):
        speedup_at_load((2.0,), (TARGET, DRAFTER), (3,), clients=1.5)
    with pytest.raises(PolyplanError, match="drafting"):
        drafting_step(DRAFTER, 2, "interleaved")
    with pytest.raises(PolyplanError, match="block_sizes"):
        loaded_times((TARGET, MIDDLE, DRAFTER), (3,), 2)


def test_the_limit_at_load_is_the_server_models_without_its_loop():
    """`planner.llama_cpp.under_load.load_limit` prices llama-server's limit at B with the server's
    loop; without it, on a curve that never falls (nothing to pad), it is this limit."""
    monotone = LatencyCurve((1, 2, 4, 8, 16), (0.010, 0.0121, 0.0160, 0.0290, 0.0560))
    for clients in range(1, 17):
        ours = limit_at_load(monotone, clients, k_max=15)
        speedup, block = load_limit(monotone, clients, 15)
        assert (ours.speedup, ours.block_size) == (pytest.approx(speedup, rel=1e-12), block)
