"""Every attention implementation by name: the ladder rungs, the production kernels and the peers.

tools.compare, tools.bench, the tests, the docs and the notebooks all read this one list.
A runner that cannot run a problem says why (``runner.unsupported(problem)``) instead of
failing. ``runner.prepare(problem)`` compiles or sets up and returns ``launch(q, k, v, out)``,
which writes ``out`` in place on the current CUDA stream.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from kernels.harness.problem import AttentionProblem

Launch = Callable[..., None]


@dataclass(frozen=True)
class Runner:
    name: str
    kind: str  # "rung" | "production" | "peer"
    description: str
    unsupported: Callable[[AttentionProblem], str | None]
    prepare: Callable[[AttentionProblem], Launch]


# ---- the ladder: every kernels/kN.py module --------------------------------------------------
RUNG_PATTERN = re.compile(r"^k(\d+)$")


def rung_names() -> list[str]:
    """k1, k2, ... in ladder order, discovered from the package (no list to keep in sync)."""
    import kernels

    found = [m.name for m in pkgutil.iter_modules(kernels.__path__) if RUNG_PATTERN.match(m.name)]
    return sorted(found, key=lambda n: int(RUNG_PATTERN.match(n).group(1)))


def rung_module(name: str):
    return importlib.import_module(f"kernels.{name}")


def _rung_runner(name: str) -> Runner:
    def unsupported(problem: AttentionProblem) -> str | None:
        return rung_module(name).can_implement(problem)

    def prepare(problem: AttentionProblem) -> Launch:
        module = rung_module(name)
        compiled = module.compile_kernel(problem)
        return lambda q, k, v, out: module.run_kernel(compiled, q, k, v, out)

    idea = getattr(rung_module(name), "IDEA", "")
    return Runner(name, "rung", idea, unsupported, prepare)


# ---- peers: torch SDPA backends and FlashAttention-4 ------------------------------------------
def _sdpa_runner(name: str, backend_name: str, description: str) -> Runner:
    def unsupported(problem: AttentionProblem) -> str | None:
        import torch

        if not torch.cuda.is_available():
            return f"{name}: needs a CUDA device"
        return None

    def prepare(problem: AttentionProblem) -> Launch:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right

        backend = getattr(SDPBackend, backend_name)
        gqa = problem.heads_q != problem.heads_kv
        # SDPA's is_causal is top-left aligned; the repository's convention is bottom-right.
        mask = None
        if problem.causal and problem.seqlen_q != problem.seqlen_k:
            mask = causal_lower_right(problem.seqlen_q, problem.seqlen_k)
        is_causal = problem.causal and mask is None

        def launch(q, k, v, out):
            with sdpa_kernel(backend):
                o = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                    is_causal=is_causal, scale=problem.softmax_scale, enable_gqa=gqa)
            out.copy_(o.transpose(1, 2))

        return launch

    return Runner(name, "peer", description, unsupported, prepare)


def _fa4_runner() -> Runner:
    def unsupported(problem: AttentionProblem) -> str | None:
        try:
            import flash_attn.cute.interface  # noqa: F401
        except Exception as exc:  # ImportError, or a CUDA-less import failure
            return f"fa4: flash_attn.cute not importable ({type(exc).__name__})"
        return None

    def prepare(problem: AttentionProblem) -> Launch:
        from flash_attn.cute.interface import flash_attn_func

        # FA4 passes a host-side helper object through the DSL, which warns on every compile.
        warnings.filterwarnings("ignore", message=".*cannot be converted to a JitArgument")

        def launch(q, k, v, out):
            result = flash_attn_func(q, k, v, softmax_scale=problem.softmax_scale,
                                     causal=problem.causal)
            out.copy_(result[0] if isinstance(result, tuple) else result)

        return launch

    return Runner("fa4", "peer", "FlashAttention-4 (CuTe DSL), flash_attn.cute", unsupported, prepare)


def _peer_runners() -> list[Runner]:
    return [
        _sdpa_runner("sdpa-math", "MATH", "torch SDPA, math backend (unfused)"),
        _sdpa_runner("sdpa-flash", "FLASH_ATTENTION", "torch SDPA, FlashAttention-2 backend"),
        _sdpa_runner("sdpa-cudnn", "CUDNN_ATTENTION", "torch SDPA, cuDNN backend"),
        _fa4_runner(),
    ]


def _production_runners() -> list[Runner]:
    # The production layer is optional while csrc grows; when present, its import errors surface.
    if (importlib.util.find_spec("kernels.extension") is None
            or importlib.util.find_spec("kernels.extension.runners") is None):
        return []
    return list(importlib.import_module("kernels.extension.runners").runners())


@cache
def all_runners() -> dict[str, Runner]:
    runners = [_rung_runner(n) for n in rung_names()] + _production_runners() + _peer_runners()
    return {r.name: r for r in runners}


def names(kind: str | None = None) -> list[str]:
    return [n for n, r in all_runners().items() if kind is None or r.kind == kind]


def get(name: str) -> Runner:
    runners = all_runners()
    if name not in runners:
        raise KeyError(f"unknown kernel {name!r}; known: {', '.join(runners)}")
    return runners[name]
