"""The production attention suite: our CUDA kernels with their peers in the same run.

Rows (docs/design.md schema): paged decode B in {1, 4, 16, 64}, Sk 4096, 32 q / 8 kv heads, D 128
at pages 16 and 64 (KV GB/s, target >= 85% of copy at B >= 16) with FA4 paged, FlashInfer's
paged decode (`flashinfer-paged-decode`, pages of 64, eager and `-graph`, where installed) and
torch SDPA (cuDNN and flash backends) on the gathered dense KV; at page 64 also the same decode through
`attention()` with its defaults (`api-paged-decode`: one seqlens_k passed on every call, as the
layers of a decode step pass it, so the check reads it back once: what a caller pays eagerly per
layer), the same with a seqlens_k the check has not seen on every call
(`api-paged-decode-new-lengths`: a step's first layer, one device->host copy), the same without
the seqlens check (`api-paged-decode-unchecked`), through a `DecodePlan` made once and run per
layer (`plan-paged-decode`), given new lengths on every call (`plan-paged-decode-new-lengths`:
`update`, a step's first layer) or made anew for them (`plan-paged-decode-new-plan`), and replayed
from a CUDA graph (`cuda-paged-decode-graph`: no host work at all, a split call's combine kernel
after the split kernel; `plan-paged-decode-graph`: a plan's run; `plan-paged-decode-one-launch-graph`:
a `one_launch` plan's, a split call in one launch; at page 16 too for the first; on an FP8 (e4m3)
cache of the same keys, pages of 64, `cuda-paged-decode-e4m3` eager and `-graph`, with
FlashInfer's FP8-KV decode `flashinfer-paged-decode-e4m3` (`-graph`) beside it;
as the read floor,
GRAPH_CALLS calls in one graph on K/V caches taken in turn, enough of them that L2 holds none
between its reads, and the replay's time divided by the calls); contiguous decode
latency, and beside it `read-floor-graph` (one kernel that only reads the same K/V bytes from
HBM, under graph replay: the floor for a decode of that size); prefill D 128 b4 s4096
(TFLOP/s; the default kernel and, as `cuda-prefill-tc-cpasync`, the cp.async one it replaced
on Hopper) with torch SDPA (cuDNN, flash), FA4 and the ladder backend (`ladder`: the top rung
as `attention()` runs it); prefill b1
s16384 at D 64 / 128 / 256 (2048 / D heads, causal and not) against cuDNN and FA4; a ragged
causal paged-prefill row, with FA4's and FlashInfer's (`flashinfer-paged-prefill`, its Hopper
backend, on our pages) beside it. Each row is checked against the fp32 reference before it is timed; a wrong
answer is recorded as `wrong: ...`, never timed. The checked rows of one problem (a decode batch
size: its paged rows at both page sizes, the dense ones and the read floor; a prefill shape: ours
and the peers) are timed together, in interleaved rounds (``Context.time_together``).
"""

from __future__ import annotations

import itertools

import torch

from kernels.harness.checks import rel_err
from kernels.harness.inputs import paged_kv_cache
from kernels.harness.timing import graph_copies, graph_replay
from kernels.registry.production import PAGE_SIZE

TOL = 1e-2
HQ, HKV, D = 32, 8, 128
E4M3 = torch.float8_e4m3fn
LONG_HEAD_DIMS = (64, 128, 256)  # the b1 s16384 prefill rows (2048 / head_dim heads)
# Calls captured in one graph for the -graph rows, as many as the read floor's
# (kernels.harness.ceilings.streaming_read): a graph of one call would time its launch with it.
GRAPH_CALLS = 8


def _row(kernel, problem, ms=None, flops=None, nbytes=None, err=None, status="ok"):
    return {"kernel": kernel, "problem": problem, "ms": ms,
            "tflops": flops / (ms["median"] * 1e-3) / 1e12 if ms and flops else None,
            "gbps": nbytes / (ms["median"] * 1e-3) / 1e9 if ms and nbytes else None,
            "rel_err": err, "status": status}


def _check(kernel, problem, fn, ref, flops=None, nbytes=None, calls=1):
    """fn() against ref: ``(row, fn, flops, nbytes, calls)`` for :func:`_timed_together`, fn None
    where the row is not to be timed (an exception: ``unsupported:`` for a peer, ``wrong:`` for
    ours; an error above TOL: ``wrong:``). ``calls``: calls per fn() (a graph's replay)."""
    try:
        out = fn()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 (a row, not a crash: the other rows still get measured)
        # A peer that cannot run a shape is unsupported; our own kernel raising is a failure.
        verdict = "unsupported" if kernel.startswith(PEER_PREFIXES) else "wrong"
        first_line = str(exc).splitlines()[0][:200]
        row = _row(kernel, problem, status=f"{verdict}: {type(exc).__name__}: {first_line}")
        return row, None, flops, nbytes, calls
    err = rel_err(out, ref)
    if not err <= TOL:
        row = _row(kernel, problem, err=err, status=f"wrong: rel_err {err:.3g} > {TOL}")
        return row, None, flops, nbytes, calls
    return _row(kernel, problem, err=err), fn, flops, nbytes, calls


def _kv_copies(k, v, kv_bytes):
    """(k, v) and copies of them, enough that L2 holds none of a copy when it comes round again,
    in a number that divides GRAPH_CALLS (graph_copies): the eager rows take them in turn
    (_in_turn), the graph rows one per call."""
    return [(k, v)] + [(k.clone(), v.clone()) for _ in range(graph_copies(kv_bytes, GRAPH_CALLS) - 1)]


def _in_turn(fn, arg_sets):
    """One call that runs ``fn(*args)`` for each set of ``arg_sets`` in turn, so that rows timed
    together (:func:`_timed_together`, one call per timing) still read distinct copies of their
    inputs, as time_cuda's rotation would: a decode whose K/V fit in L2 would otherwise time the
    cache. Copies hold the same values, so the checked output is any set's."""
    turn = itertools.cycle(arg_sets)
    return lambda: fn(*next(turn))


def _graph_check(kernel, problem, fn, copies, ref, nbytes):
    """:func:`_check` of ``fn(*copy)`` for GRAPH_CALLS calls on ``copies`` in turn, captured in one
    CUDA graph (kernels.harness.timing.graph_replay; the time is per call). A call that cannot
    be captured is a row that says so."""
    try:
        replay = graph_replay(fn, [copies[i % len(copies)] for i in range(GRAPH_CALLS)])
    except Exception as exc:  # noqa: BLE001 (a row, not a crash, as in _check)
        status = f"unsupported: not capturable: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        return _row(kernel, problem, status=status), None, None, nbytes, GRAPH_CALLS
    return _check(kernel, problem, replay, ref, nbytes=nbytes, calls=GRAPH_CALLS)


def _timed_together(ctx, checked) -> list[dict]:
    """The rows of ``checked`` (:func:`_check`'s), in order, those with a call timed together
    (``ctx.time_together``: interleaved rounds, so that ours and the peers meet the GPU's clocks
    alike; rows measured one after another would each meet it in a different state)."""
    from kernels.harness.timing import per_call

    keys = {i: f"{row['kernel']} #{i}" for i, (row, fn, *_) in enumerate(checked) if fn is not None}
    times = ctx.time_together({key: (checked[i][1], ((),)) for i, key in keys.items()}) if keys else {}
    rows = []
    for i, (row, _, flops, nbytes, calls) in enumerate(checked):
        if i in keys:
            row = _row(row["kernel"], row["problem"], per_call(times[keys[i]], calls), flops, nbytes,
                       row["rel_err"])
        rows.append(row)
    return rows


PEER_PREFIXES = ("fa4", "torch", "flashinfer")


def _read_floor(problem, nbytes):
    """`read-floor-graph`, checked for :func:`_timed_together`: one kernel that only reads the
    decode's K/V bytes from HBM, replayed from a CUDA graph (kernels.harness.ceilings.
    streaming_read): what no decode of that size can beat. rel_err: its sum against torch's, so
    a read that skipped bytes would show."""
    from kernels.harness.ceilings import streaming_read

    try:
        replay, calls, check = streaming_read(nbytes)
        err = check()
    except Exception as exc:  # noqa: BLE001 (a row, not a crash, as in _check)
        verdict = "unsupported" if isinstance(exc, ImportError) else "wrong"
        status = f"{verdict}: {type(exc).__name__}: {str(exc)[:200]}"
        return _row("read-floor-graph", problem, status=status), None, None, nbytes, 1
    if not err <= 1e-4:
        status = f"wrong: rel_err {err:.3g} > 1e-4"
        return _row("read-floor-graph", problem, err=err, status=status), None, None, nbytes, calls
    return _row("read-floor-graph", problem, err=err), replay, None, nbytes, calls


class _Unavailable:
    """Stands in for a peer that cannot be imported: every call raises, so its rows say why."""

    def __init__(self, reason: str):
        self.reason = reason

    def __getattr__(self, name):
        def call(*args, **kwargs):
            raise ImportError(self.reason)

        return call


def _fa4():
    try:
        from flash_attn.cute import interface
        return interface
    except Exception as exc:  # noqa: BLE001 (ImportError, or a CUDA-less import failure)
        return _Unavailable(f"flash_attn.cute not importable ({type(exc).__name__})")


def _first(x):
    return x[0] if isinstance(x, tuple) else x


SDPA_BACKENDS = (("torch-sdpa-cudnn", "CUDNN_ATTENTION"), ("torch-sdpa-flash", "FLASH_ATTENTION"))


def _flashinfer_decode_checks(q, k_copies, problem, ref, kv_bytes):
    """FlashInfer's paged decode (the registry's runner: its wrapper planned once, outside the
    timing, on K/V viewed as its NHD pages) beside ours, eager and under graph replay, on the
    dense copies in turn; rows that say why where it cannot run."""
    from kernels.registry import get

    runner = get("flashinfer-paged-decode")
    pdict = {**problem.to_dict(), "page_size": PAGE_SIZE, "paged": True}
    names = ("flashinfer-paged-decode", "flashinfer-paged-decode-graph")
    reason = runner.unsupported(problem)
    if reason is not None:
        return [(_row(name, pdict, status=f"unsupported: {reason}"), None, None, kv_bytes, 1)
                for name in names]
    from kernels.registry.peers import flashinfer_decode

    def caller(launch):
        out = torch.empty_like(q)

        def call(kc, vc):
            launch(q, kc, vc, out)
            return out
        return call

    eager, captured = caller(runner.prepare(problem)), caller(flashinfer_decode(problem, cuda_graph=True))
    return [_check(names[0], pdict, _in_turn(eager, k_copies), ref, nbytes=kv_bytes),
            _graph_check(names[1], pdict, captured, k_copies, ref, kv_bytes)]


def _flashinfer_e4m3_decode_checks(q, copies, table, lens, scales, pdict, ref, kv_bytes):
    """FlashInfer's paged decode on an e4m3 cache (its kv_data_type float8_e4m3fn, one factor for
    K and one for V), planned once on our pages (its NHD layout is our cache's), eager and from
    its graph wrapper; rows that say why where it cannot run."""
    names = ("flashinfer-paged-decode-e4m3", "flashinfer-paged-decode-e4m3-graph")
    try:
        import flashinfer

        from kernels.registry.peers import DECODE_TENSOR_CORE_GROUP, FLASHINFER_WORKSPACE_BYTES
    except Exception as exc:  # noqa: BLE001 (a row, as in _check)
        return [(_row(name, pdict, status=f"unsupported: {type(exc).__name__}: {exc}"[:200]), None, None,
                 kv_bytes, 1) for name in names]
    batch, _, heads_q, head_dim = q.shape
    k_cache = copies[0][0]
    page, heads_kv = k_cache.shape[1], k_cache.shape[2]
    indptr, indices, last_page_len = _flashinfer_pages(table, lens, page)

    def wrapper(cuda_graph):
        workspace = torch.zeros(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device=q.device)
        buffers = dict(use_cuda_graph=True, paged_kv_indptr_buffer=indptr.clone(),
                       paged_kv_indices_buffer=indices.clone(),
                       paged_kv_last_page_len_buffer=last_page_len.clone()) if cuda_graph else {}
        made = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            workspace, "NHD", use_tensor_cores=heads_q // heads_kv >= DECODE_TENSOR_CORE_GROUP, **buffers)
        made.plan(indptr, indices, last_page_len, heads_q, heads_kv, head_dim, page, q_data_type=q.dtype,
                  kv_data_type=E4M3)
        out = torch.empty(batch, heads_q, head_dim, dtype=q.dtype, device=q.device)

        def call(kc, vc):
            made.run(q.view(batch, heads_q, head_dim), (kc, vc), out=out, k_scale=scales[0],
                     v_scale=scales[1])
            return out.view(q.shape)
        return call

    try:
        eager, captured = wrapper(False), wrapper(True)
    except Exception as exc:  # noqa: BLE001 (a row, as in _check)
        status = f"unsupported: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        return [(_row(name, pdict, status=status), None, None, kv_bytes, 1) for name in names]
    return [_check(names[0], pdict, _in_turn(eager, copies), ref, nbytes=kv_bytes),
            _graph_check(names[1], pdict, captured, copies, ref, kv_bytes)]


def _flashinfer_prefill_check(pdict, make, ref, flops):
    """:func:`_check` of the call ``make()`` returns (its planning outside the timing); a row
    that says why where FlashInfer is missing or refuses the problem."""
    try:
        call = make()
    except Exception as exc:  # noqa: BLE001 (a row, as in _check)
        status = f"unsupported: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        return _row("flashinfer-paged-prefill", pdict, status=status), None, flops, None, 1
    return _check("flashinfer-paged-prefill", pdict, call, ref, flops)


def _flashinfer_pages(table, lens, page):
    """Our page table and lengths as FlashInfer's CSR: (indptr, indices, last_page_len), int32."""
    n_pages = (lens + page - 1) // page
    indptr = torch.cat([torch.zeros(1, dtype=torch.int32, device=lens.device), n_pages.cumsum(0).int()])
    indices = torch.cat([table[b, :int(n)] for b, n in enumerate(n_pages.tolist())]).int()
    return indptr, indices, (lens - (n_pages - 1) * page).int()


def _flashinfer_ragged_prefill(q, k_cache, v_cache, table, cu, lens, page):
    """FlashInfer's paged prefill on our ragged problem: the same pages (its NHD layout is our
    cache's), the page table as its CSR, planned once; the Hopper backend (fa3) on Hopper."""
    import flashinfer

    from kernels.registry.peers import FLASHINFER_WORKSPACE_BYTES

    indptr, indices, last_page_len = _flashinfer_pages(table, lens, page)
    workspace = torch.zeros(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device=q.device)
    backend = "fa3" if torch.cuda.get_device_capability()[0] == 9 else "auto"
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend=backend)
    wrapper.plan(cu, indptr, indices, last_page_len, q.shape[1], k_cache.shape[2], q.shape[2], page,
                 causal=True, q_data_type=q.dtype, kv_data_type=k_cache.dtype)
    return lambda: wrapper.run(q, (k_cache, v_cache))


def _sdpa(q, k, v, causal, backend_name):
    """A timed call of torch SDPA with one backend on q, k, v [B, S, H, D]. GQA natively
    (enable_gqa) where the backend takes it; otherwise on K/V expanded to every query head once
    here, outside the timed call (the backend then reads the group's K/V once per query head,
    which is its real cost, but the expansion is not timed)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if causal and q.shape[1] != k.shape[1]:
        raise ValueError("torch SDPA is_causal is top-left aligned; only Sq == Sk rows")
    backend = getattr(SDPBackend, backend_name)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def native():
        with sdpa_kernel(backend):
            return sdpa(qt, kt, vt, is_causal=causal, enable_gqa=True).transpose(1, 2)

    if k.shape[2] == q.shape[2]:
        return native
    try:
        native()
        return native
    except Exception:  # noqa: BLE001 (no native GQA in this backend: expand; its own errors become rows)
        group = q.shape[2] // k.shape[2]
        ke, ve = (t.repeat_interleave(group, dim=1) for t in (kt, vt))

        def expanded():
            with sdpa_kernel(backend):
                return sdpa(qt, ke, ve, is_causal=causal).transpose(1, 2)
        return expanded


def run(ctx) -> list[dict]:
    from kernels.extension.backend import ladder_path
    from kernels.extension.backend.attention import attention
    from kernels.extension.backend.plan import DecodePlan
    from kernels.extension.ops import attention as ops
    from kernels.harness.problem import AttentionProblem
    from kernels.harness.reference import reference_attention

    fa4 = _fa4()
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, device="cuda", generator=gen).to(torch.bfloat16)

    def paged_checks(q, k, v, lens, ref, problem, page, kv_bytes):
        """The paged rows of one decode batch at one page size, checked (_check); every row reads
        copies of the cache in turn (_kv_copies)."""
        k_cache, v_cache, table = paged_kv_cache(k, v, page, generator=torch.Generator().manual_seed(0))
        pdict = {**problem.to_dict(), "page_size": page, "paged": True}
        copies = _kv_copies(k_cache, v_cache, kv_bytes)

        def ours(kc, vc):
            return ops.paged_decode(q, kc, vc, table, lens, check_seqlens=False)

        def fa4_paged(kc, vc):
            return _first(fa4.flash_attn_varlen_func(q, kc, vc, seqused_k=lens, page_table=table))

        checked = [_check("cuda-paged-decode", pdict, _in_turn(ours, copies), ref, nbytes=kv_bytes),
                   _check("fa4-paged-decode", pdict, _in_turn(fa4_paged, copies), ref, nbytes=kv_bytes)]
        if page == 64:  # what a caller pays through attention(): its defaults, then no seqlens check
            api_calls = (("api-paged-decode", {}), ("api-paged-decode-unchecked", {"check_seqlens": False}))
            for name, kwargs in api_calls:
                checked.append(_check(name, pdict, _in_turn(lambda kc, vc, kwargs=kwargs: attention(
                    q, kc, vc, page_table=table, seqlens_k=lens, **kwargs), copies), ref, nbytes=kv_bytes))
            # lengths the check has not seen (two equal tensors in turn): a decode step's first layer
            turns = itertools.cycle((lens, lens.clone()))
            checked.append(_check("api-paged-decode-new-lengths", pdict, _in_turn(lambda kc, vc: attention(
                q, kc, vc, page_table=table, seqlens_k=next(turns)), copies), ref, nbytes=kv_bytes))
            # a serving loop through a plan: planned once, run per layer (each layer's own cache)
            plan = DecodePlan(k_cache, v_cache, table, lens, heads_q=q.shape[2])
            checked.append(_check("plan-paged-decode", pdict, _in_turn(
                lambda kc, vc: plan.run(q, k_cache=kc, v_cache=vc), copies), ref, nbytes=kv_bytes))
            # new lengths on every call: handed to the plan (a step's update and its first layer) ...
            stepped = DecodePlan(k_cache, v_cache, table, lens, heads_q=q.shape[2])
            checked.append(_check("plan-paged-decode-new-lengths", pdict, _in_turn(
                lambda kc, vc: stepped.update(next(turns)).run(q, k_cache=kc, v_cache=vc), copies),
                ref, nbytes=kv_bytes))
            # ... or a plan made anew for them (the validation and routing a plan does once)
            checked.append(_check("plan-paged-decode-new-plan", pdict, _in_turn(
                lambda kc, vc: DecodePlan(kc, vc, table, next(turns), heads_q=q.shape[2]).run(q), copies),
                ref, nbytes=kv_bytes))
            # the plan's run replayed, as a serving loop that captures its decode step does; and a
            # one-launch plan's (the last split CTA combines, no combine kernel)
            one_launch = DecodePlan(k_cache, v_cache, table, lens, heads_q=q.shape[2], one_launch=True)
            for name, planned in (("plan-paged-decode-graph", plan),
                                  ("plan-paged-decode-one-launch-graph", one_launch)):
                checked.append(_graph_check(name, pdict, lambda kc, vc, planned=planned: planned.run(
                    q, k_cache=kc, v_cache=vc), copies, ref, kv_bytes))
        checked.append(_graph_check("cuda-paged-decode-graph", pdict, ours, copies, ref, kv_bytes))
        # the peer under the same replay, so that a comparison need not set a graph row against
        # an eager one (FA4's eager calls are host-bound at small batches)
        checked.append(_graph_check("fa4-paged-decode-graph", pdict, fa4_paged, copies, ref, kv_bytes))
        return checked

    def e4m3_cache_checks(q, k, v, lens, problem, kv_bytes):
        """An FP8 KV cache (pages of 64, one factor for K and one for V: what FlashInfer's decode
        takes): our paged decode eagerly and replayed, FlashInfer's FP8-KV decode beside it,
        checked against the reference on the dequantized values (the error of the quantization
        itself is the format's, not a kernel's). kv_bytes: the e4m3 cache's."""
        k_scale, v_scale = (x.float().abs().amax().view(1) / 448 for x in (k, v))
        k8, v8 = ((x.float() / s).to(E4M3) for x, s in ((k, k_scale), (v, v_scale)))
        ref = reference_attention(q.float(), k8.float() * k_scale, v8.float() * v_scale)[0]
        k_cache, v_cache, table = paged_kv_cache(k8.float(), v8.float(), PAGE_SIZE,
                                                 generator=torch.Generator().manual_seed(0))
        k_cache, v_cache = k_cache.to(E4M3), v_cache.to(E4M3)  # the values are e4m3's: exact
        pdict = {**problem.to_dict(), "page_size": PAGE_SIZE, "paged": True, "kv_dtype": "e4m3"}
        copies = _kv_copies(k_cache, v_cache, kv_bytes)

        def ours(kc, vc):
            return ops.paged_decode(q, kc, vc, table, lens, check_seqlens=False, k_scale=k_scale,
                                    v_scale=v_scale)

        return [_check("cuda-paged-decode-e4m3", pdict, _in_turn(ours, copies), ref, nbytes=kv_bytes),
                _graph_check("cuda-paged-decode-e4m3-graph", pdict, ours, copies, ref, kv_bytes),
                *_flashinfer_e4m3_decode_checks(q, copies, table, lens, (float(k_scale), float(v_scale)),
                                                pdict, ref, kv_bytes)]

    task = ctx.progress.add_task("attention", total=4)

    # ---- paged decode, KV bandwidth ----------------------------------------------------------
    for batch in (1, 4, 16, 64):
        sk = 4096
        problem = AttentionProblem(batch=batch, seqlen_q=1, seqlen_k=sk, heads_q=HQ, heads_kv=HKV, head_dim=D)
        q, k, v = rand(batch, 1, HQ, D), rand(batch, sk, HKV, D), rand(batch, sk, HKV, D)
        ref = reference_attention(q, k, v)[0]
        kv_bytes = 2 * k.numel() * k.element_size()
        lens = torch.full((batch,), sk, dtype=torch.int32, device="cuda")
        # every row of this batch timed together: the paged decodes against the dense peers
        checked = paged_checks(q, k, v, lens, ref, problem, 16, kv_bytes)
        checked += paged_checks(q, k, v, lens, ref, problem, 64, kv_bytes)
        dense = problem.to_dict()
        dense_copies = _kv_copies(k, v, kv_bytes)
        checked.append(_check("cuda-decode-split", dense, _in_turn(
            lambda kc, vc: ops.decode(q, kc, vc), dense_copies), ref, nbytes=kv_bytes))
        checked.append(_check("cuda-decode-split-scalar", dense, _in_turn(
            lambda kc, vc: ops.decode(q, kc, vc, impl="scalar"), dense_copies), ref, nbytes=kv_bytes))
        sdpa_calls = {}  # made before any capture: _sdpa may try a call to see whether GQA is native
        for name, backend in SDPA_BACKENDS:
            sdpa_calls[name] = [(_sdpa(q, kc, vc, False, backend),) for kc, vc in dense_copies]
            checked.append(_check(name, dense, _in_turn(lambda call: call(), sdpa_calls[name]), ref,
                                  nbytes=kv_bytes))
        # cuDNN's dense decode under graph replay too: the peer of our -graph rows
        checked.append(_graph_check("torch-sdpa-cudnn-graph", dense, lambda call: call(),
                                    sdpa_calls["torch-sdpa-cudnn"], ref, kv_bytes))
        checked += _flashinfer_decode_checks(q, dense_copies, problem, ref, kv_bytes)
        checked += e4m3_cache_checks(q, k, v, lens, problem, kv_bytes // 2)
        checked.append(_read_floor(dense, kv_bytes))
        rows += _timed_together(ctx, checked)
    ctx.progress.advance(task)

    # ---- prefill, TFLOP/s ------------------------------------------------------------------------
    # b4 s4096 D 128 with every alternative; then one 16k sequence at every head dimension
    # (2048 / head_dim heads, the ladder's shapes): the production prefill's targets.
    shapes = [(4, 4096, D, True)] + [(1, 16384, head_dim, False) for head_dim in LONG_HEAD_DIMS]
    for batch, seqlen, head_dim, alternatives in shapes:
        heads = 2048 // head_dim
        for causal in (False, True):
            problem = AttentionProblem(batch=batch, seqlen_q=seqlen, seqlen_k=seqlen, heads_q=heads,
                                       heads_kv=heads, head_dim=head_dim, causal=causal)
            q, k, v = (rand(batch, seqlen, heads, head_dim) for _ in range(3))
            ref = reference_attention(q, k, v, causal=causal)[0]
            pdict, flops = problem.to_dict(), problem.flops()
            calls = [("cuda-prefill-tc", lambda: ops.prefill(q, k, v, causal=causal))]
            if alternatives:
                calls.append(("cuda-prefill-tc-cpasync", lambda: ops.prefill(q, k, v, causal=causal,
                                                                             impl="tc-cpasync")))
            calls += [(name, _sdpa(q, k, v, causal, backend)) for name, backend in SDPA_BACKENDS
                      if alternatives or name == "torch-sdpa-cudnn"]
            calls.append(("fa4", lambda: _first(fa4.flash_attn_func(q, k, v, causal=causal))))
            if not isinstance(ladder_path.rung(), str):  # the ladder backend's runner, where the DSL is
                calls.append(("ladder", lambda: ladder_path.run(q, k, v, causal, None, None, None, None, None,
                                                                None, None)))
            rows += _timed_together(ctx, [_check(name, pdict, call, ref, flops) for name, call in calls])
            del ref
    small = AttentionProblem(batch=2, seqlen_q=1024, seqlen_k=1024, heads_q=16, heads_kv=16, head_dim=D)
    q, k, v = (rand(2, 1024, 16, D) for _ in range(3))
    rows += _timed_together(ctx, [_check("cuda-prefill-scalar", small.to_dict(),
                                         lambda: ops.prefill(q, k, v, impl="scalar"),
                                         reference_attention(q, k, v)[0], small.flops())])
    ctx.progress.advance(task)

    # ---- ragged paged prefill (causal, page 64) ------------------------------------------------------
    lens_list = [4096, 3000, 2048, 1024, 512, 100]
    sk, page = 4096, 64
    k, v = rand(len(lens_list), sk, HKV, D), rand(len(lens_list), sk, HKV, D)
    k_cache, v_cache, table = paged_kv_cache(k, v, page, generator=torch.Generator().manual_seed(0))
    q = rand(sum(lens_list), HQ, D)
    cu = torch.tensor([0] + list(torch.tensor(lens_list).cumsum(0)), dtype=torch.int32, device="cuda")
    lens = torch.tensor(lens_list, dtype=torch.int32, device="cuda")
    refs, flops = [], 0
    for b, n in enumerate(lens_list):
        qb = q[cu[b]:cu[b + 1]].unsqueeze(0)
        refs.append(reference_attention(qb, k[b:b + 1, :n], v[b:b + 1, :n], causal=True)[0][0])
        flops += AttentionProblem(batch=1, seqlen_q=n, seqlen_k=n, heads_q=HQ, heads_kv=HKV, head_dim=D,
                                  causal=True).flops()
    ref = torch.cat(refs)
    pdict = {"batch": len(lens_list), "seqlens": lens_list, "heads_q": HQ, "heads_kv": HKV, "head_dim": D,
             "causal": True, "dtype": "bf16", "page_size": page, "paged": True, "ragged": True}
    rows += _timed_together(ctx, [
        _check("cuda-paged-prefill", pdict, lambda: ops.paged_prefill(
            q, k_cache, v_cache, table, cu, lens, causal=True, check_seqlens=False), ref, flops),
        _check("fa4-paged-prefill", pdict, lambda: _first(fa4.flash_attn_varlen_func(
            q, k_cache, v_cache, cu_seqlens_q=cu, max_seqlen_q=max(lens_list), seqused_k=lens,
            page_table=table, causal=True)), ref, flops),
        _flashinfer_prefill_check(pdict, lambda: _flashinfer_ragged_prefill(
            q, k_cache, v_cache, table, cu, lens, page), ref, flops)])
    ctx.progress.advance(task)
    return rows
