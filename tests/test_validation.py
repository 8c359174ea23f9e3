"""Bad input is a clear Python error before any kernel runs."""

import pytest
import torch

from kernels.harness import AttentionProblem, Fp8Tensor, make_inputs, quantize_e4m3, validate_attention_inputs
from kernels.registry import get, rung_module, rung_names
from tools.inspect import native_problem

P = AttentionProblem(batch=2, seqlen_q=8, seqlen_k=8, heads_q=4, heads_kv=2, head_dim=64)


def tensors(**kw):
    q, k, v = make_inputs(P.with_(**kw) if kw else P, device="cpu")
    return q, k, v


def check(q, k, v, **kw):
    return validate_attention_inputs(q, k, v, name="test", require_cuda=False, **kw)


def test_valid_inputs_describe_their_problem():
    assert check(*tensors(), causal=True) == P.with_(causal=True)


@pytest.mark.parametrize("mutate,error,match", [
    (lambda q, k, v: (q.float(), k, v), TypeError, "dtype float32"),
    (lambda q, k, v: (q, k.half(), v), TypeError, "k dtype"),
    (lambda q, k, v: (q[0], k, v), ValueError, "4-D"),
    (lambda q, k, v: (q.transpose(1, 2), k, v), ValueError, "heads_q .8. must be a multiple|contiguous"),
    (lambda q, k, v: (q[:, :, :3], k, v), ValueError, "multiple of heads_kv"),
    (lambda q, k, v: (q, k, v[:, :4]), ValueError, "same shape"),
    (lambda q, k, v: (q, k[:1], v[:1]), ValueError, "batch"),
    (lambda q, k, v: (q, k.to("meta"), v.to("meta")), ValueError, "different devices"),
    (lambda q, k, v: (q, k, "v"), TypeError, "torch.Tensor"),
])
def test_bad_inputs_raise_clear_errors(mutate, error, match):
    with pytest.raises(error, match=match):
        check(*mutate(*tensors()))


def test_non_contiguous_inputs_are_refused():
    q, k, v = tensors()
    q_strided = torch.empty(2, 8, 4, 128, dtype=q.dtype)[..., :64]
    with pytest.raises(ValueError, match="contiguous"):
        check(q_strided, k, v)


def test_unsupported_head_dim_and_cpu_tensors():
    q, k, v = tensors(head_dim=96)
    with pytest.raises(ValueError, match="head_dim 96 unsupported"):
        check(q, k, v)
    with pytest.raises(ValueError, match="CUDA"):
        validate_attention_inputs(*tensors(), name="test")


def test_wrong_output_buffers_are_refused():
    q, k, v = tensors()
    with pytest.raises(ValueError, match="out must be"):
        check(q, k, v, out=torch.empty(2, 8, 4, 32, dtype=q.dtype))
    with pytest.raises(ValueError, match="lse must be"):
        check(q, k, v, lse=torch.empty(2, 4, 8, dtype=torch.bfloat16))


@pytest.mark.parametrize("name", rung_names())
def test_rungs_say_why_they_cannot_run(name):
    assert get(name).unsupported(P.with_(head_dim=96)).startswith(f"{name}: head_dim 96 unsupported")
    assert get(name).unsupported(native_problem(name, P)) is None  # in the rung's dtype (FP8: e4m3)


# ---- the rungs' run_kernel: every bad input raises before anything is launched -------------------
# Compiled for P (head_dim 64, bf16); each builder returns (q, k, v, out, lse) on `device`.

def _good(device, head_dim=64):
    q = torch.randn(1, 8, 2, head_dim, device=device).bfloat16()
    k = torch.randn(1, 8, 1, head_dim, device=device).bfloat16()
    return q, k, k.clone(), torch.empty_like(q), None


def _replace(device, **changes):
    q, k, v, out, lse = _good(device)
    return tuple(changes.get(n, t) for n, t in zip(("q", "k", "v", "out", "lse"), (q, k, v, out, lse)))


BAD_RUN_INPUTS = {
    # name: (exception types, builder, also checkable without a GPU)
    "fp32 q": (TypeError, lambda d: _replace(d, q=_good(d)[0].float()), True),
    "3-D q": (ValueError, lambda d: _replace(d, q=_good(d)[0][0]), True),
    "head_dim 128 vs compiled 64": (ValueError, lambda d: _good(d, head_dim=128), True),
    "non-contiguous last dim": (ValueError, lambda d: _replace(
        d, q=torch.randn(1, 8, 2, 128, device=d).bfloat16()[..., ::2]), True),
    "heads_q % heads_kv": (ValueError, lambda d: _replace(
        d, q=torch.randn(1, 8, 3, 64, device=d).bfloat16(), k=torch.randn(1, 8, 2, 64, device=d).bfloat16(),
        v=torch.randn(1, 8, 2, 64, device=d).bfloat16(),
        out=torch.empty(1, 8, 3, 64, device=d).bfloat16()), True),
    "out shape": (ValueError, lambda d: _replace(d, out=_good(d)[3][:, :4]), True),
    "strided q (contiguous BSHD contract)": (ValueError, lambda d: _replace(
        d, q=torch.randn(1, 8, 4, 64, device=d).bfloat16()[:, :, :2]), True),
    "lse fp16": ((TypeError, ValueError), lambda d: _replace(
        d, lse=torch.empty(1, 2, 8, device=d, dtype=torch.float16)), True),
    "lse shape": (ValueError, lambda d: _replace(d, lse=torch.empty(1, 8, 2, device=d)), True),
    "misaligned q": (ValueError, lambda d: _replace(
        d, q=torch.randn(8 * 2 * 64 + 1, device=d).bfloat16()[1:].view(1, 8, 2, 64)), True),
    "out not a tensor": (TypeError, lambda d: _replace(d, out=None), False),
    "cpu k": (ValueError, lambda d: _replace(d, k=_good(d)[1].cpu()), False),
    "fp16 inputs": (TypeError, lambda d: tuple(None if t is None else t.half() for t in _good(d)), True),
}


@pytest.mark.parametrize("case", [n for n, (_, _, cpu) in BAD_RUN_INPUTS.items() if cpu])
def test_rung_input_checks_refuse_bad_tensors(case):
    """What run_kernel checks before a launch (kernels.cute.launch.run_fmha calls
    check_fmha_call), on CPU tensors; the good inputs pass."""
    from kernels.cute.launch import check_fmha_call

    error, build, _ = BAD_RUN_INPUTS[case]
    with pytest.raises(error):
        check_fmha_call("rung", 64, torch.bfloat16, *build("cpu"), require_cuda=False)
    check_fmha_call("rung", 64, torch.bfloat16, *_good("cpu"), require_cuda=False)


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(BAD_RUN_INPUTS))
@pytest.mark.parametrize("name", [n for n in rung_names() if "bf16" in rung_module(n).DTYPES])
def test_rungs_refuse_bad_tensors_before_launch(name, case):
    module = rung_module(name)
    compiled = module.compile_kernel(P)
    error, build, _ = BAD_RUN_INPUTS[case]
    with pytest.raises(error):
        module.run_kernel(compiled, *build("cuda"))


# ---- the FP8 rungs' run_kernel: Fp8Tensor q, k, v (e4m3 data, a descale), bf16 out ---------------
def _good8(device, head_dim=64):
    q, k, v, out, lse = _good(device, head_dim)
    return quantize_e4m3(q), quantize_e4m3(k), quantize_e4m3(v), out, lse


def _replace8(device, **changes):
    return tuple(changes.get(n, t) for n, t in zip(("q", "k", "v", "out", "lse"), _good8(device)))


def _e4m3_bytes(device, *shape):
    return torch.zeros(*shape, device=device, dtype=torch.uint8).view(torch.float8_e4m3fn)


FP8_BAD_RUN_INPUTS = {
    "bf16 q, not an Fp8Tensor": (TypeError, lambda d: _replace8(d, q=_good(d)[0])),
    "3-D q": (ValueError, lambda d: _replace8(d, q=Fp8Tensor(_good8(d)[0].data[0], 1.0))),
    "head_dim 128 vs compiled 64": (ValueError, lambda d: _good8(d, head_dim=128)),
    "heads_q % heads_kv": (ValueError, lambda d: _replace8(
        d, q=Fp8Tensor(_e4m3_bytes(d, 1, 8, 3, 64), 1.0), k=Fp8Tensor(_e4m3_bytes(d, 1, 8, 2, 64), 1.0),
        v=Fp8Tensor(_e4m3_bytes(d, 1, 8, 2, 64), 1.0), out=torch.empty(1, 8, 3, 64, device=d).bfloat16())),
    "out in e4m3, not bf16": (ValueError, lambda d: _replace8(d, out=_e4m3_bytes(d, 1, 8, 2, 64))),
    "strided q (contiguous BSHD contract)": (ValueError, lambda d: _replace8(
        d, q=Fp8Tensor(_e4m3_bytes(d, 1, 8, 4, 64)[:, :, :2], 1.0))),
    "misaligned q": (ValueError, lambda d: _replace8(
        d, q=Fp8Tensor(_e4m3_bytes(d, 8 * 2 * 64 + 1)[1:].view(1, 8, 2, 64), 1.0))),
    "lse shape": (ValueError, lambda d: _replace8(d, lse=torch.empty(1, 8, 2, device=d))),
    "out not a tensor": (TypeError, lambda d: _replace8(d, out=None)),
}


@pytest.mark.parametrize("case", list(FP8_BAD_RUN_INPUTS))
def test_fp8_input_checks_refuse_bad_tensors(case):
    """What an FP8 rung's run_kernel checks before a launch (kernels.cute.fp8.check_run_inputs)."""
    from kernels.cute.fp8 import check_run_inputs

    error, build = FP8_BAD_RUN_INPUTS[case]
    with pytest.raises(error):
        check_run_inputs("k12", 64, *build("cpu"), require_cuda=False)
    check_run_inputs("k12", 64, *_good8("cpu"), require_cuda=False)  # the good inputs pass


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(FP8_BAD_RUN_INPUTS) + ["cpu k"])
@pytest.mark.parametrize("name", [n for n in rung_names() if "e4m3" in rung_module(n).DTYPES])
def test_fp8_rungs_refuse_bad_tensors_before_launch(name, case):
    module = rung_module(name)
    compiled = module.compile_kernel(P.with_(dtype="e4m3"))
    error, build = FP8_BAD_RUN_INPUTS.get(case) or (
        ValueError, lambda d: _replace8(d, k=Fp8Tensor(_good8(d)[1].data.cpu(), 1.0)))
    with pytest.raises(error):
        module.run_kernel(compiled, *build("cuda"))
