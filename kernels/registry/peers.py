"""Peers: torch SDPA backends and FlashAttention-4, run on the same inputs as our kernels.

They take bf16 / fp16 inputs. No peer takes the FP8 (e4m3) problems: FA4 has no FP8 path on
Hopper, and torch's FP8 attention (``_scaled_dot_product_attention_quantized``) runs only on an
external FlashAttention-3 build, not on a backend torch ships; FP8 rungs are compared with the
bf16 version of each problem (``tools/suites/ladder.py``).
"""

from __future__ import annotations

import functools
import warnings

from kernels.harness.problem import AttentionProblem

from .runner import Launch, Runner

PEER_DTYPES = ("bf16", "fp16")


def dtype_reason(name: str, problem: AttentionProblem) -> str | None:
    if problem.dtype not in PEER_DTYPES:
        return f"{name}: dtype {problem.dtype} unsupported (supported: {list(PEER_DTYPES)})"
    return None


def sdpa_runner(name: str, backend_name: str, description: str) -> Runner:
    def unsupported(problem: AttentionProblem) -> str | None:
        import torch

        if not torch.cuda.is_available():
            return f"{name}: needs a CUDA device"
        return dtype_reason(name, problem)

    def prepare(problem: AttentionProblem) -> Launch:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right

        backend = getattr(SDPBackend, backend_name)
        gqa = problem.heads_q != problem.heads_kv
        # SDPA's is_causal is top-left aligned; the repository's convention is bottom-right.
        mask = None
        if problem.causal and problem.seqlen_q != problem.seqlen_k:
            mask = causal_lower_right(problem.seqlen_q, problem.seqlen_k)
        is_causal = problem.causal and mask is None

        def launch(q, k, v, out):
            # SDPA allocates its output: return it (as BSHD) rather than time a copy into out.
            with sdpa_kernel(backend):
                o = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask,
                    is_causal=is_causal, scale=problem.softmax_scale, enable_gqa=gqa)
            return o.transpose(1, 2)

        return launch

    return Runner(name, "peer", description, unsupported, prepare,
                  limits=functools.partial(dtype_reason, name))


def fa4_runner() -> Runner:
    def unsupported(problem: AttentionProblem) -> str | None:
        try:
            import flash_attn.cute.interface  # noqa: F401
        except Exception as exc:  # ImportError, or a CUDA-less import failure
            return f"fa4: flash_attn.cute not importable ({type(exc).__name__})"
        return dtype_reason("fa4", problem)

    def prepare(problem: AttentionProblem) -> Launch:
        from flash_attn.cute.interface import flash_attn_func

        # FA4 passes a host-side helper object through the DSL, which warns on every compile.
        warnings.filterwarnings("ignore", message=".*cannot be converted to a JitArgument")

        def launch(q, k, v, out):
            # flash_attn_func allocates its output: return it rather than time a copy into out.
            result = flash_attn_func(q, k, v, softmax_scale=problem.softmax_scale,
                                     causal=problem.causal)
            return result[0] if isinstance(result, tuple) else result

        return launch

    return Runner("fa4", "peer", "FlashAttention-4 (CuTe DSL), flash_attn.cute", unsupported, prepare,
                  limits=functools.partial(dtype_reason, "fa4"))


def peer_runners() -> list[Runner]:
    return [
        sdpa_runner("sdpa-math", "MATH", "torch SDPA, math backend (unfused)"),
        sdpa_runner("sdpa-flash", "FLASH_ATTENTION", "torch SDPA, FlashAttention-2 backend"),
        sdpa_runner("sdpa-cudnn", "CUDNN_ATTENTION", "torch SDPA, cuDNN backend"),
        fa4_runner(),
    ]
