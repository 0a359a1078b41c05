"""The notebooks' code runs top to bottom as a plain script (no Jupyter needed), in the notebooks'
folder as Jupyter runs them: a change of the library they call fails here, in the fast suite.
`tests/test_notebooks.py` runs them with nbclient and checks their saved outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parents[1] / "notebooks"


def _run(name: str) -> subprocess.CompletedProcess:
    cells = json.loads((FOLDER / name).read_text(encoding="utf-8"))["cells"]
    source = "\n\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code")
    environment = dict(os.environ, MPLBACKEND="Agg")
    return subprocess.run([sys.executable, "-c", source], env=environment, cwd=FOLDER, capture_output=True, text=True)


def test_the_insertion_conditions_notebook_runs():
    completed = _run("insertion_conditions.ipynb")
    assert completed.returncode == 0, completed.stderr
    assert "verdict: helps" in completed.stdout  # Table 1: condition 1 holds and the exact difference agrees
    assert "AMD EPYC, 1 thread: 10 triples" in completed.stdout and "NVIDIA H200: 4 triples" in completed.stdout


def test_the_what_pays_notebook_runs():
    completed = _run("what_pays_on_my_machine.ipynb")
    assert completed.returncode == 0, completed.stderr
    assert "physical limit: " in completed.stdout and "the plan's best chain: " in completed.stdout
