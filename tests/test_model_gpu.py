"""GPU tests of the model on the production kernels: the benchmark-shape Llama (8 layers,
hidden 2048, 32 / 8 heads, head_dim 128, seeded random weights) in bf16 on our CUDA kernels
(attention strictly on the `cuda` backend: paged prefill and paged decode; rotary kernel),
against transformers' eager model.

Tolerances, stated once:
- logits: relative Frobenius error against the fp32 eager model, for every prompt's prefill
  (all positions) and every decode step (the fp32 model run on the same tokens), at most
  TOL or, where transformers' own bf16 model is further off than that (the bf16 error grows
  along a sequence), at most BF16_MARGIN times its error. Ours differs from transformers' bf16
  eager model only in attention and rotary (fp32 accumulation and one rounding, where eager
  rounds scores and angles to bf16), so it should be as close as transformers' own bf16 model
  is; a broken kernel is off by O(1).
- greedy tokens: each one the argmax of the logits the generator returns for its step (the
  token fed back is the one those logits pick). Where ours and transformers' bf16 greedy
  tokens part, the test says so and does not fail: the model's random weights give nearly
  flat logits, and which of two tokens a few hundredths apart wins depends on the GPU's
  rounding, not on our kernels (the logits' check above is what holds the kernels).
"""

from __future__ import annotations

import copy

import pytest
import torch
from support import random_prompts  # tests/support.py

from kernels.extension import loader
from kernels.extension.backend.attention import use_backend
from kernels.harness import rel_err
from kernels.model import PagedGenerator, convert_linears_to_fp8, llama_config, random_llama

pytestmark = pytest.mark.gpu

TOL = 5e-2
BF16_MARGIN = 1.25
# FP8 (E4M3, per-tensor dynamic scaling of both operands) in every linear of the decoder layers:
# several times the bf16 error; a broken path is off by O(1).
FP8_TOL = 0.35
PAGE = 64
# 8 prompts around page boundaries, from one token to eight pages.
LENGTHS = (1, 17, 63, 64, 65, 200, 333, 512)
DECODE_STEPS = 32


@pytest.fixture(scope="module")
def models():
    for module in ("attention", "rotary"):
        assert loader.available(module), f"the {module} module is not built: python -m tools.build_ext"
    hf32 = random_llama(llama_config(), seed=0, device="cuda")
    hf16 = copy.deepcopy(hf32).to(torch.bfloat16)
    return hf32, hf16


def limit(bf16_err: float) -> float:
    """The logits' error bound, given transformers' bf16 error at the same place."""
    return max(TOL, BF16_MARGIN * bf16_err)


@torch.inference_mode()
def logits_of(hf, tokens) -> torch.Tensor:
    return hf(torch.tensor([tokens], device="cuda")).logits[0].float()


def test_prefill_and_greedy_decode_match_transformers(models):
    hf32, hf16 = models
    prompts = random_prompts(LENGTHS, hf32.config.vocab_size, seed=0)
    gen = PagedGenerator(hf16, max_batch=8, max_seqlen=1024, page_size=PAGE)
    with use_backend("cuda"):
        prefill = gen.prefill(prompts, all_logits=True).float()
        tokens, logits = gen.generate(prompts, DECODE_STEPS + 1, return_logits=True)
    failures, report = [], []
    start = 0
    for b, prompt in enumerate(prompts):
        n = len(prompt)
        ref = logits_of(hf32, prompt)
        err, err16 = rel_err(prefill[start:start + n], ref), rel_err(logits_of(hf16, prompt), ref)
        start += n
        if not err <= limit(err16):
            failures.append(f"prompt {b} (len {n}): prefill rel_err {err:.4f} > {limit(err16):.4f} "
                            f"(transformers bf16: {err16:.4f})")
        # Every decode step against the fp32 model run on the same tokens.
        sequence = prompt + tokens[b].tolist()
        ref_steps = logits_of(hf32, sequence)[n - 1:n + DECODE_STEPS]
        ref16_steps = logits_of(hf16, sequence)[n - 1:n + DECODE_STEPS]
        errs = [rel_err(logits[b, t], ref_steps[t]) for t in range(DECODE_STEPS + 1)]
        errs16 = [rel_err(ref16_steps[t], ref_steps[t]) for t in range(DECODE_STEPS + 1)]
        worst = max(range(len(errs)), key=lambda t: errs[t] / limit(errs16[t]))
        bound = limit(errs16[worst])
        if not errs[worst] <= bound:
            failures.append(f"prompt {b}: step {worst} rel_err {errs[worst]:.4f} > {bound:.4f} "
                            f"(transformers bf16: {errs16[worst]:.4f})")
        # Greedy: each token is its step's argmax (ties in our logits allowed either way).
        step_logits = logits[b].float()
        picked = step_logits.gather(1, tokens[b, :, None].to(step_logits.device))[:, 0]
        off = (picked < step_logits.max(dim=1).values).nonzero().flatten().tolist()
        if off:
            failures.append(f"prompt {b}: the token of step {off[0]} is not the argmax of its logits")
        # Beside transformers' bf16 greedy generate: reported, not asserted (see the docstring).
        with torch.inference_mode():
            theirs = hf16.generate(torch.tensor([prompt], device="cuda"), max_new_tokens=DECODE_STEPS + 1,
                                   do_sample=False)[0, n:].tolist()
        ours = tokens[b].tolist()
        if ours != theirs:
            t = next(i for i, (a, c) in enumerate(zip(ours, theirs)) if a != c)
            gap = abs(ref_steps[t, ours[t]] - ref_steps[t, theirs[t]]).item()  # same prefix up to t
            report.append(f"prompt {b}: first divergence from transformers' bf16 tokens at token {t}: "
                          f"fp32 logits {gap:.4f} apart")
    print("\n".join(report) or "greedy tokens identical for every prompt")
    assert not failures, "\n".join(failures)


def test_graph_replay_equals_eager_decode(models):
    """The captured steps compute exactly what the eager steps do (5 rows in bucket 8)."""
    _, hf16 = models
    prompts = random_prompts((5, 64, 100, 1, 30), hf16.config.vocab_size, seed=1)
    runs = []
    for graphs in (True, False):
        gen = PagedGenerator(hf16, max_batch=8, max_seqlen=256, page_size=PAGE, cuda_graphs=graphs)
        with use_backend("cuda"):
            runs.append(gen.generate(prompts, 12, return_logits=True))
    assert torch.equal(runs[0][0], runs[1][0])
    assert torch.equal(runs[0][1], runs[1][1])


def test_rows_of_a_bucket_do_not_disturb_each_other(models):
    """3 sequences in bucket 4 (one empty row) against each sequence alone in bucket 1."""
    hf32, hf16 = models
    prompts = random_prompts((40, 7, 129), hf16.config.vocab_size, seed=2)
    gen = PagedGenerator(hf16, max_batch=4, max_seqlen=256, page_size=PAGE)
    with use_backend("cuda"):
        tokens, logits = gen.generate(prompts, 8, return_logits=True)
        for b, prompt in enumerate(prompts):
            alone_tokens, alone = gen.generate([prompt], 8, return_logits=True)
            # Step t's logits are comparable while the tokens before it agree (a near-tie may flip one).
            same = (tokens[b] == alone_tokens[0]).tolist()
            steps = same.index(False) + 1 if False in same else 8
            assert rel_err(logits[b, :steps], alone[0, :steps]) <= TOL


def test_fp8_linears_under_fp8_autocast(models):
    from kernels.extension.backend.fp8 import DynamicScaling, fp8_autocast

    hf32, hf16 = models
    fp8_model = copy.deepcopy(hf16)
    convert_linears_to_fp8(fp8_model)
    prompts = random_prompts((1, 33, 64, 200), hf16.config.vocab_size, seed=3)
    gen = PagedGenerator(fp8_model, max_batch=4, max_seqlen=512, page_size=PAGE)
    with use_backend("cuda"):
        with fp8_autocast(recipe=DynamicScaling()):
            tokens, logits = gen.generate(prompts, 8, return_logits=True)
        bf16_tokens, bf16_logits = gen.generate(prompts, 8, return_logits=True)  # graphs of its own
        fresh = PagedGenerator(hf16, max_batch=4, max_seqlen=512, page_size=PAGE)
        fresh_tokens, fresh_logits = fresh.generate(prompts, 8, return_logits=True)
    assert torch.equal(bf16_tokens, fresh_tokens) and torch.equal(bf16_logits, fresh_logits)
    for b, prompt in enumerate(prompts):
        n = len(prompt)
        ref = logits_of(hf32, prompt + tokens[b].tolist())[n - 1:n + 7]
        # The bf16 run picks its own tokens: its reference is the fp32 model on those.
        bf16_err = rel_err(bf16_logits[b], logits_of(hf32, prompt + bf16_tokens[b].tolist())[n - 1:n + 7])
        err = rel_err(logits[b], ref)
        assert err <= FP8_TOL, f"prompt {b}: FP8 rel_err {err:.3f} (bf16: {bf16_err:.3f})"
        assert err > 2 * bf16_err, f"prompt {b}: FP8 rel_err {err:.3f}, bf16 {bf16_err:.3f}: did FP8 run?"


def test_fp8_kv_cache_decodes_within_its_rounding(models):
    """An e4m3 cache with per-(layer, kv head) factors calibrated from a bf16 prefill: every step's
    logits against the fp32 model on the same tokens, within FP8_TOL, decode steps replayed from
    graphs; and not the bf16 cache's logits (the cache held e4m3 values)."""
    hf32, hf16 = models
    prompts = random_prompts((1, 65, 200), hf16.config.vocab_size, seed=4)
    with use_backend("cuda"):
        gen = PagedGenerator(hf16, max_batch=4, max_seqlen=512, page_size=PAGE)
        bf16_tokens, bf16_logits = gen.generate(prompts, 8, return_logits=True)
        gen8 = PagedGenerator(hf16, max_batch=4, max_seqlen=512, page_size=PAGE, kv_dtype=torch.float8_e4m3fn)
        gen8.cache.calibrate(gen.cache)
        tokens, logits = gen8.generate(prompts, 8, return_logits=True)
    for b, prompt in enumerate(prompts):
        n = len(prompt)
        err = rel_err(logits[b], logits_of(hf32, prompt + tokens[b].tolist())[n - 1:n + 7])
        bf16_err = rel_err(bf16_logits[b], logits_of(hf32, prompt + bf16_tokens[b].tolist())[n - 1:n + 7])
        assert err <= FP8_TOL, f"prompt {b}: e4m3 cache rel_err {err:.3f} (bf16: {bf16_err:.3f})"
    assert gen8.cache.k.dtype == torch.float8_e4m3fn and not torch.equal(logits, bf16_logits)
