"""K8 — K7 + scheduling and epilogue: tiles that need no mask skip it, causal query tiles
start longest first, and O leaves through a TMA store.

What it computes
    out[b, i, h, :] = softmax(scale * q[b, i, h, :] @ k[b, :, h_kv, :]^T) @ v[b, :, h_kv, :]
    for q ``[B, Sq, Hq, D]``, k and v ``[B, Sk, Hkv, D]``, out ``[B, Sq, Hq, D]`` (bf16 or fp16),
    ``h_kv = h // (Hq // Hkv)`` (GQA), optional causal mask aligned bottom-right (query ``i``
    sees keys ``j <= i + Sk - Sq``), optional ``lse [B, Hq, Sq]`` fp32 (natural log).

Delta from K7
    With the mainloop pipelined, what is left is around it. Three changes, each small, all
    about where the time outside the tensor cores goes:

    * **Masked and mask-free tiles.** K4-K7 mask every tile (a compare and a select per score,
      on the softmax's critical path). Only the tiles that some row sees in part need it: the
      causal diagonal and the tile holding the end of the sequence (``first_masked_block``).
      The mainloop becomes two loops over the same step, with ``masked`` a compile-time flag,
      so the first loop has no mask code at all.
    * **Longest first.** Under the causal mask query tile ``m`` visits ``m + 1`` KV tiles (at
      ``Sq = Sk``), so the grid ends with a tail of the longest CTAs if they start last. The
      grid is walked backwards (``m_block = grid.x - 1 - block.x``): the longest tiles start
      in the first wave and the short ones fill the gaps at the end.
    * **TMA-store epilogue.** O leaves the registers as bf16 through ``stmatrix`` into the Q
      tile (each warpgroup into its own rows, dead after its last S) and one
      ``cp.async.bulk.tensor`` store per CTA, instead of 4-byte pairs from every thread; rows
      past ``Sq`` are clipped by the tensor map.

How it works (consumer warpgroups first, then the producer warpgroup)
    0. As K7; the CTA's query tile is ``m_block``, counted from the end under the causal mask.
    1. Prologue as K7 (tile 0, always masked: it may be partial).
    2. Tiles ``1 .. first_masked_block - 1``: K7's pipelined step without mask code; the
       remaining tiles: the same step with the mask.
    3. Last P V as K7, normalise; O -> bf16 -> ``stmatrix`` into the warpgroup's rows of ``sQ``
       -> fence (generic to async proxy) -> a named barrier of all consumer threads -> one warp
       issues one TMA store of the CTA's tile.

Cost
    What remains is the pipelined mainloop itself: per tile and warpgroup, the softmax between
    ``wait_group(1)`` and the next issue, the O rescale, and the barrier and mbarrier traffic.

Constraints
    head_dim 64, 128 or 256; bf16 or fp16; any Sq, Sk >= 1, batch, heads (Hq % Hkv == 0);
    last dimension contiguous, other strides multiples of 8 elements, 16-byte aligned base
    pointers (tensor-map rules). softmax scale: a positive runtime argument
    (``problem.softmax_scale``). Tuning knobs: ``plan`` (a ``fmha.TilePlan``), ``pingpong``.

Run and inspect
    compiled = compile_kernel(problem); run_kernel(compiled, q, k, v, out, lse)
    python -m tools.inspect k8        # SASS mix on a CPU-only machine (UTMASTG)
    pytest -m gpu tests/test_rungs_gpu.py -k k8    # GPU correctness sweep
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .cute import epilogue, fmha, launch
from .cute import wgmma as wg
from .cute.barriers import NamedBarrier
from .cute.mask import FragmentMask, first_masked_block
from .cute.softmax import LOG2_E, OnlineSoftmax, rescale_rows

IDEA = "scheduling and epilogue: mask-free tiles skip the mask, causal tiles longest first, TMA-store O"
RUNG = "k8"
HEAD_DIMS = (64, 128, 256)
DTYPES = ("bf16", "fp16")
SUPPORTS_LSE = True
KNOBS = ("plan", "pingpong")  # keyword arguments of the constructor (compile_kernel(problem, **knobs))

# FlashAttention-3's shapes, now that the registers allow them; a producer warpgroup.
TILE_CONFIGS = {
    64: fmha.TilePlan(head_dim=64, consumer_warpgroups=3, block_n=128, producer_warps=4),
    128: fmha.TilePlan(head_dim=128, consumer_warpgroups=2, block_n=128, producer_warps=4),
    256: fmha.TilePlan(head_dim=256, consumer_warpgroups=2, block_n=80, producer_warps=4),
}


class K8FMHA:
    threads_per_row = 4  # the 4 lanes of a quad share an accumulator row

    def __init__(self, head_dim: int, causal: bool, dtype: type[cutlass.Numeric], *,
                 plan: fmha.TilePlan | None = None, pingpong: bool = True):
        self.head_dim = head_dim
        self.causal = causal
        self.dtype = dtype
        default = TILE_CONFIGS[head_dim]
        self.plan = (plan or default).check(head_dim, default.producer_warps)
        self.registers = fmha.REGISTER_SPLITS[self.plan.consumer_warpgroups]
        self.pingpong = pingpong and self.plan.consumer_warpgroups > 1

    # ---- host side: shared-memory plan, TMA descriptors, MMAs, grid, launch ------------------
    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor | None, softmax_scale: Float32, stream: cuda.CUstream):
        setup = fmha.host_setup(self.plan, self.dtype, mQ, mK, mV, mO, mLSE, tma_store_o=True)
        # exp(scale * s) = 2^(scale * log2(e) * s): one multiply folded into the scale.
        scale_log2 = softmax_scale * LOG2_E
        self.kernel(setup.gmem, setup.smem, setup.mmas, scale_log2, setup.storage).launch(
            grid=fmha.grid_shape(self.plan, setup.gmem), block=(self.plan.num_threads, 1, 1),
            smem=setup.storage.size_in_bytes(), stream=stream, min_blocks_per_mp=1)

    # ---- device side ---------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, gmem: fmha.GmemArgs, smem: fmha.SmemLayouts, mmas: fmha.Mmas,
               scale_log2: Float32, SharedStorage: cutlass.Constexpr):
        ctx = fmha.enter_kernel(self.plan, self.dtype, gmem, smem, SharedStorage)
        block_idx, head_idx, batch_idx = cute.arch.block_idx()
        # Causal: the last query tiles see the most keys; start them first.
        m_block = cute.arch.grid_dim()[0] - 1 - block_idx if const_expr(self.causal) else block_idx
        coords = fmha.tile_coords(gmem, m_block, head_idx, batch_idx)
        if ctx.warp_idx >= self.plan.producer_warp:  # the producer warpgroup
            cute.arch.setmaxregister_decrease(self.registers.producer)
            if ctx.warp_idx == self.plan.producer_warp:
                fmha.load_tiles(self.plan, gmem, ctx, coords, self.causal, v_after_next_k=True)
        else:
            cute.arch.setmaxregister_increase(self.registers.consumer)
            self.compute(gmem, mmas, ctx, coords, scale_log2)

    # ---- device roles --------------------------------------------------------------------------
    @cute.jit
    def compute(self, gmem: fmha.GmemArgs, mmas: fmha.Mmas, ctx: fmha.CtaContext, coords: fmha.TileCoords,
                scale_log2: Float32):
        """Consumer warpgroups: 64 query rows each, S and O in WGMMA accumulator fragments."""
        # This thread's warpgroup: it owns rows 64 wg_idx .. 64 wg_idx + 63 of the CTA's tile.
        wg_idx = cute.arch.make_warp_uniform(ctx.tidx // wg.WARPGROUP_THREADS)
        ops = fmha.ConsumerOperands(self.plan, mmas, ctx, wg_idx)
        n_block_max = fmha.kv_tile_count(self.plan, gmem, coords, self.causal)

        # ============ Phase 1: Q tile -> sQ; softmax state, O accumulator, mask ============
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        ctx.pipeline_q.consumer_wait(q_state)
        # acc_O: ((2, 2, D/8), 1, 1) fp32 -- rows 16 w + l/4 (+8), columns 8 j + 2 (l%4) (+1)
        acc_O = ops.output_fragment()
        acc_O.fill(0.0)
        softmax = OnlineSoftmax(scale_log2, wg.rows_per_thread(acc_O), self.threads_per_row)
        softmax.reset()
        mask = FragmentMask(mmas.qk, ctx.tidx, ops.tile_s, coords.m_block, gmem.mQ.shape[0], gmem.mK.shape[0],
                            self.causal)

        # ============ Phase 2: KV mainloop, pipelined: S_n under the softmax of n - 1 ============
        if wg_idx == 0:
            self.pass_turn(self.plan.consumer_warpgroups - 1)  # warpgroup 0 opens its first turn
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.plan.num_stages)
        # tOrP: ((2, 2, 2), 1, Bc/16) P of the previous tile as the A fragment, kept across iterations
        tOrP = cute.make_rmem_tensor_like(wg.acc_as_a_operand(ops.scores_fragment()), self.dtype)
        if n_block_max > 0:
            kv_state = self.first_half_block(kv_state, mmas, ops, ctx, tOrP, softmax, mask)
            # Tiles before n_block_masked are fully visible to every row: no mask code at all.
            n_block_masked = first_masked_block(coords.m_block, self.plan.block_m, self.plan.block_n,
                                                gmem.mQ.shape[0], gmem.mK.shape[0], n_block_max, self.causal)
            for n_block in cutlass.range(1, n_block_masked, unroll=1):
                kv_state = self.mma_one_n_block(kv_state, n_block, wg_idx, mmas, ops, ctx, acc_O, tOrP,
                                                softmax, mask, False)
            for n_block in cutlass.range(cutlass.max(n_block_masked, 1), n_block_max, unroll=1):
                kv_state = self.mma_one_n_block(kv_state, n_block, wg_idx, mmas, ops, ctx, acc_O, tOrP,
                                                softmax, mask, True)
            kv_state = self.last_half_block(kv_state, mmas, ops, ctx, acc_O, tOrP)

        # ============ Phase 3: normalize, store O and LSE ============
        rO, lse = epilogue.normalized_output(acc_O, softmax, self.dtype)
        # Each warpgroup's last S has completed, so its rows of the Q tile are free to stage O.
        epilogue.store_o_tma(rO, gmem.mO, ctx.sQ[None, None, 0], gmem.tma_atom_O, mmas.pv, ctx.tidx,
                             int(NamedBarrier.EPILOGUE), self.plan.num_consumer_threads, coords.m_block,
                             coords.head_idx, coords.batch_idx)
        epilogue.store_lse(lse, gmem.mLSE, ops.thr_mma_pv, ops.tile_o, coords.m_block, coords.head_idx,
                           coords.batch_idx, gmem.mQ.shape[0])

    @cute.jit
    def first_half_block(self, kv_state, mmas: fmha.Mmas, ops: fmha.ConsumerOperands, ctx: fmha.CtaContext,
                         tOrP: cute.Tensor, softmax: OnlineSoftmax, mask: FragmentMask):
        """Step 1, tile 0: S_0, masked softmax (the first tile: no rescale), P_0 -> ``tOrP``."""
        ctx.pipeline_k.consumer_wait(kv_state)
        acc_S = ops.scores_fragment()
        wg.gemm(mmas.qk, acc_S, ops.tSrQ, ops.tSrK[None, None, None, kv_state.index],
                zero_init=True, wait=True)
        ctx.pipeline_k.consumer_release(kv_state)
        acc_S_mn = wg.acc_rows_view(acc_S)
        mask.apply(acc_S_mn, 0)
        softmax.update(acc_S_mn, is_first=True)
        wg.convert_scores_into(acc_S, tOrP)
        return kv_state

    @cute.jit
    def mma_one_n_block(self, kv_state, n_block: Int32, wg_idx: Int32, mmas: fmha.Mmas,
                        ops: fmha.ConsumerOperands, ctx: fmha.CtaContext, acc_O: cute.Tensor,
                        tOrP: cute.Tensor, softmax: OnlineSoftmax, mask: FragmentMask,
                        masked: cutlass.Constexpr[bool]):
        """Steps 2a-2d: S of tile ``n_block`` and P V of the tile before it, then the softmax of
        ``n_block`` under that P V. ``kv_state`` enters at the previous tile's stage."""
        v_state = kv_state.clone()  # the previous tile's stage: its V is consumed now
        kv_state.advance()
        # ---- 2a. K tile; this warpgroup's turn: S_n = Q K_n^T and O += P_{n-1} V_{n-1}, issued
        ctx.pipeline_k.consumer_wait(kv_state)
        self.wait_turn(wg_idx)
        # acc_S: ((2, 2, Bc/8), 1, 1) fp32, same row ownership as acc_O
        acc_S = ops.scores_fragment()
        wg.gemm(mmas.qk, acc_S, ops.tSrQ, ops.tSrK[None, None, None, kv_state.index],
                zero_init=True, wait=False)
        ctx.pipeline_v.consumer_wait(v_state)
        wg.gemm(mmas.pv, acc_O, tOrP, ops.tOrVt[None, None, None, v_state.index], zero_init=False, wait=False)
        self.pass_turn(wg_idx)

        # ---- 2b. S_n has landed (the older of the two groups); P V may still be running
        warpgroup.wait_group(1)
        ctx.pipeline_k.consumer_release(kv_state)

        # ---- 2c. mask and online softmax of tile n, under P_{n-1} V_{n-1}
        acc_S_mn = wg.acc_rows_view(acc_S)  # (2 rows, Bc/4 columns)
        if const_expr(masked):
            mask.apply(acc_S_mn, n_block)
        row_scale = softmax.update(acc_S_mn)

        # ---- 2d. P V done: V stage free, tOrP free for P_n, O rescaled by tile n's factor
        warpgroup.wait_group(0)
        ctx.pipeline_v.consumer_release(v_state)
        wg.convert_scores_into(acc_S, tOrP)
        rescale_rows(wg.acc_rows_view(acc_O), row_scale)
        return kv_state

    @cute.jit
    def last_half_block(self, kv_state, mmas: fmha.Mmas, ops: fmha.ConsumerOperands, ctx: fmha.CtaContext,
                        acc_O: cute.Tensor, tOrP: cute.Tensor):
        """Step 3: O += P V of the last tile."""
        ctx.pipeline_v.consumer_wait(kv_state)
        wg.gemm(mmas.pv, acc_O, tOrP, ops.tOrVt[None, None, None, kv_state.index], zero_init=False, wait=True)
        ctx.pipeline_v.consumer_release(kv_state)
        kv_state.advance()
        return kv_state

    # ---- the ping-pong schedule ------------------------------------------------------------------
    @cute.jit
    def wait_turn(self, wg_idx: Int32):
        """Block until the previous warpgroup in the round has passed this one the turn."""
        if const_expr(self.pingpong):
            cute.arch.barrier(barrier_id=int(NamedBarrier.MMA_TURN_WG0) + wg_idx,
                              number_of_threads=2 * wg.WARPGROUP_THREADS)

    @cute.jit
    def pass_turn(self, wg_idx: Int32):
        """Open the next warpgroup's turn (its barrier completes with its own 128 threads)."""
        if const_expr(self.pingpong):
            next_wg = wg_idx + 1 if wg_idx + 1 < self.plan.consumer_warpgroups else 0
            cute.arch.barrier_arrive(barrier_id=int(NamedBarrier.MMA_TURN_WG0) + next_wg,
                                     number_of_threads=2 * wg.WARPGROUP_THREADS)


# ---- the rung interface (identical for every rung: kernels/cute/launch.py) -------------------
_API = launch.RungAPI(RUNG, K8FMHA, HEAD_DIMS, DTYPES, TILE_CONFIGS)
can_implement = _API.can_implement
compile_kernel = _API.compile_kernel
run_kernel = _API.run_kernel
compile_for_inspect = _API.compile_for_inspect
knob_error = _API.knob_error
shared_bytes = _API.shared_bytes
