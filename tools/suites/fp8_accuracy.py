"""The FP8 accuracy suite: how far the FP8 rungs' output is from exact attention, beside the bf16
top rung's, on inputs without and with outliers (FlashAttention-3's accuracy test).

Shapes: the ladder's (16k tokens, 2048 / head_dim heads) at 1k and 4k keys, head_dim 64, 128
and 256, no mask. Inputs: the bf16 problem's draws, ``normal``, with ``outliers`` (0.1% of
the entries get N(0, 10^2) more: ``make_inputs(..., outliers=True)``) or ``large_logits``
(every entry times ``LARGE_LOGIT_MAGNITUDE``: logits in the thousands, nearly one-hot rows),
which the problem's ``inputs`` key records; an FP8 rung runs them quantized per tensor
(``quantize_e4m3``). Errors per row against fp64 references, relative Frobenius:

* ``rel_err``: against the reference on the kernel's own inputs (e4m3: dequantized), i.e. the
  kernel's own error (for FP8, P rounded to e4m3);
* ``rel_err_source``: against the reference on the bf16 source, i.e. what a user of the FP8
  kernel sees, quantization of the inputs included (for the bf16 rung, the same number);

and ``max_err``, the largest error of one element over the largest value of the reference on
the kernel's own inputs: where a few rows go wrong (a near-tie of two keys weighed wrongly)
this one shows it and the Frobenius errors average it away.

Every row is checked (``tolerance``) and then timed once, so it carries a time like any row.
"""

from __future__ import annotations

from kernels.harness.problem import fa3_paper_shapes
from kernels.registry import names, rung_module

SEQLENS = (1024, 4096)
HEAD_DIMS = (128, 64, 256)
INPUTS = ("normal", "outliers", "large_logits")
# Standard deviation of the ``large_logits`` inputs: scores of a few thousand (nats) at every
# head dim, the size outlier heads without a QK norm reach in real models and past it.
LARGE_LOGIT_MAGNITUDE = 30.0
SEED = 0


def fp8_rungs() -> list[str]:
    return [n for n in names("rung") if "e4m3" in rung_module(n).DTYPES]


def bf16_top_rung() -> str:
    """The last rung of the ladder that runs bf16: what an FP8 rung is weighed against."""
    return [n for n in names("rung") if "bf16" in rung_module(n).DTYPES][-1]


def kernels() -> list[str]:
    return fp8_rungs() + [bf16_top_rung()]


def shapes(seqlens=SEQLENS):
    return [p for d in HEAD_DIMS for p in fa3_paper_shapes(d, False, seqlens)]


def row(runner, problem, inputs: str, source, exact, timer, device: str = "cuda") -> dict:
    """One results row: ``runner`` on ``problem`` (bf16, or e4m3 with the source quantized)."""
    import torch

    from kernels.harness import (
        check_output,
        empty_output,
        max_error,
        poison,
        quantize_e4m3,
        reference_attention,
        rel_err,
        tolerance,
    )
    from kernels.harness.timing import gbps, tflops

    out_row = {"kernel": runner.name, "problem": {**problem.to_dict(), "inputs": inputs}, "ms": None,
               "tflops": None, "gbps": None, "rel_err": None, "rel_err_source": None, "max_err": None,
               "status": "ok"}
    reason = runner.unsupported(problem)
    if reason:
        out_row["status"] = f"unsupported: {reason}"
        return out_row
    q, k, v = source if problem.dtype == "bf16" else tuple(quantize_e4m3(t) for t in source)
    own, _ = (exact, None) if problem.dtype == "bf16" else reference_attention(
        q, k, v, causal=problem.causal, scale=problem.softmax_scale, dtype=torch.float64)
    launch = runner.prepare(problem)
    out = empty_output(problem, device=device)
    poison(out)
    produced = launch(q, k, v, out)
    out = out if produced is None else produced
    if device == "cuda":
        torch.cuda.synchronize()
    check = check_output(out.float(), own, tolerance(problem))
    out_row["rel_err"] = round(check.rel_err, 6) if check.rel_err == check.rel_err else None
    out_row["rel_err_source"] = round(rel_err(out.float(), exact), 6)
    out_row["max_err"] = round(max_error(out, own), 6)
    if not check.ok:
        out_row["status"] = f"wrong: {check.reason}"
        return out_row
    ms = timer(launch, [(q, k, v, out)])
    out_row["ms"] = {key: round(ms[key], 5) for key in ("median", "p20", "p80")}
    out_row["tflops"] = round(tflops(problem.flops(), ms["median"]), 2)
    out_row["gbps"] = round(gbps(problem.bytes(), ms["median"]), 1)
    return out_row


# The tools.bench filters this suite applies (bench refuses any other before measuring).
FILTERS = ("kernels", "seqlen")


def run(ctx, device: str = "cuda") -> list[dict]:
    import torch

    from kernels.harness import make_inputs, reference_attention

    selected = ctx.kernels or kernels()
    fp8 = set(fp8_rungs())
    todo = shapes(ctx.seqlens or SEQLENS)
    rows = []
    task = ctx.progress.add_task("fp8 accuracy", total=len(todo) * len(INPUTS) * len(selected))
    for shape in todo:
        for inputs in INPUTS:
            ctx.progress.update(task, description=f"{shape.label()} {inputs}")
            source = make_inputs(shape, seed=SEED, device=device, outliers=inputs == "outliers",
                                 magnitude=LARGE_LOGIT_MAGNITUDE if inputs == "large_logits" else 1.0)
            exact, _ = reference_attention(*source, causal=shape.causal, scale=shape.softmax_scale,
                                           dtype=torch.float64)
            for name in selected:
                problem = shape.with_(dtype="e4m3") if name in fp8 else shape
                rows.append(row(ctx.runner(name), problem, inputs, source, exact, ctx.time, device))
                ctx.progress.advance(task)
            del source, exact
    return rows
