"""The production attention kernels (kernels.extension) as registry entries.

Every runner works on an AttentionProblem with contiguous q, k, v; the paged runners view k / v
as a paged cache with an identity page table (zero copy, page 64), so compare / bench reach
the paged code path on the same data as every other kernel. The limits come from the
extension layer (``ops.attention.HEAD_DIMS``, the backend's choice of the decode kernel).
"""

from __future__ import annotations

from ..extension.backend.attention import uses_decode_kernel
from ..extension.ops import attention as ops
from .runner import Runner

PAGE_SIZE = 64


def _environment_reason(name) -> str | None:
    if not ops.available():
        return f"{name}: extension not built (python -m tools.build_ext)"
    import torch

    if not torch.cuda.is_available():
        return f"{name}: no CUDA device"
    return None


def _format_reason(name, problem) -> str | None:
    if problem.torch_dtype not in ops.DTYPES:
        return f"{name}: dtype {problem.dtype} (supported: {', '.join(str(d) for d in ops.DTYPES)})"
    if problem.head_dim not in ops.HEAD_DIMS:
        return f"{name}: head_dim {problem.head_dim} (supported: {ops.HEAD_DIMS})"
    return None


def _decode_reason(name, problem) -> str | None:
    if not uses_decode_kernel(problem.seqlen_q, problem.group_size):
        return f"{name}: decode kernel is for seqlen_q == 1 or seqlen_q * group <= {ops.DECODE_TILE_ROWS}"
    return None


def _paged_reason(name, problem) -> str | None:
    if problem.seqlen_k % PAGE_SIZE:
        return f"{name}: identity paging needs seqlen_k % {PAGE_SIZE} == 0"
    return None


def _identity_pages(problem):
    import torch

    pages = problem.seqlen_k // PAGE_SIZE
    table = torch.arange(problem.batch * pages, dtype=torch.int32, device="cuda").view(problem.batch, pages)
    lens = torch.full((problem.batch,), problem.seqlen_k, dtype=torch.int32, device="cuda")
    return table, lens


def as_paged_cache(t):
    """Contiguous ``k [B, Sk, H, D]`` as a paged cache ``[B * Sk / PAGE_SIZE, PAGE_SIZE, H, D]``
    (no copy); with the identity page table, what the paged runners here and the peers read."""
    return t.view(-1, PAGE_SIZE, *t.shape[2:])


def _make(name, description, reasons, build):
    def limits(problem):
        for check in (_format_reason, *reasons):
            reason = check(name, problem)
            if reason is not None:
                return reason
        return None

    def unsupported(problem):
        return limits(problem) or _environment_reason(name)

    def prepare(problem):
        reason = unsupported(problem)
        if reason is not None:
            raise RuntimeError(reason)
        return build(problem)

    return Runner(name=name, kind="production", description=description, unsupported=unsupported,
                  prepare=prepare, limits=limits)


def _decode(impl):
    def build(problem):
        def fn(q, k, v, out):
            ops.decode(q, k, v, causal=problem.causal, scale=problem.softmax_scale, out=out, impl=impl)
        return fn
    return build


def _prefill(impl):
    def build(problem):
        def fn(q, k, v, out):
            ops.prefill(q, k, v, causal=problem.causal, scale=problem.softmax_scale, out=out, impl=impl)
        return fn
    return build


def _paged_decode(problem):
    table, lens = _identity_pages(problem)

    def fn(q, k, v, out):
        ops.paged_decode(q, as_paged_cache(k), as_paged_cache(v), table, lens, causal=problem.causal,
                         scale=problem.softmax_scale, out=out, check_seqlens=False)
    return fn


def _paged_prefill(problem):
    import torch

    table, lens = _identity_pages(problem)
    sq = problem.seqlen_q
    cu = torch.arange(0, (problem.batch + 1) * sq, sq, dtype=torch.int32, device="cuda")

    def fn(q, k, v, out):
        ops.paged_prefill(q.reshape(-1, *q.shape[2:]), as_paged_cache(k), as_paged_cache(v), table, cu, lens,
                          causal=problem.causal, scale=problem.softmax_scale,
                          out=out.view(-1, *out.shape[2:]), check_seqlens=False)
    return fn


def production_runners() -> list[Runner]:
    return [
        _make("cuda-decode-split", "split-KV decode, mma.sync m16n8k16 + cp.async ring, GQA rows packed",
              [_decode_reason], _decode("tc")),
        _make("cuda-decode-split-scalar", "split-KV decode, FP32 FMA on the same fragments",
              [_decode_reason], _decode("scalar")),
        _make("cuda-prefill-tc", "prefill, the default tensor-core kernel: on sm_90a warp-specialized (TMA "
              "producer warpgroup, WGMMA consumers taking turns, softmax under P V), else the cp.async one",
              [], _prefill("tc")),
        _make("cuda-prefill-tc-cpasync", "split-Q prefill, every warp loading K/V by cp.async: WGMMA "
              "with the softmax under P V on sm_90a, FA2-style mma.sync elsewhere (the default before "
              "cuda-prefill-tc's warp-specialized kernel)",
              [], _prefill("tc-cpasync")),
        _make("cuda-prefill-scalar", "split-Q prefill, FP32 FMA", [], _prefill("scalar")),
        _make("cuda-paged-decode", f"split-KV decode on a paged cache (page {PAGE_SIZE})",
              [_decode_reason, _paged_reason], _paged_decode),
        _make("cuda-paged-prefill", f"ragged prefill on a paged cache (page {PAGE_SIZE}, packed Q schedule)",
              [_paged_reason], _paged_prefill),
    ]
