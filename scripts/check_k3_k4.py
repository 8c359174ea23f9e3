"""Check rungs K3 (TMA) and K4 (WGMMA): SASS on any machine, correctness and speed on a GPU.

    python scripts/check_k3_k4.py --inspect        # CPU is enough: sm_90a SASS, registers, compile times
    python scripts/check_k3_k4.py                  # CUDA: correctness sweep, then timings
    python scripts/check_k3_k4.py --skip-bench     # CUDA: correctness sweep only

The GPU sweep compares against an inline fp32 torch reference (relative Frobenius error
<= 1e-2, LSE max abs error <= 1e-2), with NaN-poisoned outputs, inputs scaled x20 on part of
the sweep, and a second run that must be bit-identical. The benchmark times b1 s16384 h16
d128 (causal and not) with CUDA events (median of >= 20 runs after warm-up) and K3 against
K2 at s4096, where the scalar rungs finish in milliseconds. Exit status 1 on any failure.

Each rung's sweep and the benchmark run in their own subprocess with a time limit, so a
kernel that faults (a sticky CUDA error) or hangs (an mbarrier that never completes) is
reported with the case it was running, and the other parts still run.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import re
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernels.harness.problem import AttentionProblem  # noqa: E402

RUNGS = ("k3", "k4")
SEQLENS = (1, 63, 64, 65, 1000, 4096)
# SASS: must appear / must not appear anywhere in the kernel.
EXPECTED_SASS = {
    "k3": ({"UTMALDG", "SYNCS", "FFMA"}, {"LDG", "HGMMA", "HMMA", "LDL", "STL"}),
    "k4": ({"UTMALDG", "SYNCS", "HGMMA"}, {"LDG", "HMMA", "LDL", "STL"}),
}
# K4's FFMAs are the softmax's (one per score): a scalar dot-product loop would need
# D FFMAs per score, thousands per tile.
K4_MAX_FFMA = 1024


# =========================================================================================
# CPU: compile for sm_90a and read the SASS
# =========================================================================================
def _nvdisasm() -> str:
    import nvidia

    for base in nvidia.__path__:
        for cand in Path(base).glob("*/bin/nvdisasm"):
            return str(cand)
    raise FileNotFoundError("nvdisasm not found: pip install nvidia-cuda-nvdisasm")


def sass_of(cubin: bytes) -> str:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([_nvdisasm(), "-c", f.name], check=True, capture_output=True,
                              text=True).stdout


def opcode_counts(sass: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def cubin_resources(cubin: bytes) -> dict[str, int]:
    """Registers and stack sizes from the cubin's .nv.info attributes (EIATTR_REGCOUNT = 0x2f,
    EIATTR_MAX_STACK_SIZE = 0x11), without needing a ptxas that matches the DSL's PTX."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_off = sections[shstrndx][4]

    def name(idx):
        end = cubin.index(b"\0", names_off + idx)
        return cubin[names_off + idx:end].decode()

    found = {}
    for sec in sections:
        if name(sec[0]) != ".nv.info":
            continue
        pos, end = sec[4], sec[4] + sec[5]
        while pos < end:
            fmt, attr = cubin[pos], cubin[pos + 1]
            if fmt == 0x04:
                size = struct.unpack_from("<H", cubin, pos + 2)[0]
                if attr in (0x2F, 0x11) and size == 8:
                    found[{0x2F: "registers", 0x11: "stack_bytes"}[attr]] = struct.unpack_from(
                        "<I", cubin, pos + 8)[0]
                pos += 4 + size
            else:
                pos += 4
    return found


def inspect_variants(rung: str):
    module = __import__(f"kernels.{rung}", fromlist=["compile_for_inspect"])
    for head_dim, causal, has_lse in itertools.product(module.HEAD_DIMS, (False, True), (False, True)):
        yield module, AttentionProblem(head_dim=head_dim, causal=causal), has_lse


def run_inspect(rungs) -> bool:
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    ok = True
    print(f"{'rung':5} {'d':>4} {'causal':6} {'lse':4} {'regs':>4} {'stack':>5} {'compile s':>9}  "
          f"{'UTMALDG':>7} {'HGMMA':>5} {'FFMA':>5} {'LDS':>4} {'LDG':>4} {'STG':>4} {'LDL/STL':>7}  result")
    for rung in rungs:
        for module, problem, has_lse in inspect_variants(rung):
            start = time.perf_counter()
            compiled = module.compile_for_inspect(problem, has_lse=has_lse)
            seconds = time.perf_counter() - start
            cubin = compiled.__cubin__
            cubin = cubin.encode("latin1") if isinstance(cubin, str) else cubin
            ops = opcode_counts(sass_of(cubin))
            res = cubin_resources(cubin)
            present, absent = EXPECTED_SASS[rung]
            problems = [f"no {op}" for op in sorted(present) if not ops.get(op)]
            problems += [f"{op} x{ops[op]}" for op in sorted(absent) if ops.get(op)]
            if rung == "k4" and ops.get("FFMA", 0) > K4_MAX_FFMA:
                problems.append(f"FFMA x{ops['FFMA']} (a scalar dot product?)")
            if res.get("stack_bytes", 0):
                problems.append(f"stack {res['stack_bytes']} B")
            ok &= not problems
            spill = ops.get("LDL", 0) + ops.get("STL", 0)
            print(f"{rung:5} {problem.head_dim:>4} {str(problem.causal):6} {str(has_lse):4} "
                  f"{res.get('registers', -1):>4} {res.get('stack_bytes', -1):>5} {seconds:>9.1f}  "
                  f"{ops.get('UTMALDG', 0):>7} {ops.get('HGMMA', 0):>5} {ops.get('FFMA', 0):>5} "
                  f"{ops.get('LDS', 0):>4} {ops.get('LDG', 0):>4} {ops.get('STG', 0):>4} {spill:>7}  "
                  f"{'ok' if not problems else 'FAIL: ' + ', '.join(problems)}", flush=True)
    return ok


# =========================================================================================
# GPU: correctness sweep
# =========================================================================================
def reference(q, k, v, causal: bool, scale: float):
    """fp32 attention: (out [B, Sq, Hq, D], lse [B, Hq, Sq]); rows that see no key give 0 / -inf."""
    import torch

    batch, seqlen_q, heads_q, _ = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    qf = q.float().transpose(1, 2)
    kf = k.float().transpose(1, 2).repeat_interleave(group, dim=1)
    vf = v.float().transpose(1, 2).repeat_interleave(group, dim=1)
    out = torch.empty(batch, heads_q, seqlen_q, q.shape[3], device=q.device)
    lse = torch.empty(batch, heads_q, seqlen_q, device=q.device)
    rows = torch.arange(seqlen_q, device=q.device)[:, None]
    cols = torch.arange(seqlen_k, device=q.device)[None, :]
    hidden = cols > rows + (seqlen_k - seqlen_q)
    for h in range(heads_q):  # one head at a time keeps the 4096 x 4096 scores small
        s = (qf[:, h] @ kf[:, h].transpose(-1, -2)) * scale
        if causal:
            s = s.masked_fill(hidden, -math.inf)
        lse[:, h] = torch.logsumexp(s, dim=-1)
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
        out[:, h] = p @ vf[:, h]
    return out.transpose(1, 2), lse


def compare(out, lse, ref_out, ref_lse) -> tuple[bool, float, str]:
    import torch

    if not torch.isfinite(out).all():
        bad = (~torch.isfinite(out)).sum().item()
        return False, math.nan, f"{bad}/{out.numel()} outputs NaN/inf (unwritten?)"
    err = ((out.double() - ref_out.double()).norm() / ref_out.double().norm().clamp_min(1e-30)).item()
    if ref_out.abs().max() == 0:  # every row masked: the output must be exactly zero
        err = out.abs().max().item()
    if not err <= 1e-2:
        return False, err, f"rel_err {err:.2e}"
    if lse is not None:
        finite = torch.isfinite(ref_lse)
        if not torch.equal(torch.isfinite(lse), finite) or (lse[~finite] > 0).any():
            return False, err, "lse finite/-inf pattern differs"
        if finite.any():
            lse_err = (lse[finite] - ref_lse[finite]).abs().max().item()
            if not lse_err <= 1e-2:
                return False, err, f"lse max abs err {lse_err:.2e}"
    return True, err, ""


def sweep_cases(rung: str):
    module = __import__(f"kernels.{rung}", fromlist=["HEAD_DIMS"])
    for d in module.HEAD_DIMS:
        for sq, sk in itertools.product(SEQLENS, SEQLENS):
            for causal in (False, True):
                yield AttentionProblem(1, sq, sk, 2, 2, d, causal=causal), 20.0 if sk == 1000 else 1.0
        for sq, sk in ((65, 1000), (1000, 65), (257, 257), (4096, 4096)):
            for causal in (False, True):
                yield AttentionProblem(3, sq, sk, 8, 2, d, causal=causal), 1.0
        yield AttentionProblem(2, 333, 777, 4, 1, d, causal=True, scale=0.3), 20.0


def make_qkv(problem, seed, magnitude):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)

    def draw(seqlen, heads):
        x = torch.randn(problem.batch, seqlen, heads, problem.head_dim, generator=gen, device="cuda")
        return (x * magnitude).to(problem.torch_dtype)

    return draw(problem.seqlen_q, problem.heads_q), draw(problem.seqlen_k, problem.heads_kv), \
        draw(problem.seqlen_k, problem.heads_kv)


CURRENT_CASE = ["(starting)"]


def start_watchdog(seconds: float) -> None:
    """A hung kernel blocks in cudaDeviceSynchronize forever: say where, then exit."""
    def fire():
        print(f"TIMEOUT after {seconds:.0f} s while running: {CURRENT_CASE[0]}", flush=True)
        os._exit(3)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def run_sweep(rungs, stop_after: int) -> bool:
    import torch

    failures = 0
    for rung in rungs:
        module = __import__(f"kernels.{rung}", fromlist=["run_kernel"])
        counts = {"ok": 0, "fail": 0}
        worst = 0.0
        for problem, magnitude in sweep_cases(rung):
            label = problem.label() + (f" scale={problem.scale}" if problem.scale else "") + \
                (f" x{magnitude:g}" if magnitude != 1 else "")
            CURRENT_CASE[0] = f"{rung} {label}"
            try:
                compiled = module.compile_kernel(problem)
                q, k, v = make_qkv(problem, zlib.crc32(label.encode()), magnitude)
                ref_out, ref_lse = reference(q, k, v, problem.causal, problem.softmax_scale)
                runs = []
                for with_lse in (True, True, False):
                    out = torch.full_like(q, math.nan)
                    lse = torch.full((problem.batch, problem.heads_q, problem.seqlen_q), math.nan,
                                     device="cuda") if with_lse else None
                    module.run_kernel(compiled, q, k, v, out, lse)
                    torch.cuda.synchronize()
                    runs.append((out, lse))
                ok, err, why = compare(runs[0][0].float(), runs[0][1], ref_out, ref_lse)
                if ok and not (torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])):
                    ok, why = False, "second run not bit-identical (race?)"
                if ok:
                    ok, _, why = compare(runs[2][0].float(), None, ref_out, ref_lse)
                    why = why and "variant without LSE: " + why
            except Exception as exc:  # report and continue: one round of GPU time must say it all
                ok, err, why = False, math.nan, f"{type(exc).__name__}: {exc}"
                if "CUDA" in str(exc) or "cuda" in type(exc).__name__.lower():
                    # A sticky device error: every later launch in this process fails too.
                    print(f"FAIL {rung} {label}: {why}\nstopping {rung}: the CUDA context is lost",
                          flush=True)
                    return False
            counts["ok" if ok else "fail"] += 1
            if ok:
                worst = max(worst, err)
            else:
                failures += 1
                print(f"FAIL {rung} {label}: {why}", flush=True)
                if failures >= stop_after:
                    print(f"stopping after {failures} failures", flush=True)
                    return False
        print(f"{rung}: {counts['ok']} passed, {counts['fail']} failed, worst passing rel_err "
              f"{worst:.2e}", flush=True)
    return failures == 0


# =========================================================================================
# GPU: timing
# =========================================================================================
def time_ms(fn, warmup: int = 5, reps: int = 30) -> float:
    import torch

    for _ in range(warmup):
        fn()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    return times[len(times) // 2]


def sdpa_flash(problem):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def launch(q, k, v, out):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            o = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=problem.causal)
        out.copy_(o.transpose(1, 2))

    return launch


def run_bench(rungs) -> bool:
    import torch

    rows = []
    ok = True
    big = [AttentionProblem(1, 16384, 16384, 16, 16, 128, causal=c) for c in (False, True)]
    small = [AttentionProblem(1, 4096, 4096, 16, 16, d, causal=c) for d in (64, 128) for c in (False, True)]
    plan = [("k4", p) for p in big if "k4" in rungs] + [("sdpa-flash (FA2)", p) for p in big]
    for p in small:
        plan += [(r, p) for r in ("k2", "k3", "k4") if r in rungs or r == "k2"]
    for name, problem in plan:
        CURRENT_CASE[0] = f"bench {name} {problem.label()}"
        q, k, v = make_qkv(problem, 0, 1.0)
        out = torch.empty_like(q)
        try:
            if name.startswith("sdpa"):
                launch = sdpa_flash(problem)
                fn = lambda: launch(q, k, v, out)  # noqa: E731
            else:
                module = __import__(f"kernels.{name}", fromlist=["run_kernel"])
                compiled = module.compile_kernel(problem)
                fn = lambda: module.run_kernel(compiled, q, k, v, out)  # noqa: E731
            ms = time_ms(fn)
            tflops = problem.flops() / ms / 1e9
            rows.append((name, problem.label(), f"{ms:9.3f}", f"{tflops:7.1f}"))
        except Exception as exc:
            rows.append((name, problem.label(), "-", f"{type(exc).__name__}: {exc}"[:60]))
            if name in rungs:
                ok = False
        print(f"{rows[-1][0]:18} {rows[-1][1]:28} {rows[-1][2]:>9} ms {rows[-1][3]:>8} TFLOP/s", flush=True)
    targets = {False: 350.0, True: 300.0}
    for name, label, _, tflops in rows:
        if name == "k4" and "16384" in label:
            causal = "causal" in label
            try:
                value = float(tflops)
            except ValueError:
                continue
            verdict = "meets" if value >= targets[causal] else "BELOW"
            print(f"k4 {label}: {value:.1f} TFLOP/s {verdict} the {targets[causal]:.0f} TFLOP/s target")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rungs", default=",".join(RUNGS), help="comma-separated, default k3,k4")
    parser.add_argument("--inspect", action="store_true", help="CPU only: compile for sm_90a, check SASS")
    parser.add_argument("--skip-bench", action="store_true")
    parser.add_argument("--stop-after", type=int, default=25, help="stop the sweep after N failures")
    parser.add_argument("--timeout", type=float, default=420.0, help="seconds per subprocess")
    parser.add_argument("--worker", choices=("sweep", "bench"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rungs = tuple(r for r in args.rungs.split(",") if r)
    unknown = [r for r in rungs if r not in RUNGS]
    if unknown:
        parser.error(f"unknown rungs {unknown}; choose from {list(RUNGS)}")

    if args.inspect:
        return 0 if run_inspect(rungs) else 1

    if args.worker:
        start_watchdog(args.timeout)
        ok = run_sweep(rungs, args.stop_after) if args.worker == "sweep" else run_bench(rungs)
        return 0 if ok else 1

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: run with --inspect for the CPU checks", file=sys.stderr)
        return 2
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    parts = [("sweep", (rung,)) for rung in rungs] + ([] if args.skip_bench else [("bench", rungs)])
    results = []
    for worker, part_rungs in parts:
        cmd = [sys.executable, __file__, "--worker", worker, "--rungs", ",".join(part_rungs),
               "--stop-after", str(args.stop_after), "--timeout", str(args.timeout)]
        start = time.perf_counter()
        rc = subprocess.run(cmd, cwd=ROOT).returncode
        results.append((f"{worker} {','.join(part_rungs)}", rc, time.perf_counter() - start))
    print("\nsummary")
    for part, rc, seconds in results:
        status = {0: "pass", 1: "FAIL", 3: "TIMEOUT (hang?)"}.get(rc, f"CRASH (exit {rc})")
        print(f"  {part:16} {status:16} {seconds:6.0f} s")
    ok = all(rc == 0 for _, rc, _ in results)
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
