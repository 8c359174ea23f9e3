"""Rotary position embedding: dispatch between the CUDA kernel and a torch path.

`apply_rotary_emb(q, k, cos, sin, positions=None, interleaved=False, inplace=False)`
rotates q and k (one launch on the kernel path). Rules:

* the kernel (`ops.rotary`) for CUDA bf16/fp16 tensors when no autograd graph is being
  recorded for them and the module is built;
* the torch path otherwise (CPU, autograd, fp32 inputs, strides the kernel cannot vector-load).
  It computes in float32 and is differentiable w.r.t. q and k.

`backend="kernel"` / `"torch"` forces one side (`"kernel"` raises when it cannot run).
Both paths share the table conventions documented in `kernels/extension/ops/rotary.py` and give NaN for the
rotated dims of a token whose position is outside the table (no out-of-bounds reads).

Accuracy: both paths compute in fp32 from the stored inputs and round once, so the maximum
error against an fp32 (or fp64) reference is half an output ulp: `2^-8 |ref|` for bf16,
`2^-11 |ref|` for fp16 (plus fp32 rounding of the products, ~1e-7 of the inputs).
`tests/test_rotary.py` checks that bound.
"""

from __future__ import annotations

import torch

from ..ops import rotary as rotary_ops

BACKENDS = ("auto", "kernel", "torch")


def rotary_tables(rows: int, rotary_dim: int, base: float = 10000.0, device=None,
                  dtype=torch.float32):
    """cos, sin `[rows, rotary_dim / 2]` for positions 0..rows-1 (the RoPE frequencies)."""
    if rotary_dim <= 0 or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be a positive even number, got {rotary_dim}")
    if rows < 0:
        raise ValueError(f"rows must be >= 0, got {rows}")
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.outer(torch.arange(rows, dtype=torch.float64), inv_freq)
    return (angles.cos().to(dtype=dtype, device=device),
            angles.sin().to(dtype=dtype, device=device))


def _gather_rows(table: torch.Tensor, positions, batch: int, seqlen: int):
    """Table rows for every token as [B, S, 1, R/2]; NaN for out-of-range positions."""
    cos2, half = table, table.shape[-1]  # half given, not -1: a sequence may be empty
    if positions is None:
        if table.dim() == 3:
            return table.reshape(batch, seqlen, 1, half)
        return table[:seqlen].reshape(1, seqlen, 1, half).expand(batch, -1, -1, -1)
    rows = cos2.shape[0]
    valid = (positions >= 0) & (positions < rows)
    picked = cos2[positions.clamp(0, rows - 1).long()]
    picked = torch.where(valid.unsqueeze(-1), picked, torch.full_like(picked, float("nan")))
    return picked.reshape(batch, seqlen, 1, half)


def _rotate_torch(x: torch.Tensor, cos_t: torch.Tensor, sin_t: torch.Tensor,
                  interleaved: bool, compute_dtype: torch.dtype) -> torch.Tensor:
    rotary_dim = 2 * cos_t.shape[-1]
    head_dim = x.shape[-1]
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim (2 * cos.shape[-1] = {rotary_dim}) exceeds head_dim "
                         f"{head_dim}")
    compute_dtype = torch.promote_types(compute_dtype, x.dtype)  # fp64 inputs stay fp64
    xr = x[..., :rotary_dim].to(compute_dtype)
    c, s = cos_t.to(compute_dtype), sin_t.to(compute_dtype)
    if interleaved:
        xa, xb = xr[..., 0::2], xr[..., 1::2]
        rotated = torch.stack((xa * c - xb * s, xb * c + xa * s), dim=-1).flatten(-2)
    else:
        xa, xb = xr.chunk(2, dim=-1)
        rotated = torch.cat((xa * c - xb * s, xb * c + xa * s), dim=-1)
    return torch.cat((rotated.to(x.dtype), x[..., rotary_dim:]), dim=-1)


def apply_rotary_torch(q, k, cos, sin, positions=None, *, interleaved=False, inplace=False,
                       conjugate=False, compute_dtype=torch.float32):
    """The torch path: same contract as `apply_rotary_emb`, differentiable.

    `conjugate=True` rotates by the negative angles (sin negated): the inverse rotation.
    `compute_dtype` is the arithmetic's dtype; with `torch.float64` and fp32 inputs this is the
    test reference.
    """
    three_d = q.dim() == 3
    q4 = rotary_ops._as_bshd(q, "q")
    k4 = rotary_ops._as_bshd(k, "k") if k is not None else None
    batch, seqlen = q4.shape[:2]
    if k4 is not None and (k4.shape[:2] != (batch, seqlen) or k4.shape[3] != q4.shape[3]):
        raise ValueError(f"k {tuple(k.shape)} must share batch, seqlen and head_dim with q "
                         f"{tuple(q.shape)}")
    cos2, sin2, pos2, _ = rotary_ops.normalize_tables(cos, sin, positions, batch, seqlen)
    if pos2 is not None and (pos2.dtype not in (torch.int32, torch.int64)):
        raise TypeError(f"positions must be int32 or int64, got {pos2.dtype}")
    if pos2 is not None:
        cos_t = _gather_rows(cos2, pos2, batch, seqlen)
        sin_t = _gather_rows(sin2, pos2, batch, seqlen)
    else:
        per_token = cos.dim() == 3
        cos_t = _gather_rows(cos2.reshape(batch, seqlen, -1) if per_token else cos2, None,
                             batch, seqlen)
        sin_t = _gather_rows(sin2.reshape(batch, seqlen, -1) if per_token else sin2, None,
                             batch, seqlen)
    if conjugate:
        sin_t = -sin_t
    outs = []
    for x, x4 in ((q, q4), (k, k4)):
        if x is None:
            outs.append(None)
            continue
        y = _rotate_torch(x4, cos_t, sin_t, interleaved, compute_dtype)
        y = y.squeeze(0) if three_d else y
        if inplace:
            x.copy_(y)
            y = x
        outs.append(y)
    return outs[0], outs[1]


def _check_common(q, k, cos, sin, positions=None):
    for name, t in (("q", q), ("k", k), ("cos", cos), ("sin", sin), ("positions", positions)):
        if (t is not None or name in ("q", "cos", "sin")) and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if cos.dim() == 0:
        raise ValueError("cos/sin must be 2-D or 3-D, got 0 dims")
    for name, t in (("cos", cos), ("sin", sin)):
        if not t.is_floating_point():
            raise TypeError(f"{name} must be a floating tensor (the angles' cos / sin), got {t.dtype}")
    if cos.shape[-1] == 0:
        raise ValueError("cos/sin have no columns: rotary_dim = 2 * cos.shape[-1] must be at least 2")
    if not q.is_floating_point():
        raise TypeError(f"q must be a floating tensor, got {q.dtype}")
    if k is not None and k.dtype != q.dtype:
        raise TypeError(f"q ({q.dtype}) and k ({k.dtype}) must share one dtype")
    if k is not None and k.device != q.device:
        raise ValueError("q and k are on different devices")
    if k is not None and k.dim() != q.dim():
        raise ValueError(f"q and k must both be 3-D or both 4-D, got shapes {tuple(q.shape)} and "
                         f"{tuple(k.shape)}")
    if cos.shape[-1] * 2 > q.shape[-1]:
        raise ValueError(f"rotary_dim (2 * cos.shape[-1] = {2 * cos.shape[-1]}) exceeds "
                         f"head_dim {q.shape[-1]}")


def _kernel_eligible(q, k, cos, positions, interleaved) -> str | None:
    """None when the kernel can run, else why not."""
    tensors = [q] + ([k] if k is not None else [])
    if not q.is_cuda:
        return "tensors are not on a CUDA device"
    if q.dtype not in (torch.bfloat16, torch.float16):
        return f"dtype {q.dtype} (kernel takes bf16 / fp16)"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "autograd is recording these tensors"
    if any(t.stride(-1) != 1 for t in tensors):
        return "last dim not contiguous"
    if not rotary_ops.kernel_supports(q, k, interleaved):
        return "interleaved layout with odd strides"
    if not rotary_ops.is_available():
        return "the rotary module is not built (python -m tools.build_ext)"
    return None


def apply_rotary_emb(q, k, cos, sin, positions=None, *, interleaved: bool = False,
                     inplace: bool = False, backend: str = "auto"):
    """Rotate q and k (k may be None). Returns (q_out, k_out); see the module docstring."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    _check_common(q, k, cos, sin, positions)
    if inplace and k is not None and k.numel() and k.data_ptr() == q.data_ptr():
        raise ValueError("inplace with k the same memory as q would rotate it twice; pass k=None to "
                         "rotate one tensor in place")
    why_not = _kernel_eligible(q, k, cos, positions, interleaved) if backend != "torch" else "forced"
    if why_not is None:
        device = q.device
        cos_k = cos.to(device=device, dtype=torch.float32)
        sin_k = sin.to(device=device, dtype=torch.float32)
        pos_k = positions.to(device) if positions is not None else None
        return rotary_ops.apply_rotary(q, k, cos_k, sin_k, pos_k, interleaved=interleaved,
                                       inplace=inplace)
    if backend == "kernel":
        raise RuntimeError(f"rotary kernel cannot run: {why_not}")
    return apply_rotary_torch(q, k, cos.to(q.device), sin.to(q.device),
                              positions.to(q.device) if positions is not None else None,
                              interleaved=interleaved, inplace=inplace)
