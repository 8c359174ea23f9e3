"""The notebooks: generated from notebooks/build.py, committed without errors and small, and
each runs top to bottom on a CPU-only machine (GPU cells are guarded and say so)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_NOTEBOOK_BYTES = 200 * 1024  # outputs are tables and text; no large images

nbformat = pytest.importorskip("nbformat", reason="nbformat not installed: pip install -e '.[test]'")


def build_module():
    spec = importlib.util.spec_from_file_location("notebooks_build", ROOT / "notebooks" / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_one_notebook_per_rung():
    from kernels.registry import rung_names

    build = build_module()
    names = {r.rung for r in build.RUNGS}
    assert set(rung_names()) <= names, f"rungs without a notebook in notebooks/build.py: {set(rung_names()) - names}"
    assert {p.name for p in NOTEBOOKS} == {r.filename for r in build.RUNGS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_matches_its_source(path):
    """Cells as notebooks/build.py writes them (outputs aside): rerun it after editing the template."""
    build = build_module()
    rung = next(r for r in build.RUNGS if r.filename == path.name)
    assert build.sources(nbformat.read(path, as_version=4)) == build.sources(build.notebook(rung)), \
        "out of date: python notebooks/build.py, then python -m tools.execute_notebooks on the GPU host"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_has_no_errors_and_is_small(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", f"cell {i}: {out.get('ename')}: {out.get('evalue')}"
            assert "Traceback (most recent call last)" not in "".join(out.get("text", "")), f"cell {i} printed a traceback"
            assert not {"image/png", "image/jpeg"} & set(out.get("data", {})), f"cell {i}: embedded raster image"
    assert path.stat().st_size <= MAX_NOTEBOOK_BYTES, f"{path.name}: {path.stat().st_size} bytes"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path):
    """Top to bottom in a fresh kernel (on a CPU machine: compile and inspect, GPU cells skipped)."""
    pytest.importorskip("nbclient", reason="nbclient not installed: pip install -e '.[test]'")
    pytest.importorskip("ipykernel", reason="ipykernel not installed: pip install -e '.[test]'")
    from tools.execute_notebooks import execute

    nb = execute(path, timeout_s=600, kernel="python3")  # raises CellExecutionError on any error
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors
