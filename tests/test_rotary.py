"""Rotary embedding: the torch path on CPU, the CUDA kernel on GPU (marked gpu), both against
an independent float64 reference (complex multiplication), plus bad-input errors."""

from __future__ import annotations

import pytest
import torch

from kernels.extension.backend.rotary import apply_rotary_emb, apply_rotary_torch, rotary_tables

# Half an output ulp: the documented bound (kernels/extension/backend/rotary.py).
HALF_ULP = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11, torch.float32: 2.0**-23}


def reference(x, cos_rows, sin_rows, interleaved):
    """float64 rotation by complex multiplication; cos_rows/sin_rows [B, S, R/2]."""
    x64 = x.double()
    rotary_dim = 2 * cos_rows.shape[-1]
    xr = x64[..., :rotary_dim]
    if interleaved:
        z = torch.complex(xr[..., 0::2], xr[..., 1::2])
    else:
        z = torch.complex(*xr.chunk(2, dim=-1))
    w = torch.complex(cos_rows.double(), sin_rows.double()).unsqueeze(2)
    r = z * w
    rot = torch.stack((r.real, r.imag), -1).flatten(-2) if interleaved else torch.cat((r.real, r.imag), -1)
    return torch.cat((rot, x64[..., rotary_dim:]), -1)


def assert_within_bound(out, ref, x, tag=""):
    """|out - ref| <= half an ulp of ref plus fp32 product rounding; returns the max error."""
    err = (out.double() - ref).abs()
    tol = HALF_ULP[out.dtype] * ref.abs() + 1e-6 * (1 + x.double().abs())
    assert torch.isfinite(out).all(), f"{tag}: non-finite output"
    bad = err > tol
    assert not bad.any(), f"{tag}: {int(bad.sum())} elements beyond half an ulp, max err {err.max():.3g}"
    return float(err.max())


def make_case(batch, seqlen, hq, hk, head_dim, rotary_dim, dtype, device, seed=0,
              max_pos=None):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, seqlen, hq, head_dim, generator=g).to(dtype).to(device)
    k = torch.randn(batch, seqlen, hk, head_dim, generator=g).to(dtype).to(device)
    max_pos = max_pos or 2 * seqlen + 3
    cos, sin = rotary_tables(max_pos, rotary_dim, device=device)
    positions = torch.randint(0, max_pos, (batch, seqlen), generator=g).to(device)
    return q, k, cos, sin, positions


CONFIGS = [
    # batch, seqlen, hq, hk, head_dim, rotary_dim, interleaved
    (2, 7, 4, 2, 64, 64, False),
    (2, 7, 4, 2, 64, 64, True),
    (1, 13, 3, 1, 128, 64, False),
    (1, 13, 3, 1, 128, 32, True),
    (3, 5, 2, 2, 80, 80, False),
    (2, 9, 4, 2, 72, 64, False),  # out of place: one 16-byte pass-through vector per head in bf16
]


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_torch_path_matches_reference(cfg, dtype):
    batch, seqlen, hq, hk, d, r, interleaved = cfg
    q, k, cos, sin, pos = make_case(batch, seqlen, hq, hk, d, r, dtype, "cpu")
    q_out, k_out = apply_rotary_torch(q, k, cos, sin, pos, interleaved=interleaved)
    cos_rows, sin_rows = cos[pos], sin[pos]
    assert_within_bound(q_out, reference(q, cos_rows, sin_rows, interleaved), q, "q")
    assert_within_bound(k_out, reference(k, cos_rows, sin_rows, interleaved), k, "k")


def test_table_modes_agree_on_cpu():
    """Shared table (row = s), per-token tables [B, S, R/2] and explicit positions agree."""
    q, k, cos, sin, _ = make_case(2, 6, 2, 1, 32, 32, torch.float32, "cpu")
    shared = apply_rotary_torch(q, k, cos, sin)
    positions = torch.arange(6).expand(2, 6)
    by_pos = apply_rotary_torch(q, k, cos, sin, positions)
    per_token = apply_rotary_torch(q, k, cos[:6].expand(2, 6, -1), sin[:6].expand(2, 6, -1))
    pos_1d = apply_rotary_torch(q, k, cos, sin, torch.arange(6))
    for other in (by_pos, per_token, pos_1d):
        torch.testing.assert_close(other[0], shared[0], rtol=0, atol=0)
        torch.testing.assert_close(other[1], shared[1], rtol=0, atol=0)


def test_token_major_3d_inputs():
    q, k, cos, sin, pos = make_case(1, 9, 2, 2, 32, 32, torch.float32, "cpu")
    out4 = apply_rotary_torch(q, k, cos, sin, pos)
    out3 = apply_rotary_torch(q[0], k[0], cos, sin, pos[0])
    torch.testing.assert_close(out3[0], out4[0][0], rtol=0, atol=0)


def test_inplace_and_q_only():
    q, _, cos, sin, pos = make_case(1, 5, 2, 1, 32, 16, torch.float32, "cpu")
    expected, none = apply_rotary_torch(q, None, cos, sin, pos)
    assert none is None
    q_in = q.clone()
    out, _ = apply_rotary_emb(q_in, None, cos, sin, pos, inplace=True)
    assert out.data_ptr() == q_in.data_ptr()
    torch.testing.assert_close(q_in, expected, rtol=0, atol=0)


def test_out_of_range_positions_give_nan():
    q, k, cos, sin, pos = make_case(1, 4, 1, 1, 16, 16, torch.float32, "cpu", max_pos=8)
    pos[0, 1] = 8
    pos[0, 2] = -1
    q_out, _ = apply_rotary_torch(q, k, cos, sin, pos)
    assert torch.isnan(q_out[0, 1]).all() and torch.isnan(q_out[0, 2]).all()
    assert torch.isfinite(q_out[0, 0]).all() and torch.isfinite(q_out[0, 3]).all()


def test_conjugate_inverts():
    q, k, cos, sin, pos = make_case(2, 5, 2, 2, 32, 32, torch.float64, "cpu")
    rq, rk = apply_rotary_torch(q, k, cos, sin, pos, compute_dtype=torch.float64)
    bq, bk = apply_rotary_torch(rq, rk, cos, sin, pos, conjugate=True, compute_dtype=torch.float64)
    torch.testing.assert_close(bq, q)
    torch.testing.assert_close(bk, k)


def test_autograd_gradcheck():
    q, k, cos, sin, pos = make_case(1, 3, 2, 1, 8, 8, torch.float64, "cpu")
    q.requires_grad_(True)
    k.requires_grad_(True)

    def fn(q_, k_):
        return apply_rotary_emb(q_, k_, cos, sin, pos, interleaved=True)

    assert torch.autograd.gradcheck(fn, (q, k))


@pytest.mark.parametrize("bad, error", [
    (dict(cos_shape=(16, 40)), ValueError),       # rotary_dim 80 > head_dim 64
    (dict(sin_shape=(16, 8)), ValueError),        # cos / sin mismatch
    (dict(pos_shape=(3, 4)), ValueError),         # positions not [B, S]
    (dict(pos_dtype=torch.float32), TypeError),
    (dict(k_dtype=torch.float16), TypeError),
    (dict(q_dims=5), ValueError),
    (dict(backend="cuda"), ValueError),
])
def test_bad_inputs_raise(bad, error):
    q = torch.randn(2, 4, 2, 64)
    k = torch.randn(2, 4, 2, 64).to(bad.get("k_dtype", torch.float32))
    cos = torch.randn(*bad.get("cos_shape", (16, 16)))
    sin = torch.randn(*bad.get("sin_shape", cos.shape))
    pos = torch.zeros(*bad.get("pos_shape", (2, 4))).to(bad.get("pos_dtype", torch.int64))
    if bad.get("q_dims") == 5:
        q = q.unsqueeze(0)
    with pytest.raises(error):
        apply_rotary_emb(q, k, cos, sin, pos, backend=bad.get("backend", "auto"))


def test_arguments_of_the_wrong_kind_are_named():
    """q missing, positions as a list, a 0-d table and q, k of different ranks (the torch path
    broadcast a 3-D k into a 4-D result) raise naming the input; rows < 0 for the tables too."""
    q, k = torch.randn(1, 5, 3, 8), torch.randn(1, 5, 2, 8)
    cos, sin = rotary_tables(16, 8)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        apply_rotary_emb(None, k, cos, sin)
    with pytest.raises(TypeError, match="positions must be a torch.Tensor"):
        apply_rotary_emb(q, k, cos, sin, [0, 1, 2, 3, 4])
    with pytest.raises(ValueError, match="0 dims"):
        apply_rotary_emb(q, k, torch.tensor(1.0), torch.tensor(1.0))
    for inplace in (False, True):
        with pytest.raises(ValueError, match="3-D or both 4-D"):
            apply_rotary_emb(q, k[0], cos, sin, inplace=inplace)
    with pytest.raises(ValueError, match="rows must be >= 0"):
        rotary_tables(-1, 8)


@pytest.mark.parametrize("positions", [None, torch.zeros(2, 0, dtype=torch.int64)])
def test_an_empty_sequence_rotates_to_empty_outputs(positions):
    q, k = torch.randn(2, 0, 3, 8), torch.randn(2, 0, 2, 8)
    cos, sin = rotary_tables(16, 8)
    q_out, k_out = apply_rotary_emb(q, k, cos, sin, positions)
    assert q_out.shape == q.shape and k_out.shape == k.shape


def test_kernel_backend_without_cuda_raises():
    q, k, cos, sin, pos = make_case(1, 2, 1, 1, 16, 16, torch.bfloat16, "cpu")
    with pytest.raises(RuntimeError, match="cannot run"):
        apply_rotary_emb(q, k, cos, sin, pos, backend="kernel")


# ---- GPU: the CUDA kernel -------------------------------------------------------------------

def _need_kernel():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from kernels.extension.ops import rotary as ops

    if not ops.is_available():
        pytest.skip("rotary module not built (python -m tools.build_ext)")


GPU_CONFIGS = CONFIGS + [
    (2, 33, 32, 8, 128, 128, False),
    (2, 33, 32, 8, 128, 128, True),
    (1, 17, 40, 8, 256, 256, False),
    (4, 5, 1, 1, 8, 8, True),     # narrow heads: several tokens per block
    (2, 9, 5, 3, 96, 24, False),  # vector width below 8
]


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", GPU_CONFIGS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("inplace", [False, True])
def test_kernel_matches_reference(cfg, dtype, inplace, guards):
    _need_kernel()
    batch, seqlen, hq, hk, d, r, interleaved = cfg
    q, k, cos, sin, pos = make_case(batch, seqlen, hq, hk, d, r, dtype, "cuda")
    # Every tensor in NaN guard regions: a read past one makes the output NaN, a write past q or
    # k (in place) changes a guard.
    q_in, k_in, cos_in, sin_in, pos_in = guards.copies(q=q, k=k, cos=cos, sin=sin, positions=pos.int())
    q_out, k_out = apply_rotary_emb(q_in, k_in, cos_in, sin_in, pos_in, interleaved=interleaved,
                                    inplace=inplace, backend="kernel")
    if inplace:
        assert q_out.data_ptr() == q_in.data_ptr() and k_out.data_ptr() == k_in.data_ptr()
    cos_rows, sin_rows = cos[pos], sin[pos]
    assert_within_bound(q_out, reference(q, cos_rows, sin_rows, interleaved), q, "q")
    assert_within_bound(k_out, reference(k, cos_rows, sin_rows, interleaved), k, "k")
    guards.check()


@pytest.mark.gpu
def test_kernel_table_modes_and_strided_inputs(guards):
    _need_kernel()
    batch, seqlen, heads, d = 2, 11, 4, 64
    packed = torch.randn(batch, seqlen, 3, heads, d, device="cuda", dtype=torch.bfloat16)
    qkv = guards.copy(packed, name="qkv")
    q, k = qkv[:, :, 0], qkv[:, :, 1]  # strided views of a packed projection
    cos, sin = rotary_tables(64, d, device="cuda")
    expected = apply_rotary_torch(q, k, cos, sin)
    for args in ((cos, sin, None), (cos, sin, torch.arange(seqlen, device="cuda")),
                 (cos[:seqlen].expand(batch, -1, -1).contiguous(),
                  sin[:seqlen].expand(batch, -1, -1).contiguous(), None)):
        got = apply_rotary_emb(q, k, *args, backend="kernel")
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=2**-7, atol=1e-5)
    q_tok = q[0].contiguous()
    got3, _ = apply_rotary_emb(q_tok, None, cos, sin, torch.arange(seqlen, device="cuda"),
                               backend="kernel")
    torch.testing.assert_close(got3, expected[0][0], rtol=2**-7, atol=1e-5)


@pytest.mark.gpu
def test_kernel_out_of_range_positions_nan():
    _need_kernel()
    q, k, cos, sin, pos = make_case(1, 4, 2, 2, 64, 64, torch.bfloat16, "cuda", max_pos=8)
    pos[0, 2] = 100
    q_out, k_out = apply_rotary_emb(q, k, cos, sin, pos, backend="kernel")
    assert torch.isnan(q_out[0, 2]).all() and torch.isnan(k_out[0, 2]).all()
    assert torch.isfinite(q_out[0, :2]).all()


@pytest.mark.gpu
def test_dispatch_uses_torch_under_autograd():
    _need_kernel()
    q, k, cos, sin, pos = make_case(1, 4, 2, 2, 64, 64, torch.bfloat16, "cuda")
    q.requires_grad_(True)
    q_out, _ = apply_rotary_emb(q, k, cos, sin, pos)
    assert q_out.grad_fn is not None
    q_out.float().sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_tables_and_aliasing_that_would_run_silently_wrong_are_refused():
    """Integer tables (cast, the angles lost), tables of no columns (nothing rotated) and an
    in-place call with k the very memory of q (rotated twice) raise instead; the separate q and
    k heads of one packed qkv buffer still rotate in place."""
    q = torch.randn(2, 4, 2, 64)
    cos, sin = rotary_tables(16, 32)
    with pytest.raises(TypeError, match="cos must be a floating tensor"):
        apply_rotary_emb(q, None, cos.to(torch.int32), sin)
    with pytest.raises(ValueError, match="at least 2"):
        apply_rotary_emb(q, None, cos[:, :0], sin[:, :0])
    with pytest.raises(ValueError, match="rotate it twice"):
        apply_rotary_emb(q, q, cos, sin, inplace=True)
    qkv = torch.randn(2, 4, 6, 64)
    expected = apply_rotary_torch(qkv[:, :, :2].clone(), qkv[:, :, 2:4].clone(), cos, sin)
    out_q, out_k = apply_rotary_emb(qkv[:, :, :2], qkv[:, :, 2:4], cos, sin, inplace=True)
    torch.testing.assert_close(qkv[:, :, :2], expected[0])
    torch.testing.assert_close(qkv[:, :, 2:4], expected[1])


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [(2, 9, 8, 2, 72, 64, False), (2, 9, 8, 2, 128, 32, True),
                                 (1, 33, 32, 8, 128, 128, False)])
def test_kernel_writes_every_output_element(cfg, guards):
    """Out of place into NaN-poisoned outputs in guard regions, so that the columns past
    rotary_dim must be copied rather than left as they were (the op allocates its own outputs:
    the binding is called here, with the tables as the op normalizes them)."""
    _need_kernel()
    from kernels.extension import loader
    from kernels.extension.ops import rotary as rotary_ops

    batch, seqlen, hq, hk, d, r, interleaved = cfg
    q, k, cos, sin, pos = make_case(batch, seqlen, hq, hk, d, r, torch.bfloat16, "cuda")
    q_in, k_in, cos_in, sin_in, pos_in = guards.copies(q=q, k=k, cos=cos.float(), sin=sin.float(),
                                                       positions=pos.int())
    q_out, k_out = guards.empty(q.shape, q.dtype, name="q_out"), guards.empty(k.shape, k.dtype, name="k_out")
    cos2, sin2, pos2, stride_b = rotary_ops.normalize_tables(cos_in, sin_in, pos_in, batch, seqlen)
    loader.load("rotary").apply(q_in, k_in, q_out, k_out, cos2, sin2, pos2, stride_b, interleaved, False)
    cos_rows, sin_rows = cos[pos], sin[pos]
    assert_within_bound(q_out, reference(q, cos_rows, sin_rows, interleaved), q, "q")
    assert_within_bound(k_out, reference(k, cos_rows, sin_rows, interleaved), k, "k")
    guards.check()


@pytest.mark.gpu
def test_kernel_rotates_token_major_inputs_in_place_as_the_model_calls_it():
    """kernels/model's call: q [T, Hq, D] and k [T, Hk, D] with positions [T], in place, against
    the fp64 reference."""
    _need_kernel()
    g = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(37, 32, 128, device="cuda", generator=g).to(torch.bfloat16)
    k = torch.randn(37, 8, 128, device="cuda", generator=g).to(torch.bfloat16)
    cos, sin = rotary_tables(4096, 128, device="cuda")
    positions = torch.randint(0, 4096, (37,), device="cuda", generator=g)
    expected = [reference(x.unsqueeze(0), cos[positions].unsqueeze(0), sin[positions].unsqueeze(0), False)[0]
                for x in (q, k)]
    q_before, k_before = q.clone(), k.clone()
    q_out, k_out = apply_rotary_emb(q, k, cos, sin, positions, inplace=True, backend="kernel")
    assert q_out.data_ptr() == q.data_ptr() and k_out.data_ptr() == k.data_ptr()
    assert_within_bound(q, expected[0], q_before, "q")
    assert_within_bound(k, expected[1], k_before, "k")
