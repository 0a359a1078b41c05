"""The per-category table: ratios of totals per kind, an 'all' row, and the text table."""

from __future__ import annotations

import math

from polyplan.validation.categories import ALL, PromptRun, category_lines, category_rows


def test_rows_are_ratios_of_totals_per_kind_then_all():
    runs = [
        PromptRun("writing", chain_s=1.0, target_only_s=3.0, tokens=30, target_passes=10),
        PromptRun("math", chain_s=2.0, target_only_s=2.0, tokens=20, target_passes=20),
        PromptRun("writing", chain_s=3.0, target_only_s=5.0, tokens=30, target_passes=5),
    ]
    rows = category_rows(runs)
    assert [row.category for row in rows] == ["writing", "math", ALL]
    writing, math_row, total = rows
    assert writing.runs == 2 and math.isclose(writing.speedup, 8.0 / 4.0) and math.isclose(writing.tokens_per_target_pass, 60 / 15)
    assert math.isclose(math_row.speedup, 1.0) and math.isclose(math_row.tokens_per_target_pass, 1.0)
    assert total.runs == 3 and math.isclose(total.speedup, 10.0 / 6.0) and math.isclose(total.tokens_per_target_pass, 80 / 35)
    lines = category_lines("target > drafter", rows)
    assert lines[0] == "per category, target > drafter:" and "writing" in lines[2] and "2.00x" in lines[2]
    assert category_rows([]) == ()
