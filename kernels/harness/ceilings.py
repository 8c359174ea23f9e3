"""Ceilings measured in the same run as the kernels they judge.

- copy: device-to-device copy of a 2 GiB buffer, bytes read + written per second (TB/s);
- bf16 GEMM: cuBLAS through torch.matmul at 8192^3 on random data (TFLOP/s);
- fp8 GEMM: cuBLASLt through torch._scaled_mm at 8192^3, e4m3, per-tensor scales (TFLOP/s).

And a floor for small memory-bound calls (:func:`streaming_read`): the time of one kernel that
only reads a given number of bytes, replayed from a CUDA graph, the suites' row beside a
decode that reads as many.
"""

from __future__ import annotations

import torch

from .timing import time_cuda


def measure_copy_tbps(nbytes: int = 2 << 30) -> float:
    src = torch.randint(0, 255, (nbytes,), dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = time_cuda(lambda: dst.copy_(src))["median"]
    return 2 * nbytes / (ms * 1e-3) / 1e12


def measure_bf16_gemm_tflops(n: int = 8192) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = time_cuda(lambda: torch.matmul(a, b))["median"]
    return 2 * n**3 / (ms * 1e-3) / 1e12


def measure_fp8_gemm_tflops(n: int = 8192) -> float | None:
    if not hasattr(torch, "_scaled_mm"):
        return None
    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()   # column-major B
    one = torch.ones((), device="cuda")
    fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    ms = time_cuda(fn)["median"]
    return 2 * n**3 / (ms * 1e-3) / 1e12


def measure_ceilings() -> dict:
    ceilings = {"copy_tbps": round(measure_copy_tbps(), 3),
                "bf16_gemm_tflops": round(measure_bf16_gemm_tflops(), 1)}
    fp8 = measure_fp8_gemm_tflops()
    if fp8 is not None:
        ceilings["fp8_gemm_tflops"] = round(fp8, 1)
    torch.cuda.empty_cache()
    return ceilings


# The Triton read kernel's shapes: elements per block, blocks per CTA, warps per CTA.
READ_SHAPES = ((4096, 1, 4), (4096, 4, 8), (8192, 2, 8), (16384, 2, 16))


def streaming_read(nbytes: int, copies: int = 8):
    """One launch that reads ``nbytes`` of bf16 from HBM and nothing else (each CTA sums its
    share into one float), captured in a CUDA graph: the fastest a kernel that must read those
    bytes once can be, launch included, without L2's help (``copies`` buffers, one per call, more
    than L2 holds at decode sizes). Tries :data:`READ_SHAPES` and keeps the fastest.

    Returns ``(replay, calls, check)``: ``replay()`` runs ``calls`` reads (divide a timing by
    ``calls``, :func:`kernels.harness.timing.per_call`); ``check()`` is the largest relative
    difference of a read's CTA sums, added up, from ``torch.sum`` of the same buffer.
    """
    import triton

    from .read_kernel import read_kernel
    from .timing import graph_replay, time_cuda

    n = nbytes // 2
    buffers = [torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    parts = torch.empty(triton.cdiv(n, min(b * i for b, i, _ in READ_SHAPES)), device="cuda")
    best = None
    for block, iters, warps in READ_SHAPES:
        grid = (triton.cdiv(n, block * iters),)

        def read(x, grid=grid, block=block, iters=iters, warps=warps):
            read_kernel[grid](x, parts, n, BLOCK=block, ITERS=iters, num_warps=warps)
            return parts[:grid[0]]

        replay = graph_replay(read, [(x,) for x in buffers])
        ms = time_cuda(replay)["median"]
        if best is None or ms < best[0]:
            best = (ms, replay, read)
    _, replay, read = best

    def check() -> float:
        return max(abs(read(x).sum().item() - x.float().sum().item()) / x.float().abs().sum().item()
                   for x in buffers[:2])

    return replay, copies, check
