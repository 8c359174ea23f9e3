"""Bad input is a clear Python error before any kernel runs."""

import pytest
import torch

from kernels.harness import AttentionProblem, make_inputs, validate_attention_inputs
from kernels.registry import get, rung_module, rung_names

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
    assert get(name).unsupported(P) is None


@pytest.mark.parametrize("name", rung_names())
def test_rungs_refuse_bad_tensors_before_launch(name):
    module = rung_module(name)
    q, k, v = tensors()
    out = torch.empty_like(q)
    with pytest.raises((TypeError, ValueError)):
        module.run_kernel(None, q.float(), k, v, out)      # wrong dtype
    with pytest.raises((TypeError, ValueError)):
        module.run_kernel(None, q, k, v, out)              # CPU tensors
