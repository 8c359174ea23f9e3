"""The torch backend of attention(): scaled_dot_product_attention and explicit masks on any
device, paged caches read by gathering each sequence's pages (the fallback where no kernel of
ours or FlashAttention-4's runs a call)."""

from __future__ import annotations

import math

import torch

from .validation import _check_out_lse


def _pages_in_use(page_table, seqlens_k, num_pages: int, page_size: int, length: int):
    """The first ceil(length / page_size) columns of the page table as int64, each sequence's
    entries past its length set to page 0 (any value may stand there), after checking that the
    entries in use name pages of the cache: the torch path reads pages by indexing, where a
    negative id would wrap around and one past the cache fail inside torch (on CUDA, a
    device-side assert). One device->host copy."""
    pages = -(-length // page_size)
    if pages > page_table.shape[1]:  # check_seqlens=False lets such lengths through to here
        capacity = page_table.shape[1] * page_size
        raise ValueError(f"seqlens_k must be in [0, max_pages * page_size = {capacity}], got up to {length}")
    table = page_table[:, :pages].long()
    starts = torch.arange(pages, device=table.device).view(1, -1) * page_size
    in_use = starts < seqlens_k.to(table.device).view(-1, 1)
    bad = in_use & ((table < 0) | (table >= num_pages))
    if bool(bad.any()):
        b, j = bad.nonzero()[0].tolist()
        raise ValueError(f"page_table[{b}, {j}] = {int(table[b, j])} is not a page of the cache "
                         f"(0 .. {num_pages - 1}); sequence {b} holds {int(seqlens_k[b])} keys")
    return torch.where(in_use, table, 0)


def _gather_pages(cache, table, length):
    """[num_pages, page_size, H, D] and a table from _pages_in_use -> [B, length, H, D] (keys
    past seqlens are masked later)."""
    gathered = cache[table]  # [B, pages, page_size, H, D]
    return gathered.reshape(table.shape[0], -1, *cache.shape[2:])[:, :length]


def _no_key(q, heads_q: int, rows: int, batch: int, need_lse: bool):
    """The result for rows that see no key: zeros, LSE -inf ([batch, heads_q, rows])."""
    lse = torch.full((batch, heads_q, rows), float("-inf"), device=q.device) if need_lse else None
    return q.new_zeros((batch, rows, heads_q, q.shape[-1])), lse


def _dense_torch(q, k, v, causal, scale, key_lens, mask, need_lse=True):
    """q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D], key_lens [B] (keys >= len masked). -> out, lse."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
    keys = torch.arange(seqlen_k, device=q.device)
    lens = key_lens.to(q.device).long().view(batch, 1, 1)
    allowed = keys.view(1, 1, -1) < lens  # [B, 1, Sk]
    if causal:
        rows = torch.arange(seqlen_q, device=q.device).view(1, -1, 1)
        allowed = allowed & (keys.view(1, 1, -1) <= rows + lens - seqlen_q)
    allowed = allowed.expand(batch, seqlen_q, seqlen_k)
    if mask is not None:  # at least seqlen_k long (validate_inputs, _check_mask_covers)
        m = mask[..., :seqlen_k]
        allowed = allowed & (m.unsqueeze(1) if m.dim() == 2 else m)
    group = heads_q // heads_kv
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(group, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
    attn_mask = allowed.unsqueeze(1)  # [B, 1, Sq, Sk]
    out = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, attn_mask=attn_mask, scale=scale)
    row_sees_key = allowed.any(-1).unsqueeze(1).unsqueeze(-1)  # [B, 1, Sq, 1]
    out = torch.where(row_sees_key, out, torch.zeros((), dtype=out.dtype, device=out.device))
    if not need_lse:
        return out.transpose(1, 2), None
    scores = (qh.float() @ kh.float().transpose(-1, -2)) * scale
    lse = torch.logsumexp(scores.masked_fill(~attn_mask, float("-inf")), dim=-1)  # [B, Hq, Sq]
    return out.transpose(1, 2), lse


def _sdpa_dense(q, k, v, causal, scale):
    """torch SDPA on q [B, Sq, Hq, D], k / v [B, Sk, Hkv, D] where no key needs masking beyond
    causal with Sq == Sk (top-left = bottom-right): GQA natively, so SDPA's flash, cuDNN or
    efficient kernels (and their backward) can take the call."""
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qh, kh, vh, is_causal=causal, scale=scale,
                                                           enable_gqa=q.shape[2] != k.shape[2])
    return out.transpose(1, 2)


def _check_mask_covers(mask, length: int, longest_q: int | None = None) -> None:
    """The binding's checks of a paged call's mask against the lengths it reads."""
    if mask is None:
        return
    if mask.shape[-1] < length:
        raise ValueError(f"mask last dim ({mask.shape[-1]}) is shorter than the longest seqlens_k ({length})")
    if longest_q is not None and mask.dim() == 3 and mask.shape[1] != longest_q:
        raise ValueError(f"mask [batch, seqlen_q, seqlen_k] needs seqlen_q = {longest_q} (the longest "
                         f"sequence of cu_seqlens_q), got {tuple(mask.shape)}")


def _dequantized(k, v, kv_scales):
    """Gathered K, V [B, Sk, Hkv, D] as they stand: an e4m3 cache's (kv_scales given) times its
    factors ([Hkv] or [1]), in fp32."""
    if kv_scales is None:
        return k, v
    k_scale, v_scale = kv_scales
    return k.float() * k_scale.view(1, 1, -1, 1), v.float() * v_scale.view(1, 1, -1, 1)


def dequantized_pages(k_cache, v_cache, page_table, kv_scales, dtype):
    """The pages an e4m3 cache's ``page_table`` [B, max_pages] names, times the factors, as a
    compact cache of ``dtype`` [B * max_pages, page_size, Hkv, D] with the table that reads it
    (``arange``, [B, max_pages] int32): what the 16-bit prefill kernels take. One pass over
    those pages, no host synchronization (a CUDA graph can hold it). Entries past a sequence's
    length may name any page, or none: they are clamped into the cache, and never read."""
    k_scale, v_scale = kv_scales
    pages = page_table.reshape(-1).long().clamp(0, k_cache.shape[0] - 1)
    k = (k_cache[pages].float() * k_scale.view(1, 1, -1, 1)).to(dtype)
    v = (v_cache[pages].float() * v_scale.view(1, 1, -1, 1)).to(dtype)
    table = torch.arange(pages.numel(), dtype=torch.int32, device=page_table.device).view(page_table.shape)
    return k, v, table


def _paged_torch(q, k_cache, v_cache, causal, scale, mask, page_table, seqlens_k, need_lse, kv_scales=None):
    """q [B, Sq, Hq, D] on a paged cache: each sequence's pages gathered (an e4m3 cache's
    dequantized, the attention then in fp32), then _dense_torch."""
    batch, seqlen_q, heads_q = q.shape[:3]
    length = int(seqlens_k.max()) if batch else 0
    _check_mask_covers(mask, length)
    if length == 0:
        return _no_key(q, heads_q, seqlen_q, batch, need_lse)
    table = _pages_in_use(page_table, seqlens_k, k_cache.shape[0], k_cache.shape[1], length)
    k, v = _dequantized(_gather_pages(k_cache, table, length), _gather_pages(v_cache, table, length),
                        kv_scales)
    o, o_lse = _dense_torch(q if kv_scales is None else q.float(), k, v, causal, scale, seqlens_k, mask,
                            need_lse)
    return o.to(q.dtype), o_lse


def _packed_paged_torch(q, k_cache, v_cache, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q,
                        need_lse, kv_scales=None):
    """Packed q [total_q, Hq, D] (cu_seqlens_q) on a paged cache, one sequence at a time."""
    heads_q = q.shape[1]
    cu, lengths = cu_seqlens_q.tolist(), seqlens_k.tolist()
    longest = max(lengths, default=0)
    _check_mask_covers(mask, longest, max((b - a for a, b in zip(cu, cu[1:])), default=0))
    table = None
    if longest:
        table = _pages_in_use(page_table, seqlens_k, k_cache.shape[0], k_cache.shape[1], longest)
    outs, lses = [], []
    for b, length in enumerate(lengths):
        qb = q[cu[b]:cu[b + 1]].unsqueeze(0)
        if length == 0:
            ob, lb = _no_key(q, heads_q, qb.shape[1], 1, need_lse)
        else:
            mb = None
            if mask is not None:
                mb = mask[b:b + 1] if mask.dim() == 2 else mask[b:b + 1, : cu[b + 1] - cu[b]]
            kb, vb = _dequantized(_gather_pages(k_cache, table[b:b + 1], length),
                                  _gather_pages(v_cache, table[b:b + 1], length), kv_scales)
            ob, lb = _dense_torch(qb if kv_scales is None else qb.float(), kb, vb, causal, scale,
                                  seqlens_k[b:b + 1], mb, need_lse)
            ob = ob.to(q.dtype)
        outs.append(ob[0])
        lses.append(lb[0] if need_lse else None)
    o = torch.cat(outs, dim=0) if outs else q.new_zeros(q.shape)
    o_lse = None
    if need_lse:
        o_lse = torch.cat(lses, dim=1) if lses else torch.empty(heads_q, 0, device=q.device)
    return o, o_lse


def _run_torch(q, k, v, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q, out, lse, kv_scales=None):
    if out is not None or lse is not None:
        _check_out_lse(q, out, lse, cu_seqlens_q is not None)
    seqlen_q, seqlen_k = q.shape[1], k.shape[1]
    if (page_table is None and mask is None and lse is None and seqlen_k > 0
            and (not causal or seqlen_q in (1, seqlen_k))):
        # One query row sees every key under bottom-right causal: no mask at all then.
        o = _sdpa_dense(q, k, v, causal and seqlen_q > 1, scale)
    elif page_table is None:
        lens = torch.full((q.shape[0],), k.shape[1], device=q.device)
        o, o_lse = _dense_torch(q, k, v, causal, scale, lens, mask, lse is not None)
    elif cu_seqlens_q is None:
        o, o_lse = _paged_torch(q, k, v, causal, scale, mask, page_table, seqlens_k, lse is not None,
                                kv_scales)
    else:
        o, o_lse = _packed_paged_torch(q, k, v, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q,
                                       lse is not None, kv_scales)
    if lse is not None:
        lse.copy_(o_lse)
    if out is not None:
        out.copy_(o)
        return out
    return o.contiguous()
