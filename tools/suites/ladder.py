"""The ladder suite: every rung and the peers on the FA3-paper shapes, head_dim 128.

Shapes: batch * seqlen = 16k tokens, 16 heads, seqlen 1k / 2k / 4k / 8k / 16k, causal and not.
"""

from __future__ import annotations

from kernels.harness.problem import fa3_paper_shapes
from kernels.registry import names

SEQLENS = (1024, 2048, 4096, 8192, 16384)
PEERS = ("sdpa-flash", "sdpa-cudnn", "fa4")


def problems(head_dim: int = 128, seqlens=SEQLENS):
    return [p for causal in (False, True) for p in fa3_paper_shapes(head_dim, causal, seqlens)]


def kernels() -> list[str]:
    return names("rung") + list(PEERS)


def run(ctx) -> list[dict]:
    from tools.measure import Case, measure

    selected = ctx.kernels or kernels()
    runners = [ctx.runner(n) for n in selected]
    todo = problems(seqlens=ctx.seqlens or SEQLENS)
    rows = []
    task = ctx.progress.add_task("ladder", total=len(todo) * len(runners))
    for problem in todo:
        case = Case.build(problem)
        for runner in runners:
            ctx.progress.update(task, description=f"{runner.name:>10} {problem.label()}")
            rows.append(measure(runner, case))
            ctx.progress.advance(task)
        del case
    return rows
