"""Sustained clocks and power per kernel: ``python -m tools.power k11 k13 fa4``.

``tools.compare`` times a few hundred milliseconds of each kernel; the H200 reaches its power
limit within a second of running an attention kernel flat out, and from then on the SM clock
is whatever keeps the board at the limit. Kernels that do the same FLOPs at different energy
per FLOP then run at different clocks. This tool runs each kernel back to back for
``--seconds`` (default 4) while ``nvidia-smi`` samples the SM clock, the board power and the
temperature every 50 ms, and reports for each kernel the time per call and TFLOP/s over the
whole run, and the means of the samples taken after the first ``--settle`` seconds (default
0.5): clock (MHz), power (W), temperature (C), and TFLOP/s per GHz (the work a clock cycle
does, whatever the clock). The kernels run in the order given, with a second's pause between,
once per shape; naming one twice (``k11 k13 k11 k13``) shows the drift. ``--dtype e4m3`` runs
the FP8 rungs on their inputs.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import tempfile
import time

QUERY = "timestamp,clocks.sm,power.draw,temperature.gpu"
SAMPLE_MS = 50


def parse_samples(text: str) -> list[tuple[float, float, float, float]]:
    """``nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,
    noheader,nounits`` lines -> (epoch seconds, MHz, W, C); lines that do not parse are skipped."""
    out = []
    for line in text.strip().splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            when = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((when, float(parts[1]), float(parts[2]), float(parts[3])))
        except ValueError:
            continue
    return out


def window_means(samples, start: float, end: float) -> dict | None:
    """Mean clock, power and temperature of the samples in ``[start, end]`` (None if none)."""
    inside = [s for s in samples if start <= s[0] <= end]
    if not inside:
        return None
    mean = [sum(s[i] for s in inside) / len(inside) for i in (1, 2, 3)]
    return {"mhz": mean[0], "watts": mean[1], "celsius": mean[2], "samples": len(inside)}


def run_sustained(launch, args: tuple, seconds: float) -> tuple[float, float, float]:
    """Call ``launch(*args)`` back to back for ``seconds``: (start, end, ms per call), the time
    per call by CUDA events over all calls after the first ten."""
    import torch

    launch(*args)
    torch.cuda.synchronize()
    start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start = time.time()
    calls = 0
    while time.time() - start < seconds:
        if calls == 10:
            start_event.record()
        for _ in range(10):
            launch(*args)
        calls += 10
        torch.cuda.synchronize()
    end_event.record()
    torch.cuda.synchronize()
    return start, time.time(), start_event.elapsed_time(end_event) / max(calls - 10, 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernels", nargs="+", help="kernel names (python -m tools.compare --help)")
    parser.add_argument("--seqlen", type=int, default=16384,
                        help="queries = keys (default 16384); batch = 16k tokens / seqlen")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--dtype", choices=("bf16", "fp16", "e4m3"), default="bf16",
                        help="the inputs' type (e4m3: the FP8 rungs; default bf16)")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--settle", type=float, default=0.5)
    args = parser.parse_args(argv)

    import torch
    from rich.console import Console
    from rich.table import Table

    from kernels.harness.inputs import empty_output, make_inputs
    from kernels.harness.problem import fa3_paper_shapes
    from kernels.harness.timing import tflops
    from kernels.registry import get

    if not torch.cuda.is_available():
        print("tools.power needs a CUDA GPU", file=sys.stderr)
        return 2
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    # Samples go to a file: a pipe read only at the end fills up and stalls nvidia-smi.
    log = tempfile.TemporaryFile(mode="w+")
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                            "-lms", str(SAMPLE_MS)], stdout=log, text=True)
    runs = []
    try:
        for causal in causals:
            problem, = fa3_paper_shapes(args.head_dim, causal, (args.seqlen,))
            problem = problem.with_(dtype=args.dtype)
            q, k, v = make_inputs(problem, seed=0)
            out = empty_output(problem)
            for name in args.kernels:
                launch = get(name).prepare(problem)
                start, end, ms = run_sustained(launch, (q, k, v, out), args.seconds)
                runs.append((name, problem, start + args.settle, end, ms))
                time.sleep(1.0)
    finally:
        smi.terminate()
        smi.wait()
    log.seek(0)
    samples = parse_samples(log.read())
    table = Table(title=f"sustained, {args.seconds:g} s per kernel ({torch.cuda.get_device_name()})")
    for column in ("shape", "kernel", "ms", "TFLOP/s", "MHz", "W", "C", "TFLOP/s per GHz"):
        table.add_column(column, justify="left" if column in ("shape", "kernel") else "right")
    for name, problem, start, end, ms in runs:
        rate = tflops(problem.flops(), ms)
        means = window_means(samples, start, end)
        if means is None:
            table.add_row(problem.label(), name, f"{ms:.3f}", f"{rate:.1f}", "-", "-", "-", "-")
            continue
        table.add_row(problem.label(), name, f"{ms:.3f}", f"{rate:.1f}", f"{means['mhz']:.0f}",
                      f"{means['watts']:.0f}", f"{means['celsius']:.0f}", f"{rate / means['mhz'] * 1000:.1f}")
    Console(width=120).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
