"""Harness math: FLOP / byte counts, causal alignment, GQA mapping, the references, checks,
guard regions and the sweep."""

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from kernels.harness import (
    AttentionProblem,
    GuardedAllocator,
    attention_sweep,
    causal_keep_mask,
    check_output,
    fa3_paper_shapes,
    make_inputs,
    paged_kv_cache,
    poison,
    reference_attention,
    reference_attention_numpy,
    verify_attention,
)
from kernels.harness.checks import score_bound
from kernels.harness.timing import per_call, rotation_count, summarize

ROOT = Path(__file__).resolve().parents[1]


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
    # A sequence of 3 keys in a 4-key buffer aligns to its own last key; rows 1: of the same.
    keep = causal_keep_mask(2, 4, key_len=3)
    assert keep.tolist() == [[True, True, False, False], [True, True, True, False]]
    assert causal_keep_mask(2, 4, key_len=3, rows=range(1, 2)).tolist() == [keep[1].tolist()]


@pytest.mark.parametrize("bad", [dict(heads_q=6, heads_kv=4), dict(seqlen_q=0), dict(dtype="fp32"),
                                 dict(head_dim=-1), dict(batch=1.5)])
def test_problem_rejects_bad_shapes(bad):
    with pytest.raises(ValueError):
        AttentionProblem(**bad)


def test_default_shapes_are_the_fa3_set():
    shapes = fa3_paper_shapes(128, False, (1024, 4096, 16384))
    assert [(p.batch, p.seqlen_q, p.heads_q) for p in shapes] == [(16, 1024, 16), (4, 4096, 16),
                                                                  (1, 16384, 16)]
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


@pytest.mark.parametrize("mask_dims", [None, 2, 3])
def test_reference_key_lengths_and_masks_match_numpy_fp64(mask_dims):
    p = AttentionProblem(batch=3, seqlen_q=6, seqlen_k=11, heads_q=4, heads_kv=2, head_dim=16, causal=True)
    q, k, v = make_inputs(p, seed=2, device="cpu")
    key_lens = torch.tensor([11, 7, 3])          # batch 2: rows 0-2 see no key (offset 3 - 6)
    mask = None
    if mask_dims:
        shape = (3, 13) if mask_dims == 2 else (3, 6, 9)   # longer / shorter than Sk: cut / padded
        mask = torch.rand(shape, generator=torch.Generator().manual_seed(0)) > 0.3
    out, lse = reference_attention(q, k, v, causal=True, key_lens=key_lens, mask=mask)
    out_np, lse_np = reference_attention_numpy(q.float(), k.float(), v.float(), causal=True,
                                               key_lens=key_lens, mask=mask)
    np.testing.assert_allclose(out.numpy(), out_np, atol=2e-6)
    np.testing.assert_array_equal(np.isinf(lse.numpy()), np.isinf(lse_np))
    finite = np.isfinite(lse_np)
    np.testing.assert_allclose(lse.numpy()[finite], lse_np[finite], atol=2e-5)
    assert torch.all(out[2, :3] == 0) and torch.isneginf(lse[2, :, :3]).all()


def test_reference_matches_torch_sdpa():
    q, k, v = torch.randn(2, 7, 4, 16), torch.randn(2, 11, 2, 16), torch.randn(2, 11, 2, 16)
    out, lse = reference_attention(q, k, v, causal=True)
    kr, vr = k.repeat_interleave(2, dim=2), v.repeat_interleave(2, dim=2)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), kr.transpose(1, 2), vr.transpose(1, 2), attn_mask=causal_keep_mask(7, 11))
    torch.testing.assert_close(out, sdpa.transpose(1, 2), rtol=1e-5, atol=1e-5)
    assert lse.shape == (2, 4, 7)


def test_paged_cache_holds_the_sequence_in_table_order():
    k, v = torch.randn(2, 10, 3, 8), torch.randn(2, 10, 3, 8)
    k_cache, v_cache, table = paged_kv_cache(k, v, 4, generator=torch.Generator().manual_seed(1))
    assert table.dtype == torch.int32 and table.shape == (2, 3) and k_cache.shape == (2 * 3 + 3, 4, 3, 8)
    assert len(set(table.flatten().tolist())) == 6
    gathered = k_cache[table.long()].reshape(2, 12, 3, 8)[:, :10]
    assert torch.equal(gathered, k) and torch.equal(v_cache[table.long()].reshape(2, 12, 3, 8)[:, :10], v)


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


def test_check_output_holds_rows_without_keys_to_zero_and_lse_to_minus_inf():
    p = AttentionProblem(batch=1, seqlen_q=5, seqlen_k=3, heads_q=2, heads_kv=2, head_dim=16, causal=True)
    q, k, v = make_inputs(p, device="cpu")
    ref, ref_lse = reference_attention(q, k, v, causal=True)        # rows 0 and 1 see no key
    assert check_output(ref.clone(), ref, lse=ref_lse.clone(), ref_lse=ref_lse)
    out = ref.clone()
    out[0, 1] = 1e-6                                                # tiny, within rel_err
    result = check_output(out, ref, ref_lse=ref_lse)
    assert not result and "no key" in result.reason
    for bad_value, why in ((float("nan"), "NaN"), (0.0, "-inf")):
        lse = ref_lse.clone()
        lse[0, 0, 0] = bad_value
        result = check_output(ref, ref, lse=lse, ref_lse=ref_lse)
        assert not result and why in result.reason
    lse = ref_lse.clone()
    lse[0, 1, 4] += 0.05
    assert not check_output(ref, ref, lse=lse, ref_lse=ref_lse)
    assert check_output(ref, ref, lse=lse, ref_lse=ref_lse, lse_atol=0.06)


# ---- guard regions ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn,
                                   torch.float8_e5m2])
def test_guarded_outputs_are_nan_and_reads_past_the_end_give_nan(dtype):
    guards = GuardedAllocator("cpu")
    out = guards.empty((3, 5), dtype, name="out")
    assert torch.isnan(out.float()).all()
    src = torch.randn(4, 6).to(dtype)
    x = guards.copy(src, name="x")
    assert torch.equal(x.view(torch.uint8), src.view(torch.uint8))
    past_end = torch.as_strided(x, (1,), (1,), x.storage_offset() + x.numel())
    before = torch.as_strided(x, (1,), (1,), x.storage_offset() - 1)
    assert torch.isnan(past_end.float()).all() and torch.isnan(before.float()).all()
    guards.check()


def test_guarded_integers_read_minus_one_past_the_end():
    guards = GuardedAllocator("cpu")
    table = guards.copy(torch.arange(6, dtype=torch.int32).view(2, 3))
    assert torch.as_strided(table, (1,), (1,), table.storage_offset() + 6).item() == -1


@pytest.mark.parametrize("where", ["after", "before", "gap"])
def test_guards_report_writes_outside_a_tensor(where):
    guards = GuardedAllocator("cpu")
    base = torch.randn(4, 8)
    strided = guards.copy(base[:, :6], name="out")                # row stride 8: two gap elements per row
    assert strided.stride() == (8, 1) and torch.equal(strided, base[:, :6])
    offset = {"after": 3 * 8 + 6, "before": -1, "gap": 6}[where]
    torch.as_strided(strided, (1,), (1,), strided.storage_offset() + offset).fill_(1.0)
    with pytest.raises(AssertionError, match="out: written outside"):
        guards.check()


def test_guards_fixture_checks_when_the_test_forgets(pytester):
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())   # the real guards fixture
    pytester.makepyfile("""
        import torch

        def test_forgets(guards):
            out = guards.empty((4,), torch.float32, name="out")
            torch.as_strided(out, (1,), (1,), out.storage_offset() + 4).fill_(0.0)
    """)
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*out: written outside its elements (4 bytes after the end)*"])


# ---- verify_attention: the one check every attention kernel passes -------------------------------

def _torch_attention(q, k, v, out, lse, problem):
    ref, ref_lse = reference_attention(q, k, v, causal=problem.causal, scale=problem.softmax_scale)
    out.copy_(ref)
    if lse is not None:
        lse.copy_(ref_lse)


CASE = AttentionProblem(batch=2, seqlen_q=9, seqlen_k=7, heads_q=4, heads_kv=2, head_dim=16, causal=True)


def test_verify_attention_passes_a_correct_kernel():
    result = verify_attention(lambda *a: _torch_attention(*a, CASE), CASE, device="cpu", magnitude=20.0)
    assert result, result.reason


def _skips_last_row(q, k, v, out, lse):
    saved = out[:, -1].clone()
    _torch_attention(q, k, v, out, lse, CASE)
    out[:, -1] = saved


def _writes_past_the_end(q, k, v, out, lse):
    _torch_attention(q, k, v, out, lse, CASE)
    torch.as_strided(out, (8,), (1,), out.storage_offset() + out.numel()).zero_()


def _reads_past_the_end_of_k(q, k, v, out, lse):
    _torch_attention(q, k, v, out, lse, CASE)
    past = torch.as_strided(k, (1,), (1,), k.storage_offset() + k.numel())  # the guard region
    out += 0 * past.to(out.dtype)  # NaN there: the inputs sit between poisoned guards


def _nan_lse_for_empty_rows(q, k, v, out, lse):
    _torch_attention(q, k, v, out, lse, CASE)
    lse[torch.isinf(lse)] = float("nan")


def _moving(q, k, v, out, lse, calls=itertools.count(1)):
    _torch_attention(q, k, v, out, lse, CASE)
    out[0, -1, 0, 0] += 1e-2 * next(calls)                  # a different result on every call


def _writes_into_q(q, k, v, out, lse):
    _torch_attention(q, k, v, out, lse, CASE)
    q[0, 0, 0, 0] += 1


@pytest.mark.parametrize("kernel,why", [
    (_skips_last_row, "NaN"), (_writes_past_the_end, "out-of-bounds writes: out"),
    (_reads_past_the_end_of_k, "NaN"), (_nan_lse_for_empty_rows, "NaN"), (_moving, "bit-identical"),
    (_writes_into_q, "first run: wrote into its inputs: q"),
], ids=lambda x: x.__name__.strip("_") if callable(x) else "")
def test_verify_attention_catches_broken_kernels(kernel, why):
    result = verify_attention(kernel, CASE, device="cpu")
    assert not result and why in result.reason


def test_sweep_covers_every_head_dim_and_the_awkward_shapes():
    cases = attention_sweep(head_dims=(64, 128, 256), dtypes=("bf16", "fp16"))
    assert {c.problem.head_dim for c in cases} == {64, 128, 256}
    assert {c.problem.dtype for c in cases} == {"bf16", "fp16"}
    problems = [c.problem for c in cases]
    assert any(p.causal and p.seqlen_q > p.seqlen_k for p in problems)       # rows without keys
    assert any(p.heads_q != p.heads_kv and p.batch > 1 for p in problems)
    assert any(p.scale is not None for p in problems) and any(c.magnitude > 1 for c in cases)
    assert {1, 63, 64, 65, 1000, 4096} <= {p.seqlen_k for p in problems}
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids) and len({c.seed for c in cases}) == len(cases)
    assert all(c.problem.dtype == "bf16" for c in attention_sweep(head_dims=(64,)))


def test_rotation_overflows_l2(monkeypatch):
    import kernels.harness.timing as timing

    monkeypatch.setattr(timing, "l2_bytes", lambda: 60 << 20)
    assert rotation_count(1 << 30) == 1
    assert rotation_count(10 << 20) == 12
    assert rotation_count(1) == 64                 # capped


def test_summarize_gives_median_and_quantiles_of_the_runs():
    runs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert summarize(runs) == pytest.approx({"median": 3.0, "p20": 1.8, "p80": 4.2, "reps": 5})
    assert summarize([2.5]) == {"median": 2.5, "p20": 2.5, "p80": 2.5, "reps": 1}


def test_scale_defaults_to_inverse_sqrt_head_dim():
    assert AttentionProblem(head_dim=64).softmax_scale == 1 / math.sqrt(64)
    assert AttentionProblem(head_dim=64, scale=0.5).softmax_scale == 0.5


def test_score_bound_bounds_every_score_and_scales_the_lse_check():
    p = AttentionProblem(batch=2, seqlen_q=7, seqlen_k=9, heads_q=4, heads_kv=2, head_dim=16)
    q, k, v = make_inputs(p, device="cpu", magnitude=20.0)
    bound = score_bound(q, k, p.softmax_scale)
    assert bound.shape == (2, 4, 7)
    kq = k.float().repeat_interleave(2, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), kq) * p.softmax_scale
    assert (scores.abs().amax(-1) <= bound * (1 + 1e-6)).all()
    assert (scores.abs().amax(-1) >= bound / 10).all()           # not a vacuous bound either
    ref, ref_lse = reference_attention(q, k, v)
    lse = ref_lse + 1e-3 * bound                                 # an FP8-sized error, relative to the bound
    assert not check_output(ref, ref, lse=lse, ref_lse=ref_lse, lse_rtol=1e-4, lse_scale=bound)
    result = check_output(ref, ref, lse=lse, ref_lse=ref_lse, lse_rtol=2e-3, lse_scale=bound)
    assert result, result.reason


def test_per_call_divides_the_times_of_a_replay_of_several_calls():
    replay = summarize([4.0, 8.0, 6.0])
    one = per_call(replay, 4)
    assert all(one[key] == replay[key] / 4 for key in ("median", "p20", "p80"))
    assert one["reps"] == replay["reps"] == 3


@pytest.mark.gpu
def test_streaming_read_reads_every_byte():
    """The decode floor (kernels.harness.ceilings.streaming_read): its CTA sums add up to
    torch's sum of the same buffer, so the timed kernel reads all of it (a read that skipped a
    tail or a block would differ), and a replay of its calls takes positive time."""
    from kernels.harness.ceilings import streaming_read
    from kernels.harness.timing import time_cuda

    nbytes = 2 * 4096 * 8 * 128 * 2 + 2 * 1000  # B = 1 decode's K and V, and a ragged tail
    replay, calls, check = streaming_read(nbytes, copies=3)
    assert calls == 3 and check() < 1e-5
    assert time_cuda(replay)["median"] > 0


def test_problems_and_inputs_that_would_run_silently_wrong_are_refused():
    """The harness's own checks (what a rung runs before anything launches): a causal flag that
    is no bool, a scale that is no number or overflows float32 as scale * log2(e), an output
    sharing memory with an input, heads that do not divide, rung knobs out of range."""
    from kernels.cute import launch
    from kernels.harness import AttentionProblem, reference_attention
    from kernels.harness.validate import validate_attention_inputs
    from kernels.registry import rung_module

    for bad in (dict(causal="no"), dict(scale=True), dict(scale=1e300), dict(scale=1e-300)):
        with pytest.raises(ValueError, match="causal must be a bool|scale must be"):
            AttentionProblem(**bad)
    AttentionProblem(causal=np.bool_(True), scale=np.float32(0.1))
    q = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    with pytest.raises(ValueError, match="out shares memory with k"):
        validate_attention_inputs(q, k, v, out=k, require_cuda=False)
    buffer = torch.randn(2, 8, 2, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="out shares memory with v"):  # one token further on
        validate_attention_inputs(q, k, buffer[:1], out=buffer.view(-1)[128:128 + q.numel()].view_as(q),
                                  require_cuda=False)
    validate_attention_inputs(q, k, v, out=torch.empty_like(q), require_cuda=False)
    with pytest.raises(ValueError, match="Hq a multiple of Hkv"):
        reference_attention(torch.randn(1, 4, 3, 64), torch.randn(1, 4, 2, 64), torch.randn(1, 4, 2, 64))
    for ctas in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="ctas must be a positive int"):
            launch.persistent_ctas(ctas)
    with pytest.raises(ValueError, match="l2_heads must be None or an int >= 0"):
        launch.l2_sections_knob(-1)
    with pytest.raises(ValueError, match="pingpong must be True or False"):
        rung_module("k11").compile_kernel(AttentionProblem(), pingpong="no")
