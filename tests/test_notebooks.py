"""CI executes both notebooks on the CPU (they say what changes with a GPU)."""
import shutil

import pytest

from tests.conftest import ROOT

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")


@pytest.mark.parametrize("name", ["quickstart.ipynb", "inspect_trace.ipynb"])
def test_notebook_runs(tmp_path, name, monkeypatch):
    monkeypatch.setenv("EGG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    nb_path = tmp_path / name
    shutil.copy(ROOT / "notebooks" / name, nb_path)
    nb = nbformat.read(nb_path, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    if name == "quickstart.ipynb":
        assert "algorithm_design" in text and "registers" in text and ("unverified" in text or "verified" in text)
    else:
        assert "checkpoints" in text and "saved trace.png" in text and (tmp_path / "trace.png").exists()
