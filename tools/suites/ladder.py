"""The ladder suite: every rung and the peers on the FA3-paper shapes.

Shapes: batch * seqlen = 16k tokens, 2048 / head_dim heads (d64: 32, d128: 16, d256: 8),
seqlen 1k / 2k / 4k / 8k / 16k, causal and not. The FP32 rungs (K1-K3, 5-40 TFLOP/s) run at
head_dim 128 and seqlen 1k, 4k and 16k only: timing them everywhere would take most of the run
for numbers that say nothing new. Every tensor-core rung and every peer runs every shape in its
dtype.

Each shape is measured in bf16 and in e4m3 (FP8 q, k, v with per-tensor descales, bf16 out;
the problem's ``dtype`` says which). A kernel runs the dtypes it takes: the bf16 rungs and the
peers the bf16 problems, an FP8 rung (K12) and cuDNN's FP8 SDPA (``cudnn-fe``) the e4m3 ones,
on the same draws quantized
(``make_inputs``), and each row's ``rel_err`` is against the reference on its own inputs. So
an FP8 row's neighbour at the same shape is the bf16 top rung's and the peers' row: the docs
put them side by side (``tools.report.shape_label``), which is the comparison FP8 is for.
"""

from __future__ import annotations

from kernels.harness.problem import fa3_paper_shapes
from kernels.registry import names, rung_module

SEQLENS = (1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (128, 64, 256)
DTYPES = ("bf16", "e4m3")
PEERS = ("sdpa-flash", "sdpa-cudnn", "fa4", "cudnn-fe")
# The dtypes each peer is timed in (kernels/registry/peers.py): cuDNN through its frontend also
# runs its FP8 SDPA, beside K12 on the same e4m3 draws.
PEER_DTYPES = {"sdpa-flash": ("bf16",), "sdpa-cudnn": ("bf16",), "fa4": ("bf16",),
               "cudnn-fe": ("bf16", "e4m3")}
SCALAR_RUNG_HEAD_DIMS = (128,)
SCALAR_RUNG_SEQLENS = (1024, 4096, 16384)


def problems(head_dims=HEAD_DIMS, seqlens=SEQLENS, dtypes=DTYPES):
    return [p.with_(dtype=dtype) for d in head_dims for causal in (False, True) for dtype in dtypes
            for p in fa3_paper_shapes(d, causal, seqlens)]


def kernels() -> list[str]:
    return names("rung") + list(PEERS)


def is_scalar_rung(name: str) -> bool:
    """A rung without tensor cores (its module offers no tile plans: K1-K3)."""
    return name in names("rung") and "plan" not in getattr(rung_module(name), "KNOBS", ())


def takes_dtype(name: str, problem) -> bool:
    """Whether kernel ``name`` takes ``problem``'s dtype: a rung its ``DTYPES``, a peer its
    ``PEER_DTYPES`` (bf16 where it has none)."""
    dtypes = rung_module(name).DTYPES if name in names("rung") else PEER_DTYPES.get(name, ("bf16",))
    return problem.dtype in dtypes


def runs(name: str, problem) -> bool:
    """Whether the suite times ``name`` on ``problem`` (see the module docstring)."""
    if not takes_dtype(name, problem):
        return False
    if is_scalar_rung(name):
        return problem.head_dim in SCALAR_RUNG_HEAD_DIMS and problem.seqlen_q in SCALAR_RUNG_SEQLENS
    return True


# The tools.bench filters this suite applies (bench refuses any other before measuring).
FILTERS = ("kernels", "seqlen", "head_dim")


def run(ctx) -> list[dict]:
    from tools.measure import Case, measure_all

    selected = ctx.kernels or kernels()
    runners = [ctx.runner(n) for n in selected]
    todo = problems(head_dims=ctx.head_dims or HEAD_DIMS, seqlens=ctx.seqlens or SEQLENS)
    rows = []
    task = ctx.progress.add_task("ladder", total=sum(runs(r.name, p) for p in todo for r in runners))
    for problem in todo:
        chosen = [r for r in runners if runs(r.name, problem)]
        if not chosen:
            continue
        ctx.progress.update(task, description=problem.label())
        case = Case.build(problem)
        rows.extend(measure_all(chosen, case))
        ctx.progress.advance(task, len(chosen))
        del case
    return rows
