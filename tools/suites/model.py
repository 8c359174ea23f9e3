"""The model suite: a Llama-style decoder on our kernels against the same model run by
transformers, prefill and decode tokens/s at batch 1, 8 and 64.

The model is `kernels.model.llama.BENCH_SHAPE` (8 layers, hidden 2048, 32 / 8 heads,
head_dim 128, vocab 32000) with seeded random weights in bf16; every implementation runs the
same `LlamaForCausalLM` weights:

- `paged-llama`: `kernels.model.PagedGenerator`: ragged paged prefill, greedy decode steps
  replayed from CUDA graphs (one per batch bucket), pages of 64;
- `paged-llama-fp8`: the same with the decoder layers' linears in FP8 (`fp8_autocast`,
  `DynamicScaling`);
- `paged-llama-fp8kv`: `paged-llama` on an FP8 (e4m3) KV cache, its factors per layer and kv
  head calibrated once from a bf16 prefill of the first batch's prompts (amax / 448, twice that
  for headroom); its prefill reads the batch's pages dequantized into a 16-bit copy;
- `transformers-sdpa`: transformers' own forward and `generate` (SDPA attention, its dynamic
  cache);
- `transformers-sdpa-static-compile`: `generate` with a static cache, which transformers runs
  through `torch.compile` (decode only; a row says why where it does not work).

Prompts of PROMPT_LEN random tokens (the same length in a batch, so transformers needs no
padding). Prefill: one forward over the prompts, the cache filled, the last token's logits
(tokens/s = batch x prompt length / time). Decode: DECODE_STEPS greedy steps after the prefill,
timed from the first generated token to the last (tokens/s = batch x steps / time), including
each implementation's host work per step. Each timing is the median of REPS runs after
warm-up runs (compiles, graph captures).

Before timing, our rows are checked against transformers on the same tokens (the prefill's
last logits, and the first decode step's logits on the token our prefill picked): relative
Frobenius error <= CHECK_TOL (bf16 against bf16, both with their own rounding error) or
FP8_CHECK_TOL (FP8 linears against bf16): loose enough for rounding, far below the O(1) error of
a broken path; a wrong answer is recorded, never timed.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import torch

from kernels.harness.checks import rel_err
from kernels.harness.timing import elapsed_ms, summarize, timing_event

BATCHES = (1, 8, 64)
PROMPT_LEN = 512
DECODE_STEPS = 64
PAGE_SIZE = 64
REPS = 5
CHECK_TOL = 1e-1
FP8_CHECK_TOL = 0.4
OURS = ("paged-llama", "paged-llama-fp8", "paged-llama-fp8kv")
TRANSFORMERS = ("transformers-sdpa", "transformers-sdpa-static-compile")


@dataclass(frozen=True)
class Setup:
    """What one run measures; `run` uses the defaults (tests shrink it to a tiny model on a CPU)."""

    shape: dict | None = None  # LlamaConfig fields; None: kernels.model.llama.BENCH_SHAPE
    batches: tuple = BATCHES
    prompt_len: int = PROMPT_LEN
    decode_steps: int = DECODE_STEPS
    page_size: int = PAGE_SIZE
    reps: int = REPS
    device: str = "cuda"


def _problem(setup: Setup, phase: str, batch: int) -> dict:
    from kernels.model.llama import BENCH_SHAPE

    problem = {"model": "llama", "phase": phase, "batch": batch, "prompt_len": setup.prompt_len}
    if phase == "decode":
        problem["new_tokens"] = setup.decode_steps
    shape = setup.shape or BENCH_SHAPE
    fields = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
              "num_key_value_heads", "head_dim", "vocab_size")
    return {**problem, **{k: shape[k] for k in fields}, "dtype": "bf16", "page_size": setup.page_size}


def _row(kernel, problem, ms=None, tokens=None, err=None, status="ok") -> dict:
    import transformers

    return {"kernel": kernel, "problem": problem, "ms": ms, "tflops": None, "gbps": None,
            "tokens_per_s": tokens / (ms["median"] * 1e-3) if ms and tokens else None,
            "rel_err": err, "status": status, "transformers": transformers.__version__}




def _time(run_once, reps: int, warmup: int = 1) -> dict:
    """`run_once()` returns the ms of one run (it records its own events); the median of
    `reps` runs after `warmup` runs."""
    for _ in range(warmup):
        run_once()
    return summarize([run_once() for _ in range(reps)])


def _step_clock(device: str):
    """A transformers StoppingCriteria that stops nothing and records an event after each
    generated token (on CUDA, generate calls its stopping criteria after every step)."""
    from transformers import StoppingCriteria

    class StepClock(StoppingCriteria):
        def __init__(self):
            self.events = []

        def __call__(self, input_ids, scores, **kwargs):
            event = timing_event(device)
            event.record()
            self.events.append(event)
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

        def decode_ms(self) -> float:
            """From the first generated token (the prefill's) to the last."""
            self.events[-1].synchronize()
            return self.events[0].elapsed_time(self.events[-1])

    return StepClock()


# ---- ours -------------------------------------------------------------------------------------

def _ours_rows(setup, kernel, gen, hf_ref, ids, fp8) -> list[dict]:
    """Prefill and decode rows of a PagedGenerator at one batch size (ids [B, L])."""
    from kernels.extension.backend.fp8 import DynamicScaling, fp8_autocast

    batch, steps = ids.shape[0], setup.decode_steps
    prompts = ids  # [B, L] on the device, as transformers gets them
    tol = FP8_CHECK_TOL if "fp8" in kernel else CHECK_TOL
    mode = (lambda: fp8_autocast(recipe=DynamicScaling())) if fp8 else contextlib.nullcontext
    try:
        with mode():
            prefill_logits = gen.prefill(prompts).clone()
            first = gen.tokens[:batch].clone()
            step_logits = gen.step().clone()  # captures this bucket's graph
        with torch.inference_mode():
            ref_prefill = hf_ref(ids, logits_to_keep=1).logits[:, -1]
            ref_step = hf_ref(torch.cat([ids, first[:, None]], dim=1), logits_to_keep=1).logits[:, -1]
        errs = (rel_err(prefill_logits, ref_prefill), rel_err(step_logits, ref_step))
    except Exception as exc:  # noqa: BLE001 (our own code raising is a failure, recorded as a row)
        status = f"wrong: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return [_row(kernel, _problem(setup, phase, batch), status=status) for phase in ("prefill", "decode")]
    rows = []
    for phase, err in zip(("prefill", "decode"), errs):
        problem = _problem(setup, phase, batch)
        if not err <= tol:
            rows.append(_row(kernel, problem, err=err, status=f"wrong: rel_err {err:.3g} > {tol}"))
            continue
        with mode():
            if phase == "prefill":
                ms = _time(lambda: elapsed_ms(lambda: gen.prefill(prompts), setup.device), setup.reps)
                rows.append(_row(kernel, problem, ms, batch * setup.prompt_len, err))
            else:
                def decode():
                    gen.prefill(prompts)
                    return elapsed_ms(lambda: [gen.step() for _ in range(steps)], setup.device)
                rows.append(_row(kernel, problem, _time(decode, setup.reps), batch * steps, err))
    return rows


# ---- transformers -----------------------------------------------------------------------------

def _transformers_rows(setup, kernel, hf, ids) -> list[dict]:
    batch, steps = ids.shape[0], setup.decode_steps
    static = kernel.endswith("static-compile")
    rows = []
    for phase in ("decode",) if static else ("prefill", "decode"):
        problem = _problem(setup, phase, batch)
        try:
            with torch.inference_mode():
                if phase == "prefill":
                    def prefill():
                        return elapsed_ms(lambda: hf(ids, use_cache=True, logits_to_keep=1), setup.device)
                    ms = _time(prefill, setup.reps)
                    rows.append(_row(kernel, problem, ms, batch * setup.prompt_len))
                    continue
                extra = {"cache_implementation": "static"} if static else {"disable_compile": True}

                def decode():
                    clock = _step_clock(setup.device)
                    hf.generate(ids, max_new_tokens=steps + 1, do_sample=False, stopping_criteria=[clock],
                                **extra)
                    return clock.decode_ms()
                # Static: compiles on the first call, records its CUDA graphs on the next ones.
                ms = _time(decode, setup.reps, warmup=3 if static else 1)
                rows.append(_row(kernel, problem, ms, batch * steps))
        except Exception as exc:  # noqa: BLE001 (a peer that cannot run a configuration is a row)
            rows.append(_row(kernel, problem,
                             status=f"unsupported: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"))
    return rows


def measure(setup: Setup, kernels=None, progress=None) -> list[dict]:
    from kernels.model import PagedGenerator, convert_linears_to_fp8, llama_config, random_llama

    kernels = list(kernels or OURS + TRANSFORMERS)
    unknown = set(kernels) - set(OURS + TRANSFORMERS)
    if unknown:
        raise ValueError(f"unknown kernels {sorted(unknown)}; the model suite has {OURS + TRANSFORMERS}")
    config = llama_config(**(setup.shape or {}))
    hf = random_llama(config, seed=0, dtype=torch.bfloat16, device=setup.device, attn_implementation="sdpa")
    sizes = dict(max_batch=max(setup.batches), max_seqlen=setup.prompt_len + setup.decode_steps + 1,
                 page_size=setup.page_size)
    generators = {}
    if "paged-llama" in kernels:
        generators["paged-llama"] = PagedGenerator(hf, **sizes)
    if "paged-llama-fp8" in kernels:
        fp8_model = copy.deepcopy(hf)
        convert_linears_to_fp8(fp8_model)
        generators["paged-llama-fp8"] = PagedGenerator(fp8_model, **sizes)
    task = progress.add_task("model", total=len(setup.batches) * len(kernels)) if progress else None
    rows = []
    seed = torch.Generator(device=setup.device).manual_seed(0)
    for batch in setup.batches:
        ids = torch.randint(0, config.vocab_size, (batch, setup.prompt_len), device=setup.device,
                            generator=seed)
        if "paged-llama-fp8kv" in kernels and "paged-llama-fp8kv" not in generators:
            generators["paged-llama-fp8kv"] = _fp8_kv_generator(PagedGenerator, hf, sizes, ids)
        for kernel in kernels:
            if progress:
                progress.update(task, description=f"model {kernel} b{batch}")
            if kernel in generators:
                rows += _ours_rows(setup, kernel, generators[kernel], hf, ids, fp8=kernel.endswith("fp8"))
            else:
                rows += _transformers_rows(setup, kernel, hf, ids)
            if setup.device == "cuda":
                torch.cuda.empty_cache()
            if progress:
                progress.advance(task)
    return rows


def _fp8_kv_generator(make, hf, sizes, ids):
    """A generator on an e4m3 cache whose factors (per layer and kv head) are twice the amax / 448
    of the K/V a bf16 prefill of ``ids`` stores: the calibration an FP8 checkpoint ships."""
    calibration = make(hf, **sizes)
    calibration.prefill(ids)
    used = calibration.cache.page_table[:ids.shape[0]].flatten().long().unique()
    gen = make(hf, **sizes, kv_dtype=torch.float8_e4m3fn)
    gen.cache.calibrate(calibration.cache, used)
    return gen


# The tools.bench filters this suite applies (bench refuses any other before measuring).
FILTERS = ("kernels",)


def run(ctx) -> list[dict]:
    return measure(Setup(), ctx.kernels, ctx.progress)
