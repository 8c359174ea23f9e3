"""K3 — K2 + TMA: Q, K and V tiles arrive by the tensor memory accelerator.

What it computes
    out[b, i, h, :] = softmax(scale * q[b, i, h, :] @ k[b, :, h_kv, :]^T) @ v[b, :, h_kv, :]
    for q ``[B, Sq, Hq, D]``, k and v ``[B, Sk, Hkv, D]``, out ``[B, Sq, Hq, D]`` (bf16 or fp16),
    ``h_kv = h // (Hq // Hkv)`` (GQA), optional causal mask aligned bottom-right (query ``i``
    sees keys ``j <= i + Sk - Sq``), optional ``lse [B, Hq, Sq]`` fp32 (natural log).

Delta from K2
    K2's 256 threads copy every tile themselves (16-byte LDG + STS per thread, zero-filling
    the tails) and wait for each other with CTA barriers before and after every copy. K3 hands
    the copies to the TMA: one ``cp.async.bulk.tensor`` per tile (UTMALDG), issued by one
    thread of an extra producer warp, completes on an mbarrier that carries the expected
    transaction bytes. K and V get their own buffers, two stages each, so the next tile is
    loading while the 256 compute threads work on the current one. Out-of-bounds rows
    (past ``Sq`` or ``Sk``) are zero-filled by the hardware. Compute is unchanged: K2's
    scalar FFMA loops, so the difference between K2 and K3 is what TMA alone buys.

How it works (thread ``t`` of warps 0-7 owns row ``r = t // 4`` of the tile and is lane ``c = t % 4`` of it)
    0. Warp 8 (the producer) issues the TMA loads: Q once, then K_n and V_n for every KV tile
       into a 2-stage ring (``PipelineTmaAsync``: a *full* mbarrier per stage that the copy
       completes, an *empty* one that the 8 compute warps arrive on when done with the stage).
    1. Wait for the Q tile (64 x D) in ``sQ`` (rows past ``Sq`` arrive as zeros). Set
       ``row_max = -inf``, ``row_sum = 0``, ``acc_O = 0`` (D/4 fp32 registers: the 8-column
       chunks ``c, c + 4, c + 8, ...`` of the row).
    2. For each KV tile ``n`` the tile can see (with a causal mask: up to the last tile that
       its last row sees; later tiles are fully masked, skipped and never loaded):
       a. wait for K_n in ``sK[stage]`` (its full mbarrier);
       b. ``S = Q K_n^T * scale * log2(e)``: the thread computes the 16 scores of keys
          ``c, c + 4, ..., c + 60`` of its row with FFMA, reading 16-byte rows of sQ and sK;
          then releases the K stage; keys past ``Sk`` or (causal) past ``r + Sk - Sq``
          become ``-inf``;
       c. online softmax: row max over the thread's 16 scores, then over the 4 threads of the
          row (``warp_reduction_max``, threads_in_group = 4); ``P = exp2(S - max)`` in place;
          row sum likewise (``warp_reduction_sum``); ``acc_O`` and ``row_sum`` are rescaled by
          ``exp2(old_max - new_max)``; P goes to ``sS`` so every lane of the row can read all 64;
       d. wait for V_n in ``sV[stage]``;
       e. ``acc_O += P V_n``: for each of the 64 keys, one broadcast read of ``P[r, j]`` from sS
          and the thread's 8-column chunks of ``V_n[j]``; then release the V stage.
       Two barriers of the 256 compute threads per tile (K2: four CTA barriers) guard sS.
    3. ``out = acc_O * rcp(row_sum)`` (rows that saw no key write zeros, LSE ``-inf``), rows past
       ``Sq`` are not stored; lane 0 of each row writes ``LSE = (row_max + log2 row_sum) ln 2``.

    Bank conflicts: K2 padded each smem row by 16 bytes so the 8 rows a warp reads at once
    start in different bank groups. A TMA box lands dense (no padding), so K3 uses the
    128-byte swizzle instead: within every 8 rows the 16-byte chunks are permuted (chunk
    ``c`` of row ``r`` is stored at chunk ``c ^ (r % 8)``), which spreads the same 8-row
    reads over all 32 banks. The tensor map applies the same swizzle when it writes.

Cost
    Still FP32 scalar math. TMA removes the copy work of the compute threads (address math,
    LDG/STS, tail predicates) and the two CTA barriers around each copy, and overlaps the next
    tile's load with the current tile's math; it costs one extra warp per CTA (288 threads) and
    twice K2's shared memory (two stages each of K and V: 97 KiB at D = 128).

    Measured on the H200 (results/h200/ladder.json, the tables of the K3 page): K3 is slower
    than K2 at every seqlen, not the modest gain expected. The copies were not K2's bottleneck: both
    rungs spend their time in the same two inner loops (2b and 2e), where FFMA is only about a
    third of the instructions; the rest are 16-byte shared-memory reads (one per eight FFMA),
    bf16 -> fp32 conversions and address arithmetic. K3 keeps those loops and adds to them:
    the swizzled addresses take extra integer instructions (compare the SASS totals in the
    compiler's view), the TMA engine writes the next tiles into the same shared memory while
    the compute warps read, and each tile waits on mbarriers. Whether issue slots or
    shared-memory wavefronts bind first has not been profiled (no ncu run yet). What TMA buys
    shows up once the math leaves the FP32 pipe: in K4 the same producer feeds the tensor cores.

Constraints
    head_dim 64 or 128; bf16 or fp16; any Sq, Sk >= 1, batch, heads (Hq % Hkv == 0);
    last dimension contiguous, other strides multiples of 8 elements, 16-byte aligned base
    pointers (tensor-map rules). softmax scale: a runtime argument (``problem.softmax_scale``).
    Shared memory: see ``shared_bytes``: 97 KiB at D = 128, 57 KiB at D = 64.

Run and inspect
    compiled = compile_kernel(problem); run_kernel(compiled, q, k, v, out, lse)
    python -m tools.inspect k3        # SASS mix on a CPU-only machine (UTMALDG, SYNCS, FFMA, LDS)
    pytest -m gpu tests/test_rungs_gpu.py -k k3    # GPU correctness sweep
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Float32, Int32, const_expr

from .cute import launch, tma
from .cute.barriers import NamedBarrier
from .cute.mask import apply_mask, key_limit, kv_block_count
from .cute.rowgroup import RowGroupFMHA
from .cute.softmax import LOG2_E, finalize_row, online_softmax_step
from .cute.tensors import bshd_tensor

IDEA = "TMA: Q/K/V tiles by cp.async.bulk.tensor on mbarriers into swizzled smem, K/V double-buffered"
RUNG = "k3"
HEAD_DIMS = (64, 128)
DTYPES = ("bf16", "fp16")
SUPPORTS_LSE = True
KNOBS = ()  # keyword arguments of the constructor (compile_kernel(problem, **knobs))


class K3FMHA(RowGroupFMHA):
    """Tile shape, thread ownership, compute_scores, accumulate_pv and store_output are K2's
    (``kernels/cute/rowgroup.py``); what changes is how the tiles arrive."""

    num_compute_threads = RowGroupFMHA.block_m * RowGroupFMHA.threads_per_row  # 256, warps 0-7
    producer_warp = num_compute_threads // 32  # warp 8 issues the TMA loads
    num_threads = num_compute_threads + 32  # 288
    num_stages = 2  # K and V buffers each: tile n + 1 loads while tile n is used
    compute_barrier_id = int(NamedBarrier.COMPUTE)  # the 256 compute threads (0 is __syncthreads)

    # ---- host side: shared-memory plan, TMA descriptors, grid, launch ------------------------
    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor | None, softmax_scale: Float32, stream: cuda.CUstream):
        mQ = bshd_tensor(mQ, self.head_dim)
        mK = bshd_tensor(mK, self.head_dim)
        mV = bshd_tensor(mV, self.head_dim)
        mO = bshd_tensor(mO, self.head_dim)

        # Q/K/V tiles: row-major, 128-byte swizzled (what the TMA writes); sS: padded rows.
        s_pad = self.smem_pad_bytes * 8 // Float32.width
        sQ_layout = tma.smem_tile_layout(self.dtype, self.block_m, self.head_dim, 1)
        sKV_layout = tma.smem_tile_layout(self.dtype, self.block_n, self.head_dim, self.num_stages)
        sS_layout = cute.make_layout((self.block_m, self.block_n), stride=(self.block_n + s_pad, 1))

        # One tensor map per operand over the (S, D, H, B) view; a box is one tile.
        tma_atom_Q, tma_Q = tma.make_tma_load(tma.seq_major_view(mQ), sQ_layout, self.block_m, self.head_dim)
        tma_atom_K, tma_K = tma.make_tma_load(tma.seq_major_view(mK), sKV_layout, self.block_n, self.head_dim)
        tma_atom_V, tma_V = tma.make_tma_load(tma.seq_major_view(mV), sKV_layout, self.block_n, self.head_dim)
        self.q_bytes = tma.box_bytes(self.dtype, sQ_layout)
        self.kv_bytes = tma.box_bytes(self.dtype, sKV_layout)

        @cute.struct
        class SharedStorage:
            mbar_Q: cute.struct.MemRange[cutlass.Int64, 2]  # full, empty
            mbar_K: cute.struct.MemRange[cutlass.Int64, 2 * self.num_stages]
            mbar_V: cute.struct.MemRange[cutlass.Int64, 2 * self.num_stages]
            # 1024-byte alignment: the swizzle pattern repeats every 8 rows of 128 bytes.
            sQ: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sQ_layout)], 1024]
            sK: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sKV_layout)], 1024]
            sV: cute.struct.Align[cute.struct.MemRange[self.dtype, cute.cosize(sKV_layout)], 1024]
            sS: cute.struct.Align[cute.struct.MemRange[Float32, cute.cosize(sS_layout)], 128]

        # exp(scale * s) = 2^(scale * log2(e) * s): one multiply folded into the scale.
        scale_log2 = softmax_scale * LOG2_E
        batch, seqlen_q, heads_q, _ = mQ.shape
        grid = (cute.ceil_div(seqlen_q, self.block_m), heads_q, batch)
        self.kernel(tma_Q, tma_K, tma_V, mO, mLSE, tma_atom_Q, tma_atom_K, tma_atom_V, scale_log2,
                    sQ_layout, sKV_layout, sS_layout,
                    SharedStorage).launch(grid=grid, block=(self.num_threads, 1, 1),
                                          smem=SharedStorage.size_in_bytes(), stream=stream)

    # ---- device side ---------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
               mLSE: cute.Tensor | None, tma_atom_Q: cute.CopyAtom, tma_atom_K: cute.CopyAtom,
               tma_atom_V: cute.CopyAtom, scale_log2: Float32, sQ_layout: cute.ComposedLayout,
               sKV_layout: cute.ComposedLayout, sS_layout: cute.Layout, SharedStorage: cutlass.Constexpr):
        # mQ, mK, mV: (S, D, H, B) TMA coordinate tensors; mO: [B, Sq, Hq, D]
        tidx, _, _ = cute.arch.thread_idx()
        m_block, head_idx, batch_idx = cute.arch.block_idx()
        seqlen_q = mQ.shape[0]
        seqlen_k = mK.shape[0]
        kv_head_idx = head_idx // (mQ.shape[2] // mK.shape[2])
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        if warp_idx == self.producer_warp:
            for tma_atom in (tma_atom_Q, tma_atom_K, tma_atom_V):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_atom)

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(SharedStorage)
        sQ = storage.sQ.get_tensor(sQ_layout.outer, swizzle=sQ_layout.inner)  # (Br, D, 1)
        sK = storage.sK.get_tensor(sKV_layout.outer, swizzle=sKV_layout.inner)  # (Bc, D, stage)
        sV = storage.sV.get_tensor(sKV_layout.outer, swizzle=sKV_layout.inner)  # (Bc, D, stage)
        sS = storage.sS.get_tensor(sS_layout)  # (Br, Bc) fp32: P of the current tile

        # Full/empty mbarrier rings for Q, K and V (one producer thread, one arrival per compute warp).
        pipeline_q, pipeline_k, pipeline_v = tma.make_qkv_pipelines(
            storage, self.num_stages, self.num_compute_threads // 32, self.q_bytes, self.kv_bytes)

        n_block_max = kv_block_count(m_block, self.block_m, self.block_n, seqlen_q, seqlen_k, self.causal)
        if warp_idx == self.producer_warp:
            self.load(mQ, mK, mV, sQ, sK, sV, tma_atom_Q, tma_atom_K, tma_atom_V, pipeline_q,
                      pipeline_k, pipeline_v, m_block, head_idx, kv_head_idx, batch_idx, n_block_max)
        else:
            self.compute(mO, mLSE, sQ[None, None, 0], sK, sV, sS, pipeline_q, pipeline_k, pipeline_v,
                         scale_log2, tidx, m_block, head_idx, batch_idx, seqlen_q, seqlen_k, n_block_max)

    # ---- device roles --------------------------------------------------------------------------
    @cute.jit
    def load(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, sQ: cute.Tensor,
             sK: cute.Tensor, sV: cute.Tensor, tma_atom_Q: cute.CopyAtom, tma_atom_K: cute.CopyAtom,
             tma_atom_V: cute.CopyAtom, pipeline_q, pipeline_k, pipeline_v, m_block: Int32,
             head_idx: Int32, kv_head_idx: Int32, batch_idx: Int32, n_block_max: Int32):
        """Producer warp: Q once, then K_n and V_n into the stage ring (one elected lane issues)."""
        # gQ: (Br, D, Sq/Br) this head's query tiles; gK, gV: (Bc, D, Sk/Bc) its KV tiles
        gQ = cute.local_tile(mQ[None, None, head_idx, batch_idx], (self.block_m, self.head_dim), (None, 0))
        gK = cute.local_tile(mK[None, None, kv_head_idx, batch_idx], (self.block_n, self.head_dim), (None, 0))
        gV = cute.local_tile(mV[None, None, kv_head_idx, batch_idx], (self.block_n, self.head_dim), (None, 0))
        # (TMA, tile) in global memory, (TMA, stage) in shared memory
        tQsQ, tQgQ = tma.partition(tma_atom_Q, sQ, gQ)
        tKsK, tKgK = tma.partition(tma_atom_K, sK, gK)
        tVsV, tVgV = tma.partition(tma_atom_V, sV, gV)

        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        pipeline_q.producer_acquire(q_state)
        cute.copy(tma_atom_Q, tQgQ[None, m_block], tQsQ[None, 0],
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
                sV: cute.Tensor, sS: cute.Tensor, pipeline_q, pipeline_k, pipeline_v,
                scale_log2: Float32, tidx: Int32, m_block: Int32, head_idx: Int32, batch_idx: Int32,
                seqlen_q: Int32, seqlen_k: Int32, n_block_max: Int32):
        """Compute warps 0-7: K2's phases 1-3, with TMA waits where K2 copied tiles."""
        # This thread's row of the tile and its lane among the 4 threads of that row.
        row_in_tile = tidx // self.threads_per_row
        lane_in_row = tidx % self.threads_per_row
        row_idx = m_block * self.block_m + row_in_tile

        # ============ Phase 1: Q tile -> sQ; running max, sum and O accumulator ============
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        pipeline_q.consumer_wait(q_state)
        row_max = Float32(-Float32.inf)
        row_sum = Float32(0.0)
        # acc_O: (8, D/32) fp32 -- column chunk lane_in_row + 4 k of this thread's row
        acc_O = cute.make_rmem_tensor((self.vector, self.o_chunks_per_thread), Float32)
        acc_O.fill(0.0)
        # acc_S: (16,) fp32 -- scores of keys lane_in_row + 4 i of the current KV tile
        acc_S = cute.make_rmem_tensor((self.scores_per_thread,), Float32)
        col_limit = key_limit(row_idx, seqlen_q, seqlen_k, self.causal)

        # ============ Phase 2: KV mainloop ============
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)
        for n_block in cutlass.range(n_block_max, unroll=1):
            # sK_n, sV_n: (Bc, D) the stage holding KV tile n_block
            sK_n = sK[None, None, kv_state.index]
            sV_n = sV[None, None, kv_state.index]

            # ---- 2a. K tile: wait until its TMA load has landed
            pipeline_k.consumer_wait(kv_state)

            # ---- 2b. S = Q K^T * scale * log2(e), then causal / tail mask
            self.compute_scores(sQ, sK_n, acc_S, row_in_tile, lane_in_row, scale_log2)
            self.release(pipeline_k, kv_state)
            apply_mask(acc_S, n_block * self.block_n + lane_in_row, self.threads_per_row, col_limit)

            # ---- 2c. online softmax: P = exp2(S - new_max) in place, rescale O; P -> sS
            row_max, row_sum, correction = online_softmax_step(acc_S, row_max, row_sum, self.threads_per_row)
            for i in cutlass.range_constexpr(cute.size(acc_O)):
                acc_O[i] = acc_O[i] * correction
            self.compute_barrier()  # every thread is done reading the previous tile's P
            for i in cutlass.range_constexpr(self.scores_per_thread):
                sS[row_in_tile, lane_in_row + i * self.threads_per_row] = acc_S[i]

            # ---- 2d. V tile: wait until its TMA load has landed; all of P is in sS
            self.compute_barrier()
            pipeline_v.consumer_wait(kv_state)

            # ---- 2e. O += P V
            self.accumulate_pv(sS, sV_n, acc_O, row_in_tile, lane_in_row)
            self.release(pipeline_v, kv_state)
            kv_state.advance()

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

    @cute.jit
    def compute_barrier(self):
        """Barrier of the 256 compute threads only (the producer warp never waits here)."""
        cute.arch.barrier(barrier_id=self.compute_barrier_id, number_of_threads=self.num_compute_threads)

    @cute.jit
    def release(self, pipeline_kv, kv_state):
        """Hand a stage back to the producer: lane 0 of each warp arrives on its empty
        mbarrier, after the whole warp has finished reading it."""
        cute.arch.sync_warp()
        pipeline_kv.consumer_release(kv_state)


def shared_bytes(head_dim: int, dtype_bytes: int = 2) -> int:
    """Shared memory per CTA (before the alignment of each buffer; mbarriers not counted)."""
    pad = K3FMHA.smem_pad_bytes
    q_and_kv = (K3FMHA.block_m + 2 * K3FMHA.num_stages * K3FMHA.block_n) * head_dim * dtype_bytes
    s = K3FMHA.block_m * (K3FMHA.block_n * 4 + pad)
    return q_and_kv + s


# ---- the rung interface (identical for every rung: kernels/cute/launch.py) -------------------
_API = launch.RungAPI(RUNG, K3FMHA, HEAD_DIMS, DTYPES)
can_implement = _API.can_implement
compile_kernel = _API.compile_kernel
run_kernel = _API.run_kernel
compile_for_inspect = _API.compile_for_inspect
knob_error = _API.knob_error
