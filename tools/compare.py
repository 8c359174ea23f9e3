"""Compare attention kernels side by side: `python -m tools.compare k2 k4 fa4`.

On a GPU: the same inputs for all, each output checked against the fp32 reference, then the
median time, TFLOP/s, % of the bf16 GEMM ceiling measured in the same run, and the speedup
over the first kernel named.

Without a GPU (or with --cpu): each rung is compiled for sm_90a and its registers, shared
memory, spills and SASS instruction mix are shown side by side; peers and production kernels
have nothing to compile here and say so. Then the H200 numbers recorded in results/ for the
kernels and shapes asked for, and which of those shapes are not recorded.

Exit status: 0; 1 if an output is wrong; 2 for bad arguments, or when a kernel can run none
of the requested shapes (the message says why).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from kernels.harness.problem import DTYPES, AttentionProblem, fa3_paper_shapes
from tools.cli import positive_int

DEFAULT_SEQLENS = (1024, 4096, 16384)
EXIT_WRONG, EXIT_USAGE = 1, 2


def default_heads(head_dim: int) -> int:
    """Query heads at a hidden size of 2048 (the FlashAttention papers' benchmark); where
    head_dim does not divide 2048, the power of two nearest 2048 / head_dim (d96: 16 heads)."""
    if 2048 % head_dim == 0:
        return 2048 // head_dim
    return 2 ** max(0, round(math.log2(2048 / head_dim)))


def problems_from_args(args) -> list[AttentionProblem]:
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    out = []
    for causal in causals:
        if args.batch is None and args.heads_kv is None and args.heads * args.head_dim == 2048:
            shapes = fa3_paper_shapes(args.head_dim, causal, args.seqlen)
        else:
            shapes = [AttentionProblem(batch=args.batch or max(1, 16384 // s), seqlen_q=s, seqlen_k=s,
                                       heads_q=args.heads, heads_kv=args.heads_kv or args.heads,
                                       head_dim=args.head_dim, causal=causal) for s in args.seqlen]
        out += [p.with_(dtype=dtype) for dtype in args.dtype for p in shapes]
    return out


def run_gpu(names: list[str], problems: list[AttentionProblem], progress=None) -> dict:
    """Measure every kernel on every problem; rows follow the results schema."""
    from kernels.harness.ceilings import measure_bf16_gemm_tflops
    from kernels.registry import get
    from tools.measure import Case, measure_all

    runners = [get(n) for n in names]
    ceiling = measure_bf16_gemm_tflops()
    rows = []
    for problem in problems:
        if progress:
            progress(problem.label())
        case = Case.build(problem)
        rows.extend(measure_all(runners, case))
        del case
    return {"mode": "gpu", "bf16_gemm_tflops": round(ceiling, 1), "rows": rows}


def no_runnable_shape(rows: list[dict], names: list[str]) -> dict[str, str]:
    """``{kernel: reason}`` for the kernels whose every row is unsupported (nothing measured)."""
    out = {}
    for name in names:
        mine = [r for r in rows if r["kernel"] == name]
        if mine and all(r["status"].startswith("unsupported") for r in mine):
            out[name] = "; ".join(dict.fromkeys(r["status"].removeprefix("unsupported: ") for r in mine))
    return out


def not_compiled_reason(name: str) -> str:
    """Why a kernel has no compile report here (only the CuTe-DSL rungs compile without a GPU)."""
    from kernels.registry import get

    runner = get(name)
    if runner.kind == "rung":
        return (f"{name} is a variant of rung {name.partition(':')[0]} (its knobs set): the compile report "
                "covers the rung's defaults")
    if runner.kind == "peer":
        return f"{name} is a peer ({runner.description}), not a rung of kernels/: nothing of it compiles here"
    return (f"{name} is a production CUDA kernel (csrc/, built by python -m tools.build_ext on a CUDA host), "
            "not a CuTe-DSL rung: no compile report without a GPU")


def recorded_rows(names: list[str], problems: list[AttentionProblem]) -> dict:
    """What results/ records for these kernels: the rows at the requested shapes, the requested
    shapes it lacks per kernel, and every recorded shape of these kernels, so that a missing
    shape is reported with what is there instead. A kernel's rows come from one file, the
    ladder's if it records the kernel, so a table never mixes two runs for one kernel."""
    from tools import report

    wanted = [p.label() for p in problems]
    suites = sorted(report.available(), key=lambda s: (s != "ladder", s))
    sources, rows, errors, taken, elsewhere = {}, [], [], set(), {}
    for suite in suites:
        try:
            doc = report.load(suite)
        except report.ResultsError as exc:
            errors.append(str(exc))
            continue
        found = report.select(doc, [n for n in names if n not in taken])
        mine = [r for r in found if report.is_dense_attention(r["problem"])]
        # paged or ragged KV, accuracy draws: problems this tool does not pose
        for r in found:
            if r not in mine:
                elsewhere.setdefault(r["kernel"], set()).add(f"{suite}.json")
        if mine:
            sources[suite] = doc["meta"]
            rows += [{**r, "suite": suite} for r in mine]
            taken |= {r["kernel"] for r in mine}
    other = {name: sorted(files) for name, files in elsewhere.items() if name not in taken}
    if not rows:
        error = "; ".join(errors) or (
            f"results/ records no dense-attention rows of {', '.join(names)}"
            + ("".join(f"; {name} has rows on paged or ragged KV in {', '.join(files)} (docs/production.md shows them)"
                       for name, files in other.items()) or " (python -m tools.bench writes it)"))
        return {"error": error, "sources": {}, "rows": [], "missing": {n: wanted for n in names},
                "shapes": {}, "nearest": [], "elsewhere": other}
    matching = [r for r in rows if report.attention_label(r["problem"]) in wanted]
    missing = {}
    for name in names:
        have = {report.attention_label(r["problem"]) for r in matching if r["kernel"] == name}
        if len(have) < len(wanted):
            missing[name] = [label for label in wanted if label not in have]
    return {"sources": sources, "rows": matching, "missing": missing, "shapes": recorded_shapes(rows),
            "nearest": nearest_rows(rows, problems) if missing else [], "elsewhere": other}


def recorded_shapes(rows: list[dict]) -> dict[str, list[str]]:
    """``{kernel: ["head_dim 128: seqlen 1024, 4096; causal and not (ladder.json)", ...]}``."""
    by: dict[tuple, dict] = {}
    for r in rows:
        p = r["problem"]
        entry = by.setdefault((r["kernel"], p["head_dim"], r["suite"]), {"seqlens": set(), "causal": set()})
        entry["seqlens"].add(p["seqlen_q"])
        entry["causal"].add(bool(p["causal"]))
    out: dict[str, list[str]] = {}
    for (kernel, head_dim, suite), e in sorted(by.items()):
        mask = {frozenset({False}): "no mask", frozenset({True}): "causal"}.get(frozenset(e["causal"]), "causal and not")
        out.setdefault(kernel, []).append(f"head_dim {head_dim}: seqlen {', '.join(map(str, sorted(e['seqlens'])))}; "
                                          f"{mask} ({suite}.json)")
    return out


def nearest_rows(rows: list[dict], problems: list[AttentionProblem]) -> list[dict]:
    """Recorded rows at the requested sequence lengths and masks but another shape (head
    dimension, heads, batch): what the README's example at head_dim 64 shows while only 128 is
    recorded. Rows at a requested shape are in the main table already and are left out."""
    from tools import report

    asked = {(p.seqlen_q, p.causal) for p in problems}
    wanted = {p.label() for p in problems}
    return [r for r in rows if (r["problem"]["seqlen_q"], r["problem"]["causal"]) in asked
            and report.attention_label(r["problem"]) not in wanted]


def run_cpu(names: list[str], problems: list[AttentionProblem]) -> dict:
    """Compile reports for the rungs among ``names`` (why not, for the others), plus what
    results/ records for them."""
    from kernels.registry import rung_names
    from tools import inspect

    base = problems[0]
    rungs = rung_names()
    reports = [inspect.inspect(n, inspect.native_problem(n, base)) for n in names if n in rungs]
    return {"mode": "cpu", "inspect": reports,
            "not_compiled": {n: not_compiled_reason(n) for n in names if n not in rungs},
            "unrunnable": unrunnable(names, problems),
            "recorded": recorded_rows(names, problems)}


def unrunnable(names: list[str], problems: list[AttentionProblem]) -> dict[str, str]:
    """``{kernel: reason}`` for the kernels among ``names`` whose limits (dtype, head_dim, shape;
    a variant's knobs as its constructor checks them) exclude every one of ``problems``: known
    without a GPU and without compiling, so a CPU-only run refuses what the GPU host would."""
    from kernels.registry import get

    out = {}
    for name in names:
        reasons = [get(name).limits(p) for p in problems]
        if all(reasons):
            out[name] = "; ".join(dict.fromkeys(reasons))
    return out


def gpu_table(result: dict, names: list[str]):
    from tools.report import rich_table

    ceiling = result["bf16_gemm_tflops"]
    headers = ["problem", "kernel", "status", "rel err", "ms", "TFLOP/s", "% bf16 GEMM", f"vs {names[0]}"]
    body, base_ms = [], {}
    for r in result["rows"]:
        label = AttentionProblem.from_dict(r["problem"]).label()
        ok = r["status"] == "ok"
        ms = r["ms"]["median"] if ok and r["ms"] else None
        if r["kernel"] == names[0] and ms:
            base_ms[label] = ms
        speed = f"{base_ms[label] / ms:.2f}x" if ms and label in base_ms else "-"
        body.append([label, r["kernel"], "ok" if ok else f"[red]{r['status']}[/red]" if r["status"].startswith("wrong") else r["status"],
                     f"{r['rel_err']:.1e}" if r["rel_err"] is not None else "-",
                     f"{ms:.3f}" if ms else "-", f"{r['tflops']:.1f}" if ok and r["tflops"] else "-",
                     f"{100 * r['tflops'] / ceiling:.0f}%" if ok and r["tflops"] else "-", speed])
    return rich_table(headers, body, title="attention forward, bf16",
                      caption=f"bf16 GEMM ceiling (cuBLAS 8192^3, this run): {ceiling:.0f} TFLOP/s")


def print_cpu(result: dict, names: list[str], console) -> None:
    from tools import inspect, report

    ok = [r for r in result["inspect"] if r["status"] == "ok"]
    if ok:
        headers, rows = inspect.resources_rows(ok)
        p = AttentionProblem.from_dict(ok[0]["problem"])
        console.print(report.rich_table(headers, rows, title=f"No GPU here: sm_90a compile report (d{p.head_dim}{' causal' if p.causal else ''})"))
    for r in result["inspect"]:
        if r["status"] != "ok":
            console.print(f"[yellow]{r['kernel']}: not compiled: {r['status']}[/yellow]")
    for name, reason in result["not_compiled"].items():
        console.print(f"{name}: no compile report: {reason}; its recorded rows are below.")
    rec = result["recorded"]
    if rec.get("error") and not rec["rows"]:
        console.print(f"[yellow]No recorded H200 numbers: {rec['error']}[/yellow]")
        return
    if rec["rows"]:
        print_recorded(rec["rows"], names, console)
    missing = rec["missing"]
    if missing:
        shown = list(dict.fromkeys(label for labels in missing.values() for label in labels))
        console.print(f"[yellow]Not recorded in results/: {', '.join(shown)} (for {', '.join(missing)}). "
                      "What is recorded:[/yellow]")
        for name in names:
            console.print(f"  {name}: " + (" | ".join(rec["shapes"][name]) if name in rec["shapes"] else "nothing"))
        if rec["nearest"]:
            console.print("Nearest recorded rows: the same sequence lengths and mask, at any head dimension.")
            print_recorded(rec["nearest"], names, console)
    for name, files in rec.get("elsewhere", {}).items():
        console.print(f"{name}: its rows on paged or ragged KV are in {', '.join(files)} (docs/production.md).")
    for suite, meta in rec.get("sources", {}).items():
        console.print(f"results/h200/{suite}.json, measured by python -m tools.bench --suite {suite}: "
                      + report.provenance(meta))


def print_recorded(rows: list[dict], names: list[str], console) -> None:
    """Pivot tables of recorded rows: TFLOP/s, and GB/s for the rows that record only a
    bandwidth (decode)."""
    from tools import report

    bandwidth = [r for r in rows if r.get("tflops") is None and r.get("gbps") is not None]
    compute = [r for r in rows if r not in bandwidth]
    for part, value, unit in ((compute, "tflops", "TFLOP/s"), (bandwidth, "gbps", "GB/s of K and V")):
        if part:
            headers, body = report.pivot({"rows": part}, kernels=names, value=value)
            console.print(report.rich_table(headers, body, title=f"Recorded on the H200: {unit}"))


def refuse_unrunnable(unrunnable: dict[str, str], problems: list[AttentionProblem]) -> int:
    """Say which kernels can run none of the requested shapes, and return the exit status."""
    shapes = ", ".join(p.label() for p in problems)
    for name, reason in unrunnable.items():
        print(f"compare: {name} can run none of the requested shapes ({shapes}): {reason}", file=sys.stderr)
    return EXIT_USAGE if unrunnable else 0


def canonical_name(name: str) -> str:
    """``K4`` (as the docs write rungs) -> ``k4``; knobs after a colon are kept as given."""
    rung, colon, knobs = name.partition(":")
    return (rung.lower() if rung[:1] in "Kk" and rung[1:].isdigit() else rung) + colon + knobs


def native_dtypes(names: list[str]) -> list[str]:
    """The dtypes to run when none is asked for: bf16 for every kernel that takes it, and an
    FP8-only rung's own (``compare k12`` runs e4m3, ``compare k11 k12`` both)."""
    from kernels.registry import get, rung_module

    wanted = []
    for name in names:
        rung = name.partition(":")[0]
        dtypes = rung_module(rung).DTYPES if get(name).kind == "rung" else ("bf16",)
        first = "bf16" if "bf16" in dtypes else dtypes[0]
        if first not in wanted:
            wanted.append(first)
    return sorted(wanted, key=["bf16", "fp16", "e4m3"].index)


def build_parser() -> argparse.ArgumentParser:
    from kernels.registry import all_runners

    summary, details = __doc__.split("\n\n", 1)
    parser = argparse.ArgumentParser(prog="python -m tools.compare", description=summary.replace("`", ""),
                                     epilog=details, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernels", nargs="+", help="kernel names: " + ", ".join(all_runners())
                        + "; a rung with knobs set, e.g. k11:rescale_before_pv=True or k11:block_n=160")
    parser.add_argument("--seqlen", type=positive_int, nargs="+", default=list(DEFAULT_SEQLENS), metavar="N",
                        help="sequence lengths, queries = keys (default: %(default)s); batch = 16k tokens / N")
    parser.add_argument("--head-dim", type=positive_int, default=128, metavar="D",
                        help="head dimension (default: %(default)s)")
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both",
                        help="causal mask, bottom-right aligned: yes, no or both (default: %(default)s)")
    parser.add_argument("--batch", type=positive_int, default=None, help="batch size (default: 16k tokens / seqlen)")
    parser.add_argument("--heads", type=positive_int, default=None, help="query heads (default 2048 / head_dim, or the power of two nearest it)")
    parser.add_argument("--heads-kv", type=positive_int, default=None, help="kv heads, fewer for GQA (default: = --heads)")
    parser.add_argument("--dtype", nargs="+", choices=sorted(DTYPES), default=None,
                        help="input dtypes, each kernel runs those it takes: e.g. --dtype bf16 e4m3 "
                             "for an FP8 rung beside bf16 ones at the same shapes (default: each "
                             "kernel's own, bf16 where it takes bf16: compare k12 runs e4m3)")
    parser.add_argument("--cpu", action="store_true", help="compile report even where a GPU is present")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    return parser


def main(argv=None) -> int:
    from kernels.registry import get
    from tools.report import console as report_console

    parser = build_parser()
    args = parser.parse_args(argv)
    args.heads = args.heads or default_heads(args.head_dim)
    args.kernels = [canonical_name(n) for n in args.kernels]
    for name in args.kernels:
        try:
            get(name)
        except KeyError as exc:
            parser.error(exc.args[0])
    args.dtype = args.dtype or native_dtypes(args.kernels)
    try:
        problems = problems_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))

    import torch

    console = report_console(stderr=args.json)
    if torch.cuda.is_available() and not args.cpu:
        with console.status("measuring") as status:
            result = run_gpu(args.kernels, problems, progress=lambda s: status.update(f"measuring {s}"))
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            console.print(gpu_table(result, args.kernels))
        if any(r["status"].startswith("wrong") for r in result["rows"]):
            return EXIT_WRONG
        return refuse_unrunnable(no_runnable_shape(result["rows"], args.kernels), problems)
    result = run_cpu(args.kernels, problems)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_cpu(result, args.kernels, console)
    return refuse_unrunnable(result["unrunnable"], problems)


if __name__ == "__main__":
    sys.exit(main())
