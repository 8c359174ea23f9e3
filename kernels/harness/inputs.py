"""Seeded random attention inputs (never zeros: zeros hide unwritten outputs)."""

from __future__ import annotations

import torch

from .problem import AttentionProblem


def make_inputs(problem: AttentionProblem, seed: int = 0, device: str | torch.device = "cuda",
                magnitude: float = 1.0):
    """Fresh ``q, k, v`` in BSHD with standard-normal entries times ``magnitude``.

    ``magnitude`` > 1 (e.g. 20) stresses the online softmax: large logits make a missing
    max-subtraction or a late rescale overflow to inf/NaN.
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    p = problem

    def draw(seqlen, heads):
        x = torch.randn(p.batch, seqlen, heads, p.head_dim, generator=gen, device=device,
                        dtype=torch.float32)
        return (x * magnitude).to(p.torch_dtype)

    return draw(p.seqlen_q, p.heads_q), draw(p.seqlen_k, p.heads_kv), draw(p.seqlen_k, p.heads_kv)


def empty_output(problem: AttentionProblem, device: str | torch.device = "cuda") -> torch.Tensor:
    p = problem
    return torch.empty(p.batch, p.seqlen_q, p.heads_q, p.head_dim, dtype=p.torch_dtype, device=device)


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
