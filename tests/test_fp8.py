"""FP8 primitives and strategy layer: fake (meta) implementations and input checks on CPU;
quantize, GEMM (both paths, every tile shape) and fp8_autocast on GPU (marked gpu) against
torch and float32 references."""

from __future__ import annotations

import pytest
import torch

from kernels.extension.backend import fp8 as fp8_strategy
from kernels.extension.ops import fp8 as fp8_ops  # registers torch.ops.kernels.fp8_*

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def meta_operands(m, n, k, da=E4M3, db=E4M3):
    a = torch.empty(m, k, dtype=da, device="meta")
    b = torch.empty(n, k, dtype=db, device="meta")
    s = torch.empty((), dtype=torch.float32, device="meta")
    return a, b, s


# ---- CPU: fake implementations, checks, dispatch ----------------------------------------------

def test_fake_gemm_shape():
    a, b, s = meta_operands(5, 7, 32)
    out = torch.ops.kernels.fp8_gemm(a, b, s, s, None, None, None)
    assert out.shape == (5, 7) and out.dtype == torch.bfloat16 and out.device.type == "meta"


def test_fake_quantize_shapes():
    x = torch.empty(3, 5, 64, dtype=torch.bfloat16, device="meta")
    s = torch.empty((), dtype=torch.float32, device="meta")
    out, out_t, amax = torch.ops.kernels.fp8_quantize(x, s, E5M2, True, True)
    assert out.shape == (3, 5, 64) and out.dtype == E5M2
    assert out_t.shape == (64, 15) and amax.shape == () and amax.dtype == torch.float32
    out, out_t, _ = torch.ops.kernels.fp8_quantize(x, s, E4M3, False, False)
    assert out.shape == (0,) and out_t.shape == (0,)


def test_opcheck_fake_tensor_mode():
    """torch.library.opcheck on meta tensors: the schemas, the autograd registration and the fake
    kernels agree with how the operators are called; and under FakeTensorMode (torch.compile's
    tracing) the GEMM gives its shape."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    utils = ("test_schema", "test_autograd_registration", "test_faketensor")
    a, b, s = meta_operands(17, 9, 48)
    torch.library.opcheck(torch.ops.kernels.fp8_gemm.default, (a, b, s, s), test_utils=utils)
    x = torch.empty(6, 64, dtype=torch.bfloat16, device="meta")
    torch.library.opcheck(torch.ops.kernels.fp8_quantize.default, (x, s, E4M3, True, True), test_utils=utils)
    with FakeTensorMode():
        a = torch.empty(17, 48, dtype=E4M3)
        b = torch.empty(9, 48, dtype=E5M2)
        s = torch.empty((), dtype=torch.float32)
        assert torch.ops.kernels.fp8_gemm(a, b, s, s).shape == (17, 9)


@pytest.mark.parametrize("case, error, match", [
    (dict(k=40), ValueError, "multiple of 16"),
    (dict(kb=48), ValueError, "disagree on K"),
    (dict(da=torch.bfloat16), TypeError, "float8"),
    (dict(da=E5M2, db=E5M2), TypeError, "unsupported format pair"),
    (dict(scale_dtype=torch.float16), TypeError, "float32"),
    (dict(bias_shape=(3,)), ValueError, "bias"),
    (dict(bias_dtype=torch.float32), TypeError, "bias"),
    (dict(row_scale_shape=(2,)), ValueError, "row_scale"),
    (dict(a_dims=3), ValueError, "2-D"),
])
def test_gemm_bad_inputs_raise(case, error, match):
    m, n, k = 4, 8, case.get("k", 32)
    a = torch.empty(m, k, dtype=case.get("da", E4M3), device="meta")
    if case.get("a_dims") == 3:
        a = a.unsqueeze(0)
    b = torch.empty(n, case.get("kb", k), dtype=case.get("db", E4M3), device="meta")
    s = torch.empty((), dtype=case.get("scale_dtype", torch.float32), device="meta")
    bias = torch.empty(*case.get("bias_shape", (n,)), dtype=case.get("bias_dtype", torch.bfloat16),
                       device="meta")
    row_scale = torch.empty(*case.get("row_scale_shape", (m,)), dtype=torch.float32, device="meta")
    with pytest.raises(error, match=match):
        torch.ops.kernels.fp8_gemm(a, b, s, s, bias, row_scale, None)


def test_gemm_misaligned_meta_inputs_raise():
    s = torch.empty((), dtype=torch.float32, device="meta")
    b = torch.empty(4, 64, dtype=E4M3, device="meta")
    wide = torch.empty(8, 80, dtype=E4M3, device="meta")
    with pytest.raises(ValueError, match="16-byte aligned"):
        torch.ops.kernels.fp8_gemm(wide[:, 8:72], b, s, s)
    with pytest.raises(ValueError, match="row stride 72"):
        torch.ops.kernels.fp8_gemm(torch.empty(8, 72, dtype=E4M3, device="meta")[:, :64], b, s, s)
    with pytest.raises(ValueError, match="block_n"):
        torch.ops.kernels.fp8_gemm(b, b, s, s, block_n=96)
    torch.ops.kernels.fp8_gemm(wide[:, 16:80], b, s, s)  # 16 bytes in, stride 80: fine


@pytest.mark.parametrize("split_k", [-1, 65])
def test_gemm_bad_split_k_raises(split_k):
    a, b, s = meta_operands(4, 8, 32)
    with pytest.raises(ValueError, match="split_k"):
        torch.ops.kernels.fp8_gemm(a, b, s, s, split_k=split_k)


def test_fake_gemm_gemv_tma_rows():
    """path=3 (the swap-AB GEMV) holds M <= 128 rows (WGMMA n16 / 32 / 64 / 128): more raise."""
    for m in (1, 17, 64, 128):
        a, b, s = meta_operands(m, 256, 64)
        assert torch.ops.kernels.fp8_gemm(a, b, s, s, path=3).shape == (m, 256)
    a, b, s = meta_operands(129, 256, 64)
    with pytest.raises(ValueError, match=r"gemv_tma path \(path=3\) takes M <= 128"):
        torch.ops.kernels.fp8_gemm(a, b, s, s, path=3)
    assert torch.ops.kernels.fp8_gemm(a, b, s, s).shape == (129, 256)  # other paths take any M


def test_fake_gemm_accepts_split_k():
    a, b, s = meta_operands(1, 4096, 4096)
    for split_k in (0, 1, 7, 64):
        assert torch.ops.kernels.fp8_gemm(a, b, s, s, split_k=split_k).shape == (1, 4096)


def test_gemm_planner_split_k_host():
    """Host code of the GEMM planner (no GPU): build and run csrc/tests/fp8_plan_test.cu, which
    checks that automatic plans do not split while kAutoSplitK is off, that the split-K cost
    model leaves every plan that fills the SMs unchanged, respects the planner's limits and picks
    the listed split counts for the decode shapes, and that split_k_range partitions the
    k-blocks."""
    import subprocess
    import tempfile
    from pathlib import Path

    from tools import nvcc

    if nvcc.find_nvcc() is None:
        pytest.skip("nvcc not found")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "fp8_plan_test"
        build = subprocess.run(nvcc.command([nvcc.CSRC / "tests" / "fp8_plan_test.cu"], exe),
                               capture_output=True, text=True)
        assert build.returncode == 0, build.stderr[-3000:]
        run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "0 failure(s)" in run.stdout, run.stdout + run.stderr


def _gemm_arg_variants(device):
    """Valid GEMM arguments (a [m, k], b [n, k], scales, bias, row and column scales), then each
    with one thing changed that check_gemm_args reads: dtypes, dims, K, strides, offsets, devices,
    the scales' dtype and size, the vectors' dtype, shape, device and stride."""
    other = "cpu" if device == "meta" else "meta"

    def t(*shape, dtype=E4M3, dev=device):
        return torch.zeros(shape, dtype=dtype, device=dev)

    m, n, k = 3, 8, 32
    s = t(dtype=torch.float32)
    base = dict(a=t(m, k), b=t(n, k), scale_a=s, scale_b=s, bias=None, row_scale=None, col_scale=None)
    vectors = dict(bias=t(n, dtype=torch.bfloat16), row_scale=t(m, dtype=torch.float32),
                   col_scale=t(n, dtype=torch.float32))
    yield True, base
    yield True, {**base, **vectors}
    yield True, {**base, "a": t(1, k), "b": t(n, 64)[:, 16:48]}    # one row, 16 bytes in
    yield True, {**base, "a": t(m, 0), "b": t(n, 0)}                # K = 0
    yield True, {**base, "a": t(m, k, dtype=E5M2)}
    yield True, {**base, "scale_a": t(1, dtype=torch.float32)}
    changes = [dict(a=t(m, k, dtype=torch.bfloat16)), dict(a=t(m, k, dtype=E5M2), b=t(n, k, dtype=E5M2)),
               dict(a=t(1, m, k)), dict(b=t(n)), dict(a=t(m, 40), b=t(n, 40)), dict(b=t(n, 48)),
               dict(a=t(m, 2 * k)[:, ::2]), dict(a=t(m, 48)[:, 8:40]), dict(a=t(m, 40)[:, :k]),
               dict(b=t(n, 72)[:, 8:40]), dict(b=t(n, k, dev=other)), dict(a=t(k, m).T),
               dict(scale_a=t(dtype=torch.float16)), dict(scale_b=t(2, dtype=torch.float32)),
               dict(scale_b=t(dtype=torch.float32, dev=other)), dict(scale_a=1.0)]
    for name, good in vectors.items():
        changes += [{name: good.to(torch.float16)}, {name: t(good.shape[0] + 1, dtype=good.dtype)},
                    {name: t(2 * good.shape[0], dtype=good.dtype)[::2]},
                    {name: t(good.shape[0], dtype=good.dtype, dev=other)}, {name: t(1, good.shape[0],
                                                                                 dtype=good.dtype)}]
    for change in changes:
        yield False, {**base, **vectors, **change}
        yield False, {**base, **change}


@pytest.mark.parametrize("device, real", [("meta", False), ("cpu", True)])
def test_gemm_checks_in_one_pass_agree_with_each_check(device, real):
    """check_gemm_args lets a call through after one pass over its arguments
    (_gemm_args_pass) only where every check passes; elsewhere the checks raise as before."""
    for valid, args in _gemm_arg_variants(device):
        fast = fp8_ops._gemm_args_pass(**args, real=real)
        try:
            fp8_ops.check_gemm_args(**args, real=real)
            passes = True
        except (TypeError, ValueError):
            passes = False
        assert (fast, passes) == (valid, valid), {n: getattr(a, "shape", a) for n, a in args.items()}


def test_gemm_plan_checks_take_only_plain_ints():
    fp8_ops.check_plan_args(0, 64, 1, 64)
    fp8_ops.check_plan_args(3, 0, -1, 0)  # the swap-AB GEMV
    for args in ((True, 0, -1, 0), (-1, False, -1, 0), (-1, 0, 0.0, 0), (-1, 0, -1, True), (4, 0, -1, 0),
                 (-1, 96, -1, 0), (-1, 0, 2, 0), (-1, 0, -1, 65), (-1, 0, -1, -1)):
        with pytest.raises(ValueError):
            fp8_ops.check_plan_args(*args)


def test_cpp_kernel_refuses_what_the_python_checks_refuse():
    """The C++ CUDA kernel (fp8.cpp gemm_call_passes) tests the plan arguments against literals,
    the Python checks against PATHS, BLOCK_NS, PERSISTENT, MAX_SPLIT_K and GEMV_TMA_MAX_ROWS: a
    value one side takes and the other refuses would either skip the Python messages or reach
    the launcher unchecked. Read from the sources, so it runs without a GPU."""
    import re
    from pathlib import Path

    csrc = Path(__file__).resolve().parents[1] / "csrc" / "kernels" / "fp8"
    passes = (csrc / "fp8.cpp").read_text().split("bool gemm_call_passes(")[1].split("\n}\n")[0]
    block_ns = {int(v) for v in re.findall(r"block_n == (\d+)", passes)}
    lo, hi = map(int, re.search(r"path < (-?\d+) \|\| path > (\d+)", passes).groups())
    p_lo, p_hi = map(int, re.search(r"persistent < (-?\d+) \|\| persistent > (\d+)", passes).groups())
    assert block_ns == set(fp8_ops.BLOCK_NS)
    assert tuple(range(lo, hi + 1)) == fp8_ops.PATHS
    assert tuple(range(p_lo, p_hi + 1)) == fp8_ops.PERSISTENT
    assert "split_k > fp8::gemm::kMaxSplitK" in passes and "m > fp8::gemm::kGemvTmaMaxRows" in passes
    request = (csrc / "gemm" / "request.h").read_text()
    def constant(name: str) -> int:
        return int(re.search(rf"constexpr int {name} = (\d+);", request).group(1))

    assert constant("kMaxSplitK") == fp8_ops.MAX_SPLIT_K
    assert constant("kGemvTmaMaxRows") == fp8_ops.GEMV_TMA_MAX_ROWS
    policy = (csrc / "gemm" / "policy.cuh").read_text().split("struct GemvTmaPolicy {")[1]
    assert "static constexpr int kMaxRows = kGemvTmaMaxRows;" in policy


def test_quantize_bad_inputs_raise():
    s = torch.empty((), dtype=torch.float32, device="meta")
    with pytest.raises(TypeError, match="bfloat16"):
        torch.ops.kernels.fp8_quantize(torch.empty(4, 4, device="meta"), s, E4M3, True, False)
    x = torch.empty(4, 4, dtype=torch.bfloat16, device="meta")
    with pytest.raises(TypeError, match="fp8_dtype"):
        torch.ops.kernels.fp8_quantize(x, s, torch.float16, True, False)
    with pytest.raises(ValueError, match="one value"):
        torch.ops.kernels.fp8_quantize(x, torch.empty(2, device="meta"), E4M3, True, False)


def test_cpu_tensors_are_refused_in_words():
    """A CPU call says the primitives need a CUDA device, not the dispatcher's backend list."""
    a = torch.zeros(4, 32, dtype=E4M3)
    s = torch.ones(())
    with pytest.raises(NotImplementedError, match="fp8_gemm runs on CUDA devices .* got tensors on cpu"):
        torch.ops.kernels.fp8_gemm(a, a, s, s)
    with pytest.raises(NotImplementedError, match="fp8_quantize runs on CUDA devices"):
        torch.ops.kernels.fp8_quantize(torch.zeros(4, 32, dtype=torch.bfloat16), s, E4M3, True, False)


def _delayed_layer(history_len=4):
    """An Fp8Linear with delayed-scaling state as FP8 steps leave it (set by hand: no GPU here)."""
    layer = fp8_strategy.Fp8Linear(32, 16)
    state = fp8_strategy.Fp8LinearState(fp8_strategy.DelayedScaling(amax_history_len=history_len), "cpu")
    state.history.uniform_(1, 2)
    state.scale.copy_(torch.tensor([3.0, 5.0, 7.0]))
    layer._fp8_state = state
    return layer


def test_fp8_linear_checkpoints_its_delayed_scaling_state():
    """The amax history and multipliers travel with state_dict, so a resumed run continues them
    instead of starting from zeros and multipliers of 1."""
    layer = _delayed_layer()
    resumed = fp8_strategy.Fp8Linear(32, 16)
    resumed.load_state_dict(layer.state_dict())
    assert resumed._fp8_state.recipe == layer._fp8_state.recipe
    assert torch.equal(resumed._fp8_state.history, layer._fp8_state.history)
    assert torch.equal(resumed._fp8_state.scale, layer._fp8_state.scale)
    assert resumed._fp8_state.history is not layer._fp8_state.history
    with pytest.raises(ValueError, match="do not fit the recipe"):
        extra = layer.get_extra_state()
        resumed.set_extra_state({**extra, "history": extra["history"][:, :2]})


def test_fp8_linear_state_dicts_stay_nn_linear_compatible():
    """Without FP8 state the keys are nn.Linear's, and an nn.Linear checkpoint loads strictly
    into an Fp8Linear (dropping any state it had): converting a model either way keeps working."""
    plain = torch.nn.Linear(32, 16, dtype=torch.bfloat16)
    fresh = fp8_strategy.Fp8Linear(32, 16)
    assert fresh.state_dict().keys() == plain.state_dict().keys()
    plain.load_state_dict(fresh.state_dict())
    layer = _delayed_layer()
    layer.load_state_dict(plain.state_dict())
    assert layer._fp8_state is None and torch.equal(layer.weight, plain.weight)


def test_recipes_validate():
    with pytest.raises(ValueError):
        fp8_strategy.DelayedScaling(fp8_format="e5m2")
    with pytest.raises(ValueError):
        fp8_strategy.DelayedScaling(amax_history_len=0)
    for margin in (-1, 1.5, True, fp8_strategy.MAX_MARGIN + 1):
        with pytest.raises(ValueError, match="margin must be an int"):
            fp8_strategy.DynamicScaling(margin=margin)
    with pytest.raises(ValueError, match="amax_history_len must be an int"):
        fp8_strategy.DelayedScaling(amax_history_len=2.5)
    with pytest.raises(TypeError):
        with fp8_strategy.fp8_autocast(recipe="delayed"):
            pass


def test_a_scale_is_a_positive_normal_number_whatever_the_amax():
    """An amax of inf or NaN (an overflowed step, kept for amax_history_len steps by delayed
    scaling) or 0, and a margin that pushes the quotient past float32, give the scale 1 (as
    the docstring says), never 0 or inf: a dequant factor of inf would make the output NaN."""
    scale_of = fp8_strategy._scale_from_amax
    e4m3 = torch.float8_e4m3fn
    assert float(scale_of(torch.tensor(2.0), e4m3, 1)) == 448.0 / 4
    for amax in (float("inf"), float("nan"), 0.0, 1e-45):
        assert float(scale_of(torch.tensor(amax), e4m3, 0)) == 1.0, amax
    assert float(scale_of(torch.tensor(3e38), e4m3, fp8_strategy.MAX_MARGIN)) == 1.0


@pytest.mark.parametrize("algo,margin", [("max", 0), ("most_recent", 0), ("max", 1)])
def test_delayed_scaling_follows_its_amax_history(monkeypatch, algo, margin):
    """Fp8LinearState on CPU, the quantize kernel emulated in torch (it returns the tensor's
    amax): each step quantizes with the multiplier the steps before it chose (1 at first) and
    then pushes its amax, so the multiplier is fp8_max / (2^margin * amax) of the history's
    max (or of the latest), over the last amax_history_len steps."""
    e4m3, fp8_max = torch.float8_e4m3fn, 448.0

    def quantize(x, scale, fp8_dtype, rowwise, transpose):
        return (x.float() * scale).clamp(-fp8_max, fp8_max).to(fp8_dtype), None, x.abs().max().float()

    monkeypatch.setattr(torch.ops.kernels, "fp8_quantize", quantize)
    state = fp8_strategy.Fp8LinearState(
        fp8_strategy.DelayedScaling(amax_history_len=3, margin=margin, amax_compute_algo=algo), "cpu")
    amaxes = [2.0, 8.0, 1.0, 1.0, 1.0, 4.0]
    multiplier = 1.0  # what the next step quantizes with
    for step, amax in enumerate(amaxes):
        x = torch.zeros(16)
        x[step] = -amax
        _, _, dequant = state.quantize("input", x, e4m3)
        assert float(dequant) == pytest.approx(1 / multiplier, rel=1e-6), step
        window = amaxes[max(0, step - 2):step + 1]
        multiplier = fp8_max / (2 ** margin * (max(window) if algo == "max" else amax))
        assert float(state.scale[0]) == multiplier, (step, window)
    assert float(state.scale[1]) == float(state.scale[2]) == 1.0  # the other roles untouched


@pytest.mark.parametrize("recipe", [fp8_strategy.DynamicScaling(), fp8_strategy.DelayedScaling()],
                         ids=["dynamic", "delayed"])
def test_inference_quantizes_the_weight_once_per_version(monkeypatch, recipe):
    """Fp8Linear on CPU, the kernels emulated in torch: without gradients the weight is quantized
    once with its own amax and kept until it changes (in place, or a new tensor); the input is
    quantized on every call; the output is the emulated FP8 product. With gradients the weight
    is quantized on every call."""
    fp8_max = 448.0
    quantized = []

    def quantize(x, scale, fp8_dtype, rowwise, transpose):
        quantized.append(x.shape)
        x_q = (x.float() * scale).clamp(-fp8_max, fp8_max).to(fp8_dtype) if rowwise else None
        x_t = x_q.t().contiguous() if transpose and x_q is not None else None
        return x_q, x_t, x.abs().max().float()

    def gemm(a, b, a_deq, b_deq, bias=None, *args):
        out = (a.float() @ b.float().t()) * a_deq * b_deq
        return (out if bias is None else out + bias.float()).bfloat16()

    monkeypatch.setattr(torch.ops.kernels, "fp8_quantize", quantize)
    monkeypatch.setattr(torch.ops.kernels, "fp8_gemm", gemm)
    monkeypatch.setattr(fp8_strategy, "get_recipe", lambda: recipe)
    layer = fp8_strategy.Fp8Linear(64, 32)
    x = torch.randn(5, 64).bfloat16()
    weight_shape = tuple(layer.weight.shape)

    def weight_quantizations(fn):
        before = len(quantized)
        out = fn()
        return sum(shape == weight_shape for shape in quantized[before:]), out

    with torch.no_grad():
        first, out = weight_quantizations(lambda: layer(x))
        again, _ = weight_quantizations(lambda: layer(x))
        assert (first, again) == (2, 0)  # amax, then quantize; then kept
        w_q, w_deq = layer.quantized_weight(recipe)
        expected = x.float() @ (w_q.float() * w_deq).t() + layer.bias.float()
        assert (out.float() - expected).abs().max() < 0.1 * expected.abs().max()  # x's FP8 rounding
        layer.weight.mul_(2)                                                      # in place
        assert weight_quantizations(lambda: layer(x))[0] == 2
        layer.weight = torch.nn.Parameter(layer.weight.detach().clone())          # a new tensor
        assert weight_quantizations(lambda: layer(x))[0] == 2
        assert weight_quantizations(lambda: layer(x))[0] == 0
    if isinstance(recipe, fp8_strategy.DynamicScaling):  # training: the weight every call
        assert [weight_quantizations(lambda: layer(x))[0] for _ in range(2)] == [2, 2]


def test_linear_outside_autocast_is_plain():
    layer = fp8_strategy.Fp8Linear(32, 16, dtype=torch.float32)
    x = torch.randn(3, 32)
    torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
    assert not fp8_strategy.is_fp8_enabled()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_autocast_without_cuda_raises():
    with pytest.raises(RuntimeError, match="CUDA"):
        with fp8_strategy.fp8_autocast():
            pass


# ---- GPU ---------------------------------------------------------------------------------------

def _need_module():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if not fp8_ops.is_available():
        pytest.skip("fp8 module not built (python -m tools.build_ext)")
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 needs sm_89+")


def _is_hopper():
    return torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [E4M3, E5M2])
@pytest.mark.parametrize("shape", [(128, 256), (77, 45), (3, 5, 64), (1000, 24), (1, 8)])
def test_quantize_matches_torch(dtype, shape, guards):
    _need_module()
    x = guards.copy((torch.randn(*shape, device="cuda") * 5).to(torch.bfloat16), name="x")
    fmax = fp8_ops.FP8_MAX[dtype]
    scale = torch.tensor(2 * fmax, device="cuda") / x.float().abs().amax()  # saturates the top half
    out, out_t, amax = torch.ops.kernels.fp8_quantize(x, scale, dtype, True, True)
    ref = (x.float() * scale).clamp(-fmax, fmax).to(dtype)
    assert torch.equal(out.view(torch.uint8), ref.view(torch.uint8))
    ref_t = ref.reshape(-1, shape[-1]).t().contiguous()
    assert torch.equal(out_t.view(torch.uint8), ref_t.view(torch.uint8))
    assert float(amax) == float(x.float().abs().amax())


@pytest.mark.gpu
def test_quantize_strided_rows_and_amax_only(guards):
    _need_module()
    base = torch.randn(64, 96, device="cuda").to(torch.bfloat16)
    x = guards.copy(base[:, :64], name="x")  # row stride 96; the 32 columns between rows are guards too
    one = torch.ones((), device="cuda")
    out, _, amax = torch.ops.kernels.fp8_quantize(x, one, E4M3, True, False)
    assert torch.equal(out.view(torch.uint8), x.float().to(E4M3).view(torch.uint8))
    _, _, amax_only = torch.ops.kernels.fp8_quantize(x, one, E4M3, False, False)
    assert float(amax_only) == float(amax) == float(x.float().abs().amax())


@pytest.mark.gpu
@pytest.mark.parametrize("rowwise", [False, True])
def test_quantize_writes_every_element_of_poisoned_outputs(rowwise, guards):
    """The binding with outputs poisoned in guard regions (the op allocates its own): the
    transpose alone (rowwise=False: what a backward pass asks for when N % 16 != 0) and both,
    on a shape whose rows and columns are no multiple of a tile."""
    _need_module()
    from kernels.extension import loader

    x = guards.copy((torch.randn(33, 200, device="cuda") * 5).to(torch.bfloat16), name="x")
    scale = guards.copy(torch.tensor(448.0, device="cuda") / x.float().abs().amax(), name="scale")
    poison = 0x7F  # an E4M3 NaN: a byte no quantized value takes
    def poisoned(shape, name):
        return guards.copy(torch.full(shape, poison, dtype=torch.uint8, device="cuda"), name=name).view(E4M3)

    out, out_t = poisoned((33, 200), "out"), poisoned((200, 33), "out_t")
    amax = torch.zeros(1, device="cuda")
    loader.load("fp8").quantize(x, scale, out if rowwise else None, out_t, amax)
    ref = (x.float() * scale).clamp(-448, 448).to(E4M3)
    assert torch.equal(out_t.view(torch.uint8), ref.t().contiguous().view(torch.uint8))
    if rowwise:
        assert torch.equal(out.view(torch.uint8), ref.view(torch.uint8))
    else:
        assert (out.view(torch.uint8) == poison).all(), "rowwise=False wrote the rows"
    assert float(amax) == float(x.float().abs().amax())
    guards.check()


def _gemm_case(m, n, k, da, db, guards, seed=0, extras=False):
    """Operands inside NaN guard regions (a read past any of them makes the output NaN) and
    the fp64 reference with its magnitude sum_k |a_k b_k|."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(da)
    b = torch.randn(n, k, device="cuda", generator=g).to(db)
    sa, sb = torch.tensor(0.5, device="cuda"), torch.tensor(0.25, device="cuda")
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16) if extras else None
    rs = torch.rand(m, device="cuda", generator=g) + 0.5 if extras else None
    cs = torch.rand(n, device="cuda", generator=g) + 0.5 if extras else None
    a, b, sa, sb, bias, rs, cs = guards.copies(a=a, b=b, scale_a=sa, scale_b=sb, bias=bias, row_scale=rs,
                                               col_scale=cs)
    af, bf = a.double(), b.double()
    ref, mag = (af @ bf.t()) * 0.125, (af.abs() @ bf.abs().t()) * 0.125
    if extras:
        scale = rs.double()[:, None] * cs.double()[None, :]
        ref, mag = ref * scale + bias.double(), mag * scale
    return a, b, sa, sb, bias, rs, cs, (ref, mag)


# Accumulation error per unit of sum_k |a_k b_k|. mma.sync accumulates in fp32: 1e-5. FP8
# WGMMAs add inside each 128-deep k-block at reduced precision (about 14 bits) even when the
# kernel promotes every block into fp32 registers: up to 3.7e-5 was seen on the H200
# (2026-11-30), so 2^-13. Without promotion (block_n=256, like
# torch._scaled_mm(use_fast_accum=True)) the error grows with K: up to 2.8e-4 seen, so 2^-11.
# Norm-wise, test_gemm_accuracy_vs_scaled_mm holds the promoted path to cuBLASLt's accuracy.
ACC_U = 1e-5
WGMMA_ACC_U = 2.0**-13
FAST_ACC_U = 2.0**-11


def _assert_gemm_close(out, ref_mag, tag, u=ACC_U):
    ref, mag = ref_mag
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    assert torch.isfinite(out).all(), f"{tag}: non-finite output"
    diff = out.double() - ref
    rel = float(diff.norm() / ref.norm().clamp_min(1e-30))
    assert rel <= 1e-2, f"{tag}: rel_err {rel:.3g}"
    bound = 2.0**-8 * ref.abs() + u * mag + 1e-6  # bf16 output rounding + accumulation
    excess = diff.abs() - bound
    worst = int(excess.argmax())
    i, j = divmod(worst, ref.shape[1]) if ref.dim() == 2 else (0, worst)
    assert float(excess.max()) <= 0, (f"{tag}: ({i}, {j}) got {float(out.reshape(-1)[worst]):.6g} "
                                      f"want {float(ref.reshape(-1)[worst]):.6g}")


def _u_for(variant):
    """The accumulation bound of the path a call takes (the planner's choice is a WGMMA path
    on Hopper, with promotion)."""
    if variant.get("path") == 1 or not _is_hopper():
        return ACC_U
    return FAST_ACC_U if variant.get("block_n") == 256 else WGMMA_ACC_U


PATH_VARIANTS = [dict(path=0, block_n=bn, persistent=p) for bn in (64, 128, 176, 192, 256) for p in (0, 1)]
PATH_VARIANTS += [dict(path=1), dict()]  # mma.sync, planner's choice
SHAPES = [(1, 64, 32), (7, 33, 48), (16, 256, 128), (129, 130, 144), (300, 77, 1040),
          (257, 520, 2064), (2, 11008, 4096)]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", PATH_VARIANTS,
                         ids=lambda v: "-".join(f"{k}{x}" for k, x in v.items()) or "auto")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_paths_match_reference(variant, shape, guards):
    _need_module()
    if variant.get("path") == 0 and not _is_hopper():
        pytest.skip("WGMMA path is sm_90a only")
    a, b, sa, sb, _, _, _, ref = _gemm_case(*shape, E4M3, E4M3, guards, seed=sum(shape))
    out = torch.ops.kernels.fp8_gemm(a, b, sa, sb, **variant)
    _assert_gemm_close(out, ref, f"{shape} {variant}", u=_u_for(variant))
    # the same plan into a NaN-poisoned output in guard regions: a tile it never writes shows
    # (the operator's own output is fresh memory that an earlier variant may have filled)
    poisoned = _gemm_into_poison(a, b, sa, sb, guards, **variant)
    _assert_gemm_close(poisoned, ref, f"{shape} {variant}, poisoned output", u=_u_for(variant))
    guards.check()


def _gemm_into_poison(a, b, sa, sb, guards, bias=None, row_scale=None, col_scale=None, path=-1, block_n=0,
                      persistent=-1, split_k=0):
    """The binding's GEMM writing a NaN-poisoned output inside guard regions (the operator
    allocates its own, so it cannot be poisoned from outside)."""
    from kernels.extension import loader

    out = guards.empty((a.shape[0], b.shape[0]), torch.bfloat16, name="out")
    loader.load("fp8").gemm(a, b, sa, sb, bias, row_scale, col_scale, out, path, block_n, persistent,
                            split_k=split_k)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("m", range(1, 17))
def test_gemm_small_m(m, guards):
    _need_module()
    a, b, sa, sb, bias, rs, cs, ref = _gemm_case(m, 96, 272, E4M3, E4M3, guards, seed=m, extras=True)
    out = torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, rs, cs)
    _assert_gemm_close(out, ref, f"M={m}", u=_u_for({}))
    poisoned = _gemm_into_poison(a, b, sa, sb, guards, bias, rs, cs)
    _assert_gemm_close(poisoned, ref, f"M={m}, poisoned output", u=_u_for({}))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 9, 16])
@pytest.mark.parametrize(
    "n, k", [(1, 16), (17, 272), (333, 1040), (4112, 4096), (333, 8192), (1001, 11024)], ids=lambda v: str(v)
)
@pytest.mark.parametrize("da, db", [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3)])
def test_gemv_matches_reference(m, n, k, da, db, guards):
    """The GEMV path (what M <= 16 runs below 16 Mi values of b, and everywhere off sm_90a): every
    format pair, tails in N and K, the epilogue's extras, fp32 accumulation (mma.sync's bound);
    operands in guard regions."""
    _need_module()
    large_b = n * k >= 1 << 24 and _is_hopper()  # GemvTmaPolicy::kMinAutoElems: the swap-AB GEMV
    assert fp8_ops.gemm_plan(m, n, k)["path"] == ("gemv_tma" if large_b else "gemv")
    for extras in (False, True):
        a, b, sa, sb, bias, rs, cs, ref = _gemm_case(m, n, k, da, db, guards, seed=m * n + k, extras=extras)
        out = torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, rs, cs, path=2)
        _assert_gemm_close(out, ref, f"gemv M={m} N={n} K={k} extras={extras}", u=ACC_U)
        assert torch.equal(out, torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, rs, cs, path=2))


@pytest.mark.gpu
def test_gemv_refuses_more_than_16_rows():
    _need_module()
    a = torch.zeros(17, 32, dtype=E4M3, device="cuda")
    b = torch.zeros(16, 32, dtype=E4M3, device="cuda")
    s = torch.ones((), device="cuda")
    with pytest.raises(ValueError, match="GEMV path takes M <= 16"):
        torch.ops.kernels.fp8_gemm(a, b, s, s, path=2)


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 9, 16, 17, 32, 33, 64, 100, 128])
@pytest.mark.parametrize(
    "n, k", [(1, 16), (17, 272), (333, 1040), (4112, 4096), (333, 8192), (1001, 11024)], ids=lambda v: str(v)
)
@pytest.mark.parametrize("da, db", [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3)])
def test_gemv_tma_matches_reference(m, n, k, da, db, guards):
    """The swap-AB TMA GEMV (path=3; sm_90a): M in WGMMA n16 / 32 / 64 / 128
    (the narrowest that holds it), every format pair, tails in N and K, the epilogue's extras,
    promoted WGMMA accumulation (every 128-deep k-block), its split-K inside a cluster summed in
    rank order (the same bits every call); operands in guard regions. Where the planner picks it
    on its own (16 < M <= 64 here, and up to 128 where it plans blocks of 64 rows:
    GemvTmaPolicy::planner_takes), the default call gives the same bits."""
    _need_module()
    if not _is_hopper():
        pytest.skip("the gemv_tma path is sm_90a only")
    automatic = fp8_ops.gemm_plan(m, n, k)["path"]
    plan = fp8_ops.gemm_plan(m, n, k, path=3)
    assert plan["path"] == "gemv_tma" and plan["supported"] and plan["workspace_bytes"] == 0, plan
    assert plan["block_n"] in (64, 128), plan
    narrow, large_b = plan["block_n"] == 64, n * k >= 1 << 24  # GemvTmaPolicy::kMinAutoElems
    if m <= 16:
        expected = "gemv_tma" if large_b else "gemv"
    else:
        expected = "gemv_tma" if m <= 64 or narrow else "wgmma"
    assert automatic == expected, automatic
    assert plan["block_m"] == next(w for w in (16, 32, 64, 128) if m <= w), plan
    for extras in (False, True):
        a, b, sa, sb, bias, rs, cs, ref = _gemm_case(m, n, k, da, db, guards, seed=m * n + k + 1,
                                                     extras=extras)
        out = torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, rs, cs, path=3)
        _assert_gemm_close(out, ref, f"gemv_tma M={m} N={n} K={k} extras={extras}", u=WGMMA_ACC_U)
        assert torch.equal(out, torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, rs, cs, path=3))
        if automatic == "gemv_tma":
            assert torch.equal(out, torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, rs, cs))


@pytest.mark.gpu
def test_gemv_tma_refuses_more_than_128_rows():
    _need_module()
    if not _is_hopper():
        pytest.skip("the gemv_tma path is sm_90a only")
    a = torch.zeros(129, 32, dtype=E4M3, device="cuda")
    b = torch.zeros(16, 32, dtype=E4M3, device="cuda")
    s = torch.ones((), device="cuda")
    with pytest.raises(ValueError, match="M <= 128"):
        torch.ops.kernels.fp8_gemm(a, b, s, s, path=3)
    plan = fp8_ops.gemm_plan(129, 16, 32, path=3)
    assert not plan["supported"], plan


@pytest.mark.gpu
@pytest.mark.parametrize("da, db", [(E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3)])
@pytest.mark.parametrize("path", [0, 1])
def test_gemm_formats_vs_scaled_mm(da, db, path, guards):
    _need_module()
    if path == 0 and not _is_hopper():
        pytest.skip("WGMMA path is sm_90a only")
    m, n, k = 192, 320, 512
    a, b, sa, sb, _, _, _, (ref, mag) = _gemm_case(m, n, k, da, db, guards, seed=3, extras=False)
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    ref = ref + bias.double()
    out = torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, path=path)
    _assert_gemm_close(out, (ref, mag), f"{da} x {db}", u=_u_for({"path": path}))
    peer = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, bias=bias, out_dtype=torch.bfloat16)
    rel = float((out.float() - peer.float()).norm() / peer.float().norm())
    assert rel <= 1e-2


def _rel(out, ref):
    return float((out.double() - ref).norm() / ref.norm())


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(128, 256, 128), (256, 512, 4096), (64, 1024, 16384)],
                         ids=lambda s: "x".join(map(str, s)))
def test_gemm_accuracy_vs_scaled_mm(shape, guards):
    """Same inputs, fp64 reference: the promoted kernel is as accurate as torch._scaled_mm
    (fp32 accumulation); block_n=256 as accurate as torch._scaled_mm(use_fast_accum=True)."""
    _need_module()
    if not _is_hopper():
        pytest.skip("WGMMA path is sm_90a only")
    a, b, sa, sb, _, _, _, (ref, mag) = _gemm_case(*shape, E4M3, E4M3, guards, seed=11)
    def scaled_mm(fast):
        return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16,
                                use_fast_accum=fast)
    errs = {"ours": _rel(torch.ops.kernels.fp8_gemm(a, b, sa, sb), ref),
            "ours_bn128": _rel(torch.ops.kernels.fp8_gemm(a, b, sa, sb, path=0, block_n=128), ref),
            "ours_bn192": _rel(torch.ops.kernels.fp8_gemm(a, b, sa, sb, path=0, block_n=192), ref),
            "ours_bn64": _rel(torch.ops.kernels.fp8_gemm(a, b, sa, sb, path=0, block_n=64), ref),
            "ours_fast": _rel(torch.ops.kernels.fp8_gemm(a, b, sa, sb, path=0, block_n=256), ref),
            "mma_sync": _rel(torch.ops.kernels.fp8_gemm(a, b, sa, sb, path=1), ref),
            "scaled_mm": _rel(scaled_mm(False), ref), "scaled_mm_fast": _rel(scaled_mm(True), ref)}
    msg = " ".join(f"{k}={v:.3e}" for k, v in errs.items())
    # bf16 output rounding alone gives ~1e-3 here; the slack covers rounding-tie noise only
    for name in ("ours", "ours_bn128", "ours_bn192"):
        assert errs[name] <= 1.1 * errs["scaled_mm"] + 1e-5, msg
    assert errs["ours_bn64"] <= 1.1 * errs["scaled_mm"] + 1e-5, msg
    assert errs["mma_sync"] <= 1.1 * errs["scaled_mm"] + 1e-5, msg
    # Unpromoted accumulation: 1.56x cuBLASLt's fast-accumulation error was seen at K = 16384.
    assert errs["ours_fast"] <= 2.0 * max(errs["scaled_mm_fast"], errs["scaled_mm"]) + 1e-5, msg


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["fp8_gemm", "fp8_quantize"])
def test_cuda_kernels_are_the_modules(op):
    """With the module built, the operators' CUDA kernels are the module's C++ ones (fp8.cpp), not
    the Python fallbacks, which take twice the host time per call."""
    _need_module()
    dump = torch._C._dispatch_dump(f"kernels::{op}")
    cuda = [line for line in dump.splitlines() if line.startswith("CUDA:")]
    assert len(cuda) == 1 and "fp8.cpp" in cuda[0], cuda


@pytest.mark.gpu
def test_gemm_bad_inputs_on_device():
    """Every bad input raises in Python before anything reaches the launcher (the C++ kernel
    hands a call it refuses to the Python checks)."""
    _need_module()
    a = torch.zeros(8, 40, dtype=E4M3, device="cuda")
    s = torch.ones((), device="cuda")
    with pytest.raises(ValueError, match="multiple of 16"):
        torch.ops.kernels.fp8_gemm(a, a, s, s)
    a = torch.zeros(8, 64, dtype=E5M2, device="cuda")
    with pytest.raises(TypeError, match="format pair"):
        torch.ops.kernels.fp8_gemm(a, a, s, s)
    b = torch.zeros(4, 64, dtype=E4M3, device="cuda")
    wide = torch.zeros(8, 80, dtype=E4M3, device="cuda")
    with pytest.raises(ValueError, match="16-byte aligned"):
        torch.ops.kernels.fp8_gemm(wide[:, 8:72], b, s, s)  # base address 8 bytes in
    odd_rows = torch.zeros(8, 72, dtype=E4M3, device="cuda")
    with pytest.raises(ValueError, match="row stride 72"):
        torch.ops.kernels.fp8_gemm(odd_rows[:, :64], b, s, s)
    with pytest.raises(ValueError, match="block_n"):
        torch.ops.kernels.fp8_gemm(b, b, s, s, block_n=96)
    with pytest.raises(ValueError, match="path"):
        torch.ops.kernels.fp8_gemm(b, b, s, s, path=4)
    with pytest.raises(ValueError, match="scale_a"):
        torch.ops.kernels.fp8_gemm(b, b, s.cpu(), s)
    with pytest.raises(ValueError, match="block_n"):
        fp8_ops.gemm_plan(4, 4, 16, block_n=96)
    if not _is_hopper():
        with pytest.raises(NotImplementedError, match="sm_90a"):
            torch.ops.kernels.fp8_gemm(b, b, s, s, path=0)


@pytest.mark.gpu
def test_gemm_plan_never_picks_fast_accumulation():
    _need_module()
    for m, n, k in [(4096, 4096, 4096), (8192, 8192, 8192), (1, 64, 32), (16384, 256, 1024)]:
        plan = fp8_ops.gemm_plan(m, n, k)
        assert not plan["fast_accum"], plan
    assert fp8_ops.gemm_plan(4096, 4096, 4096, path=0, block_n=256)["fast_accum"]


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", [fp8_strategy.DynamicScaling(),
                                    fp8_strategy.DelayedScaling(amax_history_len=4)],
                         ids=["dynamic", "delayed"])
def test_fp8_autocast_linear_forward_backward(recipe):
    _need_module()
    torch.manual_seed(0)
    layer = fp8_strategy.Fp8Linear(256, 128, device="cuda")
    x = torch.randn(4, 32, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    ref_layer = torch.nn.Linear(256, 128, device="cuda", dtype=torch.float32)
    ref_layer.load_state_dict({k: v.float() for k, v in layer.state_dict().items()})
    x_ref = x.detach().float().requires_grad_(True)
    y_ref = ref_layer(x_ref)
    grad = torch.randn_like(y_ref)
    y_ref.backward(grad)
    for step in range(3):  # delayed scaling: step 0 uses the initial scale 1, later ones history
        layer.zero_grad()
        x.grad = None
        with fp8_strategy.fp8_autocast(recipe=recipe):
            y = layer(x)
        y.backward(grad.to(torch.bfloat16))

        def rel(got, want):
            return float((got.float() - want).norm() / want.norm())

        assert rel(y, y_ref) < 0.08, f"step {step}: forward rel {rel(y, y_ref):.3g}"
        assert rel(x.grad, x_ref.grad) < 0.15
        assert rel(layer.weight.grad, ref_layer.weight.grad) < 0.15
        assert rel(layer.bias.grad, ref_layer.bias.grad) < 0.02


@pytest.mark.gpu
@pytest.mark.parametrize("path", [-1, 1])
def test_gemm_empty_k_gives_bias(path):
    _need_module()
    a = torch.zeros(5, 0, dtype=E4M3, device="cuda")
    b = torch.zeros(7, 0, dtype=E4M3, device="cuda")
    s = torch.ones((), device="cuda")
    bias = torch.randn(7, device="cuda").to(torch.bfloat16)
    out = torch.ops.kernels.fp8_gemm(a, b, s, s, bias, path=path)
    torch.testing.assert_close(out, bias.expand(5, 7), rtol=0, atol=0)


# ---- split-K -------------------------------------------------------------------------------------
# K = 1040 and 2064: 9 and 17 k-blocks of 128 with a 16-deep tail, so most split counts are
# uneven; N = 200 and 333 leave partial tiles. split_k = 0 is the planner's choice (two slices at
# 100 x 520 x 4112: one row of 9 tiles, 33 k-blocks).

@pytest.mark.gpu
@pytest.mark.parametrize("extras", [False, True], ids=["plain", "extras"])
@pytest.mark.parametrize("split_k", [0, 2, 3, 5])
@pytest.mark.parametrize("shape", [(1, 200, 1040), (16, 333, 2064), (128, 200, 1040), (5, 4096, 4096),
                                   (100, 520, 4112)], ids=lambda s: "x".join(map(str, s)))
def test_gemm_split_k_matches_reference(shape, split_k, extras, guards):
    _need_module()
    a, b, sa, sb, bias, rs, cs, ref = _gemm_case(*shape, E4M3, E4M3, guards, seed=sum(shape) + split_k,
                                                 extras=extras)
    out = torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, rs, cs, split_k=split_k)
    _assert_gemm_close(out, ref, f"{shape} split_k={split_k}", u=_u_for({}))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [dict(path=0, block_n=64), dict(path=0, block_n=192),
                                     dict(path=0, block_n=256), dict(path=0, persistent=1)],
                         ids=lambda v: "-".join(f"{k}{x}" for k, x in v.items()))
def test_gemm_split_k_tile_variants(variant, guards):
    _need_module()
    if not _is_hopper():
        pytest.skip("WGMMA path is sm_90a only")
    a, b, sa, sb, bias, rs, cs, ref = _gemm_case(16, 333, 2064, E4M3, E4M3, guards, seed=5, extras=True)
    out = torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, rs, cs, split_k=4, **variant)
    _assert_gemm_close(out, ref, f"split_k=4 {variant}", u=_u_for(variant))


@pytest.mark.gpu
def test_gemm_split_k_is_deterministic_and_graph_safe(guards):
    """The reduction sums the splits in order: repeated calls, and replays of a captured CUDA
    graph (workspace from the graph's pool), give the same bits."""
    _need_module()
    a, b, sa, sb, bias, rs, cs, ref = _gemm_case(16, 4096, 4096, E4M3, E4M3, guards, seed=9, extras=True)
    first = torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, rs, cs, split_k=6)
    _assert_gemm_close(first, ref, "split_k=6", u=_u_for({}))
    assert torch.equal(first, torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, rs, cs, split_k=6))
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, rs, cs, split_k=6)  # warm-up outside capture
        with torch.cuda.graph(graph):
            captured = torch.ops.kernels.fp8_gemm(a, b, sa, sb, bias, rs, cs, split_k=6)
    torch.cuda.current_stream().wait_stream(stream)
    captured.fill_(0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, first)


@pytest.mark.gpu
def test_gemm_plan_split_k():
    """The planner's own splits: its cost model is off until refitted (PlannerDefaults::
    kAutoSplitK), so only one half-wave row of tiles at K >= 4096 goes in two (on the tiled
    path: on its own the planner sends that shape to the swap-AB GEMV, whose split-K needs no
    workspace); forced counts split, capped at the k-blocks, with a workspace that follows the
    plan."""
    _need_module()
    if not _is_hopper():
        pytest.skip("split-K is a WGMMA-path plan (sm_90a)")
    forced = fp8_ops.gemm_plan(1, 4096, 4096, split_k=2)
    assert forced["split_k"] == 2 and forced["workspace_bytes"] == 2 * 1 * 4096 * 4, forced
    for m, n, k in [(1, 4096, 4096), (4096, 4096, 4096), (8192, 8192, 8192), (2048, 8192, 4096)]:
        plan = fp8_ops.gemm_plan(m, n, k)
        assert plan["split_k"] == 1 and plan["workspace_bytes"] == 0, plan
    two = fp8_ops.gemm_plan(128, 4096, 14336, path=0)
    assert two["split_k"] == 2 and two["workspace_bytes"] == 2 * 128 * 4096 * 4, two
    own = fp8_ops.gemm_plan(128, 4096, 14336)
    assert own["path"] == "gemv_tma" and own["grid"] == 2 * own["tiles"] and own["workspace_bytes"] == 0, own
    assert fp8_ops.gemm_plan(1, 4096, 4096, split_k=1)["split_k"] == 1
    assert fp8_ops.gemm_plan(1, 4096, 4096, split_k=7)["split_k"] == 7
    assert fp8_ops.gemm_plan(1, 96, 272, split_k=8)["split_k"] == 3  # 3 k-blocks
    assert fp8_ops.gemm_plan(1, 4096, 4096, path=1, split_k=4)["split_k"] == 1  # mma.sync: never split
