"""K2 — row-group FlashAttention-2: a CTA computes a 64-row query tile through shared memory.

What it computes
    out[b, i, h, :] = softmax(scale * q[b, i, h, :] @ k[b, :, h_kv, :]^T) @ v[b, :, h_kv, :]
    for q ``[B, Sq, Hq, D]``, k and v ``[B, Sk, Hkv, D]``, out ``[B, Sq, Hq, D]`` (bf16 or fp16),
    ``h_kv = h // (Hq // Hkv)`` (GQA), optional causal mask aligned bottom-right (query ``i``
    sees keys ``j <= i + Sk - Sq``), optional ``lse [B, Hq, Sq]`` fp32 (natural log).

Delta from K1
    K1 gives every query row its own thread and re-reads every key and value from global memory
    once per row. K2 tiles the problem the FlashAttention-2 way: a CTA of 256 threads owns
    ``Br = 64`` query rows and walks the keys in tiles of ``Bc = 64``; each K/V tile is loaded
    into shared memory once and reused by all 64 rows. Four adjacent threads share a row
    (``THREADS_PER_ROW = 4``), so a row's max and sum are combined with two butterfly
    shuffles (SHFL.BFLY), and the normalization uses ``rcp.approx``.

How it works (thread ``t`` owns row ``r = t // 4`` of the tile and is lane ``c = t % 4`` of it)
    1. Load the Q tile (64 x D) into ``sQ`` (rows past ``Sq`` are zero-filled). Set
       ``row_max = -inf``, ``row_sum = 0``, ``acc_O = 0`` (D/4 fp32 registers: the 8-column
       chunks ``c, c + 4, c + 8, ...`` of the row).
    2. For each KV tile ``n`` the tile can see (with a causal mask: up to the last tile that
       its last row sees; later tiles are fully masked and skipped):
       a. load K_n (64 x D) into ``sKV``, zero-filling rows past ``Sk``;
       b. ``S = Q K_n^T * scale * log2(e)``: the thread computes the 16 scores of keys
          ``c, c + 4, ..., c + 60`` of its row with FFMA, reading 16-byte rows of sQ and sKV;
          keys past ``Sk`` or (causal) past ``r + Sk - Sq`` become ``-inf``;
       c. online softmax: row max over the thread's 16 scores, then over the 4 threads of the
          row (``warp_reduction_max``, threads_in_group = 4); ``P = exp2(S - max)`` in place;
          row sum likewise (``warp_reduction_sum``); ``acc_O`` and ``row_sum`` are rescaled by
          ``exp2(old_max - new_max)``; P goes to ``sS`` so every lane of the row can read all 64;
       d. load V_n over K_n in ``sKV``;
       e. ``acc_O += P V_n``: for each of the 64 keys, one broadcast read of ``P[r, j]`` from sS
          and the thread's 8-column chunks of ``V_n[j]``.
       Four CTA barriers per tile separate the phases that reuse ``sKV`` and ``sS``.
    3. ``out = acc_O * rcp(row_sum)`` (rows that saw no key write zeros, LSE ``-inf``), rows past
       ``Sq`` are not stored; lane 0 of each row writes ``LSE = (row_max + log2 row_sum) ln 2``.

    Shared-memory rows are padded by 16 bytes (``SMEM_PAD``): the 8 rows a warp touches at
    once then start in 8 different groups of 4 banks, so the 16-byte reads of sQ, sKV and sS
    are free of bank conflicts.

Cost
    Still FP32 scalar math: every multiply-add is an FFMA fed by a shared-memory load, and
    bf16 -> fp32 conversions ride along. Global traffic drops by ~64x versus K1 (K/V are read
    once per 64 query rows); the ceiling is the FP32 pipe (~67 TFLOP/s on H200), and shared
    memory bandwidth and the barriers keep K2 well below it. Tensor cores arrive in K4.

Constraints
    head_dim 64 or 128; bf16 or fp16; any Sq, Sk >= 1, batch, heads (Hq % Hkv == 0);
    contiguous BSHD tensors (the device code takes any strides that are multiples of 8
    elements; run_kernel admits contiguous ones, the repository-wide contract), 16-byte aligned
    base pointers. softmax scale: a runtime argument (``problem.softmax_scale``).
    Shared memory (``shared_bytes``): 51 KiB per CTA at D = 128, 35 KiB at D = 64.

Run and inspect
    compiled = compile_kernel(problem); run_kernel(compiled, q, k, v, out, lse)
    python -m tools.inspect k2        # SASS mix on a CPU-only machine (FFMA, LDS, SHFL)
    pytest -m gpu tests/test_rungs_gpu.py -k k2    # GPU correctness sweep
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

from .cute import launch
from .cute.mask import apply_mask, key_limit, kv_block_count
from .cute.rowgroup import RowGroupFMHA
from .cute.softmax import LOG2_E, finalize_row, online_softmax_step
from .cute.tensors import bshd_tensor

IDEA = "row-group FA2: 64x64 tiles in shared memory, 4 threads per query row, shuffle reductions"
RUNG = "k2"
HEAD_DIMS = (64, 128)
DTYPES = ("bf16", "fp16")
SUPPORTS_LSE = True
KNOBS = ()  # keyword arguments of the constructor (compile_kernel(problem, **knobs))


class K2FMHA(RowGroupFMHA):
    """Tile shape, thread ownership, compute_scores, accumulate_pv and store_output:
    ``kernels/cute/rowgroup.py``."""

    num_threads = RowGroupFMHA.block_m * RowGroupFMHA.threads_per_row  # 256

    # ---- host side: shared-memory plan, grid, launch -----------------------------------------
    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor | None, softmax_scale: Float32, stream: cuda.CUstream):
        mQ = bshd_tensor(mQ, self.head_dim)
        mK = bshd_tensor(mK, self.head_dim)
        mV = bshd_tensor(mV, self.head_dim)
        mO = bshd_tensor(mO, self.head_dim)

        # Row-major tiles with padded rows (pad in elements of each tile's type).
        qkv_pad = self.smem_pad_bytes * 8 // self.dtype.width
        s_pad = self.smem_pad_bytes * 8 // Float32.width
        sQ_layout = cute.make_layout((self.block_m, self.head_dim), stride=(self.head_dim + qkv_pad, 1))
        sKV_layout = cute.make_layout((self.block_n, self.head_dim), stride=(self.head_dim + qkv_pad, 1))
        sS_layout = cute.make_layout((self.block_m, self.block_n), stride=(self.block_n + s_pad, 1))

        @cute.struct
        class SharedStorage:
            sQ: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sQ_layout)], 128]
            sKV: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sKV_layout)], 128]
            sS: cute.struct.Align[cute.struct.MemRange[Float32, cute.cosize(sS_layout)], 128]

        # exp(scale * s) = 2^(scale * log2(e) * s): one multiply folded into the scale.
        scale_log2 = softmax_scale * LOG2_E
        batch, seqlen_q, heads_q, _ = mQ.shape
        grid = (cute.ceil_div(seqlen_q, self.block_m), heads_q, batch)
        self.kernel(mQ, mK, mV, mO, mLSE, scale_log2, sQ_layout, sKV_layout, sS_layout,
                    SharedStorage).launch(grid=grid, block=(self.num_threads, 1, 1),
                                          smem=SharedStorage.size_in_bytes(), stream=stream)

    # ---- device side ---------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
               mLSE: cute.Tensor | None, scale_log2: Float32, sQ_layout: cute.Layout,
               sKV_layout: cute.Layout, sS_layout: cute.Layout, SharedStorage: cutlass.Constexpr):
        tidx, _, _ = cute.arch.thread_idx()
        m_block, head_idx, batch_idx = cute.arch.block_idx()
        seqlen_q = mQ.shape[1]
        seqlen_k = mK.shape[1]
        kv_head_idx = head_idx // (mQ.shape[2] // mK.shape[2])
        # This thread's row of the tile and its lane among the 4 threads of that row.
        row_in_tile = tidx // self.threads_per_row
        lane_in_row = tidx % self.threads_per_row
        row_idx = m_block * self.block_m + row_in_tile

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sQ = storage.sQ.get_tensor(sQ_layout)  # (Br, D)
        sKV = storage.sKV.get_tensor(sKV_layout)  # (Bc, D): K tile, then V tile in place
        sS = storage.sS.get_tensor(sS_layout)  # (Br, Bc) fp32: P of the current tile

        # gQ: (Br, D) this CTA's query tile; mK_bh, mV_bh: (Sk, D) of its kv head
        gQ = cute.local_tile(mQ[batch_idx, None, head_idx, None], (self.block_m, self.head_dim), (m_block, 0))
        mK_bh = mK[batch_idx, None, kv_head_idx, None]
        mV_bh = mV[batch_idx, None, kv_head_idx, None]

        # ============ Phase 1: Q tile -> sQ; running max, sum and O accumulator ============
        self.load_tile(gQ, sQ, tidx, seqlen_q - m_block * self.block_m)
        row_max = Float32(-Float32.inf)
        row_sum = Float32(0.0)
        # acc_O: (8, D/32) fp32 -- column chunk lane_in_row + 4 k of this thread's row
        acc_O = cute.make_rmem_tensor((self.vector, self.o_chunks_per_thread), Float32)
        acc_O.fill(0.0)
        # acc_S: (16,) fp32 -- scores of keys lane_in_row + 4 i of the current KV tile
        acc_S = cute.make_rmem_tensor((self.scores_per_thread,), Float32)
        col_limit = key_limit(row_idx, seqlen_q, seqlen_k, self.causal)

        # ============ Phase 2: KV mainloop ============
        n_block_max = kv_block_count(m_block, self.block_m, self.block_n, seqlen_q, seqlen_k, self.causal)
        for n_block in cutlass.range(n_block_max, unroll=1):
            # gK, gV: (Bc, D) KV tile n_block
            gK = cute.local_tile(mK_bh, (self.block_n, self.head_dim), (n_block, 0))
            gV = cute.local_tile(mV_bh, (self.block_n, self.head_dim), (n_block, 0))
            kv_rows_valid = seqlen_k - n_block * self.block_n

            # ---- 2a. K tile -> sKV (every thread is done with the previous V tile and sS)
            cute.arch.sync_threads()
            self.load_tile(gK, sKV, tidx, kv_rows_valid)
            cute.arch.sync_threads()

            # ---- 2b. S = Q K^T * scale * log2(e), then causal / tail mask
            self.compute_scores(sQ, sKV, acc_S, row_in_tile, lane_in_row, scale_log2)
            apply_mask(acc_S, n_block * self.block_n + lane_in_row, self.threads_per_row, col_limit)

            # ---- 2c. online softmax: P = exp2(S - new_max) in place, rescale O; P -> sS
            row_max, row_sum, correction = online_softmax_step(acc_S, row_max, row_sum, self.threads_per_row)
            for i in cutlass.range_constexpr(cute.size(acc_O)):
                acc_O[i] = acc_O[i] * correction
            for i in cutlass.range_constexpr(self.scores_per_thread):
                sS[row_in_tile, lane_in_row + i * self.threads_per_row] = acc_S[i]

            # ---- 2d. V tile -> sKV, over K (every thread is done reading K)
            cute.arch.sync_threads()
            self.load_tile(gV, sKV, tidx, kv_rows_valid)
            cute.arch.sync_threads()

            # ---- 2e. O += P V
            self.accumulate_pv(sS, sKV, acc_O, row_in_tile, lane_in_row)

        # ============ Phase 3: normalize, store O and LSE ============
        inv_sum, lse = finalize_row(row_max, row_sum)
        # gO: (Br, D) output tile; formed after the mainloop so its address is not live (and
        # spilled) across it.
        gO = cute.local_tile(mO[batch_idx, None, head_idx, None], (self.block_m, self.head_dim), (m_block, 0))
        if row_idx < seqlen_q:
            self.store_output(acc_O, inv_sum, gO, row_in_tile, lane_in_row)
            if const_expr(mLSE is not None):
                if lane_in_row == 0:
                    mLSE[batch_idx, head_idx, row_idx] = lse

    # ---- device roles --------------------------------------------------------------------------
    @cute.jit
    def load_tile(self, gX: cute.Tensor, sX: cute.Tensor, tidx: Int32, rows_valid: Int32):
        """Copy a (rows, D) tile from global to shared memory, 16 bytes per thread per step;
        rows at or past ``rows_valid`` are zero-filled (a zero V row keeps 0 * garbage out of O)."""
        chunks_per_row = self.head_dim // self.vector
        # gX_vec, sX_vec: ((1, 8), (rows, D/8)) -- the tile as 16-byte pieces
        gX_vec = cute.zipped_divide(gX, (1, self.vector))
        sX_vec = cute.zipped_divide(sX, (1, self.vector))
        for step in cutlass.range_constexpr(cute.size(sX_vec, mode=[1]) // self.num_threads):
            # Consecutive threads take consecutive pieces of a row: coalesced global reads.
            piece_idx = step * self.num_threads + tidx
            row = piece_idx // chunks_per_row
            chunk = piece_idx % chunks_per_row
            if row < rows_valid:
                sX_vec[None, (row, chunk)].store(gX_vec[None, (row, chunk)].load())
            else:
                sX_vec[None, (row, chunk)].fill(0.0)


def shared_bytes(head_dim: int, dtype_bytes: int = 2) -> int:
    """Shared memory per CTA (before 128-byte alignment of each buffer)."""
    pad = K2FMHA.smem_pad_bytes
    q_and_kv = (K2FMHA.block_m + K2FMHA.block_n) * (head_dim * dtype_bytes + pad)
    s = K2FMHA.block_m * (K2FMHA.block_n * 4 + pad)
    return q_and_kv + s


# ---- the rung interface (identical for every rung: kernels/cute/launch.py) -------------------
_API = launch.RungAPI(RUNG, K2FMHA, HEAD_DIMS, DTYPES)
can_implement = _API.can_implement
compile_kernel = _API.compile_kernel
run_kernel = _API.run_kernel
compile_for_inspect = _API.compile_for_inspect
knob_error = _API.knob_error
