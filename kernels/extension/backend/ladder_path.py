"""The ``ladder`` backend: the top CuTe-DSL rung behind ``attention()``.

Where the CuTe DSL is installed and the GPU is a Hopper (sm_90a), dense bf16 / fp16 calls
(contiguous K/V, no mask, no gradient) can run on the ladder's fastest rung, ``LADDER_RUNG``.
It compiles once per head dimension, causal flag, dtype and LSE output (the rung's compile
cache: one compile serves every batch, sequence length and head count; the first call of a
configuration takes seconds, as FlashAttention-4's does), then launches on torch's current
stream. Routing ranks it by the attention suite's ``ladder`` rows like any other backend; where
nothing is measured it comes after our CUDA kernels and FlashAttention-4.

The rung's contract is contiguous BSHD tensors: inputs and outputs of other strides are copied
to and from contiguous ones here.

FP8: ``attention()`` given ``Fp8Tensor`` q, k, v (e4m3 data and a descale each,
``kernels.harness.quantize_e4m3``) runs the FP8 rung, ``FP8_RUNG``, where it can (the same
conditions), else the torch path on the dequantized values; the output is bf16 either way
(:func:`run_fp8`).
"""

from __future__ import annotations

import functools
import importlib

import torch

from .torch_path import _run_torch

LADDER_RUNG = "k13"  # the fastest bf16 / fp16 rung (results/<gpu>/ladder.json)
FP8_RUNG = "k12"     # the e4m3 rung
LADDER_PHASES = ("prefill", "decode")  # dense queries on contiguous K/V
HOPPER = (9, 0)
_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
# The largest logit error (nats) the FP8 rung may make before a call warns (fp8_score_error_estimate):
# at 0.1 a key's weight may be off by a tenth, beside the 6% of P's e4m3 rounding.
FP8_SCORE_ERROR_WARN_NATS = 0.1


class Fp8AccuracyWarning(UserWarning):
    """An FP8 attention call whose inputs' scales put its score error past FP8_SCORE_ERROR_WARN_NATS."""


@functools.cache
def rung(name: str = LADDER_RUNG):
    """The rung module, or the ImportError's message (the CuTe DSL missing): imported once."""
    try:
        return importlib.import_module(f"{__package__.split('.')[0]}.{name}")
    except ImportError as exc:  # no CuTe DSL (nvidia-cutlass-dsl) here
        return f"the CuTe DSL is not importable ({exc})"


def _target_reason(device_type: str, capability) -> str | None:
    """Why the ladder's kernels cannot run on this device, or None."""
    if device_type != "cuda":
        return "inputs are not on a CUDA device"
    if capability != HOPPER:
        major, minor = capability
        return f"the ladder's kernels are built for sm_90a, device is sm_{major}{minor}"
    return None


def _rung_reason(name: str, head_dim: int) -> str | None:
    """Why rung ``name`` cannot be imported or take ``head_dim``, or None."""
    module = rung(name)
    if isinstance(module, str):
        return module
    if head_dim not in module.HEAD_DIMS:
        return f"head_dim {head_dim} (supported: {module.HEAD_DIMS})"
    return None


def unsupported(call) -> str | None:
    """Why the ladder's rung cannot run ``call`` (a backend.attention.Call), or None."""
    reason = _target_reason(call.device_type, call.capability)
    if reason is not None:
        return reason
    if call.phase not in LADDER_PHASES:
        return f"{call.phase} calls (the rung reads contiguous K/V only)"
    if call.masked:
        return "a boolean mask (the rung takes causal masking only)"
    if call.needs_grad:
        return "autograd is recording the call and the rung has no backward"
    if call.dtype not in _DTYPE_NAMES:
        return f"dtype {call.dtype} (the rung takes bf16 and fp16)"
    return _rung_reason(LADDER_RUNG, call.head_dim)


def run(q, k, v, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q, out, lse):
    """attention() on the rung (a validated call that unsupported() let through)."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    if q.numel() == 0:  # no query row: the torch path's empty answer
        return _run_torch(q, k, v, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q, out, lse)
    from ...harness.problem import AttentionProblem

    module = rung()
    problem = AttentionProblem(batch=batch, seqlen_q=seqlen_q, seqlen_k=k.shape[1], heads_q=heads_q,
                               heads_kv=k.shape[2], head_dim=head_dim, causal=causal,
                               dtype=_DTYPE_NAMES[q.dtype], scale=scale)
    compiled = module.compile_kernel(problem)
    dense = torch.contiguous_format
    result = out if out is not None and out.is_contiguous() else torch.empty_like(q, memory_format=dense)
    result_lse = lse if lse is None or lse.is_contiguous() else torch.empty_like(lse, memory_format=dense)
    module.run_kernel(compiled, q.contiguous(), k.contiguous(), v.contiguous(), result, result_lse)
    if result_lse is not lse:
        lse.copy_(result_lse)
    if out is not None and result is not out:
        out.copy_(result)
        return out
    return result


# ---- FP8 inputs ------------------------------------------------------------------------------------

def is_fp8_tensor(t) -> bool:
    from ...harness.quantize import Fp8Tensor

    return isinstance(t, Fp8Tensor)


def _fp8_unsupported(q, head_dim: int) -> str | None:
    """Why the FP8 rung cannot run e4m3 inputs like ``q`` (data on its device), or None."""
    capability = torch.cuda.get_device_capability(q.device) if q.device.type == "cuda" else None
    return _target_reason(q.device.type, capability) or _rung_reason(FP8_RUNG, head_dim)


def run_fp8(q, k, v, *, causal=False, scale=None, mask=None, page_table=None, seqlens_k=None,
            cu_seqlens_q=None, out=None, lse=None, strict: str | None = None):
    """attention() of ``Fp8Tensor`` q, k, v [B, S, H, D] (contiguous K/V, no mask): the FP8 rung
    where it runs, else (or with ``strict == "torch"``) the torch path on the dequantized values.
    Returns bf16 ``out`` [B, Sq, Hq, D]; ``lse`` fp32 [B, Hq, Sq] if given. ``strict``: the
    backend use_backend() selected, if any (``ladder`` or ``torch``; others take no FP8)."""
    from ...harness.problem import AttentionProblem
    from ...harness.quantize import Fp8Tensor
    from .validation import _check_causal, _check_out_lse, _scale_number, validate_inputs

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Fp8Tensor):
            raise TypeError(f"FP8 attention takes Fp8Tensor q, k and v; {name} is {type(t).__name__}")
    for name, t in (("mask", mask), ("page_table", page_table), ("seqlens_k", seqlens_k),
                    ("cu_seqlens_q", cu_seqlens_q)):
        if t is not None:
            raise ValueError(f"FP8 attention takes contiguous K/V without {name}")
    if strict not in (None, "ladder", "torch"):
        raise RuntimeError(f"attention backend {strict!r} (selected by use_backend) takes no FP8 "
                           "inputs; 'ladder' and 'torch' do")
    _check_causal(causal)
    scale = None if scale is None else _scale_number(scale)
    # The checks of a bf16 call, on bf16 stand-ins of the shapes (no data read).
    stand_ins = [torch.empty(t.shape, dtype=torch.bfloat16, device="meta") for t in (q, k, v)]
    validate_inputs(*stand_ins, scale=scale)
    if len({q.device, k.device, v.device}) > 1:
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    # out: bf16 in q's shape (a stand-in of no storage for the checks)
    _check_out_lse(torch.empty((), dtype=torch.bfloat16, device=q.device).expand(q.shape), out, lse, False)
    batch, seqlen_q, heads_q, head_dim = q.shape
    reason = None if strict == "torch" else _fp8_unsupported(q, head_dim)
    if reason is not None and strict == "ladder":
        raise RuntimeError(f"attention backend 'ladder' (selected by use_backend) cannot run this FP8 "
                           f"call: {reason}")
    if reason is not None or strict == "torch" or q.data.numel() == 0 or k.shape[1] == 0:
        dq, dk, dv = (t.dequantize() for t in (q, k, v))
        result = _run_torch(dq, dk, dv, causal, scale, None, None, None, None, None, lse)
        if out is None:
            return result.to(torch.bfloat16)
        out.copy_(result)
        return out
    warn_if_fp8_scores_err(q, k, head_dim, scale)
    module = rung(FP8_RUNG)
    problem = AttentionProblem(batch=batch, seqlen_q=seqlen_q, seqlen_k=k.shape[1], heads_q=heads_q,
                               heads_kv=k.shape[2], head_dim=head_dim, causal=causal, dtype="e4m3",
                               scale=scale)
    result = out if out is not None else torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    module.run_kernel(module.compile_kernel(problem), q, k, v, result, lse)
    return result


def warn_if_fp8_scores_err(q, k, head_dim: int, scale: float | None) -> float:
    """Warn (Fp8AccuracyWarning) where the FP8 tensor cores' score accumulation is expected to err
    by more than FP8_SCORE_ERROR_WARN_NATS on inputs of these descales (the estimate, from the
    descales alone, is returned): large logits (docs/worklog/k12.md, "Large logits")."""
    import math
    import warnings

    from ...harness.reference import fp8_score_error_estimate

    softmax_scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    estimate = fp8_score_error_estimate(q.descale, k.descale, head_dim, softmax_scale)
    if estimate > FP8_SCORE_ERROR_WARN_NATS:
        warnings.warn(
            f"FP8 attention: with descales {q.descale:.3g} (q) and {k.descale:.3g} (k) the FP8 tensor "
            f"cores' score sums may be off by up to ~{estimate:.2g} nats (a logit's error; "
            f"{FP8_SCORE_ERROR_WARN_NATS} is where this warns); run the call in bf16, or on the dequantized "
            "values with use_backend('torch'), where that matters", Fp8AccuracyWarning,
            stacklevel=4)  # the caller of attention(): here, run_fp8, attention()
    return estimate
