"""Where one KV stream puts each token (`planner.llama_cpp.kv_placement.UnifiedStream`, llama.cpp's
`find_slot`, `apply_ubatch` and `seq_rm`), and what `simulate_load` prices with it for
`--kv-unified`.

Checked by hand: tokens go to the first empty cells from the head, in batch order, the head then
after the last; a trim empties a slot's last positions and moves the head back, so the next tokens
fill the hole; the search restarts at cell 0 where the head lies more than twice the ubatch past
the cells in use, and wraps at the stream's end; the extent is the highest cell in use, which a
hole below it does not lower. Under load: a finished request's cells stay until its slot starts
another prompt, so the slot still decoding reads them (the count of cells held would not); a new
prompt empties its slot's old cells and fills them, but the extent stays with the slot above.
"""

from __future__ import annotations

import pytest

from polyplan.planner.exact.ngram_replay import ReplayRound
from polyplan.planner.llama_cpp.kv_cells import CellCost
from polyplan.planner.llama_cpp.kv_placement import EMPTY, UnifiedStream
from polyplan.planner.llama_cpp.server_loop import ServerLoop
from polyplan.planner.llama_cpp.under_load import simulate_load

CELLS = CellCost(ks=(1, 4), per_cell_s=(1e-6, 4e-6), sequences=2, cells=512)
LOOP = ServerLoop(per_request_s=0.0, per_round_s=0.001, per_row_s=0.0, per_ngram_round_s=0.0)


def _step(k: float) -> float:
    return 0.01 + 0.002 * k


def test_tokens_fill_the_first_empty_cells_from_the_head_in_batch_order():
    stream = UnifiedStream(16)
    assert stream.place([(0, 3), (1, 2)]) == 5
    assert stream.owner[:6] == [0, 0, 0, 1, 1, EMPTY] and stream.head == 5
    assert stream.place([(0, 2), (1, 1)]) == 8  # slot 0's rows 5-6, slot 1's 7: the slots interleave
    assert stream.cells == {0: [0, 1, 2, 5, 6], 1: [3, 4, 7]}


def test_a_trim_leaves_a_hole_the_next_tokens_fill_and_the_extent_stays():
    stream = UnifiedStream(16)
    stream.place([(0, 3), (1, 2), (0, 2), (1, 1)])  # cells 0-2 and 5-6 slot 0's, 3-4 and 7 slot 1's
    stream.trim(0, 3)  # slot 0's positions 3 and 4 (cells 5, 6) rejected
    assert stream.head == 5 and stream.used == 6 and stream.extent() == 8  # the hole lies below cell 7
    stream.place([(1, 3)])
    assert stream.cells[1] == [3, 4, 7, 5, 6, 8] and stream.extent() == 9
    stream.clear(1)  # a new prompt without the cache: every cell of slot 1 emptied
    assert stream.cells[1] == [] and stream.extent() == 3 and stream.head == 3


def test_the_search_restarts_at_cell_0_far_past_the_cells_in_use_and_wraps_at_the_end():
    stream = UnifiedStream(12)
    stream.place([(0, 8), (1, 2)])  # cells 0-7 slot 0's, 8-9 slot 1's, head 10
    stream.trim(0, 2)  # cells 2-7 empty: the head moves back to 2
    stream.head = 10  # as if the hole had been left behind (the head only moves back on a trim)
    stream.place([(1, 1)])  # 10 > 4 used + 2: from cell 0, the first empty is 2
    assert stream.cells[1][-1] == 2
    wrap = UnifiedStream(6)
    wrap.place([(0, 4)])
    wrap.trim(0, 1)  # cells 1-3 empty, head 1
    wrap.head = 4
    wrap.place([(1, 1), (0, 1), (1, 1)])  # 4 is not past 1 + 2·3: from cell 4, then 5, then wraps to 1
    assert wrap.cells[1] == [4, 1] and wrap.cells[0] == [0, 5]


def test_a_stream_without_room_is_an_error():
    stream = UnifiedStream(4)
    stream.place([(0, 3)])
    with pytest.raises(ValueError, match="4 cells has 1 free for 2 tokens"):
        stream.place([(1, 2)])


def _run(requests, prompts, cells=CELLS):
    return simulate_load(requests, tuple(range(len(requests))), prompts, 2, _step, LOOP, split=False, cells=cells,
                         slot_context=512)


def test_a_finished_requests_cells_stay_for_the_slot_still_decoding():
    """Slot 0: a 250-token prompt and one round; slot 1: a 10-token prompt and five. After slot 0's
    round the stream holds cells 0-249 (its prompt), 250-259 (slot 1's), then the decode rows: slot
    1's next rows land at 262 and on, so every later pass reads 512 cells where slot 1's own stream
    pads to 256: 256 cells at one row, 1 µs each, on each of its four lone rounds, and on the pass
    both decoded in (2 µs a cell at two rows). Counting only the cells of slots holding a request
    would price the lone rounds at nothing."""
    requests = [(ReplayRound(0, 0),), (ReplayRound(0, 0),) * 5]
    plain, priced = _run(requests, (250, 10), None), _run(requests, (250, 10))
    assert priced.union_s - plain.union_s == pytest.approx(256 * 2e-6 + 4 * 256 * 1e-6, rel=1e-12)


def test_a_new_prompt_fills_the_emptied_cells_below_and_the_extent_stays_with_the_slot_above():
    """Slot 0 serves requests 0 and 2 (client 0 sends its second when its first ends), slot 1
    request 1. Request 2's prompt empties request 0's cells (0-249 and 260) and its 5 rows, placed
    after slot 1's row (decoding rows first), fill cells 1-5 from the bottom; but slot 1 still holds
    cells 250-261, so every pass to its end reads 512 cells: 256 cells at 2 µs on the passes both
    slots decode in (four), at 6 µs on request 2's prompt pass (six rows), at 1 µs on slot 1's lone
    last round. Counting the cells held prices only the first pass (262 cells held; then 17)."""
    requests = [(ReplayRound(0, 0),), (ReplayRound(0, 0),) * 6, (ReplayRound(0, 0),) * 3]
    plain, priced = _run(requests, (250, 10, 5), None), _run(requests, (250, 10, 5))
    assert priced.union_s - plain.union_s == pytest.approx(256e-6 * (4 * 2 + 6 + 1), rel=1e-12)
