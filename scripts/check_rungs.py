"""GPU correctness sweep and rough timing for the first rungs (K1, K2).

    python scripts/check_rungs.py                 # k1 and k2, full sweep + timing
    python scripts/check_rungs.py --rungs k2 --no-timing

For each rung, head_dim {64, 128}, causal {no, yes}, seqlen_q x seqlen_k in {1, 63, 64, 65, 1000}^2,
batch 3, GQA 16:4 heads, inputs scaled x1 and x20 (x20 makes every softmax row nearly one-hot
and stresses the running max), plus a few fp16 shapes, in two memory layouts:

- ``plain``: fresh BSHD tensors, no LSE;
- ``guarded``: each of q, k, v, out, lse sits at the start of a larger buffer whose tail is NaN
  (a read past the end of k/v turns outputs into NaN, a write past the end of out or lse
  overwrites the guard), with LSE.

Each case: output and LSE are NaN-poisoned before the run; the output is compared with an fp32
torch reference written here (relative Frobenius error <= 1e-2), rows that see no key must be
exactly zero with LSE -inf, the NaN guard rows of ``out`` must be untouched, and a second run
must be bit-identical. Then the input validation of ``run_kernel`` is exercised, and one big
shape is timed. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import math
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernels.cute import launch  # noqa: E402
from kernels.harness.problem import AttentionProblem  # noqa: E402

SEQLENS = (1, 63, 64, 65, 1000)
HEAD_DIMS = (64, 128)
BATCH, HEADS_Q, HEADS_KV = 3, 16, 4
INPUT_SCALES = (1.0, 20.0)
LAYOUTS = ("plain", "guarded")
FP16_SEQLENS = ((65, 1000), (1000, 65), (1000, 1000))  # fp16: a few shapes, x1 inputs
GUARD_ELEMS = 4096  # NaN elements after each tensor of the guarded layout
REL_TOL = 1e-2
LSE_TOL = 1e-3  # relative to max(1, |lse|)


# ---- reference ---------------------------------------------------------------------------------
def reference(q, k, v, causal: bool, scale: float):
    """fp32 attention: (out [B, Sq, Hq, D], lse [B, Hq, Sq]); rows that see no key give 0, -inf."""
    qf, kf, vf = (t.float() for t in (q, k, v))
    group = q.shape[2] // k.shape[2]
    kf = kf.repeat_interleave(group, dim=2)
    vf = vf.repeat_interleave(group, dim=2)
    scores = torch.einsum("bihd,bjhd->bhij", qf, kf) * scale
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    if causal:
        rows = torch.arange(seqlen_q, device=q.device)[:, None]
        cols = torch.arange(seqlen_k, device=q.device)[None, :]
        scores = scores.masked_fill(cols > rows + (seqlen_k - seqlen_q), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # -inf for rows without keys
    probs = torch.exp(scores - lse[..., None])
    probs = torch.where(torch.isfinite(lse)[..., None], probs, torch.zeros_like(probs))
    out = torch.einsum("bhij,bjhd->bihd", probs, vf)
    return out, lse


# ---- inputs ------------------------------------------------------------------------------------
def guarded(shape, dtype, device):
    """A contiguous tensor at the start of a NaN-filled buffer GUARD_ELEMS longer; and the guard."""
    numel = math.prod(shape)
    storage = torch.full((numel + GUARD_ELEMS,), float("nan"), dtype=dtype, device=device)
    return storage[:numel].view(shape), storage[numel:]


def make_case(problem: AttentionProblem, input_scale: float, layout: str, seed: int):
    """(q, k, v, out, lse or None, guards: dict name -> guard tensor)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dtype, dev = problem.torch_dtype, "cuda"
    q_shape = (problem.batch, problem.seqlen_q, problem.heads_q, problem.head_dim)
    kv_shape = (problem.batch, problem.seqlen_k, problem.heads_kv, problem.head_dim)
    lse_shape = (problem.batch, problem.heads_q, problem.seqlen_q)

    def rand(shape):
        return (torch.randn(shape, generator=gen, device=dev) * input_scale).to(dtype)

    if layout == "plain":
        q, k, v = rand(q_shape), rand(kv_shape), rand(kv_shape)
        return q, k, v, torch.empty(q_shape, dtype=dtype, device=dev), None, {}
    tensors, guards = [], {}
    for name, shape in (("q", q_shape), ("k", kv_shape), ("v", kv_shape)):
        view, guards[name] = guarded(shape, dtype, dev)
        view.copy_(rand(shape))
        tensors.append(view)
    out, guards["out"] = guarded(q_shape, dtype, dev)
    lse, guards["lse"] = guarded(lse_shape, torch.float32, dev)
    return (*tensors, out, lse, guards)


# ---- one case ----------------------------------------------------------------------------------
def describe_worst(out, ref):
    err = (out.float() - ref).abs()
    flat = int(torch.argmax(torch.nan_to_num(err, nan=float("inf"))))
    b, i, h, d = torch.unravel_index(torch.tensor(flat), err.shape)
    return (f"worst at (b={int(b)}, row={int(i)}, h={int(h)}, d={int(d)}): got {out[b, i, h, d].item():.4g}, "
            f"want {ref[b, i, h, d].item():.4g}")


def check_case(mod, problem, input_scale, layout, seed):
    """Returns (rel_err, lse_err, problems: list[str])."""
    compiled = mod.compile_kernel(problem)
    q, k, v, out, lse, guards = make_case(problem, input_scale, layout, seed)
    ref_out, ref_lse = reference(q, k, v, problem.causal, problem.softmax_scale)
    issues = []

    out.fill_(float("nan"))
    if lse is not None:
        lse.fill_(float("nan"))
    mod.run_kernel(compiled, q, k, v, out, lse)
    torch.cuda.synchronize()

    nan_rows = torch.isnan(out).any(dim=-1)  # [B, Sq, Hq]
    if nan_rows.any():
        b, i, h = (int(x) for x in nan_rows.nonzero()[0])
        issues.append(f"NaN in out at {int(nan_rows.sum())} (b,row,h) rows, first (b={b}, row={i}, h={h})")
    diff = torch.nan_to_num(out.float() - ref_out, nan=1e30)
    rel_err = (diff.norm() / ref_out.norm().clamp_min(1e-30)).item()
    if not rel_err <= REL_TOL:
        issues.append(f"rel_err {rel_err:.3g} > {REL_TOL}; {describe_worst(out, ref_out)}")

    unseen = ~torch.isfinite(ref_lse).transpose(1, 2)  # [B, Sq, Hq] rows that see no key
    if unseen.any() and not (out[unseen] == 0).all():
        issues.append(f"rows that see no key are not zero ({int(unseen.sum())} rows)")
    for name, guard in guards.items():
        if not torch.isnan(guard).all():
            issues.append(f"wrote past the end of {name}: {int((~torch.isnan(guard)).sum())} guard elements changed")

    lse_err = float("nan")
    if lse is not None:
        finite = torch.isfinite(ref_lse)
        if torch.isnan(lse).any():
            issues.append(f"NaN in lse ({int(torch.isnan(lse).sum())} entries)")
        if not (lse[~finite] == float("-inf")).all():
            issues.append("lse of rows that see no key is not -inf")
        if finite.any():
            lse_diff = (lse[finite] - ref_lse[finite]).abs() / ref_lse[finite].abs().clamp_min(1.0)
            lse_err = torch.nan_to_num(lse_diff, nan=1e30).max().item()
            if not lse_err <= LSE_TOL:
                issues.append(f"lse rel err {lse_err:.3g} > {LSE_TOL}")

    first_out = out.clone()
    first_lse = lse.clone() if lse is not None else None
    out.fill_(float("nan"))
    mod.run_kernel(compiled, q, k, v, out, lse)
    torch.cuda.synchronize()
    if not torch.equal(torch.nan_to_num(first_out, nan=7.0), torch.nan_to_num(out, nan=7.0)):
        issues.append("second run differs from the first (not bit-identical)")
    if lse is not None and not torch.equal(torch.nan_to_num(first_lse, nan=7.0), torch.nan_to_num(lse, nan=7.0)):
        issues.append("second run's lse differs from the first")
    return rel_err, lse_err, issues


# ---- validation --------------------------------------------------------------------------------
def check_validation(mod):
    """run_kernel must reject bad inputs with TypeError / ValueError. Returns list of failures."""
    problem = AttentionProblem(batch=1, seqlen_q=8, seqlen_k=8, heads_q=2, heads_kv=1, head_dim=64)
    compiled = mod.compile_kernel(problem)

    def good():
        q = torch.randn(1, 8, 2, 64, device="cuda").bfloat16()
        k = torch.randn(1, 8, 1, 64, device="cuda").bfloat16()
        return q, k, k.clone(), torch.empty_like(q)

    q, k, v, out = good()
    bad_cases = {
        "fp32 q": (TypeError, lambda: mod.run_kernel(compiled, q.float(), k, v, out)),
        "cpu q": (ValueError, lambda: mod.run_kernel(compiled, q.cpu(), k, v, out)),
        "3-D q": (ValueError, lambda: mod.run_kernel(compiled, q[0], k, v, out)),
        "head_dim 128 vs compiled 64": (ValueError, lambda: mod.run_kernel(
            compiled, *(torch.randn(1, 8, h, 128, device="cuda").bfloat16() for h in (2, 1, 1, 2)))),
        "non-contiguous last dim": (ValueError, lambda: mod.run_kernel(
            compiled, torch.randn(1, 8, 2, 128, device="cuda").bfloat16()[..., ::2], k, v, out)),
        "heads_q % heads_kv": (ValueError, lambda: mod.run_kernel(
            compiled, torch.randn(1, 8, 3, 64, device="cuda").bfloat16(),
            torch.randn(1, 8, 2, 64, device="cuda").bfloat16(),
            torch.randn(1, 8, 2, 64, device="cuda").bfloat16(),
            torch.empty(1, 8, 3, 64, device="cuda").bfloat16())),
        "out shape": (ValueError, lambda: mod.run_kernel(compiled, q, k, v, out[:, :4])),
        "strided q (repository contract: contiguous)": (ValueError, lambda: mod.run_kernel(
            compiled, torch.randn(1, 8, 4, 64, device="cuda").bfloat16()[:, :, :2], k, v, out)),
        "lse fp16": ((TypeError, ValueError), lambda: mod.run_kernel(
            compiled, q, k, v, out, torch.empty(1, 2, 8, device="cuda", dtype=torch.float16))),
        "lse shape": (ValueError, lambda: mod.run_kernel(
            compiled, q, k, v, out, torch.empty(1, 8, 2, device="cuda"))),
        "misaligned q": (ValueError, lambda: mod.run_kernel(
            compiled, torch.randn(1 * 8 * 2 * 64 + 1, device="cuda").bfloat16()[1:].view(1, 8, 2, 64), k, v, out)),
    }
    failures = []
    for name, (exc, call) in bad_cases.items():
        try:
            call()
        except exc:
            continue
        except Exception as e:  # noqa: BLE001 -- report the wrong exception type
            failures.append(f"{name}: raised {type(e).__name__}: {e} (want {exc})")
            continue
        failures.append(f"{name}: accepted (want {exc})")
    return failures


# ---- timing ------------------------------------------------------------------------------------
BIG = AttentionProblem(batch=4, seqlen_q=4096, seqlen_k=4096, heads_q=16, heads_kv=16, head_dim=128)


def big_inputs(causal: bool):
    """Inputs and fp32 reference output for the timing shape (checked before timing)."""
    problem = BIG.with_(causal=causal)
    q, k, v, out, _, _ = make_case(problem, 1.0, "plain", seed=0)
    ref_out, _ = reference(q, k, v, causal, problem.softmax_scale)
    return problem, (q, k, v, out), ref_out


def time_big(mod, problem, tensors, ref_out, reps: int):
    """(median ms, TFLOP/s, rel_err); the output is checked before anything is timed."""
    q, k, v, out = tensors
    compiled = mod.compile_kernel(problem)
    out.fill_(float("nan"))
    mod.run_kernel(compiled, q, k, v, out)
    torch.cuda.synchronize()
    rel_err = (torch.nan_to_num(out.float() - ref_out, nan=1e30).norm() / ref_out.norm()).item()
    if not rel_err <= REL_TOL:
        return float("nan"), float("nan"), rel_err
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        mod.run_kernel(compiled, q, k, v, out)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    ms = sorted(times)[len(times) // 2]
    return ms, problem.flops() / ms / 1e9, rel_err


# ---- main --------------------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rungs", nargs="+", default=["k1", "k2"])
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--quick", action="store_true", help="seqlens {1, 65, 1000} only, x1 inputs")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("check_rungs: needs a CUDA GPU")
        return 2
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}")
    seqlens = (1, 65, 1000) if args.quick else SEQLENS
    scales = (1.0,) if args.quick else INPUT_SCALES
    failed = False
    failures_shown = 0

    for rung in args.rungs:
        mod = importlib.import_module(f"kernels.{rung}")
        print(f"\n== {rung}: {mod.IDEA}")
        print(f"{'D':>4} {'causal':>6} {'cases':>6} {'pass':>5} {'worst rel_err':>14} {'worst lse err':>14}  status")
        for head_dim, causal in itertools.product(HEAD_DIMS, (False, True)):
            n_cases = n_pass = 0
            worst_rel = worst_lse = 0.0
            cases = [("bf16", sq, sk, scale, layout) for (sq, sk), scale, layout in itertools.product(
                itertools.product(seqlens, seqlens), scales, LAYOUTS)]
            if "fp16" in mod.DTYPES:
                cases += [("fp16", sq, sk, 1.0, layout) for (sq, sk), layout in itertools.product(
                    FP16_SEQLENS, LAYOUTS)]
            for dtype, sq, sk, scale, layout in cases:
                problem = AttentionProblem(batch=BATCH, seqlen_q=sq, seqlen_k=sk, heads_q=HEADS_Q,
                                           heads_kv=HEADS_KV, head_dim=head_dim, causal=causal, dtype=dtype)
                n_cases += 1
                label = f"{rung} {problem.label()} x{scale:g} {layout}"
                try:
                    rel_err, lse_err, issues = check_case(mod, problem, scale, layout, seed=n_cases)
                except Exception as e:  # noqa: BLE001 -- a crash is a reported failure, not an abort
                    rel_err, lse_err = float("nan"), float("nan")
                    issues = [f"raised {type(e).__name__}: {e}"]
                    if failures_shown < 3:
                        traceback.print_exc()
                worst_rel = max(worst_rel, rel_err) if not math.isnan(rel_err) else float("nan")
                if not math.isnan(lse_err):
                    worst_lse = max(worst_lse, lse_err)
                if issues:
                    failed = True
                    if failures_shown < 40:
                        print(f"   FAIL {label}: " + "; ".join(issues))
                    failures_shown += 1
                else:
                    n_pass += 1
            status = "ok" if n_pass == n_cases else "FAIL"
            print(f"{head_dim:>4} {str(causal):>6} {n_cases:>6} {n_pass:>5} {worst_rel:>14.3e} {worst_lse:>14.3e}  {status}")

        bad = check_validation(mod)
        print(f"   input validation: {'ok' if not bad else 'FAIL'}")
        for line in bad:
            print(f"      {line}")
        failed |= bool(bad)

    print("\ncompile seconds per variant (this process):")
    for key, seconds in sorted(launch.COMPILE_SECONDS.items(), key=lambda kv: str(kv[0])):
        print(f"   {key.rung} d{key.head_dim} causal={key.causal} {key.dtype} lse={key.has_lse}: {seconds:.1f}s")

    if not args.no_timing:
        print(f"\ntiming {BIG.label()} (median; output checked first):")
        for causal in (False, True):
            problem, tensors, ref_out = big_inputs(causal)
            for rung in args.rungs:
                mod = importlib.import_module(f"kernels.{rung}")
                try:
                    ms, tflops, rel_err = time_big(mod, problem, tensors, ref_out, reps=3 if rung == "k1" else 10)
                except Exception as e:  # noqa: BLE001
                    failed = True
                    print(f"   {rung} causal={causal}: FAIL raised {type(e).__name__}: {e}")
                    continue
                if math.isnan(ms):
                    failed = True
                    print(f"   {rung} causal={causal}: FAIL rel_err {rel_err:.3e}, not timed")
                else:
                    print(f"   {rung} causal={causal}: {ms:9.2f} ms  {tflops:7.2f} TFLOP/s  rel_err {rel_err:.2e}")
            del tensors, ref_out
            torch.cuda.empty_cache()

    print("\nRESULT:", "FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
