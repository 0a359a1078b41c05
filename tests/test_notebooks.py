"""The notebooks (`notebooks/`): saved with their outputs so that they render, and run top to
bottom with nbclient (slow; needs the `notebook` extra: `pip install -e ".[notebook]"`).

`tests/test_planner_notebook.py` runs the same code cells as a plain script in the fast suite, so
a change of the library they call is caught without Jupyter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FOLDER = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = ("insertion_conditions.ipynb", "what_pays_on_my_machine.ipynb")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_notebook_is_saved_with_its_outputs(name):
    """Every code cell ran (in order) and left no error and nothing on stderr; the plots are PNGs."""
    cells = [cell for cell in json.loads((FOLDER / name).read_text(encoding="utf-8"))["cells"] if cell["cell_type"] == "code"]
    assert [cell["execution_count"] for cell in cells] == list(range(1, len(cells) + 1))
    outputs = [output for cell in cells for output in cell["outputs"]]
    assert not [output for output in outputs if output["output_type"] == "error"]
    assert not [output for output in outputs if output["output_type"] == "stream" and output["name"] == "stderr"]
    images = [output for output in outputs if "image/png" in output.get("data", {})]
    assert 2 <= len(images) <= 6  # a few plots, and they render on GitHub


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_notebook_runs_top_to_bottom(name):
    nbclient = pytest.importorskip("nbclient", reason="the notebook extra is not installed (pip install -e '.[notebook]')")
    nbformat = pytest.importorskip("nbformat", reason="the notebook extra is not installed (pip install -e '.[notebook]')")
    pytest.importorskip("ipykernel", reason="the notebook extra is not installed (pip install -e '.[notebook]')")
    notebook = nbformat.read(FOLDER / name, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(FOLDER)}})
    client.execute()  # raises CellExecutionError, naming the cell, when one fails
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert any("image/png" in output.get("data", {}) for output in outputs)
