"""Ceilings measured in the same run as the kernels they judge.

- copy: device-to-device copy of a 2 GiB buffer, bytes read + written per second (TB/s);
- bf16 GEMM: cuBLAS through torch.matmul at 8192^3 on random data (TFLOP/s);
- fp8 GEMM: cuBLASLt through torch._scaled_mm at 8192^3, e4m3, per-tensor scales (TFLOP/s).
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
