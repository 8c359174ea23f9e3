"""The notebooks: generated from notebooks/build.py, their quoted text current with the rungs
they quote, committed without errors and small, and each runs top to bottom on a CPU-only
machine (GPU cells are guarded and say so)."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MODEL_NOTEBOOK = ROOT / "notebooks" / "model.ipynb"  # hand-written; it runs in tests/test_model.py
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
    rungs = build.discovered_rungs()
    assert [r.rung for r in rungs] == rung_names()
    assert {p.name for p in NOTEBOOKS} == {r.filename for r in rungs}, "run python notebooks/build.py"


def rung_for(build, path: Path):
    return next(r for r in build.discovered_rungs() if r.filename == path.name)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_matches_its_source(path):
    """Cells as notebooks/build.py writes them now (outputs aside): the template and the text
    quoted from the rung. Rerun it after editing either."""
    build = build_module()
    diff = build.differences(nbformat.read(path, as_version=4), build.notebook(rung_for(build, path)))
    assert not diff, (f"{path.name} is out of date: {'; '.join(diff)}. Run python notebooks/build.py "
                      "(then execute the notebooks on the GPU host)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_quotes_the_current_docstring_of_its_rung(path):
    """The notebook's text holds kernels/kN.py's module docstring as the file has it now
    (read here with ast, independently of build.py), and no cell prints it at run time, where
    the committed output would be as old as the last GPU run."""
    build = build_module()
    rung = rung_for(build, path).rung
    source = ROOT / "kernels" / f"{rung}.py"
    doc = ast.get_docstring(ast.parse(source.read_text()), clean=True)
    cells = nbformat.read(path, as_version=4).cells
    assert any(c.cell_type == "markdown" and f"```text\n{doc}\n```" in c.source for c in cells), \
        f"{path.name} does not quote the current docstring of kernels/{rung}.py: python notebooks/build.py"
    assert not any(c.cell_type == "code" and "__doc__" in c.source for c in cells)


def test_a_docstring_edit_makes_the_notebook_stale(monkeypatch):
    """The drift check fails, naming the cell, when the rung's docstring changes."""
    build = build_module()
    rung = build.discovered_rungs()[0]
    committed = nbformat.read(ROOT / "notebooks" / rung.filename, as_version=4)
    assert build.differences(committed, build.notebook(rung)) == []
    idea, doc = build.rung_source(rung.rung)
    monkeypatch.setattr(build, "rung_source", lambda name: (idea, doc.replace("\n", "\nedited line\n", 1)))
    diff = build.differences(committed, build.notebook(rung))
    assert len(diff) == 1 and "The idea" in diff[0], diff


def test_rebuilding_keeps_outputs_of_unchanged_code_cells():
    build = build_module()
    rung = build.discovered_rungs()[-1]
    committed = nbformat.read(ROOT / "notebooks" / rung.filename, as_version=4)
    fresh = build.notebook(rung)
    assert build.keep_outputs(fresh, committed) == sum(bool(c.get("outputs")) for c in committed.cells)
    assert [c.get("outputs") for c in fresh.cells] == [c.get("outputs") for c in committed.cells]
    changed = build.notebook(rung)
    first_code = next(c for c in changed.cells if c.cell_type == "code")
    first_code.source += "\nprint('changed')"
    build.keep_outputs(changed, committed)
    assert first_code.outputs == [], "a changed code cell must not keep the old run's output"


def test_a_new_rung_gets_a_notebook_without_hand_written_text(monkeypatch):
    """Rungs come from kernels/ (the lead adds k5, k6, ...): one without a RUNG_TEXT entry still
    gets a notebook, titled by its docs page, with its IDEA in place of the hand-written line."""
    build = build_module()
    last = build.discovered_rungs()[-1]
    monkeypatch.setattr(build, "RUNG_TEXT", tuple(r for r in build.RUNG_TEXT if r.rung != last.rung))
    rung = build.discovered_rungs()[-1]
    idea, _ = build.rung_source(rung.rung)
    assert rung.rung == last.rung and rung.learn is None and rung.filename.startswith(f"{rung.number:02d}_{rung.rung}_")
    assert rung.dtype == last.dtype == build.rung_dtype(rung.rung)  # an FP8 rung's notebook runs e4m3
    text = build.notebook(rung).cells[0].source
    assert text.startswith(f"# {rung.rung.upper()}") and idea in text


@pytest.mark.parametrize("path", [*NOTEBOOKS, MODEL_NOTEBOOK], ids=lambda p: p.stem)
def test_committed_notebook_has_no_errors_and_is_small(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", f"cell {i}: {out.get('ename')}: {out.get('evalue')}"
            assert "Traceback (most recent call last)" not in "".join(out.get("text", "")), f"cell {i} printed a traceback"
            assert not {"image/png", "image/jpeg"} & set(out.get("data", {})), f"cell {i}: embedded raster image"
    assert path.stat().st_size <= MAX_NOTEBOOK_BYTES, f"{path.name}: {path.stat().st_size} bytes"


# What an output of the executing machine looks like: an absolute path into its file system, an
# installed package's location, a Python warning.
HOST_TRACES = re.compile(r"(?<![\w.~])/(?:opt|tmp|home|root|usr|var|work|check|mnt|scratch|private)/"
                         r"|site-packages|\w+Warning: ")


def host_traces(nb: dict) -> list[str]:
    """``cell i: ...text...`` for each output of ``nb`` that holds a trace of the executing machine."""
    found = []
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            texts = [out.get("text", ""), *out.get("data", {}).values()]
            text = "".join("".join(t) if isinstance(t, list) else str(t) for t in texts)
            match = HOST_TRACES.search(text)
            if match:
                found.append(f"cell {i}: ...{text[max(0, match.start() - 40):match.end() + 40]}...")
    return found


@pytest.mark.parametrize("path", [*NOTEBOOKS, MODEL_NOTEBOOK], ids=lambda p: p.stem)
def test_committed_outputs_hold_no_trace_of_the_executing_machine(path):
    assert not host_traces(json.loads(path.read_text())), \
        f"{path.name}: re-run python -m tools.execute_notebooks (warnings off): {host_traces(json.loads(path.read_text()))}"


def test_the_host_trace_check_finds_a_warning_and_a_path():
    stderr = {"output_type": "stream", "name": "stderr",
              "text": "/opt/torch/.venv/lib/python3.12/site-packages/tqdm/auto.py:21: TqdmWarning: IProgress"}
    table = {"output_type": "display_data", "data": {"text/markdown": "| k13 | 660 |"}}
    assert host_traces({"cells": [{"outputs": [table]}, {"outputs": [stderr]}]})[0].startswith("cell 1:")
    assert not host_traces({"cells": [{"outputs": [table]}]})


def test_the_gpu_host_executes_every_notebook():
    """python -m tools.execute_notebooks (run on the GPU host) re-runs the rungs' notebooks and
    the model's, so that every committed notebook shows that GPU's outputs."""
    from tools.execute_notebooks import notebook_paths

    assert notebook_paths() == [*NOTEBOOKS, MODEL_NOTEBOOK]
    assert set(notebook_paths()) == set((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes(path, tmp_path):
    """Top to bottom in a fresh kernel (on a CPU machine: compile and inspect, GPU cells skipped)."""
    pytest.importorskip("nbclient", reason="nbclient not installed: pip install -e '.[test]'")
    pytest.importorskip("ipykernel", reason="ipykernel not installed: pip install -e '.[test]'")
    from tools.execute_notebooks import execute

    nb = execute(path, timeout_s=600, kernel="python3")  # raises CellExecutionError on any error
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert not errors


def test_recorded_tables_refresh_only_the_cells_that_read_results(tmp_path):
    """--recorded-tables: the cells that read results/ (the profile's counters, the ladder's
    tables) re-run, every other output kept."""
    pytest.importorskip("nbclient", reason="nbclient not installed: pip install -e '.[test]'")
    pytest.importorskip("ipykernel", reason="ipykernel not installed: pip install -e '.[test]'")
    from tools.execute_notebooks import RECORDED_MARK, refresh_recorded_tables

    path = tmp_path / NOTEBOOKS[-1].name
    original = nbformat.read(NOTEBOOKS[-1], as_version=4)
    for cell in original.cells:
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", text="kept\n")]
    nbformat.write(original, path)
    nb = refresh_recorded_tables(path, timeout_s=600, kernel="python3")
    code = [c for c in nb.cells if c.cell_type == "code"]
    reads = [RECORDED_MARK in c.source for c in code]
    assert reads[-1] and sum(reads) >= 2, "the template's profile and ladder cells"
    assert all((c.outputs[0].get("text") == "kept\n") != read for c, read in zip(code, reads))
    assert "TFLOP/s" in json.dumps(code[-1].outputs) and nb.metadata == original.metadata


def test_recorded_tables_of_a_non_rung_notebook_is_refused(capsys):
    """--recorded-tables only knows the rung notebooks: naming another one is an error, not a
    run that does nothing and exits 0."""
    pytest.importorskip("nbclient", reason="nbclient not installed: pip install -e '.[test]'")
    from tools import execute_notebooks

    with pytest.raises(SystemExit) as exc:
        execute_notebooks.main(["--recorded-tables", "model"])
    assert exc.value.code == 2 and "rung notebooks only, not model" in capsys.readouterr().err
