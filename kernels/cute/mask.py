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
        if first_col_idx + i * col_stride >= col_limit:
            acc_S[i] = -Float32.inf
