"""The interactive notebook is executed, not just stored: workflows/interactive_scaling.ipynb
runs top to bottom on the CPU, its cluster scaled in place from 1 to 2 workers."""
import re

import pyarrow.parquet as pq

from swdask.parquet_schemas import HITS
from tests.helpers import ROOT


def test_interactive_scaling_notebook_runs(tmp_path, monkeypatch):
    """workflows/interactive_scaling.ipynb is stored without outputs and runs top to bottom:
    the dashboard link, the progress widget, the search on 1 and 2 workers with its plot of
    time and GCUPS, the histograms of the hits, the export."""
    import nbformat
    from nbclient import NotebookClient

    path = ROOT / "workflows" / "interactive_scaling.ipynb"
    notebook = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") and not cell.get("execution_count")
               for cell in notebook.cells if cell.cell_type == "code")
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("SWDASK_NOTEBOOK_OUTPUT", str(tmp_path))
    monkeypatch.setenv("SWDASK_NOTEBOOK_WORKERS", "2")
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    hits = pq.read_table(tmp_path / "hits.parquet")
    assert hits.schema.equals(HITS) and hits.num_rows == 250  # 5 queries x 50 hits
    outputs = [output for cell in notebook.cells for output in cell.get("outputs", [])]
    text = "".join(str(output) for output in outputs)
    assert "/status" in text  # the dashboard link
    assert "worker(s)" not in text
    kinds = {kind for output in outputs for kind in output.get("data", {})}
    assert "application/vnd.jupyter.widget-view+json" in kinds  # the progress widget
    # The scaling: one line per size, each with its time and GCUPS.
    steps = re.findall(r"(\d) workers?: ([\d.]+) s, ([\d.]+) GCUPS", text)
    assert [n for n, _, _ in steps] == ["1", "2"] and all(float(g) > 0 for _, _, g in steps)
    # The plots (time and GCUPS; the histograms): matplotlib's images, or bokeh's documents.
    plots = [output for output in outputs
             if "image/png" in output.get("data", {})
             or "application/vnd.bokehjs_exec.v0+json" in output.get("data", {})]
    assert len(plots) == 2
