"""K2's row-group arithmetic, shared with K3 (which changes only how the tiles arrive).

A CTA owns ``Br = 64`` query rows; four adjacent threads share a row (``threads_per_row``),
each holding 16 of the row's 64 scores of a KV tile and ``D / 4`` columns of its output, as
8-column chunks ``c, c + 4, c + 8, ...``. The three pieces below are the FP32 scalar GEMMs and
the epilogue on that ownership; they read the Q, K, V and P tiles from shared memory through
CuTe tensors, so the same code serves K2's padded tiles and K3's swizzled TMA tiles.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32


class RowGroupFMHA:
    """Tile shape, thread ownership and the FP32 math of the row-group rungs (K2, K3)."""

    # Teaching choices, not tuned: one 64-row query tile per CTA, 64-key tiles, 4 threads/row.
    block_m = 64  # Br: query rows per CTA
    block_n = 64  # Bc: keys per KV tile
    threads_per_row = 4  # THREADS_PER_ROW
    vector = 8  # elements per 16-byte load / store
    smem_pad_bytes = 16  # SMEM_PAD: pad of K2's rows and of the P tile (see K2's docstring)

    def __init__(self, head_dim: int, causal: bool, dtype: type[cutlass.Numeric]):
        self.head_dim = head_dim
        self.causal = causal
        self.dtype = dtype
        # Each thread's share of a row: 16 scores of S and D/4 columns of O (8-column chunks).
        self.scores_per_thread = self.block_n // self.threads_per_row
        self.o_chunks_per_thread = self.head_dim // (self.vector * self.threads_per_row)

    @cute.jit
    def compute_scores(self, sQ: cute.Tensor, sK: cute.Tensor, acc_S: cute.Tensor,
                       row_in_tile: Int32, lane_in_row: Int32, scale_log2: Float32):
        """acc_S[i] = (Q[row] . K[lane_in_row + 4 i]) * scale_log2, in FP32 FFMA."""
        # sQ_row: ((8), (D/8)) this thread's query row; sK_vec: ((1, 8), (Bc, D/8))
        sQ_row = cute.zipped_divide(sQ[row_in_tile, None], (self.vector,))
        sK_vec = cute.zipped_divide(sK, (1, self.vector))
        rQ = cute.make_rmem_tensor((self.vector,), self.dtype)
        rK = cute.make_rmem_tensor((self.vector,), self.dtype)
        acc_S.fill(0.0)
        # A runtime loop over the D/8 chunks keeps the body (16 x 8 FFMA) small; fully unrolled,
        # the mainloop would be ~180 KB of SASS, far more than the instruction cache holds.
        for chunk in cutlass.range(self.head_dim // self.vector, unroll=1):
            rQ.store(sQ_row[None, chunk].load())
            for i in cutlass.range_constexpr(self.scores_per_thread):
                rK.store(sK_vec[None, (lane_in_row + i * self.threads_per_row, chunk)].load())
                for e in cutlass.range_constexpr(self.vector):
                    acc_S[i] += Float32(rQ[e]) * Float32(rK[e])
        for i in cutlass.range_constexpr(self.scores_per_thread):
            acc_S[i] = acc_S[i] * scale_log2

    @cute.jit
    def accumulate_pv(self, sP: cute.Tensor, sV: cute.Tensor, acc_O: cute.Tensor,
                      row_in_tile: Int32, lane_in_row: Int32):
        """acc_O += P[row, :] @ V[:, this thread's column chunks], in FP32 FFMA."""
        p_per_load = self.smem_pad_bytes * 8 // Float32.width  # 4 fp32 = one 16-byte read
        # sP_row: ((4), (Bc/4)) this row of P; sV_vec: ((1, 8), (Bc, D/8))
        sP_row = cute.zipped_divide(sP[row_in_tile, None], (p_per_load,))
        sV_vec = cute.zipped_divide(sV, (1, self.vector))
        rP = cute.make_rmem_tensor((p_per_load,), Float32)
        rV = cute.make_rmem_tensor((self.vector,), self.dtype)
        # Runtime loop over groups of 4 keys, for the same code-size reason as compute_scores.
        for j0 in cutlass.range(self.block_n // p_per_load, unroll=1):
            rP.store(sP_row[None, j0].load())
            for jj in cutlass.range_constexpr(p_per_load):
                key = j0 * p_per_load + jj
                for k in cutlass.range_constexpr(self.o_chunks_per_thread):
                    rV.store(sV_vec[None, (key, lane_in_row + k * self.threads_per_row)].load())
                    for e in cutlass.range_constexpr(self.vector):
                        acc_O[e, k] += rP[jj] * Float32(rV[e])

    @cute.jit
    def store_output(self, acc_O: cute.Tensor, inv_sum: Float32, gO: cute.Tensor,
                     row_in_tile: Int32, lane_in_row: Int32):
        """out[row, chunk lane_in_row + 4 k] = acc_O[:, k] * inv_sum, 16 bytes per store."""
        gO_vec = cute.zipped_divide(gO, (1, self.vector))
        rO = cute.make_rmem_tensor((self.vector,), self.dtype)
        for k in cutlass.range_constexpr(self.o_chunks_per_thread):
            rO.store((acc_O[None, k].load() * inv_sum).to(self.dtype))
            gO_vec[None, (row_in_tile, lane_in_row + k * self.threads_per_row)].store(rO.load())
