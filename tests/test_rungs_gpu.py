"""Every rung against the fp32 reference on the GPU: odd sizes, causal with Sq != Sk, GQA,
batch > 1, large logits, and bit-identical repeated runs (a moving result is a race)."""

import itertools
import zlib

import pytest
import torch

from kernels.harness import (AttentionProblem, check_output, empty_lse, empty_output, make_inputs,
                             poison, reference_attention)
from kernels.registry import rung_module, rung_names

pytestmark = pytest.mark.gpu

SEQLENS = (1, 63, 64, 65, 1000, 4096)
CASES = (
    # every (seqlen_q, seqlen_k) pair, causal and not, both head dims, 2 heads
    [dict(seqlen_q=sq, seqlen_k=sk, causal=c, head_dim=d, heads_q=2, heads_kv=2)
     for sq, sk in itertools.product(SEQLENS, SEQLENS) for c in (False, True) for d in (64, 128)]
    # GQA 4:1 and batch 3, with the causal diagonal off the square
    + [dict(batch=3, seqlen_q=sq, seqlen_k=sk, heads_q=8, heads_kv=2, causal=c, head_dim=d)
       for sq, sk in ((65, 1000), (1000, 65), (257, 257)) for c in (False, True) for d in (64, 128)]
)


def case_id(c):
    return AttentionProblem(**c).label().replace(" ", "-")


def run_once(module, compiled, q, k, v, problem, with_lse):
    out = empty_output(problem)
    lse = empty_lse(problem) if with_lse else None
    poison(out, lse)
    if with_lse:
        module.run_kernel(compiled, q, k, v, out, lse=lse)
    else:
        module.run_kernel(compiled, q, k, v, out)
    torch.cuda.synchronize()
    return out, lse


@pytest.mark.parametrize("name", rung_names())
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_rung_matches_reference(name, case):
    module = rung_module(name)
    problem = AttentionProblem(**case)
    reason = module.can_implement(problem)
    if reason:
        pytest.skip(reason)
    compiled = module.compile_kernel(problem)
    magnitude = 20.0 if problem.seqlen_k == 1000 else 1.0   # large logits on one slice of the sweep
    q, k, v = make_inputs(problem, seed=zlib.crc32(case_id(case).encode()), magnitude=magnitude)
    ref, ref_lse = reference_attention(q, k, v, causal=problem.causal, scale=problem.softmax_scale)
    with_lse = getattr(module, "SUPPORTS_LSE", False)
    out, lse = run_once(module, compiled, q, k, v, problem, with_lse)
    result = check_output(out.float(), ref, lse=lse, ref_lse=ref_lse if with_lse else None)
    assert result, f"{name} {problem.label()}: {result.reason}"
    again, _ = run_once(module, compiled, q, k, v, problem, with_lse)
    assert torch.equal(out, again), f"{name} {problem.label()}: repeated run differs (race?)"


@pytest.mark.parametrize("name", rung_names())
def test_rung_honours_an_explicit_scale(name):
    module = rung_module(name)
    problem = AttentionProblem(batch=2, seqlen_q=100, seqlen_k=300, heads_q=4, heads_kv=4, head_dim=64,
                               causal=True, scale=0.05)
    compiled = module.compile_kernel(problem)
    q, k, v = make_inputs(problem, seed=7)
    ref, _ = reference_attention(q, k, v, causal=True, scale=0.05)
    out, _ = run_once(module, compiled, q, k, v, problem, False)
    assert check_output(out.float(), ref)


@pytest.mark.parametrize("name", rung_names())
def test_rung_refuses_gpu_tensors_of_the_wrong_kind(name):
    module = rung_module(name)
    problem = AttentionProblem(batch=1, seqlen_q=64, seqlen_k=64, heads_q=2, heads_kv=2, head_dim=64)
    compiled = module.compile_kernel(problem)
    q, k, v = make_inputs(problem)
    out = empty_output(problem)
    with pytest.raises((TypeError, ValueError)):
        module.run_kernel(compiled, q, k.cpu(), v, out)
    with pytest.raises((TypeError, ValueError)):
        module.run_kernel(compiled, q.half(), k.half(), v.half(), out)
