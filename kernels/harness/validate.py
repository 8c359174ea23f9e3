"""Input validation shared by every runner: bad input is a clear Python error, never a crash."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .problem import AttentionProblem

_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float8_e4m3fn: "e4m3"}



def _byte_ranges_meet(a, b) -> bool:
    """Whether two tensors' spans of bytes (first to last element) intersect."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False

    def span(t):
        last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) * t.element_size()
        return t.data_ptr(), t.data_ptr() + last + t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1

def validate_attention_inputs(q, k, v, out=None, lse=None, *, name: str = "attention",
                              head_dims: Iterable[int] = (64, 128),
                              dtypes: Iterable[torch.dtype] = (torch.bfloat16,),
                              require_cuda: bool = True, causal: bool = False,
                              scale: float | None = None,
                              out_dtype: torch.dtype | None = None) -> AttentionProblem:
    """Check BSHD inputs (and optional outputs); return the problem they describe.
    ``out`` must have ``out_dtype`` (default: q's dtype; FP8 inputs write bf16).

    Raises TypeError for wrong types / dtypes, ValueError for shapes, layouts and devices.
    """
    tensors = {"q": q, "k": k, "v": v}
    for label, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: {label} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}: {label} must be 4-D [batch, seqlen, heads, head_dim] (BSHD), "
                             f"got shape {tuple(t.shape)}")
    dtypes = tuple(dtypes)
    if q.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise TypeError(f"{name}: q has dtype {str(q.dtype).replace('torch.', '')}; supported: {allowed}")
    for label in ("k", "v"):
        if tensors[label].dtype != q.dtype:
            raise TypeError(f"{name}: {label} dtype {tensors[label].dtype} differs from q dtype {q.dtype}")

    batch, seqlen_q, heads_q, head_dim = q.shape
    _, seqlen_k, heads_kv, _ = k.shape
    if k.shape != v.shape:
        raise ValueError(f"{name}: k {tuple(k.shape)} and v {tuple(v.shape)} must have the same shape")
    if k.shape[0] != batch:
        raise ValueError(f"{name}: batch of k/v ({k.shape[0]}) differs from q ({batch})")
    if k.shape[3] != head_dim:
        raise ValueError(f"{name}: head_dim of k/v ({k.shape[3]}) differs from q ({head_dim})")
    head_dims = tuple(head_dims)
    if head_dim not in head_dims:
        raise ValueError(f"{name}: head_dim {head_dim} unsupported (supported: {head_dims})")
    if min(q.shape) < 1 or min(k.shape) < 1:
        raise ValueError(f"{name}: empty tensors (q {tuple(q.shape)}, k {tuple(k.shape)})")
    if heads_q % heads_kv:
        raise ValueError(f"{name}: heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv})")

    devices = {t.device for t in tensors.values()}
    if len(devices) > 1:
        raise ValueError(f"{name}: q, k, v are on different devices: {sorted(map(str, devices))}")
    if require_cuda and q.device.type != "cuda":
        raise ValueError(f"{name}: inputs must be CUDA tensors, got device {q.device}")
    for label, t in tensors.items():
        if not t.is_contiguous():
            raise ValueError(f"{name}: {label} must be contiguous (BSHD, strides {tuple(t.stride())})")

    expected_out = (batch, seqlen_q, heads_q, head_dim)
    out_dtype = out_dtype or q.dtype
    if out is not None:
        if out.shape != expected_out or out.dtype != out_dtype or out.device != q.device:
            raise ValueError(f"{name}: out must be {expected_out} {out_dtype} on {q.device}, got "
                             f"{tuple(out.shape)} {out.dtype} on {out.device}")
        if not out.is_contiguous():
            raise ValueError(f"{name}: out must be contiguous")
    for label, written in (("out", out), ("lse", lse)):
        for source, read in tensors.items():
            if written is not None and _byte_ranges_meet(written, read):
                raise ValueError(f"{name}: {label} shares memory with {source}: the kernel would overwrite "
                                 f"what other blocks still read; pass separate memory")
    if lse is not None:
        expected_lse = (batch, heads_q, seqlen_q)
        if lse.shape != expected_lse or lse.dtype != torch.float32 or lse.device != q.device:
            raise ValueError(f"{name}: lse must be {expected_lse} float32 on {q.device}, got "
                             f"{tuple(lse.shape)} {lse.dtype} on {lse.device}")
        if not lse.is_contiguous():
            raise ValueError(f"{name}: lse must be contiguous")

    return AttentionProblem(batch=batch, seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads_q=heads_q,
                            heads_kv=heads_kv, head_dim=head_dim, causal=causal,
                            dtype=_DTYPE_NAMES.get(q.dtype, "bf16"), scale=scale)
