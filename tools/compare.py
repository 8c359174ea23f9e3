"""Compare attention kernels: ``python -m tools.compare k2 k4 [fa4 ...]``.

On a GPU: the same inputs for all, each output checked against the fp32 reference, then the
median time, TFLOP/s, % of the bf16 GEMM ceiling measured in the same run, and the speedup
over the first kernel named. Exit status 1 if any output is wrong.

Without a GPU: each rung is compiled for sm_90a and its registers, shared memory, spills and
SASS instruction mix are shown side by side, with the H200 numbers recorded in results/.
"""

from __future__ import annotations

import argparse
import json
import sys

from kernels.harness.problem import AttentionProblem, fa3_paper_shapes

DEFAULT_SEQLENS = (1024, 4096, 16384)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def problems_from_args(args) -> list[AttentionProblem]:
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    out = []
    for causal in causals:
        if args.batch is None and args.heads_kv is None and args.heads == 2048 // args.head_dim:
            out += fa3_paper_shapes(args.head_dim, causal, args.seqlen)
            continue
        for s in args.seqlen:
            batch = args.batch or max(1, 16384 // s)
            out.append(AttentionProblem(batch=batch, seqlen_q=s, seqlen_k=s, heads_q=args.heads,
                                        heads_kv=args.heads_kv or args.heads,
                                        head_dim=args.head_dim, causal=causal))
    return out


def run_gpu(names: list[str], problems: list[AttentionProblem], progress=None) -> dict:
    """Measure every kernel on every problem; rows follow the results schema."""
    from kernels.harness.ceilings import measure_bf16_gemm_tflops
    from kernels.registry import get
    from tools.measure import Case, measure

    runners = [get(n) for n in names]
    ceiling = measure_bf16_gemm_tflops()
    rows = []
    for problem in problems:
        case = Case.build(problem)
        for runner in runners:
            if progress:
                progress(f"{runner.name} {problem.label()}")
            rows.append(measure(runner, case))
        del case
    return {"mode": "gpu", "bf16_gemm_tflops": round(ceiling, 1), "rows": rows}


def run_cpu(names: list[str], problems: list[AttentionProblem]) -> dict:
    """Compile reports for the rungs among ``names`` plus the recorded H200 rows."""
    from kernels.registry import rung_names
    from tools import inspect, report

    base = problems[0]
    reports = [inspect.inspect(n, base) for n in names if n in rung_names()]
    recorded = None
    try:
        doc = report.load("ladder")
        wanted = {p.label() for p in problems}
        rows = [r for r in report.select(doc, names) if report.attention_label(r["problem"]) in wanted]
        recorded = {"meta": doc["meta"], "rows": rows}
    except report.ResultsError as exc:
        recorded = {"error": str(exc)}
    return {"mode": "cpu", "inspect": reports, "recorded": recorded}


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

    reports = result["inspect"]
    if reports:
        headers, rows = inspect.resources_rows(reports)
        p = AttentionProblem.from_dict(reports[0]["problem"])
        console.print(report.rich_table(headers, rows, title=f"No GPU here: sm_90a compile report (d{p.head_dim}{' causal' if p.causal else ''})"))
    rec = result["recorded"]
    if "error" in rec:
        console.print(f"[yellow]No recorded H200 numbers: {rec['error']}[/yellow]")
        return
    headers, rows = report.pivot({"rows": rec["rows"]}, kernels=names)
    if not rows:
        console.print("[yellow]results/h200/ladder.json has no rows for these kernels and shapes[/yellow]")
        return
    console.print(report.rich_table(headers, rows, title="Recorded on the H200: TFLOP/s"))
    console.print("Measured by python -m tools.bench --suite ladder: " + report.provenance(rec["meta"]))


def main(argv=None) -> int:

    from kernels.registry import all_runners
    from tools.report import console as report_console

    parser = argparse.ArgumentParser(prog="python -m tools.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("kernels", nargs="+", help="kernel names: " + ", ".join(all_runners()))
    parser.add_argument("--seqlen", type=positive_int, nargs="+", default=list(DEFAULT_SEQLENS))
    parser.add_argument("--head-dim", type=positive_int, default=128)
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--batch", type=positive_int, default=None, help="default: 16k tokens / seqlen")
    parser.add_argument("--heads", type=positive_int, default=None, help="query heads (default 2048 / head_dim)")
    parser.add_argument("--heads-kv", type=positive_int, default=None, help="kv heads (GQA); default = heads")
    parser.add_argument("--cpu", action="store_true", help="compile report even where a GPU is present")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    args.heads = args.heads or 2048 // args.head_dim
    unknown = [n for n in args.kernels if n not in all_runners()]
    if unknown:
        parser.error(f"unknown kernel(s) {', '.join(unknown)}; known: {', '.join(all_runners())}")
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
        return 1 if any(r["status"].startswith("wrong") for r in result["rows"]) else 0
    result = run_cpu(args.kernels, problems)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_cpu(result, args.kernels, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
