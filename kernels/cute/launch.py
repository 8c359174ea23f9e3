"""Host-side plumbing shared by every CuTe-DSL rung.

Everything here runs on the host in plain Python: input validation, torch -> CuTe tensor
conversion, the fake tensors used to compile without a GPU, and the compile cache.

One compile serves every runtime shape. The JIT host function of a rung is traced with
*fake* tensors whose batch, sequence and head extents and all strides are symbolic; only
the head dimension (the last, contiguous mode) is static, re-imposed inside the kernel by
:func:`kernels.cute.tensors.bshd_tensor`. At run time the torch tensor's extents and strides
fill those symbols (4 int32 extents, 3 int64 strides for BSHD), so the compiled function
accepts any batch, sequence length, head count and strides.

How a call reaches the GPU: functions compiled for the GPU present go through the DSL's
TVM-FFI path (``--enable-tvm-ffi``, :data:`LAUNCH_OPTIONS`): the compiled function takes the
torch tensors (``None`` for an absent LSE) and Python floats themselves and launches on
torch's current stream, a small part of the host time that wrapping each tensor with
``from_dlpack(...).mark_layout_dynamic(...)`` and passing a ``CUstream`` took (the host path's
cost: docs/methodology.md, "Kernels without the host"). Builds for inspection on a
CPU-only machine keep the plain host function (they never run).

Compile-time key (one compiled function per value): rung, head_dim, causal, dtype, whether
the LSE output is written, and the rung's tuning knobs (keyword arguments of its constructor,
e.g. a tile plan; the rung's defaults when none are given). The softmax scale is a runtime
``Float32`` argument.
"""

from __future__ import annotations

import inspect
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

from ..harness.problem import AttentionProblem
from ..harness.validate import validate_attention_inputs

# Every global-memory access of the ladder moves 16 bytes (8 bf16 values) at a time, so rows
# must start on 16-byte boundaries.
ALIGN_BYTES = 16

MAX_GRID_YZ = 65535

CUTE_DTYPES = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16, "e4m3": cutlass.Float8E4M3FN}

INSPECT_ARCH = "sm_90a"
# --gpu-arch pins the target without a GPU (same effect as CUTE_DSL_ARCH=sm_90a).
# --keep-ptx/--keep-cubin also write files: into a temporary folder, never the working tree, and
# one per process: two processes building kernels of the same name (pytest -n, a variant and its
# default) would otherwise overwrite each other's files between the write and the read back.
INSPECT_DUMP_DIR = Path(tempfile.gettempdir()) / f"cute-dsl-dump-{os.getpid()}"
INSPECT_OPTIONS = f"--gpu-arch {INSPECT_ARCH} --keep-ptx --keep-cubin --dump-dir {INSPECT_DUMP_DIR}"


# ---- input validation --------------------------------------------------------------------
def persistent_ctas(ctas) -> int:
    """A persistent rung's CTA count: the ``ctas`` knob (an int >= 1), else the GPU's SM count."""
    if ctas is None:
        return sm_count()
    if isinstance(ctas, bool) or not isinstance(ctas, int) or ctas < 1:
        raise ValueError(f"ctas must be a positive int (CTAs of the persistent grid), got {ctas!r}")
    return ctas


def l2_sections_knob(l2_heads):
    """The ``l2_heads`` knob as given (None: no sections, 0: as many as fit in L2, n: n), checked."""
    if l2_heads is not None and (isinstance(l2_heads, bool) or not isinstance(l2_heads, int) or l2_heads < 0):
        raise ValueError(f"l2_heads must be None or an int >= 0 (0: as many as fit in L2), got {l2_heads!r}")
    return l2_heads


def sm_count() -> int:
    """SMs of the current GPU, for persistent grids (132, an H200's or H100 SXM's, when no GPU
    is visible, as when compiling for inspection)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 132


def check_output_buffers(name: str, out, lse) -> None:
    """run_kernel needs ``out`` (the shared validator treats it as optional)."""
    import torch

    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name}: out must be a torch.Tensor, got {type(out).__name__}")
    if lse is not None and not isinstance(lse, torch.Tensor):
        raise TypeError(f"{name}: lse must be a torch.Tensor or None, got {type(lse).__name__}")


def check_vector_alignment(name: str, **tensors) -> None:
    """16-byte vector loads/stores need 16-byte aligned base pointers and row strides."""
    for tname, t in tensors.items():
        elems = ALIGN_BYTES // t.element_size()
        if t.data_ptr() % ALIGN_BYTES:
            raise ValueError(f"{name}: {tname} data pointer must be {ALIGN_BYTES}-byte aligned")
        bad = [s for s in t.stride()[:-1] if s % elems]
        if bad:
            raise ValueError(f"{name}: {tname} strides {t.stride()} must be multiples of {elems} "
                             f"elements ({ALIGN_BYTES} bytes) except the last")


def check_grid_limits(name: str, q) -> None:
    """Heads and batch index grid.y and grid.z (at most 65535 each)."""
    batch, _, heads_q, _ = q.shape
    if heads_q > MAX_GRID_YZ or batch > MAX_GRID_YZ:
        raise ValueError(f"{name}: batch ({batch}) and heads_q ({heads_q}) must be <= {MAX_GRID_YZ}")


# ---- compile-time stand-ins, and the launch path ----------------------------------------------
# The TVM-FFI launch path (module docstring): the compile option, and the stream argument that
# it fills with torch's current stream.
LAUNCH_OPTIONS = "--enable-tvm-ffi"


def fake_stream(tvm_ffi: bool):
    """The stream argument at compile time: under TVM-FFI, torch's current stream at each call."""
    return make_fake_stream(use_tvm_ffi_env_stream=tvm_ffi)


def fake_bshd(dtype):
    """Compile-time stand-in for a BSHD torch tensor: symbolic extents and strides, contiguous
    last mode, 16-byte aligned (checked before every call: ``check_vector_alignment``)."""
    shape = tuple(cute.sym_int() for _ in range(4))
    stride = (cute.sym_int64(), cute.sym_int64(), cute.sym_int64(), 1)
    return make_fake_tensor(dtype, shape, stride, assumed_align=ALIGN_BYTES)


def fake_lse():
    shape = tuple(cute.sym_int() for _ in range(3))
    stride = (cute.sym_int64(), cute.sym_int64(), 1)
    return make_fake_tensor(cutlass.Float32, shape, stride, assumed_align=4)


def default_fake_arguments(dtype, has_lse: bool, tvm_ffi: bool) -> tuple:
    """Compile-time stand-ins for the host function every rung shares (:func:`compile_fmha`)."""
    return (fake_bshd(dtype), fake_bshd(dtype), fake_bshd(dtype), fake_bshd(dtype),
            fake_lse() if has_lse else None, cutlass.Float32(1.0), fake_stream(tvm_ffi))


# ---- compile cache ---------------------------------------------------------------------------
@dataclass(frozen=True)
class CompileKey:
    """Every compile-time choice of a rung; runtime sizes are not part of it."""

    rung: str
    head_dim: int
    causal: bool
    dtype: str
    has_lse: bool
    arch: str = "device"  # "device" = the GPU present; INSPECT_ARCH for CPU-only builds
    knobs: tuple = ()  # sorted (name, value) pairs passed to the rung's constructor


_COMPILED: dict[CompileKey, object] = {}
COMPILE_SECONDS: dict[CompileKey, float] = {}


def compile_fmha(kernel_cls: Callable, key: CompileKey, options: str | None = None):
    """Trace and compile ``kernel_cls(head_dim, causal, dtype, **knobs)`` once per key; without
    ``options`` (a build for the GPU present) with the TVM-FFI launch path.

    The JIT host function signature shared by all rungs is
    ``(mQ, mK, mV, mO, mLSE | None, softmax_scale: Float32, stream)``; a kernel class with
    other arguments (FP8's descales, K12; K13's tile counter) says which with a method
    ``fake_arguments(has_lse, tvm_ffi)``.
    """
    if key in _COMPILED:
        return _COMPILED[key]
    fmha = kernel_cls(head_dim=key.head_dim, causal=key.causal, dtype=CUTE_DTYPES[key.dtype],
                      **dict(key.knobs))
    dtype = CUTE_DTYPES[key.dtype]
    tvm_ffi = options is None
    if hasattr(fmha, "fake_arguments"):
        args = fmha.fake_arguments(key.has_lse, tvm_ffi)
    else:
        args = default_fake_arguments(dtype, key.has_lse, tvm_ffi)
    start = time.perf_counter()
    compiled = cute.compile(fmha, *args, options=LAUNCH_OPTIONS if tvm_ffi else options)
    COMPILE_SECONDS[key] = time.perf_counter() - start
    _COMPILED[key] = compiled
    return compiled


class CompiledFMHA:
    """What ``compile_kernel(problem)`` returns: the problem's compile-time choices, its
    softmax scale (a runtime argument), and the compiled functions shared through the cache.

    The variant that writes LSE is compiled on first use with an ``lse`` tensor.
    """

    def __init__(self, rung: str, kernel_cls: Callable, problem: AttentionProblem, knobs: tuple = ()):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(f"{rung}: compile_kernel needs a CUDA GPU; on a CPU-only machine use "
                               f"compile_for_inspect(problem)")
        self.rung = rung
        self.kernel_cls = kernel_cls
        self.problem = problem
        self.head_dim = problem.head_dim
        self.causal = problem.causal
        self.dtype = problem.dtype
        self.softmax_scale = float(problem.softmax_scale)
        self.knobs = knobs
        self.function(has_lse=False)

    def key(self, has_lse: bool) -> CompileKey:
        return CompileKey(self.rung, self.head_dim, self.causal, self.dtype, has_lse, knobs=self.knobs)

    def function(self, has_lse: bool):
        return compile_fmha(self.kernel_cls, self.key(has_lse))

    def __repr__(self) -> str:
        knobs = "".join(f", {name}={value}" for name, value in self.knobs)
        return (f"CompiledFMHA({self.rung}, head_dim={self.head_dim}, causal={self.causal}, "
                f"dtype={self.dtype}, scale={self.softmax_scale:.6g}{knobs})")


def check_fmha_call(name: str, head_dim: int, dtype, q, k, v, out, lse=None, *,
                    require_cuda: bool = True) -> None:
    """Everything run_fmha checks before a launch, for a rung compiled for ``head_dim`` and
    ``dtype`` (``require_cuda=False``: the same checks on CPU tensors, for tests)."""
    check_output_buffers(name, out, lse)
    # Contiguous BSHD only, by the repository-wide contract. The kernels themselves take any
    # strides that are multiples of 16 bytes (see bshd_tensor); admitting them is a change here.
    validate_attention_inputs(q, k, v, out, lse, name=name, head_dims=(head_dim,), dtypes=(dtype,),
                              require_cuda=require_cuda)
    check_vector_alignment(name, q=q, k=k, v=v, out=out)
    check_grid_limits(name, q)


def run_fmha(compiled: CompiledFMHA, q, k, v, out, lse=None, extra_args: Callable | None = None) -> None:
    """Validate, convert and launch on torch's current stream of q's device. ``extra_args(q)``:
    arguments a rung's host function takes after the softmax scale (K13's tile counter)."""
    import torch

    if not isinstance(compiled, CompiledFMHA):
        raise TypeError(f"expected the result of compile_kernel(problem), got {type(compiled).__name__}")
    check_fmha_call(compiled.rung, compiled.head_dim, compiled.problem.torch_dtype, q, k, v, out, lse)
    function = compiled.function(has_lse=lse is not None)
    with torch.cuda.device(q.device):
        function(q, k, v, out, lse, compiled.softmax_scale, *(extra_args(q) if extra_args else ()))


def compile_for_inspect(rung: str, kernel_cls: Callable, problem: AttentionProblem, *, has_lse: bool = False,
                        knobs: tuple = ()):
    """Compile for sm_90a on a machine without a GPU; the result has ``__ptx__``/``__cubin__``."""
    key = CompileKey(rung, problem.head_dim, problem.causal, problem.dtype, has_lse, INSPECT_ARCH, knobs)
    INSPECT_DUMP_DIR.mkdir(parents=True, exist_ok=True)
    return compile_fmha(kernel_cls, key, INSPECT_OPTIONS)


class RungAPI:
    """The interface every rung module exports (``can_implement``, ``compile_kernel``,
    ``run_kernel``, ``compile_for_inspect``), written once for all of them (the FP8 rungs'
    launch differs: ``kernels.cute.fp8.Fp8RungAPI``)."""

    def __init__(self, rung: str, kernel_cls: Callable, head_dims: tuple, dtypes: tuple,
                 tile_configs: dict | None = None):
        self.rung, self.kernel_cls, self.head_dims, self.dtypes = rung, kernel_cls, head_dims, dtypes
        # Hopper rungs: head_dim -> default TilePlan (the smem plan the compile report shows).
        self.tile_configs = tile_configs

    def shared_bytes(self, head_dim: int, dtype_bytes: int = 2) -> int | None:
        """Dynamic shared memory of the default tile plan at ``head_dim`` (None if not planned)."""
        plan = (self.tile_configs or {}).get(head_dim)
        return plan.shared_bytes(dtype_bytes) if plan is not None else None

    def can_implement(self, problem: AttentionProblem) -> str | None:
        """None if the rung supports ``problem``, else the reason."""
        if problem.head_dim not in self.head_dims:
            return f"{self.rung}: head_dim {problem.head_dim} unsupported (supported: {list(self.head_dims)})"
        if problem.dtype not in self.dtypes:
            return f"{self.rung}: dtype {problem.dtype} unsupported (supported: {list(self.dtypes)})"
        if problem.batch > MAX_GRID_YZ or problem.heads_q > MAX_GRID_YZ:  # as check_grid_limits
            return (f"{self.rung}: batch ({problem.batch}) and heads_q ({problem.heads_q}) must be "
                    f"<= {MAX_GRID_YZ}")
        return None

    def knob_error(self, problem: AttentionProblem, **knobs) -> str | None:
        """None if the rung's constructor takes ``knobs`` for ``problem``, else why not: the
        checks a compile would make first (a tile plan's fields and fit, a knob's range), without
        compiling (a variant's compile report on a machine without a GPU covers the defaults).
        A knob annotated ``bool`` (or ``bool | None``) takes True or False only: a string such as
        'yes' would otherwise count as true."""
        parameters = inspect.signature(self.kernel_cls.__init__).parameters
        for name, value in knobs.items():
            annotation = parameters[name].annotation if name in parameters else ""
            annotation = "bool" if annotation is bool else str(annotation)
            if annotation in ("bool", "bool | None") and not (isinstance(value, bool) or
                                                              (value is None and "None" in annotation)):
                return f"{self.rung}: {name} must be True or False, got {value!r}"
        try:
            self.kernel_cls(head_dim=problem.head_dim, causal=problem.causal,
                            dtype=CUTE_DTYPES[problem.dtype], **knobs)
        except (TypeError, ValueError) as exc:
            return f"{self.rung}: {exc}"
        return None

    def _require_supported(self, problem: AttentionProblem) -> None:
        reason = self.can_implement(problem)
        if reason is not None:
            raise ValueError(reason)

    def compile_kernel(self, problem: AttentionProblem, **knobs) -> CompiledFMHA:
        """Compile (or fetch from the cache) for ``problem``'s head_dim, causal flag and dtype;
        ``knobs`` are tuning keywords of the rung's constructor (e.g. ``plan=TilePlan(...)``)."""
        self._require_supported(problem)
        error = self.knob_error(problem, **knobs) if knobs else None
        if error:  # a knob the constructor would take wrongly (pingpong="no" counted as True)
            raise ValueError(error)
        return CompiledFMHA(self.rung, self.kernel_cls, problem, tuple(sorted(knobs.items())))

    @staticmethod
    def run_kernel(compiled: CompiledFMHA, q, k, v, out, lse=None) -> None:
        """out[...] = attention(q, k, v) on torch's current stream; lse (fp32 [B, Hq, Sq]) if given."""
        run_fmha(compiled, q, k, v, out, lse)

    def compile_for_inspect(self, problem: AttentionProblem, has_lse: bool = False, **knobs):
        """sm_90a build without a GPU; the result has ``__ptx__`` and ``__cubin__``."""
        self._require_supported(problem)
        return compile_for_inspect(self.rung, self.kernel_cls, problem, has_lse=has_lse,
                                   knobs=tuple(sorted(knobs.items())))
