"""K4 — K3 + WGMMA: S = Q K^T and O += P V on the tensor cores, as warpgroup MMAs.

What it computes
    out[b, i, h, :] = softmax(scale * q[b, i, h, :] @ k[b, :, h_kv, :]^T) @ v[b, :, h_kv, :]
    for q ``[B, Sq, Hq, D]``, k and v ``[B, Sk, Hkv, D]``, out ``[B, Sq, Hq, D]`` (bf16 or fp16),
    ``h_kv = h // (Hq // Hkv)`` (GQA), optional causal mask aligned bottom-right (query ``i``
    sees keys ``j <= i + Sk - Sq``), optional ``lse [B, Hq, Sq]`` fp32 (natural log).

Delta from K3
    K3 multiplies in FP32 FFMA, one scalar product at a time, out of shared memory. K4 hands
    both GEMMs to the tensor cores: ``wgmma.mma_async`` (HGMMA, sm_90a) run by a whole
    warpgroup (4 warps) on a 64-row tile, bf16 operands, fp32 accumulators in registers.
    A and B are read straight from the swizzled smem tiles the TMA wrote (the swizzle K3
    introduced against bank conflicts is the layout WGMMA descriptors expect). The score
    tile no longer goes through shared memory: S lives in the accumulator fragment, the
    online softmax works on it there, and P is converted to bf16 in registers and fed back
    as the A operand of ``O += P V``.

How it works (two consumer warpgroups, warps 0-7, own 64 query rows each; warp 8 is K3's producer)
    0. Warp 8 issues the TMA loads as in K3: Q (one 64 x D tile per warpgroup), then K_n and
       V_n for every visible KV tile into the 2-stage ring. Tiles are ``Bc = 128`` keys now.
    1. Wait for Q. Set ``row_max = -inf``, ``row_sum = 0`` and ``acc_O = 0`` for the
       thread's two rows. The accumulator of a 64 x N WGMMA gives thread ``t`` (warp ``w``,
       lane ``l``) rows ``16 w + l / 4`` and ``16 w + l / 4 + 8`` and, in every group of 8
       columns, the pair ``2 (l % 4) + {0, 1}``: a row belongs to the 4 lanes of a quad,
       the same ownership K2 chose by hand (4 threads per row), so K2's shuffle reductions
       (``threads_in_group = 4``: SHFL.BFLY xor 1, xor 2) and online-softmax step apply
       unchanged, row by row.
    2. For each visible KV tile ``n`` (tiles that need no mask first, in a mask-free loop;
       then the tiles on the causal diagonal or holding the sequence tail, masked):
       a. wait for K_n;
       b. ``S = Q K_n^T``: D/16 HGMMA (m64 n128 k16), one commit group, wait; release K_n;
          scale by ``scale * log2(e)``; keys past ``Sk`` or (causal) past ``i + Sk - Sq``
          become ``-inf`` (masked tiles only);
       c. online softmax per row on the fragment (``P = exp2(S - max)`` in place, rescale
          ``acc_O``); P -> bf16 in registers, viewed as the WGMMA A fragment (for 16-bit
          types the accumulator of two n8 column groups *is* the A fragment of one k16 step:
          a regrouping of modes, no shuffles, no shared memory);
       d. wait for V_n;
       e. ``O += P V_n``: Bc/16 HGMMA with A from registers and B = V_n^T (the smem tile
          read MN-major through a transposed view); wait; release V_n.
    3. ``out = acc_O * rcp(row_sum)`` (rows that saw no key: zeros, LSE ``-inf``). Each
       warpgroup writes its O tile into its own Q tile in smem (dead by now) with ``stmatrix``
       and one thread stores it with a TMA store; the 4-D (S, D, H, B) tensor map clips rows
       past ``Sq``, so nothing spills into the next head or batch. LSE: quad lane 0 of each row.

Cost
    Tensor cores do the 4 D FLOPs per (query, key) pair, so the ceiling moves from the FP32 pipe
    (~67 TFLOP/s by the datasheet) to the bf16 tensor cores (see the cuBLAS GEMM ceiling
    measured with every table). Within a warpgroup the two GEMMs and the softmax run back to
    back (softmax waits for S, the PV GEMM waits for P), and the softmax is not cheap: 64 x Bc
    exponentials at 16 per clock per SM (MUFU) take about as long as one of the two GEMMs (64 x
    Bc x D x 2 FLOPs at ~4096 per clock). The tensor cores stay busy only while the two
    warpgroups are out of phase, one in its softmax while the other runs its GEMMs; nothing
    enforces that (no ping-pong barrier), there is no overlap of softmax and GEMMs inside a
    warpgroup, and no register reallocation (``setmaxnreg``): those are K5's. Registers: ptxas
    caps this 288-thread CTA at 168 registers per thread (as for 384 threads: it budgets whole
    warpgroups). That fits D <= 128 (O 64 + S 64 + P 32 registers plus addresses; the d128
    variants use all 168 without spilling) but not D = 256, which runs one consumer warpgroup
    (160 threads, up to 255 registers) on 64-key tiles.

Constraints
    head_dim 64, 128 or 256; bf16 or fp16; any Sq, Sk >= 1, batch, heads (Hq % Hkv == 0);
    last dimension contiguous, other strides multiples of 8 elements, 16-byte aligned base
    pointers (tensor-map rules). softmax scale: a runtime argument (``problem.softmax_scale``).
    Shared memory: see ``shared_bytes``: 160 KiB at D = 128, 80 KiB at D = 64, 160 KiB at 256.

Run and inspect
    compiled = compile_kernel(problem); run_kernel(compiled, q, k, v, out, lse)
    python -m tools.inspect k4        # SASS mix on a CPU-only machine (HGMMA, UTMALDG, SYNCS)
    python scripts/check_k3_k4.py --rungs k4   # GPU correctness sweep and timing
"""

from __future__ import annotations

from dataclasses import dataclass

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Float32, Int32, const_expr

from kernels.cute import launch
from kernels.cute import tma
from kernels.cute import wgmma as wg
from kernels.cute.mask import key_limit, kv_block_count
from kernels.cute.softmax import LOG2_E, finalize_row, online_softmax_step
from kernels.cute.tensors import bshd_tensor

IDEA = "WGMMA: S = QK^T and O += PV on tensor cores (bf16 in, fp32 accumulators), softmax on the fragments"
RUNG = "k4"
HEAD_DIMS = (64, 128, 256)
DTYPES = ("bf16", "fp16")
SUPPORTS_LSE = True


@dataclass(frozen=True)
class TileConfig:
    num_warpgroups: int  # consumer warpgroups, 64 query rows each: Br = 64 * num_warpgroups
    block_n: int  # Bc: keys per KV tile (N of S = Q K^T, K of O += P V)


# Not tuned on the GPU yet: FlashAttention-3's shapes where registers allow (see "Cost").
# Shared memory (bf16): Q Br x D + K and V 2 stages x Bc x D each.
TILE_CONFIGS = {64: TileConfig(2, 128), 128: TileConfig(2, 128), 256: TileConfig(1, 64)}


class K4FMHA:
    threads_per_row = 4  # the 4 lanes of a quad share an accumulator row
    num_stages = 2  # K and V buffers each: tile n + 1 loads while tile n is used
    epilogue_barrier_id = 1  # + warpgroup index: named barriers (0 is __syncthreads)

    def __init__(self, head_dim: int, causal: bool, dtype: type[cutlass.Numeric]):
        self.head_dim = head_dim
        self.causal = causal
        self.dtype = dtype
        config = TILE_CONFIGS[head_dim]
        self.num_warpgroups = config.num_warpgroups
        self.block_m = wg.WGMMA_M * config.num_warpgroups  # Br: query rows per CTA
        self.block_n = config.block_n  # Bc: keys per KV tile
        self.num_compute_threads = wg.WARPGROUP_THREADS * config.num_warpgroups
        self.producer_warp = self.num_compute_threads // 32  # the warp after the consumers
        self.num_threads = self.num_compute_threads + 32

    # ---- host side: shared-memory plan, TMA descriptors, MMAs, grid, launch ------------------
    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor | None, softmax_scale: Float32, stream: cuda.CUstream):
        mQ = bshd_tensor(mQ, self.head_dim)
        mK = bshd_tensor(mK, self.head_dim)
        mV = bshd_tensor(mV, self.head_dim)
        mO = bshd_tensor(mO, self.head_dim)

        # Q/K/V tiles: row-major, 128-byte swizzled (what the TMA writes and WGMMA reads).
        # Q: one 64-row tile per warpgroup, so each warpgroup's rows (and later its O) are
        # one contiguous swizzled block.
        sQ_layout = tma.smem_tile_layout(self.dtype, wg.WGMMA_M, self.head_dim, self.num_warpgroups)
        sKV_layout = tma.smem_tile_layout(self.dtype, self.block_n, self.head_dim, self.num_stages)

        # One tensor map per operand over the (S, D, H, B) view; a box is one tile.
        tma_atom_Q, tma_Q = tma.make_tma_load(tma.seq_major_view(mQ), sQ_layout, wg.WGMMA_M, self.head_dim)
        tma_atom_K, tma_K = tma.make_tma_load(tma.seq_major_view(mK), sKV_layout, self.block_n, self.head_dim)
        tma_atom_V, tma_V = tma.make_tma_load(tma.seq_major_view(mV), sKV_layout, self.block_n, self.head_dim)
        tma_atom_O, tma_O = tma.make_tma_store(tma.seq_major_view(mO), sQ_layout, wg.WGMMA_M, self.head_dim)
        self.q_bytes = tma.box_bytes(self.dtype, sQ_layout) * self.num_warpgroups
        self.kv_bytes = tma.box_bytes(self.dtype, sKV_layout)

        # S = Q K^T: m64 nBc k16, A = Q and B = K both K-major in smem.
        tiled_mma_qk = wg.make_warpgroup_mma(self.dtype, self.block_n)
        # O += P V: m64 nD k16, A = P from registers, B = V^T (MN-major: D is contiguous).
        tiled_mma_pv = wg.make_warpgroup_mma(self.dtype, self.head_dim, b_mn_major=True,
                                             a_in_registers=True)

        @cute.struct
        class SharedStorage:
            mbar_Q: cute.struct.MemRange[cutlass.Int64, 2]  # full, empty
            mbar_K: cute.struct.MemRange[cutlass.Int64, 2 * self.num_stages]
            mbar_V: cute.struct.MemRange[cutlass.Int64, 2 * self.num_stages]
            # 1024-byte alignment: the swizzle pattern repeats every 8 rows of 128 bytes.
            sQ: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sQ_layout)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sKV_layout)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sKV_layout)], 1024]

        # exp(scale * s) = 2^(scale * log2(e) * s): one multiply folded into the scale.
        scale_log2 = softmax_scale * LOG2_E
        batch, seqlen_q, heads_q, _ = mQ.shape
        grid = (cute.ceil_div(seqlen_q, self.block_m), heads_q, batch)
        self.kernel(tma_Q, tma_K, tma_V, tma_O, mLSE, tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_O,
                    scale_log2, sQ_layout, sKV_layout, tiled_mma_qk, tiled_mma_pv,
                    SharedStorage).launch(grid=grid, block=(self.num_threads, 1, 1),
                                          smem=SharedStorage.size_in_bytes(), stream=stream)

    # ---- device side ---------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
               mLSE: cute.Tensor | None, tma_atom_Q: cute.CopyAtom, tma_atom_K: cute.CopyAtom,
               tma_atom_V: cute.CopyAtom, tma_atom_O: cute.CopyAtom, scale_log2: Float32,
               sQ_layout: cute.ComposedLayout, sKV_layout: cute.ComposedLayout,
               tiled_mma_qk: cute.TiledMma, tiled_mma_pv: cute.TiledMma, SharedStorage: cutlass.Constexpr):
        # mQ, mK, mV, mO: (S, D, H, B) TMA coordinate tensors
        tidx, _, _ = cute.arch.thread_idx()
        block_idx, head_idx, batch_idx = cute.arch.block_idx()
        # Causal: the last query tiles see the most keys; start them first.
        m_block = cute.arch.grid_dim()[0] - 1 - block_idx if const_expr(self.causal) else block_idx
        seqlen_q = mQ.shape[0]
        seqlen_k = mK.shape[0]
        kv_head_idx = head_idx // (mQ.shape[2] // mK.shape[2])
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == self.producer_warp:
            for tma_atom in (tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_O):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_atom)

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)  # (64, D, warpgroup)
        sK = storage.sK.get_tensor(sKV_layout.outer, swizzle=sKV_layout.inner)  # (Bc, D, stage)
        sV = storage.sV.get_tensor(sKV_layout.outer, swizzle=sKV_layout.inner)  # (Bc, D, stage)

        # Full/empty mbarrier rings for Q, K and V (one producer thread, one arrival per compute warp).
        pipeline_q, pipeline_k, pipeline_v = tma.make_qkv_pipelines(
            storage, self.num_stages, self.num_compute_threads // 32, self.q_bytes, self.kv_bytes)

        n_block_max = kv_block_count(m_block, self.block_m, self.block_n, seqlen_q, seqlen_k, self.causal)
        if warp_idx == self.producer_warp:
            self.load(mQ, mK, mV, sQ, sK, sV, tma_atom_Q, tma_atom_K, tma_atom_V, pipeline_q,
                      pipeline_k, pipeline_v, m_block, head_idx, kv_head_idx, batch_idx, n_block_max)
        else:
            self.compute(mO, mLSE, sQ, sK, sV, tma_atom_O, tiled_mma_qk, tiled_mma_pv, pipeline_q,
                         pipeline_k, pipeline_v, scale_log2, tidx, m_block, head_idx, batch_idx,
                         seqlen_q, seqlen_k, n_block_max)

    # ---- device roles --------------------------------------------------------------------------
    @cute.jit
    def load(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, sQ: cute.Tensor,
             sK: cute.Tensor, sV: cute.Tensor, tma_atom_Q: cute.CopyAtom, tma_atom_K: cute.CopyAtom,
             tma_atom_V: cute.CopyAtom, pipeline_q, pipeline_k, pipeline_v, m_block: Int32,
             head_idx: Int32, kv_head_idx: Int32, batch_idx: Int32, n_block_max: Int32):
        """Producer warp: Q once, then K_n and V_n into the stage ring (one elected lane issues)."""
        # gQ: (64, D, Sq/64) this head's query tiles; gK, gV: (Bc, D, Sk/Bc) its KV tiles
        gQ = cute.local_tile(mQ[None, None, head_idx, batch_idx], (wg.WGMMA_M, self.head_dim), (None, 0))
        gK = cute.local_tile(mK[None, None, kv_head_idx, batch_idx], (self.block_n, self.head_dim), (None, 0))
        gV = cute.local_tile(mV[None, None, kv_head_idx, batch_idx], (self.block_n, self.head_dim), (None, 0))
        # (TMA, tile) in global memory, (TMA, stage) in shared memory
        tQsQ, tQgQ = tma.partition(tma_atom_Q, sQ, gQ)
        tKsK, tKgK = tma.partition(tma_atom_K, sK, gK)
        tVsV, tVgV = tma.partition(tma_atom_V, sV, gV)

        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        pipeline_q.producer_acquire(q_state)
        for wg_idx in cutlass.range_constexpr(self.num_warpgroups):
            cute.copy(tma_atom_Q, tQgQ[None, m_block * self.num_warpgroups + wg_idx], tQsQ[None, wg_idx],
                      tma_bar_ptr=pipeline_q.producer_get_barrier(q_state))
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.num_stages)
        for n_block in cutlass.range(n_block_max, unroll=1):
            # Waits until the compute warps have released this stage (tile n_block - 2).
            pipeline_k.producer_acquire(kv_state)
            cute.copy(tma_atom_K, tKgK[None, n_block], tKsK[None, kv_state.index],
                      tma_bar_ptr=pipeline_k.producer_get_barrier(kv_state))
            pipeline_v.producer_acquire(kv_state)
            cute.copy(tma_atom_V, tVgV[None, n_block], tVsV[None, kv_state.index],
                      tma_bar_ptr=pipeline_v.producer_get_barrier(kv_state))
            kv_state.advance()

    @cute.jit
    def compute(self, mO: cute.Tensor, mLSE: cute.Tensor | None, sQ: cute.Tensor, sK: cute.Tensor,
                sV: cute.Tensor, tma_atom_O: cute.CopyAtom, tiled_mma_qk: cute.TiledMma,
                tiled_mma_pv: cute.TiledMma, pipeline_q, pipeline_k, pipeline_v,
                scale_log2: Float32, tidx: Int32, m_block: Int32, head_idx: Int32, batch_idx: Int32,
                seqlen_q: Int32, seqlen_k: Int32, n_block_max: Int32):
        """Consumer warpgroups: 64 query rows each, S and O in WGMMA accumulator fragments."""
        # This thread's warpgroup, its index in it, and the warpgroup's first query row.
        wg_idx = cute.arch.make_warp_uniform(tidx // wg.WARPGROUP_THREADS)
        wg_tidx = tidx % wg.WARPGROUP_THREADS
        row_base = (m_block * self.num_warpgroups + wg_idx) * wg.WGMMA_M
        thr_mma_qk = tiled_mma_qk.get_slice(wg_tidx)
        thr_mma_pv = tiled_mma_pv.get_slice(wg_tidx)
        sQ_wg = sQ[None, None, wg_idx]  # (64, D) this warpgroup's Q tile (and, at the end, O)
        # tSrQ: (MMA, 1, D/16) and tSrK: (MMA, 1, D/16, stage) smem descriptors, not registers
        tSrQ = thr_mma_qk.make_fragment_A(thr_mma_qk.partition_A(sQ_wg))
        tSrK = thr_mma_qk.make_fragment_B(thr_mma_qk.partition_B(sK))
        # tOrVt: (MMA, D/N, Bc/16, stage) descriptors of V^T, the (D, Bc) view of each V stage
        tOrVt = thr_mma_pv.make_fragment_B(thr_mma_pv.partition_B(wg.transposed_view(sV)))

        # ============ Phase 1: Q tile -> sQ; running max, sum and O accumulator ============
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        pipeline_q.consumer_wait(q_state)
        # acc_O: ((2, 2, D/8), 1, 1) fp32 -- rows 16 w + l/4 (+8), columns 8 j + 2 (l%4) (+1)
        acc_O = cute.make_rmem_tensor(thr_mma_pv.partition_shape_C((wg.WGMMA_M, self.head_dim)), Float32)
        acc_O.fill(0.0)
        acc_O_mn = wg.acc_rows_view(acc_O)  # (2 rows, D/4 columns)
        num_rows = cute.size(acc_O_mn, mode=[0])
        row_max = cute.make_rmem_tensor((num_rows,), Float32)
        row_sum = cute.make_rmem_tensor((num_rows,), Float32)
        row_max.fill(-Float32.inf)
        row_sum.fill(0.0)
        # tScS_mn: (2 rows, Bc/4 columns) -- (row, key) coordinates of this thread's S entries
        tScS_mn = wg.acc_rows_view(thr_mma_qk.partition_C(cute.make_identity_tensor((wg.WGMMA_M, self.block_n))))
        # Keys a row sees, counted from this thread's first column of a tile: the mask then
        # compares compile-time column offsets (thread 0's) against one number per row.
        col_limit = cute.make_rmem_tensor((num_rows,), Int32)
        for r in cutlass.range_constexpr(num_rows):
            col_limit[r] = key_limit(row_base + tScS_mn[r, 0][0], seqlen_q, seqlen_k, self.causal) - tScS_mn[0, 0][1]

        # ============ Phase 2: KV mainloop ============
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
        mma_one_n_block = self.make_mma_one_n_block(
            tiled_mma_qk, tiled_mma_pv, thr_mma_qk, tSrQ, tSrK, tOrVt, acc_O, row_max, row_sum,
            col_limit, pipeline_k, pipeline_v, scale_log2)
        # Tiles before n_block_masked are fully visible to every row: no mask code at all.
        n_block_masked = self.first_masked_block(m_block, seqlen_q, seqlen_k, n_block_max)
        for n_block in cutlass.range(n_block_masked, unroll=1):
            kv_state = mma_one_n_block(kv_state, n_block, False)
        for n_block in cutlass.range(n_block_masked, n_block_max, unroll=1):
            kv_state = mma_one_n_block(kv_state, n_block, True)

        # ============ Phase 3: normalize, store O and LSE ============
        lse = cute.make_rmem_tensor((num_rows,), Float32)
        for r in cutlass.range_constexpr(num_rows):
            inv_sum, lse[r] = finalize_row(row_max[r], row_sum[r])
            acc_O_mn[r, None].store(acc_O_mn[r, None].load() * inv_sum)
        self.store_output(acc_O, mO, sQ_wg, tma_atom_O, tiled_mma_pv, wg_idx, wg_tidx, m_block,
                          head_idx, batch_idx)
        if const_expr(mLSE is not None):
            # The quad lane holding column 0 writes its two rows.
            if tScS_mn[0, 0][1] == 0:
                for r in cutlass.range_constexpr(num_rows):
                    row_idx = row_base + tScS_mn[r, 0][0]
                    if row_idx < seqlen_q:
                        mLSE[batch_idx, head_idx, row_idx] = lse[r]

    def make_mma_one_n_block(self, *loop_invariants):
        """Bind the loop-invariant arguments of :meth:`mma_one_n_block`."""
        def step(kv_state, n_block, masked):
            return self.mma_one_n_block(kv_state, n_block, *loop_invariants, masked)
        return step

    @cute.jit
    def mma_one_n_block(self, kv_state, n_block: Int32, tiled_mma_qk: cute.TiledMma,
                        tiled_mma_pv: cute.TiledMma, thr_mma_qk, tSrQ: cute.Tensor, tSrK: cute.Tensor,
                        tOrVt: cute.Tensor, acc_O: cute.Tensor, row_max: cute.Tensor,
                        row_sum: cute.Tensor, col_limit: cute.Tensor,
                        pipeline_k, pipeline_v, scale_log2: Float32, masked: cutlass.Constexpr[bool]):
        """Steps 2a-2e for KV tile ``n_block``; returns the advanced pipeline state."""
        # ---- 2a. K tile: wait until its TMA load has landed
        pipeline_k.consumer_wait(kv_state)

        # ---- 2b. S = Q K^T on the tensor cores, * scale * log2(e), then causal / tail mask
        # acc_S: ((2, 2, Bc/8), 1, 1) fp32, same row ownership as acc_O
        acc_S = cute.make_rmem_tensor(thr_mma_qk.partition_shape_C((wg.WGMMA_M, self.block_n)), Float32)
        wg.gemm(tiled_mma_qk, acc_S, tSrQ, tSrK[None, None, None, kv_state.index], zero_init=True, wait=True)
        pipeline_k.consumer_release(kv_state)
        acc_S.store(acc_S.load() * scale_log2)
        acc_S_mn = wg.acc_rows_view(acc_S)  # (2 rows, Bc/4 columns)
        if const_expr(masked):
            # t0ScS_mn: the (row, key) coordinates of thread 0's entries, known at compile time
            t0ScS_mn = wg.acc_rows_view(thr_mma_qk.get_slice(0).partition_C(
                cute.make_identity_tensor((wg.WGMMA_M, self.block_n))))
            for r in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[0])):
                limit = col_limit[r] - n_block * self.block_n
                for c in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[1])):
                    if t0ScS_mn[0, c][1] >= limit:
                        acc_S_mn[r, c] = -Float32.inf

        # ---- 2c. online softmax row by row (a quad shares a row), rescale O; P -> bf16 A operand
        acc_O_mn = wg.acc_rows_view(acc_O)
        for r in cutlass.range_constexpr(cute.size(acc_S_mn, mode=[0])):
            row_max[r], row_sum[r], correction = online_softmax_step(
                acc_S_mn[r, None], row_max[r], row_sum[r], self.threads_per_row)
            acc_O_mn[r, None].store(acc_O_mn[r, None].load() * correction)
        tOrP_acc = wg.acc_as_a_operand(acc_S)  # ((2, 2, 2), 1, Bc/16): P as the A fragment
        tOrP = cute.make_rmem_tensor_like(tOrP_acc, self.dtype)
        tOrP.store(tOrP_acc.load().to(self.dtype))

        # ---- 2d. V tile: wait until its TMA load has landed
        pipeline_v.consumer_wait(kv_state)

        # ---- 2e. O += P V on the tensor cores (A = P from registers, B = V^T from smem)
        wg.gemm(tiled_mma_pv, acc_O, tOrP, tOrVt[None, None, None, kv_state.index], zero_init=False, wait=True)
        pipeline_v.consumer_release(kv_state)
        kv_state.advance()
        return kv_state

    @cute.jit
    def first_masked_block(self, m_block: Int32, seqlen_q: Int32, seqlen_k: Int32, n_block_max: Int32) -> Int32:
        """First KV tile that some row of this CTA sees only in part: the tile holding the
        sequence tail (the last one), or for causal the first tile crossing the diagonal."""
        n_block = n_block_max - 1
        if const_expr(self.causal):
            # The CTA's first row sees keys j <= m_block * Br + Sk - Sq: tiles ending at or
            # before that key are fully visible to all of its rows.
            first_row_keys = m_block * self.block_m + seqlen_k - seqlen_q + 1
            n_block = cutlass.min(n_block, cutlass.max(first_row_keys, 0) // self.block_n)
        return cutlass.max(n_block, 0)

    @cute.jit
    def store_output(self, acc_O: cute.Tensor, mO: cute.Tensor, sO: cute.Tensor,
                     tma_atom_O: cute.CopyAtom, tiled_mma_pv: cute.TiledMma, wg_idx: Int32,
                     wg_tidx: Int32, m_block: Int32, head_idx: Int32, batch_idx: Int32):
        """O fragment -> bf16 -> stmatrix into this warpgroup's Q tile -> one TMA store."""
        rO = cute.make_rmem_tensor_like(acc_O, self.dtype)
        rO.store(acc_O.load().to(self.dtype))
        # The last QK GEMM of this warpgroup has completed, so its Q tile is free.
        smem_copy_O = cute.make_tiled_copy_C(
            cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), self.dtype), tiled_mma_pv)
        thr_copy_O = smem_copy_O.get_slice(wg_tidx)
        cute.copy(smem_copy_O, thr_copy_O.retile(rO), thr_copy_O.partition_D(sO))
        # Generic-proxy smem writes -> visible to the TMA (async proxy); then one warp stores.
        cute.arch.fence_view_async_shared()
        cute.arch.barrier(barrier_id=self.epilogue_barrier_id + wg_idx, number_of_threads=wg.WARPGROUP_THREADS)
        if wg_tidx < 32:
            # gO: (64, D) this warpgroup's rows of the output; the tensor map clips rows >= Sq
            gO = cute.local_tile(mO[None, None, head_idx, batch_idx], (wg.WGMMA_M, self.head_dim),
                                 (m_block * self.num_warpgroups + wg_idx, 0))
            tOsO, tOgO = tma.partition(tma_atom_O, sO, gO)
            cute.copy(tma_atom_O, tOsO, tOgO)
            cute.arch.cp_async_bulk_commit_group()
            cute.arch.cp_async_bulk_wait_group(0, read=True)  # smem must outlive the copy


def shared_bytes(head_dim: int, dtype_bytes: int = 2) -> int:
    """Shared memory per CTA (before the alignment of each buffer; mbarriers not counted)."""
    config = TILE_CONFIGS[head_dim]
    rows = wg.WGMMA_M * config.num_warpgroups + 2 * K4FMHA.num_stages * config.block_n
    return rows * head_dim * dtype_bytes


# ---- the rung interface (identical for every rung: kernels/cute/launch.py) -------------------
_API = launch.RungAPI(RUNG, K4FMHA, HEAD_DIMS, DTYPES)
can_implement = _API.can_implement
compile_kernel = _API.compile_kernel
run_kernel = _API.run_kernel
compile_for_inspect = _API.compile_for_inspect
