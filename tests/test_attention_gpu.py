"""GPU tests of the production attention kernels against an fp32 reference: bf16 and fp16, the
kernels through ops and through attention() (routing, autograd).

Needs a CUDA device and the built extension (`python -m tools.build_ext`); skipped otherwise.
Run: pytest -m gpu tests/test_attention_gpu.py
"""

from __future__ import annotations

import itertools

import pytest
import torch

from kernels.harness import (
    AttentionProblem,
    check_output,
    make_inputs,
    paged_kv_cache,
    reference_attention,
    rel_err,
    verify_attention,
)

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels.extension.ops import attention as ops  # noqa: E402

if not ops.available():
    pytest.skip("extension module 'attention' not built (python -m tools.build_ext)", allow_module_level=True)

TOL = 1e-2
# LSE: |lse - ref| <= LSE_ATOL + LSE_RTOL * |ref|
LSE_ATOL, LSE_RTOL = 2e-2, 1e-3
DEV = "cuda"
IMPLS = ("tc", "scalar")
# Prefill also names its two tensor-core kernels: "tc" is the warp-specialized one on Hopper
# (dense q, contiguous k / v, no mask), "tc-cpasync" the one it replaced there.
PREFILL_IMPLS = ops.PREFILL_IMPLS
HOPPER = torch.cuda.get_device_capability() == (9, 0)


def skip_unless_runnable(impl):
    if impl == "tc-ws" and not HOPPER:
        pytest.skip("the warp-specialized prefill needs a Hopper GPU")


def rand(*shape, seed=0, dtype=torch.bfloat16):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return torch.randn(*shape, device=DEV, generator=g, dtype=torch.float32).to(dtype)


def qkv(b, sq, sk, hq, hkv, d, seed=0, dtype="bf16"):
    return make_inputs(AttentionProblem(b, sq, sk, hq, hkv, d, dtype=dtype), seed=seed)


def check(out, ref, what, lse=None, ref_lse=None):
    result = check_output(out.float(), ref, TOL, lse=lse, ref_lse=ref_lse, lse_atol=LSE_ATOL,
                          lse_rtol=LSE_RTOL)
    assert result, f"{what}: {result.reason}"


# ---- contiguous --------------------------------------------------------------------------------
# verify_attention: every tensor in NaN guard regions, outputs NaN-poisoned, rows that see no
# key exactly zero with LSE -inf, and a repeated run bit-identical.

@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("d", ops.HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk,hq,hkv", [(1, 1000, 32, 8), (3, 257, 8, 1), (1, 37, 4, 4), (5, 4096, 8, 8),
                                         (5, 3, 8, 8)])  # causal: the first two rows see no key
def test_decode(impl, d, causal, sq, sk, hq, hkv):
    problem = AttentionProblem(2, sq, sk, hq, hkv, d, causal=causal)

    def run(q, k, v, out, lse):
        ops.decode(q, k, v, causal=causal, impl=impl, out=out, lse=lse)

    result = verify_attention(run, problem, lse_atol=LSE_ATOL, lse_rtol=LSE_RTOL)
    assert result, f"decode {impl} {problem.label()}: {result.reason}"


@pytest.mark.parametrize("num_splits", [1, 2, 7, 64])
def test_decode_split_counts(num_splits):
    problem = AttentionProblem(3, 1, 3000, 32, 8, 128)

    def run(q, k, v, out, lse):
        ops.decode(q, k, v, num_splits=num_splits, out=out, lse=lse)

    result = verify_attention(run, problem, seed=3, lse_atol=LSE_ATOL, lse_rtol=LSE_RTOL)
    assert result, f"decode num_splits={num_splits}: {result.reason}"


def split_counters(problem):
    """Zeroed arrival counters for a one-launch split decode of `problem`."""
    count = ops.decode_counter_count(problem.batch, problem.heads_kv, problem.seqlen_q,
                                     problem.heads_q // problem.heads_kv)
    return torch.zeros(count, dtype=torch.int32, device=DEV)


@pytest.mark.parametrize("num_splits", [2, 7, 64, 128])
@pytest.mark.parametrize("sq,hq,hkv", [(1, 32, 8), (5, 8, 8), (3, 16, 2)])  # 1 or 2 row tiles per kv head
def test_decode_one_launch_splits(num_splits, sq, hq, hkv):
    """With split counters the last split CTA of each row tile combines the others: the same
    result as the combine kernel's, run twice (verify_attention: bit-identical), and the
    counters left at zero for the next call."""
    problem = AttentionProblem(3, sq, 3000, hq, hkv, 128)
    counters = split_counters(problem)

    def run(q, k, v, out, lse):
        ops.decode(q, k, v, num_splits=num_splits, out=out, lse=lse, split_counters=counters)

    result = verify_attention(run, problem, seed=3, lse_atol=LSE_ATOL, lse_rtol=LSE_RTOL)
    assert result, f"decode num_splits={num_splits} one launch: {result.reason}"
    torch.cuda.synchronize()
    assert not counters.any(), "the last split of each row tile sets its counter back to zero"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("num_splits", [2, 7])
@pytest.mark.parametrize("one_launch", [False, True], ids=["combine-kernel", "one-launch"])
def test_decode_split_rows_that_see_no_key(impl, num_splits, one_launch):
    """Causal with fewer keys than queries in forced splits: every split of the first rows sees
    no key, and the combine must give zeros with LSE -inf rather than 0 / 0."""
    problem = AttentionProblem(2, 4, 2, 16, 4, 128, causal=True)
    counters = split_counters(problem) if one_launch else None

    def run(q, k, v, out, lse):
        ops.decode(q, k, v, causal=True, impl=impl, num_splits=num_splits, out=out, lse=lse,
                   split_counters=counters)

    result = verify_attention(run, problem, seed=9, lse_atol=LSE_ATOL, lse_rtol=LSE_RTOL)
    assert result, f"decode {impl} num_splits={num_splits} {problem.label()}: {result.reason}"


@pytest.mark.parametrize("impl", PREFILL_IMPLS)
@pytest.mark.parametrize("d", ops.HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk,hq,hkv", [(128, 128, 8, 8), (70, 333, 16, 2), (300, 200, 8, 1),
                                         (1, 50, 4, 1)])
def test_prefill(impl, d, causal, sq, sk, hq, hkv):
    skip_unless_runnable(impl)
    problem = AttentionProblem(2, sq, sk, hq, hkv, d, causal=causal)

    def run(q, k, v, out, lse):
        ops.prefill(q, k, v, causal=causal, impl=impl, out=out, lse=lse)

    result = verify_attention(run, problem, seed=5, lse_atol=LSE_ATOL, lse_rtol=LSE_RTOL)
    assert result, f"prefill {impl} {problem.label()}: {result.reason}"


# The warp-specialized prefill on the shapes its tiles make hard: one query and one key, a
# partial tile of each, Sq > Sk under the causal mask (rows that see no key), GQA groups of 2-4,
# exactly one tile of three warpgroups at D = 64 (192 rows), 80-key tiles at D = 256 (Sk = 80,
# 1000), several full tiles, and large logits (magnitude 20: the lazy rescale moves rows' maxima).
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("d", ops.HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b,sq,sk,hq,hkv,magnitude", [
    (1, 1, 1, 1, 1, 1.0), (2, 130, 257, 8, 2, 1.0), (1, 300, 80, 4, 4, 1.0), (3, 77, 1000, 6, 3, 20.0),
    (1, 192, 192, 2, 2, 1.0), (1, 2048, 2048, 4, 1, 20.0),
])
def test_prefill_warp_specialized(dtype, d, causal, b, sq, sk, hq, hkv, magnitude):
    skip_unless_runnable("tc-ws")
    problem = AttentionProblem(b, sq, sk, hq, hkv, d, causal=causal, dtype=dtype)

    def run(q, k, v, out, lse):
        ops.prefill(q, k, v, causal=causal, impl="tc-ws", out=out, lse=lse)

    result = verify_attention(run, problem, seed=17, magnitude=magnitude, lse_atol=LSE_ATOL,
                              lse_rtol=LSE_RTOL)
    assert result, f"prefill tc-ws {problem.label()} magnitude {magnitude}: {result.reason}"


def launched_kernels(fn) -> str:
    """The names of the CUDA kernels ``fn()`` launches, one per line (torch's profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return "\n".join(event.key for event in prof.key_averages())


def test_prefill_default_kernel_on_hopper():
    """impl="tc" runs the warp-specialized kernel on Hopper for dense q without a mask and for
    packed q on pages that tile its key tiles, the cp.async one for a mask or other pages, and
    "tc-cpasync" always runs the cp.async one."""
    skip_unless_runnable("tc-ws")
    q, k, v = qkv(2, 200, 300, 8, 2, 128, seed=3)
    mask = torch.ones(2, 300, dtype=torch.bool, device=DEV)
    ws, cpasync = "attn_prefill_ws_kernel", "attn_prefill_kernel"
    names = launched_kernels(lambda: ops.prefill(q, k, v, causal=True))
    assert ws in names and cpasync not in names, names
    names = launched_kernels(lambda: ops.prefill(q, k, v, causal=True, impl="tc-cpasync"))
    assert cpasync in names and ws not in names, names
    names = launched_kernels(lambda: ops.prefill(q, k, v, causal=True, mask=mask))
    assert cpasync in names and ws not in names, names
    k_cache, v_cache, table = paged_kv_cache(k, v, 16, generator=torch.Generator().manual_seed(0))
    lens = torch.full((2,), 300, dtype=torch.int32, device=DEV)
    cu = torch.tensor([0, 200, 400], dtype=torch.int32, device=DEV)
    packed = q.reshape(400, 8, 128)
    names = launched_kernels(lambda: ops.paged_prefill(packed, k_cache, v_cache, table, cu, lens))
    assert ws in names and cpasync not in names, names
    names = launched_kernels(
        lambda: ops.paged_prefill(packed, k_cache, v_cache, table, cu, lens, impl="tc-cpasync"))
    assert cpasync in names and ws not in names, names
    k_cache, v_cache, table = paged_kv_cache(k, v, 48, generator=torch.Generator().manual_seed(0))
    names = launched_kernels(lambda: ops.paged_prefill(packed, k_cache, v_cache, table, cu, lens))
    assert cpasync in names and ws not in names, names


def test_prefill_warp_specialized_refuses_what_it_does_not_take():
    skip_unless_runnable("tc-ws")
    q, k, v = qkv(2, 64, 128, 8, 2, 128, seed=4)
    with pytest.raises(ValueError, match="warp-specialized kernel.*no boolean mask"):
        ops.prefill(q, k, v, mask=torch.ones(2, 128, dtype=torch.bool, device=DEV), impl="tc-ws")
    k_cache, v_cache, table = paged_kv_cache(k, v, 48, generator=torch.Generator().manual_seed(0))
    lens = torch.full((2,), 128, dtype=torch.int32, device=DEV)
    cu = torch.tensor([0, 64, 128], dtype=torch.int32, device=DEV)
    with pytest.raises(ValueError, match="warp-specialized kernel.*page_size must be a multiple of 16"):
        ops.paged_prefill(q.reshape(128, 8, 128), k_cache, v_cache, table, cu, lens, impl="tc-ws")


@pytest.mark.parametrize("impl", PREFILL_IMPLS)
def test_prefill_debug_mode(impl):
    """debug=True synchronizes and holds the warp-specialized kernel to the cp.async one (rows
    with no key included: Sq > Sk under the causal mask); it changes no result."""
    skip_unless_runnable(impl)
    problem = AttentionProblem(2, 300, 200, 8, 2, 128, causal=True)

    def run(q, k, v, out, lse):
        ops.prefill(q, k, v, causal=True, impl=impl, out=out, lse=lse, debug=True)

    result = verify_attention(run, problem, seed=19, lse_atol=LSE_ATOL, lse_rtol=LSE_RTOL)
    assert result, f"prefill {impl} debug: {result.reason}"


@pytest.mark.parametrize("fn", ["decode", "prefill"])
@pytest.mark.parametrize("mask_dims", [2, 3])
def test_masks(fn, mask_dims, guards):
    sq = 2 if fn == "decode" else 90
    g = torch.Generator(device=DEV).manual_seed(1)
    shape = (2, 300) if mask_dims == 2 else (2, sq, 300)
    mask = torch.rand(shape, device=DEV, generator=g) > 0.3
    if mask_dims == 2:
        mask[0] = False  # every row of batch 0 sees no key: zeros, not NaN
    else:
        mask[0, 0] = False  # one fully masked row
    q, k, v, mask = guards.copies(**dict(zip("qkv", qkv(2, sq, 300, 16, 4, 128, seed=7))), mask=mask)
    out = guards.empty(q.shape, q.dtype, name="out")
    lse = guards.empty((2, 16, sq), torch.float32, name="lse")
    getattr(ops, fn)(q, k, v, mask=mask, causal=True, out=out, lse=lse)
    ref, ref_lse = reference_attention(q, k, v, mask=mask, causal=True)
    check(out, ref, f"{fn} mask {mask_dims}-D", lse, ref_lse)
    guards.check()


def test_prefill_scale_and_strided_q(guards):
    q_big, k, v = qkv(2, 100, 100, 8, 8, 64, seed=9)
    q = torch.cat([q_big, q_big], dim=2)[:, :, 4:12]  # non-contiguous head/token strides
    q, k, v = guards.copies(q=q, k=k, v=v)  # the strided q keeps its strides; its gaps are guards too
    out = guards.empty(q.shape, q.dtype, name="out")
    ops.prefill(q, k, v, scale=0.05, out=out)
    check(out, reference_attention(q, k, v, scale=0.05)[0], "prefill strided q, scale 0.05")
    guards.check()


# ---- paged ---------------------------------------------------------------------------------------

# Page sizes: powers of two (a shift-like divisor), 24 and 48 (multiples of a thread's 8 rows,
# not powers of two: one lookup per thread with a general FastDivmod), 5 and 12 (rows of a
# thread straddle pages: the per-row lookup path).
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("page_size", [1, 5, 12, 16, 24, 48, 64, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_paged_decode_matches_reference_and_contiguous(impl, page_size, causal, guards):
    b, sk, hq, hkv, d = 5, 700, 32, 8, 128
    q, k, v = qkv(b, 1, sk, hq, hkv, d, seed=11)
    lens = torch.tensor([700, 1, 333, 64, 0], dtype=torch.int32, device=DEV)  # 0: zeros, LSE -inf
    g = torch.Generator().manual_seed(page_size)
    k_cache, v_cache, table = paged_kv_cache(k, v, page_size, generator=g)
    q, k_cache, v_cache, table, lens = guards.copies(q=q, k_cache=k_cache, v_cache=v_cache, page_table=table,
                                                     seqlens_k=lens)
    out, lse = guards.empty(q.shape, q.dtype, name="out"), guards.empty((b, hq, 1), torch.float32, name="lse")
    ops.paged_decode(q, k_cache, v_cache, table, lens, causal=causal, impl=impl, out=out, lse=lse)
    ref, ref_lse = reference_attention(q, k, v, causal=causal, key_lens=lens)
    check(out, ref, f"paged decode {impl} page {page_size}", lse, ref_lse)
    guards.check()
    # Same answer as the contiguous kernel on the full-length batch entry.
    contiguous = ops.decode(q[:1], k[:1], v[:1], causal=causal, impl=impl)
    check(out[:1], contiguous.float(), "paged vs contiguous")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("sq", [2, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_paged_decode_several_queries(impl, sq, causal, guards):
    """What attention() sends to paged_decode beyond one query (Sq x group <= 16 rows): a step's
    few queries, causal with fewer keys than queries (rows that see no key: zeros, LSE -inf),
    and a sequence without keys."""
    b, sk, hq, hkv, d = 4, 300, 16, 4, 128
    q, k, v = qkv(b, sq, sk, hq, hkv, d, seed=13)
    lens = torch.tensor([300, 1, 0, 77], dtype=torch.int32, device=DEV)
    k_cache, v_cache, table = paged_kv_cache(k, v, 16, generator=torch.Generator().manual_seed(sq))
    q, k_cache, v_cache, table, lens = guards.copies(q=q, k_cache=k_cache, v_cache=v_cache, page_table=table,
                                                     seqlens_k=lens)
    out = guards.empty(q.shape, q.dtype, name="out")
    lse = guards.empty((b, hq, sq), torch.float32, name="lse")
    ops.paged_decode(q, k_cache, v_cache, table, lens, causal=causal, impl=impl, out=out, lse=lse)
    ref, ref_lse = reference_attention(q, k, v, causal=causal, key_lens=lens)
    check(out, ref, f"paged decode {impl} Sq {sq}", lse, ref_lse)
    guards.check()


# "tc" runs the warp-specialized kernel where the pages tile its key tiles (16 and 64 at D = 64
# and 128, 16 and 80 at D = 256, 128 and 256 hold whole tiles), the cp.async one elsewhere.
@pytest.mark.parametrize("impl", ("tc", "tc-cpasync", "scalar"))
@pytest.mark.parametrize("page_size", [1, 12, 16, 48, 64, 80, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", ops.HEAD_DIMS)
def test_paged_prefill_ragged(impl, page_size, causal, d, guards):
    # the last two: more queries than keys (causal: the first 30 rows see no key) and no keys at
    # all (zeros, LSE -inf)
    q_lens, k_lens = [70, 10, 130, 50, 5], [90, 10, 400, 20, 0]
    hq, hkv = 16, 2
    g = torch.Generator().manual_seed(page_size + d)
    sk = max(k_lens)
    k, v = rand(len(q_lens), sk, hkv, d, seed=21), rand(len(q_lens), sk, hkv, d, seed=22)
    lens = torch.tensor(k_lens, dtype=torch.int32, device=DEV)
    k_cache, v_cache, table = paged_kv_cache(k, v, page_size, generator=g)
    q = rand(sum(q_lens), hq, d, seed=23)
    cu = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32, device=DEV)
    q, k_cache, v_cache, table, cu, lens = guards.copies(q=q, k_cache=k_cache, v_cache=v_cache,
                                                         page_table=table, cu_seqlens_q=cu, seqlens_k=lens)
    out = guards.empty(q.shape, q.dtype, name="out")
    lse = guards.empty((hq, q.shape[0]), torch.float32, name="lse")
    ops.paged_prefill(q, k_cache, v_cache, table, cu, lens, causal=causal, impl=impl, out=out, lse=lse)
    guards.check()
    check_ragged_prefill(out, lse, q, k, v, cu, lens, causal, f"paged prefill {impl} d{d} page {page_size}")


def check_ragged_prefill(out, lse, q, k, v, cu_seqlens_q, seqlens_k, causal, label):
    """Each sequence of a ragged paged prefill (packed q, out [total, H, D], lse [H, total])
    against the reference on its contiguous k / v rows, up to its key length."""
    bounds = cu_seqlens_q.tolist()
    for bi, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        ref, ref_lse = reference_attention(q[lo:hi].unsqueeze(0), k[bi:bi + 1], v[bi:bi + 1], causal=causal,
                                           key_lens=seqlens_k[bi:bi + 1])
        check(out[lo:hi].unsqueeze(0), ref, f"{label} batch {bi}", lse[:, lo:hi].unsqueeze(0), ref_lse)


def ragged_problem(q_lens, k_lens, hq, hkv, d, page_size, seed):
    """Packed q, contiguous k / v (the reference's), their paged cache, cu_seqlens_q and seqlens_k."""
    k = rand(len(q_lens), max(max(k_lens), 1), hkv, d, seed=seed)
    v = rand(len(q_lens), max(max(k_lens), 1), hkv, d, seed=seed + 1)
    k_cache, v_cache, table = paged_kv_cache(k, v, page_size, generator=torch.Generator().manual_seed(seed))
    q = rand(sum(q_lens), hq, d, seed=seed + 2)
    cu = torch.tensor([0, *itertools.accumulate(q_lens)], dtype=torch.int32, device=DEV)
    lens = torch.tensor(k_lens, dtype=torch.int32, device=DEV)
    return q, k, v, k_cache, v_cache, table, cu, lens


@pytest.mark.parametrize("causal", [False, True])
def test_paged_prefill_many_sequences(causal):
    """More sequences than a warp has lanes, some without queries or keys: the warp-specialized
    kernel finds each CTA's (sequence, query tile) on the device, each lane counting the tiles
    of three sequences."""
    q_lens = [i * 37 % 150 for i in range(70)]
    k_lens = [n + (i % 3) * 20 for i, n in enumerate(q_lens)]
    q, k, v, k_cache, v_cache, table, cu, lens = ragged_problem(q_lens, k_lens, 8, 2, 128, 64, seed=51)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((8, q.shape[0]), float("nan"), device=DEV)
    ops.paged_prefill(q, k_cache, v_cache, table, cu, lens, causal=causal, impl="tc-ws", out=out, lse=lse)
    check_ragged_prefill(out, lse, q, k, v, cu, lens, causal, "paged prefill, 70 sequences")


def test_paged_prefill_is_graph_capturable_on_the_ws_kernel():
    """Without the host checks the warp-specialized kernel reads the lengths on the device only:
    the call can be captured, and a replay follows lengths changed in place. The cp.async
    kernel builds its schedule on the host and says so under capture."""
    q_lens, k_lens = [200, 70, 1], [300, 70, 9]
    q, k, v, k_cache, v_cache, table, cu, lens = ragged_problem(q_lens, k_lens, 16, 4, 128, 64, seed=61)
    out = torch.empty_like(q)

    def call():
        ops.paged_prefill(q, k_cache, v_cache, table, cu, lens, causal=True, out=out, check_seqlens=False)

    call()  # warm-up (module load, shared-memory opt-in) before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    lse = torch.empty(16, q.shape[0], device=DEV)
    ref = torch.empty_like(q)
    ops.paged_prefill(q, k_cache, v_cache, table, cu, lens, causal=True, out=ref, lse=lse)
    assert torch.equal(out, ref)
    check_ragged_prefill(out, lse, q, k, v, cu, lens, True, "graph replay")
    # New lengths in place (one query row moves from the first sequence to the second)
    cu.copy_(torch.tensor([0, 199, 270, 271], dtype=torch.int32))
    lens.copy_(torch.tensor([299, 71, 9], dtype=torch.int32))
    graph.replay()
    ops.paged_prefill(q, k_cache, v_cache, table, cu, lens, causal=True, out=ref, lse=lse)
    torch.cuda.synchronize()
    assert torch.equal(out, ref)
    with pytest.raises(ValueError, match="cannot be graph-captured"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            ops.paged_prefill(q, k_cache, v_cache, table, cu, lens, causal=True, impl="tc-cpasync",
                              check_seqlens=False)


@pytest.mark.parametrize("cu_list,message", [([1, 70, 271], "cu_seqlens_q\\[0\\] must be 0"),
                                             ([0, 200, 100, 271], "non-decreasing"),
                                             ([0, 200, 270], "must equal total_q")])
def test_paged_prefill_checks_cu_seqlens_q(cu_list, message):
    q, _, _, k_cache, v_cache, table, _, lens = ragged_problem([200, 70, 1], [300, 70, 9], 8, 2, 64, 16, 71)
    bad = torch.tensor(cu_list, dtype=torch.int32, device=DEV)
    lens = lens[:bad.shape[0] - 1].contiguous()
    with pytest.raises(ValueError, match=message):
        ops.paged_prefill(q, k_cache, v_cache, table[:lens.shape[0]].contiguous(), bad, lens)


@pytest.mark.parametrize("impl", ("tc", "tc-cpasync"))
@pytest.mark.parametrize("bad_len", [-5, -300, 10_000])
def test_paged_prefill_out_of_range_seqlens_k_gives_nan_rows(impl, bad_len):
    """check_seqlens=False with a seqlens_k entry the page table cannot hold (negative, or past
    max_pages * page_size): that sequence's rows are NaN (O and LSE), no other page is read and
    the other sequences are unaffected, on both tensor-core kernels (pages of 16: "tc" runs the
    warp-specialized one)."""
    q_lens, k_lens, hq, hkv, d = [70, 130, 40], [90, 400, 64], 8, 2, 128
    k, v = rand(3, 400, hkv, d, seed=41), rand(3, 400, hkv, d, seed=42)
    k_cache, v_cache, table = paged_kv_cache(k, v, 16, generator=torch.Generator().manual_seed(1))
    q = rand(sum(q_lens), hq, d, seed=43)
    cu = torch.tensor([0, 70, 200, 240], dtype=torch.int32, device=DEV)
    lens = torch.tensor([k_lens[0], bad_len, k_lens[2]], dtype=torch.int32, device=DEV)
    lse = torch.empty(hq, q.shape[0], device=DEV)
    out = ops.paged_prefill(q, k_cache, v_cache, table, cu, lens, causal=True, impl=impl, lse=lse,
                            check_seqlens=False)
    torch.cuda.synchronize()
    assert out[70:200].isnan().all() and lse[:, 70:200].isnan().all()
    good = torch.tensor(k_lens, dtype=torch.int32, device=DEV)
    for lo, hi, bi in ((0, 70, 0), (200, 240, 2)):
        ref, ref_lse = reference_attention(q[lo:hi].unsqueeze(0), k[bi:bi + 1], v[bi:bi + 1], causal=True,
                                           key_lens=good[bi:bi + 1])
        check(out[lo:hi].unsqueeze(0), ref, f"{impl} batch {bi}", lse[:, lo:hi].unsqueeze(0), ref_lse)


@pytest.mark.parametrize("one_launch", [False, True], ids=["combine-kernel", "one-launch"])
def test_paged_decode_cuda_graph_replay(one_launch):
    b, hq, hkv, d, page = 8, 32, 8, 128, 16
    q, k, v = qkv(b, 1, 1024, hq, hkv, d, seed=31)
    lens = torch.full((b,), 1024, dtype=torch.int32, device=DEV)
    k_cache, v_cache, table = paged_kv_cache(k, v, page, generator=torch.Generator().manual_seed(0))
    splits = ops.decode_num_splits(b, hkv, 1, hq // hkv, table.shape[1] * page, d)
    assert splits > 1, "the case is a split call"
    workspace = torch.empty(max(1, ops.decode_workspace_size(splits, b, hq, 1, d)), device=DEV)
    counters = torch.zeros(ops.decode_counter_count(b, hkv, 1, hq // hkv), dtype=torch.int32, device=DEV)
    out = torch.empty_like(q)
    kwargs = dict(out=out, num_splits=splits, workspace=workspace, check_seqlens=False,
                  split_counters=counters if one_launch else None)
    ops.paged_decode(q, k_cache, v_cache, table, lens, **kwargs)  # warm-up outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.paged_decode(q, k_cache, v_cache, table, lens, **kwargs)
    for step in range(3):
        q.copy_(rand(*q.shape, seed=100 + step))
        new_len = 1024 - 100 * step
        lens.fill_(new_len)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = reference_attention(q, k, v, key_lens=lens)[0]
        check(out, ref, f"graph replay step {step}")


# ---- bad input -------------------------------------------------------------------------------------

def test_bad_inputs_raise_clear_errors():
    q, k, v = qkv(1, 4, 64, 8, 2, 128)
    with pytest.raises(TypeError, match="split_counters must be int32"):
        ops.decode(q, k, v, num_splits=2, split_counters=torch.zeros(4, device=DEV))
    with pytest.raises(ValueError, match="split_counters must be contiguous with at least 2 ints"):
        ops.decode(q, k, v, num_splits=2, split_counters=torch.zeros(1, dtype=torch.int32, device=DEV))
    with pytest.raises(TypeError, match="q must be bfloat16 or float16, got float32"):
        ops.prefill(q.float(), k.float(), v.float())
    with pytest.raises(TypeError, match="k must be float16, got bfloat16"):
        ops.prefill(q.half(), k, v.half())
    with pytest.raises(TypeError, match="out must be bfloat16, got float16"):
        ops.decode(q, k, v, out=torch.empty_like(q, dtype=torch.float16))
    with pytest.raises(ValueError, match="head_dim"):
        ops.prefill(q[..., :96].contiguous(), k[..., :96].contiguous(), v[..., :96].contiguous())
    with pytest.raises(ValueError, match="multiple of heads_kv"):
        ops.prefill(q[:, :, :7], k[:, :, :2], v[:, :, :2])
    with pytest.raises(ValueError, match="contiguous last dim"):
        ops.prefill(q.transpose(-1, -2), k, v)
    with pytest.raises(ValueError, match="same shape"):
        ops.prefill(q, k, v[:, :32])
    with pytest.raises(ValueError, match="impl"):
        ops.prefill(q, k, v, impl="fast")
    with pytest.raises(ValueError, match="scale"):
        ops.prefill(q, k, v, scale=-1.0)
    lens = torch.tensor([65], dtype=torch.int32, device=DEV)
    k_cache, v_cache, table = paged_kv_cache(k, v, 16)
    with pytest.raises(ValueError, match="seqlens_k"):
        ops.paged_decode(q[:, :1], k_cache, v_cache, table, lens)
    bad_table = table.clone()
    bad_table[0, 0] = 10_000
    ok_lens = torch.tensor([64], dtype=torch.int32, device=DEV)
    with pytest.raises(IndexError, match="page ids"):
        ops.paged_decode(q[:, :1], k_cache, v_cache, bad_table, ok_lens, debug=True)
    # the default check_seqlens reads the page ids the lengths use with the lengths
    with pytest.raises(IndexError, match=r"page ids outside \[0, num_pages"):
        ops.paged_decode(q[:, :1], k_cache, v_cache, bad_table, ok_lens)
    negative = table.clone()
    negative[0, 1] = -1
    with pytest.raises(IndexError, match="page ids"):
        ops.paged_prefill(q[0], k_cache, v_cache, negative, torch.tensor([0, q.shape[1]], dtype=torch.int32,
                                                                          device=DEV), ok_lens)
    # entries past the pages 64 keys use (4 of 6) may hold anything
    past_the_length = torch.cat([table, torch.full((1, 2), -1, dtype=torch.int32, device=DEV)], dim=1)
    ops.paged_decode(q[:, :1], k_cache, v_cache, past_the_length, ok_lens)
    with pytest.raises(TypeError, match="int32"):
        ops.paged_decode(q[:, :1], k_cache, v_cache, table.long(), ok_lens)


# ---- fp16: the same kernels with f16 MMAs -----------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("d", ops.HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_decode_fp16(impl, d, causal):
    problem = AttentionProblem(2, 2, 1000, 32, 8, d, causal=causal, dtype="fp16")

    def run(q, k, v, out, lse):
        assert q.dtype == out.dtype == torch.float16
        ops.decode(q, k, v, causal=causal, impl=impl, out=out, lse=lse)

    result = verify_attention(run, problem, seed=13, lse_atol=LSE_ATOL, lse_rtol=LSE_RTOL)
    assert result, f"decode fp16 {impl} {problem.label()}: {result.reason}"
    # split-KV with the combine kernel writing fp16
    split = AttentionProblem(3, 1, 3000, 32, 8, d, dtype="fp16")
    result = verify_attention(lambda q, k, v, out, lse: ops.decode(q, k, v, num_splits=7, impl=impl, out=out,
                                                                    lse=lse), split, seed=14,
                              lse_atol=LSE_ATOL, lse_rtol=LSE_RTOL)
    assert result, f"decode fp16 {impl} 7 splits: {result.reason}"


@pytest.mark.parametrize("impl", PREFILL_IMPLS)
@pytest.mark.parametrize("d", ops.HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk,hq,hkv", [(300, 333, 16, 2), (128, 128, 8, 8)])
def test_prefill_fp16(impl, d, causal, sq, sk, hq, hkv):
    skip_unless_runnable(impl)
    problem = AttentionProblem(2, sq, sk, hq, hkv, d, causal=causal, dtype="fp16")

    def run(q, k, v, out, lse):
        ops.prefill(q, k, v, causal=causal, impl=impl, out=out, lse=lse)

    result = verify_attention(run, problem, seed=15, lse_atol=LSE_ATOL, lse_rtol=LSE_RTOL)
    assert result, f"prefill fp16 {impl} {problem.label()}: {result.reason}"


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("page_size", [12, 16])
@pytest.mark.parametrize("d", ops.HEAD_DIMS)
def test_paged_decode_and_prefill_fp16(impl, page_size, d, guards):
    q_lens, k_lens = [70, 1, 130], [90, 10, 400]
    hq, hkv = 16, 2
    f16 = torch.float16
    k, v = rand(3, max(k_lens), hkv, d, seed=41, dtype=f16), rand(3, max(k_lens), hkv, d, seed=42, dtype=f16)
    lens = torch.tensor(k_lens, dtype=torch.int32, device=DEV)
    k_cache, v_cache, table = paged_kv_cache(k, v, page_size, generator=torch.Generator().manual_seed(d))
    assert k_cache.dtype == f16
    # decode: one query per sequence
    q1 = rand(3, 1, hq, d, seed=43, dtype=f16)
    q1, kc, vc, table, lens = guards.copies(q=q1, k_cache=k_cache, v_cache=v_cache, page_table=table,
                                            seqlens_k=lens)
    out, lse = guards.empty(q1.shape, f16, name="out"), guards.empty((3, hq, 1), torch.float32, name="lse")
    ops.paged_decode(q1, kc, vc, table, lens, causal=True, impl=impl, out=out, lse=lse)
    ref, ref_lse = reference_attention(q1, k, v, causal=True, key_lens=lens)
    check(out, ref, f"paged decode fp16 {impl} d{d} page {page_size}", lse, ref_lse)
    # ragged prefill
    q = rand(sum(q_lens), hq, d, seed=44, dtype=f16)
    cu = torch.tensor([0, 70, 71, 201], dtype=torch.int32, device=DEV)
    out = guards.empty(q.shape, f16, name="out_prefill")
    lse = guards.empty((hq, q.shape[0]), torch.float32, name="lse_prefill")
    ops.paged_prefill(q, kc, vc, table, cu, lens, causal=True, impl=impl, out=out, lse=lse)
    guards.check()
    check_ragged_prefill(out, lse, q, k, v, cu, lens, causal=True,
                         label=f"paged prefill fp16 {impl} d{d} page {page_size}")


# ---- attention(): routing, dtypes, autograd ---------------------------------------------------

def backend_module():
    import importlib

    return importlib.import_module("kernels.extension.backend.attention")


def test_backend_follows_the_measured_routing():
    """On the H200 with the committed results, each kind of call goes to the backend the table
    puts first among those that can run it (that the table puts the fastest first is checked on
    the CPU: test_committed_h200_table_puts_the_fastest_first); every one matches the reference."""
    backend = backend_module()
    if backend._cuda_device(torch.cuda.current_device())[1] != "h200":
        pytest.skip("the committed results are the H200's")
    runnable = {"cuda", "torch"} | ({"fa4"} if backend._fa4() is not None else set())

    def first_runnable(phase):  # what the committed table puts first among the backends here
        return next(b for b in backend.attention_routing.routes("h200")[(phase, 128)].order if b in runnable)

    q, k, v = qkv(2, 200, 300, 16, 4, 128, seed=41)
    assert backend.select_backend(q, k, v) == first_runnable("prefill")
    out = backend.attention(q, k, v, causal=True)
    check(out, reference_attention(q, k, v, causal=True)[0], "routed prefill")
    qd = q[:, :1].contiguous()
    assert backend.select_backend(qd, k, v) == first_runnable("decode") == "cuda"  # only cuda measured
    lens = torch.tensor([300, 17], dtype=torch.int32, device=DEV)
    k_cache, v_cache, table = paged_kv_cache(k, v, 16, generator=torch.Generator().manual_seed(0))
    assert backend.select_backend(qd, k_cache, v_cache, page_table=table) == first_runnable("paged-decode")
    out = backend.attention(qd, k_cache, v_cache, page_table=table, seqlens_k=lens)
    check(out, reference_attention(qd, k, v, key_lens=lens)[0], "routed paged decode")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("problem", [
    AttentionProblem(2, 1, 1000, 32, 8, 128),                 # decode
    AttentionProblem(2, 200, 300, 16, 4, 128, causal=True),   # prefill
    AttentionProblem(1, 300, 200, 8, 2, 128, causal=True),    # rows 0-99 see no key: zeros, LSE -inf
    AttentionProblem(2, 130, 130, 8, 8, 64, causal=True),
    AttentionProblem(2, 130, 257, 8, 1, 256),
], ids=lambda p: p.label().replace(" ", "-"))
@pytest.mark.parametrize("strict", [None, "ladder"], ids=["routed", "ladder"])
def test_routed_attention_keeps_the_contract(dtype, problem, strict):
    """Whichever backend the routing picks, and the ladder's rung where it runs: guarded,
    poisoned outputs, empty rows exactly zero with LSE -inf, a repeated run bit-identical."""
    import contextlib
    from dataclasses import replace

    from kernels.extension.backend import ladder_path

    backend = backend_module()
    problem = replace(problem, dtype=dtype)
    if strict == "ladder" and isinstance(ladder_path.rung(), str):
        pytest.skip(ladder_path.rung())
    if strict == "ladder" and not HOPPER:
        pytest.skip("the ladder's rung is built for sm_90a")

    def run(q, k, v, out, lse):
        with backend.use_backend(strict) if strict else contextlib.nullcontext():
            backend.attention(q, k, v, causal=problem.causal, out=out, lse=lse)

    def picked() -> str:  # the backend's name, for the failure message only (an assert's message is lazy)
        q, k, v = qkv(problem.batch, problem.seqlen_q, problem.seqlen_k, problem.heads_q, problem.heads_kv,
                      problem.head_dim, dtype=dtype)
        return backend.select_backend(q, k, v)

    result = verify_attention(run, problem, seed=71, lse_atol=LSE_ATOL, lse_rtol=LSE_RTOL)
    assert result, f"attention() on {picked()} {problem.label()}: {result.reason}"


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("sq", [1, 3, 200])
def test_backend_runs_fp16_and_bf16_on_our_kernels(dtype, sq):
    backend = backend_module()
    q, k, v = qkv(2, sq, 300, 16, 4, 128, seed=51, dtype=dtype)
    with backend.use_backend("cuda"):
        out = backend.attention(q, k, v, causal=True)
    assert out.dtype == q.dtype
    check(out, reference_attention(q, k, v, causal=True)[0], f"attention {dtype} sq {sq} on cuda")
    if sq == 1:
        assert backend.select_backend(q, k, v) == "cuda"  # fp16 decode no longer falls back


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_autograd_on_the_gpu(dtype, causal, d):
    from autograd_reference import reference_fp64

    backend = backend_module()
    b, sq, sk, hq, hkv = 2, 130, 130, 8, 2
    q, k, v = (rand(b, s, h, d, seed=60 + i, dtype=dtype) for i, (s, h) in enumerate(
        ((sq, hq), (sk, hkv), (sk, hkv))))
    grad_out = rand(b, sq, hq, d, seed=63, dtype=dtype)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    name = backend.select_backend(*leaves)
    fa4_backward = backend._fa4() is not None and d <= backend.FA4_BACKWARD_MAX_HEAD_DIM
    assert name == ("fa4" if fa4_backward else "torch")
    out = backend.attention(*leaves, causal=causal)
    assert out.grad_fn is not None and out.dtype == dtype
    out.backward(grad_out)
    refs = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref = reference_fp64(*refs, causal)
    ref.backward(grad_out.double())
    check(out, ref.float(), f"{name} forward")
    for label, ours, theirs in zip(("dq", "dk", "dv"), leaves, refs):
        err = rel_err(ours.grad, theirs.grad)
        assert err < 2e-2, f"{name} {label} {dtype} d{d} causal {causal}: rel err {err:.3g}"
    with pytest.raises(RuntimeError, match="no backward"):
        with backend.use_backend("cuda"):
            backend.attention(*leaves)


def test_backend_cuda_and_torch_match():
    from kernels.extension.backend import attention, use_backend

    q, k, v = qkv(2, 200, 300, 16, 4, 128, seed=41)
    with use_backend("cuda"):
        out = attention(q, k, v, causal=True)
    check(out, reference_attention(q, k, v, causal=True)[0], "backend cuda")
    with use_backend("torch"):
        ref = attention(q, k, v, causal=True)
    check(ref, reference_attention(q, k, v, causal=True)[0], "backend torch")
    with use_backend("cuda"), pytest.raises(RuntimeError, match="cannot run"):
        attention(q.float(), k.float(), v.float())
