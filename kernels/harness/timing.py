"""GPU timing: median of CUDA-event timings after warm-up, with input rotation.

When one call's working set fits in L2 (50 MB on H100 and H200), timing the same buffers again and
again measures the cache, not HBM. ``time_cuda`` then cycles through enough distinct input
sets to overflow L2 twice.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

# where the device does not report its L2: above the H100 / H200's 50 MB, so that the rotation
# errs towards more input sets
L2_BYTES_FALLBACK = 60 * 1024 * 1024


def l2_bytes() -> int:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or L2_BYTES_FALLBACK)


def rotation_count(working_set_bytes: int, limit: int = 64) -> int:
    """How many distinct input sets make the rotation's footprint exceed twice the L2."""
    if working_set_bytes <= 0:
        return 1
    return max(1, min(limit, -(-2 * l2_bytes() // working_set_bytes)))


def graph_copies(working_set_bytes: int, calls: int) -> int:
    """Input copies for a CUDA graph of ``calls`` calls that read them in turn: the fewest that
    overflow the L2 twice (:func:`rotation_count`) among the divisors of ``calls``, so that the
    calls go round the copies evenly (7 copies for 8 calls would read one twice in a row)."""
    need = rotation_count(working_set_bytes, limit=calls)
    return next(d for d in range(need, calls + 1) if calls % d == 0)


def time_cuda(fn: Callable[..., object], arg_sets: Sequence[tuple] = ((),), *,
              warmup_ms: float = 50.0, rep_ms: float = 300.0, min_reps: int = 10,
              max_reps: int = 1000) -> dict:
    """Time ``fn(*args)`` cycling through ``arg_sets``; returns ms {median, p20, p80, reps}.

    Each launch is bracketed by its own CUDA events on the current stream; the repeat count
    comes from an estimate so that timing takes about ``rep_ms`` of GPU time.
    """
    stream = torch.cuda.current_stream()
    n_sets = len(arg_sets)

    # Warm-up (compiles, module loads, clocks) and a cost estimate.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn(*arg_sets[0])
    torch.cuda.synchronize()
    start.record(stream)
    warm = 0
    while True:
        fn(*arg_sets[warm % n_sets])
        warm += 1
        end.record(stream)
        end.synchronize()
        if start.elapsed_time(end) >= warmup_ms or warm >= max_reps:
            break
    per_call = start.elapsed_time(end) / warm
    reps = int(min(max_reps, max(min_reps, rep_ms / max(per_call, 1e-4))))

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        args = arg_sets[i % n_sets]
        starts[i].record(stream)
        fn(*args)
        ends[i].record(stream)
    torch.cuda.synchronize()
    return summarize([s.elapsed_time(e) for s, e in zip(starts, ends)])


def graph_replay(fn: Callable[..., object], arg_sets: Sequence[tuple] = ((),)) -> Callable[[], object]:
    """``fn(*args)`` for every set of ``arg_sets``, captured once in a CUDA graph (after a warm-up
    on a side stream, as torch asks); returns a call that replays the graph and returns the
    output of the *first* set's call (captured last, so that it is the one to check). Timing the
    replay leaves the host out: no Python, no dispatch, no launch gap between the calls. Divide
    a replay's time by ``len(arg_sets)`` for one call's (:func:`per_call`); several sets keep L2
    out of it, as :func:`time_cuda`'s rotation does."""
    arg_sets = list(arg_sets[1:]) + list(arg_sets[:1])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for args in arg_sets:
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for args in arg_sets:
            out = fn(*args)

    def replay():
        graph.replay()
        return out
    return replay


def per_call(ms: dict, calls: int) -> dict:
    """A :func:`time_cuda` result of ``calls`` calls at once, as one call's."""
    return {**ms, **{key: ms[key] / calls for key in ("median", "p20", "p80")}}


def summarize(times: Sequence[float]) -> dict:
    """ms {median, p20, p80, reps} of a list of per-run times in ms (at least one)."""
    times = sorted(times)
    q = statistics.quantiles(times, n=10, method="inclusive") if len(times) > 1 else times * 9
    return {"median": statistics.median(times), "p20": q[1], "p80": q[7], "reps": len(times)}


def tflops(flops: int, ms: float) -> float:
    return flops / (ms * 1e-3) / 1e12


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


class HostEvent:
    """A CUDA event's interface (record, synchronize, elapsed_time in ms) on the host clock: the
    same timing code then runs on a CPU-only machine (the suites' CPU tests)."""

    def record(self):
        self.t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end) -> float:
        return (end.t - self.t) * 1e3


def timing_event(device: torch.device | str):
    """A CUDA event on a CUDA device, else a HostEvent."""
    return torch.cuda.Event(enable_timing=True) if torch.device(device).type == "cuda" else HostEvent()


def elapsed_ms(fn: Callable[[], object], device: torch.device | str) -> float:
    """Milliseconds of one call of ``fn``, from an idle device to its end (CUDA events on a
    GPU, the host clock elsewhere)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    start, end = timing_event(device), timing_event(device)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)
