"""FP8 (E4M3) attention inputs: a tensor of e4m3 values with its per-tensor descale.

An ``e4m3`` problem's q, k and v are :class:`Fp8Tensor`: ``data`` (``torch.float8_e4m3fn``)
times ``descale`` (a positive float) is the tensor they stand for. :func:`quantize_e4m3` makes
one from any floating tensor with per-tensor amax scaling: the largest magnitude maps to 448,
E4M3's largest finite value, so the whole range of the format is used and nothing saturates.

The reference and the checks work on :func:`dequantize` d values (``data.float() * descale``),
i.e. on exactly the numbers the FP8 kernel is given: what they measure is the kernel's own error
(chiefly P rounded to e4m3 for the P V GEMM), not the error of quantizing the inputs, which is a
property of the format and of the data (``docs/worklog/k12.md`` measures both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

E4M3_MAX = 448.0  # largest finite float8_e4m3fn


@dataclass(frozen=True)
class Fp8Tensor:
    """``data * descale``: e4m3 values and the one fp32 factor that scales them back."""

    data: torch.Tensor
    descale: float

    def __post_init__(self):
        if not isinstance(self.data, torch.Tensor) or self.data.dtype != torch.float8_e4m3fn:
            got = self.data.dtype if isinstance(self.data, torch.Tensor) else type(self.data).__name__
            raise TypeError(f"Fp8Tensor data must be a torch.float8_e4m3fn tensor, got {got}")
        if isinstance(self.descale, bool) or not isinstance(self.descale, (int, float)) \
                or not (math.isfinite(self.descale) and self.descale > 0):
            raise ValueError(f"Fp8Tensor descale must be a positive finite number, got {self.descale!r}")

    @property
    def shape(self) -> torch.Size:
        return self.data.shape

    @property
    def device(self) -> torch.device:
        return self.data.device

    def dequantize(self) -> torch.Tensor:
        """The fp32 values the tensor stands for."""
        return self.data.float() * self.descale


def quantize_e4m3(x: torch.Tensor) -> Fp8Tensor:
    """Per-tensor amax scaling: ``descale = amax / 448``, ``data = x / descale`` rounded to e4m3
    (round to nearest even). An all-zero tensor gets descale 1."""
    x32 = x.float()
    amax = float(x32.abs().max()) if x32.numel() else 0.0
    if not math.isfinite(amax):
        raise ValueError("quantize_e4m3: the tensor has NaN or inf entries")
    descale = amax / E4M3_MAX if amax > 0 else 1.0
    data = (x32 / descale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return Fp8Tensor(data, descale)


def dequantize(t):
    """``t.dequantize()`` for an :class:`Fp8Tensor`, anything else unchanged."""
    return t.dequantize() if isinstance(t, Fp8Tensor) else t


def storage(t) -> torch.Tensor:
    """The tensor that holds ``t``'s values in memory (``data`` of an :class:`Fp8Tensor`)."""
    return t.data if isinstance(t, Fp8Tensor) else t
