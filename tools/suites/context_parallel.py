"""The context-parallel suite: one causal sequence sharded across 2, 4 or 8 GPUs
(`kernels.extension.backend.context_parallel`), per-GPU TFLOP/s and scaling efficiency
against the same sequence on one GPU.

Shapes: batch 1, seqlen 32k, 64k, 128k and 256k, 16 query / 16 KV heads, head_dim 128, bf16,
causal (FLOPs: `AttentionProblem.flops()`, the exact causal count). Kernels:

- `attention` (world size 1): `attention()` on the whole sequence on one GPU (the production
  prefill), the baseline;
- `ring-zigzag`: `ring_attention` on zig-zag shards (the load-balanced layout);
- `allgather-kv`: `allgather_kv_attention` on the same shards;
- `ring-contiguous`: `ring_attention` on contiguous shards (the unbalanced layout, to show
  what the zig-zag buys).

World sizes 1, 2, 4, ... up to the GPUs the run uses (`python -m tools.bench --suite
context_parallel --gpus N`, N in GPU_COUNTS; default: the most that are visible), one group
of N spawned processes per world size, NCCL, rank r on GPU r. The file goes to
`results/<gpu>x<N>/context_parallel.json`.

Each row: `tflops` is TFLOP/s per GPU (the sequence's FLOPs / world size / time);
`scaling_efficiency` is that over the one-GPU `attention` row's TFLOP/s at the same seqlen
(1.0 = perfect scaling). Timing: every rank waits at a barrier with its GPU idle, then CUDA
events bracket one whole call; a call's time is the slowest rank's, and `ms` the median over
the repetitions after warm-up (which also sets up NCCL's connections).

Checks before timing, relative Frobenius error <= TOL: the one-GPU row against the fp32
reference (`reference_attention`) on three windows of CHECK_ROWS query rows (start, middle,
end: a window of rows with the keys up to its end is exact under causal masking, and costs a
fraction of the whole reference at 256k); every multi-GPU row, whole, against the one-GPU
`attention()` output of the same inputs computed on rank 0 (the output gathered from every
rank). A wrong answer is recorded, never timed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SEQLENS = (32768, 65536, 131072, 262144)
WORLD_SIZES = (1, 2, 4, 8)
GPU_COUNTS = (2, 4, 8)  # the `--gpus` a run may ask for (tools.bench: a multi-GPU suite)
BASELINE = "attention"
KERNELS = ("ring-zigzag", "allgather-kv", "ring-contiguous")
TOL = 1e-2
CHECK_ROWS = 1024


@dataclass(frozen=True)
class Setup:
    """What one run measures; `run` uses the defaults (the CPU test shrinks it, on gloo)."""

    seqlens: tuple = SEQLENS
    world_sizes: tuple = WORLD_SIZES
    batch: int = 1
    heads_q: int = 16
    heads_kv: int = 16
    head_dim: int = 128
    device: str = "cuda"          # "cuda": NCCL, rank r on GPU r; "cpu": gloo
    warmup: int = 2
    rep_ms: float = 500.0         # timed repetitions: about this long, within [min_reps, max_reps]
    min_reps: int = 5
    max_reps: int = 50
    timeout_s: float = 1200.0     # per world size

    def problem(self, seqlen: int):
        from kernels.harness.problem import AttentionProblem

        return AttentionProblem(batch=self.batch, seqlen_q=seqlen, seqlen_k=seqlen, heads_q=self.heads_q,
                                heads_kv=self.heads_kv, head_dim=self.head_dim, causal=True)


def _row(kernel, problem, world_size, ms=None, err=None, status="ok") -> dict:
    flops = problem.flops()
    return {"kernel": kernel, "problem": {**problem.to_dict(), "world_size": world_size}, "ms": ms,
            "tflops": flops / world_size / (ms["median"] * 1e-3) / 1e12 if ms else None, "gbps": None,
            "rel_err": err, "status": status, "scaling_efficiency": None}


def _failure(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


# ---- inside each spawned process ----------------------------------------------------------------

def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _elapsed_ms(fn, device) -> float:
    """One call of `fn` on every rank, started together: this rank's ms (GPU idle before)."""
    import torch.distributed as dist

    from kernels.harness.timing import elapsed_ms

    _synchronize(device)
    dist.barrier()
    return elapsed_ms(fn, device)


def _slowest(values: list[float], device) -> list[float]:
    """Each value's maximum over the ranks (one all-reduce)."""
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def _time(fn, setup: Setup, device) -> dict:
    """Median (p20, p80) over ranks' slowest of repeated calls; every rank runs the same count."""
    from kernels.harness.timing import summarize

    for _ in range(setup.warmup):
        _elapsed_ms(fn, device)
    estimate = _slowest([_elapsed_ms(fn, device)], device)[0]
    reps = int(min(setup.max_reps, max(setup.min_reps, math.ceil(setup.rep_ms / max(estimate, 1e-3)))))
    return summarize(_slowest([_elapsed_ms(fn, device) for _ in range(reps)], device))


def _agree(value: float, device) -> float:
    """Rank 0's value on every rank (so that all ranks take the same branch); NaN stays NaN."""
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.broadcast(t, src=0)
    return t.item()


def _window_error(out, q, k, v) -> float:
    """Relative error of a causal output against the fp32 reference on three windows of rows."""
    from kernels.harness.checks import rel_err
    from kernels.harness.reference import reference_attention

    seqlen = q.shape[1]
    rows = min(CHECK_ROWS, seqlen)
    errors = []
    for start in sorted({0, (seqlen - rows) // 2, seqlen - rows}):
        stop = start + rows
        ref, _ = reference_attention(q[:, start:stop], k[:, :stop], v[:, :stop], causal=True)
        errors.append(rel_err(out[:, start:stop], ref))
    return max(errors)


def _baseline_rows(setup: Setup, seqlen: int, device) -> list[dict]:
    from kernels.extension.backend.attention import attention
    from kernels.harness.inputs import make_inputs

    problem = setup.problem(seqlen)
    q, k, v = make_inputs(problem, seed=0, device=device)

    def call():
        return attention(q, k, v, causal=True)

    try:
        err = _window_error(call(), q, k, v)
    except Exception as exc:  # noqa: BLE001 (a row, not a crash: the other rows still get measured)
        return [_row(BASELINE, problem, 1, status=f"wrong: {_failure(exc)}")]
    if not err <= TOL:
        return [_row(BASELINE, problem, 1, err=err, status=f"wrong: rel_err {err:.3g} > {TOL}")]
    return [_row(BASELINE, problem, 1, _time(call, setup, device), err)]


def _sharded_rows(setup: Setup, kernels, seqlen: int, rank: int, world: int, device) -> list[dict]:
    from kernels.extension.backend.attention import attention
    from kernels.extension.backend.context_parallel import (
        allgather_kv_attention,
        gather_sequence,
        ring_attention,
        zigzag_shard,
    )
    from kernels.harness.checks import rel_err
    from kernels.harness.inputs import make_inputs

    problem = setup.problem(seqlen)
    if seqlen % (2 * world):
        status = f"unsupported: seqlen {seqlen} is not a multiple of 2 x world size {world}"
        return [_row(kernel, problem, world, status=status) for kernel in kernels]
    q, k, v = make_inputs(problem, seed=0, device=device)  # the same on every rank (same seed)
    reference = attention(q, k, v, causal=True) if rank == 0 else None
    shards = {True: tuple(zigzag_shard(t, rank, world) for t in (q, k, v)),
              False: tuple(t.chunk(world, dim=1)[rank].contiguous() for t in (q, k, v))}
    del q, k, v
    rows = []
    for kernel in kernels:
        zigzag = kernel != "ring-contiguous"
        method = allgather_kv_attention if kernel == "allgather-kv" else ring_attention
        q_local, k_local, v_local = shards[zigzag]

        def call():
            return method(q_local, k_local, v_local, causal=True, zigzag=zigzag)

        # Every rank raises alike (the checks are local or on gathered shapes), so the
        # exception is the row's status on rank 0 and no rank is left waiting.
        try:
            full = gather_sequence(call(), zigzag=zigzag)
        except Exception as exc:  # noqa: BLE001
            rows.append(_row(kernel, problem, world, status=f"wrong: {_failure(exc)}"))
            continue
        err = _agree(rel_err(full, reference) if rank == 0 else 0.0, device)
        del full
        if not err <= TOL:
            rows.append(_row(kernel, problem, world, err=err, status=f"wrong: rel_err {err:.3g} > {TOL}"))
            continue
        rows.append(_row(kernel, problem, world, _time(call, setup, device), err))
    return rows


def _job(rank: int, world: int, setup: Setup, kernels: tuple) -> list[dict] | None:
    """One world size: every seqlen and kernel; rank 0's rows (the others return None)."""
    device = torch.device("cuda", rank) if setup.device == "cuda" else torch.device("cpu")
    rows = []
    for seqlen in setup.seqlens:
        if world == 1:
            rows += _baseline_rows(setup, seqlen, device)
        else:
            rows += _sharded_rows(setup, kernels, seqlen, rank, world, device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows if rank == 0 else None


# ---- the parent -----------------------------------------------------------------------------------

def add_scaling_efficiency(rows: list[dict]) -> list[dict]:
    """Fill each ok row's `scaling_efficiency`: its TFLOP/s per GPU over the one-GPU row's at the
    same seqlen (None where that row is missing or not ok)."""
    baseline = {r["problem"]["seqlen_q"]: r["tflops"] for r in rows
                if r["kernel"] == BASELINE and r["status"] == "ok"}
    for r in rows:
        base = baseline.get(r["problem"]["seqlen_q"])
        if r["status"] == "ok" and base:
            r["scaling_efficiency"] = r["tflops"] / base
    return rows


def measure(setup: Setup, kernels=None, progress=None) -> list[dict]:
    """Every world size of `setup`, one group of spawned processes each; the rows in the
    results schema (docs/design.md) plus `scaling_efficiency`."""
    from kernels.harness.distributed import run_distributed

    kernels = tuple(kernels or KERNELS)
    unknown = set(kernels) - set(KERNELS)
    if unknown:
        raise ValueError(f"unknown kernels {sorted(unknown)}; the context_parallel suite has {KERNELS} "
                         f"(and the one-GPU baseline {BASELINE!r}, always measured)")
    backend = "nccl" if setup.device == "cuda" else "gloo"
    task = progress.add_task("context_parallel", total=len(setup.world_sizes)) if progress else None
    rows = []
    for world in setup.world_sizes:
        if progress:
            progress.update(task, description=f"context_parallel: {world} GPU{'s' if world > 1 else ''}")
        results = run_distributed(_job, world, (setup, kernels), backend=backend, timeout_s=setup.timeout_s,
                                  threads=1 if setup.device == "cpu" else None)
        rows += results[0]
        if progress:
            progress.advance(task)
    return add_scaling_efficiency(rows)


# The tools.bench filters this suite applies (bench refuses any other before measuring).
FILTERS = ("kernels", "seqlen")


def run(ctx) -> list[dict]:
    if torch.cuda.device_count() < ctx.gpus:
        raise RuntimeError(f"the context_parallel suite runs on {ctx.gpus} GPUs; "
                           f"{torch.cuda.device_count()} are visible")
    world_sizes = tuple(w for w in WORLD_SIZES if w <= ctx.gpus)
    setup = Setup(seqlens=tuple(ctx.seqlens or SEQLENS), world_sizes=world_sizes)
    return measure(setup, ctx.kernels, ctx.progress)
