"""The fp8 suite: the FP8 GEMM (planner's choice, plus persistent / per-tile variants on the
square shapes) against torch._scaled_mm (cuBLASLt) on the same operands, and quantize against
a torch implementation.

GEMM problems: 4096^3 and 8192^3, then LLM linear shapes: M in {1, 16, 32, 64, 128, 2048,
8192}, N, K in {4096, 11008, 14336}. The square shapes add the persistent / per-tile / mma.sync
variants and the fast-accumulation ones (ours with block_n=256, torch._scaled_mm with
use_fast_accum=True); decode-sized shapes (M <= 128) add the GEMV kernels forced (``-gemv``
for M <= 16, ``-gemv_tma``), the tiled kernel unsplit (``-tiled``) and with forced split-K (2
and 4 slices of K), and ``-graph`` rows: each of those variants and torch._scaled_mm with
every input set's call captured in one CUDA graph and timed per call, so that the host's time
per call (which exceeds these kernels') drops out of the comparison.
Every other row accumulates in fp32.
Block-scaled rows (``fp8_gemm_block_scaled`` against ``torch._scaled_mm-blockwise``, cuBLASLt's
1 x 128 / 128 x 128 scaling) on the square shapes and at M = 2048 on the LLM shapes: operands
quantized per block from values whose rows and columns span 2^-3..2^3, checked against the
float64 product of the dequantized operands.
E4M3 x E4M3, per-tensor scales (but the block-scaled rows), bf16 out. Each row is checked
against a float32 reference of the same fp8 operands (rel_err: relative Frobenius) before it
is timed; inputs rotate when one set fits in L2.
"""

from __future__ import annotations

import itertools

import torch

SQUARE = (4096, 8192)
LLM_M = (1, 16, 32, 64, 128, 2048, 8192)
LLM_NK = (4096, 11008, 14336)
QUANTIZE_SHAPES = ((8192, 8192), (16384, 4096))
TOLERANCE = 1e-2
GRAPH_M = 128  # shapes up to this M also get CUDA-graph rows (kernel time without the host)


BLOCK_SCALED_M = 2048  # the LLM shapes' M for the block-scaled rows (prefill-sized)


def gemm_problems():
    problems = [(n, n, n) for n in SQUARE]
    problems += [(m, n, k) for m, n, k in itertools.product(LLM_M, LLM_NK, LLM_NK)]
    return problems


def block_scaled_problems():
    llm = [(BLOCK_SCALED_M, n, k) for n, k in itertools.product(LLM_NK, LLM_NK)]
    return [(n, n, n) for n in SQUARE] + llm


def _row(kernel, problem, ms, tflops=None, gbps=None, rel_err=None, status="ok", **extra):
    return {"kernel": kernel, "problem": problem, "ms": ms, "tflops": tflops, "gbps": gbps,
            "rel_err": rel_err, "status": status, **extra}


def _rel(out, ref) -> float:
    return float((out.float() - ref).norm() / ref.norm().clamp_min(1e-30))


def _gemm_rows(ctx, m, n, k) -> list[dict]:
    from kernels.extension.ops import fp8 as fp8_ops
    from kernels.harness.timing import rotation_count

    problem = {"m": m, "n": n, "k": k, "a": "e4m3", "b": "e4m3", "out": "bf16"}
    flops = 2.0 * m * n * k
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    sets = rotation_count(m * k + n * k + 2 * m * n)

    def operands():
        a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
        return a, b

    arg_sets = [operands() for _ in range(sets)]
    scale_a = torch.tensor(0.5, device="cuda")
    scale_b = torch.tensor(0.25, device="cuda")
    a0, b0 = arg_sets[0]
    ref = (a0.float() @ b0.float().t()) * 0.125

    variants = [("fp8_gemm", {})]
    if m == n == k:
        variants += [("fp8_gemm-persistent", {"persistent": 1}),
                     ("fp8_gemm-per-tile", {"persistent": 0}),
                     ("fp8_gemm-mma_sync", {"path": 1}),
                     ("fp8_gemm-bn256-fast_accum", {"path": 0, "block_n": 256})]
    elif m <= GRAPH_M:
        # beside the planner's pick: each GEMV kernel where it runs, the tiled kernel unsplit and split
        if m <= 16:
            variants += [("fp8_gemm-gemv", {"path": 2})]
        variants += [("fp8_gemm-gemv_tma", {"path": 3}), ("fp8_gemm-tiled", {"split_k": 1}),
                     ("fp8_gemm-split_k2", {"split_k": 2}), ("fp8_gemm-split_k4", {"split_k": 4})]
    if torch.cuda.get_device_capability() != (9, 0):  # the WGMMA and swap-AB GEMV paths are sm_90a only
        variants = [(name, kwargs) for name, kwargs in variants if kwargs.get("path") not in (0, 3)]
    rows, timed = [], {}  # timed: name -> (row, fn), the checked rows, timed together below
    for name, kwargs in variants:
        if not fp8_ops.is_available():
            rows.append(_row(name, problem, None, status="unsupported: fp8 module not built"))
            break
        plan = fp8_ops.gemm_plan(m, n, k, kwargs.get("path", -1), kwargs.get("block_n", 0),
                                 kwargs.get("persistent", -1), kwargs.get("split_k", 0))

        def ours(a, b, kwargs=kwargs):
            return torch.ops.kernels.fp8_gemm(a, b, scale_a, scale_b, **kwargs)

        rel = _rel(ours(a0, b0), ref)
        if not rel <= TOLERANCE:
            rows.append(_row(name, problem, None, rel_err=rel, status=f"wrong: rel_err {rel:.3g}", plan=plan))
            continue
        rows.append(_row(name, problem, None, rel_err=rel, plan=plan))
        timed[name] = (rows[-1], ours)

    peers = [("torch._scaled_mm", False)]
    if m == n == k:
        peers.append(("torch._scaled_mm-fast_accum", True))
    for peer_name, fast in peers:
        def scaled_mm(a, b, fast=fast):
            return torch._scaled_mm(a, b.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16,
                                    use_fast_accum=fast)

        try:
            rel = _rel(scaled_mm(a0, b0), ref)
        except (RuntimeError, ValueError) as exc:
            rows.append(_row(peer_name, problem, None, status=f"unsupported: {str(exc).splitlines()[0]}"))
            continue
        status = "ok" if rel <= TOLERANCE else f"wrong: rel_err {rel:.3g}"  # a peer's row is timed anyway
        rows.append(_row(peer_name, problem, None, rel_err=rel, status=status))
        timed[peer_name] = (rows[-1], scaled_mm)
    _time_rows(ctx, timed, arg_sets, flops)
    if m <= GRAPH_M and fp8_ops.is_available():
        rows += _graph_rows(ctx, problem, flops, arg_sets, ref, scale_a, scale_b, variants)
    return rows


def _block_scaled_rows(ctx, m, n, k) -> list[dict]:
    from kernels.extension.backend import fp8 as fp8_strategy
    from kernels.extension.ops import fp8 as fp8_ops
    from kernels.harness.timing import rotation_count

    problem = {"m": m, "n": n, "k": k, "a": "e4m3", "b": "e4m3", "out": "bf16",
               "scaling": "block 1x128 / 128x128"}
    flops = 2.0 * m * n * k
    gen = torch.Generator(device="cuda").manual_seed(m * 5 + n * 3 + k)

    def operands():
        x = torch.randn(m, k, device="cuda", generator=gen) * torch.exp2(
            torch.randint(-3, 4, (m, 1), device="cuda", generator=gen).float())
        w = torch.randn(n, k, device="cuda", generator=gen) * torch.exp2(
            torch.randint(-3, 4, (1, k), device="cuda", generator=gen).float())
        return (*fp8_strategy.quantize_activation_blocks(x), *fp8_strategy.quantize_weight_blocks(w))

    arg_sets = [operands() for _ in range(rotation_count(m * k + n * k + 2 * m * n))]
    ref = fp8_strategy.block_scaled_reference(*arg_sets[0]).float()

    def ours(a, sa, b, sb):
        return torch.ops.kernels.fp8_gemm_block_scaled(a, b, sa, sb)

    def cublaslt(a, sa, b, sb):  # scales as views: A's [M, K / 128], B's [K / 128, N / 128], outer dim first
        return torch._scaled_mm(a, b.t(), scale_a=sa.t(), scale_b=sb.t(), out_dtype=torch.bfloat16)

    rows, timed = [], {}
    for name, fn in (("fp8_gemm_block_scaled", ours), ("torch._scaled_mm-blockwise", cublaslt)):
        if fn is ours and not fp8_ops.is_available():
            rows.append(_row(name, problem, None, status="unsupported: fp8 module not built"))
            continue
        try:
            rel = _rel(fn(*arg_sets[0]), ref)
        except (RuntimeError, ValueError, NotImplementedError) as exc:
            rows.append(_row(name, problem, None, status=f"unsupported: {str(exc).splitlines()[0][:200]}"))
            continue
        if not rel <= TOLERANCE:
            rows.append(_row(name, problem, None, rel_err=rel, status=f"wrong: rel_err {rel:.3g}"))
            continue
        rows.append(_row(name, problem, None, rel_err=rel))
        timed[name] = (rows[-1], fn)
    _time_rows(ctx, timed, arg_sets, flops)
    return rows


def _time_rows(ctx, timed: dict, arg_sets, flops, calls_per_launch: int = 1) -> None:
    """Fill in the times of ``timed`` {name: (row, fn)}: every ``fn`` cycles through ``arg_sets``,
    all timed together (``ctx.time_together``: interleaved rounds, so that ours and torch's meet
    the GPU's clocks alike); ``calls_per_launch``: GEMMs per ``fn`` call."""
    from kernels.harness.timing import per_call

    times = ctx.time_together({name: (fn, arg_sets) for name, (_, fn) in timed.items()})
    for name, (row, _) in timed.items():
        ms = per_call(times[name], calls_per_launch)
        row.update(ms=ms, tflops=flops / (ms["median"] * 1e-3) / 1e12)


def _graph_rows(ctx, problem, flops, arg_sets, ref, scale_a, scale_b, variants) -> list[dict]:
    """Decode-sized shapes again, every input set's call in one CUDA graph, timed per call: what
    the kernels cost without the host (a call's Python and dispatch outlast these kernels), for
    each of our variants (the split-K rows are what a split-K model would be fitted to) and
    torch._scaled_mm."""
    from kernels.harness.timing import graph_replay

    calls = [(f"{name}-graph", lambda a, b, kwargs=kwargs: torch.ops.kernels.fp8_gemm(a, b, scale_a, scale_b,
                                                                                      **kwargs))
             for name, kwargs in variants]
    calls.append(("torch._scaled_mm-graph", lambda a, b: torch._scaled_mm(
        a, b.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)))
    rows, timed = [], {}
    for name, fn in calls:
        try:
            replay = graph_replay(fn, arg_sets)  # returns arg_sets[0]'s output
            rel = _rel(replay(), ref)
        except RuntimeError as exc:  # a call that cannot be captured becomes its row
            reason = str(exc).splitlines()[0]
            rows.append(_row(name, problem, None, status=f"unsupported: not capturable: {reason}"))
            continue
        if not rel <= TOLERANCE:  # recorded, not timed
            rows.append(_row(name, problem, None, rel_err=rel, status=f"wrong: rel_err {rel:.3g}"))
            continue
        rows.append(_row(name, problem, None, rel_err=rel))
        timed[name] = (rows[-1], replay)
    _time_rows(ctx, timed, ((),), flops, calls_per_launch=len(arg_sets))
    return rows


def _quantize_rows(ctx, rows_, cols) -> list[dict]:
    from kernels.extension.ops import fp8 as fp8_ops

    problem = {"shape": [rows_, cols], "in": "bf16", "out": "e4m3"}
    x = torch.randn(rows_, cols, device="cuda").to(torch.bfloat16)
    scale = torch.tensor(448.0, device="cuda") / x.float().abs().amax()
    ref = (x.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    out_rows = []
    for transpose in (False, True):
        name = "fp8_quantize" + ("+transpose" if transpose else "")
        nbytes = x.numel() * (2 + 1 + (1 if transpose else 0))
        if not fp8_ops.is_available():
            out_rows.append(_row(name, problem, None, status="unsupported: fp8 module not built"))
            continue

        def ours(transpose=transpose):
            return torch.ops.kernels.fp8_quantize(x, scale, torch.float8_e4m3fn, True, transpose)

        out, out_t, amax = ours()
        exact = torch.equal(out.view(torch.uint8), ref.view(torch.uint8))
        ref_t = ref.t().contiguous()
        exact = exact and (not transpose or torch.equal(out_t.view(torch.uint8), ref_t.view(torch.uint8)))
        exact = exact and float(amax) == float(x.float().abs().amax())
        ms = ctx.time(ours) if exact else None
        out_rows.append(_row(name, problem, ms, gbps=nbytes / (ms["median"] * 1e-3) / 1e9 if ms else None,
                             rel_err=0.0 if exact else None,
                             status="ok" if exact else "wrong: differs from torch's rounding"))

    def torch_quantize():
        amax = x.abs().amax().float()
        return (x.float() * scale).clamp(-448, 448).to(torch.float8_e4m3fn), amax

    ms = ctx.time(torch_quantize)
    out_rows.append(_row("torch-quantize", problem, ms,
                         gbps=x.numel() * 3 / (ms["median"] * 1e-3) / 1e9, rel_err=0.0))
    return out_rows


def run(ctx) -> list[dict]:
    todo = gemm_problems()
    block_scaled = block_scaled_problems() if torch.cuda.get_device_capability() == (9, 0) else []
    rows = []
    task = ctx.progress.add_task("fp8", total=len(todo) + len(block_scaled) + len(QUANTIZE_SHAPES))
    for shape in QUANTIZE_SHAPES:
        ctx.progress.update(task, description=f"quantize {shape}")
        rows += _quantize_rows(ctx, *shape)
        ctx.progress.advance(task)
    for m, n, k in todo:
        ctx.progress.update(task, description=f"gemm {m}x{n}x{k}")
        rows += _gemm_rows(ctx, m, n, k)
        torch.cuda.empty_cache()
        ctx.progress.advance(task)
    for m, n, k in block_scaled:
        ctx.progress.update(task, description=f"block-scaled gemm {m}x{n}x{k}")
        rows += _block_scaled_rows(ctx, m, n, k)
        torch.cuda.empty_cache()
        ctx.progress.advance(task)
    return rows
