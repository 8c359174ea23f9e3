"""Run attention implementations on one problem: check each against the reference, then time
them together, interleaved (:func:`fastest_rounds`).

The same functions produce compare's table rows and the ladder suite's results rows, so the
two can never disagree about what was measured.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from kernels.harness import (
    AttentionProblem,
    check_output,
    empty_output,
    make_inputs,
    poison,
    reference_attention,
    tolerance,
)
from kernels.harness.timing import gbps, rotation_count, tflops, time_cuda
from kernels.registry import Launch, Runner


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


# Each kernel is timed in TIMING_ROUNDS rounds of ROUND_MS, interleaved with the other kernels
# of the same problem, and keeps its fastest round: a slow spell of the GPU (clocks, power)
# then costs one round of every kernel instead of the one kernel that happened to be running.
TIMING_ROUNDS = 3
ROUND_MS = 100.0


def fastest_rounds(launches: dict[str, Callable[[], dict]], rounds: int) -> dict[str, dict]:
    """``{name: timing}``: call every ``launches[name]()`` (one timing round, ms {median, ...})
    ``rounds`` times, interleaved (a, b, c, a, b, c, ...), and keep each name's round with the
    lowest median."""
    best: dict[str, dict] = {}
    for _ in range(rounds):
        for name, timed_round in launches.items():
            ms = timed_round()
            if name not in best or ms["median"] < best[name]["median"]:
                best[name] = ms
    return best


def measure(runner: Runner, case: Case, timed: bool = True) -> dict:
    """A results row (docs/design.md schema) for ``runner`` on ``case``."""
    return measure_all([runner], case, rounds=TIMING_ROUNDS if timed else 0)[0]


def measure_all(runners: Sequence[Runner], case: Case, rounds: int = TIMING_ROUNDS) -> list[dict]:
    """Results rows for every runner on ``case``: each is checked against the reference once,
    then the correct ones are timed together (:func:`fastest_rounds`; ``rounds=0``: not timed)."""
    checked = [_prepare_and_check(r, case) for r in runners]
    launches = {row["kernel"]: functools.partial(time_cuda, launch, case.inputs, rep_ms=ROUND_MS)
                for row, launch in checked if launch is not None}
    best = fastest_rounds(launches, rounds) if rounds else {}
    p = case.problem
    for row, _ in checked:
        ms = best.get(row["kernel"])
        if ms is not None:
            row["ms"] = {k: round(ms[k], 5) for k in ("median", "p20", "p80")}
            row["tflops"] = round(tflops(p.flops(), ms["median"]), 2)
            row["gbps"] = round(gbps(p.bytes(), ms["median"]), 1)
    return [row for row, _ in checked]


def _prepare_and_check(runner: Runner, case: Case) -> tuple[dict, Launch | None]:
    """The row without timings, and the launch to time (None: unsupported, refused or wrong)."""
    p = case.problem
    row = {"kernel": runner.name, "problem": p.to_dict(), "ms": None, "tflops": None,
           "gbps": None, "rel_err": None, "status": "ok"}
    reason = runner.unsupported(p)
    if reason:
        row["status"] = f"unsupported: {reason}"
        return row, None
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
            return row, None
        raise
    check = check_output(out.float(), case.reference, tolerance(p))  # e4m3: against the dequantized inputs
    row["rel_err"] = None if check.rel_err != check.rel_err else round(check.rel_err, 6)
    if not check.ok:
        row["status"] = f"wrong: {check.reason}"
        return row, None
    return row, launch
