"""The ladder: every kernels/kN.py module, discovered from the package (no list to keep in sync)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import pkgutil
import re

from ..harness.problem import AttentionProblem
from .runner import Launch, Runner

RUNG_PATTERN = re.compile(r"^k(\d+)$")
# The rung each rung changes where that is not the one before it in the ladder: its page and
# notebook compare with it, and ``diff kernels/<base>.py kernels/<rung>.py`` reads as its
# worklog entry (K13 builds on K11, not on the FP8 rung K12).
BASES = {"k13": "k11"}
# The rungs' package: `kernels` in a checkout, the wheel's import name where installed.
PACKAGE = __package__.rpartition(".")[0]


def rung_names() -> list[str]:
    """k1, k2, ... in ladder order."""
    package = importlib.import_module(PACKAGE)
    found = [m.name for m in pkgutil.iter_modules(package.__path__) if RUNG_PATTERN.match(m.name)]
    return sorted(found, key=lambda n: int(RUNG_PATTERN.match(n).group(1)))


def rung_module(name: str):
    return importlib.import_module(f"{PACKAGE}.{name}")


def rung_base(name: str) -> str | None:
    """The rung whose code rung ``name`` changes: ``BASES`` where it names one, else the rung
    before it (None for the first)."""
    if name in BASES:
        return BASES[name]
    names = rung_names()
    index = names.index(name)
    return names[index - 1] if index > 0 else None


# Fields of a Hopper rung's TilePlan (kernels/cute/fmha.py) that a variant may set one by one
# (``k11:block_n=160``): the rung's default plan at the problem's head_dim, with those replaced.
PLAN_FIELDS = ("consumer_warpgroups", "block_n", "num_stages", "producer_warps")


def _compile_knobs(module, problem: AttentionProblem, knobs: dict) -> dict:
    """``knobs`` with any TilePlan fields folded into ``plan`` (the default at the head_dim)."""
    fields = {k: v for k, v in knobs.items() if k in PLAN_FIELDS}
    if not fields:
        return knobs
    rest = {k: v for k, v in knobs.items() if k not in PLAN_FIELDS}
    return {**rest, "plan": dataclasses.replace(module.TILE_CONFIGS[problem.head_dim], **fields)}


def rung_runner(name: str, **knobs) -> Runner:
    """The runner of rung ``name``, compiled with ``knobs`` (its constructor's keyword arguments,
    ``KNOBS``, or fields of its tile plan, ``PLAN_FIELDS``) where given: then named
    ``k11:rescale_before_pv=True`` (:func:`variant_runner`)."""

    def unsupported(problem: AttentionProblem) -> str | None:
        module = rung_module(name)
        reason = module.can_implement(problem)
        if reason is None and knobs:  # a variant: its knobs, for this problem
            reason = module.knob_error(problem, **_compile_knobs(module, problem, knobs))
        return reason

    def prepare(problem: AttentionProblem) -> Launch:
        module = rung_module(name)
        compiled = module.compile_kernel(problem, **_compile_knobs(module, problem, knobs))
        return lambda q, k, v, out: module.run_kernel(compiled, q, k, v, out)

    idea = getattr(rung_module(name), "IDEA", "")
    label = ",".join(f"{knob}={value!r}" for knob, value in knobs.items())
    return Runner(f"{name}:{label}" if knobs else name, "rung", idea, unsupported, prepare,
                  limits=unsupported)


def variant_runner(spec: str) -> Runner:
    """``"k11:rescale_before_pv=True,pingpong=False"`` -> that rung compiled with those knobs
    (values are Python literals; names must be in the rung's ``KNOBS``, or, for a rung with a
    ``plan`` knob, fields of its tile plan: ``"k11:block_n=160,num_stages=3"``)."""
    name, _, assignments = spec.partition(":")
    if not RUNG_PATTERN.match(name) or name not in rung_names():
        raise KeyError(f"{spec!r}: knobs are for the ladder's rungs ({', '.join(rung_names())}), "
                       f"not {name!r}")
    allowed = getattr(rung_module(name), "KNOBS", ())
    if "plan" in allowed:
        allowed = (*allowed, *PLAN_FIELDS)
    knobs = {}
    if not assignments.strip():
        raise KeyError(f"{spec!r}: give knob=value after the colon, with a knob among "
                       f"{list(allowed) or 'none'}")
    for assignment in filter(None, assignments.split(",")):
        knob, eq, text = assignment.partition("=")
        if not eq or knob not in allowed:
            raise KeyError(f"{spec!r}: {name} takes knob=value with a knob among {list(allowed) or 'none'}")
        if knob in knobs:
            raise KeyError(f"{spec!r}: {knob} is set twice")
        try:
            knobs[knob] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise KeyError(f"{spec!r}: the value of {knob} must be a Python literal, got {text!r}") from None
    return rung_runner(name, **knobs)


def rung_runners() -> list[Runner]:
    return [rung_runner(n) for n in rung_names()]
