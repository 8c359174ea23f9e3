"""`attention(q, k, v, ...)`: one entry point over contiguous or paged KV that picks an
implementation by capability and by measurement.

Backends: `cuda` (our kernels, kernels.extension.ops.attention), `fa4` (flash_attn.cute, when
installed), `ladder` (the top CuTe-DSL rung, `ladder_path`: dense bf16 / fp16 calls on Hopper,
where the CuTe DSL is installed) and `torch` (scaled_dot_product_attention: any device, bf16,
fp16 or fp32).

How a call finds its backend:

- Order. On a GPU with recorded results (`results/<gpu>/attention.json`), the order of the
  call's bucket (phase: decode, prefill, paged-decode or paged-prefill; head_dim) from
  `attention_routing`: fastest measured first. Elsewhere, and for buckets nothing measured,
  the default order `cuda`, `fa4`, `ladder`, `torch`. `routing_table()` shows the measured orders.
- Capability. The first backend of the order that can run the call runs it; the others are
  skipped with a reason (`select_backend` names the one that runs).
- `KERNELS_ATTENTION_BACKEND=<name>` puts that backend first (the others stay fallbacks).
- `with use_backend(name):` selects strictly: a call it cannot run raises RuntimeError
  with the reason instead of switching.
- Every call. Validation and the choice read the inputs' metadata (dtypes, shapes, devices,
  flags) and the settings above on every call: a few microseconds of host time, nothing
  remembered. A loop that repeats one call validates and routes it once with a plan
  (`plan.DecodePlan`). The length checks read data (`seqlens_k` within the page table;
  `cu_seqlens_q` from 0 to total_q, never decreasing, which the warp-specialized prefill reads
  on the device unchecked): they run on a call that asks for them unless the same tensors,
  unmodified (their version counters), passed last (the layers of a step after the first skip
  them).
- Page ids. attention() hands our kernels the lengths it checked and the page ids as the
  caller's contract (checked with KERNELS_DEBUG=1; `ops.paged_decode` / `paged_prefill` called
  directly check them with their lengths by default); the
  torch backend reads pages by indexing, so it checks the ids of every sequence's keys on each
  call (one device->host copy; entries past a sequence's length may hold anything).
- `out` and `lse` must have the dtype, shape and device the call writes (q's; float32
  [B, Hq, Sq], or [Hq, total_q] for packed queries): every backend refuses others.

Autograd: when autograd records (torch.is_grad_enabled() and q, k or v requires grad), only
differentiable backends can run the call: `fa4` (contiguous KV, no mask, head_dim <= 128:
FlashAttention-4's backward) and `torch` (everything). Our kernels are forward-only.

Dtypes: bf16 and fp16 on every backend (our kernels compute in fp32 from either); fp32 on
`torch` only. The output has the inputs' dtype. A paged cache may be e4m3 (an FP8 KV cache,
with `k_scale` / `v_scale`): our paged decode reads it, our prefill and torch dequantize it.

Layouts (docs/design.md): q [B, Sq, Hq, D]; contiguous k, v [B, Sk, Hkv, D]; paged k, v
[num_pages, page_size, Hkv, D] with page_table [B, max_pages] int32 and seqlens_k [B] int32;
ragged queries packed as q [total_q, Hq, D] with cu_seqlens_q [B + 1] int32 (paged only).
mask: bool [B, Sk] or [B, Sq, Sk], True = keep. Causal is bottom-right aligned per batch.
A row that sees no key returns zeros (LSE -inf).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from dataclasses import dataclass

import torch

from .. import loader
from ..ops import attention as ops
from . import attention_routing, ladder_path
from .attention_routing import DEFAULT_ORDER, Route, phase_of, uses_decode_kernel
from .torch_path import _run_torch, dequantized_pages
from .validation import (
    E4M3,
    _check_causal,
    _check_out_lse,
    _scale_number,
    kv_scales_of,
    validate_inputs,
)

BACKENDS = DEFAULT_ORDER
ENV_VAR = "KERNELS_ATTENTION_BACKEND"
DEBUG_ENV_VAR = "KERNELS_DEBUG"
# Differentiable calls go to FlashAttention-4 up to this head dim: its Hopper backward keeps
# fixed tiles (64-80 query rows x 128 keys, two stages of Q and dO) that outgrow shared memory
# at 256. Larger heads take torch's backward.
FA4_BACKWARD_MAX_HEAD_DIM = 128

_strict_backend: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "attention_backend", default=None)


@contextlib.contextmanager
def use_backend(name: str):
    """Run attention() calls in this block on `name` only; raise if it cannot run a call."""
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r}; choose from {BACKENDS}")
    token = _strict_backend.set(name)
    try:
        yield
    finally:
        _strict_backend.reset(token)


# ---- what the choice depends on -------------------------------------------------------------

@dataclass(frozen=True)
class Call:
    """The facts about a call that decide which backend runs it (shapes and flags, no data)."""

    device_type: str                       # "cuda", "cpu", ...
    capability: tuple[int, int] | None     # compute capability of a CUDA device
    gpu: str | None                        # its results folder ("h200"), None off CUDA
    dtype: torch.dtype
    head_dim: int
    phase: str                             # attention_routing.PHASES
    masked: bool
    needs_grad: bool                       # autograd records the call
    fp8_kv: bool = False                   # an e4m3 paged cache (k_scale, v_scale)

    @property
    def paged(self) -> bool:
        return self.phase.startswith("paged")


@functools.cache
def _cuda_device(index: int) -> tuple[tuple[int, int], str]:
    """(compute capability, results folder) of CUDA device `index`, looked up once."""
    return (tuple(torch.cuda.get_device_capability(index)),
            attention_routing.gpu_folder(torch.cuda.get_device_name(index)))


def describe_call(q, k, v, *, mask=None, page_table=None, cu_seqlens_q=None) -> Call:
    """The Call of validated inputs (see validate_inputs)."""
    paged, packed = page_table is not None, cu_seqlens_q is not None
    seqlen_q = None if packed else q.shape[1]
    capability = gpu = None
    if q.is_cuda:
        index = q.device.index if q.device.index is not None else torch.cuda.current_device()
        capability, gpu = _cuda_device(index)
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    return Call(q.device.type, capability, gpu, q.dtype, q.shape[-1],
                phase_of(seqlen_q, q.shape[-2] // k.shape[2], paged, packed), mask is not None, needs_grad,
                k.dtype == E4M3)


# ---- capability checks: reason or None -------------------------------------------------------

def _cuda_unsupported(call: Call) -> str | None:
    if not ops.available():
        return f"extension module 'attention' not built (run `{loader.BUILD_COMMAND}`)"
    if call.device_type != "cuda":
        return "inputs are not on a CUDA device"
    if call.dtype not in ops.DTYPES:
        return f"dtype {call.dtype} (the kernels take {', '.join(map(str, ops.DTYPES))})"
    if call.head_dim not in ops.HEAD_DIMS:
        return f"head_dim {call.head_dim} (supported: {ops.HEAD_DIMS})"
    if call.needs_grad:
        return "autograd is recording the call and our kernels have no backward"
    arch = loader.build_info("attention").get("arch", "90a")
    major, minor = call.capability
    if arch.endswith("a"):
        if f"{major}{minor}" != arch[:-1]:
            return f"built for sm_{arch}, device is sm_{major}{minor}"
    elif major * 10 + minor < int(arch):
        return f"built for sm_{arch}, device is sm_{major}{minor}"
    return None


@functools.cache  # a failed import is not retried on every call the routing sends to FA4 first
def _fa4():
    try:
        from flash_attn.cute import interface
    except Exception:  # noqa: BLE001 (any import failure means FA4 is unusable here)
        return None
    return interface


def _fa4_unsupported(call: Call) -> str | None:
    if call.fp8_kv:
        return "flash_attn.cute reads no e4m3 cache on Hopper"
    if call.masked:
        return "flash_attn.cute takes no boolean mask"
    if call.device_type != "cuda":
        return "inputs are not on a CUDA device"
    if call.dtype not in (torch.bfloat16, torch.float16):
        return f"dtype {call.dtype}"
    if call.capability[0] not in (9, 10):
        return "flash_attn.cute needs sm90 or sm100"
    if call.head_dim > 256 or call.head_dim % 8:
        return f"head_dim {call.head_dim}"
    if call.needs_grad and call.paged:
        return "autograd is recording the call and FA4's paged forward has no backward"
    if call.needs_grad and call.head_dim > FA4_BACKWARD_MAX_HEAD_DIM:
        return (f"autograd is recording the call and FA4's backward takes head_dim <= "
                f"{FA4_BACKWARD_MAX_HEAD_DIM}")
    if _fa4() is None:
        return "flash_attn.cute is not installed"
    return None


def _torch_unsupported(call: Call) -> str | None:
    return None


_UNSUPPORTED = {"cuda": _cuda_unsupported, "fa4": _fa4_unsupported, "ladder": ladder_path.unsupported,
                "torch": _torch_unsupported}


# ---- choice ----------------------------------------------------------------------------------

def routing_table(gpu: str | None = None, results_dir=None) -> list[Route]:
    """The measured backend order of every bucket (phase, head_dim) on `gpu`, a results folder
    such as "h200" (default: the current CUDA device's; [] without one): the routes shipped with
    the package, or from a results root (`results_dir`, or $KERNELS_RESULTS_DIR) where given.
    Buckets not listed, and GPUs without results, use the default order BACKENDS."""
    if gpu is None:
        if not torch.cuda.is_available():
            return []
        gpu = _cuda_device(torch.cuda.current_device())[1]
    return attention_routing.routing_table(gpu, results_dir)


def backend_order(call: Call) -> tuple[str, ...]:
    """The order in which backends are tried for `call`: $KERNELS_ATTENTION_BACKEND first, then
    the measured order of the call's bucket on its GPU, else BACKENDS."""
    order = BACKENDS
    if call.gpu is not None:
        route = attention_routing.routes(call.gpu).get((call.phase, call.head_dim))
        if route is not None:
            order = route.order
    preferred = os.environ.get(ENV_VAR)
    if preferred:
        if preferred not in BACKENDS:
            raise ValueError(f"{ENV_VAR}={preferred!r}; choose from {BACKENDS}")
        order = (preferred, *(b for b in order if b != preferred))
    return order


def choose_backend(call: Call) -> tuple[str, list[str]]:
    """(the backend that runs `call`, why each backend tried before it could not)."""
    strict = _strict_backend.get()
    if strict is not None:
        reason = _UNSUPPORTED[strict](call)
        if reason is not None:
            raise RuntimeError(f"attention backend {strict!r} (selected by use_backend) cannot run "
                               f"this call: {reason}")
        return strict, []
    reasons = []
    for name in backend_order(call):
        reason = _UNSUPPORTED[name](call)
        if reason is None:
            return name, reasons
        reasons.append(f"{name}: {reason}")
    raise RuntimeError("no attention backend can run this call: " + "; ".join(reasons))


def select_backend(q, k, v, *, causal=False, scale=None, mask=None, page_table=None, seqlens_k=None,
                   cu_seqlens_q=None, out=None, lse=None, check_seqlens=True, k_scale=None,
                   v_scale=None) -> str:
    """The backend attention() would use for these inputs (routing, overrides, autograd and
    strict selection included); takes attention()'s arguments and raises as it does for inputs
    it refuses, but reads no lengths (the routing does not depend on them: check_seqlens, out
    and lse are taken and ignored)."""
    _check_causal(causal)
    if seqlens_k is None and isinstance(page_table, torch.Tensor) and page_table.dim() > 0:
        seqlens_k = torch.zeros(page_table.shape[0], dtype=torch.int32)  # stands in for the lengths
    validate_inputs(q, k, v, scale=scale, mask=mask, page_table=page_table, seqlens_k=seqlens_k,
                    cu_seqlens_q=cu_seqlens_q, check_seqlens=False)
    kv_scales_of(k, k_scale, v_scale)
    call = describe_call(q, k, v, mask=mask, page_table=page_table, cu_seqlens_q=cu_seqlens_q)
    return choose_backend(call)[0]


# ---- entry point -------------------------------------------------------------------------------

def _debug_setting() -> str | None:
    return os.environ.get(DEBUG_ENV_VAR)


def attention(q, k, v, *, causal=False, scale=None, mask=None, page_table=None, seqlens_k=None,
              cu_seqlens_q=None, out=None, lse=None, check_seqlens=True, k_scale=None, v_scale=None):
    """Attention with contiguous or paged KV (see the module docstring); returns out.

    The arguments, in brief:

    - `q`, `k`, `v`: [B, Sq, Hq, D] and [B, Sk, Hkv, D], or a paged cache [num_pages,
      page_size, Hkv, D]; packed queries [total_q, Hq, D] with `cu_seqlens_q`. bf16, fp16 or fp32;
      or `Fp8Tensor` q, k, v (e4m3 and a descale each, contiguous K/V): the FP8 rung where it
      runs, else torch on the dequantized values, a bf16 output either way.
    - `causal`: bottom-right aligned (query i sees keys j <= i + Sk - Sq, per batch).
    - `scale`: the softmax scale, a positive number (default 1 / sqrt(D)).
    - `mask`: bool [B, Sk] or [B, Sq, Sk], True = keep.
    - `page_table`, `seqlens_k`: int32 [B, max_pages] and [B], a paged cache.
    - `cu_seqlens_q`: int32 [B + 1], packed queries' offsets (paged caches only).
    - `out`: written in place and returned (q's dtype, shape and device).
    - `lse`: float32 [B, Hq, Sq] ([Hq, total_q] packed), written in place (natural log).
    - `check_seqlens`: check the lengths (and offsets) against the page table, one device->host
      copy unless the same tensors passed unmodified last time; False skips it (a length past
      the page table then gives that sequence NaN on our kernels).
    - `k_scale`, `v_scale`: an e4m3 paged cache (float8_e4m3fn k, v; bf16 or fp16 q): the
      factors that turn its values into keys and values, float32 [Hkv] (per kv head) or [1],
      or numbers. Our paged decode reads the cache as it is (half a 16-bit cache's bytes); our
      prefill reads the pages the call names, dequantized first into a 16-bit copy (one pass);
      torch dequantizes too; FlashAttention-4 takes no e4m3 cache.

    Differentiable with respect to q, k and v when autograd records the call (it then runs on a
    backend with a backward, fa4 or torch)."""
    if type(q) is not torch.Tensor and ladder_path.is_fp8_tensor(q):  # e4m3 inputs
        return ladder_path.run_fp8(q, k, v, causal=causal, scale=scale, mask=mask, page_table=page_table,
                                   seqlens_k=seqlens_k, cu_seqlens_q=cu_seqlens_q, out=out, lse=lse,
                                   strict=_strict_backend.get())
    if causal is not False and causal is not True:  # two identity tests: this runs on every call
        _check_causal(causal)
    if scale is not None and type(scale) is not float:
        scale = _scale_number(scale)
    validate_inputs(q, k, v, scale=scale, mask=mask, page_table=page_table, seqlens_k=seqlens_k,
                    cu_seqlens_q=cu_seqlens_q, check_seqlens=check_seqlens)
    kv_scales = kv_scales_of(k, k_scale, v_scale)
    call = describe_call(q, k, v, mask=mask, page_table=page_table, cu_seqlens_q=cu_seqlens_q)
    run = _runner(choose_backend(call)[0], q, k, page_table, cu_seqlens_q)
    if kv_scales is None:
        return run(q, k, v, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q, out, lse)
    return run(q, k, v, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q, out, lse,
               kv_scales=kv_scales)


def _runner(name, q, k, page_table, cu_seqlens_q):
    """The function that runs a validated call on backend `name` (the cuda backend's depends on
    the call's kind: its shapes). Calls with nothing to attend to (contiguous K/V of no keys,
    packed queries of no sequence) take the torch path's answer (zeros, LSE -inf; an empty
    output) on every backend: our kernels and FA4's refuse them."""
    if (page_table is None and k.shape[1] == 0) or (cu_seqlens_q is not None and cu_seqlens_q.shape[0] == 1):
        return _run_torch
    if name == "fa4":
        return _run_fa4
    if name == "ladder":
        return ladder_path.run
    if name != "cuda":
        return _run_torch
    if cu_seqlens_q is not None:
        return _run_cuda_paged_prefill
    small = uses_decode_kernel(q.shape[1], q.shape[2] // k.shape[2])
    if page_table is not None:
        return _run_cuda_paged_decode if small else _run_cuda_paged_prefill_dense
    return _run_cuda_decode if small else _run_cuda_prefill


def _run_cuda_paged_decode(q, k, v, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q, out, lse,
                           kv_scales=None):
    k_scale, v_scale = kv_scales or (None, None)
    return ops.paged_decode(q, k, v, page_table, seqlens_k, causal=causal, scale=scale, mask=mask, out=out,
                            lse=lse, check_seqlens=False, debug=_debug_setting() == "1", k_scale=k_scale,
                            v_scale=v_scale)


def _run_cuda_paged_prefill(q, k, v, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q, out, lse,
                            kv_scales=None):
    """Packed ragged queries on a paged cache; an e4m3 cache's pages dequantized first
    (dequantized_pages: the prefill kernels read 16-bit pages)."""
    if kv_scales is not None:
        k, v, page_table = dequantized_pages(k, v, page_table, kv_scales, q.dtype)
    return ops.paged_prefill(q, k, v, page_table, cu_seqlens_q, seqlens_k, causal=causal, scale=scale,
                             mask=mask, out=out, lse=lse, check_seqlens=False, debug=_debug_setting() == "1")


def _run_cuda_paged_prefill_dense(q, k, v, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q, out,
                                  lse, kv_scales=None):
    """Long dense queries on a paged cache: the ragged prefill kernel with uniform lengths (out
    and lse reshaped and copied here, so checked here); an e4m3 cache as _run_cuda_paged_prefill."""
    if out is not None or lse is not None:
        _check_out_lse(q, out, lse, False)
    if kv_scales is not None:
        k, v, page_table = dequantized_pages(k, v, page_table, kv_scales, q.dtype)
    batch, seqlen_q, heads_q = q.shape[:3]
    cu = torch.arange(0, (batch + 1) * seqlen_q, seqlen_q, dtype=torch.int32, device=q.device)
    packed_out = None if out is None else out.view(batch * seqlen_q, heads_q, -1)
    packed_lse = None if lse is None else torch.empty(heads_q, batch * seqlen_q, device=q.device)
    result = ops.paged_prefill(q.reshape(batch * seqlen_q, heads_q, -1), k, v, page_table, cu, seqlens_k,
                               causal=causal, scale=scale, mask=mask, out=packed_out, lse=packed_lse,
                               check_seqlens=False, debug=_debug_setting() == "1")
    if lse is not None:
        lse.copy_(packed_lse.view(heads_q, batch, seqlen_q).transpose(0, 1))
    return result.view(q.shape) if out is None else out


def _run_cuda_decode(q, k, v, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q, out, lse):
    return ops.decode(q, k, v, causal=causal, scale=scale, mask=mask, out=out, lse=lse)


def _run_cuda_prefill(q, k, v, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q, out, lse):
    return ops.prefill(q, k, v, causal=causal, scale=scale, mask=mask, out=out, lse=lse,
                       debug=_debug_setting() == "1")


def _run_fa4(q, k, v, causal, scale, mask, page_table, seqlens_k, cu_seqlens_q, out, lse):
    """FlashAttention-4 (never routed a mask: _fa4_unsupported)."""
    if out is not None or lse is not None:
        _check_out_lse(q, out, lse, cu_seqlens_q is not None)
    fa4 = _fa4()
    if page_table is None:
        result = fa4.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal, return_lse=lse is not None)
    else:
        max_seqlen_q = None
        if cu_seqlens_q is not None:
            max_seqlen_q = int((cu_seqlens_q[1:] - cu_seqlens_q[:-1]).max())
        result = fa4.flash_attn_varlen_func(q, k, v, cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q,
                                            seqused_k=seqlens_k, page_table=page_table, softmax_scale=scale,
                                            causal=causal, return_lse=lse is not None)
    o, result_lse = result if isinstance(result, tuple) else (result, None)
    if lse is not None:
        lse.copy_(result_lse)
    if out is not None:
        out.copy_(o)
        return out
    return o
