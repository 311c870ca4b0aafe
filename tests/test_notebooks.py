"""Executes every notebook in notebooks/ headless (nbclient, kernel python3) on the CPU; any cell
that raises fails the test."""

from __future__ import annotations

import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("flax")
pytest.importorskip("matplotlib")

NOTEBOOKS = sorted((pathlib.Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
CELL_TIMEOUT_S = 300


def test_notebooks_exist():
    names = [p.name for p in NOTEBOOKS]
    for name in ("01_quickstart.ipynb", "02_flax_training.ipynb", "03_performance.ipynb"):
        assert name in names


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)  # conftest's 8 host devices: not for notebooks
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},  # run from notebooks/
    )
    client.execute()  # raises CellExecutionError (with the cell and traceback) on any error
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors, errors
    if path.stem == "03_performance":
        check_performance_selection(nb)


def check_performance_selection(nb) -> None:
    """Notebook 03 picks, per head dim, the newest recorded run (by the date inside each file, not
    its name) with jax_fa4's forward and backward: every head dim of the grid is drawn from one."""
    text = "".join(
        out.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "stream"
    )
    drawn = set()
    for line in text.splitlines():
        if "<- drawn for head dims [" in line:
            drawn |= {int(x) for x in line.split("[")[-1].split("]")[0].split(",")}
    assert drawn == {64, 128, 256}, text
    assert "<- peer anchors" in text, text
