"""The documentation site: it builds strictly from results/, every rung page shows its measured
table, and a missing or malformed source fails the build with a message that names it.

The main build reads the committed results/h200/ladder.json and results/inspect.json: it fails
while they are missing, by design (the site shows only measured numbers). The marker tests use a
synthetic results root (``DOCS_RESULTS_DIR``) so that they exercise the failure paths quickly.
"""

from __future__ import annotations

import copy
import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import load_docs_hook, run_once  # tests/support.py

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("mkdocs", reason="mkdocs not installed: pip install -e '.[docs]' (make test does)")
pytest.importorskip("material", reason="mkdocs-material not installed: pip install -e '.[docs]'")


def synthetic_results(root: Path) -> Path:
    """A results root shaped like results/ (h200/ladder.json, inspect.json), numbers made up."""
    from kernels.registry import rung_names
    from tools.suites import ladder

    speed = {"sdpa-flash": 330.0, "sdpa-cudnn": 550.0, "fa4": 600.0, "cudnn-fe": 560.0}
    speed.update({r: 2.0 * 4 ** i for i, r in enumerate(rung_names())})
    rows = []
    for problem in ladder.problems():
        for kernel in rung_names() + list(ladder.PEERS):
            if not ladder.takes_dtype(kernel, problem):  # FP8 rungs: e4m3 rows; the rest: bf16
                continue
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
    """The site as committed, built once per test run (pytest-xdist's workers share it)."""
    def make(folder: Path):
        result = mkdocs_build(folder / "site", {"DOCS_RESULTS_DIR": "", "DOCS_GPU": ""})
        (folder / "build.json").write_text(json.dumps({"returncode": result.returncode, "stderr": result.stderr}))

    folder = run_once(tmp_path_factory, "docs-site", make)
    build = json.loads((folder / "build.json").read_text())
    if build["returncode"]:
        pytest.fail("mkdocs build --strict failed (results/h200/ladder.json and results/inspect.json "
                    "must be committed; see the message):\n" + build["stderr"][-4000:])
    return folder / "site"


def test_site_builds_strictly(built_site):
    assert (built_site / "index.html").is_file()
    assert "measured-summary" in (built_site / "index.html").read_text()


def rung_names():
    from kernels.registry import rung_names as names

    return names()


def measured_rungs() -> set[str]:
    """The rungs results/h200/ladder.json has rows for (a new rung has none until the GPU run)."""
    from tools import report

    return {r["kernel"] for r in report.load("ladder")["rows"]}


@pytest.mark.parametrize("rung", rung_names())
def test_every_rung_page_shows_its_measured_table(built_site, rung):
    page = page_html(built_site, f"worklog/{rung}")
    if rung not in measured_rungs():
        # Not measured yet: the page says so where its numbers go, and has its compile report.
        # (with the rung before it, when that one is not measured either: "Pending: K11, K12 ...")
        assert re.search(rf"Pending: (K\d+, )*{rung.upper()}(, K\d+)* not measured yet", page), \
            f"worklog/{rung}: no pending note"
        assert "compile-report" in page and 'class="provenance"' in page
        index = (built_site / "index.html").read_text()
        assert re.search(rf"not measured yet: ([a-z0-9]+, )*{rung}\b", index), f"index: {rung} not shown as pending"
        return
    tables = measured_tables(page)
    assert tables, f"worklog/{rung}: no measured table"
    headers, rows = tables[0]
    assert rung in headers, f"worklog/{rung}: first table does not show {rung}: {headers}"
    column = headers.index(rung)
    values = [r[column] for r in rows]
    assert any(re.fullmatch(r"\d+(\.\d+)?(e[-+]\d+)?", v) for v in values), f"{rung}: no measured value in {values}"
    assert "compile-report" in page and "measured-plot" in page
    assert 'class="provenance"' in page and "commit" in page


def test_notebooks_are_rendered(built_site):
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert (built_site / "notebooks" / nb.stem / "index.html").is_file(), nb.name


def test_results_page_shows_every_results_file_and_kernel(built_site):
    """The Results page claims every measured table: each kernel of each results file appears."""
    from tools import report

    page = page_html(built_site, "results")
    shown = {k for kernels in re.findall(r'class="measured-table" data-kernels="([^"]*)"', page) for k in kernels.split(",")}
    for suite in report.available():
        doc = report.load(suite)
        assert f"results/h200/{suite}.json" in page, suite
        missing = {r["kernel"] for r in doc["rows"]} - shown
        assert not missing, f"results page lacks {suite} kernels {sorted(missing)}"
    assert "Head dimension 64" in page and "head_dim 64" in page


@pytest.mark.parametrize("rel", ["results", "production", "production_lab", "worklog/k2", "index.html"])
def test_provenance_is_shown_once_per_page_and_file(built_site, rel):
    page = (built_site / rel).read_text() if rel.endswith(".html") else page_html(built_site, rel)
    sources = re.findall(r'<details class="provenance">\s*<summary>[^<]*<code>([^<]+)</code>', page)
    assert sources and len(sources) == len(set(sources)), sources
    assert "None" not in " ".join(re.findall(r'class="provenance"[^>]*>(.*?)</(?:p|details)>', page, re.S))
    assert page.count("driver 580") <= len(sources) or "driver" not in page


# The production user guide's budget of prose words (rendered, without the generated tables, their
# captions and the code blocks): about one screen per kernel family. The why goes to the lab page.
PRODUCTION_GUIDE_WORDS = 3000
# A commit id in prose: 7-10 hex digits with at least one digit and one letter (`bc6d87e`).
COMMIT_ID = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,10}\b")


def page_prose(page: str) -> str:
    """The text of a built page's article without generated blocks (tables, routing, provenance)
    and code blocks: what the page's author wrote."""
    article = re.search(r"<article[^>]*>(.*?)</article>", page, re.S).group(1)
    generated = (r'<div class="(?:measured-table|routing-table)".*?</div>',
                 r'<details class="(?:provenance|measured)".*?</details>', r'<p class="provenance">.*?</p>',
                 r"<pre.*?</pre>")
    for block in generated:
        article = re.sub(block, " ", article, flags=re.S)
    return html.unescape(re.sub("<[^>]+>", " ", article))


def markdown_prose(rel: str) -> str:
    """A page's markdown without fenced code blocks and markers (their text is generated)."""
    text = (ROOT / "docs" / rel).read_text()
    return re.sub(r"<!--.*?-->", "", re.sub(r"```.*?```", "", text, flags=re.S), flags=re.S)


def test_production_page_is_written_for_users(built_site):
    page = page_html(built_site, "production")
    text = html.unescape(re.sub("<[^>]+>", "", page))
    assert "``" not in text, "raw reStructuredText backticks on the production page"
    assert "module docstring" not in text
    for entry in ("python -m tools.build_ext", "attention(q, k, v", "apply_rotary_emb(", "fp8_autocast("):
        assert entry in text, entry
    for suite in ("attention", "rotary", "fp8"):
        assert f"results/h200/{suite}.json" in page, suite
    words = len(page_prose(page).split())
    assert words <= PRODUCTION_GUIDE_WORDS, (f"the production user guide has {words} words of prose (budget "
                                             f"{PRODUCTION_GUIDE_WORDS}): move the how and why to production_lab.md")
    assert 'href="../production_lab/' in page, "the user guide links the lab page"


@pytest.mark.parametrize("rel", ["production.md", "production_lab.md"])
def test_production_pages_name_no_commit_in_prose(rel):
    """Commit ids belong to the provenance lines the hook writes, not to the prose: a finding
    keeps its number from the current recording or its lab run, not a trail of earlier runs."""
    found = COMMIT_ID.findall(markdown_prose(rel))
    assert not found, f"docs/{rel} names commits in prose: {found}"


def test_production_lab_page_is_built_and_in_the_nav(built_site):
    page = page_html(built_site, "production_lab")
    assert "How the attention kernels work" in page and "Nsight Compute" in page
    assert COMMIT_ID.search(page_prose(page)) is None
    assert "production_lab.md" in (ROOT / "mkdocs.yml").read_text()


def test_production_examples_import_what_they_name():
    """Every import in the production page's examples resolves (a moved module fails here)."""
    import ast
    import importlib.util

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "production.md").read_text(), re.S)
    assert blocks
    names = 0
    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), \
                        f"from {node.module} import {alias.name}"
                    names += 1
    assert names >= 8


def test_api_reference_is_generated_from_the_docstrings(built_site):
    page = page_html(built_site, "api")
    text = html.unescape(re.sub("<[^>]+>", "", page))
    for symbol in ("kernels.extension.backend.attention", "use_backend", "apply_rotary_emb", "fp8_autocast",
                   "Fp8Linear", "paged_decode", "gemm_plan", "built_modules"):
        assert symbol in text, symbol
    assert "kernels.extension.runners" not in text
    assert "``" not in text, "rST double backticks left in a docstring of kernels/extension/"


def test_notebooks_index_links_every_notebook(built_site):
    page = page_html(built_site, "notebooks")
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert f'href="{nb.stem}/"' in page, nb.name


# ---- markers, on a synthetic results root ----------------------------------------------------
@pytest.fixture(scope="module")
def hook():
    return load_docs_hook()


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
    ("<!-- code: kernels/k1.py K1FMHA.no_such_method -->", "no function, class or assignment K1FMHA.no_such_method"),
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


def test_table_options_fold_filter_and_caption_once(hook, data):
    md = "\n\n".join([
        "<!-- table: suite=ladder kernels=k1,fa4 where=head_dim:128,causal:false -->",
        "<!-- table: suite=ladder kernels=k1 where=head_dim:128,seqlen_q:1024|4096,causal:true details=\"Two shapes\" -->",
        "<!-- inspect: kernels=k1 head_dim=64 -->",
    ])
    out = hook.render_markers(md, "docs/page.md", data)
    assert out.count('<details class="provenance"') == 2  # ladder.json once, inspect.json once
    assert "(provenance above)" in out and "synthetic test data" in out
    assert '<details class="measured" markdown>\n<summary>Two shapes</summary>' in out
    folded = out.split("Two shapes")[1]
    assert "s1024" in folded and "s4096" in folded and "s2048" not in folded and "TFLOP/s, 2 shapes" in folded
    again = hook.render_markers(md, "docs/other.md", data)
    assert again.count('<details class="provenance"') == 2, "each page starts its own provenance notes"


def test_wide_tables_are_split_or_turned_over(hook, data):
    """More kernel columns than fit the page: the compile report comes as several tables of at
    most MAX_KERNEL_COLUMNS kernels, each with the row labels; orient=kernels gives a row per
    kernel and a column per shape."""
    assert [len(g) for g in hook.column_groups([f"k{i}" for i in range(13)], 6)] == [5, 5, 3]
    assert hook.column_groups(["k1", "k2"], 6) == [["k1", "k2"]]
    rungs = hook.registry.rung_names()
    out = hook.render_markers(f"<!-- inspect: kernels={','.join(rungs)} head_dim=128 -->", "docs/p.md", data)
    widths = [line.count("|") - 1 for line in out.splitlines() if line.startswith("| registers")]
    assert len(widths) == len(hook.column_groups(rungs)) and max(widths) <= hook.MAX_KERNEL_COLUMNS + 1
    turned = hook.render_markers("<!-- table: suite=ladder kernels=k1,fa4 where=head_dim:128,causal:false "
                                 "orient=kernels -->", "docs/p.md", data)
    header = next(line for line in turned.splitlines() if line.startswith("| kernel"))
    assert "s1024" in header and "s4096" in header
    assert any(line.startswith("| k1 |") for line in turned.splitlines())
    assert any(line.startswith("| fa4 |") for line in turned.splitlines())


def test_a_rung_not_measured_yet_is_pending_not_an_error(hook, data):
    """A rung the results file has no row for at all renders as pending (a new rung before its
    GPU run); a rung with rows, but not at the shape asked for, still fails the build."""
    path = data.results_dir / "h200" / "ladder.json"
    doc = json.loads(path.read_text())
    doc["rows"] = [r for r in doc["rows"] if r["kernel"] != "k2"
                   and not (r["kernel"] == "k1" and r["problem"]["head_dim"] == 256)]
    path.write_text(json.dumps(doc))
    table = hook.render_markers("<!-- table: suite=ladder kernels=@prev,@this,fa4 where=head_dim:128,causal:false -->",
                                "docs/worklog/k2.md", data)
    assert 'Pending: K2 not measured yet' in table and "| problem | k1 | fa4 |" in table
    alone = hook.render_markers("<!-- plot: suite=ladder kernels=k2 where=causal:false -->", "docs/p.md", data)
    assert "Pending: K2" in alone and "<svg" not in alone
    summary = hook.render_markers("<!-- summary: peers=fa4 -->", "docs/index.md", data)
    assert "| [K2](worklog/k2.md) |" in summary and "| pending |" in summary and "not measured yet: k2" in summary
    with pytest.raises(hook.MarkerError, match="no rows for k1"):
        hook.render_markers("<!-- table: suite=ladder kernels=k1,k2,fa4 where=head_dim:256 -->", "docs/p.md", data)


def test_missing_pending_waits_for_a_suite_not_yet_run(hook, data):
    out = hook.render_markers("<!-- table: suite=fp8_accuracy value=rel_err_source rows=shape missing=pending -->",
                              "docs/p.md", data)
    assert "Pending: " in out and "fp8_accuracy.json not recorded yet" in out and "|" not in out
    (data.results_dir / "h200" / "fp8_accuracy.json").write_text("{}")  # there, but malformed: fails
    with pytest.raises(hook.MarkerError, match="needs top-level"):
        hook.render_markers("<!-- table: suite=fp8_accuracy missing=pending -->", "docs/p.md", data)


def test_rows_by_shape_put_an_fp8_rung_beside_the_bf16_kernels(hook, data):
    """rows=shape: the e4m3 row of an FP8 rung and the bf16 rows of the others at one shape share
    a table row, and the caption names each kernel's dtype."""
    from kernels.registry import rung_module

    fp8_rungs = [r for r in rung_names() if "e4m3" in rung_module(r).DTYPES]
    if not fp8_rungs:
        pytest.skip("no FP8 rung")
    marker = f"<!-- table: suite=ladder kernels=k10,{fp8_rungs[0]},fa4 where=head_dim:128,causal:false{{}} -->"
    merged = hook.render_markers(marker.format(" rows=shape"), "docs/p.md", data)
    assert "| b16 s1024 h16 d128 |" in merged and "e4m3 |" not in merged and "-" not in merged.split("\n")[2]
    assert f"{fp8_rungs[0]} e4m3" in merged and "k10 bf16" in merged
    apart = hook.render_markers(marker.format(""), "docs/p.md", data)
    assert "| b16 s1024 h16 d128 e4m3 |" in apart and "| b16 s1024 h16 d128 |" in apart
    summary = hook.render_markers("<!-- summary: peers=fa4 -->", "docs/index.md", data)
    assert " (e4m3) |" in summary


def test_complete_keeps_problems_every_kernel_ran(hook, data):
    path = data.results_dir / "h200" / "ladder.json"
    doc = json.loads(path.read_text())
    doc["rows"] = [r for r in doc["rows"] if not (r["kernel"] == "k1" and r["problem"]["seqlen_q"] == 1024)]
    path.write_text(json.dumps(doc))
    marker = "<!-- table: suite=ladder kernels=k1,fa4 where=head_dim:128,causal:false{} -->"
    assert "| b16 s1024 h16 d128 | - |" in hook.render_markers(marker.format(""), "docs/p.md", data)
    assert "s1024" not in hook.render_markers(marker.format(" complete=true"), "docs/p.md", data)


def test_notebooks_and_api_markers(hook, data):
    links = hook.render_markers("<!-- notebooks -->", "docs/notebooks.md", data)
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert f"](notebooks/{nb.name})" in links
    api = hook.render_markers("<!-- api: kernels/extension -->", "docs/api.md", data)
    assert "::: kernels.extension.backend.attention" in api and "::: kernels.extension.loader" in api
    assert api.index("Entry points") < api.index("::: kernels.extension.ops.") < api.index("::: kernels.extension.loader")
    with pytest.raises(hook.MarkerError, match="no such package"):
        hook.render_markers("<!-- api: kernels/nope -->", "docs/api.md", data)


def test_build_fails_without_results(tmp_path):
    """The whole build stops, naming the file, when the results root is empty."""
    empty = tmp_path / "empty"
    empty.mkdir()
    result = mkdocs_build(tmp_path / "site", {"DOCS_RESULTS_DIR": str(empty)})
    assert result.returncode != 0
    assert "ladder.json: not found" in result.stderr


# ---- the browser check: nothing cut at 1280 px ------------------------------------------------
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1280  # a laptop: the narrowest width with both sidebars of the theme

# Runs in the page once it has loaded (Material wraps tables after load): opens every folded
# block, then reports each code block or table of the article whose content is wider than the
# box that shows it (scrolling hides it just as clipping does) or that sticks out of the article.
OVERFLOW_PROBE = r"""
<script>
window.addEventListener("load", () => setTimeout(() => {
  document.querySelectorAll("details").forEach(d => { d.open = true; });
  const article = document.querySelector(".md-content__inner");
  const right = article.getBoundingClientRect().right;
  const checked = [], cut = [];
  for (const el of article.querySelectorAll("pre, pre > code, table")) {
    if (!el.getClientRects().length) continue;
    const box = el.tagName === "TABLE" ? (el.closest(".md-typeset__scrollwrap") || el.parentElement) : el;
    const hidden = Math.max(el.scrollWidth - el.clientWidth, box.scrollWidth - box.clientWidth,
                            el.getBoundingClientRect().right - right);
    const block = el.closest(".highlight");
    const title = block && block.querySelector(".filename");
    const what = el.tagName + ": " + (title ? title.textContent : el.textContent.trim().replace(/\s+/g, " ").slice(0, 60));
    checked.push(what);
    if (hidden > 1) cut.push({what: what, hidden_px: Math.round(hidden), shown_px: box.clientWidth});
  }
  const out = document.createElement("pre");
  out.id = "overflow-report";
  out.textContent = JSON.stringify({width: window.innerWidth, checked: checked, cut: cut});
  document.body.appendChild(out);
}, 200));
</script>
"""


def browser_report(probe: Path, report_id: str, window: str, *flags: str) -> dict:
    """Load ``probe`` (a page with a script that appends ``<pre id=report_id>`` JSON) in headless
    Chromium, in a window of ``window`` ("W,H"), and return that JSON. The profile folder sits
    beside the probe, one per process (pytest-xdist's workers share the site)."""
    profile = probe.parent / f".chromium-profile-{report_id}-{os.getpid()}"
    try:
        result = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu",
                                 "--disable-background-networking", "--disable-component-update",
                                 "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                                 "--hide-scrollbars", *flags, f"--window-size={window}", "--dump-dom",
                                 probe.as_uri()], capture_output=True, text=True, timeout=180)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    found = re.search(rf'<pre id="{report_id}">(.*?)</pre>', result.stdout, re.S)
    assert found, f"the probe did not run in {probe}:\n{result.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def overflow_report(page: Path, width: int = WIDTH, extra_html: str = "") -> dict:
    """Load a built page (plus ``extra_html`` at the end of its article) in headless Chromium
    at ``width`` px and return the probe's report: every block checked and the ones cut."""
    text = page.read_text()
    if extra_html:
        marker = '<form class="md-feedback"' if '<form class="md-feedback"' in text else "</article>"
        text = text.replace(marker, extra_html + marker, 1)
    # beside the page, so that its assets resolve; one per process (pytest-xdist's workers share the site)
    probe = page.with_name(f"overflow-probe-{os.getpid()}.html")
    probe.write_text(text.replace("</body>", OVERFLOW_PROBE + "</body>"))
    try:
        return browser_report(probe, "overflow-report", f"{width},2000", "--virtual-time-budget=5000")
    finally:
        probe.unlink()


def needs_browser():
    if BROWSER:
        return
    if os.environ.get("CI"):
        pytest.fail("chromium is missing: .ci/run installs it so that the browser check runs in CI")
    pytest.skip("chromium not installed (apt-get install chromium; CI installs it)")


@pytest.mark.parametrize("rung", rung_names())
def test_rung_page_has_nothing_cut_at_1280px(built_site, rung):
    """Every code block and table of a rung page fits the content column of a 1280 px window."""
    needs_browser()
    page = built_site / "worklog" / rung / "index.html"
    report = overflow_report(page)
    blocks = len(re.findall(r"<pre\b", page.read_text())) + len(re.findall(r"<table\b", page.read_text()))
    assert report["width"] == WIDTH
    assert len(report["checked"]) >= blocks > 0, f"the probe saw {len(report['checked'])} of {blocks} blocks"
    cut = "\n".join(f"  {c['what']}: {c['hidden_px']} px hidden of {c['shown_px']} shown" for c in report["cut"])
    assert not report["cut"], f"worklog/{rung} at {WIDTH} px, cut on the right:\n{cut}"


SITE_PAGES = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("page", SITE_PAGES)
def test_page_has_nothing_cut_at_1280px(built_site, page):
    """Every table and code block of the site's other pages (Results, Production, ...) fits the
    content column at 1280 px: a wide table is split or turned over by its marker."""
    needs_browser()
    path = built_site / "index.html" if page == "index" else built_site / page / "index.html"
    report = overflow_report(path)
    cut = "\n".join(f"  {c['what']}: {c['hidden_px']} px hidden of {c['shown_px']} shown" for c in report["cut"])
    assert not report["cut"], f"{page} at {WIDTH} px, cut on the right:\n{cut}"


def test_the_browser_check_finds_a_cut_block(built_site):
    """The probe itself: a code line and a table wider than the column are reported, on a real
    page with the site's CSS; a short line is not."""
    needs_browser()
    page = built_site / "worklog" / rung_names()[0] / "index.html"
    long_line = "x = " + " + ".join(["long_name"] * 40)
    wide_table = ("<table><tr>" + "".join(f"<th>unbreakable_column_name_{i}</th>" for i in range(12))
                  + "</tr></table>")
    extra = (f'<div class="highlight"><pre><code>{long_line}</code></pre></div>'
             f'<div class="highlight"><pre><code>short = 1</code></pre></div>{wide_table}')
    report = overflow_report(page, extra_html=extra)
    cut = [c["what"] for c in report["cut"]]
    assert any(long_line[:40] in w for w in cut), report["cut"]
    assert any("unbreakable_column_name_0" in w for w in cut), report["cut"]
    assert not any("short = 1" in w for w in cut)


# ---- the phone check: nothing sticks out at 390 px ------------------------------------------------
PHONE_WIDTH = 390  # a phone in portrait; headless Chromium's window is wider, so the page loads in a frame
# The frame's page once loaded: every element of the article that reaches past the frame's right
# edge outside a box that scrolls on its own (a table's wrapper, a code block), and whether the
# page as a whole scrolls sideways.
PHONE_PROBE = r"""
<html><body style="margin:0">
<iframe id="page" src="PAGE" style="width:WIDTHpx;height:844px;border:0"></iframe>
<script>
document.getElementById("page").addEventListener("load", () => setTimeout(() => {
  const doc = document.getElementById("page").contentDocument;
  doc.querySelectorAll("details").forEach(d => { d.open = true; });
  const width = doc.documentElement.clientWidth;
  const outside = [];
  const elements = doc.querySelectorAll(".md-content__inner *");
  for (const el of elements) {
    if (!el.getClientRects().length || el.closest(".md-typeset__scrollwrap, .highlight, pre")) continue;
    const past = el.getBoundingClientRect().right - width;
    if (past > 1) outside.push(el.tagName + " " + Math.round(past) + " px: "
                               + (el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 50));
  }
  const out = document.createElement("pre");
  out.id = "phone-report";
  out.textContent = JSON.stringify({width: width, scroll_width: doc.documentElement.scrollWidth,
                                    elements: elements.length, outside: outside.slice(0, 20)});
  document.body.appendChild(out);
}, 500));
</script></body></html>
"""


def phone_report(site: Path, page: str, extra_html: str = "") -> dict:
    """Load ``page`` (a path under the built ``site``, plus ``extra_html`` at the end of its
    article) in a 390 px frame of headless Chromium; return the probe's report."""
    target = site / page
    if extra_html:
        text = target.read_text()
        target = target.with_name(f"phone-extra-{os.getpid()}.html")
        target.write_text(text.replace("</article>", extra_html + "</article>", 1))
    frame = site / f"phone-probe-{os.getpid()}.html"
    frame.write_text(PHONE_PROBE.replace("PAGE", target.relative_to(site).as_posix())
                     .replace("WIDTH", str(PHONE_WIDTH)))
    try:
        return browser_report(frame, "phone-report", "800,900", "--allow-file-access-from-files",
                              "--virtual-time-budget=8000")
    finally:
        frame.unlink()
        if extra_html:
            target.unlink()


@pytest.mark.parametrize("page", ["index.html", "results/index.html", "production/index.html",
                                  "worklog/k13/index.html"])
def test_page_fits_a_phone_at_390px(built_site, page):
    """At 390 px the page does not scroll sideways: wide tables and code scroll in their own
    boxes, and nothing else (plots, text, admonitions) reaches past the screen's edge."""
    needs_browser()
    report = phone_report(built_site, page)
    assert report["width"] == PHONE_WIDTH and report["elements"] > 0
    assert not report["outside"], f"{page} at {PHONE_WIDTH} px, past the right edge:\n" + "\n".join(report["outside"])
    assert report["scroll_width"] <= PHONE_WIDTH


def test_the_phone_check_finds_what_sticks_out(built_site):
    needs_browser()
    report = phone_report(built_site, "results/index.html",
                          '<div style="width:700px">a fixed-width block</div><p>short</p>')
    assert any("a fixed-width block" in what for what in report["outside"]), report
    assert report["scroll_width"] > PHONE_WIDTH and not any("short" in what for what in report["outside"])


def test_scaling_marker_is_pending_until_a_multi_gpu_file_exists(hook, data):
    from tools.suites import context_parallel as suite

    marker = "<!-- scaling: suite=context_parallel kernels=ring-zigzag -->"
    pending = hook.render_markers(marker, "docs/context_parallel.md", data)
    assert "Pending: no multi-GPU run recorded yet" in pending and "h200x<N>/context_parallel.json" in pending
    assert "|" not in pending, "no table without a results file"

    problem = suite.Setup().problem(32768)
    rows = [suite._row(kernel, problem, world, {"median": problem.flops() / world / tflops / 1e9, "p20": 1.0,
                                                "p80": 1.0, "reps": 5}, 0.003)
            for kernel, world, tflops in (("attention", 1, 400.0), ("ring-zigzag", 2, 380.0),
                                          ("ring-zigzag", 4, 368.0))]
    meta = {"suite": "context_parallel", "gpu": "NVIDIA H200 (synthetic test data)", "driver": "0", "cuda": "13.0",
            "torch": "test", "cutlass_dsl": None, "commit": "0" * 40, "date": "2026-01-01",
            "ceilings": {"copy_tbps": 4.0}, "gpus": 4}
    path = data.results_dir / "h200x4" / "context_parallel.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"meta": meta, "rows": suite.add_scaling_efficiency(rows)}))
    out = hook.render_markers(marker, "docs/context_parallel.md", data)
    assert "| seqlen | 1 GPU (attention) | 2 GPUs | 4 GPUs |" in out
    assert "| 32k | 400 | 380 (95%) | 368 (92%) |" in out
    assert "h200x4/context_parallel.json" in out
    assert "synthetic test data" in out and "Pending" not in out
    with pytest.raises(hook.MarkerError, match="no rows for allgather-kv"):
        hook.render_markers("<!-- scaling: suite=context_parallel kernels=allgather-kv -->", "docs/p.md", data)
    del meta["gpus"]
    path.write_text(json.dumps({"meta": meta, "rows": rows}))
    with pytest.raises(hook.MarkerError, match="lacks gpus"):
        hook.render_markers(marker, "docs/other.md", hook.Data(results_dir=data.results_dir))


def test_notebook_pages_link_their_worklog_page(built_site, hook):
    """A notebook links its page as ../docs/worklog/kN.md (Jupyter, GitHub); on the site that
    link leads to the worklog page's URL."""
    assert hook.site_links_of_notebook('<a href="../docs/worklog/k2.md#the-code">') == \
        '<a href="../../worklog/k2/#the-code">'
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        rung = nb.stem.split("_")[1]
        page = (built_site / "notebooks" / nb.stem / "index.html").read_text()
        assert f'href="../../worklog/{rung}/"' in page, nb.name
        assert (built_site / "worklog" / rung / "index.html").is_file()
