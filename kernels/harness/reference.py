"""Reference attention in fp32 (torch, any device) and fp64 (numpy, small cases).

Both follow the conventions of docs/design.md: bottom-right causal alignment (per batch entry
when key lengths are given), GQA head mapping, and rows that see no key produce zeros with
LSE = -inf. The tests, the benchmarks and the notebooks check outputs against them; the
gradient tests differentiate a separate fp64 reference (tests/autograd_reference.py), written
out independently of these.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .quantize import dequantize


def causal_keep_mask(seqlen_q: int, seqlen_k: int, device=None, *, key_len: int | None = None,
                     rows: range | None = None) -> torch.Tensor:
    """Bool [Sq, Sk], True where query i may see key j: j <= i + key_len - Sq (bottom-right
    alignment; ``key_len``, the keys the sequence has, defaults to Sk). ``rows``: only those
    query rows ([len(rows), Sk])."""
    key_len = seqlen_k if key_len is None else key_len
    rows = range(seqlen_q) if rows is None else rows
    row_ids = torch.arange(rows.start, rows.stop, rows.step, device=device).unsqueeze(1)
    cols = torch.arange(seqlen_k, device=device).unsqueeze(0)
    return cols <= row_ids + (key_len - seqlen_q)


def kv_head_for(q_head: int, heads_q: int, heads_kv: int) -> int:
    return q_head // (heads_q // heads_kv)


def _visible_lengths(key_lens, batch: int, seqlen_k: int) -> list[int]:
    """Per batch entry, how many leading keys exist (all ``seqlen_k`` without ``key_lens``)."""
    if key_lens is None:
        return [seqlen_k] * batch
    lens = [int(x) for x in (key_lens.tolist() if hasattr(key_lens, "tolist") else key_lens)]
    if len(lens) != batch or not all(0 <= n <= seqlen_k for n in lens):
        raise ValueError(f"key_lens must be {batch} lengths in [0, {seqlen_k}], got {lens}")
    return lens


def _mask_rows(mask, b: int, r0: int, r1: int, seqlen_k: int):
    """Rows ``r0:r1`` of batch ``b`` of a [B, Sk'] or [B, Sq, Sk'] keep-mask, cut or padded
    (with False) to ``seqlen_k`` keys; [1, Sk] or [rows, Sk]."""
    m = mask[b:b + 1] if mask.dim() == 2 else mask[b, r0:r1]
    m = m[..., :seqlen_k]
    if m.shape[-1] < seqlen_k:
        m = torch.nn.functional.pad(m, (0, seqlen_k - m.shape[-1]), value=False)
    return m


def reference_attention(q, k, v, causal: bool = False, scale: float | None = None, *,
                        mask=None, key_lens=None, max_chunk_elems: int = 1 << 28, dtype=torch.float32):
    """fp32 attention on the inputs' device: returns ``(out [B,Sq,Hq,D] fp32, lse [B,Hq,Sq])``
    (``dtype=torch.float64``: the same in fp64, e.g. to measure an FP8 kernel's total error).

    ``key_lens`` ([B] ints, e.g. the ``seqlens_k`` of a paged cache) hides keys ``j >= key_lens[b]``
    and aligns the causal diagonal to that length (query ``i`` sees ``j <= i + key_lens[b] - Sq``).
    ``mask`` (bool ``[B, Sk]`` or ``[B, Sq, Sk]``, True = keep) hides more keys. Rows that see
    no key give zeros with LSE -inf.

    Works one (batch, kv head group) at a time, and splits the query rows so that the score
    matrix stays under ``max_chunk_elems`` elements (16k x 16k problems fit on one GPU).
    FP8 inputs (``Fp8Tensor``) are dequantized first: the reference sees the kernel's numbers.
    """
    q, k, v = (dequantize(t) for t in (q, k, v))
    shapes_ok = (q.dim() == k.dim() == 4 and k.shape == v.shape and k.shape[0] == q.shape[0]
                 and k.shape[3] == q.shape[3] and k.shape[2] > 0 and q.shape[2] % k.shape[2] == 0)
    if not shapes_ok:
        raise ValueError(f"reference_attention: q [B, Sq, Hq, D] and k, v [B, Sk, Hkv, D] with Hq a "
                         f"multiple of Hkv, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    lens = _visible_lengths(key_lens, batch, seqlen_k)
    if mask is not None:
        mask = mask.to(q.device)
    out = torch.empty(batch, seqlen_q, heads_q, head_dim, dtype=dtype, device=q.device)
    lse = torch.empty(batch, heads_q, seqlen_q, dtype=dtype, device=q.device)
    rows_per_chunk = max(1, max_chunk_elems // max(1, group * seqlen_k))
    keys = torch.arange(seqlen_k, device=q.device).unsqueeze(0)        # [1, Sk]
    for b in range(batch):
        for r0 in range(0, seqlen_q, rows_per_chunk):
            r1 = min(seqlen_q, r0 + rows_per_chunk)
            keep = None                                                  # None: every key
            if lens[b] < seqlen_k:
                keep = keys < lens[b]
            if causal:
                diagonal = causal_keep_mask(seqlen_q, seqlen_k, q.device, key_len=lens[b], rows=range(r0, r1))
                keep = diagonal if keep is None else keep & diagonal
            if mask is not None:
                rows_mask = _mask_rows(mask, b, r0, r1, seqlen_k)
                keep = rows_mask if keep is None else keep & rows_mask
            for hk in range(heads_kv):
                kf = k[b, :, hk].to(dtype)                               # [Sk, D]
                vf = v[b, :, hk].to(dtype)
                heads = slice(hk * group, (hk + 1) * group)
                qf = q[b, r0:r1, heads].to(dtype).transpose(0, 1)        # [G, rows, D]
                s = torch.matmul(qf, kf.t()) * scale                     # [G, rows, Sk]
                if keep is not None:
                    s = s.masked_fill(~keep, float("-inf"))
                row_lse = torch.logsumexp(s, dim=-1)                     # -inf for empty rows
                p = torch.exp(s - row_lse.unsqueeze(-1))
                p = torch.nan_to_num(p, nan=0.0)                         # empty rows: exp(-inf + inf)
                out[b, r0:r1, heads] = torch.matmul(p, vf).transpose(0, 1)
                lse[b, heads, r0:r1] = row_lse
    return out, lse


def reference_attention_numpy(q, k, v, causal: bool = False, scale: float | None = None, *,
                              mask=None, key_lens=None):
    """Plain fp64 loops over (batch, head, row) in numpy: the independent check of the torch
    one (same ``mask`` and ``key_lens`` conventions; FP8 inputs dequantized)."""
    q, k, v = (np.asarray(dequantize(t), dtype=np.float64) for t in (q, k, v))
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    lens = _visible_lengths(key_lens, batch, seqlen_k)
    mask = None if mask is None else np.asarray(mask, dtype=bool)
    out = np.zeros((batch, seqlen_q, heads_q, head_dim))
    lse = np.full((batch, heads_q, seqlen_q), -np.inf)
    for b in range(batch):
        for h in range(heads_q):
            hk = kv_head_for(h, heads_q, heads_kv)
            for i in range(seqlen_q):
                last = min(lens[b], i + lens[b] - seqlen_q + 1) if causal else lens[b]
                keep = None if mask is None else (mask[b] if mask.ndim == 2 else mask[b, i])
                seen = [j for j in range(max(0, last)) if keep is None or j < len(keep) and keep[j]]
                if not seen:
                    continue
                s = k[b, seen, hk] @ q[b, i, h] * scale
                m = s.max()
                w = np.exp(s - m)
                out[b, i, h] = w @ v[b, seen, hk] / w.sum()
                lse[b, h, i] = m + np.log(w.sum())
    return out, lse


# FP8 tensor cores add a k32 step's products to the accumulator in few bits (DeepSeek-V3's report:
# about 14 on the H800): aligned to the largest addend and cut below it. Matched on an H100 by
# torch._scaled_mm's fast accumulation (docs/worklog/k12.md, "Large logits").
FP8_ACCUMULATOR_BITS = 13
FP8_K_STEP = 32


def fp8_tensor_core_scores(q8: torch.Tensor, k8: torch.Tensor, bits: int = FP8_ACCUMULATOR_BITS):
    """``q8 @ k8^T`` ([M, D] x [N, D] of e4m3 values, as floats) as an FP8 tensor core sums it,
    modelled: per k32 step, the accumulator and the step's 32 products aligned to the largest
    magnitude among them, floored to ``bits`` bits below it, then added exactly (float64)."""
    q8, k8 = q8.double(), k8.double()
    acc = torch.zeros(q8.shape[0], k8.shape[0], dtype=torch.float64, device=q8.device)
    for start in range(0, q8.shape[1], FP8_K_STEP):
        step = slice(start, start + FP8_K_STEP)
        addends = torch.cat([acc[..., None], q8[:, None, step] * k8[None, :, step]], dim=-1)
        largest = addends.abs().amax(-1, keepdim=True).clamp_min(1e-300)
        unit = torch.exp2(torch.floor(torch.log2(largest)) - bits)
        acc = (torch.floor(addends / unit) * unit).sum(-1)
    return acc


# Above the largest logit error per unit of fp8_score_error_estimate (below) that the modelled
# sums (fp8_tensor_core_scores) make on normal inputs across head dims and spreads (3.8 at most):
# the estimate is then 1.3-3x the error it meets; tests/test_fp8_attention.py holds it in 1-4x.
FP8_SCORE_ERROR_ENVELOPE = 5.0


def fp8_score_error_estimate(descale_q: float, descale_k: float, head_dim: int, scale: float) -> float:
    """The largest error (nats) an FP8 tensor core's score accumulation is expected to put in a
    softmax logit, from the per-tensor descales alone (no data read): each k32 step floors its
    addends 13 bits below the largest, a product of up to ``448 descale_q * 448 descale_k`` or the
    running sum, which grows with the steps: (head_dim / 32)^1.5 of them, the growth measured;
    times FP8_SCORE_ERROR_ENVELOPE."""
    amax_q, amax_k = 448.0 * descale_q, 448.0 * descale_k
    unit = amax_q * amax_k * scale * 2.0 ** -FP8_ACCUMULATOR_BITS * (head_dim / FP8_K_STEP) ** 1.5
    return FP8_SCORE_ERROR_ENVELOPE * unit


def fp8_attention_model(q, k, v, causal: bool = False, scale: float | None = None, *, block_n: int = 128,
                        max_offset: int = 8, round_p: bool = True, rescale_threshold: float = 0.0,
                        tensor_core_scores: bool = False):
    """The arithmetic of the FP8 rungs (K12) in torch, rounding included: what their output
    should be, not what attention is. ``q, k, v``: ``Fp8Tensor`` (or float) BSHD.

    Scores of the dequantized inputs in fp32; an online softmax over ``block_n``-key tiles in
    the log2 domain; ``P = exp2(s - max + max_offset)`` rounded to e4m3 (``round_p``) for
    P V with fp32 accumulation; the row sum from the fp32 P; ``O / sum`` at the end. With
    ``rescale_threshold`` (log2 units) a row's max moves only when a tile's exceeds it by more
    than that (``OnlineSoftmax``'s lazy rescale), so P reaches up to
    ``2^(max_offset + rescale_threshold)``. The mask
    and GQA as :func:`reference_attention` (rows that see no key: zeros). Returns fp32 BSHD.
    ``tensor_core_scores``: S as the FP8 tensor core sums it (:func:`fp8_tensor_core_scores`,
    ``q`` and ``k`` then ``Fp8Tensor``) instead of exactly: the error large logits carry.
    """
    if tensor_core_scores:
        descale = q.descale * k.descale
        q8, k8 = q.data.float(), k.data.float()
    q, k, v = (dequantize(t).float() for t in (q, k, v))
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    scale_log2 = scale * math.log2(math.e)
    keep = causal_keep_mask(seqlen_q, seqlen_k, q.device) if causal else None
    out = torch.zeros(batch, seqlen_q, heads_q, head_dim, device=q.device)
    for b in range(batch):
        for h in range(heads_q):
            hk = kv_head_for(h, heads_q, heads_kv)
            row_max = torch.full((seqlen_q,), -math.inf, device=q.device)
            row_sum = torch.zeros(seqlen_q, device=q.device)
            acc = torch.zeros(seqlen_q, head_dim, device=q.device)
            for start in range(0, seqlen_k, block_n):
                keys = slice(start, min(start + block_n, seqlen_k))
                if tensor_core_scores:
                    s = (fp8_tensor_core_scores(q8[b, :, h], k8[b, keys, hk]) * descale).float() * scale_log2
                else:
                    s = (q[b, :, h] @ k[b, keys, hk].T) * scale_log2
                if keep is not None:
                    s = s.masked_fill(~keep[:, keys], -math.inf)
                new_max = torch.maximum(row_max, s.max(dim=1).values)
                if rescale_threshold > 0:  # -inf + threshold stays -inf: a first finite score moves it
                    new_max = torch.where(new_max > row_max + rescale_threshold, new_max, row_max)
                base = torch.where(torch.isinf(new_max), 0.0, new_max)   # rows without a key yet
                p = torch.exp2(s - base[:, None] + max_offset)
                factor = torch.exp2(row_max - base)
                row_sum = row_sum * factor + p.sum(dim=1)
                p_used = p.to(torch.float8_e4m3fn).float() if round_p else p
                acc = acc * factor[:, None] + p_used @ v[b, keys, hk]
                row_max = new_max
            out[b, :, h] = torch.where(row_sum[:, None] > 0, acc / row_sum.clamp_min(1e-30)[:, None], 0.0)
    return out
