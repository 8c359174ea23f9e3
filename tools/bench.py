"""Benchmarks that write results/: ``python -m tools.bench --suite ladder``.

Measures the ceilings (copy bandwidth, cuBLAS bf16 GEMM, cuBLASLt fp8 GEMM) and the suite's
kernels with their peers in one run, then writes results/<gpu>/<suite>.json with provenance.
A multi-GPU suite (one whose module lists the GPU counts it runs on, ``GPU_COUNTS``) runs on
``--gpus N`` GPUs (default: the most that are visible) and writes results/<gpu>x<N>/<suite>.json.
A suite too long for one sitting is recorded in parts: a run with filters (``--kernels``,
``--head-dim``, ``--seqlen``) and ``--add`` puts its rows into the suite's file, which must come
from the same commit, GPU and versions; each part's date, filters and ceilings stay in the file
(``meta["parts"]``). Rows compared with each other belong in one part (the ladder: split by
head dim). This is the only writer of results/.
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
    gpus: int = 1  # GPUs the suite may use (a multi-GPU suite: --gpus)
    head_dims: list[int] | None = None

    def time(self, fn, arg_sets=((),)):
        from kernels.harness.timing import time_cuda

        return time_cuda(fn, arg_sets)

    def time_together(self, calls: dict) -> dict:
        """``{name: ms}`` for ``calls`` ``{name: (fn, arg_sets)}`` timed in interleaved rounds, each
        keeping its fastest (tools.measure.fastest_rounds, as the ladder times kernels): peers
        timed one after the other would each meet the GPU in a different thermal state."""
        import functools

        from kernels.harness.timing import time_cuda
        from tools.measure import ROUND_MS, TIMING_ROUNDS, fastest_rounds

        rounds = {name: functools.partial(time_cuda, fn, arg_sets, rep_ms=ROUND_MS)
                  for name, (fn, arg_sets) in calls.items()}
        return fastest_rounds(rounds, TIMING_ROUNDS)

    def runner(self, name):
        from kernels.registry import get

        return get(name)


def gpus_for(suite, asked: int | None, visible: int) -> int:
    """The GPUs a run of ``suite`` (its module) uses: 1 for a single-GPU suite; for a multi-GPU
    one (``suite.GPU_COUNTS``), ``asked``, else the largest of its counts that is visible.
    Raises ValueError saying why a run cannot go ahead."""
    name = suite.__name__.rsplit(".", 1)[-1]
    counts = getattr(suite, "GPU_COUNTS", None)
    if counts is None:
        if asked not in (None, 1):
            raise ValueError(f"--gpus is for multi-GPU suites; {name} runs on one GPU")
        return 1
    if asked is None:
        fitting = [n for n in counts if n <= visible]
        if not fitting:
            raise ValueError(f"{name} runs on {' / '.join(map(str, counts))} GPUs and {visible} "
                             f"{'is' if visible == 1 else 'are'} visible")
        return max(fitting)
    if asked not in counts:
        raise ValueError(f"{name} runs on {' / '.join(map(str, counts))} GPUs, not --gpus {asked}")
    if asked > visible:
        raise ValueError(f"{name} asks for {asked} GPUs and {visible} {'is' if visible == 1 else 'are'} "
                         f"visible (CUDA_VISIBLE_DEVICES); results/ is left unchanged")
    return asked


def results_folder(gpu_name: str, gpus: int, multi_gpu: bool) -> str:
    """results/ subfolder of a run: ``h200``, or ``h200x4`` for a multi-GPU suite on 4 GPUs."""
    return f"{gpu_folder(gpu_name)}x{gpus}" if multi_gpu else gpu_folder(gpu_name)


# What a part must share with the file it joins: the same code on the same machine and stack.
SAME_IN_EVERY_PART = ("suite", "gpu", "driver", "cuda", "torch", "cutlass_dsl", "commit", "gpus")


def _row_key(row: dict) -> tuple:
    return row["kernel"], json.dumps(row["problem"], sort_keys=True)


def part_of(meta: dict, covers: str) -> dict:
    """One part's entry in ``meta["parts"]``: its date, what it covers (its filters) and ceilings."""
    return {"date": meta["date"], "covers": covers, "ceilings": meta["ceilings"]}


def add_part(doc: dict, meta: dict, rows: list[dict], covers: str) -> dict:
    """``doc`` (a suite's results file) with ``rows``, measured under ``meta``, put in: a row of
    the same kernel and problem is replaced in place, a new one appended. The file's meta stays
    the first part's (its ceilings fill the tables' ceiling columns) and ``meta["parts"]`` lists
    every part (``part_of``; a file recorded whole counts as one part covering "all"). Raises
    ValueError where ``meta`` differs from the file's in anything of SAME_IN_EVERY_PART: parts of
    other code or another machine are not one recording."""
    old = doc["meta"]
    differ = [f"{k} {old.get(k)!r} vs {meta.get(k)!r}"
              for k in SAME_IN_EVERY_PART if old.get(k) != meta.get(k)]
    if differ:
        raise ValueError("--add joins a recording of the same commit, GPU and versions; the file differs in "
                         + "; ".join(differ) + ": record the whole suite instead")
    new = {_row_key(r): r for r in rows}
    merged = [new.pop(_row_key(r), r) for r in doc["rows"]] + list(new.values())
    parts = old.get("parts") or [part_of(old, "all")]
    return {"meta": {**old, "parts": [*parts, part_of(meta, covers)]}, "rows": merged}


def unsupported_filters(suite, args) -> list[str]:
    """The filters a run sets that ``suite`` (its module) does not apply: its ``FILTERS`` names
    the ones it reads from the Context (none if it has no such list)."""
    supported = getattr(suite, "FILTERS", ())
    return [_flag(name) for name in ("kernels", "seqlen", "head_dim")
            if getattr(args, name) and name not in supported]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def suites_taking(name: str) -> str:
    """The suites whose FILTERS include ``name``, for the help text."""
    taking = [suite for suite in suite_names()
              if name in getattr(importlib.import_module(f"tools.suites.{suite}"), "FILTERS", ())]
    return ", ".join(taking) or "none"


def filters_said(args) -> str:
    """The part of a suite a run's filters select, in words ("head_dim 128; seqlen 16384")."""
    said = [f"{name} {' '.join(map(str, values))}" for name, values in
            (("kernels", args.kernels), ("head_dim", args.head_dim), ("seqlen", args.seqlen)) if values]
    return "; ".join(said) or "all"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", required=True, choices=suite_names())
    parser.add_argument("--kernels", nargs="+",
                        help=f"only these kernels (suites: {suites_taking('kernels')})")
    parser.add_argument("--seqlen", type=int, nargs="+",
                        help=f"only these seqlens (suites: {suites_taking('seqlen')})")
    parser.add_argument("--gpus", type=int, help="GPUs of a multi-GPU suite (default: the most visible)")
    parser.add_argument("--head-dim", type=int, nargs="+",
                        help=f"only these head dims (suites: {suites_taking('head_dim')})")
    parser.add_argument("--add", action="store_true",
                        help="put this run's rows into the suite's file of the same commit (one part of it)")
    args = parser.parse_args(argv)
    if args.add and filters_said(args) == "all":
        parser.error("--add records a part: select it with --kernels, --head-dim or --seqlen")
    suite = importlib.import_module(f"tools.suites.{args.suite}")
    ignored = unsupported_filters(suite, args)
    if ignored:
        # a filter the suite does not read would measure everything, and --add would say otherwise
        takes = ", ".join(_flag(f) for f in getattr(suite, "FILTERS", ())) or "none"
        parser.error(f"the {args.suite} suite takes no {', '.join(ignored)} filter (it takes {takes}); "
                     "results/ is left unchanged")

    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if not torch.cuda.is_available():
        print("tools.bench measures on a GPU and none is visible; results/ is left unchanged.",
              file=sys.stderr)
        return 2
    multi_gpu = hasattr(suite, "GPU_COUNTS")
    try:
        gpus = gpus_for(suite, args.gpus, torch.cuda.device_count())
    except ValueError as exc:
        print(f"tools.bench: {exc}", file=sys.stderr)
        return 2
    from kernels.harness.ceilings import measure_ceilings
    from tools.provenance import gpu_meta

    console = report.console()
    meta = {"suite": args.suite, **gpu_meta(), **({"gpus": gpus} if multi_gpu else {})}
    with console.status("measuring ceilings"):
        meta["ceilings"] = measure_ceilings()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        ctx = Context(meta["ceilings"], progress, args.kernels, args.seqlen, gpus, args.head_dim)
        rows = suite.run(ctx)

    path = report.RESULTS / results_folder(meta["gpu"], gpus, multi_gpu) / f"{args.suite}.json"
    covers = filters_said(args)
    doc = {"meta": {**meta, "parts": [part_of(meta, covers)]} if covers != "all" else meta, "rows": rows}
    if args.add:
        try:
            doc = add_part(report.validate(json.loads(path.read_text()), str(path)), meta, rows, covers)
        except (OSError, ValueError) as exc:
            print(f"tools.bench: {path}: {exc}; results/ is left unchanged", file=sys.stderr)
            return 2
    doc = report.validate(doc, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    console.print(f"wrote {path.relative_to(report.ROOT)}: {len(rows)} rows measured, {len(doc['rows'])} "
                  f"in the file; {report.provenance(doc['meta'])}")
    if args.suite == "attention":  # attention()'s routing ships with the package: derived here
        from kernels.extension.backend import attention_routing

        packaged = attention_routing.write_packaged_routes(path.parent.name, report.RESULTS)
        if packaged is not None:
            console.print(f"wrote {packaged.relative_to(report.ROOT)}: attention()'s routes on this GPU")
    wrong = [r for r in rows if r["status"].startswith("wrong")]
    for r in wrong:
        console.print(f"[red]{r['kernel']} {r['problem']}: {r['status']}[/red]")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
