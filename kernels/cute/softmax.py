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
import struct

import cutlass
import cutlass.cute as cute
from cutlass import Float32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)


@cute.jit
def exp2f(x: Float32) -> Float32:
    """2**x with the MUFU.EX2 approximation (ex2.approx.ftz.f32)."""
    return cute.math.exp2(x, approx=True, ftz=True)


# 2^f on [0, 1) as 1 + f (c1 + f (c2 + f c3)), fitted for the least maximum relative error
# (8.6e-5: far below bf16's 2^-9 and e4m3's 2^-4, the precisions P is rounded to).
EXP2_POLY = (0.69511657, 0.22764593, 0.07706618)


def _ptx_f32(value: float) -> str:
    return f"0f{struct.unpack('<I', struct.pack('<f', value))[0]:08X}"


@dsl_user_op
def exp2_fma(x: Float32, *, loc=None, ip=None) -> Float32:
    """2**x for x <= 127 on the FMA and ALU pipes instead of the MUFU unit (FlashAttention-4 moves
    a share of its exponentials there on Blackwell): x = n + f with n = floor(x), 2^f from the
    cubic EXP2_POLY, n added to the result's exponent field. Below -126 (a masked score's -inf
    included) it returns 0, as ex2.approx.ftz does."""
    c1, c2, c3 = (_ptx_f32(c) for c in EXP2_POLY)
    asm = ("{\n"
           ".reg .f32 xc, xr, xn, f, p;\n"
           ".reg .b32 n, e;\n"
           ".reg .pred tiny;\n"
           "max.ftz.f32 xc, $1, 0fC2FE0000;\n"   # -127: keeps n in the exponent's range
           "add.rm.ftz.f32 xr, xc, 0f4B400000;\n"  # + 1.5 * 2^23, rounded down: floor(xc) in the low bits
           "sub.rn.ftz.f32 xn, xr, 0f4B400000;\n"  # floor(xc)
           "sub.rn.ftz.f32 f, xc, xn;\n"           # in [0, 1)
           f"fma.rn.ftz.f32 p, f, {c3}, {c2};\n"
           f"fma.rn.ftz.f32 p, p, f, {c1};\n"
           "fma.rn.ftz.f32 p, p, f, 0f3F800000;\n"
           "mov.b32 n, xr;\n"
           "shl.b32 n, n, 23;\n"                 # floor(xc) << 23: only its low 9 bits survive
           "mov.b32 e, p;\n"
           "add.s32 e, e, n;\n"                  # 2^f * 2^n
           "setp.lt.f32 tiny, xc, 0fC2FC0000;\n"  # below -126 the exponent field would be 0
           "mov.b32 p, e;\n"
           "selp.f32 $0, 0f00000000, p, tiny;\n"
           "}\n")
    return Float32(llvm.inline_asm(T.f32(), [Float32(x).ir_value(loc=loc, ip=ip)], asm, "=f,f",
                                   has_side_effects=False, is_align_stack=False,
                                   asm_dialect=llvm.AsmDialect.AD_ATT))


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


# ---- K4 onwards: the softmax state of a thread's rows in a WGMMA accumulator ------------------
@cute.jit
def max_of(values: cute.Tensor, init: Float32) -> Float32:
    """Max over a thread's share of a row, four independent chains (FMNMX latency hides)."""
    chains = [init, values[0], values[1], values[2]]
    for i in cutlass.range_constexpr(3, cute.size(values)):
        chains[i % 4] = cute.arch.fmax(chains[i % 4], values[i])
    return cute.arch.fmax(cute.arch.fmax(chains[0], chains[1]), cute.arch.fmax(chains[2], chains[3]))


@cute.jit
def sum_of(values: cute.Tensor, init: Float32) -> Float32:
    """Sum over a thread's share of a row, four independent chains."""
    chains = [init, values[0], values[1], values[2]]
    for i in cutlass.range_constexpr(3, cute.size(values)):
        chains[i % 4] = chains[i % 4] + values[i]
    return (chains[0] + chains[1]) + (chains[2] + chains[3])


class OnlineSoftmax:
    """Running max and sum of the rows a thread holds in a WGMMA score fragment (K4 onwards).

    ``acc_S`` holds raw scores ``q . k``; the scale is folded into the exponent, so each score
    costs one FFMA and one MUFU.EX2: ``p = exp2(s * scale_log2 - max * scale_log2)``. The row
    max is taken over raw scores, which orders them the same way because the scale is positive
    (``AttentionProblem`` refuses any other). ``row_sum`` holds this thread's partial sum of its
    share of the row; the four lanes of a quad agree on the max, so their partial sums add up
    only once, in :meth:`finalize`, instead of two shuffles per row and tile.

    State lives in register tensors (``row_max``, ``row_sum``: one entry per row of the thread),
    updated in place, so the object can be used across runtime loops.

    ``max_offset`` (FP8, K12): ``P = exp2(s - max + max_offset)``, in ``[0, 2^max_offset]``
    instead of ``[0, 1]``, so that P, converted to e4m3 for the P V GEMM, uses the format's
    range (up to 448) and keeps small probabilities out of its subnormals. ``row_sum`` carries
    the same factor, which cancels in ``O / row_sum``; the LSE takes it out.

    ``exp2_fma_every`` (lab, K12): one column in every that many takes :func:`exp2_fma` instead
    of MUFU.EX2, moving that share of the exponentials to the FMA and ALU pipes (0: none).

    ``rescale_threshold`` (lab, K11; FlashAttention-4's on Blackwell, the production prefill's):
    a row's running max moves only when the tile's max exceeds it by more than that many
    (log2 units, scaled scores), so ``P`` stays below ``2^threshold`` and, while no row of a
    warp moved, every factor is exactly 1 and the caller may skip O's rescale
    (:meth:`any_moved`). 0: the max follows every tile.
    """

    def __init__(self, scale_log2: Float32, num_rows: int, threads_per_row: int = 4, max_offset: int = 0,
                 exp2_fma_every: int = 0, rescale_threshold: float = 0.0):
        self.scale_log2 = scale_log2
        self.num_rows = num_rows
        self.threads_per_row = threads_per_row
        self.max_offset = max_offset
        self.exp2_fma_every = exp2_fma_every
        self.rescale_threshold = rescale_threshold
        self.row_max = cute.make_rmem_tensor((num_rows,), Float32)
        self.row_sum = cute.make_rmem_tensor((num_rows,), Float32)

    @cute.jit
    def reset(self):
        self.row_max.fill(-Float32.inf)
        self.row_sum.fill(0.0)

    @cute.jit
    def update(self, acc_S_mn: cute.Tensor, is_first: cutlass.Constexpr[bool] = False) -> cute.Tensor:
        """Fold one tile of raw scores into the state; ``acc_S_mn`` (rows, columns) is overwritten
        with ``P``. Returns the per-row factor the caller rescales ``O`` by (1 on the first tile).
        Rows that have seen no key keep ``row_max = -inf`` and give ``P = 0`` (see ``safe_max``)."""
        row_scale = cute.make_rmem_tensor((self.num_rows,), Float32)
        for r in cutlass.range_constexpr(self.num_rows):
            row = acc_S_mn[r, None]
            prev_max = self.row_max[r]
            tile_max = max_of(row, -Float32.inf if const_expr(is_first) else prev_max)
            new_max = row_group_max(tile_max, self.threads_per_row)
            if const_expr(self.rescale_threshold > 0 and not is_first):
                # -inf + threshold stays -inf: a row's first finite score always moves its max;
                # a row still without one (new_max -inf too) compares false and keeps -inf.
                threshold = Float32(self.rescale_threshold)
                grow = new_max * self.scale_log2 > prev_max * self.scale_log2 + threshold
                new_max = new_max if grow else prev_max
            max_scaled = safe_max(new_max) * self.scale_log2
            exponent_base = max_scaled
            if const_expr(self.max_offset):
                exponent_base = max_scaled - Float32(self.max_offset)
            for c in cutlass.range_constexpr(cute.size(row)):
                every = self.exp2_fma_every
                if const_expr(every > 0 and c % every == every - 1):
                    row[c] = exp2_fma(row[c] * self.scale_log2 - exponent_base)
                else:
                    row[c] = exp2f(row[c] * self.scale_log2 - exponent_base)
            if const_expr(is_first):
                row_scale[r] = Float32(1.0)
                self.row_sum[r] = sum_of(row, Float32(0.0))
            else:
                row_scale[r] = exp2f(prev_max * self.scale_log2 - max_scaled)
                if const_expr(self.rescale_threshold > 0):  # exactly 1 where the max stayed
                    row_scale[r] = row_scale[r] if grow else Float32(1.0)
                self.row_sum[r] = sum_of(row, self.row_sum[r] * row_scale[r])
            self.row_max[r] = new_max
        return row_scale

    @cute.jit
    def any_moved(self, row_scale: cute.Tensor):
        """Whether some row of this warp moved its max in the last :meth:`update` (with
        ``rescale_threshold``, an unmoved row's factor is exactly 1): a warp-uniform vote."""
        moved = row_scale[0] != Float32(1.0)
        for r in cutlass.range_constexpr(1, self.num_rows):
            moved = moved | (row_scale[r] != Float32(1.0))
        return cute.arch.vote_any_sync(moved)

    @cute.jit
    def finalize(self):
        """``(inv_sum, lse)`` per row: ``1 / row_sum`` (0 for a row that saw no key) and the
        natural-log LSE of the scaled scores (``-inf`` for such a row)."""
        inv_sum = cute.make_rmem_tensor((self.num_rows,), Float32)
        lse = cute.make_rmem_tensor((self.num_rows,), Float32)
        for r in cutlass.range_constexpr(self.num_rows):
            row_sum = row_group_sum(self.row_sum[r], self.threads_per_row)
            max_scaled = self.row_max[r] * self.scale_log2
            if const_expr(self.max_offset):  # row_sum is 2^max_offset times the true sum
                max_scaled = max_scaled - Float32(self.max_offset)
            inv_sum[r], lse[r] = finalize_row(max_scaled, row_sum)
        return inv_sum, lse


@cute.jit
def rescale_rows(acc_mn: cute.Tensor, row_scale: cute.Tensor):
    """Multiply row ``r`` of ``acc_mn`` (rows, columns) by ``row_scale[r]``."""
    for r in cutlass.range_constexpr(cute.size(row_scale)):
        acc_mn[r, None].store(acc_mn[r, None].load() * row_scale[r])
