"""Run one attention implementation on one problem: check against the reference, then time.

The same function produces compare's table rows and the ladder suite's results rows, so the
two can never disagree about what was measured.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.harness import (
    AttentionProblem,
    check_output,
    empty_output,
    make_inputs,
    poison,
    reference_attention,
)
from kernels.harness.timing import gbps, rotation_count, tflops, time_cuda
from kernels.registry import Runner


@dataclass
class Case:
    """Inputs and reference for one problem, shared by every runner in a comparison."""

    problem: AttentionProblem
    inputs: list[tuple]          # rotation sets of (q, k, v, out)
    reference: torch.Tensor

    @classmethod
    def build(cls, problem: AttentionProblem, seed: int = 0) -> "Case":
        q, k, v = make_inputs(problem, seed=seed)
        ref, _ = reference_attention(q, k, v, causal=problem.causal, scale=problem.softmax_scale)
        sets = [(q, k, v, empty_output(problem))]
        for i in range(1, rotation_count(problem.bytes())):
            sets.append((*make_inputs(problem, seed=seed + i), empty_output(problem)))
        return cls(problem, sets, ref)


def measure(runner: Runner, case: Case, timed: bool = True) -> dict:
    """A results row (docs/design.md schema) for ``runner`` on ``case``."""
    p = case.problem
    row = {"kernel": runner.name, "problem": p.to_dict(), "ms": None, "tflops": None,
           "gbps": None, "rel_err": None, "status": "ok"}
    reason = runner.unsupported(p)
    if reason:
        row["status"] = f"unsupported: {reason}"
        return row
    try:
        launch = runner.prepare(p)
        q, k, v, out = case.inputs[0]
        poison(out)
        produced = launch(q, k, v, out)
        out = out if produced is None else produced  # a peer returns the output it allocated
        torch.cuda.synchronize()
    except Exception as exc:  # a peer's backend may refuse a shape at run time
        if runner.kind == "peer":
            row["status"] = f"unsupported: {runner.name}: {type(exc).__name__}: {str(exc)[:120]}"
            return row
        raise
    check = check_output(out.float(), case.reference)
    row["rel_err"] = None if check.rel_err != check.rel_err else round(check.rel_err, 6)
    if not check.ok:
        row["status"] = f"wrong: {check.reason}"
        return row
    if timed:
        ms = time_cuda(launch, case.inputs)
        row["ms"] = {k: round(ms[k], 5) for k in ("median", "p20", "p80")}
        row["tflops"] = round(tflops(p.flops(), ms["median"]), 2)
        row["gbps"] = round(gbps(p.bytes(), ms["median"]), 1)
    return row
