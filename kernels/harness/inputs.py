"""Seeded random attention inputs (never zeros: zeros hide unwritten outputs)."""

from __future__ import annotations

import torch

from .problem import AttentionProblem

# FlashAttention-3's accuracy test (paper, section 4.3): N(0, 1) entries, and for 0.1% of them an
# added N(0, 10^2) term: a few large entries, as activations have.
OUTLIER_FRACTION = 1e-3
OUTLIER_STD = 10.0


def make_inputs(problem: AttentionProblem, seed: int = 0, device: str | torch.device = "cuda",
                magnitude: float = 1.0, outliers: bool = False):
    """Fresh ``q, k, v`` in BSHD with standard-normal entries times ``magnitude``.

    ``magnitude`` > 1 (e.g. 20) stresses the online softmax: large logits make a missing
    max-subtraction or a late rescale overflow to inf/NaN. ``outliers``: FlashAttention-3's
    distribution, a few large entries (``OUTLIER_FRACTION`` of them get ``OUTLIER_STD`` more).

    An ``e4m3`` problem gets the same draws as its bf16 version (``problem.with_(dtype="bf16")``),
    each quantized with its own per-tensor scale (:class:`~kernels.harness.quantize.Fp8Tensor`),
    so that an FP8 kernel and a bf16 one can be compared on the same data.
    """
    if problem.dtype == "e4m3":
        from .quantize import quantize_e4m3

        source = make_inputs(problem.with_(dtype="bf16"), seed, device, magnitude, outliers)
        return tuple(quantize_e4m3(t) for t in source)
    gen = torch.Generator(device=device).manual_seed(seed)
    p = problem

    def draw(seqlen, heads):
        shape = (p.batch, seqlen, heads, p.head_dim)
        x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
        if outliers:
            big = torch.rand(shape, generator=gen, device=device) < OUTLIER_FRACTION
            x = x + big * OUTLIER_STD * torch.randn(shape, generator=gen, device=device)
        return (x * magnitude).to(p.torch_dtype)

    return draw(p.seqlen_q, p.heads_q), draw(p.seqlen_k, p.heads_kv), draw(p.seqlen_k, p.heads_kv)


def empty_output(problem: AttentionProblem, device: str | torch.device = "cuda") -> torch.Tensor:
    """An uninitialised output in the problem's output dtype (bf16 for e4m3 inputs)."""
    p = problem
    return torch.empty(p.batch, p.seqlen_q, p.heads_q, p.head_dim, dtype=p.out_torch_dtype, device=device)


def paged_kv_cache(k: torch.Tensor, v: torch.Tensor, page_size: int,
                   generator: torch.Generator | None = None, extra_pages: int = 3):
    """Scatter contiguous ``k, v [B, Sk, Hkv, D]`` into a paged cache with randomly permuted pages.

    Returns ``k_cache, v_cache [num_pages, page_size, Hkv, D]`` and ``page_table [B, max_pages]``
    int32 (the FlashAttention-4 / vLLM layout). The slots past ``Sk`` in the last page and the
    ``extra_pages`` no table points to hold other random values, as a reused cache would.
    """
    batch, seqlen_k = k.shape[:2]
    max_pages = -(-seqlen_k // page_size)
    num_pages = batch * max_pages + extra_pages
    perm = torch.randperm(num_pages, generator=generator)[: batch * max_pages].view(batch, max_pages)
    k_cache = torch.randn(num_pages, page_size, *k.shape[2:], device=k.device).to(k.dtype)
    v_cache = torch.randn(num_pages, page_size, *v.shape[2:], device=v.device).to(v.dtype)
    table = perm.to(k.device)
    full, rest = divmod(seqlen_k, page_size)  # whole pages, then the tokens of a partial last page
    for cache, src in ((k_cache, k), (v_cache, v)):
        if full:
            cache[table[:, :full].reshape(-1)] = src[:, : full * page_size].reshape(
                batch * full, page_size, *src.shape[2:])
        if rest:
            cache[table[:, full], :rest] = src[:, full * page_size:]
    return k_cache, v_cache, table.to(torch.int32)
