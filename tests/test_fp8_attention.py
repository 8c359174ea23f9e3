"""The FP8 rung's two tricks and its numerics, on the CPU.

* P goes from the fp32 accumulator to the k32 fp8 A operand without a register exchange, by
  relabelling the keys (``wgmma.fp8_key_slot``); the pass that transposes V puts every key's
  row in its slot (``fp8.transpose_v``: a kernel on a GPU, held to the torch gather). Checked
  against the DSL's own fragment layouts, and in a pure-torch model that P V is unchanged.
* P in e4m3 (offset 2^6 beside the lazy rescale's 2^2) is what bounds the kernel's error: a
  torch model of the kernel's arithmetic against the fp64 reference justifies
  ``E4M3_TOLERANCE``.
* The harness side: Fp8Tensor, quantize_e4m3, e4m3 problems, inputs, reference and checks.
"""

from __future__ import annotations

import math
import os
from functools import partial

import pytest
import torch

from kernels.cute import fp8
from kernels.cute.wgmma import FP8_KEY_PERIOD, fp8_key_slot
from kernels.harness import (
    E4M3_TOLERANCE,
    AttentionProblem,
    Fp8Tensor,
    empty_output,
    fp8_attention_model,
    make_inputs,
    quantize_e4m3,
    reference_attention,
    reference_attention_numpy,
    rel_err,
    tolerance,
    validate_attention_inputs,
    verify_attention,
)

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


# ---- the key relabelling ------------------------------------------------------------------------
def test_key_slot_permutes_each_group_of_16_keys():
    for group in range(4):
        keys = range(group * FP8_KEY_PERIOD, (group + 1) * FP8_KEY_PERIOD)
        assert sorted(fp8_key_slot(k) for k in keys) == list(keys)
    # a thread (quad lane q) holds keys 2q, 2q + 1, 2q + 8, 2q + 9: they take k-slots 4q .. 4q + 3
    for q in range(4):
        held = (2 * q, 2 * q + 1, 2 * q + 8, 2 * q + 9)
        assert [fp8_key_slot(k) for k in held] == [4 * q, 4 * q + 1, 4 * q + 2, 4 * q + 3]
    assert fp8.key_of_slot()[fp8_key_slot(11)] == 11


def fragment_coordinates(block_n: int, head_dim: int = 64):
    """For every thread of a warpgroup and every value the fp8 conversion writes: the (row, key)
    of the accumulator value it reads (QK^T's C layout) and the (row, k-slot) where the P V MMA
    takes it (its A layout), through the very views ``wg.convert_scores_into`` uses; evaluated
    while tracing (static layouts), nothing runs."""
    import cutlass
    import cutlass.cute as cute

    from kernels.cute import wgmma as wg

    pairs = []

    @cute.jit
    def trace():
        qk = wg.make_warpgroup_mma(cutlass.Float8E4M3FN, block_n)
        pv = wg.make_warpgroup_mma(cutlass.Float8E4M3FN, head_dim, a_in_registers=True)
        scores = cute.make_identity_tensor((wg.WGMMA_M, block_n))
        for tidx in cutlass.range_constexpr(wg.WARPGROUP_THREADS):
            read = wg.acc_as_fp8_a_operand(qk.get_slice(tidx).partition_C(scores))
            written = wg.fp8_a_fragment_by_pairs(pv.get_slice(tidx).partition_A(scores))
            assert cute.size(read) == cute.size(written) == wg.WGMMA_M * block_n // wg.WARPGROUP_THREADS
            for i in cutlass.range_constexpr(cute.size(read)):
                pairs.append((tidx, read[i], written[i]))

    trace()
    return pairs


@pytest.mark.filterwarnings("ignore:This static loop")  # unrolled on purpose: it only traces layouts
@pytest.mark.parametrize("block_n", [64, 160])
def test_register_view_takes_each_score_to_its_key_slot(block_n):
    """The fp8 A operand built from the accumulator by a choice of registers holds, in k-slot
    ``fp8_key_slot(key)`` of each row, that row's score of ``key``: every score exactly once."""
    pairs = fragment_coordinates(block_n)
    assert len(pairs) == 64 * block_n
    for tidx, (row, key), (a_row, slot) in pairs:
        assert a_row == row and slot == fp8_key_slot(key), (tidx, (row, key), (a_row, slot))
    assert len({(row, key) for _, (row, key), _ in pairs}) == 64 * block_n


@pytest.mark.parametrize("seqlen_k", [1, 15, 16, 37, 128])
def test_transpose_v_puts_each_key_in_its_slot(seqlen_k):
    gen = torch.Generator().manual_seed(seqlen_k)
    v = quantize_e4m3(torch.randn(2, seqlen_k, 3, 64, generator=gen)).data
    vt = fp8.transpose_v_reference(v)
    keys = fp8.padded_keys(seqlen_k)
    assert vt.dtype == torch.float8_e4m3fn and vt.shape == (2, 3, 64, keys) and vt.is_contiguous()
    assert keys % FP8_KEY_PERIOD == 0 and keys - seqlen_k < FP8_KEY_PERIOD
    slots = torch.tensor([fp8_key_slot(s) for s in range(seqlen_k)])
    assert torch.equal(vt.view(torch.uint8)[..., slots], v.view(torch.uint8).permute(0, 2, 3, 1))
    padding = sorted(set(range(keys)) - set(slots.tolist()))
    assert (vt.view(torch.uint8)[..., padding] == 0).all()  # zeros: P is 0 there, and 0 * 0 is 0


def test_transpose_kernel_moves_16_byte_pieces_and_shuffles_in_registers():
    """The sm_90a build of kernels/cute/transpose.py: per thread four 16-byte loads of V's rows
    and four 16-byte stores into vt's rows, 16 word loads from shared memory and the byte
    shuffle as permutes in registers (8 per 4 x 4 block), no byte accesses, no local memory."""
    import re
    from collections import Counter

    from kernels.cute import launch, transpose
    from tools.inspect import _artifact, resource_usage, sass_of

    launch.INSPECT_DUMP_DIR.mkdir(parents=True, exist_ok=True)
    for head_dim in (64, 128, 256):
        cubin = _artifact(transpose.compiled(head_dim, launch.INSPECT_OPTIONS).__cubin__, binary=True)
        ops = Counter(re.findall(r"\s((?:LDG|STG|LDS|STS|LDL|STL|PRMT)[.\w]*)", sass_of(cubin)))
        assert ops["LDG.E.128"] == 4 and ops["STG.E.128"] == 4, ops
        assert ops["LDS"] == 16 and ops["PRMT"] >= 32, ops
        assert not any(op.startswith(("LDG.E.U8", "STG.E.U8", "LDS.U8", "LDL", "STL")) for op in ops), ops
        assert resource_usage(cubin)["local_bytes"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_transpose_kernel_matches_the_torch_gather(head_dim):
    from kernels.cute import transpose

    for batch, seqlen_k, heads in ((2, 1, 3), (1, 15, 2), (2, 17, 1), (1, 64, 4), (3, 65, 2), (1, 1000, 2)):
        gen = torch.Generator(device="cuda").manual_seed(seqlen_k)
        v = quantize_e4m3(torch.randn(batch, seqlen_k, heads, head_dim, generator=gen, device="cuda")).data
        vt = fp8.transpose_v(v)
        expected = fp8.transpose_v_reference(v)
        assert vt.shape == expected.shape and vt.stride(-2) == transpose.stored_keys(seqlen_k)
        assert torch.equal(vt.view(torch.uint8), expected.view(torch.uint8)), (batch, seqlen_k, heads)
        # The buffer's slots past the view (its last 16-key group is the reference's) are zeros.
        beyond = vt.view(torch.uint8).as_strided(
            (batch, heads, head_dim, transpose.stored_keys(seqlen_k)), vt.stride())
        assert (beyond[..., fp8.padded_keys(seqlen_k):] == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("problem", [
    AttentionProblem(2, 200, 300, 16, 4, 128, causal=True, dtype="e4m3"),
    AttentionProblem(1, 130, 257, 8, 1, 64, dtype="e4m3"),
    AttentionProblem(2, 1, 1000, 8, 8, 256, causal=True, dtype="e4m3"),
], ids=lambda p: p.label().replace(" ", "-"))
def test_attention_runs_fp8_inputs_on_the_fp8_rung(problem):
    """attention() of Fp8Tensor inputs on a Hopper GPU: the FP8 rung (use_backend('ladder')
    holds it there), within the FP8 tolerance of the reference on the dequantized values, its
    bf16 out and fp32 LSE written in place."""
    from kernels.extension.backend import attention, use_backend

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the FP8 rung is built for sm_90a")
    q, k, v = make_inputs(problem, seed=11, device="cuda")
    ref, ref_lse = reference_attention(q.dequantize(), k.dequantize(), v.dequantize(), causal=problem.causal)
    out = torch.full((problem.batch, problem.seqlen_q, problem.heads_q, problem.head_dim), float("nan"),
                     dtype=torch.bfloat16, device="cuda")
    lse = torch.full((problem.batch, problem.heads_q, problem.seqlen_q), float("nan"), device="cuda")
    with use_backend("ladder"):
        assert attention(q, k, v, causal=problem.causal, out=out, lse=lse) is out
    assert rel_err(out.float(), ref) < E4M3_TOLERANCE, problem.label()
    finite = torch.isfinite(ref_lse)
    assert torch.equal(finite, torch.isfinite(lse)) and (lse - ref_lse)[finite].abs().max() < 0.05


def test_tensor_core_scores_cut_below_the_largest_addend():
    """The FP8 tensor core's sum as modelled: exact where every addend fits the accumulator's
    bits; a product 2^14 times smaller than the running sum is lost."""
    from kernels.harness.reference import FP8_ACCUMULATOR_BITS, fp8_tensor_core_scores

    q = torch.tensor([[1.0, 2.0, 3.0] + [0.0] * 29])
    k = torch.tensor([[4.0, 5.0, 6.0] + [0.0] * 29])
    assert fp8_tensor_core_scores(q, k).item() == 32.0
    big, small = 2.0 ** 20, 2.0 ** (20 - FP8_ACCUMULATOR_BITS - 1)
    q = torch.tensor([[big] + [0.0] * 31 + [small] + [0.0] * 31])
    k = torch.ones(1, 64)
    assert fp8_tensor_core_scores(q, k).item() == big  # the second step's product floored away
    assert fp8_tensor_core_scores(q, k, bits=FP8_ACCUMULATOR_BITS + 2).item() == big + small


def test_large_logits_cost_what_the_tensor_cores_sum_costs():
    """The measured large-logit error of K12 (docs/worklog/k12.md, "Large logits") in the model:
    with scores summed as the FP8 tensor core sums them, inputs of magnitude 30 move the output
    many times more than exact scores do; at magnitude 1 the two agree."""
    problem = AttentionProblem(1, 128, 160, 2, 1, 128, dtype="e4m3")
    errors = {}
    for magnitude in (1, 30):
        q, k, v = make_inputs(problem, seed=1, device="cpu", magnitude=magnitude)
        ref = reference_attention(q, k, v, scale=problem.softmax_scale, dtype=torch.float64)[0]
        for tensor_cores in (False, True):
            out = fp8_attention_model(q, k, v, scale=problem.softmax_scale, block_n=96,
                                      tensor_core_scores=tensor_cores)
            errors[magnitude, tensor_cores] = float((out.double() - ref).abs().max() / ref.abs().max())
    assert errors[30, True] > 5 * errors[30, False]
    assert errors[1, True] < 1.5 * errors[1, False]


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_score_error_estimate_bounds_the_tensor_core_sums(head_dim):
    """fp8_score_error_estimate, from the descales alone, against the largest logit error of the
    modelled FP8 sums (fp8_tensor_core_scores) on normal inputs of spread 1 to 30: above it at
    every spread, and within a factor 4 of it (an estimate, not a vacuous bound)."""
    from kernels.harness.reference import fp8_score_error_estimate, fp8_tensor_core_scores

    gen = torch.Generator().manual_seed(head_dim)
    scale = 1 / math.sqrt(head_dim)
    for spread in (1.0, 3.0, 10.0, 30.0):
        q8, k8 = (quantize_e4m3(torch.randn(rows, head_dim, generator=gen) * spread) for rows in (48, 192))
        exact = (q8.dequantize().double() @ k8.dequantize().double().T) * scale
        summed = fp8_tensor_core_scores(q8.data.float(), k8.data.float()) * q8.descale * k8.descale * scale
        measured = float((summed - exact).abs().max())
        estimate = fp8_score_error_estimate(q8.descale, k8.descale, head_dim, scale)
        assert measured <= estimate <= 4 * measured, (spread, measured, estimate)


def test_fp8_calls_warn_where_the_score_sums_may_err():
    """The FP8 kernel path warns (Fp8AccuracyWarning) on inputs whose descales put the estimated
    logit error past FP8_SCORE_ERROR_WARN_NATS (spread 30 at d128) and not on ordinary ones."""
    import warnings

    from kernels.extension.backend.ladder_path import (
        FP8_SCORE_ERROR_WARN_NATS,
        Fp8AccuracyWarning,
        warn_if_fp8_scores_err,
    )

    gen = torch.Generator().manual_seed(0)
    q1, k1 = (quantize_e4m3(torch.randn(1, 64, 2, 128, generator=gen)) for _ in range(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_if_fp8_scores_err(q1, k1, 128, None) < FP8_SCORE_ERROR_WARN_NATS
    q30, k30 = (quantize_e4m3(30 * torch.randn(1, 64, 2, 128, generator=gen)) for _ in range(2))
    with pytest.warns(Fp8AccuracyWarning, match="use_backend"):
        assert warn_if_fp8_scores_err(q30, k30, 128, None) > FP8_SCORE_ERROR_WARN_NATS


def test_relabelled_keys_leave_p_v_unchanged():
    """P's columns in slot order times V^T's keys in slot order is P V: the same sum over keys,
    reordered (equal to fp64 rounding)."""
    gen = torch.Generator().manual_seed(0)
    seqlen_k = 75
    p = torch.rand(2, 5, seqlen_k, generator=gen, dtype=torch.float64)   # [heads, rows, keys]
    v = quantize_e4m3(torch.randn(1, seqlen_k, 2, 64, generator=gen))
    vt = fp8.transpose_v(v.data).double()[0]                                # [heads, D, keys']
    p_slots = torch.zeros(2, 5, fp8.padded_keys(seqlen_k), dtype=torch.float64)
    p_slots[..., [fp8_key_slot(s) for s in range(seqlen_k)]] = p
    direct = p @ v.data.double()[0].transpose(0, 1)                        # [heads, rows, D]
    relabelled = p_slots @ vt.transpose(1, 2)
    torch.testing.assert_close(relabelled, direct, rtol=1e-12, atol=1e-12)
    identity = torch.zeros_like(p_slots)
    identity[..., :seqlen_k] = p                                            # keys not relabelled
    assert (identity @ vt.transpose(1, 2) - direct).abs().max() > 1e-3, "the relabelling must matter"


# ---- the numerics: P in e4m3 -----------------------------------------------------------------------
def to_e4m3(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float8_e4m3fn).float()


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("outliers", [False, True], ids=["normal", "outliers"])
def test_p_in_e4m3_stays_within_the_tolerance(head_dim, outliers):
    """The model's error against the fp64 reference on the same (dequantized) inputs is the
    kernel's error budget: well under E4M3_TOLERANCE, and far above bf16's (P's 3 mantissa bits
    are the whole story: without the rounding the model is exact to fp32). K12's arithmetic: its
    lazy rescale lets P grow past the offset until the max moves (k12.MODEL_ARITHMETIC)."""
    from kernels import k12

    problem = AttentionProblem(batch=1, seqlen_q=128, seqlen_k=1000, heads_q=1, heads_kv=1, head_dim=head_dim,
                               dtype="e4m3")
    q, k, v = make_inputs(problem, seed=head_dim, device="cpu", outliers=outliers)
    ref, _ = reference_attention_numpy(q, k, v, scale=problem.softmax_scale)
    ref = torch.from_numpy(ref)
    model = partial(fp8_attention_model, q, k, v, scale=problem.softmax_scale, block_n=96,
                    **k12.MODEL_ARITHMETIC)
    err = rel_err(model(), ref)
    assert 2e-3 < err < E4M3_TOLERANCE / 1.5, err
    assert rel_err(model(round_p=False), ref) < 1e-5


def test_lazy_rescale_keeps_p_within_e4m3():
    """The offset gives way to the threshold (offset + threshold = 8): P stays under e4m3's 448
    while a row's max lags. With scores that climb by 1.5 (log2) per tile, a threshold of 2
    moves the max every other tile; an offset left at 8 puts P at up to 2^9.5, which the
    conversion saturates to 448 (as the kernel's ``cvt.rn.satfinite``), and O goes wrong."""
    from kernels import k12

    scores = torch.arange(8, dtype=torch.float64).repeat_interleave(32) * 1.5 / math.log2(math.e)
    q = torch.ones(1, 1, 1, 16)
    k = scores[None, :, None, None].expand(1, -1, 1, 16).float() / 16
    v = torch.randn(1, scores.numel(), 1, 16, generator=torch.Generator().manual_seed(0))
    ref, _ = reference_attention(q, k, v, scale=1.0, dtype=torch.float64)
    model = partial(fp8_attention_model, q, k, v, scale=1.0, block_n=32)
    assert rel_err(model(**k12.MODEL_ARITHMETIC), ref) < 0.05
    assert rel_err(model(max_offset=8, rescale_threshold=2), ref) > 0.2
    assert rel_err(model(max_offset=8, rescale_threshold=2, round_p=False), ref) < 1e-5  # the lag is exact


BAD_THRESHOLDS = [dict(rescale_threshold=9), dict(rescale_threshold=2.5), dict(rescale_threshold=True),
                  dict(rescale_threshold=2, rescale_before_pv=True)]


@pytest.mark.parametrize("knobs", BAD_THRESHOLDS, ids=["past-offset", "fraction", "bool", "beside-before-pv"])
def test_k12_rescale_threshold_knob(knobs):
    """The default takes the lazy rescale (offset 6); rescale_before_pv alone turns it off
    (offset 8); a threshold past the offset, not whole, a bool, or beside rescale_before_pv
    (whose rescale comes before the vote could skip it) is refused."""
    import cutlass

    from kernels import k12

    def make(**kw):
        return k12.K12FMHA(128, False, cutlass.Float8E4M3FN, ctas=132, **kw)

    default, before_pv = make(), make(rescale_before_pv=True)
    assert (default.rescale_threshold, default.p_max_offset) == (2, 6)
    assert (before_pv.rescale_threshold, before_pv.p_max_offset) == (0, 8)
    with pytest.raises(ValueError, match="rescale_threshold"):
        make(**knobs)


def test_fp8_model_masks_like_the_reference():
    """The model's mask, GQA and empty rows follow reference_attention (without rounding: equal)."""
    problem = AttentionProblem(batch=2, seqlen_q=70, seqlen_k=40, heads_q=4, heads_kv=2, head_dim=32,
                               causal=True, dtype="e4m3")
    q, k, v = make_inputs(problem, seed=5, device="cpu")
    ref, _ = reference_attention(q, k, v, causal=True)
    model = fp8_attention_model(q, k, v, causal=True, block_n=32, round_p=False)
    torch.testing.assert_close(model, ref, rtol=1e-5, atol=1e-5)
    assert (model[:, :30] == 0).all() and (model[:, 30:].abs().sum(-1) > 0).all()   # rows 0..29 see no key


def test_p_offset_keeps_small_probabilities():
    """exp2(s - max) below 2^-9 is 0 in e4m3; with K12's offset 2^6 it survives down to 2^-15
    (and is normal, 3 mantissa bits, down to 2^-12)."""
    from kernels import k12

    offset = 2.0 ** k12.MODEL_ARITHMETIC["max_offset"]
    p = torch.tensor([2.0 ** -12, 2.0 ** -10, 0.3])
    assert to_e4m3(p)[:2].eq(0).all()
    kept = to_e4m3(p * offset) / offset
    assert (kept > 0).all() and ((kept - p).abs() / p).max() <= 2.0 ** -4


# ---- the harness: e4m3 problems -------------------------------------------------------------------
def test_quantize_e4m3_uses_the_whole_range():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(1)) * 3
    t = quantize_e4m3(x)
    assert t.data.dtype == torch.float8_e4m3fn and t.descale == pytest.approx(float(x.abs().max()) / 448)
    assert float(t.data.float().abs().max()) == 448
    normal = t.dequantize().abs() >= 2.0 ** -6 * t.descale
    relative = ((t.dequantize() - x).abs() / x.abs())[normal]
    assert relative.max() <= 2.0 ** -4 + 1e-6  # round to nearest: half an ulp of 3 mantissa bits
    assert quantize_e4m3(torch.zeros(3)).descale == 1.0


def test_fp8_tensor_rejects_what_it_cannot_hold():
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        Fp8Tensor(torch.zeros(2), 1.0)
    with pytest.raises(ValueError, match="descale"):
        Fp8Tensor(torch.zeros(2).to(torch.float8_e4m3fn), 0.0)
    with pytest.raises(ValueError, match="NaN or inf"):
        quantize_e4m3(torch.tensor([1.0, math.inf]))


def test_e4m3_problem_inputs_outputs_and_counts():
    p = AttentionProblem(batch=2, seqlen_q=10, seqlen_k=30, heads_q=8, heads_kv=2, head_dim=64, dtype="e4m3")
    assert p.out_dtype == "bf16" and p.out_torch_dtype == torch.bfloat16 and p.element_size == 1
    assert p.label().endswith(" e4m3") and AttentionProblem.from_dict(p.to_dict()) == p
    assert p.bytes() == (2 * 10 * 8 * 64 + 2 * 2 * 30 * 2 * 64) * 1 + 2 * 10 * 8 * 64 * 2  # O in bf16
    assert tolerance(p) == E4M3_TOLERANCE and tolerance(p.with_(dtype="bf16")) < E4M3_TOLERANCE
    assert empty_output(p, device="cpu").dtype == torch.bfloat16
    q, k, v = make_inputs(p, seed=3, device="cpu")
    source = make_inputs(p.with_(dtype="bf16"), seed=3, device="cpu")
    for quantized, original in zip((q, k, v), source):
        assert isinstance(quantized, Fp8Tensor) and quantized.shape == original.shape
        assert rel_err(quantized.dequantize(), original.float()) < 0.05    # the same draws, quantized
    ref, _ = reference_attention(q, k, v)
    ref_deq, _ = reference_attention(*(t.dequantize() for t in (q, k, v)))
    assert torch.equal(ref, ref_deq)


def test_outliers_are_a_few_large_entries():
    p = AttentionProblem(batch=1, seqlen_q=4096, seqlen_k=16, heads_q=8, heads_kv=1, head_dim=128)
    plain = make_inputs(p, seed=0, device="cpu")[0].float()
    noisy = make_inputs(p, seed=0, device="cpu", outliers=True)[0].float()
    large = (noisy.abs() > 6).float().mean().item()
    assert (plain.abs() > 6).sum() == 0 and 3e-4 < large < 2e-3


def test_validation_takes_the_output_dtype():
    q = torch.zeros(1, 4, 2, 64, dtype=torch.float8_e4m3fn)
    out = torch.zeros(1, 4, 2, 64, dtype=torch.bfloat16)
    problem = validate_attention_inputs(q, q, q, out, name="k12", require_cuda=False, head_dims=(64,),
                                        dtypes=(torch.float8_e4m3fn,), out_dtype=torch.bfloat16)
    assert problem.dtype == "e4m3"
    with pytest.raises(ValueError, match="out must be"):
        validate_attention_inputs(q, q, q, out.float(), name="k12", require_cuda=False, head_dims=(64,),
                                  dtypes=(torch.float8_e4m3fn,), out_dtype=torch.bfloat16)


def test_verify_attention_holds_fp8_inputs_in_guards():
    """verify_attention on an e4m3 problem: guarded e4m3 data, the dequantized reference, the
    e4m3 tolerance; a kernel that forgets v's descale fails it."""
    problem = AttentionProblem(batch=2, seqlen_q=9, seqlen_k=40, heads_q=4, heads_kv=2, head_dim=16,
                               causal=True, dtype="e4m3")

    def model(q, k, v, out, lse, v_scale=None):
        assert isinstance(q, Fp8Tensor)
        vd = v.dequantize() if v_scale is None else v.data.float() * v_scale
        ref, ref_lse = reference_attention(q, k, vd, causal=True)
        out.copy_(ref)
        lse.copy_(ref_lse)

    assert verify_attention(model, problem, device="cpu", outliers=True)
    result = verify_attention(lambda *a: model(*a, v_scale=1.0), problem, device="cpu")
    assert not result and "rel_err" in result.reason


def test_fp8_run_kernel_refuses_plain_tensors():
    from kernels import k12

    with pytest.raises(TypeError, match="Fp8Tensor"):
        fp8.check_fp8_inputs("k12", q=torch.zeros(1, 4, 2, 64, dtype=torch.float8_e4m3fn))
    assert k12.can_implement(AttentionProblem(head_dim=128)) is not None          # bf16: not this rung
    assert k12.can_implement(AttentionProblem(head_dim=128, dtype="e4m3")) is None
    assert k12.can_implement(AttentionProblem(head_dim=96, dtype="e4m3")) is not None


def test_fp8_accuracy_suite_rows(monkeypatch):
    """The accuracy suite on the CPU, with stand-ins for the kernels (the FP8 rung's arithmetic
    model; bf16-rounded exact attention for the bf16 rung): rows in the results schema, each
    error against its fp64 reference, and the FP8 row's error on the source above its own."""
    from kernels.registry.runner import Runner
    from tools import report
    from tools.suites import fp8_accuracy as suite

    shape = AttentionProblem(batch=1, seqlen_q=64, seqlen_k=200, heads_q=2, heads_kv=1, head_dim=64)
    monkeypatch.setattr(suite, "shapes", lambda seqlens: [shape])

    def stand_in(name, fp8_rung):
        def prepare(problem):
            def launch(q, k, v, out):
                if fp8_rung:
                    out.copy_(fp8_attention_model(q, k, v, scale=problem.softmax_scale, block_n=128))
                else:
                    out.copy_(reference_attention(q, k, v, scale=problem.softmax_scale)[0])
            return launch
        dtypes = ("e4m3",) if fp8_rung else ("bf16",)
        return Runner(name, "rung", "", lambda p: None if p.dtype in dtypes else "dtype", prepare)

    class Progress:
        def add_task(self, *a, **k):
            return 0

        def update(self, *a, **k):
            pass

        def advance(self, *a, **k):
            pass

    class Context:
        kernels, seqlens, progress = None, None, Progress()

        def runner(self, name):
            return stand_in(name, name in suite.fp8_rungs())

        def time(self, fn, arg_sets):
            fn(*arg_sets[0])
            return {"median": 1.0, "p20": 1.0, "p80": 1.0}

    rows = suite.run(Context(), device="cpu")
    assert {r["kernel"] for r in rows} == set(suite.kernels())
    assert len(rows) == len(suite.INPUTS) * len(suite.kernels())
    meta = {"suite": "fp8_accuracy", "gpu": "test", "driver": "0", "cuda": "0", "torch": "0",
            "cutlass_dsl": "0", "commit": "0", "date": "2026-01-01", "ceilings": {"copy_tbps": 1.0}}
    report.validate({"meta": meta, "rows": rows})
    for r in rows:
        assert r["status"] == "ok" and r["problem"]["inputs"] in suite.INPUTS
        if r["problem"]["dtype"] == "e4m3":   # quantization of the inputs adds to the kernel's own error
            # P rounded to e4m3 shows (less where large logits make rows nearly one-hot)
            assert 1e-3 < r["rel_err"] < E4M3_TOLERANCE and r["rel_err_source"] > r["rel_err"]
            assert 0 < r["max_err"] < 1
        else:
            assert r["rel_err"] == r["rel_err_source"] < 1e-2 and r["max_err"] < 1e-2
    merged = report.pivot({"rows": rows}, where={"inputs": "outliers"}, value="rel_err_source",
                          label=report.shape_label)
    assert len(merged[1]) == 1 and merged[0][1:] == suite.kernels()


@pytest.mark.gpu
def test_attention_warns_on_fp8_inputs_with_large_logits():
    """attention() of Fp8Tensor inputs of spread 30 on the FP8 rung: Fp8AccuracyWarning, and the
    output still the kernel's (finite, bf16)."""
    from kernels.extension.backend import attention, use_backend
    from kernels.extension.backend.ladder_path import Fp8AccuracyWarning

    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the FP8 rung is built for sm_90a")
    problem = AttentionProblem(1, 256, 256, 4, 2, 128, dtype="e4m3")
    q, k, v = make_inputs(problem, seed=3, device="cuda", magnitude=30)
    with use_backend("ladder"), pytest.warns(Fp8AccuracyWarning):
        out = attention(q, k, v)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
