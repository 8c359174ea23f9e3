"""Host side of the FP8 rungs (K12 on): e4m3 q, k, v with per-tensor descales, V transposed
before the launch, O in bf16.

FP8 WGMMA reads both operands K-major: for ``O += P V`` the B operand is V^T with the *keys*
contiguous, while V arrives ``[B, Sk, Hkv, D]`` with D contiguous (bf16 rungs read it through
an MN-major descriptor, which FP8 does not have). :func:`transpose_v` writes V^T
``[B, Hkv, D, Sk']`` in one pass over V before the kernel (``kernels/cute/transpose.py``), on
the same stream, inside the timed launch; ``Sk'`` is ``Sk`` rounded up to 16 (zeros past
``Sk``), and the row stride a multiple of 16 bytes, as the tensor map needs. The same pass puts
each key in the k-slot where the kernel's P fragment has it (``kernels.cute.wgmma.fp8_key_slot``):
P goes from the accumulator to the fp8 A operand without exchanging registers between lanes.

The JIT host function of an FP8 rung takes
``(mQ, mK, mVt, mO, mLSE | None, softmax_scale, q_descale, k_descale, v_descale, stream)``.
"""

from __future__ import annotations

import functools

import cutlass

from ..harness.validate import validate_attention_inputs
from . import launch, transpose
from .wgmma import FP8_KEY_PERIOD, key_of_slot, padded_keys

OUT_DTYPE = cutlass.BFloat16  # what an FP8 rung writes


@functools.cache
def _slot_order(device):
    """key_of_slot() as an index tensor on ``device``, made once (no host copy per launch)."""
    import torch

    return torch.tensor(key_of_slot(), device=device)


def transpose_v(v):
    """``v [B, Sk, Hkv, D]`` float8_e4m3fn -> ``vt [B, Hkv, D, Sk']`` with
    ``vt[b, h, d, 16 g + fp8_key_slot(i)] = v[b, 16 g + i, h, d]`` and zeros for keys past ``Sk``:
    on a GPU one kernel (``kernels/cute/transpose.py``), elsewhere :func:`transpose_v_reference`."""
    if v.is_cuda:
        return transpose.transpose_v(v)
    return transpose_v_reference(v)


def transpose_v_reference(v):
    """:func:`transpose_v` as torch ops (a strided gather, one byte per element: slow on a GPU,
    where the kernel replaces it; the tests hold the kernel to it). ``vt`` is contiguous."""
    import torch

    batch, seqlen_k, heads, head_dim = v.shape
    keys = padded_keys(seqlen_k)
    src = v.view(torch.uint8)  # byte moves: no fp8 arithmetic needed, every op supports uint8
    if keys != seqlen_k:
        src = torch.nn.functional.pad(src, (0, 0, 0, 0, 0, keys - seqlen_k))
    # [B, H, D, groups, 16]: key i of group g, then gathered in slot order (one copy)
    groups = src.view(batch, keys // FP8_KEY_PERIOD, FP8_KEY_PERIOD, heads, head_dim).permute(0, 3, 4, 1, 2)
    return groups[..., _slot_order(v.device)].reshape(batch, heads, head_dim, keys).view(torch.float8_e4m3fn)


def fake_arguments(has_lse: bool, tvm_ffi: bool) -> tuple:
    """Compile-time stand-ins for an FP8 rung's JIT host function (see the module docstring);
    ``tvm_ffi``: for the TVM-FFI launch path (``launch.LAUNCH_OPTIONS``)."""
    fp8 = cutlass.Float8E4M3FN
    scalars = tuple(cutlass.Float32(1.0) for _ in range(4))  # softmax_scale, q/k/v descales
    return (launch.fake_bshd(fp8), launch.fake_bshd(fp8), launch.fake_bshd(fp8), launch.fake_bshd(OUT_DTYPE),
            launch.fake_lse() if has_lse else None, *scalars, launch.fake_stream(tvm_ffi))


def check_fp8_inputs(name: str, **tensors) -> None:
    """q, k, v of an FP8 rung are ``Fp8Tensor`` (e4m3 data and a descale)."""
    from ..harness.quantize import Fp8Tensor

    for label, t in tensors.items():
        if not isinstance(t, Fp8Tensor):
            raise TypeError(f"{name}: {label} must be a kernels.harness.Fp8Tensor (e4m3 data and its "
                            f"descale; quantize_e4m3 makes one), got {type(t).__name__}")


def check_run_inputs(name: str, head_dim: int, q, k, v, out, lse, require_cuda: bool = True) -> None:
    """What an FP8 rung's ``run_kernel`` checks before anything runs: ``Fp8Tensor`` q, k, v of
    contiguous e4m3 BSHD on one device, a bf16 ``out``, the LSE, alignment and grid limits."""
    import torch

    check_fp8_inputs(name, q=q, k=k, v=v)
    launch.check_output_buffers(name, out, lse)
    validate_attention_inputs(q.data, k.data, v.data, out, lse, name=name, head_dims=(head_dim,),
                              dtypes=(torch.float8_e4m3fn,), out_dtype=torch.bfloat16,
                              require_cuda=require_cuda)
    launch.check_vector_alignment(name, q=q.data, k=k.data, v=v.data, out=out)
    launch.check_grid_limits(name, q.data)


def run_fp8(compiled: launch.CompiledFMHA, q, k, v, out, lse=None) -> None:
    """Validate, transpose V (:func:`transpose_v`) and launch on torch's current stream of q's device."""
    import torch

    if not isinstance(compiled, launch.CompiledFMHA):
        raise TypeError(f"expected the result of compile_kernel(problem), got {type(compiled).__name__}")
    name = compiled.rung
    check_run_inputs(name, compiled.head_dim, q, k, v, out, lse)
    function = compiled.function(has_lse=lse is not None)
    with torch.cuda.device(q.device):
        vt = transpose_v(v.data)
        function(q.data, k.data, vt, out, lse, compiled.softmax_scale, q.descale, k.descale, v.descale)


class Fp8RungAPI(launch.RungAPI):
    """``RungAPI`` for an FP8 rung: ``run_kernel`` takes ``Fp8Tensor`` q, k, v (``make_inputs``
    of an ``e4m3`` problem) and a bf16 ``out``; the kernel class compiles with
    :func:`fake_arguments`."""

    def shared_bytes(self, head_dim: int, dtype_bytes: int = 1) -> int | None:
        """Q, K and V^T stages in e4m3, and O's bf16 staging buffer."""
        plan = (self.tile_configs or {}).get(head_dim)
        if plan is None:
            return None
        return plan.shared_bytes(dtype_bytes) + plan.o_bytes(OUT_DTYPE.width // 8)

    @staticmethod
    def run_kernel(compiled: launch.CompiledFMHA, q, k, v, out, lse=None) -> None:
        """out[...] = attention(q, k, v) (bf16) on torch's current stream; lse (fp32 [B, Hq, Sq]) if given."""
        run_fp8(compiled, q, k, v, out, lse)
