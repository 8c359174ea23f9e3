"""Harness math: FLOP / byte counts, causal alignment, GQA mapping, the references, checks."""

import math

import numpy as np
import pytest
import torch

from kernels.harness import (AttentionProblem, causal_keep_mask, check_output, fa3_paper_shapes,
                             make_inputs, poison, reference_attention, reference_attention_numpy)
from kernels.harness.timing import rotation_count


def brute_force_pairs(sq, sk, causal):
    return sum(1 for i in range(sq) for j in range(sk) if not causal or j <= i + sk - sq)


@pytest.mark.parametrize("sq,sk", [(1, 1), (5, 9), (9, 5), (64, 64), (63, 65), (1, 100), (100, 1)])
@pytest.mark.parametrize("causal", [False, True])
def test_flops_count_visible_pairs_exactly(sq, sk, causal):
    p = AttentionProblem(batch=3, seqlen_q=sq, seqlen_k=sk, heads_q=4, heads_kv=2, head_dim=64, causal=causal)
    assert p.visible_pairs() == brute_force_pairs(sq, sk, causal)
    assert p.flops() == 4 * 64 * 3 * 4 * brute_force_pairs(sq, sk, causal)


def test_causal_square_is_about_half():
    full = AttentionProblem(seqlen_q=4096, seqlen_k=4096)
    causal = full.with_(causal=True)
    assert causal.flops() == full.flops() * (4096 + 1) // (2 * 4096)


def test_bytes_count_each_tensor_once():
    p = AttentionProblem(batch=2, seqlen_q=10, seqlen_k=30, heads_q=8, heads_kv=2, head_dim=128)
    assert p.bytes() == 2 * (2 * 10 * 8 * 128 * 2 + 2 * 30 * 2 * 128 * 2)


def test_bottom_right_causal_alignment():
    # 2 queries, 4 keys: the last query sees every key, the first all but the last.
    keep = causal_keep_mask(2, 4)
    assert keep.tolist() == [[True, True, True, False], [True, True, True, True]]
    # 4 queries, 2 keys: the first two queries see nothing.
    keep = causal_keep_mask(4, 2)
    assert keep.sum(1).tolist() == [0, 0, 1, 2]


@pytest.mark.parametrize("bad", [dict(heads_q=6, heads_kv=4), dict(seqlen_q=0), dict(dtype="fp32"),
                                 dict(head_dim=-1), dict(batch=1.5)])
def test_problem_rejects_bad_shapes(bad):
    with pytest.raises(ValueError):
        AttentionProblem(**bad)


def test_default_shapes_are_the_fa3_set():
    shapes = fa3_paper_shapes(128, False, (1024, 4096, 16384))
    assert [(p.batch, p.seqlen_q, p.heads_q) for p in shapes] == [(16, 1024, 16), (4, 4096, 16), (1, 16384, 16)]
    assert all(p.batch * p.seqlen_q == 16384 for p in shapes)


@pytest.mark.parametrize("sq,sk,hq,hkv,causal", [(5, 9, 4, 2, True), (9, 5, 2, 2, True), (7, 7, 8, 1, False),
                                                  (1, 13, 4, 4, True), (13, 1, 2, 1, True)])
def test_reference_matches_numpy_fp64(sq, sk, hq, hkv, causal):
    p = AttentionProblem(batch=2, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv, head_dim=16,
                         causal=causal, scale=0.3)
    q, k, v = make_inputs(p, seed=1, device="cpu")
    out, lse = reference_attention(q, k, v, causal=causal, scale=0.3)
    out_np, lse_np = reference_attention_numpy(q.float(), k.float(), v.float(), causal=causal, scale=0.3)
    np.testing.assert_allclose(out.numpy(), out_np, atol=2e-6)
    np.testing.assert_array_equal(np.isinf(lse.numpy()), np.isinf(lse_np))
    finite = np.isfinite(lse_np)
    np.testing.assert_allclose(lse.numpy()[finite], lse_np[finite], atol=2e-5)


def test_reference_gqa_uses_grouped_kv_heads():
    # Give each kv head a distinct constant V: query head h must read kv head h // group.
    p = AttentionProblem(batch=1, seqlen_q=3, seqlen_k=4, heads_q=8, heads_kv=2, head_dim=16)
    q, k, _ = make_inputs(p, device="cpu")
    v = torch.stack([torch.full((4, 16), float(h)) for h in range(2)], dim=1).unsqueeze(0).bfloat16()
    out, _ = reference_attention(q, k, v)
    assert out[0, 0, :, 0].tolist() == pytest.approx([0.0] * 4 + [1.0] * 4, abs=1e-5)


def test_rows_that_see_no_key_are_zero_not_nan():
    p = AttentionProblem(seqlen_q=6, seqlen_k=2, heads_q=1, heads_kv=1, head_dim=16, causal=True)
    q, k, v = make_inputs(p, device="cpu")
    out, lse = reference_attention(q, k, v, causal=True)
    assert torch.all(out[0, :4] == 0) and torch.all(torch.isneginf(lse[0, 0, :4]))
    assert torch.isfinite(out).all()


def test_reference_chunking_does_not_change_the_result():
    p = AttentionProblem(batch=1, seqlen_q=50, seqlen_k=70, heads_q=4, heads_kv=2, head_dim=32, causal=True)
    q, k, v = make_inputs(p, device="cpu")
    whole, _ = reference_attention(q, k, v, causal=True)
    chunked, _ = reference_attention(q, k, v, causal=True, max_chunk_elems=300)
    torch.testing.assert_close(whole, chunked, rtol=0, atol=1e-6)


def test_inputs_are_seeded_random_and_not_zero():
    p = AttentionProblem(batch=1, seqlen_q=8, seqlen_k=8, heads_q=2, heads_kv=2, head_dim=64)
    a, b = make_inputs(p, seed=3, device="cpu"), make_inputs(p, seed=3, device="cpu")
    c = make_inputs(p, seed=4, device="cpu")
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert all(x.abs().mean() > 0.5 for x in a)
    big = make_inputs(p, seed=3, device="cpu", magnitude=20.0)
    assert big[0].float().abs().mean() > 10


def test_check_output_catches_unwritten_and_wrong_values():
    ref = torch.randn(2, 8, 4, 64)
    out = ref.clone()
    assert check_output(out, ref)
    poison(out)
    out[:, :7] = ref[:, :7]                       # one row never written
    result = check_output(out, ref)
    assert not result and "NaN" in result.reason
    assert not check_output(ref * 1.1, ref)       # 10% off
    assert check_output(ref + 1e-4 * torch.randn_like(ref), ref)
    assert not check_output(ref[:, :4], ref)      # wrong shape


def test_rotation_overflows_l2(monkeypatch):
    import kernels.harness.timing as timing

    monkeypatch.setattr(timing, "l2_bytes", lambda: 60 << 20)
    assert rotation_count(1 << 30) == 1
    assert rotation_count(10 << 20) == 12
    assert rotation_count(1) == 64                 # capped


def test_scale_defaults_to_inverse_sqrt_head_dim():
    assert AttentionProblem(head_dim=64).softmax_scale == 1 / math.sqrt(64)
    assert AttentionProblem(head_dim=64, scale=0.5).softmax_scale == 0.5
