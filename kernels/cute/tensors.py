"""Trace-time tensor helpers: re-impose what the host guarantees on a dynamic BSHD tensor
(or, for FP8's transposed V, a BHDS one)."""

import cutlass
import cutlass.cute as cute

from kernels.cute.launch import ALIGN_BYTES


@cute.jit
def bshd_tensor(mX: cute.Tensor, head_dim: cutlass.Constexpr[int]) -> cute.Tensor:
    """``mX`` [B, S, H, D] with the head dimension made static and every stride known to be a
    multiple of 16 bytes (checked on the host by ``launch.check_vector_alignment``), so that
    8-element slices of a row compile to single 16-byte loads and stores."""
    elems_per_vector = ALIGN_BYTES * 8 // mX.element_type.width
    batch, seqlen, heads, _ = mX.shape
    stride_b, stride_s, stride_h, _ = mX.stride
    layout = cute.make_layout(
        (batch, seqlen, heads, head_dim),
        stride=(cute.assume(stride_b, divby=elems_per_vector),
                cute.assume(stride_s, divby=elems_per_vector),
                cute.assume(stride_h, divby=elems_per_vector), 1),
    )
    return cute.make_tensor(mX.iterator, layout)


@cute.jit
def bhds_tensor(mX: cute.Tensor, head_dim: cutlass.Constexpr[int]) -> cute.Tensor:
    """``mX`` [B, H, D, S'] (V transposed for FP8, keys contiguous) with the head dimension made
    static and every stride known to be a multiple of 16 bytes (the host pads S' to that)."""
    elems_per_vector = ALIGN_BYTES * 8 // mX.element_type.width
    batch, heads, _, seqlen = mX.shape
    stride_b, stride_h, stride_d, _ = mX.stride
    layout = cute.make_layout(
        (batch, heads, head_dim, seqlen),
        stride=(cute.assume(stride_b, divby=elems_per_vector),
                cute.assume(stride_h, divby=elems_per_vector),
                cute.assume(stride_d, divby=elems_per_vector), 1),
    )
    return cute.make_tensor(mX.iterator, layout)
