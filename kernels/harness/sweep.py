"""The correctness sweep an attention kernel is held to on the GPU.

Odd and tile-edge sizes (1, 63, 64, 65), a long odd one (1000) and a long one (4096) for both
sequence lengths, causal with Sq != Sk both ways, GQA with batch > 1, an explicit scale, large
logits (inputs x20 make every softmax row nearly one-hot and stress the running max), and
fp16 where asked. With e4m3 asked, every bf16 case again in e4m3 (FP8 inputs, the same draws
quantized), plus inputs with outliers (a few large entries: FlashAttention-3's accuracy test).
A kernel that cannot run a case says why (``can_implement``) and the test skips it, so the
sweep lists every head dim any kernel supports.
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass, replace

from .problem import AttentionProblem

SEQLENS = (1, 63, 64, 65, 1000, 4096)
HEAD_DIMS = (64, 128, 256)
LARGE_LOGITS = 20.0


@dataclass(frozen=True)
class SweepCase:
    problem: AttentionProblem
    magnitude: float = 1.0  # inputs are standard normal times this
    outliers: bool = False  # make_inputs(..., outliers=True)

    @property
    def id(self) -> str:
        """A pytest id: the problem's label, plus the scale, the magnitude and outliers when set."""
        text = self.problem.label().replace(" ", "-")
        if self.problem.scale is not None:
            text += f"-scale{self.problem.scale:g}"
        if self.magnitude != 1.0:
            text += f"-x{self.magnitude:g}"
        if self.outliers:
            text += "-outliers"
        return text

    @property
    def seed(self) -> int:
        """A seed of its own per case, stable across runs and processes."""
        return zlib.crc32(self.id.encode())


def attention_sweep(head_dims=HEAD_DIMS, dtypes=("bf16",)) -> list[SweepCase]:
    """Every case for each head dim in ``head_dims`` (bf16; fp16 cases too if in ``dtypes``;
    with "e4m3", the bf16 cases in e4m3 and outlier inputs)."""
    cases = bf16_and_fp16_cases(head_dims, dtypes)
    if "e4m3" in dtypes:
        bf16 = [c for c in cases if c.problem.dtype == "bf16"]
        cases += [replace(c, problem=c.problem.with_(dtype="e4m3")) for c in bf16]
        for d in head_dims:
            for causal in (False, True):
                for sq, sk in ((1000, 1000), (65, 4096)):
                    problem = AttentionProblem(2, sq, sk, 4, 2, d, causal=causal, dtype="e4m3")
                    cases.append(SweepCase(problem, outliers=True))
    return cases


def bf16_and_fp16_cases(head_dims, dtypes) -> list[SweepCase]:
    cases = []
    for d in head_dims:
        # every (seqlen_q, seqlen_k) pair, causal and not; large logits on the Sk = 1000 slice
        for (sq, sk), causal in itertools.product(itertools.product(SEQLENS, SEQLENS), (False, True)):
            problem = AttentionProblem(1, sq, sk, 2, 2, d, causal=causal)
            cases.append(SweepCase(problem, LARGE_LOGITS if sk == 1000 else 1.0))
        for causal in (False, True):
            # GQA 4:1 with batch 3, the causal diagonal off the square
            for sq, sk in ((65, 1000), (1000, 65), (257, 257), (4096, 4096)):
                cases.append(SweepCase(AttentionProblem(3, sq, sk, 8, 2, d, causal=causal)))
            # many heads per kv head (16:4), large logits
            for sq, sk in ((1, 1000), (65, 64), (1000, 1000)):
                cases.append(SweepCase(AttentionProblem(3, sq, sk, 16, 4, d, causal=causal), LARGE_LOGITS))
            if "fp16" in dtypes:
                for sq, sk in ((65, 1000), (1000, 65), (1000, 1000)):
                    problem = AttentionProblem(3, sq, sk, 16, 4, d, causal=causal, dtype="fp16")
                    cases.append(SweepCase(problem))
        # an explicit softmax scale with large logits
        cases.append(SweepCase(AttentionProblem(2, 333, 777, 4, 1, d, causal=True, scale=0.3), LARGE_LOGITS))
    return cases
