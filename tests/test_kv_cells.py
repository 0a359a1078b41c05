"""The price of reading more KV cells (`planner.llama_cpp.kv_cells`) and `--kv-unified`'s wider
attention under load (`planner.llama_cpp.under_load.simulate_load(split=False, cells=...)`).

Checked: llama.cpp's padding of the cells a pass reads; the rows of a pass spread over the slots;
the seconds per cell read from a sitting of split and unified steps (noise floored at 0; a sitting
whose steps read the same cells prices nothing); a two-slot unified run by hand
whose slots together cross a padding boundary their own lengths do not (and its control, slots
short enough that the sum pads alike: nothing added); the split server and one slot never pay it.
"""

from __future__ import annotations

import dataclasses

import pytest

from polyplan.planner.exact.ngram_replay import ReplayRound
from polyplan.planner.llama_cpp.kv_cells import KV_PAD, CellCost, UnifiedSteps, cell_cost, padded_cells, spread_rows
from polyplan.planner.llama_cpp.server_loop import ServerLoop
from polyplan.planner.llama_cpp.under_load import simulate_load

CELLS = CellCost(ks=(1, 4), per_cell_s=(1e-6, 4e-6), sequences=4, cells=768)
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


def test_a_pass_spreads_its_rows_over_the_slots():
    assert spread_rows(1, 4) == (1, 0, 0, 0) and spread_rows(4, 4) == (1, 1, 1, 1)
    assert spread_rows(6, 4) == (2, 2, 1, 1) and spread_rows(64, 4) == (16,) * 4


def test_the_cost_per_cell_comes_from_the_unified_step_beyond_the_split_one():
    """Four sequences of 768 cached tokens: the unified step of k rows reads 4·768 + k cells
    (3,328 padded) against the split step's 768 + its most rows on one sequence (1,024 padded), so
    2,304 extra cells at every width here; a width timed slower split gives 0, not a negative
    cost; sequences too short to cross a padding boundary give nothing to read."""
    steps = UnifiedSteps(4, 768, (1, 4, 64), (0.080, 0.180, 0.700), (0.080 + 2304e-6, 0.180 + 2304e-5, 0.690))
    assert [steps.extra_cells(k) for k in steps.ks] == [2304, 2304, 2304]
    cost = cell_cost(steps)
    assert (cost.sequences, cost.cells, cost.ks) == (4, 768, (1, 4, 64))
    assert cost.per_cell_s == pytest.approx((1e-6, 1e-5, 0.0))
    assert cell_cost(UnifiedSteps(2, 60, (1, 4), (0.01, 0.02), (0.02, 0.03))) is None  # 124 cells pad as 64 do


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


def test_over_longer_slots_the_cost_per_cell_is_read_between_the_two_lengths_measured():
    """Measured at 768 and 1,536 cached tokens a slot: a pass whose own slots hold 768 or fewer
    reads the first, 1,536 or more the second, and between them linearly (at 1,152 half way);
    the extra cells are priced at the pass's own slots' length; without the longer
    measurement every length reads the first."""
    short = CellCost((1, 64), (1e-6, 4e-5), 4, 768)
    cost = dataclasses.replace(short, longer=CellCost((1, 64), (3e-6, 8e-5), 4, 1536))
    assert cost(1, 512) == pytest.approx(1e-6) and cost(1, 768) == pytest.approx(1e-6)
    assert cost(1, 1152) == pytest.approx(2e-6) and cost(64, 1152) == pytest.approx(6e-5)
    assert cost(1, 1536) == pytest.approx(3e-6) and cost(1, 4096) == pytest.approx(3e-6)
    assert cost(1) == pytest.approx(1e-6) and short(1, 4096) == pytest.approx(1e-6)
    assert cost.extra_s(1, 4 * 1152, 1152) == pytest.approx((padded_cells(4 * 1152) - padded_cells(1152)) * 2e-6)
    assert "over slots of 1536 tokens" in cost.text()
