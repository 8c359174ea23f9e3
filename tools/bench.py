"""Benchmarks that write results/: ``python -m tools.bench --suite ladder``.

Measures the ceilings (copy bandwidth, cuBLAS bf16 GEMM, cuBLASLt fp8 GEMM) and the suite's
kernels with their peers in one run, then writes results/<gpu>/<suite>.json with provenance.
This is the only writer of results/.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from dataclasses import dataclass

from kernels.extension.backend.attention_routing import gpu_folder  # the routing reads what bench writes
from tools import report


def suite_names() -> list[str]:
    import tools.suites

    return sorted(m.name for m in pkgutil.iter_modules(tools.suites.__path__))


@dataclass
class Context:
    """What a suite gets: the ceilings, a timer, a progress bar and the user's filters."""

    ceilings: dict
    progress: object
    kernels: list[str] | None = None
    seqlens: list[int] | None = None

    def time(self, fn, arg_sets=((),)):
        from kernels.harness.timing import time_cuda

        return time_cuda(fn, arg_sets)

    def runner(self, name):
        from kernels.registry import get

        return get(name)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", required=True, choices=suite_names())
    parser.add_argument("--kernels", nargs="+", help="only these kernels (default: the suite's list)")
    parser.add_argument("--seqlen", type=int, nargs="+", help="only these seqlens (attention suites)")
    args = parser.parse_args(argv)

    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if not torch.cuda.is_available():
        print("tools.bench measures on a GPU and none is visible; results/ is left unchanged.",
              file=sys.stderr)
        return 2
    from kernels.harness.ceilings import measure_ceilings
    from tools.provenance import gpu_meta

    console = report.console()
    meta = {"suite": args.suite, **gpu_meta()}
    with console.status("measuring ceilings"):
        meta["ceilings"] = measure_ceilings()
    suite = importlib.import_module(f"tools.suites.{args.suite}")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        ctx = Context(meta["ceilings"], progress, args.kernels, args.seqlen)
        rows = suite.run(ctx)

    path = report.RESULTS / gpu_folder(meta["gpu"]) / f"{args.suite}.json"
    doc = report.validate({"meta": meta, "rows": rows}, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    console.print(f"wrote {path.relative_to(report.ROOT)}: {len(rows)} rows; {report.provenance(meta)}")
    wrong = [r for r in rows if r["status"].startswith("wrong")]
    for r in wrong:
        console.print(f"[red]{r['kernel']} {r['problem']}: {r['status']}[/red]")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
