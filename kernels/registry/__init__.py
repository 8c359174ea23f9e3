"""Every attention implementation by name: the ladder rungs, the production kernels and the peers.

tools.compare, tools.bench, the tests, the docs and the notebooks all read this one list.
A runner that cannot run a problem says why (``runner.unsupported(problem)``) instead of
failing. ``runner.prepare(problem)`` compiles or sets up and returns ``launch(q, k, v, out)``,
which writes ``out`` in place on the current CUDA stream, or, for an implementation whose API
allocates its own output (a peer), returns that tensor instead: copying it into ``out`` would
time a copy that the implementation's users do not pay.

One module per kind: ``rungs`` (every ``kernels/kN.py``, discovered), ``production`` (the CUDA
kernels behind ``kernels.extension``) and ``peers`` (torch SDPA backends, FlashAttention-4).
The registry imports those layers; none of them imports the registry.
"""

from __future__ import annotations

from functools import cache

from .peers import peer_runners
from .production import production_runners
from .rungs import rung_base, rung_module, rung_names, rung_runners, variant_runner
from .runner import Launch, Runner

__all__ = ["Launch", "Runner", "all_runners", "get", "names", "rung_base", "rung_module", "rung_names"]


@cache
def all_runners() -> dict[str, Runner]:
    runners = rung_runners() + production_runners() + peer_runners()
    return {r.name: r for r in runners}


def names(kind: str | None = None) -> list[str]:
    return [n for n, r in all_runners().items() if kind is None or r.kind == kind]


def get(name: str) -> Runner:
    """The runner called ``name``; ``"k11:rescale_before_pv=True"`` is rung K11 compiled with
    that knob (a lab variant: tools.compare times it beside the others)."""
    if ":" in name:
        return variant_runner(name)
    runners = all_runners()
    if name not in runners:
        raise KeyError(f"unknown kernel {name!r}; known: {', '.join(runners)}")
    return runners[name]
