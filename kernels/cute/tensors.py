"""Trace-time tensor helpers: re-impose what the host guarantees on a dynamic BSHD tensor
(or, for FP8's transposed V, a BHDS one)."""

import cutlass
import cutlass.cute as cute

from .launch import ALIGN_BYTES


@cute.jit
def with_static_mode(mX: cute.Tensor, mode: cutlass.Constexpr[int],
                     extent: cutlass.Constexpr[int]) -> cute.Tensor:
    """4-D ``mX`` (last mode contiguous) with mode ``mode`` made static (``extent``) and every
    other stride known to be a multiple of 16 bytes (checked, or padded to, on the host), so
    that 16-byte slices along the last mode compile to single loads and stores."""
    elems_per_vector = ALIGN_BYTES * 8 // mX.element_type.width
    shape = tuple(extent if i == mode else mX.shape[i] for i in range(4))
    stride = tuple(cute.assume(mX.stride[i], divby=elems_per_vector) for i in range(3)) + (1,)
    return cute.make_tensor(mX.iterator, cute.make_layout(shape, stride=stride))


@cute.jit
def bshd_tensor(mX: cute.Tensor, head_dim: cutlass.Constexpr[int]) -> cute.Tensor:
    """``mX`` [B, S, H, D] with the head dimension static and 16-byte multiple strides (checked
    on the host by ``launch.check_vector_alignment``): 8-element slices of a row are single
    16-byte loads and stores."""
    return with_static_mode(mX, 3, head_dim)


@cute.jit
def bhds_tensor(mX: cute.Tensor, head_dim: cutlass.Constexpr[int]) -> cute.Tensor:
    """``mX`` [B, H, D, S'] (V transposed for FP8, keys contiguous) with the head dimension
    static and 16-byte multiple strides (the host pads S' to that)."""
    return with_static_mode(mX, 2, head_dim)
