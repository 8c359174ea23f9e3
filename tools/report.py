"""Results files: the one loader, schema check and table builder.

tools.compare, tools.bench, the docs hooks and the notebooks read results/<gpu>/<suite>.json
only through this module, so a table means the same thing wherever it appears.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from kernels.harness.problem import AttentionProblem

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
META_KEYS = ("suite", "gpu", "driver", "cuda", "torch", "cutlass_dsl", "commit", "date", "ceilings")
ROW_KEYS = ("kernel", "problem", "ms", "tflops", "gbps", "rel_err", "status")
STATUS_PREFIXES = ("ok", "unsupported", "wrong")
# What a suite's files hold beyond META_KEYS and ROW_KEYS: the multi-GPU context-parallel suite
# records the GPUs of the run, each row's world size (a problem key) and scaling efficiency; the
# FP8 accuracy suite each row's input distribution and its error against the bf16 source.
SUITE_META_KEYS = {"context_parallel": ("gpus",)}
SUITE_ROW_KEYS = {"context_parallel": ("scaling_efficiency",), "fp8_accuracy": ("rel_err_source",)}
SUITE_PROBLEM_KEYS = {"context_parallel": ("world_size",), "fp8_accuracy": ("inputs",)}


class ResultsError(ValueError):
    """A results file is missing or does not follow the results schema (``validate``; docs/design.md)."""


def results_path(suite: str, gpu: str = "h200") -> Path:
    return RESULTS / gpu / f"{suite}.json"


def validate(doc: dict, where: str = "results") -> dict:
    if not isinstance(doc, dict) or "meta" not in doc or "rows" not in doc:
        raise ResultsError(f"{where}: needs top-level 'meta' and 'rows'")
    meta = doc["meta"]
    missing = [k for k in META_KEYS if k not in meta]
    if missing:
        raise ResultsError(f"{where}: meta lacks {', '.join(missing)}")
    if not meta["gpu"] or not meta["commit"] or not meta["date"] or not meta["ceilings"]:
        raise ResultsError(f"{where}: meta needs a gpu, commit, date and measured ceilings")
    for i, row in enumerate(doc["rows"]):
        missing = [k for k in ROW_KEYS if k not in row]
        if missing:
            raise ResultsError(f"{where}: row {i} lacks {', '.join(missing)}")
        if not str(row["status"]).startswith(STATUS_PREFIXES):
            raise ResultsError(f"{where}: row {i} has status {row['status']!r}")
        if row["status"] == "ok" and not (row["ms"] and row["ms"].get("median", 0) > 0):
            raise ResultsError(f"{where}: row {i} is ok but has no positive median time")
    _validate_suite_keys(doc, where)
    return doc


def _is_count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def _validate_suite_keys(doc: dict, where: str) -> None:
    """The keys SUITE_META_KEYS, SUITE_ROW_KEYS and SUITE_PROBLEM_KEYS ask of the file's suite."""
    meta, suite = doc["meta"], doc["meta"]["suite"]
    missing = [k for k in SUITE_META_KEYS.get(suite, ()) if k not in meta]
    if missing:
        raise ResultsError(f"{where}: meta of a {suite} file lacks {', '.join(missing)}")
    if "gpus" in meta and not _is_count(meta["gpus"]):
        raise ResultsError(f"{where}: meta gpus must be a positive integer, got {meta['gpus']!r}")
    for i, row in enumerate(doc["rows"]):
        missing = [k for k in SUITE_ROW_KEYS.get(suite, ()) if k not in row]
        missing += [f"problem {k}" for k in SUITE_PROBLEM_KEYS.get(suite, ()) if k not in row["problem"]]
        if missing:
            raise ResultsError(f"{where}: row {i} of a {suite} file lacks {', '.join(missing)}")
        if "world_size" in row["problem"]:
            world = row["problem"]["world_size"]
            if not _is_count(world) or world > meta.get("gpus", 1):
                raise ResultsError(f"{where}: row {i} has world_size {world!r}, not in 1..{meta.get('gpus', 1)} "
                                   f"(the GPUs of the run)")
        if "scaling_efficiency" in row:
            eff = row["scaling_efficiency"]
            if eff is not None and (row["status"] != "ok" or not isinstance(eff, (int, float)) or not eff > 0):
                raise ResultsError(f"{where}: row {i} has scaling_efficiency {eff!r} (a positive number on "
                                   f"ok rows, else null)")


def load(suite: str, gpu: str = "h200") -> dict:
    path = results_path(suite, gpu)
    return load_file(path, str(path.relative_to(ROOT)))


def available(gpu: str = "h200") -> list[str]:
    return sorted(p.stem for p in (RESULTS / gpu).glob("*.json"))


def provenance(meta: dict) -> str:
    """GPU, driver, versions, commit, date and ceilings of a run, as one sentence.

    Versions a suite does not use (``None``, e.g. no CuTe DSL in the rotary suite) are left out;
    a suite recorded in parts (tools.bench --add) names them, their dates and what each covers.
    """
    c = meta.get("ceilings", {})
    versions = [("driver", "driver"), ("CUDA", "cuda"), ("torch", "torch"), ("CuTe DSL", "cutlass_dsl")]
    parts = [f"{meta['gpu']}"]
    parts += [f"{name} {meta.get(key, '?')}" for name, key in versions if meta.get(key, "?") is not None]
    parts += [f"commit {str(meta['commit'])[:10]}", f"{meta['date']}"]
    ceil = []
    if "copy_tbps" in c:
        ceil.append(f"copy {c['copy_tbps']:.2f} TB/s")
    if "bf16_gemm_tflops" in c:
        ceil.append(f"bf16 GEMM {c['bf16_gemm_tflops']:.0f} TFLOP/s")
    if "fp8_gemm_tflops" in c:
        ceil.append(f"fp8 GEMM {c['fp8_gemm_tflops']:.0f} TFLOP/s")
    recorded = meta.get("parts") or []
    if len(recorded) > 1:
        parts[-1] = f"in {len(recorded)} parts: " + "; ".join(
            f"{p['date']} ({p['covers']})" for p in recorded)
        return ", ".join(parts) + (f"; ceilings measured in the first part: {', '.join(ceil)}" if ceil else "")
    return ", ".join(parts) + (f"; ceilings measured in the same run: {', '.join(ceil)}" if ceil else "")


def attention_label(problem: dict) -> str:
    return AttentionProblem.from_dict(problem).label()


class AnyOf(tuple):
    """A ``where`` value that matches any of its items: ``{"m": AnyOf((1, 16))}``."""


def matches(problem: dict, where: dict) -> bool:
    return all(problem.get(k) in v if isinstance(v, AnyOf) else problem.get(k) == v for k, v in where.items())


def select(doc: dict, kernels=None, where=None) -> list[dict]:
    """Rows whose kernel is in ``kernels`` (all if None) and whose problem matches ``where``."""
    where = where or {}
    return [r for r in doc["rows"]
            if (kernels is None or r["kernel"] in kernels) and matches(r["problem"], where)]


def cell(row: dict | None, value: str = "tflops") -> str:
    if row is None:
        return "-"
    if row["status"] != "ok":
        return row["status"].split(":")[0]
    x = row["ms"]["median"] * 1e3 if value == "us" else row.get(value)
    if x is None:
        return "-"
    if value.startswith("rel_err"):  # errors span decades: two significant digits
        return f"{x:.1e}"
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def pivot(doc: dict, kernels=None, where=None, value: str = "tflops",
          label=None, complete: bool = False) -> tuple[list[str], list[list[str]]]:
    """Problem rows x kernel columns of ``value`` (TFLOP/s by default), in file order.

    The first header names what the row labels mean (``problem_header``: e.g. ``M x N x K``).
    ``complete`` keeps only the problems that every kernel shown has a row for. A ``label``
    that merges problems (``shape_label``) must leave each kernel one row per label (a row
    saying the kernel does not take that dtype gives way to one that measured it).
    """
    label = label or problem_label
    rows = select(doc, kernels, where)
    kernel_order = list(kernels) if kernels else list(dict.fromkeys(r["kernel"] for r in rows))
    kernel_order = [k for k in kernel_order if any(r["kernel"] == k for r in rows)]
    problems: dict[str, dict] = {}
    for r in rows:
        cells = problems.setdefault(label(r["problem"]), {})
        if label is shape_label and r["kernel"] in cells:
            unsupported = [x["status"].startswith("unsupported") for x in (cells[r["kernel"]], r)]
            if unsupported == [False, True]:
                continue
            if unsupported != [True, False]:
                raise ResultsError(f"{r['kernel']} has rows of several dtypes at {label(r['problem'])}; "
                                   "narrow where (e.g. dtype:e4m3)")
        cells[r["kernel"]] = r
    if complete:
        problems = {name: by_kernel for name, by_kernel in problems.items() if len(by_kernel) == len(kernel_order)}
    headers = [problem_header([r["problem"] for r in rows])] + kernel_order
    body = [[name] + [cell(by_kernel.get(k), value) for k in kernel_order]
            for name, by_kernel in problems.items()]
    return headers, body


def transpose(headers: list[str], body: list[list[str]], corner: str = "kernel") -> tuple[list[str], list[list[str]]]:
    """A :func:`pivot` turned over: kernel rows x problem columns (``corner`` heads the kernel
    column). Many kernels at a few shapes then fit a page's width."""
    return [corner, *(row[0] for row in body)], [[k, *(row[i] for row in body)] for i, k in enumerate(headers[1:], 1)]


def shape_label(problem: dict) -> str:
    """``problem_label`` without the dtype: the bf16 and the e4m3 version of a shape share one
    row, so that an FP8 rung sits beside the bf16 kernels it is measured against."""
    return problem_label({**problem, "dtype": "bf16"}) if "dtype" in problem else problem_label(problem)


def kernel_dtypes(doc: dict, kernels, where=None) -> dict[str, str]:
    """``{kernel: "e4m3"}`` (or "bf16, fp16", ...): the dtypes of each kernel's rows in ``where``."""
    out: dict[str, list[str]] = {}
    for r in select(doc, kernels, where):
        dtype = r["problem"].get("dtype", "bf16")
        if dtype not in out.setdefault(r["kernel"], []):
            out[r["kernel"]].append(dtype)
    return {k: ", ".join(v) for k, v in out.items()}


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def rich_table(headers: list[str], rows: list[list[str]], title: str | None = None, caption=None):
    from rich.table import Table

    table = Table(title=title, caption=caption, caption_justify="left")
    for i, h in enumerate(headers):
        table.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*[str(c) for c in row])
    return table


# ---- summaries and figures for the docs site and the notebooks -------------------------------
def load_file(path: Path, where: str | None = None) -> dict:
    """Read and validate one results file (``load`` names it by suite; the docs build can
    point here at another results root)."""
    path = Path(path)
    where = where or str(path)
    if not path.exists():
        raise ResultsError(f"{where}: not found (run python -m tools.bench --suite {path.stem} on the GPU)")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{where}: not valid JSON ({exc})") from exc
    return validate(doc, where)


def summary(doc: dict, kernels, where: dict, baseline: str = "fa4",
            value: str = "tflops") -> tuple[list[str], list[list[str]]]:
    """One problem (``where`` must pick one row per kernel): kernel, value, % of ``baseline``.

    The baseline is read from the same file, hence the same run as the kernels it judges.
    """
    rows = {}
    for r in select(doc, list(kernels) + [baseline], where):
        if r["kernel"] in rows:
            raise ResultsError(f"summary: {where} matches several problems for {r['kernel']}; narrow it")
        rows[r["kernel"]] = r
    base = rows.get(baseline)
    base_value = base.get(value) if base and base["status"] == "ok" else None
    headers = ["kernel", value_label(value), f"% of {baseline}"]
    body = []
    for k in kernels:
        r = rows.get(k)
        share = "-"
        if r and r["status"] == "ok" and r.get(value) is not None and base_value:
            share = f"{100 * r[value] / base_value:.1f}%" if r[value] < 0.1 * base_value else f"{100 * r[value] / base_value:.0f}%"
        body.append([k, cell(r, value), share])
    return headers, body


# The row values a table can show, and their column labels.
VALUE_LABELS = {"tflops": "TFLOP/s", "gbps": "GB/s", "rel_err": "rel. error", "tokens_per_s": "tokens/s",
                "us": "µs per call (median)", "rel_err_source": "rel. error against fp64 on the bf16 source"}
# What a table of rows shows when nobody says: the first of these that some row records.
NATURAL_VALUES = ("tflops", "gbps", "tokens_per_s", "us", "rel_err")


def value_label(value: str) -> str:
    return VALUE_LABELS.get(value, value)


def natural_value(rows: list[dict]) -> str:
    """The value a table of ``rows`` shows by default: TFLOP/s where they record it, else GB/s
    (decode, rotary, quantize), tokens/s (the model), µs or the error."""
    return next((v for v in NATURAL_VALUES if any(r.get(v) is not None for r in rows)), "tflops")


def series(doc: dict, kernels, where=None, x: str = "seqlen_q",
           value: str = "tflops") -> dict[str, list[tuple[float, float]]]:
    """``{kernel: [(problem[x], row[value]), ...]}`` sorted by x; rows that are not ok are left out."""
    out: dict[str, list[tuple[float, float]]] = {k: [] for k in kernels}
    for r in select(doc, kernels, where):
        if r["status"] == "ok" and r.get(value) is not None:
            out[r["kernel"]].append((r["problem"][x], r[value]))
    return {k: sorted(points) for k, points in out.items()}


# Twenty colours and ten markers: every series of a plot of up to twenty differs from every
# other in colour and from its colour neighbour (tab20 pairs a dark and a light shade) in marker.
SERIES_MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*", "h", "<")


def series_style(index: int) -> tuple[tuple[float, float, float], str]:
    """(colour, marker) of the ``index``-th series of a plot."""
    import matplotlib

    colors = matplotlib.colormaps["tab20"].colors
    return colors[index % len(colors)], SERIES_MARKERS[index % len(SERIES_MARKERS)]


def plot_svg(doc: dict, kernels, where=None, x: str = "seqlen_q", value: str = "tflops",
             title: str | None = None, highlight=None, log_y: bool = True) -> str:
    """A line per kernel of ``value`` against ``problem[x]``, as SVG text (text kept as text).

    ``highlight`` (default: the rungs, names ``k<N>``) are drawn solid, the others dashed.
    """
    import io
    import re

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = series(doc, kernels, where, x, value)
    highlight = set(highlight) if highlight is not None else {k for k in kernels if re.fullmatch(r"k\d+", k)}
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "report", "font.size": 9}):
        fig, ax = plt.subplots(figsize=(6.4, 3.4))
        for i, (k, points) in enumerate(data.items()):
            if not points:
                continue
            xs, ys = zip(*points)
            color, marker = series_style(i)
            ax.plot(xs, ys, marker=marker, markersize=4, label=k, color=color,
                    linestyle="-" if k in highlight else "--", linewidth=2 if k in highlight else 1.2)
        ax.set_xscale("log", base=2)
        xs_all = sorted({p[0] for pts in data.values() for p in pts})
        if xs_all:
            ax.set_xticks(xs_all, [seqlen_label(v) for v in xs_all])
            ax.minorticks_off()
        if log_y:
            from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

            ax.set_yscale("log")
            # plain numbers (600, not 6x10^2) at 1, 2 and 5 of each decade
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel({"seqlen_q": "sequence length"}.get(x, x.replace("_", " ")))
        ax.set_ylabel(value_label(value))
        if title:
            ax.set_title(title)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    return buf.getvalue()


# ---- context parallelism: scaling over GPUs ------------------------------------------------------
def seqlen_label(n: int) -> str:
    """32768 -> "32k"."""
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def scaling_table(doc: dict, kernel: str, baseline: str = "attention") -> tuple[list[str], list[list[str]]]:
    """A multi-GPU file's scaling of ``kernel``: a row per seqlen, a column per world size, each
    cell the TFLOP/s per GPU with the scaling efficiency against one GPU beside it; the first
    column is the one-GPU ``baseline`` row (world size 1)."""
    rows = [r for r in doc["rows"] if r["kernel"] in (kernel, baseline)]
    by_key = {(r["problem"]["seqlen_q"], r["problem"]["world_size"], r["kernel"]): r for r in rows}
    worlds = sorted({r["problem"]["world_size"] for r in rows} | {1})
    headers = ["seqlen"] + [f"1 GPU ({baseline})" if w == 1 else f"{w} GPUs" for w in worlds]
    body = []
    for seqlen in sorted({r["problem"]["seqlen_q"] for r in rows}):
        line = [seqlen_label(seqlen)]
        for w in worlds:
            r = by_key.get((seqlen, w, baseline if w == 1 else kernel))
            text = cell(r)
            if r and w > 1 and r["status"] == "ok" and r.get("scaling_efficiency") is not None:
                text += f" ({100 * r['scaling_efficiency']:.0f}%)"
            line.append(text)
        body.append(line)
    return headers, body


# ---- row labels: short, readable, one per problem kind -----------------------------------------
def problem_kind(problem: dict) -> str:
    """``attention``, ``ragged-attention``, ``rotary``, ``gemm``, ``quantize``, ``model`` or
    ``other``, from the fields of a results row's problem (the suites in tools/suites/ write these)."""
    keys = set(problem)
    if {"model", "phase", "batch", "prompt_len"} <= keys:
        return "model"
    if set(AttentionProblem.__dataclass_fields__) - {"scale"} <= keys:
        return "attention"
    if {"seqlens", "heads_q", "heads_kv", "head_dim"} <= keys:
        return "ragged-attention"
    if {"seqlen", "heads_q", "heads_k", "head_dim", "rotary_dim", "layout"} <= keys:
        return "rotary"
    if {"m", "n", "k"} <= keys:
        return "gemm"
    if {"shape", "in", "out"} <= keys:
        return "quantize"
    return "other"


def is_dense_attention(problem: dict) -> bool:
    """An attention problem that ``AttentionProblem.from_dict`` takes as it is: dense KV, no
    field past the dataclass's (paged rows add ``page_size`` / ``paged``, the accuracy suite
    ``inputs``)."""
    return problem_kind(problem) == "attention" and set(problem) <= set(AttentionProblem.__dataclass_fields__)


HEADERS = {"gemm": "M x N x K", "quantize": "shape", "model": "phase, batch, tokens"}


def problem_header(problems) -> str:
    """The first column's header for these problems: what their labels spell out."""
    kinds = {problem_kind(p) for p in problems}
    return HEADERS.get(kinds.pop(), "problem") if len(kinds) == 1 else "problem"


def _heads(q: int, kv: int) -> str:
    return f"{q}" if q == kv else f"{q}/{kv}"


def _extras(problem: dict, known) -> list[str]:
    """Fields a label does not spell out: flags that are set are implied by the label."""
    out = []
    for key, v in problem.items():
        if key in known or v is True or v is False or v is None:
            continue
        if key == "inputs":  # the fp8_accuracy suite's draws: normal ones go without saying
            out += [] if v == "normal" else [f"{v} inputs"]
            continue
        out.append(f"page {v}" if key == "page_size" else f"{key.replace('_', ' ')} {v}")
    return out


def problem_label(problem: dict) -> str:
    """A short label in the notation of ``AttentionProblem.label`` (``b4 s4096 h32/8 d128 causal``):

    - attention: that label, plus ``page 16`` for paged KV and ``outliers inputs`` for the
      fp8_accuracy suite's draws with outliers;
    - ragged attention: ``b6 s100..4096 ...`` (the shortest and longest sequence);
    - rotary: ``b8 s4096 h32/8 d128``, ``rot64`` when only part of the head rotates, the layout;
    - GEMM: ``4096 x 4096 x 4096`` (M x N x K; operand and output types only when not
      the E4M3 x E4M3 -> bf16 of every measured row so far);
    - quantize: ``8192 x 8192 bf16 -> e4m3``;
    - model (tools/suites/model.py): ``decode b8 prompt 512 +64`` (the model's shape, the
      same in every row of the file, is left to the page);
    - anything else: its fields as ``key value`` pairs.
    """
    kind = problem_kind(problem)
    dtype = [] if problem.get("dtype", "bf16") == "bf16" else [problem["dtype"]]
    if kind == "attention":
        fields = set(AttentionProblem.__dataclass_fields__)
        base = attention_label({k: v for k, v in problem.items() if k in fields})
        return " ".join([base, *_extras(problem, fields)])
    if kind == "ragged-attention":
        lens = problem["seqlens"]
        seq = f"s{min(lens)}..{max(lens)}" if len(set(lens)) > 1 else f"s{lens[0]}"
        text = [f"b{problem.get('batch', len(lens))}", seq, f"h{_heads(problem['heads_q'], problem['heads_kv'])}",
                f"d{problem['head_dim']}"] + (["causal"] if problem.get("causal") else []) + dtype
        known = {"batch", "seqlens", "heads_q", "heads_kv", "head_dim", "causal", "dtype"}
        return " ".join(text + _extras(problem, known))
    if kind == "rotary":
        text = [f"b{problem.get('batch', 1)}", f"s{problem['seqlen']}",
                f"h{_heads(problem['heads_q'], problem['heads_k'])}", f"d{problem['head_dim']}"]
        if problem["rotary_dim"] != problem["head_dim"]:
            text.append(f"rot{problem['rotary_dim']}")
        text.append(str(problem["layout"]).replace("_", "-"))
        known = {"batch", "seqlen", "heads_q", "heads_k", "head_dim", "rotary_dim", "layout", "dtype"}
        return " ".join(text + dtype + _extras(problem, known))
    if kind == "gemm":
        text = " x ".join(str(problem[d]) for d in "mnk")
        types = (problem.get("a", "e4m3"), problem.get("b", "e4m3"), problem.get("out", "bf16"))
        if types != ("e4m3", "e4m3", "bf16"):
            text += f" {types[0]} x {types[1]} -> {types[2]}"
        return " ".join([text, *_extras(problem, {"m", "n", "k", "a", "b", "out"})])
    if kind == "model":
        new = f" +{problem['new_tokens']}" if problem.get("new_tokens") else ""
        return f"{problem['phase']} b{problem['batch']} prompt {problem['prompt_len']}{new}"
    if kind == "quantize":
        shape = problem["shape"]
        text = " x ".join(map(str, shape)) if isinstance(shape, list) else str(shape)
        return " ".join([f"{text} {problem['in']} -> {problem['out']}", *_extras(problem, {"shape", "in", "out"})])
    return " ".join(f"{k} {'x'.join(map(str, v)) if isinstance(v, list) else v}" for k, v in problem.items())


def console(stderr: bool = False):
    """A rich console that keeps table rows on one line when output goes to a file or pipe."""
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 160)


# ---- the ladder at a glance (README and the docs home) -----------------------------------------
HEADLINE = {"seqlen_q": 16384, "head_dim": 128, "causal": False}
README_MARKERS = ("<!-- ladder-table -->", "<!-- /ladder-table -->")


def best_peers(doc: dict) -> dict[str, dict]:
    """dtype -> the fastest peer's row (registry kind "peer") at the headline shape of ``doc``."""
    from kernels.registry import names

    peers = set(names("peer"))
    best: dict[str, dict] = {}
    for r in select(doc, where=HEADLINE):
        dtype = r["problem"].get("dtype", "bf16")
        if r["kernel"] in peers and r["status"] == "ok" and r["tflops"] > best.get(dtype, {"tflops": 0})["tflops"]:
            best[dtype] = r
    return best


def ladder_overview(doc: dict | None = None) -> tuple[list[str], list[list[str]]]:
    """Rung, idea, TFLOP/s at the headline shape and % of the best peer of the same dtype in the
    same run ("-" where no peer of that dtype was measured)."""
    from kernels.registry import get, rung_names

    headers = ["rung", "idea"]
    measured, best = {}, {}
    if doc is not None:
        headers += ["TFLOP/s (d128, 16k, H200)", "% of the best peer"]
        measured = {r["kernel"]: r for r in select(doc, where=HEADLINE) if r["status"] == "ok"}
        best = best_peers(doc)
    rows = []
    for name in rung_names():
        row = [f"[{name.upper()}](kernels/{name}.py)", get(name).description]
        if doc is not None:
            r = measured.get(name)
            dtype = r["problem"].get("dtype", "bf16") if r else "bf16"
            peer = best.get(dtype)
            row += [cell(r) + (f" ({dtype})" if dtype != "bf16" else ""),  # an FP8 rung says so
                    f"{100 * r['tflops'] / peer['tflops']:.0f}%" if r and peer else "-"]
        rows.append(row)
    return headers, rows


def best_peer_note(doc: dict) -> str:
    """Which peer each "% of the best peer" divides by, in words."""
    best = best_peers(doc)
    named = [f"{r['kernel']} at {r['tflops']:.0f} TFLOP/s ({dtype})" for dtype, r in sorted(best.items())]
    return "The best peer in that run: " + ("; ".join(named) if named else "none measured") + "."


def update_readme(path: Path | None = None) -> bool:
    """Rewrite the README's ladder table from the registry and results; True if it changed."""
    path = path or ROOT / "README.md"
    text = path.read_text()
    start, end = README_MARKERS
    if start not in text or end not in text:
        raise ValueError(f"{path.name}: markers {start} ... {end} not found")
    try:
        doc = load("ladder")
        note = (f"\n\nMeasured by `python -m tools.bench --suite ladder`: {provenance(doc['meta'])}. "
                f"{best_peer_note(doc)}")
    except ResultsError:
        doc, note = None, ""
    table = markdown_table(*ladder_overview(doc)) + note
    head, rest = text.split(start, 1)
    new = f"{head}{start}\n{table}\n{end}{rest.split(end, 1)[1]}"
    if new != text:
        path.write_text(new)
    return new != text


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tools.report",
                                     description="Show recorded results, or regenerate the README's ladder table.")
    sub = parser.add_subparsers(dest="command", required=True)
    show = sub.add_parser("show", help="print a recorded suite as tables")
    show.add_argument("suite", nargs="?", default="ladder", help="a recorded suite (default ladder)")
    show.add_argument("--value", choices=tuple(VALUE_LABELS),
                      help="the value shown (default: each table's own, TFLOP/s where recorded, else "
                           "GB/s, tokens/s, µs, the error)")
    show.add_argument("--gpu", default=os.environ.get("DOCS_GPU", "h200"),
                      help="the results folder, e.g. h100 (default: $DOCS_GPU, else h200)")
    show.add_argument("--columns", type=int, default=8, help="kernels per table at most (default 8)")
    sub.add_parser("readme", help="rewrite the ladder table between the README's markers")
    args = parser.parse_args(argv)
    if args.command == "readme":
        print("README.md updated" if update_readme() else "README.md already current")
        return 0
    if args.columns < 1:
        parser.error("--columns must be at least 1")
    if args.suite not in available(args.gpu):
        recorded = ", ".join(available(args.gpu)) or "none"
        parser.error(f"no recorded suite {args.suite!r} in results/{args.gpu}; recorded: {recorded}")
    try:
        doc = load(args.suite, args.gpu)
    except ResultsError as exc:
        parser.error(str(exc))
    out = console()
    for title, rows in show_groups(doc["rows"], args.suite):
        value = args.value or natural_value(rows)
        kernels = list(dict.fromkeys(r["kernel"] for r in rows))
        for first in range(0, len(kernels), args.columns):
            headers, body = pivot({"rows": rows}, kernels=kernels[first:first + args.columns], value=value)
            if body:
                out.print(rich_table(headers, body, title=f"{title} ({value_label(value)})"))
    out.print(provenance(doc["meta"]))
    return 0


def show_groups(rows: list[dict], suite: str) -> list[tuple[str, list[dict]]]:
    """``show``'s tables: rows of one kind of problem (attention, GEMM, rotary, ...) and one
    measure (natural_value), and for attention one head dimension and mask, each with its title."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        p = r["problem"]
        kind = problem_kind(p)
        key = (kind, p.get("head_dim"), p.get("causal")) if "attention" in kind else (kind, None, None)
        # rows that record another measure (decode: GB/s beside prefill's TFLOP/s) get their own table
        groups.setdefault((*key, natural_value([r])), []).append(r)
    out = []
    for (kind, head_dim, causal, _), members in sorted(groups.items(), key=lambda item: str(item[0])):
        title = f"{suite}: {kind}" + (f", head_dim {head_dim}" if head_dim else "") + (", causal" if causal else "")
        out.append((title, members))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
