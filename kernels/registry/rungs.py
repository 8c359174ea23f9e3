"""The ladder: every kernels/kN.py module, discovered from the package (no list to keep in sync)."""

from __future__ import annotations

import importlib
import pkgutil
import re

from kernels.harness.problem import AttentionProblem

from .runner import Launch, Runner

RUNG_PATTERN = re.compile(r"^k(\d+)$")


def rung_names() -> list[str]:
    """k1, k2, ... in ladder order."""
    import kernels

    found = [m.name for m in pkgutil.iter_modules(kernels.__path__) if RUNG_PATTERN.match(m.name)]
    return sorted(found, key=lambda n: int(RUNG_PATTERN.match(n).group(1)))


def rung_module(name: str):
    return importlib.import_module(f"kernels.{name}")


def rung_runner(name: str) -> Runner:
    def unsupported(problem: AttentionProblem) -> str | None:
        return rung_module(name).can_implement(problem)

    def prepare(problem: AttentionProblem) -> Launch:
        module = rung_module(name)
        compiled = module.compile_kernel(problem)
        return lambda q, k, v, out: module.run_kernel(compiled, q, k, v, out)

    idea = getattr(rung_module(name), "IDEA", "")
    return Runner(name, "rung", idea, unsupported, prepare)


def rung_runners() -> list[Runner]:
    return [rung_runner(n) for n in rung_names()]
