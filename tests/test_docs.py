"""The documentation site: it builds strictly from results/, every rung page shows its measured
table, and a missing or malformed source fails the build with a message that names it.

The main build reads the committed results/h200/ladder.json and results/inspect.json: it fails
while they are missing, by design (the site shows only measured numbers). The marker tests use a
synthetic results root (``DOCS_RESULTS_DIR``) so that they exercise the failure paths quickly.
"""

from __future__ import annotations

import copy
import html
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOOK = ROOT / "docs" / "hooks" / "generated.py"

pytest.importorskip("mkdocs", reason="mkdocs not installed: pip install -e '.[docs]' (make test does)")
pytest.importorskip("material", reason="mkdocs-material not installed: pip install -e '.[docs]'")


def load_hook():
    spec = importlib.util.spec_from_file_location("docs_hooks_generated", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synthetic_results(root: Path) -> Path:
    """A results root shaped like results/ (h200/ladder.json, inspect.json), numbers made up."""
    from kernels.registry import rung_names
    from tools.suites import ladder

    speed = {"sdpa-flash": 330.0, "sdpa-cudnn": 550.0, "fa4": 600.0}
    speed.update({r: 2.0 * 4 ** i for i, r in enumerate(rung_names())})
    rows = []
    for problem in ladder.problems():
        for kernel in rung_names() + list(ladder.PEERS):
            tflops = speed[kernel] * (0.8 if problem.causal else 1.0)
            ms = problem.flops() / tflops / 1e9
            rows.append({"kernel": kernel, "problem": problem.to_dict(),
                         "ms": {"median": ms, "p20": ms * 0.99, "p80": ms * 1.01},
                         "tflops": tflops, "gbps": None, "rel_err": 0.002, "status": "ok"})
    meta = {"suite": "ladder", "gpu": "NVIDIA H200 (synthetic test data)", "driver": "0", "cuda": "13.0",
            "torch": "test", "cutlass_dsl": "4.8.1", "commit": "0" * 40, "date": "2026-01-01",
            "ceilings": {"copy_tbps": 4.0, "bf16_gemm_tflops": 700.0, "fp8_gemm_tflops": 1200.0}}
    (root / "h200").mkdir(parents=True, exist_ok=True)
    (root / "h200" / "ladder.json").write_text(json.dumps({"meta": meta, "rows": rows}))
    from tools.inspect import FAMILIES

    reports = [{"kernel": r, "problem": {"batch": 1, "seqlen_q": 1024, "seqlen_k": 1024, "heads_q": 16,
                                         "heads_kv": 16, "head_dim": d, "causal": c, "dtype": "bf16"},
                "status": "ok", "compile_s": 1.0, "registers": 128, "static_smem_bytes": 0,
                "dynamic_smem_bytes": None, "stack_frame_bytes": 0, "local_bytes": 0, "sass_total": 100,
                "sass_mix": {op: 1 for op in FAMILIES}}
               for r in rung_names() for d in (64, 128) for c in (False, True)]
    (root / "inspect.json").write_text(json.dumps({"meta": {"arch": "sm_90a", "cutlass_dsl": "4.8.1",
                                                            "commit": "0" * 40, "date": "2026-01-01"},
                                                   "reports": reports}))
    return root


def mkdocs_build(site: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def page_html(site: Path, rel: str) -> str:
    return (site / rel / "index.html").read_text()


def measured_tables(page: str) -> list[tuple[list[str], list[list[str]]]]:
    """(headers, rows) of every generated results table in a built page."""
    out = []
    for block in re.findall(r'<div class="measured-table"[^>]*>(.*?)</div>', page, re.S):
        headers = [html.unescape(re.sub("<.*?>", "", h)).strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", block, re.S)]
        rows = [[html.unescape(re.sub("<.*?>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
                for tr in re.findall(r"<tr>(.*?)</tr>", block, re.S)]
        out.append((headers, [r for r in rows if r]))
    return out


# ---- the real build: results/ as committed ---------------------------------------------------
@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    env = {"DOCS_RESULTS_DIR": "", "DOCS_GPU": ""}
    result = mkdocs_build(site, env)
    if result.returncode:
        pytest.fail("mkdocs build --strict failed (results/h200/ladder.json and results/inspect.json "
                    "must be committed; see the message):\n" + result.stderr[-4000:])
    return site


def test_site_builds_strictly(built_site):
    assert (built_site / "index.html").is_file()
    assert "measured-summary" in (built_site / "index.html").read_text()


def rung_names():
    from kernels.registry import rung_names as names

    return names()


@pytest.mark.parametrize("rung", rung_names())
def test_every_rung_page_shows_its_measured_table(built_site, rung):
    page = page_html(built_site, f"worklog/{rung}")
    tables = measured_tables(page)
    assert tables, f"worklog/{rung}: no measured table"
    headers, rows = tables[0]
    assert rung in headers, f"worklog/{rung}: first table does not show {rung}: {headers}"
    column = headers.index(rung)
    values = [r[column] for r in rows]
    assert any(re.fullmatch(r"\d+(\.\d+)?", v) for v in values), f"{rung}: no measured value in {values}"
    assert "compile-report" in page and "measured-plot" in page
    assert 'class="provenance"' in page and "commit" in page


def test_notebooks_are_rendered(built_site):
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert (built_site / "notebooks" / nb.stem / "index.html").is_file(), nb.name


# ---- markers, on a synthetic results root ----------------------------------------------------
@pytest.fixture(scope="module")
def hook():
    return load_hook()


@pytest.fixture()
def data(hook, tmp_path):
    return hook.Data(results_dir=synthetic_results(tmp_path / "results"))


def test_code_excerpt_follows_the_source(hook, data):
    out = hook.render_markers("<!-- code: kernels/k1.py K1FMHA.kernel -->", "docs/t.md", data)
    source = (ROOT / "kernels" / "k1.py").read_text().splitlines()
    start = int(re.search(r'linenums="(\d+)"', out).group(1))
    assert source[start - 1].strip().startswith("@cute.kernel")
    assert "def kernel(" in out


def test_code_excerpt_by_banner_stops_at_the_next_banner(hook, data):
    out = hook.render_markers('<!-- code: kernels/k1.py K1FMHA.kernel section="2. one key" -->', "docs/t.md", data)
    assert "2. one key" in out and "3. normalize" not in out


def test_docstring_section(hook, data):
    out = hook.render_markers('<!-- code: kernels/k1.py __doc__ section="How it works" -->', "docs/t.md", data)
    assert out.startswith("```text") and "How it works" in out and "Cost" not in out.split("\n", 2)[2]


@pytest.mark.parametrize("marker,message", [
    ("<!-- code: kernels/nope.py K1FMHA -->", "kernels/nope.py: file not found"),
    ("<!-- code: kernels/k1.py K1FMHA.no_such_method -->", "no function or class K1FMHA.no_such_method"),
    ('<!-- code: kernels/k1.py K1FMHA.kernel section="no such banner" -->', "no banner comment"),
    ("<!-- table: suite=nosuch kernels=k1 -->", "results/h200/nosuch.json: not found"),
    ("<!-- table: suite=ladder kernels=k1,k99 where=head_dim:128 -->", "no rows for k99"),
    ("<!-- table: suite=ladder kernels=k1 where=head_dim:96 -->", "no rows"),
    ("<!-- inspect: kernels=k1 head_dim=256 -->", "no report for k1"),
    ("<!-- table: suite=ladder kernels=@this -->", "@this unknown here"),
])
def test_bad_markers_fail_with_a_clear_message(hook, data, marker, message):
    with pytest.raises(hook.MarkerError, match=re.escape(message)):
        hook.render_markers(f"text\n{marker}\nmore", "docs/page.md", data)


def test_malformed_results_fail(hook, data):
    path = data.results_dir / "h200" / "ladder.json"
    doc = json.loads(path.read_text())
    broken = copy.deepcopy(doc)
    del broken["meta"]["commit"]
    path.write_text(json.dumps(broken))
    with pytest.raises(hook.MarkerError, match="meta lacks commit"):
        hook.render_markers("<!-- table: suite=ladder kernels=k1 -->", "docs/page.md", data)


def test_table_plot_summary_render(hook, data):
    data.page_rung = None
    table = hook.render_markers("<!-- table: suite=ladder kernels=k1,fa4 where=head_dim:128,causal:false -->",
                                "docs/worklog/k1.md", data)
    assert "| problem | k1 | fa4 |" in table and "synthetic test data" in table
    plot = hook.render_markers("<!-- plot: kernels=@prev,@this,fa4 where=causal:false -->", "docs/worklog/k2.md", data)
    assert plot.count("<svg") == 1 and "<?xml" not in plot and len(plot) < 60_000
    summary = hook.render_markers("<!-- summary: peers=fa4 -->",
                                  "docs/index.md", data)
    assert "[K1](worklog/k1.md)" in summary and "% of fa4" in summary and "s16384" in summary


def test_build_fails_without_results(tmp_path):
    """The whole build stops, naming the file, when the results root is empty."""
    empty = tmp_path / "empty"
    empty.mkdir()
    result = mkdocs_build(tmp_path / "site", {"DOCS_RESULTS_DIR": str(empty)})
    assert result.returncode != 0
    assert "ladder.json: not found" in result.stderr


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="chromium not installed (the browser check runs where it is)")
def test_k2_page_renders_in_a_browser(built_site, tmp_path):
    """Headless Chromium loads the K2 page from the built site: the table and the SVG plot are in the DOM."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    page = built_site / "worklog" / "k2" / "index.html"
    result = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                             page.as_uri()], capture_output=True, text=True, timeout=120)
    dom = result.stdout
    assert "measured-table" in dom and "<svg" in dom and "K2" in dom, result.stderr[-2000:]
