"""Epilogues of the WGMMA rungs (K4 onwards): the normalised O fragment and the LSE to memory.

A consumer thread ends the CTA's query tile with its share of ``acc_O`` (its warpgroup's 64 x D
rows, partitioned like every WGMMA accumulator: rows ``16 w + l / 4`` and ``+ 8``, column pairs
``2 (l % 4) + {0, 1}`` in each group of 8) and one LSE per row. Two ways to write O:

* :func:`store_o_direct`: every thread stores its own pairs of columns straight from registers
  (``STG``), rows past ``Sq`` predicated off. No shared memory, no barrier.
* :func:`store_o_tma`: the consumers stage the bf16 tile in shared memory with ``stmatrix``,
  and one warp writes it with a single TMA store (``UTMASTG``); the tensor map clips rows past
  ``Sq``. Fewer, wider transactions, and the copy leaves the registers at once.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32

from . import tma
from . import wgmma as wg
from .softmax import rescale_rows


@cute.jit
def normalized_output(acc_O: cute.Tensor, softmax, dtype: cutlass.Constexpr, scale: Float32 | None = None):
    """``(rO, lse)``: ``acc_O / row_sum`` as a ``dtype`` fragment (rows that saw no key: zeros)
    and each of the thread's rows' LSE (``-inf`` for those rows), from the softmax state.
    ``scale``: one more factor of O, folded into the same multiply (FP8: V's descale)."""
    inv_sum, lse = softmax.finalize()
    if cutlass.const_expr(scale is not None):
        for r in cutlass.range_constexpr(cute.size(inv_sum)):
            inv_sum[r] = inv_sum[r] * scale
    rescale_rows(wg.acc_rows_view(acc_O), inv_sum)
    rO = cute.make_rmem_tensor_like(acc_O, dtype)
    rO.store(acc_O.load().to(dtype))
    return rO, lse


@cute.jit
def store_o_direct(rO: cute.Tensor, mO: cute.Tensor, thr_mma_pv, tile_mo: cutlass.Constexpr, m_block: Int32,
                   head_idx: Int32, batch_idx: Int32):
    """``rO`` (this thread's bf16 share of the CTA's ``tile_mo = (Br, D)`` output tile
    ``m_block``) -> ``mO``, the ``(S, D, H, B)`` view of the output. Each thread writes its two
    rows, pair by pair; rows past ``Sq`` are skipped."""
    # gO: (Br, D) the CTA's rows of the output (may run past Sq: those are predicated off)
    gO = cute.local_tile(mO[None, None, head_idx, batch_idx], tile_mo, (m_block, 0))
    tOgO_mn = wg.acc_rows_view(thr_mma_pv.partition_C(gO))
    tOcO_mn = wg.acc_rows_view(thr_mma_pv.partition_C(cute.make_identity_tensor(tile_mo)))
    rO_mn = wg.acc_rows_view(rO)
    rows_left = cute.size(mO, mode=[0]) - m_block * tile_mo[0]
    for r in cutlass.range_constexpr(cute.size(rO_mn, mode=[0])):
        if tOcO_mn[r, 0][0] < rows_left:
            tOgO_mn[r, None].store(rO_mn[r, None].load())


@cute.jit
def store_o_tma(rO: cute.Tensor, mO: cute.Tensor, sO: cute.Tensor, tma_atom_O: cute.CopyAtom,
                tiled_mma_pv: cute.TiledMma, tidx: Int32, barrier_id: cutlass.Constexpr,
                num_threads: cutlass.Constexpr, m_block: Int32, head_idx: Int32, batch_idx: Int32,
                wait_for_read: cutlass.Constexpr[bool] = True):
    """``rO`` -> ``stmatrix`` into ``sO`` (the CTA's ``(Br, D)`` Q tile, free once every
    warpgroup's last S has completed, or a buffer of its own) -> one TMA store of the box
    ``m_block`` of the ``(S, D, H, B)`` TMA tensor ``mO``. The ``num_threads`` consumer threads
    meet at ``barrier_id`` between the two; returns after the TMA has *read* ``sO``, or, without
    ``wait_for_read``, at once (then :func:`wait_o_store_read` before ``sO`` is written again,
    and before the CTA exits)."""
    smem_copy_O = cute.make_tiled_copy_C(
        cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), rO.element_type), tiled_mma_pv)
    thr_copy_O = smem_copy_O.get_slice(tidx)
    cute.copy(smem_copy_O, thr_copy_O.retile(rO), thr_copy_O.partition_D(sO))
    # Generic-proxy smem writes -> visible to the TMA (async proxy); then one warp stores.
    cute.arch.fence_view_async_shared()
    cute.arch.barrier(barrier_id=barrier_id, number_of_threads=num_threads)
    if tidx < 32:
        # gO: (Br, D) the CTA's rows of the output; the tensor map clips rows >= Sq
        tile_mo = (cute.size(sO, mode=[0]), cute.size(sO, mode=[1]))
        gO = cute.local_tile(mO[None, None, head_idx, batch_idx], tile_mo, (m_block, 0))
        tOsO, tOgO = tma.partition(tma_atom_O, sO, gO)
        cute.copy(tma_atom_O, tOsO, tOgO)
        cute.arch.cp_async_bulk_commit_group()
        if cutlass.const_expr(wait_for_read):
            cute.arch.cp_async_bulk_wait_group(0, read=True)  # smem must outlive the copy


@cute.jit
def wait_o_store_read(tidx: Int32, barrier_id: cutlass.Constexpr, num_threads: cutlass.Constexpr):
    """Until the last O store (issued by warp 0, :func:`store_o_tma` without ``wait_for_read``)
    has read its shared memory; the ``num_threads`` consumer threads meet at ``barrier_id``
    after warp 0's wait, so every one of them may write ``sO`` again."""
    if tidx < 32:
        cute.arch.cp_async_bulk_wait_group(0, read=True)
    cute.arch.barrier(barrier_id=barrier_id, number_of_threads=num_threads)


@cute.jit
def store_lse(lse: cute.Tensor, mLSE: cute.Tensor | None, thr_mma, tile_mn: cutlass.Constexpr, m_block: Int32,
              head_idx: Int32, batch_idx: Int32, seqlen_q: Int32):
    """The quad lane holding column 0 of each row writes that row's LSE (``mLSE`` [B, Hq, Sq]);
    nothing when the caller asked for no LSE (``mLSE`` None)."""
    if cutlass.const_expr(mLSE is not None):
        tXcX_mn = wg.acc_rows_view(thr_mma.partition_C(cute.make_identity_tensor(tile_mn)))
        if tXcX_mn[0, 0][1] == 0:
            for r in cutlass.range_constexpr(cute.size(lse)):
                row_idx = m_block * tile_mn[0] + tXcX_mn[r, 0][0]
                if row_idx < seqlen_q:
                    mLSE[batch_idx, head_idx, row_idx] = lse[r]
