"""The gradient reference of the attention tests (CPU and GPU): attention written out in fp64,
independent of SDPA and of the kernels. Not a test module; the tests import it from here."""

from __future__ import annotations

import torch


def reference_fp64(q, k, v, causal, scale=None, key_lens=None):
    """Attention written out in fp64 (softmax with the masks applied before the max, rows that
    see no key giving zeros), differentiable: the gradient reference, independent of SDPA."""
    q, k, v = (t.double() for t in (q, k, v))
    batch, seqlen_q, heads_q, head_dim = q.shape
    seqlen_k, group = k.shape[1], heads_q // k.shape[2]
    k, v = (t.repeat_interleave(group, dim=2) for t in (k, v))
    scale = head_dim ** -0.5 if scale is None else scale
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    device = q.device
    lens = torch.full((batch,), seqlen_k, device=device) if key_lens is None else key_lens.to(device).long()
    keys = torch.arange(seqlen_k, device=device).view(1, 1, 1, -1)
    keep = keys < lens.view(-1, 1, 1, 1)
    if causal:
        rows = torch.arange(seqlen_q, device=device).view(1, 1, -1, 1)
        keep = keep & (keys <= rows + lens.view(-1, 1, 1, 1) - seqlen_q)
    scores = scores.masked_fill(~keep, float("-inf"))
    row_max = scores.amax(-1, keepdim=True).detach()
    weights = torch.exp(scores - torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)))
    probs = weights / weights.sum(-1, keepdim=True).clamp_min(1e-300)
    return torch.einsum("bhqk,bkhd->bqhd", probs, v)
