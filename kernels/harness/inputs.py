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


def empty_lse(problem: AttentionProblem, device: str | torch.device = "cuda") -> torch.Tensor:
    p = problem
    return torch.empty(p.batch, p.heads_q, p.seqlen_q, dtype=torch.float32, device=device)
