"""The registry's entry: a named implementation that says what it cannot run and prepares a launch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..harness.problem import AttentionProblem

# launch(q, k, v, out) -> None (wrote out) or the output tensor it allocated itself.
Launch = Callable[..., object]


def no_limits(problem: AttentionProblem) -> None:
    return None


@dataclass(frozen=True)
class Runner:
    name: str
    kind: str  # "rung" | "production" | "peer"
    description: str
    # Why this machine cannot run the problem now (its limits, then what is missing here:
    # a GPU, a built extension, an installed peer); None when it can.
    unsupported: Callable[[AttentionProblem], str | None]
    prepare: Callable[[AttentionProblem], Launch]
    # Why no machine can (dtype, head_dim, shape): the same answer with or without a GPU, so
    # tools.compare refuses a shape on a CPU-only machine as it would on the GPU host.
    limits: Callable[[AttentionProblem], str | None] = no_limits
