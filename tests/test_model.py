"""CPU tests of the model on the production kernels (kernels/model/): the page allocator and
the cache's bookkeeping, and the whole wiring (ragged paged prefill, decode through page
boundaries, batch buckets with empty rows, rotary with positions) on the torch backend of
`attention()` against transformers' eager model, in fp32, on a tiny seeded Llama."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from support import random_prompts  # tests/support.py

from kernels.extension.backend.rotary import rotary_tables
from kernels.model import (
    OutOfPages,
    PageAllocator,
    PagedGenerator,
    PagedKVCache,
    PagedLlama,
    convert_linears_to_fp8,
    llama_config,
    random_llama,
)
from kernels.model.generate import buckets_up_to
from kernels.model.llama import TINY_SHAPE, rotary_tables_of

# fp32 on both sides, same weights, same modules: the logits differ by summation order only,
# a few fp32 ulps of logits of magnitude ~1.
ATOL = 1e-5
PAGE = 4
# Prompt lengths around the page size: one token, a page less one, exactly one page, a page
# plus one, several pages.
LENGTHS = (1, 3, 4, 5, 9, 17)


@pytest.fixture(scope="module")
def hf():
    return random_llama(llama_config(**TINY_SHAPE), seed=0)


def prompts_of(lengths, seed=1):
    """Random prompts in the tiny model's vocabulary."""
    return random_prompts(lengths, TINY_SHAPE["vocab_size"], seed)


def reference_generate(hf, prompt, new_tokens):
    """transformers' greedy generate: (new tokens [N], the logits each was picked from [N, V])."""
    out = hf.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False, output_logits=True,
                      return_dict_in_generate=True)
    return out.sequences[0, len(prompt):], torch.stack(out.logits, dim=1)[0]


# ---- page allocator and cache bookkeeping ------------------------------------------------------

def test_allocator_hands_out_pages_once_and_never_the_null_page():
    alloc = PageAllocator(5)
    assert alloc.allocate(2) == [1, 2] and alloc.num_free == 2
    assert alloc.allocate(2) == [3, 4]
    with pytest.raises(OutOfPages, match="1 needed, 0 free of 4"):
        alloc.allocate(1)
    alloc.free([2, 3])
    assert sorted(alloc.allocate(2)) == [2, 3]
    with pytest.raises(ValueError, match="page 2 is not an allocated page"):
        alloc.free([2, 2])  # twice in one call
    for bad in ([0], [5], [-1]):
        with pytest.raises(ValueError, match="not an allocated page"):
            alloc.free(bad)
    with pytest.raises(ValueError, match="num_pages must be >= 2"):
        PageAllocator(1)


def test_a_failed_free_leaves_the_pool_unchanged():
    alloc = PageAllocator(4)
    pages = alloc.allocate(3)
    with pytest.raises(ValueError):
        alloc.free([pages[0], 0])
    assert alloc.num_free == 0
    alloc.free(pages)
    assert alloc.num_free == 3


def make_cache(**kw):
    args = dict(num_layers=2, heads_kv=2, head_dim=8, max_batch=4, max_seqlen=10, page_size=PAGE,
                dtype=torch.float32, device="cpu")
    return PagedKVCache(**{**args, **kw})


def test_cache_grows_rows_page_by_page_and_commits_in_place():
    cache = make_cache()
    table, seqlens = cache.page_table, cache.seqlens
    assert cache.max_pages == 3 and cache.allocator.num_free == 4 * 3
    cache.grow(0, 5)   # two pages
    cache.grow(2, 1)   # one page
    cache.commit()
    assert cache.page_table is table and cache.seqlens is seqlens  # same tensors, new values
    assert seqlens.tolist() == [5, 0, 1, 0]
    assert table[0, :2].tolist() == cache.pages(0) and table[2, :1].tolist() == cache.pages(2)
    assert table[1].tolist() == [0, 0, 0] and table[0, 2] == 0
    assert len(set(cache.pages(0) + cache.pages(2))) == 3 and 0 not in cache.pages(0) + cache.pages(2)
    cache.advance(3)   # rows 0..2 each take one token; row 1 gets its first page
    cache.commit()
    assert seqlens.tolist() == [6, 1, 2, 0] and len(cache.pages(1)) == 1
    assert table[1, 0] == cache.pages(1)[0]


def test_cache_slots_address_page_and_offset():
    cache = make_cache()
    cache.grow(1, 9)
    cache.grow(3, 2)
    cache.commit()
    pages = cache.pages(1)
    assert cache.slots(1, 0, 9) == [pages[t // PAGE] * PAGE + t % PAGE for t in range(9)]
    last = cache.last_slots(4).tolist()
    assert last[1] == cache.slots(1, 8, 9)[0] and last[3] == cache.slots(3, 1, 2)[0]
    assert last[0] == last[2] == 0  # empty rows: slot 0 of the null page
    with pytest.raises(ValueError, match=r"tokens \[8, 10\) outside its 9"):
        cache.slots(1, 8, 10)


def test_cache_rows_and_steps_are_checked_before_anything_changes():
    """A negative row would wrap around to another sequence's row (release(-1) freed the last
    row's pages); a step past max_batch or out of pages would have grown the rows before it and
    then failed; a length of 6.5 would have been stored."""
    cache = make_cache(num_pages=6)  # 5 pages to hand out
    cache.grow(0, 5)
    cache.grow(3, 9)
    before = [(cache.length(r), cache.pages(r)) for r in range(4)]
    for call in (lambda: cache.release(-1), lambda: cache.length(-1), lambda: cache.pages(4),
                 lambda: cache.slots(-1, 0, 1), lambda: cache.grow(-1, 1)):
        with pytest.raises(IndexError, match="outside \\[0, 4\\)"):
            call()
    with pytest.raises(TypeError, match="length must be an integer"):
        cache.grow(0, 6.5)
    with pytest.raises(ValueError, match="batch must be an int in \\[0, max_batch = 4\\]"):
        cache.advance(5)
    with pytest.raises(OutOfPages, match="2 needed for this step, 0 free"):
        cache.advance(3)  # rows 1 and 2 need their first page: none left
    assert [(cache.length(r), cache.pages(r)) for r in range(4)] == before
    cache.grow(0, np.int64(6))  # NumPy integers are integers
    assert cache.length(0) == 6


def test_cache_write_lands_where_attention_reads():
    cache = make_cache()
    cache.grow(0, 6)
    cache.commit()
    k = torch.randn(6, 2, 8)
    v = torch.randn(6, 2, 8)
    cache.write(1, torch.tensor(cache.slots(0, 0, 6)), k, v)
    k_cache, v_cache = cache.layer(1)
    pages = cache.pages(0)
    gathered = torch.cat([k_cache[p] for p in pages])[:6]
    assert torch.equal(gathered, k) and torch.equal(torch.cat([v_cache[p] for p in pages])[:6], v)
    assert cache.k[0].abs().sum() == 0  # layer 0 untouched


def test_cache_release_returns_pages_and_empties_the_row():
    cache = make_cache()
    cache.grow(0, 10)
    cache.grow(1, 3)
    cache.commit()
    free = cache.allocator.num_free
    cache.release(0)
    cache.commit()
    assert cache.allocator.num_free == free + 3
    assert cache.seqlens.tolist() == [0, 3, 0, 0] and cache.page_table[0].tolist() == [0, 0, 0]
    cache.release_all()
    assert cache.allocator.num_free == 12


def test_cache_refuses_what_it_cannot_hold():
    cache = make_cache(num_pages=3)  # two usable pages
    with pytest.raises(ValueError, match="exceeds max_seqlen 10"):
        cache.grow(0, 11)
    with pytest.raises(OutOfPages, match="3 needed, 2 free"):
        cache.grow(0, 9)
    assert cache.pages(0) == [] and cache.length(0) == 0  # nothing taken by the failed grow
    cache.grow(0, 4)
    with pytest.raises(ValueError, match="cannot grow to 2"):
        cache.grow(0, 2)
    with pytest.raises(IndexError):
        cache.grow(4, 1)
    with pytest.raises(ValueError, match="page_size must be >= 1"):
        make_cache(page_size=0)


def test_buckets():
    assert buckets_up_to(1) == (1,)
    assert buckets_up_to(8) == (1, 2, 4, 8)
    assert buckets_up_to(48) == (1, 2, 4, 8, 16, 32, 48)


# ---- the model against transformers ----------------------------------------------------------------

def test_rotary_tables_are_the_models_and_ours(hf):
    cos, sin = rotary_tables_of(hf, 256)
    theta = hf.config.rope_parameters["rope_theta"]
    ours_cos, ours_sin = rotary_tables(256, TINY_SHAPE["head_dim"], base=theta)
    # transformers forms the angles in fp32 (position * inv_freq), ours in fp64: 256 * 2^-24 rad apart.
    assert cos.shape == (256, TINY_SHAPE["head_dim"] // 2) and cos.dtype == torch.float32
    torch.testing.assert_close(cos, ours_cos, atol=5e-5, rtol=0)
    torch.testing.assert_close(sin, ours_sin, atol=5e-5, rtol=0)


def test_prefill_logits_match_transformers(hf):
    prompts = prompts_of(LENGTHS)
    gen = PagedGenerator(hf, max_batch=8, max_seqlen=32, page_size=PAGE)
    logits = gen.prefill(prompts, all_logits=True)
    assert logits.shape == (sum(LENGTHS), TINY_SHAPE["vocab_size"])
    start = 0
    for prompt in prompts:
        with torch.inference_mode():
            ref = hf(torch.tensor([prompt])).logits[0]
        torch.testing.assert_close(logits[start:start + len(prompt)], ref, atol=ATOL, rtol=0)
        start += len(prompt)
    # Token ids as tensors, or one [B, L] tensor, are the same prompts.
    same = gen.prefill([torch.tensor(p) for p in prompts], all_logits=True)
    torch.testing.assert_close(same, logits, atol=0, rtol=0)
    square = prompts_of((6, 6, 6))
    torch.testing.assert_close(gen.prefill(torch.tensor(square)), gen.prefill(square), atol=0, rtol=0)
    last = gen.prefill(prompts)  # default: only each prompt's last token
    ends = torch.tensor(LENGTHS).cumsum(0) - 1
    torch.testing.assert_close(last, logits[ends], atol=ATOL, rtol=0)
    assert torch.equal(gen.tokens[:len(prompts)], last.argmax(-1))


@pytest.mark.parametrize("lengths", [LENGTHS, (7,), (2, 11, 6)], ids=["b6-bucket8", "b1", "b3-bucket4"])
def test_greedy_decode_matches_transformers(hf, lengths):
    """Tokens identical, and the logits of the prefill and of every decode step, through page
    boundaries, with rows past the batch empty inside its bucket."""
    new_tokens = 10
    prompts = prompts_of(lengths)
    gen = PagedGenerator(hf, max_batch=8, max_seqlen=32, page_size=PAGE)
    tokens, logits = gen.generate(prompts, new_tokens, return_logits=True)
    assert tokens.shape == (len(prompts), new_tokens)
    assert logits.shape == (*tokens.shape, TINY_SHAPE["vocab_size"])
    for b, prompt in enumerate(prompts):
        ref_tokens, ref_logits = reference_generate(hf, prompt, new_tokens)
        assert tokens[b].tolist() == ref_tokens.tolist(), f"prompt {b}"
        torch.testing.assert_close(logits[b], ref_logits, atol=ATOL, rtol=0)
    assert gen.cache.seqlens[:len(prompts)].tolist() == [n + new_tokens - 1 for n in lengths]


def test_a_generator_serves_batch_after_batch(hf):
    """A smaller batch after a larger one: the cache is emptied, freed pages are reused, and
    the results are those of a fresh generator."""
    gen = PagedGenerator(hf, max_batch=8, max_seqlen=32, page_size=PAGE, num_pages=1 + 8 * 4)
    gen.generate(prompts_of((17, 15, 12, 9, 3, 1), seed=5), 12)
    second = prompts_of((4, 10), seed=6)
    tokens, logits = gen.generate(second, 6, return_logits=True)
    fresh_tokens, fresh_logits = PagedGenerator(hf, max_batch=8, max_seqlen=32, page_size=PAGE).generate(
        second, 6, return_logits=True)
    assert torch.equal(tokens, fresh_tokens)
    torch.testing.assert_close(logits, fresh_logits, atol=ATOL, rtol=0)
    assert gen.cache.allocator.num_free == 8 * 4 - 3 - 4  # 15 and 10 tokens hold 4 + 3 pages


def test_an_fp8_cache_serves_the_same_logits_within_its_rounding(hf):
    """kv_dtype=float8_e4m3fn: K/V stored in e4m3 (factor 2^-5 per layer and head); the prefill's
    logits and a decode step's, fed the same tokens, stay within e4m3's rounding of the fp32
    cache's (the tiny model's logits are ~0.5; a factor ignored anywhere would move them by
    far more)."""
    prompts = prompts_of(LENGTHS)
    gen = PagedGenerator(hf, max_batch=8, max_seqlen=32, page_size=PAGE)
    gen8 = PagedGenerator(hf, max_batch=8, max_seqlen=32, page_size=PAGE, kv_dtype=torch.float8_e4m3fn,
                          kv_scale=2.0 ** -5)
    assert gen8.cache.k.dtype == torch.float8_e4m3fn
    assert gen8.cache.k_scale.shape == (gen.model.num_layers, gen.model.heads_kv)
    for _ in range(2):
        want, got = gen.prefill(prompts).clone(), gen8.prefill(prompts).clone()
        torch.testing.assert_close(got, want, atol=3e-2, rtol=0)
        gen8.tokens.copy_(gen.tokens)  # the same next tokens, whatever the rounding picked
        torch.testing.assert_close(gen8.step().clone(), gen.step().clone(), atol=3e-2, rtol=0)
        gen8.cache.k_scale[1:].fill_(2.0 ** -4)  # the next batch: another factor in the later layers
        gen8.cache.v_scale[1:].fill_(2.0 ** -3)


def test_scaled_rope_comes_from_the_model():
    """A llama3-scaled RoPE: the tables are the model's, so the logits still match."""
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    hf = random_llama(llama_config(**{**TINY_SHAPE, "rope_parameters": rope}), seed=2)
    assert hf.model.rotary_emb.rope_type == "llama3"
    prompts = prompts_of((30, 5))
    tokens, logits = PagedGenerator(hf, max_batch=2, max_seqlen=40, page_size=PAGE).generate(
        prompts, 5, return_logits=True)
    for b, prompt in enumerate(prompts):
        ref_tokens, ref_logits = reference_generate(hf, prompt, 5)
        assert tokens[b].tolist() == ref_tokens.tolist()
        torch.testing.assert_close(logits[b], ref_logits, atol=ATOL, rtol=0)


def test_length_dependent_rope_is_refused():
    rope = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    hf = random_llama(llama_config(**{**TINY_SHAPE, "rope_parameters": rope}))
    with pytest.raises(NotImplementedError, match="dynamic"):
        PagedLlama(hf, max_seqlen=16)


# ---- bad input ------------------------------------------------------------------------------------

def test_bad_input_is_a_clear_error(hf):
    gen = PagedGenerator(hf, max_batch=2, max_seqlen=16, page_size=PAGE)
    with pytest.raises(RuntimeError, match="call prefill"):
        gen.step()
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        gen.prefill([[1], []])
    with pytest.raises(ValueError, match=r"prompt 1: token ids must be in \[0, vocab_size = 128\)"):
        gen.prefill([[1], [1, 128]])
    with pytest.raises(ValueError, match="prompt 0: token ids must be"):
        gen.prefill([[-1]])
    with pytest.raises(TypeError, match="prompt 0: expected a sequence of integer token ids"):
        gen.prefill([[1.5]])
    with pytest.raises(TypeError, match="prompt 1: expected token ids"):
        gen.prefill([[1], ["a"]])
    with pytest.raises(ValueError, match="must be 2-D"):
        gen.prefill(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="need 1 to max_batch = 2 prompts, got 3"):
        gen.prefill([[1], [2], [3]])
    with pytest.raises(ValueError, match="needs 20 positions; max_seqlen is 16"):
        gen.generate([[1] * 10], 11)
    with pytest.raises(ValueError, match="exceeds max_seqlen"):
        gen.prefill([[1] * 17])
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        gen.generate([[1]], 0)
    with pytest.raises(ValueError, match="cuda_graphs=True needs the model on a CUDA device"):
        PagedGenerator(hf, max_batch=2, max_seqlen=16, cuda_graphs=True)
    with pytest.raises(TypeError, match="LlamaForCausalLM"):
        PagedLlama(torch.nn.Linear(2, 2), max_seqlen=4)
    with pytest.raises(ValueError, match="rotary tables cover 8 positions"):
        PagedGenerator(PagedLlama(hf, max_seqlen=8), max_seqlen=16)
    one = torch.zeros(1, dtype=torch.long)
    with pytest.raises(ValueError, match="needs batch="):  # a decode step without its rows
        gen.model.forward(one, one, gen.cache, one)


def test_decode_past_max_seqlen_raises_before_touching_the_cache(hf):
    gen = PagedGenerator(hf, max_batch=1, max_seqlen=8, page_size=PAGE)
    gen.prefill([[1] * 7])
    gen.step()  # position 7: the last one
    with pytest.raises(ValueError, match="length 9 exceeds max_seqlen 8"):
        gen.step()


# ---- FP8 linears --------------------------------------------------------------------------------

def test_fp8_conversion_shares_weights_and_changes_nothing_outside_autocast():
    from kernels.extension.backend.fp8 import Fp8Linear, fp8_autocast

    hf = random_llama(llama_config(**TINY_SHAPE), seed=3)
    prompt = torch.tensor([prompts_of((9,))[0]])
    with torch.inference_mode():
        before = hf(prompt).logits
    weight = hf.model.layers[0].mlp.up_proj.weight
    assert convert_linears_to_fp8(hf) == TINY_SHAPE["num_hidden_layers"] * 7
    assert isinstance(hf.model.layers[0].mlp.up_proj, Fp8Linear)
    assert hf.model.layers[0].mlp.up_proj.weight is weight and type(hf.lm_head) is torch.nn.Linear
    with torch.inference_mode():
        assert torch.equal(hf(prompt).logits, before)
    assert convert_linears_to_fp8(hf) == 0  # already converted
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="needs a CUDA device"):
            with fp8_autocast():
                pass


# ---- the benchmark suite (it measures on a GPU; here its wiring, on a tiny model) ----------------

def test_model_suite_runs_end_to_end_on_a_tiny_model():
    """Every row of tools/suites/model.py (but the FP8 linears', which need a GPU) on the CPU:
    checked, timed on the host clock, in the results schema."""
    from tools import report
    from tools.suites import model as suite

    setup = suite.Setup(shape=TINY_SHAPE, batches=(1, 3), prompt_len=9, decode_steps=3, page_size=PAGE,
                        reps=2, device="cpu")
    kernels = ("paged-llama", "paged-llama-fp8kv", "transformers-sdpa", "transformers-sdpa-static-compile")
    rows = suite.measure(setup, kernels)
    assert [(r["kernel"], r["problem"]["phase"], r["problem"]["batch"]) for r in rows] == [
        (kernel, phase, batch) for batch in (1, 3) for kernel in kernels
        for phase in (("decode",) if kernel.endswith("compile") else ("prefill", "decode"))]
    assert all(r["status"] == "ok" and r["tokens_per_s"] > 0 for r in rows), [r["status"] for r in rows]
    # bf16 against bf16 on the same weights: ours is checked before it is timed.
    assert all(r["rel_err"] < suite.CHECK_TOL for r in rows if r["kernel"].startswith("paged-llama"))
    meta = {k: "x" for k in report.META_KEYS} | {"ceilings": {"copy_tbps": 4.0}}
    report.validate({"meta": meta, "rows": rows})
    assert report.problem_label(rows[0]["problem"]) == "prefill b1 prompt 9"
    assert report.problem_label(rows[1]["problem"]) == "decode b1 prompt 9 +3"
    headers, body = report.pivot({"rows": rows}, value="tokens_per_s")
    assert headers == ["phase, batch, tokens", *kernels] and len(body) == 4
    assert report.value_label("tokens_per_s") == "tokens/s"
    with pytest.raises(ValueError, match="unknown kernels"):
        suite.measure(setup, ["paged-llama", "vllm"])


def test_model_suite_records_a_wrong_answer_untimed(monkeypatch):
    from tools.suites import model as suite

    monkeypatch.setattr(suite, "CHECK_TOL", 0.0)  # nothing passes
    setup = suite.Setup(shape=TINY_SHAPE, batches=(2,), prompt_len=5, decode_steps=2, page_size=PAGE, reps=1,
                        device="cpu")
    rows = suite.measure(setup, ["paged-llama"])
    assert [r["status"].split(":")[0] for r in rows] == ["wrong", "wrong"]
    assert all(r["ms"] is None and r["rel_err"] > 0 for r in rows)
    assert all(name.startswith("transformers-") for name in suite.TRANSFORMERS)


# ---- the notebook -------------------------------------------------------------------------------

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "model.ipynb"


def test_model_notebook_runs_top_to_bottom():
    """On a CPU: the tiny model in fp32, every token as transformers'; the GPU cells say why they
    skip. On a GPU: the benchmark-shape model in bf16 on our kernels, and the suite's timings.
    Either way the teacher-forced logits are as close to the fp32 model as transformers' own
    model in the same dtype (tests/test_model_gpu.py holds the bound)."""
    pytest.importorskip("nbclient", reason="nbclient not installed: pip install -e '.[test]'")
    from tools.execute_notebooks import execute

    nb = execute(NOTEBOOK, timeout_s=600, kernel="python3")
    outputs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    table = next(o["data"]["text/markdown"] for o in outputs if "ours vs fp32" in str(o.get("data", "")))
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    lengths = [int(row[0]) for row in rows]
    ours, theirs = [float(row[1]) for row in rows], [float(row[2]) for row in rows]
    assert all(math.isfinite(e) for e in ours + theirs), table  # logits compared, none NaN
    timing = next(c for c in nb.cells if c.cell_type == "code" and "suite.measure(" in c.source)
    shown = " ".join(str(o.get("data", "")) + "".join(o.get("text", "")) for o in timing.outputs)
    if torch.cuda.is_available():
        assert lengths == [1, 17, 63, 64, 65, 200], table
        assert all(o <= max(5e-2, 1.25 * t) for o, t in zip(ours, theirs)), table
        assert "**prefill**, tokens/s" in shown and "**decode**, tokens/s" in shown, shown
    else:
        # fp32 against transformers' fp32: the same tokens, the logits as close as the model
        # tests hold them
        assert lengths == [1, 3, 4, 5, 9, 17] and [row[3] for row in rows] == ["never"] * 6, table
        assert all(e <= ATOL for e in ours) and theirs == [0.0] * 6, table
        assert "no GPU: nothing timed here" in shown, shown
