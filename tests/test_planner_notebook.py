"""The insertion-conditions notebook runs top to bottom (its cells hold their own asserts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "insertion_conditions.ipynb"


def test_notebook_code_cells_run():
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    source = "\n\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")
    assert "analyze_insertion" in source
    environment = dict(os.environ, MPLBACKEND="Agg")
    completed = subprocess.run([sys.executable, "-c", source], env=environment, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    assert "verdict: helps" in completed.stdout
