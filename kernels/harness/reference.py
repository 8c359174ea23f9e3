"""Reference attention in fp32 (torch, any device) and fp64 (numpy, small cases).

Both follow DESIGN.md: bottom-right causal alignment, GQA head mapping, and rows that see
no key produce zeros with LSE = -inf.
"""

from __future__ import annotations

import math

import numpy as np
import torch


def causal_keep_mask(seqlen_q: int, seqlen_k: int, device=None) -> torch.Tensor:
    """Bool [Sq, Sk], True where query i may see key j (j <= i + Sk - Sq)."""
    rows = torch.arange(seqlen_q, device=device).unsqueeze(1)
    cols = torch.arange(seqlen_k, device=device).unsqueeze(0)
    return cols <= rows + (seqlen_k - seqlen_q)


def kv_head_for(q_head: int, heads_q: int, heads_kv: int) -> int:
    return q_head // (heads_q // heads_kv)


def reference_attention(q, k, v, causal: bool = False, scale: float | None = None,
                        max_chunk_elems: int = 1 << 28):
    """fp32 attention on the inputs' device: returns ``(out [B,Sq,Hq,D] fp32, lse [B,Hq,Sq])``.

    Works one (batch, kv head group) at a time, and splits the query rows so that the score
    matrix stays under ``max_chunk_elems`` elements (16k x 16k problems fit on one GPU).
    """
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    out = torch.empty(batch, seqlen_q, heads_q, head_dim, dtype=torch.float32, device=q.device)
    lse = torch.empty(batch, heads_q, seqlen_q, dtype=torch.float32, device=q.device)
    rows_per_chunk = max(1, max_chunk_elems // max(1, group * seqlen_k))
    keep_all = causal_keep_mask(seqlen_q, seqlen_k, q.device) if causal else None
    for b in range(batch):
        for hk in range(heads_kv):
            kf = k[b, :, hk].float()                       # [Sk, D]
            vf = v[b, :, hk].float()
            heads = slice(hk * group, (hk + 1) * group)
            for r0 in range(0, seqlen_q, rows_per_chunk):
                r1 = min(seqlen_q, r0 + rows_per_chunk)
                qf = q[b, r0:r1, heads].float().transpose(0, 1)   # [G, rows, D]
                s = torch.matmul(qf, kf.t()) * scale               # [G, rows, Sk]
                if keep_all is not None:
                    s = s.masked_fill(~keep_all[r0:r1], float("-inf"))
                row_lse = torch.logsumexp(s, dim=-1)               # -inf for empty rows
                p = torch.exp(s - row_lse.unsqueeze(-1))
                p = torch.nan_to_num(p, nan=0.0)                   # empty rows: exp(-inf + inf)
                out[b, r0:r1, heads] = torch.matmul(p, vf).transpose(0, 1)
                lse[b, heads, r0:r1] = row_lse
    return out, lse


def reference_attention_numpy(q, k, v, causal: bool = False, scale: float | None = None):
    """Plain fp64 loops over (batch, head) in numpy: the independent check of the torch one."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, heads_kv = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(head_dim) if scale is None else scale
    out = np.zeros((batch, seqlen_q, heads_q, head_dim))
    lse = np.full((batch, heads_q, seqlen_q), -np.inf)
    for b in range(batch):
        for h in range(heads_q):
            hk = kv_head_for(h, heads_q, heads_kv)
            for i in range(seqlen_q):
                last = i + seqlen_k - seqlen_q if causal else seqlen_k - 1
                if last < 0:
                    continue
                s = k[b, : last + 1, hk] @ q[b, i, h] * scale
                m = s.max()
                w = np.exp(s - m)
                out[b, i, h] = w @ v[b, : last + 1, hk] / w.sum()
                lse[b, h, i] = m + np.log(w.sum())
    return out, lse
