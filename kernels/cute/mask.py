"""Causal (bottom-right aligned) and sequence-tail masking, and the KV-loop bounds they imply.

Query row ``i`` sees keys ``j < key_limit(i)`` where ``key_limit = Sk`` without a causal mask
and ``min(Sk, i + (Sk - Sq) + 1)`` with one (may be <= 0: the row sees nothing).
"""

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32


@cute.jit
def key_limit(row_idx: Int32, seqlen_q: Int32, seqlen_k: Int32,
              causal: cutlass.Constexpr[bool]) -> Int32:
    """One past the last key that query ``row_idx`` may attend to."""
    limit = seqlen_k
    if cutlass.const_expr(causal):
        limit = cutlass.min(seqlen_k, row_idx + (seqlen_k - seqlen_q) + 1)
    return limit


@cute.jit
def kv_block_count(m_block: Int32, block_m: cutlass.Constexpr[int], block_n: cutlass.Constexpr[int],
                   seqlen_q: Int32, seqlen_k: Int32, causal: cutlass.Constexpr[bool]) -> Int32:
    """KV tiles a query tile must visit: with a causal mask it stops at the last tile its last
    row can see (tiles past that are fully masked and skipped). May be <= 0."""
    last_row = cutlass.min((m_block + 1) * block_m, seqlen_q) - 1
    keys = key_limit(last_row, seqlen_q, seqlen_k, causal)
    return (keys + (block_n - 1)) // block_n


@cute.jit
def apply_mask(acc_S: cute.Tensor, first_col_idx: Int32, col_stride: cutlass.Constexpr[int],
               col_limit: Int32):
    """Set ``acc_S[i]`` (key column ``first_col_idx + i * col_stride``) to -inf past ``col_limit``."""
    for i in cutlass.range_constexpr(cute.size(acc_S)):
        # A select, not an if-statement (see FragmentMask.apply).
        acc_S[i] = -Float32.inf if first_col_idx + i * col_stride >= col_limit else acc_S[i]


@cute.jit
def first_masked_block(m_block: Int32, block_m: cutlass.Constexpr[int], block_n: cutlass.Constexpr[int],
                       seqlen_q: Int32, seqlen_k: Int32, n_block_max: Int32,
                       causal: cutlass.Constexpr[bool]) -> Int32:
    """First KV tile that some row of query tile ``m_block`` sees only in part: the tile holding
    the sequence tail (the last one, unless ``Sk`` is a multiple of ``block_n``), or under the
    causal mask the first tile crossing the diagonal. Tiles before it need no mask code at all;
    ``n_block_max`` means none needs it."""
    n_block = n_block_max if seqlen_k % block_n == 0 else n_block_max - 1
    if cutlass.const_expr(causal):
        # The tile's first row sees keys j <= m_block * Br + Sk - Sq: tiles ending at or before
        # that key are fully visible to all of its rows.
        first_row_keys = m_block * block_m + seqlen_k - seqlen_q + 1
        n_block = cutlass.min(n_block, cutlass.max(first_row_keys, 0) // block_n)
    return cutlass.max(n_block, 0)


class FragmentMask:
    """The causal / sequence-tail mask on a WGMMA score fragment (K4 onwards).

    Built once per query tile: ``col_limit[r]`` is the key limit of the thread's row ``r``
    counted from the thread's first column, so that :meth:`apply` compares each score's
    *compile-time* column offset (thread 0's, from an identity tensor partitioned like the
    accumulator) with one number per row: a compare and a select per score.
    """

    def __init__(self, tiled_mma_qk, tidx: Int32, tile_mn: tuple, m_block: Int32, seqlen_q: Int32,
                 seqlen_k: Int32, causal: bool):
        from .wgmma import acc_rows_view

        self.block_n = tile_mn[1]
        row_base = m_block * tile_mn[0]  # the tile's first query row
        identity = cute.make_identity_tensor(tile_mn)
        # (row, key) of this thread's and of thread 0's entries: (rows, columns) views
        tScS_mn = acc_rows_view(tiled_mma_qk.get_slice(tidx).partition_C(identity))
        self.t0ScS_mn = acc_rows_view(tiled_mma_qk.get_slice(0).partition_C(identity))
        num_rows = cute.size(tScS_mn, mode=[0])
        self.col_limit = cute.make_rmem_tensor((num_rows,), Int32)
        for r in range(num_rows):  # plain Python: __init__ runs at trace time, unrolled
            self.col_limit[r] = (key_limit(row_base + tScS_mn[r, 0][0], seqlen_q, seqlen_k, causal)
                                 - tScS_mn[0, 0][1])

    @cute.jit
    def apply(self, acc_S_mn: cute.Tensor, n_block: Int32):
        """Scores of keys a row must not see (past ``Sk``, or past the diagonal) become -inf."""
        for r in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[0])):
            limit = self.col_limit[r] - n_block * self.block_n
            for c in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[1])):
                # A select, not an if-statement: a branch per score would make the compiler
                # carry the whole fragment through each one (hundreds of FSEL).
                acc_S_mn[r, c] = -Float32.inf if self.t0ScS_mn[0, c][1] >= limit else acc_S_mn[r, c]
