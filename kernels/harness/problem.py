"""The attention problem: shapes, conventions and exact FLOP / byte counts.

Conventions (docs/design.md): tensors are BSHD, ``q [B, Sq, Hq, D]``, ``k, v [B, Sk, Hkv, D]``;
scale defaults to 1/sqrt(D); q head ``h`` reads kv head ``h // (Hq // Hkv)``; causal masking
is bottom-right aligned (query ``i`` sees keys ``j <= i + Sk - Sq``).

dtype ``e4m3``: q, k, v are FP8 E4M3 tensors with a per-tensor descale each
(``kernels.harness.quantize.Fp8Tensor``), the output is bf16 (``out_dtype``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import numpy as np

# name -> (torch dtype attribute, bytes per element)
DTYPES = {"bf16": ("bfloat16", 2), "fp16": ("float16", 2), "e4m3": ("float8_e4m3fn", 1)}
# The output's dtype where it is not the inputs': FP8 attention writes bf16.
OUT_DTYPES = {"e4m3": "bf16"}


@dataclass(frozen=True)
class AttentionProblem:
    batch: int = 1
    seqlen_q: int = 1024
    seqlen_k: int = 1024
    heads_q: int = 16
    heads_kv: int = 16
    head_dim: int = 128
    causal: bool = False
    dtype: str = "bf16"
    scale: float | None = None

    def __post_init__(self):
        for name in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.heads_q % self.heads_kv:
            raise ValueError(
                f"heads_q ({self.heads_q}) must be a multiple of heads_kv ({self.heads_kv})"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if not isinstance(self.causal, (bool, np.bool_)):
            # any other value would be taken for its truth: a mask nobody asked for
            raise ValueError(f"causal must be a bool, got {self.causal!r}")
        if self.scale is not None and (isinstance(self.scale, (bool, np.bool_))
                                       or not isinstance(self.scale, (int, float, np.floating, np.integer))):
            raise ValueError(f"scale must be a number, got {self.scale!r}")
        # The kernels take the row max over unscaled scores (see kernels/cute/softmax.py) and
        # scale in float32 by scale * log2(e): finite and nonzero there.
        f32 = np.finfo(np.float32)
        log2_scale = None if self.scale is None else self.scale * math.log2(math.e)
        if self.scale is not None and not (math.isfinite(self.scale) and self.scale > 0 and
                                           float(f32.smallest_subnormal) <= log2_scale <= float(f32.max)):
            raise ValueError(f"scale must be a positive number whose scale * log2(e) is a nonzero finite "
                             f"float32, got {self.scale!r}")

    # ---- derived quantities -------------------------------------------------------------
    @property
    def softmax_scale(self) -> float:
        return self.scale if self.scale is not None else 1.0 / math.sqrt(self.head_dim)

    @property
    def group_size(self) -> int:
        """Query heads per kv head (1 without GQA)."""
        return self.heads_q // self.heads_kv

    @property
    def causal_offset(self) -> int:
        """Query row i sees keys j <= i + causal_offset (bottom-right alignment)."""
        return self.seqlen_k - self.seqlen_q

    @property
    def element_size(self) -> int:
        return DTYPES[self.dtype][1]

    @property
    def torch_dtype(self):
        import torch

        return getattr(torch, DTYPES[self.dtype][0])

    @property
    def out_dtype(self) -> str:
        """The output's dtype: the inputs' one, except bf16 for e4m3 inputs."""
        return OUT_DTYPES.get(self.dtype, self.dtype)

    @property
    def out_torch_dtype(self):
        import torch

        return getattr(torch, DTYPES[self.out_dtype][0])

    def keys_seen_per_row(self) -> np.ndarray:
        """Number of keys each query row attends to (int64, length seqlen_q)."""
        rows = np.arange(self.seqlen_q, dtype=np.int64)
        if not self.causal:
            return np.full_like(rows, self.seqlen_k)
        return np.clip(rows + self.causal_offset + 1, 0, self.seqlen_k)

    def visible_pairs(self) -> int:
        """(query, key) pairs computed by definition, for one (batch, head)."""
        return int(self.keys_seen_per_row().sum())

    def flops(self) -> int:
        """4 * D per visible pair (2 for S = QK^T, 2 for O = PV), over all batches and heads."""
        return 4 * self.head_dim * self.batch * self.heads_q * self.visible_pairs()

    def bytes(self) -> int:
        """Each input read once, the output written once (no LSE)."""
        q_or_o = self.batch * self.seqlen_q * self.heads_q * self.head_dim
        k_and_v = 2 * self.batch * self.seqlen_k * self.heads_kv * self.head_dim
        return (q_or_o + k_and_v) * self.element_size + q_or_o * DTYPES[self.out_dtype][1]

    # ---- naming / serialisation ----------------------------------------------------------
    def label(self) -> str:
        seq = f"{self.seqlen_q}" if self.seqlen_q == self.seqlen_k else f"{self.seqlen_q}/{self.seqlen_k}"
        heads = f"{self.heads_q}" if self.heads_q == self.heads_kv else f"{self.heads_q}/{self.heads_kv}"
        text = f"b{self.batch} s{seq} h{heads} d{self.head_dim}"
        if self.causal:
            text += " causal"
        if self.dtype != "bf16":
            text += f" {self.dtype}"
        return text

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["scale"] is None:
            del d["scale"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "AttentionProblem":
        return cls(**d)

    def with_(self, **changes) -> "AttentionProblem":
        return replace(self, **changes)


def fa3_paper_shapes(head_dim: int = 128, causal: bool = False, seqlens=(1024, 4096, 16384),
                     tokens: int = 16384, hidden: int = 2048) -> list[AttentionProblem]:
    """The FlashAttention-3 paper's benchmark set: batch * seqlen = 16k tokens, 2048 / D heads."""
    heads = hidden // head_dim
    return [
        AttentionProblem(batch=max(1, tokens // s), seqlen_q=s, seqlen_k=s, heads_q=heads,
                         heads_kv=heads, head_dim=head_dim, causal=causal)
        for s in seqlens
    ]
