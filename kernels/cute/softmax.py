"""Online softmax in the log2 domain, shared by the rungs.

Scores arrive pre-multiplied by ``softmax_scale * log2(e)``, so ``exp(scale * s)`` becomes a
single ``ex2.approx`` (MUFU.EX2). A row's running state is its max ``row_max`` (log2 units) and
its sum ``row_sum`` of ``exp2(score - row_max)``; each new block of scores rescales both by
``correction = exp2(old_max - new_max)``.

Rows that have seen no key keep ``row_max = -inf``. :func:`safe_max` then substitutes 0 so
that ``exp2(-inf - max)`` evaluates to 0 instead of ``exp2(-inf + inf) = NaN``; such rows
finish with ``row_sum = 0``, write zeros and LSE ``-inf``.
"""

import math

import cutlass
import cutlass.cute as cute
from cutlass import Float32

LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)


@cute.jit
def exp2f(x: Float32) -> Float32:
    """2**x with the MUFU.EX2 approximation (ex2.approx.ftz.f32)."""
    return cute.math.exp2(x, approx=True, ftz=True)


@cute.jit
def safe_max(row_max: Float32) -> Float32:
    return Float32(0.0) if row_max == -Float32.inf else row_max


@cute.jit
def row_group_max(value: Float32, threads_per_row: cutlass.Constexpr[int]) -> Float32:
    """Max over the ``threads_per_row`` adjacent lanes that share one row (butterfly shuffles)."""
    return cute.arch.warp_reduction_max(value, threads_in_group=threads_per_row)


@cute.jit
def row_group_sum(value: Float32, threads_per_row: cutlass.Constexpr[int]) -> Float32:
    return cute.arch.warp_reduction_sum(value, threads_in_group=threads_per_row)


@cute.jit
def online_softmax_step(acc_S: cute.Tensor, row_max: Float32, row_sum: Float32,
                        threads_per_row: cutlass.Constexpr[int]):
    """Fold one block of log2-scaled scores into a row's running (max, sum).

    ``acc_S`` holds this thread's share of the row (masked entries are -inf); it is overwritten
    in place with ``P = exp2(S - new_max)``. Returns ``(new_max, new_sum, correction)``; the
    caller rescales its output accumulator by ``correction``.
    """
    block_max = acc_S[0]
    for i in cutlass.range_constexpr(1, cute.size(acc_S)):
        block_max = cute.arch.fmax(block_max, acc_S[i])
    new_max = cute.arch.fmax(row_max, row_group_max(block_max, threads_per_row))
    max_used = safe_max(new_max)
    correction = exp2f(row_max - max_used)
    block_sum = Float32(0.0)
    for i in cutlass.range_constexpr(cute.size(acc_S)):
        acc_S[i] = exp2f(acc_S[i] - max_used)
        block_sum += acc_S[i]
    new_sum = row_sum * correction + row_group_sum(block_sum, threads_per_row)
    return new_max, new_sum, correction


@cute.jit
def finalize_row(row_max: Float32, row_sum: Float32):
    """``(1 / row_sum, LSE)`` with LSE in natural-log units of the unscaled scores.

    A row that saw no key (``row_sum == 0``) gets 0 and ``-inf``, never NaN.
    """
    seen_a_key = row_sum > Float32(0.0)
    inv_sum = cute.arch.rcp_approx(row_sum if seen_a_key else Float32(1.0))
    lse = (row_max + cute.math.log2(row_sum if seen_a_key else Float32(1.0), fastmath=True)) * LN_2
    return (inv_sum if seen_a_key else Float32(0.0)), (lse if seen_a_key else -Float32.inf)
