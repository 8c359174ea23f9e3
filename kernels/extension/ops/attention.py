"""Attention kernels (module `attention`): thin calls into the binding.

Conventions: bf16 or fp16 (``DTYPES``; q, k, v and out share one; fp32 accumulation);
head_dim in ``HEAD_DIMS``; q [B, Sq, Hq, D], k / v [B, Sk, Hkv, D] (or a
paged cache [num_pages, page_size, Hkv, D] with page_table [B, max_pages] int32 and
seqlens_k [B] int32); GQA with Hq % Hkv == 0; scale 1/sqrt(D) unless given; causal is
bottom-right aligned; mask bool [B, Sk] or [B, Sq, Sk], True = keep; lse fp32 [B, Hq, Sq]
([Hq, total_q] for packed queries). `impl` is "tc" (tensor cores) or "scalar" (FP32 FMA).

The prefill entry points take two more tensor-core choices, to pick a kernel by name ("tc"
picks for you): "tc-ws", the warp-specialized Hopper kernel (csrc prefill_ws_sm90.cuh: a TMA
producer warpgroup, WGMMA consumer warpgroups taking turns; what "tc" runs on Hopper for dense
q on contiguous k / v and for packed q on a paged cache, without a boolean mask), which raises
ValueError for a call it does not take (a mask, pages that do not fit its tiles) and
NotImplementedError off Hopper; and "tc-cpasync", the
cp.async kernel (every warp loads K / V; WGMMA on Hopper, mma.sync elsewhere), the default
before the warp-specialized kernel and what "tc" runs for masks, paged caches and other GPUs.
`prefill(..., debug=True)` synchronizes after the launch, so a failing kernel is named by this
call, and checks the warp-specialized kernel's out and lse against the cp.async kernel's.
The binding validates every input and raises TypeError / ValueError with the reason. The
wrappers pass the binding its arguments by position, in the order of its ``py::arg`` list
(pybind11 would match keywords by name on every call, a noticeable share of an eager call's
host time at batch 1 for the paged decode's ten).

`check_seqlens` (one device->host copy, also with `debug=True`) checks the lengths against the
page table and the page ids those lengths use against the cache (IndexError); it is skipped
under CUDA-graph capture, where a length beyond the page table makes that batch's output NaN
instead, and an out-of-range page id is then the caller's contract.
"""

from __future__ import annotations

import torch

from .. import loader

MODULE = "attention"

# The kernels' limits, defined once for Python (the backend's capability checks, the registry
# and the tests read them here). The binding enforces the same values (csrc attention.cpp
# check_head_dim and element_type, configs.cuh); it could report them as module attributes,
# which would then replace these constants.
HEAD_DIMS = (64, 128, 256)
DTYPES = (torch.bfloat16, torch.float16)
# Packed rows (query, head in the GQA group) that one split-KV decode CTA owns.
DECODE_TILE_ROWS = 16


def _module():
    return loader.load(MODULE)


def available() -> bool:
    return loader.available(MODULE)


def decode(q, k, v, *, causal=False, scale=None, mask=None, out=None, lse=None, num_splits=0,
           impl="tc", workspace=None, split_counters=None):
    """Split-KV decode on contiguous KV; num_splits=0 picks the split count. With split_counters
    (int32, decode_counter_count of them, zero: each call leaves them zero) a split call is one
    launch, the last split of each row tile combining the others; without, a combine kernel
    follows the split kernel."""
    return _module().decode(q, k, v, causal, scale, mask, out, lse, num_splits, impl, workspace,
                            split_counters)


def paged_decode(q, k_cache, v_cache, page_table, seqlens_k, *, causal=False, scale=None, mask=None,
                 out=None, lse=None, num_splits=0, impl="tc", workspace=None, check_seqlens=True,
                 debug=False, split_counters=None, k_scale=None, v_scale=None):
    """Split-KV decode on a paged cache; CUDA-graph capturable (no host synchronization when
    check_seqlens is False or while capturing; pass num_splits + workspace for a fixed footprint,
    split_counters for one launch: see decode).

    The cache may be e4m3 (torch.float8_e4m3fn, impl "tc") with k_scale and v_scale: float32
    [Hkv] or [1] on the device, key = k_scale * k_cache value (per kv head), likewise V. The
    kernel reads them on the device (a CUDA graph sees new values); check_seqlens also checks
    that they are finite and positive."""
    return _module().paged_decode(q, k_cache, v_cache, page_table, seqlens_k, causal, scale, mask, out, lse,
                                  num_splits, impl, workspace, check_seqlens, debug, split_counters, k_scale,
                                  v_scale)


# The prefill kernels by impl name (the module docstring says what each is).
PREFILL_IMPLS = ("tc", "tc-ws", "tc-cpasync", "scalar")


def prefill(q, k, v, *, causal=False, scale=None, mask=None, out=None, lse=None, impl="tc", debug=False):
    """Prefill on contiguous KV (impl in PREFILL_IMPLS); debug=True: see the module docstring."""
    return _module().prefill(q, k, v, causal, scale, mask, out, lse, impl, debug)


def paged_prefill(q, k_cache, v_cache, page_table, cu_seqlens_q, seqlens_k, *, causal=False, scale=None,
                  mask=None, out=None, lse=None, impl="tc", check_seqlens=True, debug=False):
    """Ragged prefill: packed q [total_q, Hq, D] with cu_seqlens_q [B + 1] int32, on a paged cache.

    check_seqlens: seqlens_k within the page table, the page ids they use within the cache, and
    cu_seqlens_q from 0 to total_q, never decreasing (one device->host copy). Without it, on
    Hopper's warp-specialized kernel, the call never waits for the GPU and can be CUDA-graph
    captured (the kernel finds its tiles from cu_seqlens_q on the device; offsets that do not
    cover q leave the rows no sequence covers unwritten); the cp.async kernel (a mask, pages
    that do not fit the tiles) builds its schedule from a host copy of cu_seqlens_q and cannot
    be captured."""
    return _module().paged_prefill(q, k_cache, v_cache, page_table, cu_seqlens_q, seqlens_k, causal, scale,
                                   mask, out, lse, impl, check_seqlens, debug)


def decode_num_splits(batch, heads_kv, seqlen_q, group, max_seqlen_k, head_dim, e4m3_kv=False) -> int:
    """The split count decode and paged_decode pick for this shape on this GPU (paged KV:
    max_seqlen_k = max_pages * page_size; e4m3_kv: an e4m3 cache)."""
    return _module().decode_num_splits(batch, heads_kv, seqlen_q, group, max_seqlen_k, head_dim, e4m3_kv)


def decode_counter_count(batch, heads_kv, seqlen_q, group) -> int:
    """Int32 split counters of a one-launch split decode call: one per (batch, kv head, 16 rows)."""
    return _module().decode_counter_count(batch, heads_kv, seqlen_q, group)


def decode_workspace_size(num_splits, batch, heads_q, seqlen_q, head_dim) -> int:
    """Float32 elements of workspace for a decode call (0 when num_splits == 1)."""
    return _module().decode_workspace_size(num_splits, batch, heads_q, seqlen_q, head_dim)
