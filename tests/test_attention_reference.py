"""fp32 reference for the attention tests (masks, paged caches and ragged queries included),
written independently of the backend's torch fallback: explicit softmax over explicit scores."""

from __future__ import annotations

import math

import torch


def reference(q, k, v, *, causal=False, scale=None, mask=None, key_lens=None):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D] -> out fp32 [B, Sq, Hq, D], lse fp32 [B, Hq, Sq]."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    group = heads_q // heads_kv
    qf = q.float().transpose(1, 2)
    kf = k.float().transpose(1, 2).repeat_interleave(group, dim=1)
    vf = v.float().transpose(1, 2).repeat_interleave(group, dim=1)
    scores = (qf @ kf.transpose(-1, -2)) * scale  # [B, Hq, Sq, Sk]
    lens = torch.full((batch,), seqlen_k) if key_lens is None else key_lens.cpu()
    keys = torch.arange(seqlen_k)
    allowed = torch.zeros(batch, seqlen_q, seqlen_k, dtype=torch.bool)
    for b in range(batch):
        row = keys < int(lens[b])
        allowed[b] = row
        if causal:
            offset = int(lens[b]) - seqlen_q
            allowed[b] &= keys.view(1, -1) <= torch.arange(seqlen_q).view(-1, 1) + offset
    if mask is not None:
        m = mask.cpu()[..., :seqlen_k]
        allowed &= m.unsqueeze(1) if m.dim() == 2 else m
    allowed = allowed.to(q.device).unsqueeze(1)
    scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse.unsqueeze(-1).clamp_min(-1e30))
    probs = torch.where(allowed, probs, torch.zeros_like(probs))
    out = (probs @ vf).transpose(1, 2)
    return out, lse


def rel_err(out, ref) -> float:
    out = out.float()
    if torch.isnan(out).any():
        return float("nan")
    denom = ref.float().norm().item()
    return (out - ref.float()).norm().item() / max(denom, 1e-12)


def make_paged(k, v, key_lens, page_size, generator=None, extra_pages=3):
    """Scatter contiguous k/v [B, Sk, Hkv, D] into a randomly permuted paged cache.
    -> k_cache, v_cache [num_pages, page_size, Hkv, D], page_table [B, max_pages] int32."""
    batch, seqlen_k = k.shape[:2]
    max_pages = -(-seqlen_k // page_size)
    num_pages = batch * max_pages + extra_pages
    perm = torch.randperm(num_pages, generator=generator)[: batch * max_pages].view(batch, max_pages)
    k_cache = torch.randn(num_pages, page_size, *k.shape[2:], dtype=k.dtype, device=k.device)
    v_cache = torch.randn_like(k_cache)
    for b in range(batch):
        for p in range(max_pages):
            lo, hi = p * page_size, min((p + 1) * page_size, seqlen_k)
            k_cache[perm[b, p], : hi - lo] = k[b, lo:hi]
            v_cache[perm[b, p], : hi - lo] = v[b, lo:hi]
    return k_cache, v_cache, perm.to(torch.int32).to(k.device)


def test_reference_matches_sdpa_on_cpu():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 7, 4, 16), torch.randn(2, 11, 2, 16), torch.randn(2, 11, 2, 16)
    out, lse = reference(q, k, v, causal=True)
    kr, vr = k.repeat_interleave(2, dim=2), v.repeat_interleave(2, dim=2)
    allowed = torch.arange(11).view(1, -1) <= torch.arange(7).view(-1, 1) + 4
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), kr.transpose(1, 2), vr.transpose(1, 2), attn_mask=allowed)
    assert rel_err(out, sdpa.transpose(1, 2)) < 1e-5
    assert lse.shape == (2, 4, 7)


def test_reference_row_without_keys_is_zero():
    q, k, v = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)
    out, lse = reference(q, k, v, causal=True)  # rows 0 and 1 see no key (offset -2)
    assert torch.all(out[0, :2] == 0) and torch.isinf(lse[0, 0, :2]).all()
    assert not torch.isnan(out).any()
