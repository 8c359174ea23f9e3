"""GPU tests of the production attention kernels against an fp32 reference.

Needs a CUDA device and the built extension (`python -m tools.build_ext`); skipped otherwise.
Run: pytest -m gpu tests/test_attention_gpu.py
"""

from __future__ import annotations

import pytest
import torch

from test_attention_reference import make_paged, reference, rel_err

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

from kernels.extension.ops import attention as ops  # noqa: E402

if not ops.available():
    pytest.skip("extension module 'attention' not built (python -m tools.build_ext)", allow_module_level=True)

TOL = 1e-2
DEV = "cuda"
IMPLS = ("tc", "scalar")


def rand(*shape, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return torch.randn(*shape, device=DEV, generator=g, dtype=torch.float32).to(torch.bfloat16)


def qkv(b, sq, sk, hq, hkv, d, seed=0):
    return rand(b, sq, hq, d, seed=seed), rand(b, sk, hkv, d, seed=seed + 1), rand(b, sk, hkv, d, seed=seed + 2)


def check(out, ref, what):
    err = rel_err(out, ref)
    assert err == err, f"{what}: NaN in output"
    assert err <= TOL, f"{what}: rel err {err:.2e} > {TOL}"


# ---- contiguous --------------------------------------------------------------------------------

@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk,hq,hkv", [(1, 1000, 32, 8), (3, 257, 8, 1), (1, 37, 4, 4), (5, 4096, 8, 8)])
def test_decode(impl, d, causal, sq, sk, hq, hkv):
    q, k, v = qkv(2, sq, sk, hq, hkv, d)
    lse = torch.full((2, hq, sq), float("nan"), device=DEV)
    out = torch.full_like(q, float("nan"))
    ops.decode(q, k, v, causal=causal, impl=impl, out=out, lse=lse)
    ref, ref_lse = reference(q, k, v, causal=causal)
    check(out, ref, f"decode {impl} d{d} causal={causal} sq{sq} sk{sk} {hq}/{hkv}")
    torch.testing.assert_close(lse, ref_lse, atol=2e-2, rtol=1e-3)


@pytest.mark.parametrize("num_splits", [1, 2, 7, 64])
def test_decode_split_counts(num_splits):
    q, k, v = qkv(3, 1, 3000, 32, 8, 128, seed=3)
    out = ops.decode(q, k, v, num_splits=num_splits)
    check(out, reference(q, k, v)[0], f"decode num_splits={num_splits}")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk,hq,hkv", [(128, 128, 8, 8), (70, 333, 16, 2), (300, 200, 8, 1), (1, 50, 4, 1)])
def test_prefill(impl, d, causal, sq, sk, hq, hkv):
    q, k, v = qkv(2, sq, sk, hq, hkv, d, seed=5)
    lse = torch.full((2, hq, sq), float("nan"), device=DEV)
    out = torch.full_like(q, float("nan"))
    ops.prefill(q, k, v, causal=causal, impl=impl, out=out, lse=lse)
    ref, ref_lse = reference(q, k, v, causal=causal)
    check(out, ref, f"prefill {impl} d{d} causal={causal} sq{sq} sk{sk} {hq}/{hkv}")
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite), "LSE -inf pattern differs (rows that see no key)"
    torch.testing.assert_close(lse[finite], ref_lse[finite], atol=2e-2, rtol=1e-3)


@pytest.mark.parametrize("fn", ["decode", "prefill"])
@pytest.mark.parametrize("mask_dims", [2, 3])
def test_masks(fn, mask_dims):
    sq = 2 if fn == "decode" else 90
    q, k, v = qkv(2, sq, 300, 16, 4, 128, seed=7)
    g = torch.Generator(device=DEV).manual_seed(1)
    shape = (2, 300) if mask_dims == 2 else (2, sq, 300)
    mask = torch.rand(shape, device=DEV, generator=g) > 0.3
    if mask_dims == 2:
        mask[0] = False  # every row of batch 0 sees no key: zeros, not NaN
    else:
        mask[0, 0] = False  # one fully masked row
    out = getattr(ops, fn)(q, k, v, mask=mask, causal=True)
    ref = reference(q, k, v, mask=mask, causal=True)[0]
    check(out, ref, f"{fn} mask {mask_dims}-D")
    assert not torch.isnan(out).any()


def test_prefill_scale_and_strided_q():
    q_big, k, v = qkv(2, 100, 100, 8, 8, 64, seed=9)
    q = torch.cat([q_big, q_big], dim=2)[:, :, 4:12]  # non-contiguous head/token strides
    out = ops.prefill(q, k, v, scale=0.05)
    check(out, reference(q, k, v, scale=0.05)[0], "prefill strided q, scale 0.05")


# ---- paged ---------------------------------------------------------------------------------------

# Page sizes: powers of two (a shift-like divisor), 24 and 48 (multiples of a thread's 8 rows,
# not powers of two: one lookup per thread with a general FastDivmod), 5 and 12 (rows of a
# thread straddle pages: the per-row lookup path).
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("page_size", [1, 5, 12, 16, 24, 48, 64, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_paged_decode_matches_reference_and_contiguous(impl, page_size, causal):
    b, sk, hq, hkv, d = 4, 700, 32, 8, 128
    q, k, v = qkv(b, 1, sk, hq, hkv, d, seed=11)
    lens = torch.tensor([700, 1, 333, 64], dtype=torch.int32, device=DEV)
    g = torch.Generator().manual_seed(page_size)
    k_cache, v_cache, table = make_paged(k, v, lens, page_size, generator=g)
    out = ops.paged_decode(q, k_cache, v_cache, table, lens, causal=causal, impl=impl)
    ref = reference(q, k, v, causal=causal, key_lens=lens)[0]
    check(out, ref, f"paged decode {impl} page {page_size}")
    # Same answer as the contiguous kernel on the full-length batch entry.
    contiguous = ops.decode(q[:1], k[:1], v[:1], causal=causal, impl=impl)
    check(out[:1], contiguous.float(), "paged vs contiguous")


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("page_size", [1, 12, 16, 48, 64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_paged_prefill_ragged(impl, page_size, causal, d):
    q_lens, k_lens = [70, 10, 130], [90, 10, 400]
    hq, hkv = 16, 2
    g = torch.Generator().manual_seed(page_size + d)
    sk = max(k_lens)
    k, v = rand(len(q_lens), sk, hkv, d, seed=21), rand(len(q_lens), sk, hkv, d, seed=22)
    lens = torch.tensor(k_lens, dtype=torch.int32, device=DEV)
    k_cache, v_cache, table = make_paged(k, v, lens, page_size, generator=g)
    q = rand(sum(q_lens), hq, d, seed=23)
    cu = torch.tensor([0, 70, 80, 210], dtype=torch.int32, device=DEV)
    lse = torch.full((hq, q.shape[0]), float("nan"), device=DEV)
    out = ops.paged_prefill(q, k_cache, v_cache, table, cu, lens, causal=causal, impl=impl, lse=lse)
    for bi, (lo, hi) in enumerate(zip(cu.tolist()[:-1], cu.tolist()[1:])):
        ref, ref_lse = reference(q[lo:hi].unsqueeze(0), k[bi:bi + 1], v[bi:bi + 1], causal=causal,
                                 key_lens=lens[bi:bi + 1])
        check(out[lo:hi], ref[0], f"paged prefill {impl} d{d} page {page_size} batch {bi}")
        finite = torch.isfinite(ref_lse[0])
        torch.testing.assert_close(lse[:, lo:hi][finite], ref_lse[0][finite], atol=2e-2, rtol=1e-3)


def test_paged_decode_cuda_graph_replay():
    b, hq, hkv, d, page = 8, 32, 8, 128, 16
    q, k, v = qkv(b, 1, 1024, hq, hkv, d, seed=31)
    lens = torch.full((b,), 1024, dtype=torch.int32, device=DEV)
    k_cache, v_cache, table = make_paged(k, v, lens, page, generator=torch.Generator().manual_seed(0))
    splits = ops.decode_num_splits(b, hkv, 1, hq // hkv, table.shape[1] * page, d)
    workspace = torch.empty(max(1, ops.decode_workspace_size(splits, b, hq, 1, d)), device=DEV)
    out = torch.empty_like(q)
    kwargs = dict(out=out, num_splits=splits, workspace=workspace, check_seqlens=False)
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
        ref = reference(q, k, v, key_lens=lens)[0]
        check(out, ref, f"graph replay step {step}")


# ---- bad input -------------------------------------------------------------------------------------

def test_bad_inputs_raise_clear_errors():
    q, k, v = qkv(1, 4, 64, 8, 2, 128)
    with pytest.raises(TypeError, match="bfloat16"):
        ops.prefill(q.half(), k.half(), v.half())
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
    k_cache, v_cache, table = make_paged(k, v, lens, 16)
    with pytest.raises(ValueError, match="seqlens_k"):
        ops.paged_decode(q[:, :1], k_cache, v_cache, table, lens)
    bad_table = table.clone()
    bad_table[0, 0] = 10_000
    ok_lens = torch.tensor([64], dtype=torch.int32, device=DEV)
    with pytest.raises(IndexError, match="page ids"):
        ops.paged_decode(q[:, :1], k_cache, v_cache, bad_table, ok_lens, debug=True)
    with pytest.raises(TypeError, match="int32"):
        ops.paged_decode(q[:, :1], k_cache, v_cache, table.long(), ok_lens)


def test_backend_picks_cuda_and_matches():
    from kernels.extension.backend import attention, select_backend, use_backend

    q, k, v = qkv(2, 200, 300, 16, 4, 128, seed=41)
    assert select_backend(q, k, v) == "cuda"
    out = attention(q, k, v, causal=True)
    check(out, reference(q, k, v, causal=True)[0], "backend cuda")
    with use_backend("torch"):
        ref = attention(q, k, v, causal=True)
    check(ref, reference(q, k, v, causal=True)[0], "backend torch")
    with use_backend("cuda"), pytest.raises(RuntimeError, match="cannot run"):
        attention(q.float(), k.float(), v.float())
