"""Stateless wrapper of the rotary CUDA module (csrc/kernels/rotary/rotary.cpp).

Normalises shapes, allocates outputs and calls the binding; raises when the module is not
built. Policy (when to use the kernel, the torch path, autograd) is in
`kernels/extension/backend/rotary.py`.

Shapes: `q [B, S, Hq, D]` or `[T, Hq, D]`; `k` the same with `Hk` heads (or None).
Tables `cos, sin` float32 `[rows, R/2]` (rotary_dim `R = 2 * cos.shape[-1] <= D`):
with `positions` (`[B, S]`, `[S]` broadcast over the batch, or `[T]`) row =
`positions[b, s]`; without, row = `s` for a 2-D table, or per-token tables
`[B, S, R/2]` / `[T, R/2]` given as 3-D (or, for 3-D q, a 2-D table with T rows).
"""

from __future__ import annotations

import torch

from .. import loader

MODULE = "rotary"


def is_available() -> bool:
    return loader.available(MODULE)


def _as_bshd(x: torch.Tensor, name: str) -> torch.Tensor:
    if x.dim() == 4:
        return x
    if x.dim() == 3:
        return x.unsqueeze(0)
    raise ValueError(f"{name} must be [B, S, H, D] or [T, H, D], got shape {tuple(x.shape)}")


def normalize_tables(cos: torch.Tensor, sin: torch.Tensor, positions, batch: int,
                     seqlen: int):
    """-> (cos2d, sin2d, positions [B, S] or None, table_stride_b) as the binding wants them."""
    if cos.shape != sin.shape:
        raise ValueError(f"cos {tuple(cos.shape)} and sin {tuple(sin.shape)} differ")
    if positions is not None:
        if cos.dim() != 2:
            raise ValueError("with positions, cos/sin must be 2-D [rows, rotary_dim / 2]")
        if positions.dim() == 1 and positions.shape[0] == seqlen:
            positions = positions.unsqueeze(0).expand(batch, seqlen)
        elif positions.dim() == 1 and batch == 1:
            positions = positions.unsqueeze(0)
        if positions.shape != (batch, seqlen):
            raise ValueError(f"positions must be [B, S] = [{batch}, {seqlen}] or [S], got "
                             f"{tuple(positions.shape)}")
        return cos, sin, positions, 0
    if cos.dim() == 3:
        if cos.shape[:2] != (batch, seqlen):
            raise ValueError(f"per-token cos/sin must be [B, S, R/2] with B, S = {batch}, "
                             f"{seqlen}, got {tuple(cos.shape)}")
        return cos.reshape(batch * seqlen, -1), sin.reshape(batch * seqlen, -1), None, seqlen
    if cos.dim() != 2:
        raise ValueError(f"cos/sin must be 2-D or 3-D, got {cos.dim()} dims")
    if cos.shape[0] < seqlen:
        raise ValueError(f"cos/sin have {cos.shape[0]} rows; sequence length {seqlen} needs "
                         "that many without positions")
    return cos, sin, None, 0


def apply_rotary(q: torch.Tensor, k: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
                 positions: torch.Tensor | None = None, *, interleaved: bool = False,
                 inplace: bool = False, conjugate: bool = False):
    """Rotate q (and k) with the CUDA kernel; returns (q_out, k_out) in the input shapes.
    `conjugate=True` rotates by the negative angles (sin negated): the inverse rotation."""
    module = loader.load(MODULE)
    q4 = _as_bshd(q, "q")
    k4 = _as_bshd(k, "k") if k is not None else None
    if k is not None and k.dim() != q.dim():
        raise ValueError("q and k must both be 3-D or both 4-D")
    cos2, sin2, pos2, table_stride_b = normalize_tables(cos, sin, positions, q4.shape[0],
                                                        q4.shape[1])
    if inplace:
        q_out, k_out = q, k
    else:
        q_out = torch.empty_like(q, memory_format=torch.contiguous_format)
        k_out = torch.empty_like(k, memory_format=torch.contiguous_format) if k is not None else None
    module.apply(q4, k4, _as_bshd(q_out, "q_out"),
                 _as_bshd(k_out, "k_out") if k_out is not None else None,
                 cos2, sin2, pos2, table_stride_b, interleaved, conjugate)
    return q_out, k_out


def kernel_supports(q: torch.Tensor, k: torch.Tensor | None, interleaved: bool) -> bool:
    """Whether the kernel's vector accesses fit these strides (interleaved needs pairs)."""
    if not interleaved:
        return True
    if q.shape[-1] % 2:
        return False
    tensors = [q] + ([k] if k is not None else [])
    return all(t.stride(-1) == 1 and all(s % 2 == 0 for s in t.stride()[:-1])
               and t.data_ptr() % 4 == 0 for t in tensors)
