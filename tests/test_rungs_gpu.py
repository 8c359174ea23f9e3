"""Every rung against the fp32 reference on the GPU: odd sizes, causal with Sq != Sk, GQA,
batch > 1, large logits, and bit-identical repeated runs (a moving result is a race)."""

import dataclasses
import itertools
import zlib

import pytest
import torch

from kernels.harness import (AttentionProblem, check_output, empty_lse, empty_output, make_inputs,
                             poison, reference_attention)
from kernels.registry import rung_module, rung_names

pytestmark = pytest.mark.gpu

SEQLENS = (1, 63, 64, 65, 1000, 4096)
SEQLENS_D256 = (1, 65, 1000, 4096)
CASES = (
    # every (seqlen_q, seqlen_k) pair, causal and not, head dims 64 and 128, 2 heads
    [dict(seqlen_q=sq, seqlen_k=sk, causal=c, head_dim=d, heads_q=2, heads_kv=2)
     for sq, sk in itertools.product(SEQLENS, SEQLENS) for c in (False, True) for d in (64, 128)]
    # head_dim 256 (other tile shapes: 80-key tiles from K5 on) on a coarser grid
    + [dict(seqlen_q=sq, seqlen_k=sk, causal=c, head_dim=256, heads_q=2, heads_kv=2)
       for sq, sk in itertools.product(SEQLENS_D256, SEQLENS_D256) for c in (False, True)]
    # GQA 4:1 and batch 3, with the causal diagonal off the square
    + [dict(batch=3, seqlen_q=sq, seqlen_k=sk, heads_q=8, heads_kv=2, causal=c, head_dim=d)
       for sq, sk in ((65, 1000), (1000, 65), (257, 257)) for c in (False, True) for d in (64, 128, 256)]
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


def tile_plan_variants():
    """Non-default tile plans of the Hopper rungs (their ablation knob), with each rung's
    producer (a warp in K4, a warpgroup from K5 on)."""
    from kernels.cute.fmha import TilePlan

    variants = []
    for name in rung_names():
        module = rung_module(name)
        if "plan" not in module.KNOBS:
            continue
        producer_warps = module.TILE_CONFIGS[128].producer_warps
        plans = [TilePlan(head_dim=128, consumer_warpgroups=2, block_n=64, num_stages=3),
                 TilePlan(head_dim=256, consumer_warpgroups=1, block_n=64)]
        if producer_warps > 1:  # what the 240-register consumers afford
            plans += [TilePlan(head_dim=128, consumer_warpgroups=2, block_n=144),
                      TilePlan(head_dim=64, consumer_warpgroups=2, block_n=128)]
        variants += [(name, dataclasses.replace(plan, producer_warps=producer_warps)) for plan in plans]
    return variants


@pytest.mark.parametrize("name,plan", tile_plan_variants(), ids=lambda v: str(getattr(v, "block_n", v)))
@pytest.mark.parametrize("causal", (False, True))
def test_rung_tile_plans(name, plan, causal):
    """A tile plan other than the default gives the same answer (Sq != Sk, tails, GQA)."""
    module = rung_module(name)
    problem = AttentionProblem(batch=2, seqlen_q=333, seqlen_k=1111, heads_q=4, heads_kv=2,
                               head_dim=plan.head_dim, causal=causal)
    compiled = module.compile_kernel(problem, plan=plan)
    q, k, v = make_inputs(problem, seed=11)
    ref, ref_lse = reference_attention(q, k, v, causal=causal, scale=problem.softmax_scale)
    out, lse = run_once(module, compiled, q, k, v, problem, True)
    result = check_output(out.float(), ref, lse=lse, ref_lse=ref_lse)
    assert result, f"{name} {plan} {problem.label()}: {result.reason}"


@pytest.mark.parametrize("name", [n for n in rung_names() if "pingpong" in rung_module(n).KNOBS])
def test_rung_without_pingpong(name):
    """The ablation switch of the ping-pong rungs: off, the answer is the same."""
    module = rung_module(name)
    problem = AttentionProblem(batch=1, seqlen_q=1000, seqlen_k=2000, heads_q=4, heads_kv=4, causal=True)
    compiled = module.compile_kernel(problem, pingpong=False)
    q, k, v = make_inputs(problem, seed=5)
    ref, _ = reference_attention(q, k, v, causal=True, scale=problem.softmax_scale)
    out, _ = run_once(module, compiled, q, k, v, problem, False)
    assert check_output(out.float(), ref)


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
