"""An FP8 (e4m3) paged KV cache: `PagedKVCache(dtype=torch.float8_e4m3fn)` stores e4m3 pages and
per-(layer, kv head) factors; `attention()` and `DecodePlan` take the cache with `k_scale` /
`v_scale`; our paged decode reads it as it is (csrc decode_kernel.cuh, KvElement e4m3), the
torch path dequantizes it. The CPU tests hold the torch path to the fp64 reference on the
dequantized cache and check every refusal; the gpu tests hold our kernel to the same reference,
and to our bf16 decode on the same values (power-of-two factors make them exact in bf16)."""

from __future__ import annotations

import pytest
import torch

from kernels.extension.backend import attention, select_backend
from kernels.extension.backend.plan import DecodePlan
from kernels.harness import paged_kv_cache, reference_attention
from kernels.harness.checks import rel_err
from kernels.model import PagedKVCache

E4M3 = torch.float8_e4m3fn


def e4m3_problem(batch=3, heads_q=8, heads_kv=2, head_dim=64, seqlen_k=70, page_size=16, device="cpu",
                 dtype=torch.bfloat16, per_head=True, seed=0):
    """q, an e4m3 paged cache of random keys and values (K about 3x V's magnitude) with its
    factors ([Hkv] or [1]) and page table, and the dequantized K, V [B, Sk, Hkv, D] in fp64."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, 1, heads_q, head_dim, generator=g)
    k = 3 * torch.randn(batch, seqlen_k, heads_kv, head_dim, generator=g)
    v = torch.randn(batch, seqlen_k, heads_kv, head_dim, generator=g)
    scales = []
    for x in (k, v):
        amax = x.abs().amax(dim=(0, 1, 3)) if per_head else x.abs().amax().view(1)
        scales.append((amax / 448).float())
    k8 = (k / scales[0].view(1, 1, -1, 1)).to(E4M3).float()
    v8 = (v / scales[1].view(1, 1, -1, 1)).to(E4M3).float()
    k_cache, v_cache, table = paged_kv_cache(k8, v8, page_size, generator=torch.Generator().manual_seed(seed))
    k_deq = k8.double() * scales[0].double().view(1, 1, -1, 1)
    v_deq = v8.double() * scales[1].double().view(1, 1, -1, 1)
    return (q.to(device, dtype), k_cache.to(E4M3).to(device), v_cache.to(E4M3).to(device), table.to(device),
            scales[0].to(device), scales[1].to(device), k_deq, v_deq)


def reference(q, k, v, lens):
    """Attention of q [B, 1, Hq, D] over the first lens[b] keys of k, v [B, Sk, Hkv, D] (on the
    CPU), in fp64: out [B, 1, Hq, D] and lse [B, Hq, 1]."""
    return reference_attention(q.cpu(), k, v, key_lens=torch.tensor(lens), dtype=torch.float64)


# ---- the cache ------------------------------------------------------------------------------

def test_cache_stores_e4m3_with_per_head_factors_and_saturates():
    cache = PagedKVCache(num_layers=2, heads_kv=2, head_dim=64, max_batch=2, max_seqlen=40, page_size=16,
                         dtype=E4M3, device="cpu", kv_scale=0.5)
    assert cache.k.dtype == E4M3 and cache.k.element_size() == 1
    assert cache.k_scale.shape == (2, 2) and cache.k_scale.dtype == torch.float32
    assert cache.k_scale.tolist() == [[0.5, 0.5]] * 2 and cache.v_scale is not cache.k_scale
    cache.k_scale[1] = torch.tensor([0.02, 2.0])
    cache.v_scale[1] = torch.tensor([0.03, 0.25])
    cache.grow(0, 33)
    g = torch.Generator().manual_seed(1)
    k = torch.randn(33, 2, 64, generator=g)
    v = torch.randn(33, 2, 64, generator=g)
    k[0, 0, 0] = 1e6  # past e4m3's range times the factor: saturates, no NaN
    slots = torch.tensor(cache.slots(0, 0, 33))
    cache.write(1, slots, k, v)
    k_cache, v_cache = cache.layer(1)
    k_scale, v_scale = cache.layer_scales(1)
    stored_k = k_cache.view(-1, 2, 64)[slots].float() * k_scale.view(1, -1, 1)
    stored_v = v_cache.view(-1, 2, 64)[slots].float() * v_scale.view(1, -1, 1)
    assert stored_k[0, 0, 0] == 448 * k_scale[0]
    assert not stored_k.isnan().any()
    k[0, 0, 0] = stored_k[0, 0, 0]
    # e4m3 keeps 3 mantissa bits: half an ulp is 1/16 of the value; below 2^-6 (times the
    # factor) the spacing is fixed at 2^-9
    for stored, x, s in ((stored_k, k, k_scale), (stored_v, v, v_scale)):
        bound = torch.maximum(x.abs() / 16, 2.0 ** -10 * s.view(1, -1, 1))
        assert ((stored - x).abs() <= bound * 1.0001).all()
    assert (cache.layer(0)[0].float() == 0).all()  # the other layer is untouched
    assert PagedKVCache(num_layers=1, heads_kv=1, head_dim=64, max_batch=1, max_seqlen=8, page_size=8,
                        device="cpu").layer_scales(0) == (None, None)


def test_cache_calibrates_its_factors_from_a_16_bit_cache():
    """`calibrate`: headroom * amax / 448 per (layer, kv head) of what the 16-bit cache holds on the
    named pages (all by default); a zero head gets the smallest positive factor, never 0."""
    sizes = dict(num_layers=2, heads_kv=3, head_dim=64, max_batch=2, max_seqlen=32, page_size=8, device="cpu")
    bf16 = PagedKVCache(**sizes, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(3)
    bf16.k.copy_(torch.randn(bf16.k.shape, generator=g))
    bf16.v.copy_(torch.randn(bf16.v.shape, generator=g))
    bf16.k[:, :, :, 2] = 0  # a head that holds only zeros
    bf16.k[1, 5, 0, 1, 0] = 1000.0  # on page 5 only
    fp8 = PagedKVCache(**sizes, dtype=E4M3)
    pages = torch.tensor([1, 2, 3])
    fp8.calibrate(bf16, pages)
    for mine, seen in ((fp8.k_scale, bf16.k), (fp8.v_scale, bf16.v)):
        want = 2 * seen[:, pages].float().abs().amax(dim=(1, 2, 4)) / 448
        torch.testing.assert_close(mine, want.clamp_min(torch.finfo(torch.float32).tiny), atol=0, rtol=0)
    assert (fp8.k_scale[:, 2] > 0).all() and fp8.k_scale[1, 1] < 1
    fp8.calibrate(bf16, headroom=1.0)  # every page: the outlier sets layer 1, head 1
    assert fp8.k_scale[1, 1] == 1000.0 / 448
    with pytest.raises(ValueError, match="not FP8"):
        bf16.calibrate(fp8)
    with pytest.raises(ValueError, match="same layers and kv heads"):
        fp8.calibrate(PagedKVCache(**{**sizes, "heads_kv": 2}, dtype=torch.bfloat16))


@pytest.mark.parametrize("kv_scale", [0.0, -1.0, float("inf"), float("nan"), True, "1"])
def test_cache_refuses_a_bad_factor(kv_scale):
    with pytest.raises(ValueError, match="kv_scale must be a positive finite number"):
        PagedKVCache(num_layers=1, heads_kv=1, head_dim=64, max_batch=1, max_seqlen=8, page_size=8,
                     dtype=E4M3, device="cpu", kv_scale=kv_scale)


# ---- attention() and DecodePlan on the torch path -------------------------------------------

@pytest.mark.parametrize("per_head", [True, False], ids=["per-head", "per-tensor"])
@pytest.mark.parametrize("page_size", [16, 5])
def test_attention_on_an_e4m3_cache_matches_the_reference(per_head, page_size):
    q, k_cache, v_cache, table, k_scale, v_scale, k, v = e4m3_problem(page_size=page_size, per_head=per_head)
    lens = [70, 0, 23]
    seqlens = torch.tensor(lens, dtype=torch.int32)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((3, 8, 1), float("nan"))
    assert select_backend(q, k_cache, v_cache, page_table=table, seqlens_k=seqlens, k_scale=k_scale,
                          v_scale=v_scale) == "torch"  # no GPU here
    result = attention(q, k_cache, v_cache, page_table=table, seqlens_k=seqlens, k_scale=k_scale,
                       v_scale=v_scale, out=out, lse=lse)
    want, want_lse = reference(q, k, v, lens)
    assert result is out and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), want, atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(lse.double(), want_lse, atol=1e-4, rtol=1e-4)


def test_attention_takes_numbers_or_0d_tensors_for_one_factor_each():
    q, k_cache, v_cache, table, k_scale, v_scale, k, v = e4m3_problem(per_head=False)
    seqlens = torch.tensor([70, 3, 40], dtype=torch.int32)
    out = attention(q, k_cache, v_cache, page_table=table, seqlens_k=seqlens, k_scale=float(k_scale),
                    v_scale=float(v_scale))
    torch.testing.assert_close(out.double(), reference(q, k, v, [70, 3, 40])[0], atol=1e-2, rtol=1e-2)
    zero_dim = attention(q, k_cache, v_cache, page_table=table, seqlens_k=seqlens, k_scale=k_scale[0],
                         v_scale=v_scale[0])  # 0-d tensors
    torch.testing.assert_close(zero_dim, out, atol=0, rtol=0)


def _bad_calls():
    q, k_cache, v_cache, table, k_scale, v_scale, _, _ = e4m3_problem()
    seqlens = torch.full((3,), 70, dtype=torch.int32)
    paged = dict(page_table=table, seqlens_k=seqlens)
    bf16_cache = k_cache.to(torch.bfloat16)
    return [
        ((q, k_cache, v_cache), dict(paged), ValueError, "needs k_scale and v_scale"),
        ((q, k_cache, v_cache), dict(paged, k_scale=k_scale), ValueError, "needs k_scale and v_scale"),
        ((q, bf16_cache, bf16_cache), dict(paged, k_scale=k_scale, v_scale=v_scale), ValueError,
         "factors of an e4m3 cache"),
        ((q, k_cache, v_cache), dict(paged, k_scale=k_scale[:1], v_scale=v_scale), ValueError, "one shape"),
        ((q, k_cache, v_cache), dict(paged, k_scale=torch.ones(3), v_scale=torch.ones(3)), ValueError,
         r"\[Hkv = 2\] or \[1\]"),
        ((q, k_cache, v_cache), dict(paged, k_scale=k_scale.double(), v_scale=v_scale.double()), ValueError,
         "float32"),
        ((q, k_cache, v_cache), dict(paged, k_scale=0.0, v_scale=1.0), ValueError, "finite and positive"),
        ((q, k_cache, v_cache), dict(paged, k_scale="1", v_scale=1.0), TypeError, "scale must be a number"),
        ((q, k_cache, bf16_cache), dict(paged, k_scale=k_scale, v_scale=v_scale), TypeError,
         "k and v must share a dtype"),
        ((q.to(E4M3), k_cache, v_cache), dict(paged, k_scale=k_scale, v_scale=v_scale), TypeError,
         "q must be bfloat16, float16 or float32, got"),
        ((q, torch.zeros(3, 70, 2, 64).to(E4M3), torch.zeros(3, 70, 2, 64).to(E4M3)),
         dict(k_scale=k_scale, v_scale=v_scale), ValueError, "must be a paged cache"),
    ]


@pytest.mark.parametrize("index", range(len(_bad_calls())))
def test_attention_refuses_what_an_e4m3_cache_cannot_take(index):
    args, kwargs, error, message = _bad_calls()[index]
    with pytest.raises(error, match=message):
        attention(*args, **kwargs)


def test_decode_plan_runs_an_e4m3_cache_and_a_layers_own_factors():
    q, k_cache, v_cache, table, k_scale, v_scale, k, v = e4m3_problem()
    lens = torch.tensor([70, 33, 1], dtype=torch.int32)
    plan = DecodePlan(k_cache, v_cache, table, lens, heads_q=8, k_scale=k_scale, v_scale=v_scale)
    assert plan.dtype == torch.bfloat16 and plan.backend == "torch"  # bf16 queries by default
    torch.testing.assert_close(plan.run(q).double(), reference(q, k, v, [70, 33, 1])[0], atol=1e-2, rtol=1e-2)
    # another layer: the same cache with its factors doubled reads as twice the values
    out = plan.run(q, k_cache=k_cache.clone(), v_cache=v_cache.clone(), k_scale=k_scale, v_scale=2 * v_scale)
    torch.testing.assert_close(out.double(), 2 * reference(q, k, v, [70, 33, 1])[0], atol=2e-2, rtol=1e-2)
    with pytest.raises(ValueError, match="v_scale must be a contiguous"):
        plan.run(q, v_scale=v_scale[:1])
    with pytest.raises(ValueError, match="k_cache must be"):
        plan.run(q, k_cache=k_cache.to(torch.bfloat16), v_cache=v_cache)
    with pytest.raises(ValueError, match="q must be"):
        plan.run(q.half())
    assert DecodePlan(k_cache, v_cache, table, lens, heads_q=8, k_scale=k_scale, v_scale=v_scale,
                      q_dtype=torch.float16).dtype == torch.float16
    with pytest.raises(ValueError, match="needs k_scale and v_scale"):
        DecodePlan(k_cache, v_cache, table, lens, heads_q=8)
    bf16 = k_cache.to(torch.bfloat16)
    with pytest.raises(ValueError, match="factors of an e4m3 cache"):
        DecodePlan(bf16, bf16, table, lens, heads_q=8).run(q, k_scale=k_scale)


def test_fa4_reads_no_e4m3_cache():
    from kernels.extension.backend.attention import Call, _fa4_unsupported

    call = Call("cuda", (9, 0), "h200", torch.bfloat16, 128, "paged-prefill", False, False, fp8_kv=True)
    assert "reads no e4m3 cache" in _fa4_unsupported(call)


def test_dequantized_pages_are_what_the_prefill_kernels_read():
    """The pages a table names, dequantized into a compact 16-bit cache with an arange table:
    attention on it equals attention on the e4m3 cache (within the 16-bit rounding of the
    values), and table entries past a sequence's length, whatever they hold, are never a fault."""
    from kernels.extension.backend.torch_path import dequantized_pages

    q, k_cache, v_cache, table, k_scale, v_scale, k, v = e4m3_problem(page_size=16)
    table = table.clone()
    table[1, 2:] = torch.tensor([-7, 10**6, 3])[: table.shape[1] - 2]  # past sequence 1's 20 keys
    lens = [70, 20, 64]
    seqlens = torch.tensor(lens, dtype=torch.int32)
    k16, v16, table16 = dequantized_pages(k_cache, v_cache, table, (k_scale, v_scale), torch.bfloat16)
    assert k16.dtype == torch.bfloat16 and k16.shape == (table.numel(), 16, 2, 64)
    assert table16.dtype == torch.int32 and table16.flatten().tolist() == list(range(table.numel()))
    got = attention(q, k16, v16, page_table=table16, seqlens_k=seqlens)
    torch.testing.assert_close(got.double(), reference(q, k, v, lens)[0], atol=1.5e-2, rtol=1e-2)


def test_prefill_on_our_kernel_reads_the_dequantized_pages(monkeypatch):
    """Where our kernels run, a ragged prefill on an e4m3 cache hands the prefill kernel the
    dequantized pages of the queries' dtype and their table."""
    import importlib

    from kernels.extension.backend.plan import PrefillPlan

    backend = importlib.import_module("kernels.extension.backend.attention")
    q, k_cache, v_cache, table, k_scale, v_scale, _, _ = e4m3_problem()
    monkeypatch.setitem(backend._UNSUPPORTED, "cuda", lambda call: None)  # as on a Hopper host
    seen = {}
    monkeypatch.setattr(backend.ops, "paged_prefill", lambda *a, **kw: seen.update(args=a, **kw) or "out")
    cu = torch.tensor([0, 2, 3, 5], dtype=torch.int32)
    plan = PrefillPlan(k_cache, v_cache, table, torch.full((3,), 70, dtype=torch.int32), cu, heads_q=8,
                       total_q=5, k_scale=k_scale, v_scale=v_scale)
    assert plan.backend == "cuda" and plan.run(q[:, 0].repeat(2, 1, 1)[:5]) == "out"
    k16, v16, table16 = seen["args"][1:4]
    assert k16.dtype == v16.dtype == torch.bfloat16 and table16.shape == table.shape
    assert seen["check_seqlens"] is False


# ---- our paged decode ---------------------------------------------------------------------------

def _needs_module():
    from kernels.extension import loader

    if not loader.available("attention"):
        pytest.skip("the attention module is not built: python -m tools.build_ext")


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("heads", [(8, 2), (32, 8), (16, 1)], ids=lambda h: f"{h[0]}-{h[1]}")
@pytest.mark.parametrize("page_size", [1, 5, 64])
@pytest.mark.parametrize("num_splits", [1, 3])
def test_kernel_on_an_e4m3_cache_matches_the_reference(head_dim, dtype, heads, page_size, num_splits):
    from kernels.extension.ops import attention as ops

    _needs_module()
    lens = [300, 0, 1, 129]
    q, k_cache, v_cache, table, k_scale, v_scale, k, v = e4m3_problem(
        batch=4, heads_q=heads[0], heads_kv=heads[1], head_dim=head_dim, seqlen_k=300, page_size=page_size,
        device="cuda", dtype=dtype, per_head=heads[1] > 1, seed=head_dim + page_size)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out = torch.full_like(q, float("nan"))
    lse = torch.full((4, heads[0], 1), float("nan"), device="cuda")
    ops.paged_decode(q, k_cache, v_cache, table, seqlens, out=out, lse=lse, num_splits=num_splits,
                     k_scale=k_scale, v_scale=v_scale)
    torch.cuda.synchronize()
    want, want_lse = reference(q, k, v, lens)
    torch.testing.assert_close(out.double().cpu(), want, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse.double().cpu(), want_lse, atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("magnitude", [2.0 ** -20, 2.0 ** 20], ids=["tiny", "past-fp16"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_kernel_takes_queries_of_any_magnitude(magnitude, dtype):
    """The e4m3 decode multiplies in fp16: bf16 queries far below or above fp16's range (scaled
    by a power of two first) give the reference's result; the factor moves into k_scale so that
    the scores stay the same. fp16 queries take no scaling (past-fp16 does not exist for them)."""
    from kernels.extension.ops import attention as ops

    _needs_module()
    if dtype == torch.float16 and magnitude > 1:
        pytest.skip("no fp16 query is that large")
    q, k_cache, v_cache, table, k_scale, v_scale, k, v = e4m3_problem(
        batch=2, heads_q=16, heads_kv=4, head_dim=128, seqlen_k=200, device="cuda", dtype=dtype, seed=7)
    q = (q.double() * magnitude).to(dtype)
    seqlens = torch.tensor([200, 77], dtype=torch.int32, device="cuda")
    got = ops.paged_decode(q, k_cache, v_cache, table, seqlens, k_scale=k_scale / magnitude, v_scale=v_scale)
    want, _ = reference(q.double() / magnitude, k, v, [200, 77])
    torch.testing.assert_close(got.double().cpu(), want, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_kernel_on_an_e4m3_cache_is_as_close_as_the_bf16_decode_on_its_values(head_dim):
    """With power-of-two factors every dequantized value is a bf16 value, so our bf16 decode on
    the dequantized cache sees the same numbers as the e4m3 decode. The e4m3 decode multiplies
    in fp16 (P rounded to fp16, finer than bf16's): against the fp64 reference on those values
    its error is no larger than the bf16 decode's (up to the output's own bf16 rounding, which
    both share)."""
    from kernels.extension.ops import attention as ops

    _needs_module()
    q, k_cache, v_cache, table, _, _, _, _ = e4m3_problem(batch=2, heads_q=16, heads_kv=4, head_dim=head_dim,
                                                          seqlen_k=1000, device="cuda")
    k_scale = torch.tensor([2.0 ** -3, 2.0 ** -5, 1.0, 2.0 ** 2], device="cuda")
    v_scale = torch.tensor([2.0 ** -4, 2.0 ** -1, 2.0 ** -6, 1.0], device="cuda")
    lens = [1000, 517]
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    got = ops.paged_decode(q, k_cache, v_cache, table, seqlens, k_scale=k_scale, v_scale=v_scale)
    k16 = (k_cache.float() * k_scale.view(1, 1, -1, 1)).bfloat16()
    v16 = (v_cache.float() * v_scale.view(1, 1, -1, 1)).bfloat16()
    bf16 = ops.paged_decode(q, k16, v16, table, seqlens)
    # the reference on the same values, gathered from the pages in key order
    pages = table.long().cpu()
    k_keys = k16.double().cpu()[pages].flatten(1, 2)
    v_keys = v16.double().cpu()[pages].flatten(1, 2)
    want, _ = reference(q, k_keys, v_keys, lens)
    err, bf16_err = rel_err(got.double().cpu(), want), rel_err(bf16.double().cpu(), want)
    assert 0 < bf16_err < 1e-2
    assert err <= 1.25 * bf16_err, (err, bf16_err)


@pytest.mark.gpu
@pytest.mark.parametrize("one_launch", [False, True], ids=["combine-kernel", "one-launch"])
def test_kernel_plan_on_an_e4m3_cache_under_graph_replay(one_launch):
    """Captured once, replayed while the lengths and the factors change in place (split calls:
    a combine kernel, or the last split combining)."""
    _needs_module()
    q, k_cache, v_cache, table, k_scale, v_scale, k, v = e4m3_problem(device="cuda", seqlen_k=2000)
    lens = torch.tensor([70, 33, 1], dtype=torch.int32, device="cuda")
    plan = DecodePlan(k_cache, v_cache, table, lens, heads_q=8, k_scale=k_scale, v_scale=v_scale,
                      one_launch=one_launch)
    assert plan.num_splits > 1  # 2000 keys at batch 3: split
    assert plan.backend == "cuda"
    out = torch.full_like(q, float("nan"))
    plan.run(q, out=out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan.run(q, out=out)
    for step, factor in (([70, 33, 1], 1.0), ([12, 2000, 48], 2.0), ([1999, 65, 66], 0.5)):
        lens.copy_(torch.tensor(step, dtype=torch.int32))
        v_scale.mul_(factor)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        v = v * factor
        torch.testing.assert_close(out.double().cpu(), reference(q, k, v, step)[0], atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_prefill_on_an_e4m3_cache_matches_the_torch_path():
    """attention()'s ragged prefill on our kernels (dequantized pages) against the torch path on
    the same e4m3 cache, causal, packed queries of three sequences."""
    from kernels.extension.backend import use_backend

    _needs_module()
    _, k_cache, v_cache, table, k_scale, v_scale, _, _ = e4m3_problem(head_dim=128, device="cuda")
    q = torch.randn(40, 8, 128, device="cuda", dtype=torch.bfloat16)
    cu = torch.tensor([0, 17, 18, 40], dtype=torch.int32, device="cuda")
    seqlens = torch.tensor([70, 1, 33], dtype=torch.int32, device="cuda")
    kwargs = dict(page_table=table, seqlens_k=seqlens, cu_seqlens_q=cu, causal=True, k_scale=k_scale,
                  v_scale=v_scale)
    with use_backend("cuda"):
        got = attention(q, k_cache, v_cache, **kwargs)
    with use_backend("torch"):
        want = attention(q, k_cache, v_cache, **kwargs)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_kernel_routes_and_checks_the_factors():
    from kernels.extension.ops import attention as ops

    _needs_module()
    q, k_cache, v_cache, table, k_scale, v_scale, _, _ = e4m3_problem(device="cuda")
    seqlens = torch.full((3,), 70, dtype=torch.int32, device="cuda")
    assert select_backend(q, k_cache, v_cache, page_table=table, seqlens_k=seqlens, k_scale=k_scale,
                          v_scale=v_scale) == "cuda"
    for bad in (torch.zeros_like(k_scale), torch.full_like(k_scale, float("nan"))):
        with pytest.raises(ValueError, match="finite and positive"):
            ops.paged_decode(q, k_cache, v_cache, table, seqlens, k_scale=bad, v_scale=v_scale)
    with pytest.raises(ValueError, match="impl='tc' only"):
        ops.paged_decode(q, k_cache, v_cache, table, seqlens, k_scale=k_scale, v_scale=v_scale, impl="scalar")
    with pytest.raises(ValueError, match="needs k_scale and v_scale"):
        ops.paged_decode(q, k_cache, v_cache, table, seqlens)
    cu = torch.tensor([0, 1, 2, 3], dtype=torch.int32, device="cuda")
    with pytest.raises(TypeError, match="paged_prefill reads 16-bit pages"):
        ops.paged_prefill(q[:, 0], k_cache, v_cache, table, cu, seqlens)
    wide = torch.zeros(*k_cache.shape[:3], 72, device="cuda").to(E4M3)[..., :64]  # 72-byte heads
    with pytest.raises(ValueError, match="k_cache strides must be multiples of 16 elements"):
        ops.paged_decode(q, wide, wide, table, seqlens, k_scale=k_scale, v_scale=v_scale)
