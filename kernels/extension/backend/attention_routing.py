"""Routing by measurement: which attention backend `attention()` tries first for a call.

A call falls in a bucket (phase, head_dim), the phase being one of

* ``decode``: contiguous KV, one query token or few packed rows (the split-KV decode kernel),
* ``prefill``: contiguous KV, more query rows,
* ``paged-decode`` and ``paged-prefill``: the same on a paged cache; packed ragged queries
  (``cu_seqlens_q``) are always ``paged-prefill``.

For each bucket the recorded benchmark (``results/<gpu>/attention.json``, written by
``python -m tools.bench --suite attention`` on that GPU) ranks the backends: at every measured
shape, each backend's median time is divided by the fastest backend's; a backend's score is the
geometric mean of those ratios over the shapes where it was compared with another (1.0: fastest
everywhere). Backends are tried in score order, then the ones no row compares in the default
order, and last those with a wrong answer recorded in the bucket. A bucket, GPU or file without
measurements keeps the default order (``cuda``, ``fa4``, ``ladder``, ``torch``).

Only rows that time exactly what a backend runs count (``ROW_BACKENDS``): our kernels as
``attention()`` calls them, FlashAttention-4's entry points and the ladder backend's runner.
The ``torch-sdpa-*`` rows are peers: torch SDPA forced onto one kernel (cuDNN, flash). The
torch backend lets torch pick the kernel and masks what needs masking (lengths, pages,
bottom-right causal), which no row times, so ``torch`` stays last. Rows of other variants (the
FP32 ``-scalar`` kernels, CUDA-graph replays) are not what ``attention()`` runs and are ignored.

The routes ship with the package (``routing/<gpu>.json`` beside this module, package data):
``tools.bench --suite attention`` derives them from the results file it writes
(:func:`write_packaged_routes`), and a test holds them to ``results/``, so an installed copy,
which has no ``results/``, routes as the repository does. ``$KERNELS_RESULTS_DIR`` reads a
results root of your own instead (``<dir>/<gpu>/attention.json``). Read once per GPU folder and
cached; this module reads the JSON itself (the production layer imports neither ``tools`` nor
``kernels.registry``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from ..ops import attention as ops

DEFAULT_ORDER = ("cuda", "fa4", "ladder", "torch")
PHASES = ("decode", "prefill", "paged-decode", "paged-prefill")
SUITE = "attention"
RESULTS_DIR = Path(__file__).resolve().parents[3] / "results"  # in a source checkout
# The routes derived from results/<gpu>/attention.json, shipped with the package.
PACKAGED_DIR = Path(__file__).resolve().parent / "routing"
# Another results root (same layout: <dir>/<gpu>/attention.json), e.g. measurements of your own.
RESULTS_ENV_VAR = "KERNELS_RESULTS_DIR"

# Results rows that time what a backend runs for a call: kernel name -> backend.
ROW_BACKENDS = {
    "cuda-decode-split": "cuda",
    "cuda-paged-decode": "cuda",
    "cuda-prefill-tc": "cuda",
    "cuda-paged-prefill": "cuda",
    "fa4": "fa4",
    "fa4-paged-decode": "fa4",
    "fa4-paged-prefill": "fa4",
    "ladder": "ladder",
}


def uses_decode_kernel(seqlen_q: int, group: int) -> bool:
    """Whether the cuda backend runs a dense-query call on the split-KV decode kernel (one
    query, or packed rows (query, head in group) that fit one decode CTA) rather than prefill."""
    return seqlen_q == 1 or seqlen_q * group <= ops.DECODE_TILE_ROWS


def phase_of(seqlen_q: int | None, group: int, paged: bool, packed: bool) -> str:
    """The routing phase of a call (see the module docstring); seqlen_q is unused when packed."""
    if packed:
        return "paged-prefill"
    kind = "decode" if uses_decode_kernel(seqlen_q, group) else "prefill"
    return f"paged-{kind}" if paged else kind


def gpu_folder(gpu_name: str) -> str:
    """'NVIDIA H200' -> 'h200': the folder under results/ that tools.bench writes for this GPU."""
    return gpu_name.lower().replace("nvidia", "").strip().split()[0]


@dataclass(frozen=True)
class Route:
    """The backend order for one bucket and the measurements behind it."""

    phase: str
    head_dim: int
    order: tuple[str, ...]            # tried in this order; the first that can run the call runs it
    slowdown: dict[str, float]        # backend -> geometric mean of time / fastest (1.0 = fastest)
    shapes: int                       # measured shapes in the bucket
    measured: tuple[str, ...] = ()    # backends with a successful row here, in `order`
    wrong: tuple[str, ...] = ()       # backends with a wrong answer recorded here (tried last)
    first_beaten: int = 0             # shapes where order[0] was timed and another backend was faster


def _row_phase(problem: dict) -> str | None:
    try:
        group = problem["heads_q"] // problem["heads_kv"]
        paged, packed = bool(problem.get("paged")), bool(problem.get("ragged"))
        return phase_of(problem.get("seqlen_q"), group, paged, packed)
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def routes_from_results(doc: dict, default_order=DEFAULT_ORDER) -> dict[tuple[str, int], Route]:
    """(phase, head_dim) -> Route from a results document ({"meta": ..., "rows": [...]})."""
    times: dict[tuple[str, int], dict[str, dict[str, float]]] = {}  # bucket -> shape -> backend -> ms
    wrong: dict[tuple[str, int], set[str]] = {}
    for row in doc.get("rows", []):
        backend = ROW_BACKENDS.get(row.get("kernel"))
        problem = row.get("problem") or {}
        phase = _row_phase(problem)
        if backend is None or phase is None or "head_dim" not in problem:
            continue
        bucket = (phase, int(problem["head_dim"]))
        shapes = times.setdefault(bucket, {})
        status = str(row.get("status", ""))
        if status.startswith("wrong"):
            wrong.setdefault(bucket, set()).add(backend)
        if status != "ok" or not (row.get("ms") or {}).get("median"):
            continue
        shape = json.dumps(problem, sort_keys=True)
        best = shapes.setdefault(shape, {})
        best[backend] = min(best.get(backend, math.inf), float(row["ms"]["median"]))
    routes = {}
    for bucket, shapes in times.items():
        ratios: dict[str, list[float]] = {}
        for by_backend in shapes.values():
            if len(by_backend) < 2:
                continue  # one backend alone at a shape compares with nothing
            fastest = min(by_backend.values())
            for backend, ms in by_backend.items():
                ratios.setdefault(backend, []).append(ms / fastest)
        slowdown = {b: math.exp(sum(map(math.log, r)) / len(r)) for b, r in ratios.items()}
        bad = wrong.get(bucket, set())
        ranked = sorted((b for b in slowdown if b not in bad),
                        key=lambda b: (slowdown[b], default_order.index(b)))
        rest = [b for b in default_order if b not in ranked and b not in bad]
        last = [b for b in default_order if b in bad]
        order = tuple(ranked + rest + last)
        timed = {b for by_backend in shapes.values() for b in by_backend}
        beaten = sum(1 for t in shapes.values() if order[0] in t and min(t.values()) < t[order[0]])
        routes[bucket] = Route(bucket[0], bucket[1], order, slowdown, len(shapes),
                               tuple(b for b in order if b in timed), tuple(last), beaten)
    return routes


def results_dir() -> Path | None:
    """$KERNELS_RESULTS_DIR, or None: the packaged routes."""
    env = os.environ.get(RESULTS_ENV_VAR)
    return Path(env) if env else None


def routes(gpu: str) -> dict[tuple[str, int], Route]:
    """The routes of ``gpu``: the packaged ones, or from $KERNELS_RESULTS_DIR where it is set."""
    return _routes_under(gpu, os.environ.get(RESULTS_ENV_VAR))


@functools.cache  # attention() asks on every call: no Path built per call, only this lookup
def _routes_under(gpu: str, results_env: str | None) -> dict[tuple[str, int], Route]:
    return load_routes(gpu, Path(results_env)) if results_env else packaged_routes(gpu)


def clear_caches() -> None:
    """Forget the routes read so far (the next call reads the files again)."""
    _routes_under.cache_clear()
    load_routes.cache_clear()
    packaged_routes.cache_clear()


def routes_document(routes: dict[tuple[str, int], Route], meta: dict) -> dict:
    """The packaged form of ``routes``: the results file's provenance and one entry per bucket."""
    keep = ("gpu", "driver", "cuda", "torch", "commit", "date")
    return {"meta": {k: meta[k] for k in keep if k in meta},
            "routes": [dataclasses.asdict(route) for route in ordered(routes)]}


def write_packaged_routes(gpu: str, root: Path = RESULTS_DIR) -> Path | None:
    """Derive ``routing/<gpu>.json`` from ``<root>/<gpu>/attention.json`` (tools.bench calls it
    after recording the attention suite); None where that file gives no routes."""
    path = root / gpu / f"{SUITE}.json"
    found = load_routes(gpu, root)
    if not found:
        return None
    PACKAGED_DIR.mkdir(exist_ok=True)
    out = PACKAGED_DIR / f"{gpu}.json"
    out.write_text(json.dumps(routes_document(found, json.loads(path.read_text())["meta"]), indent=1) + "\n")
    return out


@functools.cache
def packaged_routes(gpu: str) -> dict[tuple[str, int], Route]:
    """The routes shipped for ``gpu`` ({} where none: the default order)."""
    path = PACKAGED_DIR / f"{gpu}.json"
    if not path.is_file():
        return {}
    routes = {}
    for entry in json.loads(path.read_text())["routes"]:
        route = Route(**{**entry, "order": tuple(entry["order"]), "measured": tuple(entry["measured"]),
                         "wrong": tuple(entry["wrong"])})
        routes[(route.phase, route.head_dim)] = route
    return routes


@functools.cache
def load_routes(gpu: str, root: Path) -> dict[tuple[str, int], Route]:
    """Routes from <root>/<gpu>/attention.json, cached. No file: {} (the default order). A file
    that cannot be read or that was measured on another GPU warns once and gives {} too."""
    path = root / gpu / f"{SUITE}.json"
    if not path.is_file():
        return {}
    try:
        doc = json.loads(path.read_text())
        measured_on = gpu_folder(doc["meta"]["gpu"])
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        warnings.warn(f"attention routing: cannot read {path} ({type(exc).__name__}: {exc}); "
                      f"using the default order {DEFAULT_ORDER}", RuntimeWarning, stacklevel=2)
        return {}
    if measured_on != gpu:
        warnings.warn(f"attention routing: {path} was measured on {doc['meta']['gpu']!r}, not a {gpu} GPU; "
                      f"using the default order {DEFAULT_ORDER}", RuntimeWarning, stacklevel=2)
        return {}
    return routes_from_results(doc)


def ordered(routes: dict[tuple[str, int], Route]) -> list[Route]:
    """The routes by phase (PHASES order), then head_dim."""
    return sorted(routes.values(), key=lambda r: (PHASES.index(r.phase), r.head_dim))


def routing_table(gpu: str, root: Path | None = None) -> list[Route]:
    """Every measured bucket of ``gpu`` (a results folder such as "h200"), by phase and head_dim:
    from the results root ``root`` (or $KERNELS_RESULTS_DIR) where given, else the packaged routes."""
    root = Path(root) if root is not None else results_dir()
    return ordered(load_routes(gpu, root) if root is not None else packaged_routes(gpu))
