"""Block-scaled FP8 GEMM (torch.ops.kernels.fp8_gemm_block_scaled, the quantizers and reference of
kernels.extension.backend.fp8): checks, layouts and the reference on CPU; the kernel against the
float64 reference of its dequantized operands on an sm_90a GPU (marked gpu)."""

from __future__ import annotations

import pytest
import torch

from kernels.extension.backend import fp8 as fp8_strategy
from kernels.extension.ops import fp8 as fp8_ops  # registers torch.ops.kernels.fp8_*

E4M3 = torch.float8_e4m3fn


def meta_case(m, n, k, dtype=E4M3):
    a = torch.empty(m, k, dtype=dtype, device="meta")
    b = torch.empty(n, k, dtype=dtype, device="meta")
    sa_shape, sb_shape = fp8_ops.block_scale_shapes(m, n, k)
    return a, b, torch.empty(sa_shape, device="meta"), torch.empty(sb_shape, device="meta")


# ---- CPU -------------------------------------------------------------------------------------

def test_block_scale_shapes_round_up_to_whole_blocks():
    assert fp8_ops.block_scale_shapes(70, 200, 304) == ((3, 70), (2, 3))
    assert fp8_ops.block_scale_shapes(4096, 7168, 2048) == ((16, 4096), (56, 16))


def test_fake_kernel_gives_the_output_and_opcheck_agrees():
    a, b, sa, sb = meta_case(70, 200, 304)
    out = torch.ops.kernels.fp8_gemm_block_scaled(a, b, sa, sb)
    assert out.shape == (70, 200) and out.dtype == torch.bfloat16
    utils = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(torch.ops.kernels.fp8_gemm_block_scaled.default, (a, b, sa, sb), test_utils=utils)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():  # torch.compile's tracing
        fake = (torch.empty(70, 304, dtype=E4M3), torch.empty(200, 304, dtype=E4M3), torch.empty(3, 70),
                torch.empty(2, 3))
        assert torch.ops.kernels.fp8_gemm_block_scaled(*fake).shape == (70, 200)
    cached = fp8_ops._one(torch.device("cpu"))
    assert type(cached) is torch.Tensor, "a fake call cached its factor for real ones"


@pytest.mark.parametrize("change, error, match", [
    (lambda a, b, sa, sb: (a.to(torch.float8_e5m2), b, sa, sb), TypeError, "e4m3 x e4m3"),
    (lambda a, b, sa, sb: (a, b, sa.t(), sb), ValueError, r"block_scale_a must have shape \(3, 70\)"),
    (lambda a, b, sa, sb: (a, b, sa, sb[:1]), ValueError, r"block_scale_b must have shape \(2, 3\)"),
    (lambda a, b, sa, sb: (a, b, sa.double(), sb), TypeError, "block_scale_a must be float32"),
    (lambda a, b, sa, sb: (a, b, sa, torch.empty(3, 2, device="meta").t()), ValueError, "contiguous"),
    (lambda a, b, sa, sb: (a[:, :288], b, sa, sb), ValueError, "disagree on K"),
])
def test_bad_inputs_raise_in_words(change, error, match):
    args = change(*meta_case(70, 200, 304))
    with pytest.raises(error, match=match):
        torch.ops.kernels.fp8_gemm_block_scaled(*args)


def test_fake_block_quantize_gives_the_gemm_layout():
    x = torch.empty(3, 5, 300, dtype=torch.bfloat16, device="meta")
    out, scale = torch.ops.kernels.fp8_quantize_blocks(x)
    assert out.shape == (3, 5, 300) and out.dtype == E4M3
    assert scale.shape == (3, 15) and scale.dtype == torch.float32
    with pytest.raises(TypeError, match="bfloat16"):
        torch.ops.kernels.fp8_quantize_blocks(x.float())
    utils = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(torch.ops.kernels.fp8_quantize_blocks.default, (x,), test_utils=utils)


def test_cpu_tensors_are_refused_naming_the_gpu_it_needs():
    a, b = torch.zeros(4, 128).to(E4M3), torch.zeros(8, 128).to(E4M3)
    with pytest.raises(NotImplementedError, match="sm_90a"):
        torch.ops.kernels.fp8_gemm_block_scaled(a, b, torch.ones(1, 4), torch.ones(1, 1))


def test_quantizers_scale_each_block_to_the_format_range():
    """A block's factor is its amax / 448 (e4m3's largest value), so its largest element
    quantizes to +-448; a block of zeros keeps factor 1; the partial edge blocks count too."""
    torch.manual_seed(0)
    x = torch.randn(70, 300) * torch.logspace(-3, 3, 300)  # column blocks of very different ranges
    x[5, 256:] = 0
    data, scale = fp8_strategy.quantize_activation_blocks(x)
    assert data.dtype == E4M3 and data.shape == x.shape and scale.shape == (3, 70) and scale.is_contiguous()
    amax = x.abs().view(70, 1, 300)[:, 0, :].split(128, dim=1)
    for kb, block in enumerate(amax):
        expected = block.amax(dim=1) / 448
        expected[expected == 0] = 1
        torch.testing.assert_close(scale[kb], expected)
    assert scale[2, 5] == 1
    assert (data.float().abs().amax(dim=1) == 448).all()
    w = torch.randn(200, 300)
    w_data, w_scale = fp8_strategy.quantize_weight_blocks(w)
    assert w_scale.shape == (2, 3)
    torch.testing.assert_close(w_scale[1, 2], w[128:, 256:].abs().amax() / 448)
    # dequantized: every element within e4m3's rounding of its block (3 mantissa bits)
    back = w_data.float() * w_scale.repeat_interleave(128, 0)[:200].repeat_interleave(128, 1)[:, :300]
    assert ((back - w).abs() <= w.abs() * 2 ** -4 + w_scale.max() * 2 ** -9).all()


def test_reference_sums_k_blocks_times_their_factors():
    """block_scaled_reference against the definition written out: per k-block of 128, the fp8
    products summed, times the row's A factor and the B block's factor."""
    torch.manual_seed(1)
    m, n, k = 9, 200, 304
    a = (torch.randn(m, k) * 8).to(E4M3)
    b = (torch.randn(n, k) * 8).to(E4M3)
    sa = torch.rand(3, m) + 0.5
    sb = torch.rand(2, 3) + 0.5
    bias = torch.randn(n)
    out = torch.zeros(m, n, dtype=torch.float64)
    for kb in range(3):
        cols = slice(128 * kb, 128 * (kb + 1))
        partial = a[:, cols].double() @ b[:, cols].double().t()
        out += partial * sa[kb].double()[:, None] * sb[:, kb].double().repeat_interleave(128)[:n][None, :]
    ref = fp8_strategy.block_scaled_reference(a, b, sa, sb, bias)
    torch.testing.assert_close(ref, out + bias.double(), rtol=1e-12, atol=1e-9)


def test_block_scaled_linear_layer_holds_the_quantized_weight_and_loads_a_checkpoint():
    torch.manual_seed(2)
    linear = torch.nn.Linear(300, 200, dtype=torch.bfloat16)
    layer = fp8_strategy.BlockScaledLinear.from_linear(linear)
    assert layer.weight.dtype == E4M3 and layer.weight.shape == (200, 300)
    assert layer.weight_scale.shape == (2, 3) and layer.bias.dtype == torch.bfloat16
    w = linear.weight.float()
    bound = w.abs() * 2 ** -4 + layer.weight_scale.max() * 2 ** -9
    assert ((layer.dequantized_weight() - w).abs() <= bound).all()
    state = layer.state_dict()
    assert set(state) == {"weight", "weight_scale", "bias"}
    fresh = fp8_strategy.BlockScaledLinear(300, 200)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.weight.view(torch.uint8), layer.weight.view(torch.uint8))
    with pytest.raises(TypeError, match="bf16"):
        layer(torch.randn(4, 300))
    with pytest.raises(NotImplementedError, match="sm_90a"):
        layer(torch.randn(4, 300, dtype=torch.bfloat16))


# ---- GPU: the kernel ---------------------------------------------------------------------------

def _need_sm90():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("block-scaled FP8 runs on sm_90a")
    if not fp8_ops.is_available():
        pytest.skip("the fp8 module is not built (python -m tools.build_ext)")


# M, N, K: tails in every dimension (K not a multiple of 128), one row, a wide LLM projection
GPU_SHAPES = [(70, 200, 304), (1, 384, 256), (256, 512, 1024), (129, 7168, 2048), (4096, 4096, 4096)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("split_k", [0, 2])
def test_kernel_matches_the_reference_of_its_dequantized_operands(shape, split_k, guards):
    """Each k-block's factors differ by up to 2^6 across rows, blocks and k (the recipe's point):
    a kernel that applied one factor per tile, or the wrong row's, is off by O(1)."""
    _need_sm90()
    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(m + n + k)
    x = torch.randn(m, k, device="cuda", generator=gen) * torch.exp2(
        torch.randint(-3, 4, (m, 1), device="cuda", generator=gen).float())
    w = torch.randn(n, k, device="cuda", generator=gen) * torch.exp2(
        torch.randint(-3, 4, (1, k), device="cuda", generator=gen).float())
    a, sa = fp8_strategy.quantize_activation_blocks(x)
    b, sb = fp8_strategy.quantize_weight_blocks(w)
    a, b, sa, sb = (guards.copy(t, name=name) for t, name in ((a, "a"), (b, "b"), (sa, "sa"), (sb, "sb")))
    bias = guards.copy(torch.randn(n, device="cuda", generator=gen).to(torch.bfloat16), name="bias")
    ref = fp8_strategy.block_scaled_reference(a, b, sa, sb, bias)
    out = torch.ops.kernels.fp8_gemm_block_scaled(a, b, sa, sb, bias, split_k=split_k)
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < 4e-3, f"{shape} split_k {split_k}: rel err {err:.2e}"
    # into a NaN-poisoned output in guard regions (a tile never written shows)
    from kernels.extension import loader

    one = torch.ones((), device="cuda")
    poisoned = guards.empty((m, n), torch.bfloat16, name="out")
    loader.load("fp8").gemm(a, b, one, one, bias, None, None, poisoned, split_k=split_k,
                            block_scale_a=sa, block_scale_b=sb)
    assert not poisoned.isnan().any(), f"{shape}: output elements never written"
    assert ((poisoned.double() - ref).norm() / ref.norm()).item() < 4e-3
    guards.check()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(70, 300), (1, 2048), (257, 4096), (33, 136), (5, 130)],
                         ids=lambda s: "x".join(map(str, s)))
def test_block_quantize_kernel_gives_torchs_bits(shape, guards):
    """The kernel against the torch computation on the same device: the same factors and the
    same e4m3 bytes (both divide; IEEE division either way), a zero block's factor 1, tails in
    K (300, 136: not a multiple of 128; 130: nor of 4, the byte stores) included; inputs in
    guard regions."""
    _need_sm90()
    gen = torch.Generator(device="cuda").manual_seed(shape[0])
    x = torch.randn(*shape, device="cuda", generator=gen) * torch.exp2(
        torch.randint(-20, 20, (shape[0], 1), device="cuda", generator=gen).float())
    x[0, : min(128, shape[1])] = 0
    x = guards.copy(x.to(torch.bfloat16), name="x")
    out, scale = torch.ops.kernels.fp8_quantize_blocks(x)
    ref_out, ref_scale = fp8_strategy._quantize_blocks(x, 1, fp8_ops.BLOCK_K)
    assert torch.equal(scale, ref_scale.t().contiguous())
    assert torch.equal(out.view(torch.uint8), ref_out.view(torch.uint8))
    assert scale[0, 0] == 1
    guards.check()


@pytest.mark.gpu
def test_block_scaled_linear_matches_the_bf16_linear_within_fp8_rounding():
    _need_sm90()
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(3, 17, 2048, device="cuda", generator=gen, dtype=torch.bfloat16)
    w = torch.randn(1536, 2048, device="cuda", generator=gen) / 32
    w_q, w_scale = fp8_strategy.quantize_weight_blocks(w)
    out = fp8_strategy.block_scaled_linear(x, w_q, w_scale)
    ref = x.double() @ w.double().t()
    assert out.shape == (3, 17, 1536)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 0.05


@pytest.mark.gpu
def test_block_scaled_linear_layer_matches_its_dequantized_weight():
    _need_sm90()
    torch.manual_seed(3)
    layer = fp8_strategy.BlockScaledLinear.from_linear(torch.nn.Linear(1024, 768, device="cuda",
                                                                       dtype=torch.bfloat16))
    x = torch.randn(5, 9, 1024, device="cuda", dtype=torch.bfloat16)
    ref = torch.nn.functional.linear(x.double(), layer.dequantized_weight().double(), layer.bias.double())
    out = layer(x)
    assert out.shape == (5, 9, 768) and out.dtype == torch.bfloat16
    # only the activations' e4m3 rounding (and bf16 output) between them
    assert ((out.double() - ref).norm() / ref.norm()).item() < 0.05
