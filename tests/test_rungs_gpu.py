"""Every rung against the fp32 reference on the GPU: odd sizes, causal with Sq != Sk, GQA,
batch > 1, large logits, and bit-identical repeated runs (a moving result is a race)."""

import dataclasses

import pytest

from kernels.harness import AttentionProblem, attention_sweep, verify_attention
from kernels.registry import rung_module, rung_names

pytestmark = pytest.mark.gpu

# Odd and tile-edge sizes, causal with Sq != Sk, GQA with batch > 1, large logits, an explicit
# scale, fp16 (kernels/harness/sweep.py); each rung skips the head dims it does not offer.
CASES = attention_sweep(head_dims=(64, 128, 256), dtypes=("bf16", "fp16"))


def runner(module, compiled):
    """``run(q, k, v, out, lse)`` as verify_attention calls it."""
    return lambda q, k, v, out, lse: module.run_kernel(compiled, q, k, v, out, lse)


@pytest.mark.parametrize("name", rung_names())
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rung_matches_reference(name, case):
    """Guarded inputs and outputs, NaN-poisoned outputs, rows without keys (zeros, LSE -inf),
    no write outside any tensor, and a bit-identical repeat (a moving result is a race)."""
    module = rung_module(name)
    reason = module.can_implement(case.problem)
    if reason:
        pytest.skip(reason)
    run = runner(module, module.compile_kernel(case.problem))
    with_lse = getattr(module, "SUPPORTS_LSE", False)
    result = verify_attention(run, case.problem, seed=case.seed, magnitude=case.magnitude, with_lse=with_lse)
    assert result, f"{name} {case.id}: {result.reason}"
    if with_lse:  # the variant without LSE is a compile of its own
        result = verify_attention(run, case.problem, seed=case.seed, magnitude=case.magnitude,
                                  with_lse=False, repeat=False)
        assert result, f"{name} {case.id} without lse: {result.reason}"


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
    result = verify_attention(runner(module, module.compile_kernel(problem, plan=plan)), problem, seed=11)
    assert result, f"{name} {plan} {problem.label()}: {result.reason}"


@pytest.mark.parametrize("name", [n for n in rung_names() if "pingpong" in rung_module(n).KNOBS])
def test_rung_without_pingpong(name):
    """The ablation switch of the ping-pong rungs: off, the answer is the same."""
    module = rung_module(name)
    problem = AttentionProblem(batch=1, seqlen_q=1000, seqlen_k=2000, heads_q=4, heads_kv=4, causal=True)
    result = verify_attention(runner(module, module.compile_kernel(problem, pingpong=False)), problem, seed=5)
    assert result, f"{name} {problem.label()}: {result.reason}"
