"""The price of reading more KV cells (`planner.llama_cpp.kv_cells`) and `--kv-unified`'s wider
attention under load (`planner.llama_cpp.under_load.simulate_load(split=False, cells=...)`).

Checked: llama.cpp's padding of the cells a pass reads; the seconds per cell read from T(k) timed
at two contexts (noise floored at 0; one context prices nothing); a two-slot unified run by hand
whose slots together cross a padding boundary their own lengths do not (and its control, slots
short enough that the sum pads alike: nothing added); the split server and one slot never pay it.
"""

from __future__ import annotations

import pytest

from polyplan.formats.profile import LatencyPoint, ModelProfile
from polyplan.planner.exact.ngram_replay import ReplayRound
from polyplan.planner.llama_cpp.kv_cells import KV_PAD, CellCost, cell_cost, padded_cells
from polyplan.planner.llama_cpp.server_loop import ServerLoop
from polyplan.planner.llama_cpp.under_load import simulate_load

CELLS = CellCost(ks=(1, 4), per_cell_s=(1e-6, 4e-6), short=128, long=1920)
LOOP = ServerLoop(per_request_s=0.0005, per_round_s=0.001, per_row_s=0.0001, per_ngram_round_s=0.0002)


def _step(k: float) -> float:
    return 0.01 + 0.002 * k


def test_cells_are_padded_as_llama_cpp_pads_them():
    assert [padded_cells(n) for n in (0, 1, 256, 257, 511, 512, 1921)] == [256, 256, 256, 512, 512, 512, 2048]
    assert KV_PAD == 256


def test_the_cost_per_cell_is_linear_between_widths_and_proportional_to_rows_beyond():
    assert CELLS(1) == pytest.approx(1e-6) and CELLS(2) == pytest.approx(2e-6) and CELLS(4) == pytest.approx(4e-6)
    assert CELLS(8) == pytest.approx(8e-6)  # every row reads every cell
    assert CELLS.extra_s(2, 402, 201) == pytest.approx(256 * 2e-6)  # 512 cells read against 256
    assert CELLS.extra_s(2, 202, 101) == 0.0  # both pad to 256


def test_the_cost_per_cell_comes_from_t_at_a_short_and_a_long_context():
    """T(k) at 128 and 1920 cached tokens: the difference over the padded cells between them
    (2048 − 256 at every width here); a width timed slower at the short context gives 0, not a
    negative cost; one context gives nothing to read."""
    points = [LatencyPoint(128, 1, 0.010), LatencyPoint(1920, 1, 0.010 + 1792e-7),
              LatencyPoint(128, 4, 0.020), LatencyPoint(1920, 4, 0.020 + 1792e-6),
              LatencyPoint(128, 16, 0.050), LatencyPoint(1920, 16, 0.049)]
    cost = cell_cost(ModelProfile("target", "fp", tuple(points)))
    assert (cost.short, cost.long, cost.ks) == (128, 1920, (1, 4, 16))
    assert cost.per_cell_s == pytest.approx((1e-7, 1e-6, 0.0))
    assert cell_cost(ModelProfile("target", "fp", tuple(p for p in points if p.context_length == 128))) is None


def _two_slots(prompt: int, cells: CellCost | None, split: bool = False, clients: int = 2):
    requests = [(ReplayRound(0, 0),) * 2, (ReplayRound(0, 0),) * 2]
    return simulate_load(requests, (0, 1), (prompt, prompt), clients, _step, LOOP, split=split, cells=cells)


def test_one_kv_stream_pays_for_every_slots_cells_by_hand():
    """Two slots with 200-token prompts, two one-token rounds each: the decodes hold 201 + 201
    then 202 + 202 cells, read as 512 where each slot's own pad to 256, so each of the two decode
    iterations pays 256 cells at two rows (2 µs a cell), kept with the slots' own costs; with
    100-token prompts the sum pads to 256 too and nothing is added (control)."""
    plain, priced = _two_slots(200, None), _two_slots(200, CELLS)
    extra = 2 * 256 * 2e-6
    assert priced.union_s - plain.union_s == pytest.approx(extra, rel=1e-12)
    assert sum(priced.extra.values()) - sum(plain.extra.values()) == pytest.approx(extra, rel=1e-12)
    assert priced.counts == plain.counts  # T(k)'s share is untouched: a replicate re-prices it alone
    assert _two_slots(100, CELLS).union_s == pytest.approx(_two_slots(100, None).union_s, rel=1e-12)


def test_the_split_server_and_one_slot_never_pay_it():
    assert _two_slots(200, CELLS, split=True).union_s == pytest.approx(_two_slots(200, None, split=True).union_s, rel=1e-12)
    assert _two_slots(200, CELLS, clients=1).union_s == pytest.approx(_two_slots(200, None, clients=1).union_s, rel=1e-12)
