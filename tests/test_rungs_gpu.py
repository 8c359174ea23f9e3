"""Every rung against the fp32 reference on the GPU: odd sizes, causal with Sq != Sk, GQA,
batch > 1, large logits, and bit-identical repeated runs (a moving result is a race). FP8
rungs (e4m3) against the reference on their dequantized inputs, against a torch model of their
own arithmetic, and beside the bf16 top rung on the bf16 source."""

import dataclasses

import pytest
import torch

from kernels.cute import schedulers
from kernels.harness import (
    BF16_TOLERANCE,
    AttentionProblem,
    attention_sweep,
    empty_output,
    fp8_attention_model,
    make_inputs,
    poison,
    reference_attention,
    rel_err,
    verify_attention,
)
from kernels.registry import rung_module, rung_names
from tools.inspect import native_problem

pytestmark = pytest.mark.gpu

# Odd and tile-edge sizes, causal with Sq != Sk, GQA with batch > 1, large logits, an explicit
# scale, fp16, e4m3 (the bf16 cases again, and outliers) (kernels/harness/sweep.py); each rung
# skips the head dims and dtypes it does not offer.
CASES = attention_sweep(head_dims=(64, 128, 256), dtypes=("bf16", "fp16", "e4m3"))
FP8_RUNGS = [n for n in rung_names() if "e4m3" in rung_module(n).DTYPES]
BF16_TOP_RUNG = [n for n in rung_names() if "bf16" in rung_module(n).DTYPES][-1]


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
    result = verify_attention(run, case.problem, seed=case.seed, magnitude=case.magnitude, with_lse=with_lse,
                              outliers=case.outliers)
    assert result, f"{name} {case.id}: {result.reason}"
    if with_lse:  # the variant without LSE is a compile of its own
        result = verify_attention(run, case.problem, seed=case.seed, magnitude=case.magnitude,
                                  with_lse=False, repeat=False, outliers=case.outliers)
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
            # an FP8 rung's key tiles are multiples of 32 (the k32 of P V), and longer ones fit
            long_tile = 160 if name in FP8_RUNGS else 144
            plans += [TilePlan(head_dim=128, consumer_warpgroups=2, block_n=long_tile),
                      TilePlan(head_dim=64, consumer_warpgroups=2, block_n=128)]
            if name in FP8_RUNGS:  # FlashAttention-3's FP8 shapes at D = 64 and 128
                plans += [TilePlan(head_dim=64, consumer_warpgroups=3, block_n=160),
                          TilePlan(head_dim=128, consumer_warpgroups=2, block_n=224)]
        variants += [(name, dataclasses.replace(plan, producer_warps=producer_warps)) for plan in plans]
    return variants


@pytest.mark.parametrize("name,plan", tile_plan_variants(), ids=lambda v: str(getattr(v, "block_n", v)))
@pytest.mark.parametrize("causal", (False, True))
def test_rung_tile_plans(name, plan, causal):
    """A tile plan other than the default gives the same answer (Sq != Sk, tails, GQA)."""
    module = rung_module(name)
    shape = AttentionProblem(batch=2, seqlen_q=333, seqlen_k=1111, heads_q=4, heads_kv=2,
                             head_dim=plan.head_dim, causal=causal)
    problem = native_problem(name, shape)
    result = verify_attention(runner(module, module.compile_kernel(problem, plan=plan)), problem, seed=11)
    assert result, f"{name} {plan} {problem.label()}: {result.reason}"


@pytest.mark.parametrize("name", [n for n in rung_names() if "pingpong" in rung_module(n).KNOBS])
def test_rung_without_pingpong(name):
    """The ablation switch of the ping-pong rungs: off, the answer is the same."""
    module = rung_module(name)
    shape = AttentionProblem(batch=1, seqlen_q=1000, seqlen_k=2000, heads_q=4, heads_kv=4, causal=True)
    problem = native_problem(name, shape)
    result = verify_attention(runner(module, module.compile_kernel(problem, pingpong=False)), problem, seed=5)
    assert result, f"{name} {problem.label()}: {result.reason}"


def _long_keys_problem(name, head_dim, causal):
    shape = AttentionProblem(batch=2, seqlen_q=333, seqlen_k=rung_module(name).LONG_KEYS + 37, heads_q=4,
                             heads_kv=2, head_dim=head_dim, causal=causal)
    return native_problem(name, shape)


# the rungs and variants that launch differently from LONG_KEYS keys on (K13 under the mask
# keeps its dynamic walk at every length: tests/test_launch.py)
LONG_KEY_LAUNCHES = [(n, d, c) for n in rung_names() if hasattr(rung_module(n), "launch_shape_knobs")
                     for d in (64, 128, 256) for c in (False, True)
                     if rung_module(n).launch_shape_knobs(_long_keys_problem(n, d, c))]


@pytest.mark.parametrize("name,head_dim,causal", LONG_KEY_LAUNCHES, ids=lambda v: str(v))
def test_rung_launch_shape_for_long_keys(name, head_dim, causal):
    """From LONG_KEYS keys the rung launches one CTA per query tile (L2 sections under the
    mask) instead of its persistent walk: the same answer (tails, GQA, Sq != Sk, batch 2),
    with LSE, bit-identical on a repeat."""
    module = rung_module(name)
    problem = _long_keys_problem(name, head_dim, causal)
    assert module.launch_shape_knobs(problem)["ctas"] == module.ONE_TILE_PER_CTA
    result = verify_attention(runner(module, module.compile_kernel(problem)), problem, seed=13, with_lse=True)
    assert result, f"{name} {problem.label()}: {result.reason}"


@pytest.mark.parametrize("head_dim,causal,ctas", [(64, True, 3), (128, False, 4), (128, True, 7),
                                                  (256, False, 5)])
def test_k13_tile_counter_is_zero_after_every_launch(head_dim, causal, ctas):
    """K13's tiles come from a global counter that the last CTA resets. With a few CTAs (many
    tiles each: tails, GQA, Sq != Sk, batch 3) the answer holds on a repeat, and after every
    launch the counter of the stream is back to zero, on the default stream and on another
    (each has its own)."""
    module = rung_module("k13")
    problem = AttentionProblem(batch=3, seqlen_q=777, seqlen_k=1301, heads_q=6, heads_kv=2, head_dim=head_dim,
                               causal=causal)
    compiled = module.compile_kernel(problem, ctas=ctas)

    def run_and_check_counter(q, k, v, out, lse):
        module.run_kernel(compiled, q, k, v, out, lse)
        assert schedulers.tile_counter(q.device).tolist() == [0, 0]

    result = verify_attention(run_and_check_counter, problem, seed=5, with_lse=True)
    assert result, f"k13 ctas={ctas} {problem.label()}: {result.reason}"
    default_counter = schedulers.tile_counter("cuda")
    with torch.cuda.stream(torch.cuda.Stream()):
        assert schedulers.tile_counter("cuda").data_ptr() != default_counter.data_ptr()
        result = verify_attention(run_and_check_counter, problem, seed=6, with_lse=False)
    assert result, f"k13 ctas={ctas} on a side stream: {result.reason}"


# (causal, Sq, Sk): tails and Sq != Sk; under the mask with Sq > Sk the first rows see no key.
PV_WAIT_SHAPES = ((False, 333, 1111), (True, 333, 1111), (True, 1111, 333))


@pytest.mark.parametrize("name", [n for n in rung_names()
                                  if "pv_wait_after_row_scale" in rung_module(n).KNOBS])
@pytest.mark.parametrize("knob", [True, False], ids=["held", "free"])
@pytest.mark.parametrize("head_dim", (64, 128, 256))
@pytest.mark.parametrize("causal,seqlen_q,seqlen_k", PV_WAIT_SHAPES, ids=lambda v: str(v))
def test_rung_with_pv_wait_held(name, knob, head_dim, causal, seqlen_q, seqlen_k):
    """The knob that holds the wait for the warpgroup's own P V behind the row factors (an
    mbarrier arrive that must never run, kernels.cute.fmha.hold_pv_wait_behind), on and off:
    the same answer (tails, GQA, Sq != Sk, rows without keys), with LSE, and bit-identical on a
    repeat; a stray arrive on K's ring would show as a wrong or moving result, or a hang."""
    module = rung_module(name)
    shape = AttentionProblem(batch=2, seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads_q=4, heads_kv=2,
                             head_dim=head_dim, causal=causal)
    problem = native_problem(name, shape)
    compiled = module.compile_kernel(problem, pv_wait_after_row_scale=knob)
    result = verify_attention(runner(module, compiled), problem, seed=7, with_lse=True)
    assert result, f"{name} {knob} {problem.label()}: {result.reason}"


@pytest.mark.parametrize("name", [n for n in rung_names() if "exp2_fma_every" in rung_module(n).KNOBS])
@pytest.mark.parametrize("head_dim", (64, 128, 256))
@pytest.mark.parametrize("causal", (False, True))
def test_rung_with_exp2_on_fma(name, head_dim, causal):
    """The lab knob that computes one exponential in two on the FMA pipes (the polynomial of
    kernels.cute.softmax.exp2_fma): the same answer within the rung's tolerance, masked keys
    (-inf scores) and rows that see no key included."""
    module = rung_module(name)
    shape = AttentionProblem(batch=2, seqlen_q=333, seqlen_k=1111, heads_q=4, heads_kv=2, head_dim=head_dim,
                             causal=causal)
    problem = native_problem(name, shape)
    compiled = module.compile_kernel(problem, exp2_fma_every=2)
    result = verify_attention(runner(module, compiled), problem, seed=11, with_lse=True)
    assert result, f"{name} {problem.label()}: {result.reason}"


@pytest.mark.parametrize("name", [n for n in rung_names() if "rescale_threshold" in rung_module(n).KNOBS])
@pytest.mark.parametrize("head_dim", (64, 128, 256))
@pytest.mark.parametrize("causal,seqlen_q,seqlen_k", PV_WAIT_SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("magnitude", (1.0, 20.0))
def test_rung_with_lazy_rescale(name, head_dim, causal, seqlen_q, seqlen_k, magnitude):
    """The lab knob that moves a row's running max only past a threshold and skips O's rescale
    while no row of the warp moved (OnlineSoftmax.rescale_threshold): the same answer and LSE,
    tails, GQA and rows without keys included; large logits (magnitude 20) make maxima jump
    past the threshold mid-row, so both sides of the warp vote run."""
    module = rung_module(name)
    shape = AttentionProblem(batch=2, seqlen_q=seqlen_q, seqlen_k=seqlen_k, heads_q=4, heads_kv=2,
                             head_dim=head_dim, causal=causal)
    problem = native_problem(name, shape)
    compiled = module.compile_kernel(problem, rescale_threshold=8.0)
    result = verify_attention(runner(module, compiled), problem, seed=13, magnitude=magnitude, with_lse=True)
    assert result, f"{name} {problem.label()} magnitude {magnitude}: {result.reason}"


def run_once(module, problem, q, k, v):
    out = empty_output(problem)
    poison(out)
    module.run_kernel(module.compile_kernel(problem), q, k, v, out)
    torch.cuda.synchronize()
    return out.float()


FP8_ACCURACY = [AttentionProblem(2, 1000, 1000, 4, 2, d, causal=c, dtype="e4m3")
                for d in (64, 128, 256) for c in (False, True)] + [
               AttentionProblem(1, 4096, 4096, 8, 8, 128, dtype="e4m3")]


@pytest.mark.parametrize("name", FP8_RUNGS)
@pytest.mark.parametrize("problem", FP8_ACCURACY, ids=lambda p: p.label().replace(" ", "-"))
@pytest.mark.parametrize("outliers", (False, True), ids=("normal", "outliers"))
def test_fp8_rung_matches_its_arithmetic_and_stands_beside_the_bf16_rung(name, problem, outliers):
    """The FP8 rung computes what its arithmetic says (``fp8_attention_model``: e4m3 P with the
    offset, fp32 accumulation; only the order of sums and exp2's approximation differ), and on
    the bf16 source its error against fp64 is the format's, not more: within the model's, and
    above the bf16 top rung's on the same source (the comparison runs on the same data)."""
    module = rung_module(name)
    q, k, v = make_inputs(problem, seed=17, outliers=outliers)
    source = make_inputs(problem.with_(dtype="bf16"), seed=17, outliers=outliers)
    out = run_once(module, problem, q, k, v)
    block_n = module.TILE_CONFIGS[problem.head_dim].block_n
    model = fp8_attention_model(q, k, v, causal=problem.causal, scale=problem.softmax_scale, block_n=block_n,
                                **module.MODEL_ARITHMETIC)
    same_inputs, _ = reference_attention(q, k, v, causal=problem.causal, scale=problem.softmax_scale)
    # Closer to its model than the model is to attention: what remains is the order of sums, the
    # tensor cores' k32 accumulation and exp2's approximation flipping an e4m3 rounding here and there.
    deviation, rounding = rel_err(out, model), rel_err(model, same_inputs)
    assert deviation < max(1e-2, 0.5 * rounding), (deviation, rounding)
    exact, _ = reference_attention(*source, causal=problem.causal, scale=problem.softmax_scale,
                                   dtype=torch.float64)
    fp8_error, model_error = rel_err(out, exact), rel_err(model, exact)
    assert fp8_error <= 1.1 * model_error + 2e-3, (fp8_error, model_error)
    bf16_error = rel_err(run_once(rung_module(BF16_TOP_RUNG), problem.with_(dtype="bf16"), *source), exact)
    assert bf16_error < BF16_TOLERANCE < fp8_error, (BF16_TOP_RUNG, bf16_error, name, fp8_error)
