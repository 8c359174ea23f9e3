"""Warpgroup-MMA plumbing shared by the Hopper rungs (K4 onwards).

Trace-time helpers (plain Python building layouts) and small ``@cute.jit`` device helpers:

* :func:`make_warpgroup_mma`: one warpgroup's ``m64nNk16`` tiled MMA (``k32`` for fp8).
* :func:`acc_rows_view` / :func:`acc_as_a_operand`: two views of a WGMMA accumulator
  fragment, by rows and columns (for the softmax) and as the A operand of the next MMA
  (for an fp8 A, with the keys permuted: :func:`fp8_key_slot`).
* :func:`gemm`: issue the k-blocks of one warpgroup GEMM, commit, optionally wait.
* :func:`uniform_descriptors` / :func:`k_block_descriptors` / :func:`gemm_k_blocks` (K11 on):
  the shared-memory descriptors built once, before a loop, and a GEMM that takes them.

Operands come from smem tiles laid out by :func:`kernels.cute.tma.smem_tile_layout`: the
128-byte swizzle TMA writes is one of the canonical layouts WGMMA descriptors read.

The accumulator of ``m64nNk16`` (fp32) gives thread ``t`` of the warpgroup (warp ``w``,
lane ``l``) rows ``16 w + l / 4`` and ``16 w + l / 4 + 8`` and, in each of the N / 8 column
groups ``j``, columns ``8 j + 2 (l % 4) + {0, 1}``. Its CuTe shape is
``((2, 2, N / 8), 1, 1)``: (column pair, row half, column group). So a row lives in the four
lanes of one quad, and a row reduction is a per-thread reduction plus two butterfly shuffles
(xor 1, xor 2).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Int32, Int64
from cutlass.cute.nvgpu import warpgroup
from cutlass.cute.nvgpu.tcgen05 import int_to_smem_descriptor, smem_descriptor_to_int

# One warpgroup MMA instruction covers 64 rows; a warpgroup is 4 warps.
WGMMA_M = 64
WARPGROUP_THREADS = 128
# ... and 32 bytes of K per row: k16 of bf16/fp16, k32 of fp8.
WGMMA_K_BYTES = 32


def mma_k(dtype_bytes: int) -> int:
    """K extent of one warpgroup MMA for elements of ``dtype_bytes`` (16 for bf16, 32 for fp8)."""
    return WGMMA_K_BYTES // dtype_bytes


# ---- trace time: layouts and MMA atoms ------------------------------------------------------
def make_warpgroup_mma(dtype, n: int, *, warpgroups: int = 1, b_mn_major: bool = False,
                       a_in_registers: bool = False):
    """``m64 n{n} k16`` MMAs of ``warpgroups`` warpgroups stacked along M (warpgroup ``w`` owns
    rows ``64 w .. 64 w + 63`` of a ``64 * warpgroups``-row tile): bf16/fp16 in (``k32`` for
    fp8 e4m3), fp32 accumulators in registers.

    A is K-major (rows of Q, or P from registers); B is K-major (rows of K) or, for
    ``b_mn_major``, MN-major (V read through its transposed view; FP8 WGMMA has no MN-major
    operands, so an fp8 V must arrive transposed).
    """
    return sm90_utils.make_trivial_tiled_mma(
        dtype, dtype,
        cute.nvgpu.OperandMajorMode.K,
        cute.nvgpu.OperandMajorMode.MN if b_mn_major else cute.nvgpu.OperandMajorMode.K,
        cutlass.Float32,
        atom_layout_mnk=(warpgroups, 1, 1),
        tiler_mn=(WGMMA_M, n),
        a_source=warpgroup.OperandSource.RMEM if a_in_registers else warpgroup.OperandSource.SMEM,
    )


def transposed_view(s: cute.Tensor) -> cute.Tensor:
    """Swap the first two modes of a smem tensor (``(n, d, stage)`` -> ``(d, n, stage)``)."""
    shape = (s.shape[1], s.shape[0], *s.shape[2:])
    order = (1, 0, *range(2, cute.rank(s)))
    return cute.composition(s, cute.make_ordered_layout(shape, order=order))


# ---- accumulator fragment views -------------------------------------------------------------
def acc_rows_view(acc: cute.Tensor) -> cute.Tensor:
    """``((2, 2, N/8), M, N)`` -> ``((2, M), (2, N/8, N))``: index a fragment by (row, column).

    Works on any tensor partitioned like a WGMMA accumulator (values or identity coordinates).
    """
    flat = cute.make_layout(acc.layout.shape)  # position of each value in the fragment
    rows = ((flat.shape[0][1], flat.shape[1]), (flat.stride[0][1], flat.stride[1]))
    cols = ((flat.shape[0][0], flat.shape[0][2], flat.shape[2]),
            (flat.stride[0][0], flat.stride[0][2], flat.stride[2]))
    by_rows = cute.make_layout((rows[0], cols[0]), stride=(rows[1], cols[1]))
    return cute.make_tensor(acc.iterator, cute.composition(acc.layout, by_rows))


def rows_per_thread(acc: cute.Tensor) -> int:
    """Rows of the accumulator a thread holds (2 for every ``m64`` fragment)."""
    return cute.size(acc_rows_view(acc), mode=[0])


def acc_as_a_operand(acc: cute.Tensor) -> cute.Tensor:
    """View an ``m64nN`` accumulator as the A operand of an ``m64 k16`` register-sourced MMA.

    For 16-bit A the register fragment of one k16 step holds, per thread, the same
    (row, column) positions as two adjacent n8 column groups of the accumulator, so the
    conversion is a regrouping of modes, no data movement:
    ``((2, 2, N/8), M, N)`` -> ``((2, 2, 2), M, (N/16, N))``.
    """
    div = cute.logical_divide(acc.layout, ((None, None, 2), None, None))
    shape = ((div.shape[0][0], div.shape[0][1], div.shape[0][2][0]), div.shape[1],
             (div.shape[0][2][1], div.shape[2]))
    stride = ((div.stride[0][0], div.stride[0][1], div.stride[0][2][0]), div.stride[1],
              (div.stride[0][2][1], div.stride[2]))
    return cute.make_tensor(acc.iterator, cute.make_layout(shape, stride=stride))


# ---- fp8: the accumulator as a k32 A operand -------------------------------------------------
# Per 32 columns, thread t (quad lane q = t % 4) holds accumulator columns 2q + {0, 1} + 8 j,
# j = 0..3 (the layout above), but the k32 fp8 A fragment wants k-columns 4q + {0..3} and
# 16 + 4q + {0..3}. No register exchange between lanes is needed if P V relabels its keys: the
# A fragment's k-slot 4q + 2a + c + 16h takes the score of key 2q + c + 8 (2h + a), and V^T
# holds each key in that slot (the host's transpose of V writes it there). The sum over keys is
# the same sum in another order. Within every 16 keys the permutation swaps the bit fields
# (c, q, a) of the key's low 4 bits to (c, a, q):
def fp8_key_slot(key: int) -> int:
    """The k-slot of the fp8 P V MMA that holds ``key`` (a permutation of each 16 keys)."""
    c, q, a = key & 1, (key >> 1) & 3, (key >> 3) & 1
    return (key & ~15) | (q << 2) | (a << 1) | c


FP8_KEY_PERIOD = 16  # fp8_key_slot permutes within aligned groups of 16 keys


def key_of_slot() -> list[int]:
    """``key_of_slot()[s]``: which key of a group of 16 the fp8 P V MMA reads at k-slot ``s``."""
    inverse = [0] * FP8_KEY_PERIOD
    for key in range(FP8_KEY_PERIOD):
        inverse[fp8_key_slot(key)] = key
    return inverse


def padded_keys(seqlen_k: int) -> int:
    """Keys of the FP8 rungs' transposed V: ``seqlen_k`` rounded up to a whole group of 16."""
    return -(-seqlen_k // FP8_KEY_PERIOD) * FP8_KEY_PERIOD


def acc_as_fp8_a_operand(acc: cute.Tensor) -> cute.Tensor:
    """View an ``m64nN`` fp32 accumulator as the A operand of ``m64 k32`` fp8 MMAs, keys
    relabelled by :func:`fp8_key_slot`: ``((2, 2, N/8), M, N)`` -> ``(((2, 2), 2, 2), M, (N/32, N))``.

    Value ``((c, a), r, h)`` of k-step ``kb`` is the A fragment's value ``i = c + 2 a`` of row
    half ``r`` and 16-column half ``h`` (k-slot ``4 q + i + 16 h``); it reads the accumulator's
    column pair ``c``, row half ``r``, column group ``j = 4 kb + 2 h + a``."""
    (_, _, groups), rows, cols = acc.layout.shape
    flat = 4 * groups  # accumulator values per (row, column) mode instance
    shape = (((2, 2), 2, 2), rows, (groups // 4, cols))
    stride = (((1, 4), 2, 8), flat, (16, flat * rows))
    view = cute.composition(acc.layout, cute.make_layout(shape, stride=stride))
    return cute.make_tensor(acc.iterator, view)


def fp8_a_fragment_by_pairs(frag: cute.Tensor) -> cute.Tensor:
    """An fp8 A fragment ``((4, 2, 2), M, K/32)`` with its 4 consecutive k-values split as
    ``(2, 2)`` (pair, which pair): the shape :func:`acc_as_fp8_a_operand` gives."""
    (four, halves, khalves), rows, ksteps = frag.layout.shape
    shape = (((2, 2), halves, khalves), rows, ksteps)
    stride = (((1, 2), 4, 8), 16, 16 * rows)
    view = cute.composition(frag.layout, cute.make_layout(shape, stride=stride))
    return cute.make_tensor(frag.iterator, view)


@cute.jit
def scores_to_a_operand(acc_S: cute.Tensor, dtype: cutlass.Constexpr) -> cute.Tensor:
    """``P`` (the fp32 score fragment, exponentiated in place) as the ``dtype`` A operand of
    ``O += P V``: a regrouping of modes (:func:`acc_as_a_operand`) and a packed conversion,
    two fp32 into one bf16x2 register (``F2FP.BF16.F32.PACK_AB``)."""
    tOrP = cute.make_rmem_tensor_like(acc_as_a_operand(acc_S), dtype)
    convert_scores_into(acc_S, tOrP)
    return tOrP


@cute.jit
def convert_scores_into(acc_S: cute.Tensor, tOrP: cute.Tensor):
    """:func:`scores_to_a_operand` into an existing A fragment (one that outlives a loop).
    An fp8 fragment (``tOrP`` from the P V MMA's ``partition_shape_A``) gets the scores with
    the keys relabelled (:func:`acc_as_fp8_a_operand`): a choice of registers, no shuffle."""
    if cutlass.const_expr(tOrP.element_type.width == 8):
        fp8_a_fragment_by_pairs(tOrP).store(acc_as_fp8_a_operand(acc_S).load().to(tOrP.element_type))
    else:
        tOrP.store(acc_as_a_operand(acc_S).load().to(tOrP.element_type))


# ---- device: one warpgroup GEMM ---------------------------------------------------------------
@cute.jit
def gemm(
    tiled_mma: cute.TiledMma,
    acc: cute.Tensor,
    tCrA: cute.Tensor,
    tCrB: cute.Tensor,
    zero_init: cutlass.Constexpr[bool],
    wait: cutlass.Constexpr[bool],
):
    """``acc (+)= A @ B`` over all k16 blocks as one WGMMA commit group.

    ``zero_init`` makes the first k-block overwrite ``acc`` (no separate clear). With
    ``wait`` the warpgroup blocks until the group has finished (accumulators readable).
    """
    warpgroup.fence()
    # A fresh atom per call: the ACCUMULATE field is mutated below, and mutating the shared
    # tiled MMA inside device control flow would leak the value across branches.
    atom = cute.make_mma_atom(tiled_mma.op)
    atom.set(warpgroup.Field.ACCUMULATE, not zero_init)
    for k_block in cutlass.range_constexpr(cute.size(tCrA.shape[2])):
        cute.gemm(atom, acc, tCrA[None, None, k_block], tCrB[None, None, k_block], acc)
        atom.set(warpgroup.Field.ACCUMULATE, True)
    warpgroup.commit_group()
    if cutlass.const_expr(wait):
        warpgroup.wait_group(0)


# ---- K11 onwards: descriptors built once, outside the main loop --------------------------------
# A fragment from ``make_fragment_A/B`` of a shared-memory operand is a view of 64-bit WGMMA
# descriptors (start address >> 4, leading and stride byte offsets, swizzle mode) anchored on the
# tile's shared-memory address. The DSL rebuilds the anchor descriptor from that address where a
# GEMM uses the view: inside a loop, every iteration (an add, a shift, a mask, an or, per operand),
# and ptxas keeps it there. Anchoring the view on a register holding the descriptor, computed once
# and marked warp-uniform, leaves only the offsets in the loop: a stage's (one ULEA) and a
# k-block's (one 64-bit add each), or none for an operand that does not change (Q).
# (``int_to_smem_descriptor`` / ``smem_descriptor_to_int`` live in the tcgen05 module but are
# generic casts between a descriptor value and its 64 bits.)
def _uniform_i64(value):
    """A 64-bit value both halves of which are marked warp-uniform: opaque to the compiler, so
    it stays in a (uniform) register instead of being recomputed where it is used."""
    lo = cute.arch.make_warp_uniform(Int32(value & Int64(0xFFFFFFFF)))
    hi = cute.arch.make_warp_uniform(Int32(value >> Int64(32)))
    return (Int64(hi) << Int64(32)) | (Int64(lo) & Int64(0xFFFFFFFF))


def uniform_descriptors(frag: cute.Tensor) -> cute.Tensor:
    """``frag`` (a WGMMA descriptor view, e.g. ``(MMA, 1, K/16, stage)``) anchored on its base
    descriptor computed here, once: its slices (a stage, a k-block) add offsets to a uniform
    register. The 128 threads of a warpgroup share the descriptors, so build it from the
    warpgroup's slice of the MMA (``ConsumerOperands`` does)."""
    base = _uniform_i64(smem_descriptor_to_int(frag.iterator))
    return cute.make_tensor(int_to_smem_descriptor(base), frag.layout)


def k_block_descriptors(frag: cute.Tensor) -> list:
    """One view per k-block of ``frag`` ``(MMA, 1, K/16)``, each on its own descriptor computed
    here, once: for an operand that is the same in every iteration of a loop (Q), the GEMM
    then computes no descriptor at all (:func:`gemm_k_blocks`). Costs two uniform registers
    per k-block, which the SASS keeps beside the B operand's (``gdesc[URn]`` takes A's and B's
    descriptors in four consecutive uniform registers)."""
    return [uniform_descriptors(frag[None, None, k]) for k in range(cute.size(frag.shape[2]))]


@cute.jit
def gemm_k_blocks(tiled_mma: cute.TiledMma, acc: cute.Tensor, a_blocks: cutlass.Constexpr, tCrB: cute.Tensor,
                  zero_init: cutlass.Constexpr[bool], wait: cutlass.Constexpr[bool]):
    """:func:`gemm` with A given as :func:`k_block_descriptors` (a list, one view per k-block)."""
    warpgroup.fence()
    atom = cute.make_mma_atom(tiled_mma.op)  # a fresh atom per call, as in gemm
    atom.set(warpgroup.Field.ACCUMULATE, not zero_init)
    for k_block in cutlass.range_constexpr(len(a_blocks)):
        cute.gemm(atom, acc, a_blocks[k_block], tCrB[None, None, k_block], acc)
        atom.set(warpgroup.Field.ACCUMULATE, True)
    warpgroup.commit_group()
    if cutlass.const_expr(wait):
        warpgroup.wait_group(0)


@cute.jit
def gemm_k_blocks_interleaved(tiled_mma: cute.TiledMma, accs: cutlass.Constexpr, a_blocks: cutlass.Constexpr,
                              tCrB: cute.Tensor, wait: cutlass.Constexpr[bool]):
    """:func:`gemm_k_blocks` into ``len(accs)`` accumulators: k-block ``i`` into
    ``accs[i % len(accs)]``, each accumulator zeroed by its first k-block; one commit group.
    The caller adds them up in fp32. FP8 WGMMA keeps about 13 bits of a sum, aligned to its
    largest addend, the accumulator included: a chain of k-blocks into one accumulator
    truncates each later k-block's products to the size of the running sum; split in two,
    each chain is half as long and starts from zero again."""
    warpgroup.fence()
    for k_block in cutlass.range_constexpr(len(a_blocks)):
        acc = accs[k_block % len(accs)]
        atom = cute.make_mma_atom(tiled_mma.op)  # a fresh atom per k-block, as in gemm
        atom.set(warpgroup.Field.ACCUMULATE, k_block >= len(accs))
        cute.gemm(atom, acc, a_blocks[k_block], tCrB[None, None, k_block], acc)
    warpgroup.commit_group()
    if cutlass.const_expr(wait):
        warpgroup.wait_group(0)
