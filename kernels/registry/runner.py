"""The registry's entry: a named implementation that says what it cannot run and prepares a launch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernels.harness.problem import AttentionProblem

# launch(q, k, v, out) -> None (wrote out) or the output tensor it allocated itself.
Launch = Callable[..., object]


@dataclass(frozen=True)
class Runner:
    name: str
    kind: str  # "rung" | "production" | "peer"
    description: str
    unsupported: Callable[[AttentionProblem], str | None]
    prepare: Callable[[AttentionProblem], Launch]
