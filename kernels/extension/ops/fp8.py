"""Stateless FP8 primitives over the fp8 CUDA module (csrc/kernels/fp8/fp8.cpp), registered as
torch operators (a schema, a CUDA kernel and a fake (meta) implementation) so they trace under
`torch.compile` and run on meta tensors. They are registered on the dispatcher directly
(`torch.library.Library`), not through `torch.library.custom_op`, whose Python wrapper (autograd
and aliasing checks on every call) costs about three times as much host time per call: a
decode step calls them once per linear layer, where the host is all there is. For the same
reason their CUDA kernels are C++ (`gemm_kernel` and `quantize_kernel` in fp8.cpp, registered as the
module loads, which this module does on import where the module is built); their checks stay here.

* `torch.ops.kernels.fp8_quantize(x, scale, fp8_dtype, rowwise, transpose)
  -> (out, out_t, amax)`: `out = saturate(x * scale)` in `fp8_dtype` with x's shape
  (empty `[0]` when `rowwise=False`), `out_t` the `[K, rows]` transpose of x viewed as
  `[rows, K]` (empty when `transpose=False`), `amax = max|x|` (float32 scalar, input
  domain). x bf16, scale a float32 scalar tensor (the multiplier, e.g. `448 / amax`).
* `torch.ops.kernels.fp8_gemm(a, b, scale_a, scale_b, bias, row_scale, col_scale, path,
  block_n, persistent, split_k) -> out`: `out[M, N] = a[M, K] @ b[N, K]^T * scale_a * scale_b
  (* row_scale[:, None]) (* col_scale) (+ bias)` in bf16; `scale_a/scale_b` are dequant
  factors (the reciprocals of the quantize multipliers), float32 scalars. K % 16 == 0;
  a, b 16-byte aligned with row strides that are multiples of 16 bytes; format pairs
  e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3. `path` -1 auto / 0 WGMMA (sm_90a) / 1 mma.sync /
  2 GEMV (M <= 16: one mma.sync m16n8k32 row tile, b streamed from global memory into its
  fragments, fp32 accumulation) / 3 swap-AB GEMV (M <= 128, sm_90a: 128 or 64 rows of b in
  WGMMA's M slot, a's rows in the narrowest of its n16 / n32 / n64 / n128 that holds them, fed by
  a TMA ring of up to 16 stages, every 128-deep k-block promoted to fp32, split-K inside a
  thread-block cluster; M > 128 raises ValueError). Auto, unless `block_n`, `persistent` or
  `split_k` ask for the tiled kernels: on sm_90a path 3 for 16 < M <= 64, for M <= 128 where
  blocks of 64 rows of b fill more SMs (N = 4096) and for M <= 16 once b holds 16 Mi values;
  path 2 for the other M <= 16; else the tiled kernels
  (fp8::gemm::GemvTmaPolicy::planner_takes, measured on the H200);
  `block_n` 0 auto / 64 / 128 / 176 / 192 / 256; `persistent` -1 auto / 0 / 1; `split_k`
  0 planner / 1 none / 2..64 slices of K (WGMMA path; the slices' fp32 partials go to a
  workspace the op allocates from torch's caching allocator and a second kernel sums them in
  order, so results are deterministic). On its own the planner splits only a single row of
  tiles that fills at most half the SMs at K >= 4096, in two (M = 128, N = 4096 on the H200);
  its general split-K model is off: it won on some decode-sized shapes and lost on as many. Accuracy:
  every configuration accumulates in fp32 (WGMMA promotes the partial sum of every two
  128-deep k-blocks into fp32 registers; the error stays that of torch._scaled_mm's default),
  except `path=0, block_n=256`, which keeps the WGMMA accumulator only (faster, like
  torch._scaled_mm(use_fast_accum=True)); the planner never picks it itself.

* `torch.ops.kernels.fp8_quantize_blocks(x) -> (out, scale)`: x bf16 `[..., K]` quantized per
  row and 128 columns, the activations' half of block-scaled FP8: `scale[g, r] = amax / 448`
  (1 where the block is zero) over row r's columns 128 g .. 128 g + 127, `out = e4m3(x / scale)`
  saturated, x's shape; scale float32 `[ceil(K / 128), rows]` (rows: x's leading dims
  flattened), the layout fp8_gemm_block_scaled takes. The same bits as the torch computation
  (`kernels.extension.backend.fp8.quantize_activation_blocks` off the GPU). sm_89 or newer.
* `torch.ops.kernels.fp8_gemm_block_scaled(a, b, block_scale_a, block_scale_b, bias, split_k)
  -> out`: block-scaled FP8 (the recipe FP8 checkpoints such as DeepSeek-V3's ship with):
  `out[m, n] = sum over k-blocks kb of (a[m, kb] @ b[n, kb]) * block_scale_a[kb, m] *
  block_scale_b[n // 128, kb] (+ bias)` in bf16, with k-blocks of 128: a's scales per row and
  k-block (`[ceil(K / 128), M]`, M contiguous), b's per 128 x 128 block (`[ceil(N / 128),
  ceil(K / 128)]`), float32 dequant factors; a, b e4m3 with fp8_gemm's layout rules; sm_90a (its
  WGMMA tiles of 128 x 128, each k-block's partial sum scaled and added in fp32).

CUDA only: on a CPU tensor they raise NotImplementedError saying so. Bad inputs raise
TypeError / ValueError from the same checks in the real and the fake implementation.
"""

from __future__ import annotations

import functools

import torch

from .. import loader

MODULE = "fp8"
FP8_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}
SUPPORTED_PAIRS = {(torch.float8_e4m3fn, torch.float8_e4m3fn),
                   (torch.float8_e4m3fn, torch.float8_e5m2),
                   (torch.float8_e5m2, torch.float8_e4m3fn)}


def is_available() -> bool:
    return loader.available(MODULE)


# ---- checks shared by the real and the fake implementations ----------------------------------

def _check_scalar(t: torch.Tensor, name: str, device) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise TypeError(f"{name} must be float32, got {t.dtype}")
    if t.numel() != 1:
        raise ValueError(f"{name} must hold one value, got shape {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, expected {device}")


def check_quantize_args(x, scale, fp8_dtype, rowwise, transpose) -> None:
    if x.dtype != torch.bfloat16:
        raise TypeError(f"x must be bfloat16, got {x.dtype}")
    if fp8_dtype not in FP8_MAX:
        raise TypeError(f"fp8_dtype must be torch.float8_e4m3fn or torch.float8_e5m2, got {fp8_dtype}")
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension")
    _check_scalar(scale, "scale", x.device)


def _gemm_args_pass(a, b, scale_a, scale_b, bias, row_scale, col_scale, real) -> bool:
    """Whether check_gemm_args passes, read in one pass: it runs on every call of a decode step
    (one per linear layer), where its checks one by one cost about three times as much host
    time. False for anything it does not take (then check_gemm_args' checks name the problem)."""
    if (a.dtype, b.dtype) not in SUPPORTED_PAIRS or a.dim() != 2 or b.dim() != 2:
        return False
    device = a.device
    (m, k), (n, k_b) = a.shape, b.shape
    (a_rows, a_cols), (b_rows, b_cols) = a.stride(), b.stride()
    if (k_b != k or k % 16 or b.device != device or a_cols != 1 or b_cols != 1
            or (k and ((m > 1 and a_rows % 16) or (n > 1 and b_rows % 16)))):  # fp8: strides are bytes
        return False
    if real:
        if a.data_ptr() % 16 or b.data_ptr() % 16:
            return False
    elif a.storage_offset() % 16 or b.storage_offset() % 16:
        return False
    if not (isinstance(scale_a, torch.Tensor) and scale_a.dtype == torch.float32 and scale_a.numel() == 1
            and isinstance(scale_b, torch.Tensor) and scale_b.dtype == torch.float32 and scale_b.numel() == 1
            and scale_a.device == device and scale_b.device == device):
        return False
    if bias is None and row_scale is None and col_scale is None:
        return True
    for t, size, dtype in ((bias, n, torch.bfloat16), (row_scale, m, torch.float32),
                           (col_scale, n, torch.float32)):
        if t is not None and (t.dtype != dtype or t.shape != (size,) or t.device != device
                              or t.stride(0) != 1):
            return False
    return True


def check_gemm_args(a, b, scale_a, scale_b, bias, row_scale, col_scale, real=False) -> None:
    """real: a and b hold memory (the CUDA implementation), so their addresses are checked;
    fake/meta tensors have none and their storage offset stands in for it."""
    if _gemm_args_pass(a, b, scale_a, scale_b, bias, row_scale, col_scale, real):
        return
    for name, t in (("a", a), ("b", b)):
        if t.dtype not in FP8_MAX:
            raise TypeError(f"{name} must be float8_e4m3fn or float8_e5m2, got {t.dtype}")
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    if (a.dtype, b.dtype) not in SUPPORTED_PAIRS:
        raise TypeError(f"unsupported format pair {a.dtype} x {b.dtype} "
                        "(supported: e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3)")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"a [M, K] = {tuple(a.shape)} and b [N, K] = {tuple(b.shape)} "
                         "disagree on K")
    if a.shape[1] % 16:
        raise ValueError(f"K = {a.shape[1]} must be a multiple of 16 (16-byte rows)")
    if b.device != a.device:
        raise ValueError(f"a is on {a.device}, b on {b.device}")
    if a.stride(-1) != 1 or b.stride(-1) != 1:
        raise ValueError("a and b must be K-major (contiguous last dim)")
    for name, t in (("a", a), ("b", b)):
        # TMA and cp.async move 16-byte chunks: checked here so the launcher never sees it
        rows_stride = t.stride(0) if t.shape[0] > 1 and t.shape[1] > 0 else 0
        if rows_stride % 16:
            raise ValueError(f"{name} row stride {rows_stride} bytes must be a multiple of 16")
        address = t.data_ptr() if real else t.storage_offset() * t.element_size()
        if address % 16:
            raise ValueError(f"{name} must start 16-byte aligned (address % 16 = {address % 16}); "
                             "pass a .contiguous() copy")
    _check_scalar(scale_a, "scale_a", a.device)
    _check_scalar(scale_b, "scale_b", a.device)
    m, n = a.shape[0], b.shape[0]
    for name, t, size, dtype in (("bias", bias, n, torch.bfloat16),
                                 ("row_scale", row_scale, m, torch.float32),
                                 ("col_scale", col_scale, n, torch.float32)):
        if t is None:
            continue
        if t.dtype != dtype:
            raise TypeError(f"{name} must be {dtype}, got {t.dtype}")
        if t.shape != (size,):
            raise ValueError(f"{name} must have shape ({size},), got {tuple(t.shape)}")
        if t.device != a.device:
            raise ValueError(f"{name} is on {t.device}, expected {a.device}")
        if t.stride(0) != 1:
            raise ValueError(f"{name} must be contiguous")


MAX_SPLIT_K = 64  # fp8::gemm::kMaxSplitK


PATHS = (-1, 0, 1, 2, 3)
BLOCK_NS = (0, 64, 128, 176, 192, 256)
PERSISTENT = (-1, 0, 1)


def check_plan_args(path, block_n, persistent, split_k=0) -> None:
    # plain ints in range first: what every call through the dispatcher passes
    if (type(path) is int and type(block_n) is int and type(persistent) is int and type(split_k) is int
            and path in PATHS and block_n in BLOCK_NS and persistent in PERSISTENT
            and 0 <= split_k <= MAX_SPLIT_K):
        return
    for name, value, allowed in (("path", path, PATHS),
                                 ("block_n", block_n, BLOCK_NS),
                                 ("persistent", persistent, PERSISTENT)):
        if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
    if isinstance(split_k, bool) or not isinstance(split_k, int) or not 0 <= split_k <= MAX_SPLIT_K:
        raise ValueError(f"split_k must be 0 (auto), 1 (none) or 2..{MAX_SPLIT_K}, got {split_k!r}")


GEMV_TMA_MAX_ROWS = 128  # fp8::gemm::GemvTmaPolicy::kMaxRows (WGMMA n 16 / 32 / 64 / 128)


def check_path_rows(m, path) -> None:
    """The swap-AB GEMV (path=3) holds a's rows in one WGMMA n of at most 128."""
    if path == 3 and m > GEMV_TMA_MAX_ROWS:
        raise ValueError(f"the gemv_tma path (path=3) takes M <= {GEMV_TMA_MAX_ROWS} "
                         f"(WGMMA n 16 / 32 / 64 / 128), got M={m}")


@functools.cache  # the device's, read once: torch.cuda.get_device_capability costs microseconds a call
def _capability(index: int) -> tuple[int, int]:
    return tuple(torch.cuda.get_device_capability(index))


def check_path_on_device(device, path) -> None:
    if device.type != "cuda":
        return
    cc = _capability(device.index if device.index is not None else torch.cuda.current_device())
    if cc < (8, 9):
        raise NotImplementedError(f"fp8 gemm needs sm_89 or newer, {device} is sm_{cc[0]}{cc[1]}")
    if path in (0, 3) and cc != (9, 0):
        name = "WGMMA" if path == 0 else "gemv_tma"
        raise NotImplementedError(f"the {name} path (path={path}) needs sm_90a, "
                                  f"{device} is sm_{cc[0]}{cc[1]}")


# ---- quantize ----------------------------------------------------------------------------------

def _rows_of(x) -> tuple[int, int]:
    """(rows, K) of x [..., K] viewed as a matrix."""
    k = x.shape[-1]
    return (x.numel() // k if k else 0), k


def _as_rows(x: torch.Tensor) -> torch.Tensor:
    """x [..., K] as [rows, K] with contiguous rows (what the quantize kernels read)."""
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 else x2.contiguous()


def _quantize_shapes(x, rowwise, transpose):
    rows, k = _rows_of(x)
    return (tuple(x.shape) if rowwise else (0,)), ((k, rows) if transpose else (0,))


_LIBRARY = torch.library.Library("kernels", "FRAGMENT")
_LIBRARY.define("fp8_quantize(Tensor x, Tensor scale, ScalarType fp8_dtype, bool rowwise=True, "
                "bool transpose=False) -> (Tensor, Tensor, Tensor)")
_LIBRARY.define("fp8_gemm(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
                "Tensor? row_scale=None, Tensor? col_scale=None, int path=-1, int block_n=0, "
                "int persistent=-1, int split_k=0) -> Tensor")
_LIBRARY.define("fp8_quantize_blocks(Tensor x) -> (Tensor, Tensor)")
_LIBRARY.define("fp8_gemm_block_scaled(Tensor a, Tensor b, Tensor block_scale_a, Tensor block_scale_b, "
                "Tensor? bias=None, int split_k=0) -> Tensor")


def fp8_quantize(x: torch.Tensor, scale: torch.Tensor, fp8_dtype: torch.dtype,
                 rowwise: bool = True, transpose: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``torch.ops.kernels.fp8_quantize``'s CUDA kernel where the module was not loaded with this
    one (see _register_cuda_kernels): it says how to build the module, or loads one built since."""
    check_quantize_args(x, scale, fp8_dtype, rowwise, transpose)
    module = loader.load(MODULE)
    out_shape, t_shape = _quantize_shapes(x, rowwise, transpose)
    out = torch.empty(out_shape, dtype=fp8_dtype, device=x.device)
    out_t = torch.empty(t_shape, dtype=fp8_dtype, device=x.device)
    amax = torch.zeros((), dtype=torch.float32, device=x.device)
    if x.numel():
        x2 = _as_rows(x)
        module.quantize(x2, scale, out.view(x2.shape) if rowwise else None,
                        out_t if transpose else None, amax.view(1))
    return out, out_t, amax


@torch.library.register_fake("kernels::fp8_quantize", lib=_LIBRARY)
def _(x, scale, fp8_dtype, rowwise=True, transpose=False):
    check_quantize_args(x, scale, fp8_dtype, rowwise, transpose)
    out_shape, t_shape = _quantize_shapes(x, rowwise, transpose)
    return (x.new_empty(out_shape, dtype=fp8_dtype), x.new_empty(t_shape, dtype=fp8_dtype),
            x.new_empty((), dtype=torch.float32))


# ---- GEMM --------------------------------------------------------------------------------------

def check_gemm_call(a, b, scale_a, scale_b, bias=None, row_scale=None, col_scale=None, path=-1, block_n=0,
                    persistent=-1, split_k=0, real=True) -> None:
    """Every check of a ``fp8_gemm`` call, the first failure raised. The fake kernel runs it
    (``real=False``: no memory, no device to ask), and so does the CUDA kernel, the module's C++
    ``gemm_kernel``, on a call that its own test of the same conditions refuses: the errors and
    their messages live here only."""
    check_gemm_args(a, b, scale_a, scale_b, bias, row_scale, col_scale, real=real)
    check_plan_args(path, block_n, persistent, split_k)
    check_path_rows(a.shape[0], path)
    if real:
        check_path_on_device(a.device, path)


def fp8_gemm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
             bias: torch.Tensor | None = None, row_scale: torch.Tensor | None = None,
             col_scale: torch.Tensor | None = None, path: int = -1, block_n: int = 0,
             persistent: int = -1, split_k: int = 0) -> torch.Tensor:
    """``torch.ops.kernels.fp8_gemm``'s CUDA kernel where the module was not loaded with this one
    (see _register_cuda_kernels): it says how to build the module, or loads one built since."""
    check_gemm_call(a, b, scale_a, scale_b, bias, row_scale, col_scale, path, block_n, persistent, split_k)
    module = loader.load(MODULE)
    out = torch.empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16, device=a.device)
    module.gemm(a, b, scale_a, scale_b, bias, row_scale, col_scale, out, path, block_n, persistent,
                split_k=split_k)
    return out


# ---- block-scaled GEMM -------------------------------------------------------------------------

BLOCK_K = 128  # k-block of the block scales (and of the kernel's promotion)
BLOCK_N = 128  # b's scale blocks are BLOCK_N x BLOCK_K


def block_scale_shapes(m: int, n: int, k: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The shapes of fp8_gemm_block_scaled's scales for a [M, K] x [N, K]^T problem."""
    k_blocks = -(-k // BLOCK_K)
    return (k_blocks, m), (-(-n // BLOCK_N), k_blocks)


@functools.cache
def _one(device: torch.device) -> torch.Tensor:
    """A float32 1 on ``device``: the per-tensor factors of a block-scaled call (real calls only:
    a tensor made under FakeTensorMode must not be cached for them)."""
    return torch.ones((), dtype=torch.float32, device=device)


def check_block_scaled_call(a, b, block_scale_a, block_scale_b, bias=None, split_k=0, real=True) -> None:
    """Every check of a ``fp8_gemm_block_scaled`` call, the first failure raised (its fake kernel
    runs it with ``real=False``)."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float8_e4m3fn:
            got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
            raise TypeError(f"{name} must be float8_e4m3fn (block scaling takes e4m3 x e4m3), got {got}")
    # the per-tensor factors the kernel gets (ones); a fake call's own, never the cached real one
    one = _one(a.device) if real else a.new_empty((), dtype=torch.float32)
    check_gemm_args(a, b, one, one, bias, None, None, real=real)
    if isinstance(split_k, bool) or not isinstance(split_k, int) or not 0 <= split_k <= MAX_SPLIT_K:
        raise ValueError(f"split_k must be 0 (auto), 1 (none) or 2..{MAX_SPLIT_K}, got {split_k!r}")
    shapes = block_scale_shapes(a.shape[0], b.shape[0], a.shape[1])
    for name, t, shape in (("block_scale_a", block_scale_a, shapes[0]),
                           ("block_scale_b", block_scale_b, shapes[1])):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise TypeError(f"{name} must be float32, got {t.dtype}")
        if tuple(t.shape) != shape:
            layout = "[ceil(K / 128), M]" if name == "block_scale_a" else "[ceil(N / 128), ceil(K / 128)]"
            raise ValueError(f"{name} must have shape {shape} ({layout}), got {tuple(t.shape)}")
        if t.device != a.device:
            raise ValueError(f"{name} is on {t.device}, expected {a.device}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    if real:
        check_path_on_device(a.device, 0)


def check_quantize_blocks_args(x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if x.dtype != torch.bfloat16:
        raise TypeError(f"x must be bfloat16, got {x.dtype}")
    if x.dim() < 1:
        raise ValueError("x must have at least one dimension")


def _quantize_blocks_shapes(x):
    rows, k = _rows_of(x)
    return block_scale_shapes(rows, 0, k)[0]


def fp8_quantize_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.ops.kernels.fp8_quantize_blocks``'s CUDA kernel: the module's ``quantize_blocks``."""
    check_quantize_blocks_args(x)
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(_quantize_blocks_shapes(x), dtype=torch.float32, device=x.device)
    if x.numel():
        x2 = _as_rows(x)
        loader.load(MODULE).quantize_blocks(x2, out.view(x2.shape), scale)
    return out, scale


_LIBRARY.impl("fp8_quantize_blocks", fp8_quantize_blocks, "CUDA")


@torch.library.register_fake("kernels::fp8_quantize_blocks", lib=_LIBRARY)
def _(x):
    check_quantize_blocks_args(x)
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn), x.new_empty(_quantize_blocks_shapes(x),
                                                                         dtype=torch.float32)


def fp8_gemm_block_scaled(a: torch.Tensor, b: torch.Tensor, block_scale_a: torch.Tensor,
                          block_scale_b: torch.Tensor, bias: torch.Tensor | None = None,
                          split_k: int = 0) -> torch.Tensor:
    """``torch.ops.kernels.fp8_gemm_block_scaled``'s CUDA kernel: the module's ``gemm`` with block
    scales (the block-scaled WGMMA kernel)."""
    check_block_scaled_call(a, b, block_scale_a, block_scale_b, bias, split_k)
    module = loader.load(MODULE)
    out = torch.empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16, device=a.device)
    one = _one(a.device)
    module.gemm(a, b, one, one, bias, None, None, out, 0, 128, -1, split_k=split_k,
                block_scale_a=block_scale_a, block_scale_b=block_scale_b)
    return out


_LIBRARY.impl("fp8_gemm_block_scaled", fp8_gemm_block_scaled, "CUDA")


@torch.library.register_fake("kernels::fp8_gemm_block_scaled", lib=_LIBRARY)
def _(a, b, block_scale_a, block_scale_b, bias=None, split_k=0):
    check_block_scaled_call(a, b, block_scale_a, block_scale_b, bias, split_k, real=False)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16)


def _register_cuda_kernels() -> None:
    """The CUDA kernels of ``fp8_gemm`` and ``fp8_quantize``: the module's C++ ``gemm_kernel`` and
    ``quantize_kernel``, which loading the module registers, where the module is built (why: the
    module docstring); else :func:`fp8_gemm` and :func:`fp8_quantize`."""
    if loader.available(MODULE):
        try:
            loader.load(MODULE)
            return
        except (ImportError, OSError):  # a stale build: the Python kernels' first call says why
            pass
    _LIBRARY.impl("fp8_quantize", fp8_quantize, "CUDA")
    _LIBRARY.impl("fp8_gemm", fp8_gemm, "CUDA")


_register_cuda_kernels()


def _refuse_off_cuda(op: str, needs: str):
    """A kernel for the dispatcher's CPU key: the FP8 primitives run on CUDA devices only, and a
    CPU call says so (rather than the dispatcher's list of the backends it knows)."""
    def refuse(*args, **kwargs):
        devices = sorted({str(t.device) for t in args if isinstance(t, torch.Tensor)})
        raise NotImplementedError(f"kernels::{op} runs on CUDA devices ({needs}), "
                                  f"got tensors on {', '.join(devices)}")
    return refuse


_TENSOR_CORES = "sm_89 or newer: FP8 tensor cores"
for _op, _needs in (("fp8_quantize", _TENSOR_CORES), ("fp8_quantize_blocks", _TENSOR_CORES),
                    ("fp8_gemm", _TENSOR_CORES), ("fp8_gemm_block_scaled", "sm_90a: its WGMMA kernel")):
    _LIBRARY.impl(_op, _refuse_off_cuda(_op, _needs), "CPU")


@torch.library.register_fake("kernels::fp8_gemm", lib=_LIBRARY)
def _(a, b, scale_a, scale_b, bias=None, row_scale=None, col_scale=None, path=-1, block_n=0,
      persistent=-1, split_k=0):
    check_gemm_call(a, b, scale_a, scale_b, bias, row_scale, col_scale, path, block_n, persistent, split_k,
                    real=False)
    return a.new_empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16)


def gemm_plan(m: int, n: int, k: int, path: int = -1, block_n: int = 0, persistent: int = -1,
              split_k: int = 0) -> dict:
    """The host planner's choice (path, block_m, block_n, tiles, grid, persistent, split_k,
    workspace_bytes, fast_accum) on this GPU."""
    check_plan_args(path, block_n, persistent, split_k)
    return dict(loader.load(MODULE).plan(m, n, k, path, block_n, persistent, split_k=split_k))
