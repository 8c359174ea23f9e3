"""Input validation of attention() and its plans: every backend's checks, written once.

validate_inputs raises TypeError / ValueError naming the bad input from the inputs' metadata;
check_seqlens_in_pages reads the lengths (one device->host copy) and remembers the tensors that
passed, so the layers of a step after its first skip it; _check_out_lse checks caller-given
outputs.
"""

from __future__ import annotations

import math
import numbers
import weakref

import torch

# ---- validation (every backend) ------------------------------------------------------------

# The largest scale the kernels can take: they receive it as an fp32.
_FP32_MAX = 3.4028234663852886e38


def _capturing(t: torch.Tensor) -> bool:
    """Whether a CUDA graph is being captured on the current stream (t: a tensor of the call; a
    CUDA tensor means CUDA is there, cheaper to ask than torch.cuda.is_available())."""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


E4M3 = torch.float8_e4m3fn  # an FP8 KV cache's element type


def kv_scales_of(k, k_scale, v_scale):
    """An e4m3 cache's factors as float32 tensors on the cache's device, [Hkv] (one per kv head)
    or [1] (one for all; a Python number becomes one, copied to the device; a 0-d tensor is
    viewed as one), or None for a 16-bit cache, which takes none. Checks shapes and types, not
    values (finite, positive: the binding's length check reads them)."""
    if k.dtype != E4M3:
        if k_scale is not None or v_scale is not None:
            raise ValueError(f"k_scale and v_scale are the factors of an e4m3 cache; k is {k.dtype}")
        return None
    if k_scale is None or v_scale is None:
        raise ValueError("an e4m3 cache (float8_e4m3fn k / v) needs k_scale and v_scale")
    heads_kv, scales = k.shape[2], []
    for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
        if not isinstance(s, torch.Tensor):
            number = _scale_number(s)
            if not (math.isfinite(number) and number > 0):
                raise ValueError(f"{name} must be finite and positive, got {number}")
            s = torch.tensor([number], dtype=torch.float32, device=k.device)
        elif s.dim() == 0:  # one factor as a 0-d tensor: the [1] the kernels read
            s = s.reshape(1)
        if s.dtype != torch.float32 or s.dim() != 1 or s.shape[0] not in (1, heads_kv) or s.stride(0) != 1:
            raise ValueError(f"{name} must be a number or a contiguous float32 tensor [Hkv = {heads_kv}] "
                             f"or [1], got {s.dtype} of shape {tuple(s.shape)}")
        if s.device != k.device:
            raise ValueError(f"{name} must be on the cache's device {k.device}, got {s.device}")
        scales.append(s)
    if scales[0].shape != scales[1].shape:
        raise ValueError(f"k_scale and v_scale must have one shape, got {tuple(scales[0].shape)} and "
                         f"{tuple(scales[1].shape)}")
    return tuple(scales)


def validate_inputs(q, k, v, *, scale=None, mask=None, page_table=None, seqlens_k=None,
                    cu_seqlens_q=None, check_seqlens=True) -> None:
    """Raise TypeError / ValueError naming the bad input. With `check_seqlens`, lengths beyond
    the page table and packed offsets (cu_seqlens_q) are checked with one device->host copy,
    skipped while a CUDA graph is being captured and for the tensors that passed the last check
    unmodified (check_seqlens_in_pages). K and V may be e4m3 in a paged cache (their factors:
    kv_scales_of)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in (torch.bfloat16, torch.float16, torch.float32) and (name == "q" or t.dtype != E4M3):
            extra = "" if name == "q" else " (or float8_e4m3fn, a paged cache)"
            raise TypeError(f"{name} must be bfloat16, float16 or float32{extra}, got {t.dtype}")
    for name, t in (("mask", mask), ("page_table", page_table), ("seqlens_k", seqlens_k),
                    ("cu_seqlens_q", cu_seqlens_q)):
        if t is not None and not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor or None, got {type(t).__name__}")
    if k.dtype == E4M3 or v.dtype == E4M3:
        if k.dtype != v.dtype:
            raise TypeError(f"k and v must share a dtype, got {k.dtype}, {v.dtype}")
        if page_table is None:
            raise ValueError("an e4m3 k / v must be a paged cache (page_table)")
    elif not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    packed = cu_seqlens_q is not None
    paged = page_table is not None
    if packed and not paged:
        raise ValueError("cu_seqlens_q (ragged queries) is supported with a paged cache (page_table)")
    if paged and seqlens_k is None:
        raise ValueError("a paged cache needs seqlens_k [B] int32")
    if seqlens_k is not None and not paged:
        raise ValueError("seqlens_k (key lengths) needs a paged cache (page_table); contiguous k, v "
                         "hold seqlen_k = k.shape[1] keys for every batch")
    if packed and cu_seqlens_q.dtype != torch.int32:
        raise TypeError(f"cu_seqlens_q must be int32, got {cu_seqlens_q.dtype}")
    if packed and (cu_seqlens_q.dim() != 1 or cu_seqlens_q.shape[0] == 0):
        raise ValueError(f"cu_seqlens_q must be 1-D [B + 1], got shape {tuple(cu_seqlens_q.shape)}")
    if q.dim() != (3 if packed else 4):
        expected = "[total_q, Hq, D]" if packed else "[B, Sq, Hq, D]"
        raise ValueError(f"q must be {expected}, got shape {tuple(q.shape)}")
    if k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"k and v must be 4-D with one shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    heads_q, head_dim = q.shape[-2], q.shape[-1]
    heads_kv = k.shape[2]
    if k.shape[3] != head_dim:
        raise ValueError(f"k head_dim {k.shape[3]} != q head_dim {head_dim}")
    if head_dim == 0:
        raise ValueError("head_dim must be at least 1, got 0")
    if heads_kv == 0 or heads_q % heads_kv:
        raise ValueError(f"heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv})")
    if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
        raise ValueError("q, k, v must have a contiguous last dim")
    if scale is not None:
        scale = _scale_number(scale)  # the type checks
        if not (math.isfinite(scale) and 0 < scale * math.log2(math.e) <= _FP32_MAX):
            # the kernels scale by scale * log2(e) in float32: inf past this, and NaN rows
            raise ValueError(f"scale must be a positive number with scale * log2(e) within float32's range, "
                             f"got {scale}")
    batch = (cu_seqlens_q.shape[0] - 1) if packed else q.shape[0]
    if not paged and k.shape[0] != batch:
        raise ValueError(f"k batch {k.shape[0]} != q batch {batch}")
    if paged:
        for name, t, dims in (("page_table", page_table, 2), ("seqlens_k", seqlens_k, 1)):
            if t.dtype != torch.int32:
                raise TypeError(f"{name} must be int32, got {t.dtype}")
            if t.dim() != dims or t.shape[0] != batch:
                raise ValueError(f"{name} must have batch {batch} as its first of {dims} dims, "
                                 f"got {tuple(t.shape)}")
        if packed and batch == 0 and q.shape[0] != 0:
            raise ValueError(f"cu_seqlens_q must end at total_q = q.shape[0] = {q.shape[0]}, got "
                             f"{cu_seqlens_q.tolist()}")
        if check_seqlens:
            check_seqlens_in_pages(k, page_table, seqlens_k, cu_seqlens_q=cu_seqlens_q,
                                   total_q=q.shape[0] if packed else 0)
    if mask is not None:
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be bool (True = keep), got {mask.dtype}")
        if mask.dim() not in (2, 3) or mask.shape[0] != batch:
            raise ValueError(f"mask must be [B, Sk] or [B, Sq, Sk] with B = {batch}, got {tuple(mask.shape)}")
        if not paged and mask.shape[-1] != k.shape[1]:
            raise ValueError(f"mask last dim must be seqlen_k = {k.shape[1]}, got {tuple(mask.shape)}")
        if mask.dim() == 3 and not packed and mask.shape[1] != q.shape[1]:
            raise ValueError(f"mask [B, Sq, Sk] needs Sq = {q.shape[1]}, got {tuple(mask.shape)}")


# The last lengths that passed the check: (a weak reference to the seqlens_k tensor, one to the
# cu_seqlens_q tensor (_NO_OFFSETS for none), (their version counters, what they were checked
# against)). Every layer of a decode (or chunked-prefill) step passes the same tensors,
# unchanged, so only the step's first call reads them back (the read waits for the GPU: several
# times the kernel at small batches, docs/production_lab.md). One tuple, rebound whole.
def _NO_OFFSETS():  # a dead weak reference's stand-in: calls return None, as cu_seqlens_q=None
    return None


_last_checked_lengths: tuple = (None, _NO_OFFSETS, None)


def _length_range(seqlens_k, cu_seqlens_q=None, total_q: int = 0) -> tuple[int, int, bool]:
    """(min, max) of the lengths and whether cu_seqlens_q (if given) runs from 0 to total_q
    without decreasing: one device->host copy."""
    parts = [seqlens_k.min(), seqlens_k.max()]
    if cu_seqlens_q is not None:
        steps = cu_seqlens_q[1:] >= cu_seqlens_q[:-1]
        parts.append((steps.all() & (cu_seqlens_q[0] == 0) & (cu_seqlens_q[-1] == total_q)).to(torch.int32))
    values = torch.stack(parts).tolist()
    return int(values[0]), int(values[1]), cu_seqlens_q is None or bool(values[2])


def check_seqlens_in_pages(k_cache, page_table, seqlens_k, cu_seqlens_q=None, total_q: int = 0) -> None:
    """Every length within the page table, and packed queries' offsets (cu_seqlens_q) from 0 to
    total_q without decreasing (one device->host copy); skipped while a CUDA graph is being
    captured, and for the tensors that passed the last check unmodified since (their version
    counters: torch's in-place ops bump them; a kernel of the caller's own that writes the
    lengths through a raw pointer does not, nor does the replay of a CUDA graph that writes them,
    and a length past the page table then gives that sequence NaN, as under capture). Inference
    tensors keep no version counter: checked on every call. `total_q` with cu_seqlens_q only (0
    without)."""
    global _last_checked_lengths
    capacity = page_table.shape[1] * k_cache.shape[1]  # keys a sequence can hold: max_pages * page_size
    last_lengths, last_offsets, last_stamp = _last_checked_lengths
    # First, and in this order: every layer after a step's first one ends here. Tensors that
    # passed before are no inference tensors, so their version counters can be read.
    if (last_lengths is not None and last_lengths() is seqlens_k and last_offsets() is cu_seqlens_q
            and last_stamp == (seqlens_k._version, capacity,
                               None if cu_seqlens_q is None else cu_seqlens_q._version, total_q)):
        return
    if _capturing(seqlens_k):
        return
    if seqlens_k.shape[0] == 0:  # no sequence: cu_seqlens_q (if any) is [0], q empty (validate_inputs)
        if cu_seqlens_q is not None and int(cu_seqlens_q[0]) != 0:
            raise ValueError(f"cu_seqlens_q must start at 0, got {cu_seqlens_q.tolist()}")
        return
    lo, hi, offsets_ok = _length_range(seqlens_k, cu_seqlens_q, total_q)
    if lo < 0 or hi > capacity:
        raise ValueError(f"seqlens_k must be in [0, max_pages * page_size = {capacity}], "
                         f"got values in [{lo}, {hi}]")
    if not offsets_ok:
        raise ValueError(f"cu_seqlens_q must start at 0, end at total_q = q.shape[0] = {total_q} and never "
                         f"decrease, got {cu_seqlens_q.tolist()}")
    if cu_seqlens_q is None:
        if not seqlens_k.is_inference():
            _last_checked_lengths = (weakref.ref(seqlens_k), _NO_OFFSETS,
                                     (seqlens_k._version, capacity, None, 0))
    elif not (seqlens_k.is_inference() or cu_seqlens_q.is_inference()):
        _last_checked_lengths = (weakref.ref(seqlens_k), weakref.ref(cu_seqlens_q),
                                 (seqlens_k._version, capacity, cu_seqlens_q._version, total_q))


def forget_checked_lengths() -> None:
    """Forget the lengths that passed the check (the next call reads them again)."""
    global _last_checked_lengths
    _last_checked_lengths = (None, _NO_OFFSETS, None)


def _scale_number(scale) -> float:
    """A scale given as another kind of number or a one-element tensor, as the float every backend
    takes (SDPA refuses a tensor of shape [1], FA4 wants a Python number); the errors name it."""
    if isinstance(scale, torch.Tensor):
        if scale.numel() != 1:
            raise ValueError(f"scale must be a number or a one-element tensor, got a tensor of shape "
                             f"{tuple(scale.shape)}")
        return float(scale)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a number, got {scale!r}")
    return float(scale)


def _check_causal(causal) -> None:
    """causal must be a bool: any other value (a string "no", a tensor) would be taken for its
    truth and run a mask the caller did not mean."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")


# ---- runners: one per backend and kind of call, all with one signature --------------------------


def _check_out_lse(q, out, lse, packed: bool) -> None:
    """The checks the binding makes of `out` and `lse`, for the backends that fill them by copy
    (fa4, torch), where a wrong dtype or shape would be converted or broadcast silently."""
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"out must be a torch.Tensor or None, got {type(out).__name__}")
        if out.dtype != q.dtype or out.shape != q.shape or out.device != q.device:
            raise ValueError(f"out must have q's dtype, shape and device ({q.dtype}, {tuple(q.shape)}, "
                             f"{q.device}), got {out.dtype}, {tuple(out.shape)}, {out.device}")
    if lse is not None:
        if not isinstance(lse, torch.Tensor):
            raise TypeError(f"lse must be a torch.Tensor or None, got {type(lse).__name__}")
        shape = (q.shape[1], q.shape[0]) if packed else (q.shape[0], q.shape[2], q.shape[1])
        if lse.dtype != torch.float32 or lse.shape != shape or lse.device != q.device:
            layout = "[heads_q, total_q]" if packed else "[batch, heads_q, seqlen_q]"
            raise ValueError(f"lse must be float32 {layout} = {list(shape)} on {q.device}, got {lse.dtype} "
                             f"{list(lse.shape)} on {lse.device}")


# ---- torch fallback -------------------------------------------------------------------------
