"""The interactive notebook is executed, not just stored: workflows/interactive_scaling.ipynb
runs top to bottom (its search on the CPU)."""
import pyarrow.parquet as pq

from swdask.parquet_schemas import HITS
from tests.helpers import ROOT


def test_interactive_scaling_notebook_runs(tmp_path, monkeypatch):
    """workflows/interactive_scaling.ipynb is stored without outputs and runs top to bottom."""
    import nbformat
    from nbclient import NotebookClient

    path = ROOT / "workflows" / "interactive_scaling.ipynb"
    notebook = nbformat.read(path, as_version=4)
    assert all(not cell.get("outputs") and not cell.get("execution_count")
               for cell in notebook.cells if cell.cell_type == "code")
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("SWDASK_NOTEBOOK_OUTPUT", str(tmp_path))
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    hits = pq.read_table(tmp_path / "hits.parquet")
    assert hits.schema.equals(HITS) and hits.num_rows == 25  # 5 queries x 5 hits
    outputs = "".join(str(output) for cell in notebook.cells for output in cell.get("outputs", []))
    assert "/status" in outputs  # the dashboard link
