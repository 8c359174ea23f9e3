"""Nsight Compute on one launch of one kernel: where its time goes, in the profiler's counters.

    python -m tools.ncu k8                       # d128, 16k tokens, no mask: key metrics
    python -m tools.ncu k7 --head-dim 64 --causal
    python -m tools.ncu k11 --segments           # warp samples per step of the ping-pong loop

The kernel runs in a child process under ``ncu`` (clocks left as they are: ``--clock-control
none``); only the launch inside the NVTX range ``profiled`` is profiled, after two warm-up
launches (compile, caches). The metrics kept (:data:`METRICS`) are the ones the worklog pages
use to explain a step: tensor-pipe activity, issue-slot use, the MUFU (XU) and FMA pipes,
instructions executed and the warp stall reasons. ``python -m tools.bench --suite profile``
records them with provenance in results/.

``--segments`` samples warp stalls per SASS instruction instead (the SourceCounters section)
and adds them up over the steps of a ping-pong consumer's KV loop (:data:`SEGMENTS`): where a
consumer warp waits, and how much of the kernel's time is outside that loop (the producer's
waits, each CTA's prologue and epilogue).

``--exec COMMAND --kernel-name REGEX`` profiles a kernel that any command launches (a csrc test
binary's, or a library's such as cuBLASLt's under ``torch._scaled_mm``) and adds its warp
samples up by instruction class (:data:`INSTRUCTION_CLASSES`: WGMMA waits, mbarrier waits, fp32
math, stores, ...), in its hot loop and outside it::

    python -m tools.ncu --exec "build/csrc-tests/fp8_test --time-only 'bn176 promote2 pers tma' \
        --shape 4096x4096x4096" --kernel-name gemm_sm90 --launch-skip 3
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from kernels.harness.problem import AttentionProblem, fa3_paper_shapes
from tools.cli import positive_int

ROOT = Path(__file__).resolve().parent.parent
NVTX_RANGE = "profiled"
SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "WarpStateStats", "SchedulerStats", "Occupancy",
            "LaunchStats")
# Our name -> ncu's (Hopper, Nsight Compute 2025.3).
METRICS = {
    "duration_ns": "gpu__time_duration.sum",
    "tensor_pipe_active_pct": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "issue_slots_busy_pct": "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "xu_pipe_pct": "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
    "fma_pipe_pct": "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "alu_pipe_pct": "sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active",
    "warp_instructions": "smsp__inst_executed.sum",
    "ipc": "sm__inst_executed.avg.per_cycle_active",
    "registers_per_thread": "launch__registers_per_thread",
}
# Kept metrics that no section above collects.
EXTRA_METRICS = ("smsp__inst_executed.sum",)
STALL_PREFIX, STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"


def default_problem(head_dim: int = 128, causal: bool = False) -> AttentionProblem:
    """The ladder's longest shape: one 16k sequence, 2048 / head_dim heads."""
    return fa3_paper_shapes(head_dim, causal, (16384,))[0]


def ncu_binary() -> str | None:
    default = Path("/usr/local/cuda/bin/ncu")
    return shutil.which("ncu") or (str(default) if default.exists() else None)


def parse_raw_csv(text: str) -> dict[str, str]:
    """``ncu --page raw --csv`` output -> {metric name: value} for the longest profiled launch.

    A call can launch more than one kernel (an FP8 rung transposes V first); the attention
    kernel is the longest, and ``launches_in_range`` says how many there were."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no profiled launch in the ncu output")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    if len(rows) < 3:
        raise ValueError("ncu output has a header but no launch")
    launches = [dict(zip(rows[0], row)) for row in rows[2:] if len(row) == len(rows[0])]
    longest = max(launches, key=lambda launch: number(launch.get(METRICS["duration_ns"], "0")))
    return {**longest, "launches_in_range": str(len(launches))}


def number(text: str) -> float:
    return float(str(text).replace(",", ""))


def summarize(raw: dict[str, str]) -> dict:
    """The kept metrics and every stall reason (warps stalled per issued instruction)."""
    out = {name: number(raw[metric]) for name, metric in METRICS.items() if metric in raw}
    if "launches_in_range" in raw:  # parse_raw_csv's count, not an ncu metric
        out["launches_in_range"] = number(raw["launches_in_range"])
    stalls = {key[len(STALL_PREFIX):-len(STALL_SUFFIX)]: number(value) for key, value in raw.items()
              if key.startswith(STALL_PREFIX) and key.endswith(STALL_SUFFIX)}
    out["stalls_per_issue"] = {k: v for k, v in sorted(stalls.items(), key=lambda kv: -kv[1]) if v > 0}
    return out


# The steps of a ping-pong consumer's KV loop, in SASS order. A warp's stall samples sit on the
# instruction it cannot issue: a wait's on the wait, the named barrier's on the instruction after
# the sync. So the turn counts from its BAR.SYNC (waiting for it included) to its BAR.ARV; the
# wait for S from there to the WGMMA wait that leaves one group (P V) in flight; the softmax from
# there to the wait for every group (that wait included); the rest (O's rescale, P's packing, the
# loop's end) from there to the next turn, K's mbarrier wait at the loop's top included.
SEGMENTS = ("turn", "S wait", "softmax to the P V wait", "after the P V wait")
# (marker, the step that begins at it, whether the marker itself belongs to that step)
_STEP_MARKERS = (("BAR.SYNC", "turn", True), ("BAR.ARV", "S wait", False),
                 ("WARPGROUP.DEPBAR.LE gsb0, 0x1", "softmax to the P V wait", False),
                 ("WARPGROUP.DEPBAR.LE gsb0, 0x0", "after the P V wait", False))
OUTSIDE = "outside the loop"


def parse_source_csv(text: str) -> list[dict]:
    """``ncu --page source --csv --print-source sass`` output -> one dict per SASS instruction, in
    address order: ``sass`` (the instruction), ``samples`` (warp stall samples, all) and
    ``executed`` (warp-level instructions executed)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), None)
    if start is None:
        raise ValueError("no SASS source page in the ncu output")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    out = []
    for row in rows[1:]:
        if len(row) != len(rows[0]):
            continue
        d = dict(zip(rows[0], row))
        out.append({"sass": d["Source"].strip(),
                    "samples": number(d["Warp Stall Sampling (All Samples)"] or 0),
                    "executed": number(d["Instructions Executed"] or 0)})
    if not out:
        raise ValueError("the ncu source page has a header but no instruction")
    return out


def loop_segments(instructions: list[dict]) -> dict[str, float]:
    """Warp samples per :data:`SEGMENTS` step, and :data:`OUTSIDE`, of a kernel's SASS (from
    :func:`parse_source_csv`). The loop: the address range of the instructions executed at
    least half as often as the most executed one (the consumers' steady KV loop); it starts
    in the last step (K's wait, before the turn)."""
    peak = max(ins["executed"] for ins in instructions)
    hot = [i for i, ins in enumerate(instructions) if ins["executed"] >= peak / 2]
    out = dict.fromkeys((*SEGMENTS, OUTSIDE), 0.0)
    step = SEGMENTS[-1]
    for i, ins in enumerate(instructions):
        if not hot[0] <= i <= hot[-1]:
            out[OUTSIDE] += ins["samples"]
            continue
        nxt, own = next(((nxt, own) for text, nxt, own in _STEP_MARKERS if text in ins["sass"]), (step, True))
        if own:
            step = nxt
        out[step] += ins["samples"]
        step = nxt
    return out


# Instruction classes of a stall breakdown that needs no knowledge of the kernel's loop
# (:func:`class_samples`): the first class whose opcode prefix matches (whole dotted parts, so
# DEPBAR is the bulk-copy wait and WARPGROUP.DEPBAR the WGMMA one). A spin loop's branch (an
# mbarrier try-wait, then a branch back on its predicate) holds the loop's samples: they count
# with the instruction before the branch.
INSTRUCTION_CLASSES = (
    ("WGMMA wait", ("WARPGROUP.DEPBAR",)),
    ("WGMMA issue", ("HGMMA", "QGMMA", "IGMMA", "BGMMA", "WARPGROUP.ARRIVE")),  # f16/bf16, fp8, int8, b1
    ("mbarrier wait", ("SYNCS.PHASECHK",)),
    ("mbarrier arrive", ("SYNCS.ARRIVE",)),
    ("named barrier", ("BAR",)),
    ("TMA and bulk waits", ("UTMALDG", "UTMASTG", "UTMACMDFLUSH", "UTMAPF", "UBLKCP", "DEPBAR")),
    ("shared stores", ("STSM", "STS")),
    ("global stores", ("STG",)),
    ("fp32 math", ("FFMA", "FADD", "FMUL", "FMNMX")),
    ("conversions", ("F2FP", "F2F", "I2F", "F2I")),
)
OTHER = "other"
HOT, COLD = "hot loop", "rest"


def opcode(sass: str) -> str:
    """The opcode of one SASS instruction: ``@!P0 BRA 0x70`` -> ``BRA``."""
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].rstrip(";") if words else ""


def instruction_class(sass: str) -> str:
    op = opcode(sass)
    for name, prefixes in INSTRUCTION_CLASSES:
        if any(op == p or op.startswith(p + ".") for p in prefixes):
            return name
    return OTHER


def class_samples(instructions: list[dict]) -> dict[str, dict[str, float]]:
    """Warp samples of a kernel's SASS (from :func:`parse_source_csv`) by
    :data:`INSTRUCTION_CLASSES`, split into :data:`HOT` (instructions executed at least half as
    often as the most executed one: a GEMM's consumer main loop) and :data:`COLD` (the producer
    thread, prologues, epilogues). ``{class: {HOT: samples, COLD: samples}}`` in class order,
    OTHER last; classes without samples dropped."""
    peak = max(ins["executed"] for ins in instructions)
    out = {name: {HOT: 0.0, COLD: 0.0} for name, _ in INSTRUCTION_CLASSES}
    out[OTHER] = {HOT: 0.0, COLD: 0.0}
    previous = OTHER
    for ins in instructions:
        cls = previous if opcode(ins["sass"]) == "BRA" else instruction_class(ins["sass"])
        out[cls][HOT if ins["executed"] >= peak / 2 else COLD] += ins["samples"]
        previous = cls
    return {name: split for name, split in out.items() if split[HOT] or split[COLD]}


def command_class_samples(command: list[str], kernel_regex: str, launch_skip: int = 0,
                          timeout_s: int = 300) -> dict[str, dict[str, float]]:
    """Sample one launch of the first kernel matching ``kernel_regex`` (after ``launch_skip``
    matching launches) that ``command`` runs, per SASS instruction, and add the samples up by
    :func:`class_samples`: a csrc test binary's kernel, or a library's (torch._scaled_mm's)."""
    profile_args = ["--clock-control", "none", "--kernel-name", f"regex:{kernel_regex}",
                    "--launch-skip", str(launch_skip), "--launch-count", "1"]
    return class_samples(_sampled_source(lambda args: _run_ncu([*profile_args, *args, *command], timeout_s),
                                         timeout_s))


def stall_segments(name: str, problem: AttentionProblem, timeout_s: int = 300) -> dict[str, float]:
    """Sample one launch of ``name`` per SASS instruction and add the samples up by
    :func:`loop_segments`."""
    instructions = _sampled_source(lambda args: _profile_launch(name, problem, args, timeout_s), timeout_s)
    return loop_segments(instructions)


def _sampled_source(profile_to: Callable[[list[str]], object], timeout_s: int) -> list[dict]:
    """:func:`parse_source_csv` of the report that ``profile_to(args)`` writes when it runs ncu
    with ``args`` (the SourceCounters section into a temporary report) added."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "source"
        profile_to(["--section", "SourceCounters", "-f", "-o", str(report)])
        export = _run_ncu(["--import", f"{report}.ncu-rep", "--page", "source", "--csv",
                           "--print-source", "sass"], timeout_s)
    return parse_source_csv(export)


def _profile_launch(name: str, problem: AttentionProblem, args: list[str], timeout_s: int) -> str:
    """``ncu`` with ``args`` around one profiled launch of ``name`` on ``problem`` (the child
    process, :func:`run_target`); its stdout."""
    child = [sys.executable, "-m", "tools.ncu", "--target", name, "--problem", json.dumps(problem.to_dict())]
    return _run_ncu(["--clock-control", "none", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", *args, *child],
                    timeout_s)


def _run_ncu(args: list[str], timeout_s: int) -> str:
    """``ncu`` with ``args``; its stdout."""
    binary = ncu_binary()
    if binary is None:
        raise FileNotFoundError("ncu (Nsight Compute) not found on PATH or in /usr/local/cuda/bin")
    done = subprocess.run([binary, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"ncu exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return done.stdout


def profile(name: str, problem: AttentionProblem, timeout_s: int = 300) -> dict:
    """Profile one launch of kernel ``name`` on ``problem``; returns :func:`summarize`'s dict."""
    args = [*[arg for s in SECTIONS for arg in ("--section", s)], "--metrics", ",".join(EXTRA_METRICS),
            "--page", "raw", "--csv"]
    return summarize(parse_raw_csv(_profile_launch(name, problem, args, timeout_s)))


def run_target(name: str, problem: AttentionProblem) -> None:
    """The child: warm up, then one launch inside the NVTX range ncu profiles."""
    import torch

    from kernels.harness import empty_output, make_inputs
    from kernels.registry import get

    q, k, v = make_inputs(problem, seed=0)
    out = empty_output(problem)
    launch = get(name).prepare(problem)
    for _ in range(2):
        launch(q, k, v, out)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(NVTX_RANGE)
    launch(q, k, v, out)
    torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()


def print_class_samples(classes: dict[str, dict[str, float]]) -> None:
    total = sum(split[HOT] + split[COLD] for split in classes.values()) or 1.0
    print(f"{'class':22} {HOT:>10} {COLD:>10} {'share':>7}")
    for name, split in classes.items():
        share = (split[HOT] + split[COLD]) / total
        print(f"{name:22} {split[HOT] / 1000:9.1f}k {split[COLD] / 1000:9.1f}k {share:7.1%}")
    print(f"{'total':22} {total / 1000:20.1f}k")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.ncu", description=__doc__.splitlines()[0])
    parser.add_argument("kernel", nargs="?", help="kernel name (python -m tools.compare --help lists them)")
    parser.add_argument("--head-dim", type=positive_int, default=128, help="head dimension (default 128)")
    parser.add_argument("--causal", action="store_true", help="bottom-right causal mask")
    parser.add_argument("--segments", action="store_true",
                        help="warp stall samples per step of the ping-pong loop (SourceCounters)")
    parser.add_argument("--exec", metavar="COMMAND",
                        help="profile a kernel this command runs instead (with --kernel-name): warp stall "
                             "samples by instruction class")
    parser.add_argument("--kernel-name", metavar="REGEX",
                        help="with --exec: the kernel's name (a regex, as ncu's)")
    parser.add_argument("--launch-skip", type=int, default=0, metavar="N",
                        help="with --exec: matching launches to skip first (default 0)")
    parser.add_argument("--target", metavar="NAME", help=argparse.SUPPRESS)  # the child process
    parser.add_argument("--problem", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.target:
        run_target(args.target, AttentionProblem.from_dict(json.loads(args.problem)))
        return 0
    if args.exec is not None:
        if args.kernel is not None or args.kernel_name is None or args.launch_skip < 0:
            parser.error("--exec takes --kernel-name REGEX (and --launch-skip >= 0), not a kernel name")
        if ncu_binary() is None:
            parser.error("ncu (Nsight Compute) not found on PATH or in /usr/local/cuda/bin")
        print_class_samples(command_class_samples(shlex.split(args.exec), args.kernel_name, args.launch_skip))
        return 0
    if not args.kernel:
        parser.error("name a kernel")
    from kernels.registry import get

    try:
        runner = get(args.kernel)
    except KeyError as exc:
        parser.error(exc.args[0])
    problem = default_problem(args.head_dim, args.causal)
    if runner.kind == "rung":  # in the rung's own dtype (e4m3 for an FP8 rung)
        from tools.inspect import native_problem

        problem = native_problem(args.kernel.partition(":")[0], problem)
    reason = runner.unsupported(problem)
    if reason:
        parser.error(reason)
    if ncu_binary() is None:
        parser.error("ncu (Nsight Compute) not found on PATH or in /usr/local/cuda/bin")
    if args.segments:
        segments = stall_segments(args.kernel, problem)
        total = sum(segments.values())
        for step, samples in segments.items():
            print(f"{step:24} {samples / 1000:9.1f} k  {samples / total:6.1%}")
        print(f"{'total':24} {total / 1000:9.1f} k")
        return 0
    result = profile(args.kernel, problem)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
