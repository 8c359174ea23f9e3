"""mkdocs hooks: every number, table, plot and code excerpt on the site comes from the repository.

A page asks for generated content with one-line HTML comments (a marker on a line of its own):

``<!-- code: kernels/k2.py K2FMHA.kernel -->``
    The source of a module-level function or class, a method (``Class.method``) or the module
    docstring (``__doc__``), read with :mod:`ast` from the file itself, so an excerpt cannot
    drift from the code. ``section="2a."`` narrows it to the region that starts at the banner
    comment containing that text (``# ---- 2a. K tile ...``, ``# ==== Phase 1 ...``) and ends
    at the next banner at the same or a shallower indentation. For ``__doc__``,
    ``section="How it works"`` picks the docstring part under that heading (up to the next
    unindented line, or up to the line starting with ``until="..."``).
``<!-- table: suite=ladder kernels=k1,k2,fa4 where=head_dim:128,causal:false value=tflops -->``
    ``tools.report.pivot`` of results/<gpu>/<suite>.json as a markdown table; without
    ``kernels=`` every kernel in the file. Rows are labelled by ``tools.report.problem_label``;
    with ``rows=shape`` by ``tools.report.shape_label`` (the bf16 and e4m3 versions of a shape
    share a row: an FP8 rung beside the bf16 kernels; the caption names each kernel's dtype).
    ``missing=pending``: while the results file does not exist yet (a suite not yet run on the
    GPU), a note says so instead of failing the build; a malformed file still fails.
    ``orient=kernels`` turns the table over (a row per kernel, a column per problem: many
    kernels at a few shapes). ``where=m:1|16|128`` matches any of the values; ``complete=true`` keeps only the problems
    every kernel shown has a row for; ``details="title"`` folds the table into a collapsible
    block with that title (for long tables).
``<!-- plot: suite=ladder kernels=k1,k2,fa4 where=head_dim:128,causal:false x=seqlen_q -->``
    ``tools.report.plot_svg``: the value against a problem field, one line per kernel, inline SVG.
``<!-- summary: suite=ladder baseline=fa4 peers=sdpa-cudnn,fa4 -->``
    Every rung of the registry (and ``peers=...``) at one shape (``where=``; default the
    README's ``tools.report.HEADLINE``), with its idea and % of the baseline in the same run.
``<!-- inspect: kernels=@prev,@this head_dim=128 causal=false -->``
    The compile report (registers, shared memory, spills, SASS mix) recorded in
    results/inspect.json by ``python -m tools.inspect --record``: no GPU, no compile at build time.

``<!-- routing: gpu=h200 -->``
    The order in which ``attention()`` tries its backends per phase and head dim on that GPU,
    derived from results/<gpu>/attention.json by the backend itself
    (``kernels.extension.backend.attention_routing``), with the measurements behind it.

``<!-- scaling: suite=context_parallel kernels=ring-zigzag,allgather-kv -->``
    Multi-GPU scaling from every results/<gpu>x<N>/<suite>.json (``tools.report.scaling_table``):
    per kernel, TFLOP/s per GPU by seqlen and world size, with the scaling efficiency against
    one GPU. The one marker that does not fail on a missing file: with no multi-GPU file yet it
    renders a note that the numbers are pending (a malformed file still fails the build).
``<!-- notebooks -->``
    A list of links to the notebooks of notebooks/, titled by their first heading.
``<!-- api: kernels/extension -->``
    The API reference of every module under that package (mkdocstrings ``:::`` blocks, grouped
    by layer: policy and entry points, stateless ops, loading), found on disk at build time, so
    a module that is added or moved is documented without editing the page.

Under each generated block a one-line caption says what the numbers are and which file they
come from; the first block of a page from a file also carries that file's provenance (GPU,
driver, versions, commit, date, ceilings), folded, so it is shown once per page and file.

In a kernel list, ``@rungs`` stands for every rung of the registry; on a rung's page ``@this``
and ``@prev`` stand for that rung and the one it changes: the one before it (so K4's page
compares with K3 once kernels/k3.py exists), or the one the registry's ``BASES`` names (K13's
is K11).

A missing file, symbol, results file, results row or compile report fails the build with the
page and the marker in the message. One exception: a rung of the registry that the results
file has no row for at all (a new rung, not yet measured on the GPU) is left out of a table,
plot, summary or profile with a note that its numbers are pending; a rung with rows, but not
at the shapes asked for, still fails. The nav's "Worklog" section lists one page per rung that
the registry finds (kernels/kN.py); pages of rungs that do not exist yet are left out of the
build. Notebooks in notebooks/ are added to the site and the nav's "Notebooks" section.

Environment (for tests and other GPUs; the normal build needs neither):
``DOCS_RESULTS_DIR`` reads ``<dir>/<gpu>/<suite>.json`` and ``<dir>/inspect.json`` instead of
results/; ``DOCS_GPU`` picks the GPU folder (default ``h200``).
"""

from __future__ import annotations

import ast
import logging
import os
import re
import shlex
import sys
import textwrap
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernels import registry  # noqa: E402
from tools import report  # noqa: E402

log = logging.getLogger("mkdocs.hooks.generated")

RESULTS_ENV = "DOCS_RESULTS_DIR"
GPU_ENV = "DOCS_GPU"
MARKER = re.compile(r"^<!--\s*(code|table|plot|summary|inspect|profile|routing|scaling|notebooks|api):?(.*?)-->[ \t]*$",
                    re.MULTILINE)
BANNER = re.compile(r"^(\s*)#\s*(?:[-=]{3,}\s*|\d+[a-z]?\.\s)")
RUNG_PAGE = re.compile(r"^worklog/(k\d+)\.md$")
NOTEBOOKS = ROOT / "notebooks"


class MarkerError(ValueError):
    """A marker names something that does not exist (file, symbol, results row, report)."""


# ---- marker arguments ----------------------------------------------------------------------
def parse_args(text: str) -> tuple[list[str], dict[str, str]]:
    """``'kernels/k2.py K2FMHA.kernel section="2a."'`` -> (["kernels/k2.py", "K2FMHA.kernel"], {...})."""
    positional, options = [], {}
    for token in shlex.split(text):
        key, sep, value = token.partition("=")
        if sep and re.fullmatch(r"[a-z_]+", key):
            options[key] = value
        else:
            positional.append(token)
    return positional, options


def parse_value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(text)
    except ValueError:
        return text


def parse_where(text: str | None) -> dict:
    """``"head_dim:128,causal:false"`` -> ``{"head_dim": 128, "causal": False}``;
    ``"m:1|16"`` -> ``{"m": AnyOf((1, 16))}``."""
    where = {}
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition(":")
        if not sep:
            raise MarkerError(f"where: expected key:value, got {item!r}")
        values = [parse_value(v.strip()) for v in value.split("|")]
        where[key.strip()] = values[0] if len(values) == 1 else report.AnyOf(values)
    return where


def split_list(text: str | None, page_rung: str | None = None) -> list[str]:
    """Comma list; ``@rungs`` is every rung; on a rung's page ``@this`` is that rung and
    ``@prev`` the rung it changes (``registry.rung_base``: usually the one before it)."""
    items = [x for x in (text or "").split(",") if x]
    if not any(x.startswith("@") for x in items):
        return items
    rungs = registry.rung_names()
    named = {"@rungs": rungs}
    if page_rung in rungs:
        base = registry.rung_base(page_rung)
        named.update({"@this": [page_rung], "@prev": [base] if base else []})
    out = []
    for x in items:
        if x.startswith("@") and x not in named:
            raise MarkerError(f"{x} unknown here (@rungs anywhere; @this, @prev on docs/worklog/kN.md)")
        out += named.get(x, [x])
    return out


# ---- code excerpts ---------------------------------------------------------------------------
def find_symbol(tree: ast.Module, dotted: str) -> ast.AST:
    node, path = tree, []
    for part in dotted.split("."):
        path.append(part)
        children = [c for c in getattr(node, "body", [])
                    if (isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and c.name == part)
                    or (isinstance(c, ast.Assign) and any(isinstance(t, ast.Name) and t.id == part
                                                          for t in c.targets))]
        if not children:
            raise MarkerError(f"no function, class or assignment {'.'.join(path)}")
        node = children[0]
    return node


def banner_region(lines: list[str], first: int, last: int, section: str) -> tuple[int, int]:
    """Lines [start, end) of the region that starts at the banner containing ``section``."""
    for i in range(first, last):
        m = BANNER.match(lines[i])
        if m and section in lines[i]:
            indent = len(m.group(1))
            for j in range(i + 1, last):
                n = BANNER.match(lines[j])
                if n and len(n.group(1)) <= indent:
                    return i, j
            return i, last
    raise MarkerError(f"no banner comment containing {section!r}")


def docstring_section(doc: str, heading: str, until: str | None = None) -> str:
    """The part of a spec-sheet docstring from the line starting with ``heading``: up to the
    next unindented line, or with ``until`` up to the line starting with that text."""
    lines = doc.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() and not line[0].isspace()]
    for n, i in enumerate(starts):
        if lines[i].startswith(heading):
            if until is None:
                end = starts[n + 1] if n + 1 < len(starts) else len(lines)
            else:
                ends = [j for j in starts[n + 1:] if lines[j].startswith(until)]
                if not ends:
                    raise MarkerError(f"docstring has no line starting with {until!r} after {heading!r}")
                end = ends[0]
            return "\n".join(lines[i:end]).rstrip()
    raise MarkerError(f"docstring has no section starting with {heading!r}")


def render_code(args: list[str], options: dict) -> str:
    if not args:
        raise MarkerError("code: needs a file, e.g. <!-- code: kernels/k2.py K2FMHA.kernel -->")
    rel = args[0]
    path = ROOT / rel
    if not path.is_file():
        raise MarkerError(f"{rel}: file not found")
    source = path.read_text()
    tree = ast.parse(source, filename=rel)
    lines = source.splitlines()
    symbol = args[1] if len(args) > 1 else None
    section = options.get("section")
    if symbol == "__doc__":
        doc = ast.get_docstring(tree, clean=True)
        if not doc:
            raise MarkerError(f"{rel}: no module docstring")
        text = docstring_section(doc, section, options.get("until")) if section else doc
        return f'```text title="{rel} (module docstring)"\n{text}\n```'
    if symbol:
        try:
            node = find_symbol(tree, symbol)
        except MarkerError as exc:
            raise MarkerError(f"{rel}: {exc}") from None
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        last = node.end_lineno
    else:
        first, last = 0, len(lines)
    if section:
        try:
            first, last = banner_region(lines, first, last, section)
        except MarkerError as exc:
            raise MarkerError(f"{rel}{' ' + symbol if symbol else ''}: {exc}") from None
    while last > first and not lines[last - 1].strip():
        last -= 1
    body = textwrap.dedent("\n".join(lines[first:last]))
    title = f"{rel}: {symbol}" if symbol else rel
    return f'```python title="{title}" linenums="{first + 1}"\n{body}\n```'


# ---- measured data -----------------------------------------------------------------------------
class Data:
    """Results files and recorded compile reports, loaded once per build."""

    def __init__(self, results_dir: Path | None = None, gpu: str | None = None):
        override = os.environ.get(RESULTS_ENV)
        self.results_dir = Path(results_dir or override or report.RESULTS)
        self.gpu = gpu or os.environ.get(GPU_ENV) or "h200"
        self._docs: dict[tuple[str, str], dict] = {}
        self._inspect: dict | None = None
        self.page_rung: str | None = None  # kN while rendering docs/worklog/kN.md
        self.noted: set[str] = set()  # results files whose provenance this page already shows

    def start_page(self, page: str) -> None:
        m = RUNG_PAGE.match(page.removeprefix("docs/"))
        self.page_rung = m.group(1) if m else None
        self.noted = set()

    def where(self, path: Path) -> str:
        try:
            return str(path.relative_to(ROOT))
        except ValueError:
            return str(path)

    def results(self, suite: str, gpu: str | None = None) -> tuple[dict, str]:
        gpu = gpu or self.gpu
        path = self.results_dir / gpu / f"{suite}.json"
        if (suite, gpu) not in self._docs:
            self._docs[suite, gpu] = report.load_file(path, self.where(path))
        return self._docs[suite, gpu], self.where(path)

    def inspect_reports(self) -> dict:
        if self._inspect is None:
            import json

            path = self.results_dir / "inspect.json"
            if not path.is_file():
                raise MarkerError(f"{self.where(path)}: not found (python -m tools.inspect --record writes it)")
            try:
                self._inspect = json.loads(path.read_text())
            except ValueError as exc:
                raise MarkerError(f"{self.where(path)}: not valid JSON ({exc})") from None
            if not isinstance(self._inspect, dict) or "reports" not in self._inspect:
                raise MarkerError(f"{self.where(path)}: no 'reports' (rerun python -m tools.inspect --record)")
        return self._inspect


def caption(data: Data, what: str, source: str, summary: str, details: str) -> str:
    """The line under a generated block: ``what`` the numbers are and the ``source`` file. The
    page's first block from a file adds ``summary`` (GPU, date) and folds ``details`` (the
    rest of the provenance) under it; later blocks from that file name only the file."""
    where = f"<code>{source}</code>"
    if source in data.noted:
        return f'<p class="provenance">{what} · {where} (provenance above)</p>'
    data.noted.add(source)
    return (f'<details class="provenance" markdown>\n<summary>{what} · {where} · {summary}</summary>\n\n'
            f'{details}\n\n</details>')


def results_caption(data: Data, what: str, source: str, doc: dict) -> str:
    meta = doc["meta"]
    return caption(data, what, source, f"{meta['gpu']}, {meta['date']}",
                   f"Measured by `python -m tools.bench --suite {meta['suite']}`: {report.provenance(meta)}.")


def measured_block(kind: str, kernels: list[str], content: str) -> str:
    return f'<div class="{kind}" data-kernels="{",".join(kernels)}" markdown>\n\n{content}\n\n</div>'


def breakable(headers: list[str]) -> list[str]:
    """Kernel names may wrap after ``_``, ``-`` and ``.`` (``torch._scaled_mm-fast_accum``), so a
    table of many long names still fits the page."""
    # "\_": an underscore next to <wbr> no longer sits inside a word, so it would start emphasis.
    return [re.sub(r"([_.-])(?=\w)", r"\1<wbr>", h).replace("_", "\\_") for h in headers]


# A table with more kernel columns than this is shown as several, each with its row labels: at
# 1280 px the content column holds about this many columns of numbers beside the labels.
MAX_KERNEL_COLUMNS = 6


def column_groups(kernels: list[str], most: int = MAX_KERNEL_COLUMNS) -> list[list[str]]:
    """``kernels`` in consecutive groups of at most ``most``, as even as can be (13 -> 5 + 5 + 3)."""
    count = -(-len(kernels) // most) if kernels else 1
    size = -(-len(kernels) // count) if kernels else 0
    return [kernels[i:i + size] for i in range(0, len(kernels), size)] or [[]]


def split_table(headers: list[str], rows: list[list[str]], most: int = MAX_KERNEL_COLUMNS) -> str:
    """A markdown table of label + kernel columns, as several of at most ``most`` kernel columns."""
    labels, kernels = headers[0], headers[1:]
    tables, start = [], 1
    for group in column_groups(kernels, most):
        end = start + len(group)
        tables.append(report.markdown_table([labels, *breakable(group)], [[r[0], *r[start:end]] for r in rows]))
        start = end
    return "\n\n".join(tables)


def folded(title: str | None, content: str) -> str:
    """``content`` in a collapsible block titled ``title`` (unchanged without a title)."""
    if not title:
        return content
    return f'<details class="measured" markdown>\n<summary>{title}</summary>\n\n{content}\n\n</details>'


def pending_rungs(doc: dict, kernels: list[str]) -> list[str]:
    """The rungs among ``kernels`` that the results file has no row for at all: not measured yet."""
    measured = {r["kernel"] for r in doc["rows"]}
    rungs = set(registry.rung_names())
    return [k for k in kernels if k in rungs and k not in measured]


def pending_note(pending: list[str], source: str, suite: str) -> str:
    names = ", ".join(k.upper() for k in pending)
    return (f'!!! note "Pending: {names} not measured yet"\n\n'
            f"    `{source}` has no row for {', '.join(pending)} yet. Its numbers appear here once "
            f"`python -m tools.bench --suite {suite}` has run it on the GPU; nothing is typed in by hand.")


def with_pending(pending: list[str], source: str, suite: str, block: str) -> str:
    return block if not pending else pending_note(pending, source, suite) + "\n\n" + block


def render_table(args: list[str], options: dict, data: Data) -> str:
    suite = options.get("suite", "ladder")
    kernels = split_list(options.get("kernels"), data.page_rung)
    where = parse_where(options.get("where"))
    value = options.get("value", "tflops")
    by_shape = options.get("rows", "problem") == "shape"
    if options.get("missing") == "pending" and not (data.results_dir / (options.get("gpu") or data.gpu)
                                                    / f"{suite}.json").exists():
        source = data.where(data.results_dir / (options.get("gpu") or data.gpu) / f"{suite}.json")
        return (f'!!! note "Pending: {source} not recorded yet"\n\n'
                f"    This table appears once `python -m tools.bench --suite {suite}` has run on the GPU; "
                f"nothing is typed in by hand.")
    doc, source = data.results(suite, options.get("gpu"))
    pending = pending_rungs(doc, kernels)
    kernels = [k for k in kernels if k not in pending]
    if pending and not kernels:
        return pending_note(pending, source, suite)
    headers, rows = report.pivot(doc, kernels or None, where, value,
                                 label=report.shape_label if by_shape else report.problem_label,
                                 complete=parse_value(options.get("complete", "false")) is True)
    if not rows:
        raise MarkerError(f"{source}: no rows where {where}")
    missing = [k for k in kernels if k not in headers]
    if missing:
        raise MarkerError(f"{source}: no rows for {', '.join(missing)} where {where} "
                          f"(rerun python -m tools.bench --suite {suite})")
    shapes = len(rows)
    kernels_shown = headers[1:]
    if options.get("orient", "problems") == "kernels":  # a row per kernel: many kernels, few shapes
        headers, rows = report.transpose(headers, rows)
    table = folded(options.get("details"), report.markdown_table(breakable(headers), rows))
    what = report.value_label(value) + (f", {shapes} shapes" if options.get("details") else "")
    if by_shape:
        dtypes = report.kernel_dtypes(doc, kernels_shown, where)
        what += "; each kernel in its dtype: " + ", ".join(f"{k} {d}" for k, d in dtypes.items())
    block = measured_block("measured-table", kernels_shown, table + "\n\n" + results_caption(data, what, source, doc))
    return with_pending(pending, source, suite, block)


def render_plot(args: list[str], options: dict, data: Data) -> str:
    suite = options.get("suite", "ladder")
    kernels = split_list(options.get("kernels"), data.page_rung)
    if not kernels:
        raise MarkerError("plot: needs kernels=...")
    where = parse_where(options.get("where"))
    value = options.get("value", "tflops")
    x = options.get("x", "seqlen_q")
    doc, source = data.results(suite, options.get("gpu"))
    pending = pending_rungs(doc, kernels)
    kernels = [k for k in kernels if k not in pending]
    if pending and not kernels:
        return pending_note(pending, source, suite)
    points = report.series(doc, kernels, where, x, value)
    empty = [k for k, p in points.items() if not p]
    if len(empty) == len(kernels):
        raise MarkerError(f"{source}: nothing to plot for {', '.join(kernels)} where {where}")
    svg = report.plot_svg(doc, kernels, where, x, value, title=options.get("title"))
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and doctype: the SVG sits inside HTML
    what = report.value_label(value)
    if empty:
        what += f"; no successful run of {', '.join(empty)} at these shapes"
    return with_pending(pending, source, suite,
                        f'<figure class="measured-plot" data-kernels="{",".join(kernels)}">\n{svg.strip()}\n</figure>\n\n'
                        + results_caption(data, what, source, doc))


def render_summary(args: list[str], options: dict, data: Data) -> str:
    suite = options.get("suite", "ladder")
    # Default: the README's headline shape, so the site and the README show the same numbers.
    where = parse_where(options["where"]) if "where" in options else dict(report.HEADLINE)
    baseline = options.get("baseline", "fa4")
    value = options.get("value", "tflops")
    rungs = split_list(options.get("kernels"), data.page_rung) or registry.rung_names()
    peers = split_list(options.get("peers"), data.page_rung)
    doc, source = data.results(suite, options.get("gpu"))
    pending = pending_rungs(doc, rungs)
    headers, rows = report.summary(doc, [r for r in rungs if r not in pending] + peers, where, baseline, value)
    missing = [r[0] for r in rows if r[1] == "-"]
    if missing:
        raise MarkerError(f"{source}: no row for {', '.join(missing)} where {where}")
    rows += [[name, "pending", "-"] for name in pending]
    rows.sort(key=lambda r: (rungs + peers).index(r[0]))
    # A kernel measured in another dtype than the baseline (an FP8 rung against bf16 FA4) says so.
    dtypes = report.kernel_dtypes(doc, rungs + peers + [baseline], where)
    runners = registry.all_runners()
    link_prefix = options.get("links", "worklog/")
    body = []
    for name, measured, share in rows:
        label = f"[{name.upper()}]({link_prefix}{name}.md)" if name in rungs else name
        idea = runners[name].description if name in runners else ""
        if name in dtypes and dtypes[name] != dtypes.get(baseline):
            measured += f" ({dtypes[name]})"
        body.append([label, idea, measured, share])
    problem = report.attention_label(report.select(doc, [baseline] + rungs, where)[0]["problem"])
    table = report.markdown_table(["kernel", "idea", headers[1], headers[2]], body)
    what = f"{report.value_label(value)} at {problem}; % of {baseline} measured in the same run"
    if pending:
        what += f"; not measured yet: {', '.join(pending)}"
    return measured_block("measured-summary", rungs + peers, table + "\n\n" + results_caption(data, what, source, doc))


def render_inspect(args: list[str], options: dict, data: Data) -> str:
    from tools.inspect import resources_rows

    kernels = split_list(options.get("kernels"), data.page_rung)
    head_dim = int(options.get("head_dim", 128))
    causal = parse_value(options.get("causal", "false"))
    recorded = data.inspect_reports()
    picked = []
    for name in kernels:
        found = [r for r in recorded["reports"] if r["kernel"] == name
                 and r["problem"].get("head_dim") == head_dim and bool(r["problem"].get("causal")) == causal]
        if not found:
            raise MarkerError(f"results/inspect.json has no report for {name} at head_dim {head_dim}, "
                              f"causal {causal} (rerun python -m tools.inspect --record)")
        picked.append(found[0])
    headers, rows = resources_rows(picked)
    meta = recorded.get("meta", {})
    what = f"{meta.get('arch', 'sm_90a')} build, head_dim {head_dim}{', causal' if causal else ''}"
    note = caption(data, what, data.where(data.results_dir / "inspect.json"),
                   f"CuTe DSL {meta.get('cutlass_dsl', '?')}, {meta.get('date', '?')}",
                   f"Compiled without a GPU by `python -m tools.inspect --record` at commit "
                   f"{str(meta.get('commit', '?'))[:10]}; static counts (instructions in the binary, not executed ones).")
    return measured_block("compile-report", kernels, split_table(headers, rows) + "\n\n" + note)


# Rows of a profile table: (label, key in the row's "ncu" dict, format).
PROFILE_ROWS = (("time (ms)", "duration_ns", lambda v: f"{v / 1e6:.3f}"),
                ("tensor pipe active (%)", "tensor_pipe_active_pct", lambda v: f"{v:.1f}"),
                ("issue slots busy (%)", "issue_slots_busy_pct", lambda v: f"{v:.1f}"),
                ("XU pipe: MUFU exp2, rcp (%)", "xu_pipe_pct", lambda v: f"{v:.1f}"),
                ("FMA pipe (%)", "fma_pipe_pct", lambda v: f"{v:.1f}"),
                ("ALU pipe (%)", "alu_pipe_pct", lambda v: f"{v:.1f}"),
                ("warp instructions (M)", "warp_instructions", lambda v: f"{v / 1e6:.0f}"))
PROFILE_STALLS = 6  # stall reasons shown: the largest over the kernels of the table


def render_profile(args: list[str], options: dict, data: Data) -> str:
    """Nsight Compute counters of ``kernels`` side by side (results/<gpu>/profile.json); without
    ``kernels``, every kernel the file profiled at that shape, in the file's order."""
    causal = parse_value(options.get("causal", "false"))
    head_dim = int(options.get("head_dim", 128))
    doc, source = data.results("profile", options.get("gpu"))
    asked = split_list(options.get("kernels"), data.page_rung)
    pending = pending_rungs(doc, asked)
    if pending and len(pending) == len(asked):
        return pending_note(pending, source, "profile")
    kernels = [k for k in asked if k not in pending] or list(dict.fromkeys(
        r["kernel"] for r in doc["rows"] if r["status"] == "ok" and r["problem"]["head_dim"] == head_dim
        and bool(r["problem"]["causal"]) == causal))
    picked = {}
    for name in kernels:
        found = [r for r in doc["rows"] if r["kernel"] == name and r["status"] == "ok"
                 and r["problem"]["head_dim"] == head_dim and bool(r["problem"]["causal"]) == causal]
        if not found:
            raise MarkerError(f"{source}: no profile of {name} at head_dim {head_dim}, causal {causal} "
                              f"(rerun python -m tools.bench --suite profile)")
        picked[name] = found[0]
    rows = [["TFLOP/s", *[f"{picked[k]['tflops']:.0f}" for k in kernels]]]
    for label, key, fmt in PROFILE_ROWS:
        rows.append([label, *[fmt(picked[k]["ncu"][key]) if key in picked[k]["ncu"] else "-" for k in kernels]])
    totals = {}
    for k in kernels:
        for reason, value in picked[k]["ncu"].get("stalls_per_issue", {}).items():
            if reason != "selected":  # "selected" is the issuing itself, 1 per instruction
                totals[reason] = max(totals.get(reason, 0.0), value)
    for reason in sorted(totals, key=lambda r: -totals[r])[:PROFILE_STALLS]:
        rows.append([f"stall: {reason.replace('_', ' ')}",
                     *[f"{picked[k]['ncu'].get('stalls_per_issue', {}).get(reason, 0.0):.2f}" for k in kernels]])
    problem = report.attention_label(next(iter(picked.values()))["problem"])
    what = (f"Nsight Compute, one launch at {problem}; stalls: warps waiting per issued instruction, "
            f"by reason")
    table = split_table(["", *kernels], rows)
    block = measured_block("measured-table", kernels, table + "\n\n" + results_caption(data, what, source, doc))
    return with_pending(pending, source, "profile", block)


def render_routing(args: list[str], options: dict, data: Data) -> str:
    """The attention backend order per (phase, head_dim), as attention() derives it from the
    same results file (kernels/extension/backend/attention_routing.py)."""
    from kernels.extension.backend import attention_routing as routing

    doc, source = data.results(routing.SUITE, options.get("gpu"))
    routes = routing.ordered(routing.routes_from_results(doc))
    if not routes:
        raise MarkerError(f"{source}: no rows that time a backend of attention() "
                          f"({', '.join(routing.ROW_BACKENDS)})")
    rows = []
    for r in routes:
        measured = ", ".join(f"{b} {r.slowdown[b]:.2f}" if b in r.slowdown else f"{b} (alone)" for b in r.measured)
        if r.wrong:
            measured += f"; wrong answers: {', '.join(r.wrong)}"
        rows.append([r.phase.replace("-", " "), str(r.head_dim), " → ".join(r.order), str(r.shapes), measured,
                     str(r.first_beaten)])
    headers = ["call", "head_dim", "backends tried, in order", "shapes", "time / fastest (geometric mean)",
               "shapes where another is faster"]
    what = ("order of attention()'s backends by measured time; buckets not listed, and other GPUs, "
            f"use {' → '.join(routing.DEFAULT_ORDER)}")
    return measured_block("routing-table", list(routing.ROW_BACKENDS),
                          report.markdown_table(headers, rows) + "\n\n" + results_caption(data, what, source, doc))


def multi_gpu_results(data: Data, suite: str, gpu: str | None = None) -> list[tuple[int, str]]:
    """(GPU count, folder) of every results/<gpu>x<N>/<suite>.json, fewest GPUs first."""
    gpu = gpu or data.gpu
    found = []
    for path in data.results_dir.glob(f"{gpu}x*/{suite}.json"):
        m = re.fullmatch(rf"{re.escape(gpu)}x(\d+)", path.parent.name)
        if m:
            found.append((int(m.group(1)), path.parent.name))
    return sorted(found)


def render_scaling(args: list[str], options: dict, data: Data) -> str:
    suite = options.get("suite", "context_parallel")
    kernels = split_list(options.get("kernels"))
    baseline = options.get("baseline", "attention")
    if not kernels:
        raise MarkerError("scaling: needs kernels=...")
    found = multi_gpu_results(data, suite, options.get("gpu"))
    if not found:
        where = f"{data.where(data.results_dir)}/{options.get('gpu') or data.gpu}x<N>/{suite}.json"
        return (f'!!! note "Pending: no multi-GPU run recorded yet"\n\n'
                f"    No `{where}` exists yet. The tables appear here once `python -m tools.bench "
                f"--suite {suite}` has run on a machine with several GPUs; nothing is typed in by hand.")
    parts = []
    for count, folder in found:
        doc, source = data.results(suite, folder)
        for kernel in kernels:
            if not any(r["kernel"] == kernel for r in doc["rows"]):
                raise MarkerError(f"{source}: no rows for {kernel} (rerun python -m tools.bench --suite {suite})")
            headers, rows = report.scaling_table(doc, kernel, baseline)
            p = next(r["problem"] for r in doc["rows"] if r["kernel"] == kernel)
            shape = (f"batch {p['batch']}, {p['heads_q']}/{p['heads_kv']} heads, head_dim {p['head_dim']}"
                     f"{', causal' if p.get('causal') else ''}, {p.get('dtype', 'bf16')}")
            what = (f"{kernel} on up to {count} GPUs: TFLOP/s per GPU (scaling efficiency against "
                    f"{baseline} on one GPU); {shape}")
            table = report.markdown_table(breakable(headers), rows)
            parts.append(measured_block("measured-table", [baseline, kernel],
                                        table + "\n\n" + results_caption(data, what, source, doc)))
    return "\n\n".join(parts)


def notebook_heading(path: Path) -> str:
    """The first markdown heading of a notebook (its title), else its file name."""
    import json

    for cell in json.loads(path.read_text()).get("cells", []):
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell.get("source", "")).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


def render_notebooks(args: list[str], options: dict, data: Data) -> str:
    paths = notebook_paths()
    if not paths:
        raise MarkerError("no notebooks/NN_*.ipynb")
    # Links are relative to docs/ (the marker's page sits there): notebooks/ is added beside it.
    return "\n".join(f"- [{notebook_heading(ROOT / rel)}]({rel})" for rel in paths)


API_LAYERS = (("Entry points and policy", "Call these: they check inputs, pick an implementation and fall back."),
              ("Stateless ops", "One call per kernel, no policy: the only code that touches the compiled bindings."),
              ("Loading the compiled modules", "Where `python -m tools.build_ext` puts the modules and how they are found."))


def api_modules(package: str) -> list[tuple[int, str]]:
    """(layer, dotted name) of every public module under ``package`` (a path like
    kernels/extension): ops/ are the stateless layer, loader the loading one, the rest policy."""
    base = ROOT / package
    if not base.is_dir():
        raise MarkerError(f"{package}: no such package")
    out = []
    for path in sorted(base.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        if path.name == "__init__.py" or any(part.startswith("_") for part in rel.parts) or "lib" in rel.parts:
            continue
        name = ".".join(rel.parts)
        layer = 1 if "ops" in rel.parts else 2 if path.stem == "loader" else 0
        out.append((layer, name))
    if not out:
        raise MarkerError(f"{package}: no modules")
    return sorted(out)


def render_api(args: list[str], options: dict, data: Data) -> str:
    if not args:
        raise MarkerError("api: needs a package path, e.g. <!-- api: kernels/extension -->")
    modules = api_modules(args[0])
    parts = []
    for layer, (title, blurb) in enumerate(API_LAYERS):
        names = [name for n, name in modules if n == layer]
        if names:
            parts.append(f"## {title}\n\n{blurb}\n\n" + "\n\n".join(f"::: {name}" for name in names))
    return "\n\n".join(parts)


RENDERERS = {"code": lambda a, o, d: render_code(a, o), "table": render_table, "plot": render_plot,
             "summary": render_summary, "inspect": render_inspect, "profile": render_profile,
             "routing": render_routing, "scaling": render_scaling, "notebooks": render_notebooks,
             "api": render_api}


def render_markers(markdown: str, page: str, data: Data) -> str:
    """Replace every marker of ``markdown`` (from ``page``); raise MarkerError naming the marker."""
    data.start_page(page)

    def replace(match):
        kind, text = match.group(1), match.group(2).strip()
        try:
            args, options = parse_args(text)
            return RENDERERS[kind](args, options, data)
        except (MarkerError, report.ResultsError, ValueError, SyntaxError) as exc:
            raise MarkerError(f"{page}: <!-- {kind}: {text} -->: {exc}") from None

    return MARKER.sub(replace, markdown)


# ---- mkdocs events -----------------------------------------------------------------------------
_data: Data | None = None


def notebook_paths() -> list[str]:
    return sorted(f"notebooks/{p.name}" for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))


def notebook_title(path: str) -> str:
    """notebooks/02_k2_row_group.ipynb -> "K2 notebook" (the notebook's H1 repeats the page's)."""
    m = re.match(r"notebooks/\d+_(k\d+)_", path)
    return f"{m.group(1).upper()} notebook" if m else Path(path).stem


def on_config(config):
    """Fill the nav's Worklog section from the registry's rungs and Notebooks from notebooks/."""
    global _data
    _data = Data()
    rungs = registry.rung_names()
    docs_dir = Path(config["docs_dir"])
    missing = [r for r in rungs if not (docs_dir / "worklog" / f"{r}.md").is_file()]
    if missing:
        msg = f"kernels/{missing[0]}.py exists but docs/worklog/{missing[0]}.md does not: every rung needs its page"
        log.error(msg)
        raise PluginError(msg)
    for section in config["nav"] or []:
        if not isinstance(section, dict):
            continue
        title, entries = next(iter(section.items()))
        if title == "Worklog":
            fixed = [e for e in entries if not (isinstance(e, str) and RUNG_PAGE.match(e))]
            section[title] = fixed + [f"worklog/{r}.md" for r in rungs]
        elif title == "Notebooks":
            fixed = [e for e in entries
                     if not str(next(iter(e.values())) if isinstance(e, dict) else e).endswith(".ipynb")]
            section[title] = fixed + [{notebook_title(path): path} for path in notebook_paths()]
    log.info("docs: rungs %s; results from %s (gpu %s)", ", ".join(rungs), _data.results_dir, _data.gpu)
    return config


@event_priority(100)  # before mkdocs-jupyter's on_files, so that it renders the notebooks added here
def on_files(files, config):
    rungs = set(registry.rung_names())
    for file in list(files):
        m = RUNG_PAGE.match(file.src_uri)
        if m and m.group(1) not in rungs:
            log.info("docs: %s left out: kernels/%s.py does not exist yet", file.src_uri, m.group(1))
            files.remove(file)
    for rel in notebook_paths():
        files.append(File(rel, src_dir=str(ROOT), dest_dir=config["site_dir"],
                          use_directory_urls=config["use_directory_urls"]))
    return files


def on_page_markdown(markdown, page, config, files):
    data = _data or Data()
    try:
        return render_markers(markdown, f"docs/{page.file.src_uri}", data)
    except MarkerError as exc:
        log.error(str(exc))
        raise PluginError(str(exc)) from None


# A notebook links its worklog page by its path in the repository (which Jupyter and GitHub
# follow); on the site the notebook's page is notebooks/<name>/ and the worklog's worklog/kN/.
NOTEBOOK_WORKLOG_LINK = re.compile(r'href="\.\./docs/worklog/(k\d+)\.md(#[^"]*)?"')


def site_links_of_notebook(html_text: str) -> str:
    """A rendered notebook's links to ``../docs/worklog/kN.md`` as the site's ``../../worklog/kN/``."""
    return NOTEBOOK_WORKLOG_LINK.sub(lambda m: f'href="../../worklog/{m.group(1)}/{m.group(2) or ""}"', html_text)


def on_page_content(html_text, page, config, files):
    if page.file.src_uri.endswith(".ipynb"):
        return site_links_of_notebook(html_text)
    return html_text


def on_serve(server, config, builder):
    """Rebuild on changes to what the pages are generated from."""
    for folder in ("kernels", "results", "notebooks", "tools"):
        server.watch(str(ROOT / folder))
    return server
