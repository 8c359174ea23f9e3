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
"""

from __future__ import annotations

import functools
import importlib

import torch

from .torch_path import _run_torch

LADDER_RUNG = "k13"  # the fastest bf16 / fp16 rung (results/<gpu>/ladder.json)
LADDER_PHASES = ("prefill", "decode")  # dense queries on contiguous K/V
HOPPER = (9, 0)
_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


@functools.cache
def rung():
    """The rung module, or the ImportError's message (the CuTe DSL missing): imported once."""
    try:
        return importlib.import_module(f"{__package__.split('.')[0]}.{LADDER_RUNG}")
    except ImportError as exc:  # no CuTe DSL (nvidia-cutlass-dsl) here
        return f"the CuTe DSL is not importable ({exc})"


def unsupported(call) -> str | None:
    """Why the ladder's rung cannot run ``call`` (a backend.attention.Call), or None."""
    if call.device_type != "cuda":
        return "inputs are not on a CUDA device"
    if call.capability != HOPPER:
        major, minor = call.capability
        return f"the ladder's kernels are built for sm_90a, device is sm_{major}{minor}"
    if call.phase not in LADDER_PHASES:
        return f"{call.phase} calls (the rung reads contiguous K/V only)"
    if call.masked:
        return "a boolean mask (the rung takes causal masking only)"
    if call.needs_grad:
        return "autograd is recording the call and the rung has no backward"
    if call.dtype not in _DTYPE_NAMES:
        return f"dtype {call.dtype} (the rung takes bf16 and fp16)"
    module = rung()
    if isinstance(module, str):
        return module
    if call.head_dim not in module.HEAD_DIMS:
        return f"head_dim {call.head_dim} (supported: {module.HEAD_DIMS})"
    return None


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
