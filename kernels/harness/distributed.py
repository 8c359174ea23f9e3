"""Run a function on W processes that form one torch.distributed process group: the
context-parallel tests (gloo on CPUs, NCCL on GPUs) and the context_parallel benchmark suite.

Each process is spawned (never forked: CUDA cannot be forked), joins the group through a file
store in a fresh temporary directory, runs ``fn(rank, world_size, *args)`` and hands its return
value back through that directory. A child that raises stops the others and re-raises in the
caller with the child's traceback; a run past its time limit is stopped and raises TimeoutError.
"""

from __future__ import annotations

import datetime
import os
import tempfile
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run_distributed(fn: Callable, world_size: int, args: tuple = (), *, backend: str = "gloo",
                    timeout_s: float = 300.0, threads: int | None = None) -> list:
    """``fn(rank, world_size, *args)`` on ``world_size`` new processes; their return values in
    rank order.

    ``fn`` must be importable by name (a module-level function) and its return value picklable.
    ``backend``: ``"gloo"`` (CPU tensors) or ``"nccl"`` (rank r on GPU r, which is made current
    and bound to the group). ``threads``: torch's intra-op threads per process (keep W
    processes from oversubscribing a small CPU). Collectives inside time out after
    ``timeout_s`` too, so a hung exchange fails instead of blocking.
    """
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise RuntimeError(f"NCCL over {world_size} processes needs {world_size} GPUs, "
                           f"{torch.cuda.device_count()} visible")
    with tempfile.TemporaryDirectory(prefix="run_distributed-") as folder:
        context = mp.start_processes(_child, args=(world_size, backend, folder, timeout_s, threads, fn, args),
                                     nprocs=world_size, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        try:
            while not context.join(timeout=max(0.1, min(5.0, deadline - time.monotonic()))):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{getattr(fn, '__name__', fn)} on {world_size} processes ({backend}) "
                                       f"did not finish within {timeout_s:g} s")
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                    process.join()
        return [torch.load(os.path.join(folder, f"rank{rank}.pt"), weights_only=False)
                for rank in range(world_size)]


def _child(rank: int, world_size: int, backend: str, folder: str, timeout_s: float, threads: int | None,
           fn: Callable, args: tuple) -> None:
    if threads:
        torch.set_num_threads(threads)
    device_id = None
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device_id = torch.device("cuda", rank)
    dist.init_process_group(backend, init_method=f"file://{os.path.join(folder, 'store')}", rank=rank,
                            world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s),
                            device_id=device_id)
    result = fn(rank, world_size, *args)
    # Only after success: tearing down NCCL while peers still wait in a collective can hang.
    dist.destroy_process_group()
    torch.save(result, os.path.join(folder, f"rank{rank}.pt"))
