"""The target's step over several sequences, split and unified, through the real bindings on a
tiny GGUF (`engines.llama_cpp.unified_steps.measure_unified_steps`): it runs, times every width in
both layouts, and each copied sequence continues at its own next position (llama.cpp refuses a
row whose position does not follow its sequence's last, so a copy that failed would fail here)."""

from __future__ import annotations

import pytest

from tiny_gguf import write_tiny_gguf

pytest.importorskip("llama_cpp")

pytestmark = pytest.mark.usefixtures("single_thread")


def test_the_steps_are_timed_split_and_unified_on_a_real_file(tmp_path):
    from polyplan.engines.llama_cpp.unified_steps import measure_unified_steps
    from polyplan.planner.llama_cpp.kv_cells import cell_cost

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, context_length=2048)
    lines = []
    steps = measure_unified_steps(path, 1, (1, 4, 8), sequences=3, cells=300, repeats=2, log=lines.append)
    assert (steps.sequences, steps.cells, steps.ks) == (3, 300, (1, 4, 8))
    assert len(steps.split_s) == len(steps.unified_s) == 3 and min(steps.split_s + steps.unified_s) > 0
    assert [steps.extra_cells(k) for k in steps.ks] == [512, 512, 512]  # 900 + k cells pad to 1,024, 300 + 3 to 512
    assert cell_cost(steps) is not None and "3 sequences of 300 cached tokens" in lines[0]


def test_a_file_llama_cpp_cannot_load_is_one_line(tmp_path):
    from polyplan.engines.llama_cpp.unified_steps import measure_unified_steps
    from polyplan.formats.errors import PolyplanError

    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf")
    with pytest.raises(PolyplanError, match="cannot load"):
        measure_unified_steps(broken, 1, (1,), sequences=2, cells=8, repeats=1)
