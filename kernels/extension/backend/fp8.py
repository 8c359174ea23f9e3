"""FP8 strategy layer: scaling recipes, `fp8_autocast` and FP8 linear layers.

The primitives (`kernels/extension/ops/fp8.py`: quantize, GEMM) are stateless; this module owns the state a
recipe needs and the policy of when to use them.

Recipes (how a tensor's quantization multiplier `scale = fp8_max / (amax * 2^margin)` is
chosen; the GEMM dequantizes with `1 / scale`):

* `DynamicScaling`: amax of the tensor itself, this step (one extra read: an amax-only pass
  of the quantize kernel, then the quantizing pass). Exact range use; no state.
* `DelayedScaling`: amax from a history of the last `amax_history_len` steps (`max` or
  `most_recent`); the current amax comes for free from the quantizing pass and is pushed into
  the history afterwards. One pass; state lives in the layer (`Fp8LinearState`).

Formats: `"e4m3"` everywhere, or `"hybrid"` (E4M3 forward, E5M2 gradients, the usual
choice). Every step stays on the device: no host synchronisation.

`with fp8_autocast(recipe=DelayedScaling()):` makes every `Fp8Linear` (and
`fp8_linear`) inside run its forward GEMM in FP8; outside it they are plain bf16 linears.
Backward (when autograd records): dgrad `dX = dY @ W` and wgrad `dW = dY^T @ X` also run in
FP8 when the reduction dimension allows it (N % 16 == 0 for dgrad, tokens % 16 == 0 for wgrad,
the GEMM's K alignment); otherwise that gradient is computed in bf16.
Needs the fp8 CUDA module and a CUDA device (sm_89+); elsewhere `fp8_autocast` raises.

Block-scaled FP8 (the recipe FP8 checkpoints such as DeepSeek-V3's ship with): a weight holds
one factor per 128 x 128 block (`quantize_weight_blocks`, or the checkpoint's), activations one
per row and 128 columns (`quantize_activation_blocks`, at run time), and
`block_scaled_linear` multiplies them with `torch.ops.kernels.fp8_gemm_block_scaled` (sm_90a);
`BlockScaledLinear` is the layer that holds such a weight (`from_linear`, or a checkpoint's).
`block_scaled_reference` is the same product in float64 from the dequantized operands.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from dataclasses import dataclass

import torch

from ..ops import fp8 as fp8_ops

__all__ = ["BlockScaledLinear", "DelayedScaling", "DynamicScaling", "Fp8Linear", "Fp8LinearState",
           "block_scaled_linear", "block_scaled_reference", "fp8_autocast", "fp8_linear", "get_recipe",
           "is_fp8_enabled", "quantize_activation_blocks", "quantize_dynamic", "quantize_weight_blocks"]

FORMATS = ("e4m3", "hybrid")


@dataclass(frozen=True)
class DynamicScaling:
    fp8_format: str = "hybrid"
    margin: int = 0

    def __post_init__(self):
        _check_recipe(self)


@dataclass(frozen=True)
class DelayedScaling:
    fp8_format: str = "hybrid"
    margin: int = 0
    amax_history_len: int = 16
    amax_compute_algo: str = "max"  # or "most_recent"

    def __post_init__(self):
        _check_recipe(self)
        if not _is_int(self.amax_history_len) or self.amax_history_len < 1:
            raise ValueError(f"amax_history_len must be an int >= 1, got {self.amax_history_len!r}")
        if self.amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(f"amax_compute_algo must be 'max' or 'most_recent', got "
                             f"{self.amax_compute_algo!r}")


# Headroom in powers of two: past this, amax * 2^margin overflows float32 for ordinary amaxes
# and the scale would be 0.
MAX_MARGIN = 32


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_recipe(recipe) -> None:
    if recipe.fp8_format not in FORMATS:
        raise ValueError(f"fp8_format must be one of {FORMATS}, got {recipe.fp8_format!r}")
    if not _is_int(recipe.margin) or not 0 <= recipe.margin <= MAX_MARGIN:
        raise ValueError(f"margin must be an int in [0, {MAX_MARGIN}], got {recipe.margin!r}")


def forward_dtype(recipe) -> torch.dtype:
    return torch.float8_e4m3fn


def backward_dtype(recipe) -> torch.dtype:
    return torch.float8_e5m2 if recipe.fp8_format == "hybrid" else torch.float8_e4m3fn


# ---- autocast state ------------------------------------------------------------------------

_state = threading.local()


def get_recipe():
    """The active recipe inside `fp8_autocast`, else None."""
    return getattr(_state, "recipe", None)


def is_fp8_enabled() -> bool:
    return get_recipe() is not None


@contextlib.contextmanager
def fp8_autocast(enabled: bool = True, recipe=None):
    """Run `Fp8Linear` / `fp8_linear` forwards (and their backwards) in FP8 inside.

    `recipe`: DynamicScaling or DelayedScaling (default: `DelayedScaling()`); `enabled=False`
    runs the block as plain linears (and needs no GPU). Enabled, it raises without a CUDA device
    of sm_89 or newer and the built fp8 module."""
    if recipe is None:
        recipe = DelayedScaling()
    if not isinstance(recipe, (DynamicScaling, DelayedScaling)):
        raise TypeError(f"recipe must be DynamicScaling or DelayedScaling, got {type(recipe).__name__}")
    if enabled:
        if not torch.cuda.is_available():
            raise RuntimeError("fp8_autocast needs a CUDA device")
        major, minor = torch.cuda.get_device_capability()
        if (major, minor) < (8, 9):
            raise NotImplementedError(f"FP8 GEMM needs sm_89 or newer, this GPU is sm_{major}{minor}")
        if not fp8_ops.is_available():
            raise RuntimeError("the fp8 module is not built (python -m tools.build_ext)")
    previous = get_recipe()
    _state.recipe = recipe if enabled else None
    try:
        yield
    finally:
        _state.recipe = previous


# ---- scaling -------------------------------------------------------------------------------

def _scale_from_amax(amax: torch.Tensor, fp8_dtype: torch.dtype, margin: int) -> torch.Tensor:
    """fp8_max / (amax * 2^margin) as a float32 scalar on the device; 1 where amax is 0, inf or
    NaN, or the quotient is not a positive normal number (a scale of 0 or inf would make the
    dequantized GEMM output NaN)."""
    fp8_max = fp8_ops.FP8_MAX[fp8_dtype]
    scale = fp8_max / (amax.float() * (2.0 ** margin))
    normal = torch.isfinite(scale) & (scale >= torch.finfo(torch.float32).tiny)
    usable = torch.isfinite(amax) & (amax > 0) & normal
    return torch.where(usable, scale, torch.ones_like(scale)).reshape(())


def quantize_dynamic(x: torch.Tensor, fp8_dtype: torch.dtype, margin: int = 0, *,
                     rowwise: bool = True, transpose: bool = False):
    """Current scaling: -> (x_fp8, x_fp8_t, dequant = 1 / scale, amax)."""
    ones = torch.ones((), dtype=torch.float32, device=x.device)
    _, _, amax = torch.ops.kernels.fp8_quantize(x, ones, fp8_dtype, False, False)
    scale = _scale_from_amax(amax, fp8_dtype, margin)
    out, out_t, _ = torch.ops.kernels.fp8_quantize(x, scale, fp8_dtype, rowwise, transpose)
    return out, out_t, scale.reciprocal(), amax


class Fp8LinearState:
    """Delayed-scaling state of one linear layer: an amax history and the current multiplier
    per tensor role (input, weight, grad_output), all on the device."""

    ROLES = ("input", "weight", "grad_output")

    def __init__(self, recipe: DelayedScaling, device):
        self.recipe = recipe
        self.history = torch.zeros(len(self.ROLES), recipe.amax_history_len, device=device)
        self.scale = torch.ones(len(self.ROLES), device=device)

    def quantize(self, role: str, x: torch.Tensor, fp8_dtype: torch.dtype, *, rowwise=True,
                 transpose=False):
        """Quantize with this role's current multiplier, then record x's amax and roll the
        multiplier forward for the next step. -> (x_fp8, x_fp8_t, dequant)."""
        i = self.ROLES.index(role)
        scale = self.scale[i].clone()
        out, out_t, amax = torch.ops.kernels.fp8_quantize(x, scale, fp8_dtype, rowwise, transpose)
        with torch.no_grad():
            self.history[i] = torch.roll(self.history[i], 1)
            self.history[i, 0] = amax
            ref = (self.history[i].max() if self.recipe.amax_compute_algo == "max"
                   else self.history[i, 0])
            self.scale[i] = _scale_from_amax(ref, fp8_dtype, self.recipe.margin)
        return out, out_t, scale.reciprocal()


def _quantize(recipe, state, role, x, fp8_dtype, *, rowwise=True, transpose=False):
    if isinstance(recipe, DelayedScaling):
        return state.quantize(role, x, fp8_dtype, rowwise=rowwise, transpose=transpose)
    out, out_t, dequant, _ = quantize_dynamic(x, fp8_dtype, recipe.margin, rowwise=rowwise,
                                              transpose=transpose)
    return out, out_t, dequant


# ---- the linear ------------------------------------------------------------------------------

class _Fp8LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2, weight, bias, recipe, state):
        fwd = forward_dtype(recipe)
        m = x2.shape[0]
        want_wgrad = weight.requires_grad and m % 16 == 0
        want_dgrad = x2.requires_grad and weight.shape[0] % 16 == 0
        x_q, x_t, x_deq = _quantize(recipe, state, "input", x2, fwd, transpose=want_wgrad)
        w_q, w_t, w_deq = _quantize(recipe, state, "weight", weight, fwd, transpose=want_dgrad)
        out = torch.ops.kernels.fp8_gemm(x_q, w_q, x_deq, w_deq, bias)
        ctx.recipe, ctx.state = recipe, state
        ctx.has_bias = bias is not None
        ctx.fp8_dgrad, ctx.fp8_wgrad = want_dgrad, want_wgrad
        ctx.save_for_backward(x2 if not want_wgrad else None, weight if not want_dgrad else None,
                              x_t if want_wgrad else None, x_deq, w_t if want_dgrad else None, w_deq)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        x2, weight, x_t, x_deq, w_t, w_deq = ctx.saved_tensors
        grad_out = grad_out.to(torch.bfloat16).contiguous()
        bwd = backward_dtype(ctx.recipe)
        need_t = ctx.fp8_wgrad and ctx.needs_input_grad[1]
        g_q, g_t, g_deq = _quantize(ctx.recipe, ctx.state, "grad_output", grad_out, bwd,
                                    rowwise=ctx.fp8_dgrad, transpose=need_t)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            # dX[M, K] = dY[M, N] @ W[N, K]: B operand = W^T [K, N], K-major in N
            grad_x = (torch.ops.kernels.fp8_gemm(g_q, w_t, g_deq, w_deq) if ctx.fp8_dgrad
                      else grad_out @ weight.to(torch.bfloat16))
        if ctx.needs_input_grad[1]:
            # dW[N, K] = dY^T[N, M] @ X[M, K]: B operand = X^T [K, M], K-major in M
            grad_w = (torch.ops.kernels.fp8_gemm(g_t, x_t, g_deq, x_deq) if ctx.fp8_wgrad
                      else grad_out.t() @ x2.to(torch.bfloat16))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad_out.float().sum(0).to(torch.bfloat16)
        return grad_x, grad_w, grad_b, None, None


def _check_linear_args(x, weight, bias) -> None:
    if x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16:
        raise TypeError(f"fp8_linear takes bf16 x and weight, got {x.dtype} and {weight.dtype}")
    if bias is not None and bias.dtype != torch.bfloat16:
        raise TypeError(f"bias must be bf16, got {bias.dtype}")
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x [..., {x.shape[-1]}] and weight {tuple(weight.shape)} disagree on K")


def fp8_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
               state: Fp8LinearState | None = None) -> torch.Tensor:
    """`x @ weight^T + bias` in FP8 under `fp8_autocast` (bf16 `F.linear` outside).

    x `[..., K]` bf16, weight `[N, K]` bf16, bias `[N]` bf16; K % 16 == 0.
    DelayedScaling needs a `state` (`Fp8Linear` keeps one).
    """
    recipe = get_recipe()
    if recipe is None:
        return torch.nn.functional.linear(x, weight, bias)
    _check_linear_args(x, weight, bias)
    if isinstance(recipe, DelayedScaling) and state is None:
        raise ValueError("DelayedScaling keeps per-layer state: pass state= or use Fp8Linear")
    x2 = x.reshape(-1, x.shape[-1])
    out = _Fp8LinearFn.apply(x2, weight, bias, recipe, state)
    return out.reshape(*x.shape[:-1], weight.shape[0])


class Fp8Linear(torch.nn.Linear):
    """`nn.Linear` (bf16 parameters) whose forward runs in FP8 inside `fp8_autocast`.

    Where no gradient is computed (inference: `torch.no_grad()`, or neither the input nor the
    weight requires one) the weight is quantized once per weight version with its own amax, a
    static scale whatever the recipe, and its FP8 copy kept (`quantized_weight`); each call then
    quantizes only its input. With gradients both are quantized on every call, as the recipe says.

    Under `DelayedScaling` the layer keeps an amax history and multipliers per tensor role; they
    travel with `state_dict()` (its `_extra_state`: the recipe's fields and the two tensors), so a
    checkpoint resumes them, and follow the weight's device. A checkpoint without them (a plain
    `nn.Linear`'s, or one saved before the first FP8 step) loads too: the history starts afresh."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=torch.bfloat16):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self._fp8_state = None
        self._weight_fp8 = None  # (the weight's identity and version, its e4m3 copy, dequant)

    def quantized_weight(self, recipe) -> tuple[torch.Tensor, torch.Tensor]:
        """(the weight in the recipe's forward FP8 type, its dequant factor): quantized with the
        weight's own amax once per weight version (an in-place update or a new tensor quantizes
        again) and kept, an FP8 copy beside the bf16 weight."""
        weight, fp8_dtype = self.weight, forward_dtype(recipe)
        key = (weight.data_ptr(), weight._version, weight.device, fp8_dtype, recipe.margin)
        if self._weight_fp8 is None or self._weight_fp8[0] != key:
            with torch.no_grad():
                w_q, _, w_deq, _ = quantize_dynamic(weight, fp8_dtype, recipe.margin)
            self._weight_fp8 = (key, w_q, w_deq)
        return self._weight_fp8[1], self._weight_fp8[2]

    def forward(self, x):
        recipe = get_recipe()
        if recipe is None:
            return super().forward(x)
        state = None
        if isinstance(recipe, DelayedScaling):
            state = self._fp8_state
            if state is None or state.recipe != recipe:
                state = self._fp8_state = Fp8LinearState(recipe, self.weight.device)
            elif state.history.device != self.weight.device:  # the module moved since
                device = self.weight.device
                state.history, state.scale = state.history.to(device), state.scale.to(device)
        inference = not (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))
        if inference and not self.weight.is_inference():  # inference tensors keep no version
            # No gradient to compute: the weight's FP8 copy is made once, not on every call.
            _check_linear_args(x, self.weight, self.bias)
            w_q, w_deq = self.quantized_weight(recipe)
            x2 = x.reshape(-1, x.shape[-1])
            x_q, _, x_deq = _quantize(recipe, state, "input", x2, forward_dtype(recipe))
            out = torch.ops.kernels.fp8_gemm(x_q, w_q, x_deq, w_deq, self.bias)
            return out.reshape(*x.shape[:-1], self.weight.shape[0])
        return fp8_linear(x, self.weight, self.bias, state)

    def get_extra_state(self):
        state = self._fp8_state
        if state is None:
            return None
        return {"recipe": dataclasses.asdict(state.recipe), "history": state.history.clone(),
                "scale": state.scale.clone()}

    def set_extra_state(self, extra):
        if extra is None:
            self._fp8_state = None
            return
        state = Fp8LinearState(DelayedScaling(**extra["recipe"]), self.weight.device)
        if extra["history"].shape != state.history.shape or extra["scale"].shape != state.scale.shape:
            raise ValueError(f"Fp8Linear state: history {tuple(extra['history'].shape)} and scale "
                             f"{tuple(extra['scale'].shape)} do not fit the recipe's "
                             f"{tuple(state.history.shape)} and {tuple(state.scale.shape)}")
        state.history.copy_(extra["history"])
        state.scale.copy_(extra["scale"])
        self._fp8_state = state

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self._fp8_state is None:  # then the keys are nn.Linear's, and either loads the other's
            destination.pop(prefix + _EXTRA_STATE_KEY, None)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        key = prefix + _EXTRA_STATE_KEY
        present = key in state_dict
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        if not present:  # a checkpoint without FP8 state: nothing to resume
            if key in missing_keys:
                missing_keys.remove(key)
            self._fp8_state = None


_EXTRA_STATE_KEY = "_extra_state"  # torch.nn.Module's key for get_extra_state() in a state_dict


# ---- block-scaled FP8 ------------------------------------------------------------------------

def _blocks_amax(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """max |x| over blocks of rows x cols of a 2-D x (edge blocks partial), one per block."""
    r, c = x.shape
    padded = torch.nn.functional.pad(x.float().abs(), (0, -c % cols, 0, -r % rows))
    return padded.view(padded.shape[0] // rows, rows, padded.shape[1] // cols, cols).amax(dim=(1, 3))


def _per_element(factors: torch.Tensor, rows: int, cols: int, shape) -> torch.Tensor:
    """Block factors [ceil(R / rows), ceil(C / cols)] repeated over their blocks' elements [R, C]."""
    return factors.repeat_interleave(rows, 0)[: shape[0]].repeat_interleave(cols, 1)[:, : shape[1]]


def _quantize_blocks(x: torch.Tensor, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(x in e4m3, its dequant factors per block [ceil(R / rows), ceil(C / cols)]): each block
    scaled so that its amax lands on e4m3's largest value (a block of zeros keeps factor 1)."""
    if x.dim() != 2:
        raise ValueError(f"expected a 2-D tensor, got shape {tuple(x.shape)}")
    if not x.is_floating_point() or x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        raise TypeError(f"expected a 16- or 32-bit float tensor, got {x.dtype}")
    fp8_max = fp8_ops.FP8_MAX[torch.float8_e4m3fn]
    amax = _blocks_amax(x, rows, cols)
    dequant = torch.where(amax > 0, amax / fp8_max, torch.ones_like(amax))
    scaled = x.float() / _per_element(dequant, rows, cols, x.shape)
    data = scaled.clamp(-fp8_max, fp8_max).to(torch.float8_e4m3fn)
    return data, dequant


def quantize_activation_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (e4m3 [M, K], factors [ceil(K / 128), M]): one factor per row and 128 columns,
    in the layout `fp8_gemm_block_scaled` takes for a (M contiguous). A bf16 x on the GPU goes
    through one kernel (`torch.ops.kernels.fp8_quantize_blocks`, the same bits), else torch."""
    if x.is_cuda and x.dtype == torch.bfloat16 and x.dim() == 2 and fp8_ops.is_available():
        return torch.ops.kernels.fp8_quantize_blocks(x)
    data, dequant = _quantize_blocks(x, 1, fp8_ops.BLOCK_K)
    return data, dequant.t().contiguous()


def quantize_weight_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] -> (e4m3 [N, K], factors [ceil(N / 128), ceil(K / 128)]): one factor per 128 x 128
    block, the layout `fp8_gemm_block_scaled` takes for b (and FP8 checkpoints store)."""
    return _quantize_blocks(w, fp8_ops.BLOCK_N, fp8_ops.BLOCK_K)


def _dequantize(data: torch.Tensor, dequant: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    return data.double() * _per_element(dequant.double(), rows, cols, data.shape)


def block_scaled_reference(a: torch.Tensor, b: torch.Tensor, block_scale_a: torch.Tensor,
                           block_scale_b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """What `fp8_gemm_block_scaled` computes, in float64 from the dequantized operands (any device)."""
    a64 = _dequantize(a, block_scale_a.t(), 1, fp8_ops.BLOCK_K)
    b64 = _dequantize(b, block_scale_b, fp8_ops.BLOCK_N, fp8_ops.BLOCK_K)
    out = a64 @ b64.t()
    return out if bias is None else out + bias.double()


def block_scaled_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                        bias: torch.Tensor | None = None) -> torch.Tensor:
    """`x @ dequant(weight)^T + bias` in bf16 for an e4m3 weight [N, K] with 128 x 128 block
    factors `weight_scale` [ceil(N / 128), ceil(K / 128)]; x [..., K] is quantized per row and 128
    columns on the way in. sm_90a (torch.ops.kernels.fp8_gemm_block_scaled)."""
    x2 = x.reshape(-1, x.shape[-1])
    x_q, x_scale = quantize_activation_blocks(x2)
    out = torch.ops.kernels.fp8_gemm_block_scaled(x_q, weight, x_scale, weight_scale, bias)
    return out.reshape(*x.shape[:-1], weight.shape[0])


class BlockScaledLinear(torch.nn.Module):
    """A linear layer whose weight is block-scaled FP8, as FP8 checkpoints store it: `weight`
    e4m3 [N, K] and `weight_scale` float32 [ceil(N / 128), ceil(K / 128)] (the dequant factor of
    each 128 x 128 block; DeepSeek-V3 calls it `weight_scale_inv`), both buffers, and an optional
    bf16 `bias`. Forward: `block_scaled_linear` (the input quantized per row and 128 columns,
    then `fp8_gemm_block_scaled`; sm_90a). Inference only: no gradient reaches the weight."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        scale_shape = fp8_ops.block_scale_shapes(1, out_features, in_features)[1]
        weight = torch.zeros(out_features, in_features, dtype=torch.float8_e4m3fn, device=device)
        self.register_buffer("weight", weight)
        self.register_buffer("weight_scale", torch.ones(scale_shape, dtype=torch.float32, device=device))
        self.bias = (torch.nn.Parameter(torch.zeros(out_features, dtype=torch.bfloat16, device=device))
                     if bias else None)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> BlockScaledLinear:
        """The layer with `linear`'s weight quantized per 128 x 128 block (`quantize_weight_blocks`)."""
        layer = cls(linear.in_features, linear.out_features, linear.bias is not None,
                    device=linear.weight.device)
        with torch.no_grad():
            weight, scale = quantize_weight_blocks(linear.weight.detach())
            layer.weight.copy_(weight)
            layer.weight_scale.copy_(scale)
            if linear.bias is not None:
                layer.bias.copy_(linear.bias.detach().to(torch.bfloat16))
        return layer

    def dequantized_weight(self) -> torch.Tensor:
        """The weight the layer multiplies by, in float32 [N, K]."""
        return _dequantize(self.weight, self.weight_scale, fp8_ops.BLOCK_N, fp8_ops.BLOCK_K).float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.bfloat16:
            raise TypeError(f"BlockScaledLinear takes bf16 inputs, got {x.dtype}")
        return block_scaled_linear(x, self.weight, self.weight_scale, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")
