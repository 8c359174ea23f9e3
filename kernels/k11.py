"""K11 — K10 + the turn holds only the GEMM issues: the loop's descriptors, bound and release
lane built once, outside it, and the O rescale back behind the wait for P V.

What it computes
    out[b, i, h, :] = softmax(scale * q[b, i, h, :] @ k[b, :, h_kv, :]^T) @ v[b, :, h_kv, :]
    for q ``[B, Sq, Hq, D]``, k and v ``[B, Sk, Hkv, D]``, out ``[B, Sq, Hq, D]`` (bf16 or fp16),
    ``h_kv = h // (Hq // Hkv)`` (GQA), optional causal mask aligned bottom-right (query ``i``
    sees keys ``j <= i + Sk - Sq``), optional ``lse [B, Hq, Sq]`` fp32 (natural log).

Delta from K10
    A warpgroup holds the ping-pong turn from its ``bar.sync`` to its ``bar.arrive``; the
    other warpgroups wait for it meanwhile. In K10 at D = 128 that is 131 SASS instructions
    per KV tile, 16 of them the GEMMs (FA4: 57). Two kinds of work sit there without having
    to:
    - Bookkeeping the DSL redoes every iteration although it never changes: the shared-memory
      descriptors of Q (one per k-block), K and V^T, rebuilt from the tiles' addresses
      (shift, mask, or, 64-bit adds); the bound ``n_block_masked``, recomputed from the key
      count at every loop test; the predicate of the lane that releases a K / V stage (the
      thread index read again). K11 builds them once, before the loops, as opaque
      warp-uniform values (``wgmma.uniform_descriptors`` and ``k_block_descriptors``,
      ``make_warp_uniform``): the S GEMM takes Q's descriptors straight from uniform
      registers, K's and V's are a base plus the stage's and k-block's offsets. At D = 256
      Q's 16 descriptors do not fit the uniform registers beside K's (ptxas spills), and Q
      keeps the descriptors the DSL builds.
    - K9's O rescale in front of the P V (``rescale_before_pv``): ``D / 2`` multiplies inside
      the turn, which ptxas spreads between the issues of the S GEMM. K11's default puts
      them back after the wait for P V (K8's place; FA4's at D <= 128), where they run under
      the other warpgroup's GEMMs. The turn is shorter without them at every head dim (SASS,
      instructions from ``bar.sync`` to ``bar.arrive``, rescale before / after: D = 64: 69 /
      37, D = 128: 111 / 48, D = 256: 235 / 111), so the default is False at D = 64 and
      128; at D = 256 the rescale before the P V measured faster on the H200 even with the
      longer turn (``RESCALE_BEFORE_PV_HEAD_DIMS``), as K9 had timed it at D >= 128 in a loop
      that still did the bookkeeping. The knob sets either place.

How it works (consumer warpgroups first, then the producer warpgroup)
    0. As K10; before the first tile, ``LoopOperands`` builds the operands' descriptors and
       the release lane is fixed (``lane_idx() == 0`` of each consumer warp).
    1. Per tile, K10's prologue; ``n_block_masked`` is computed once and made warp-uniform.
    2. Each tile ``n``: wait for K_n and the turn; issue S_n = Q K_n^T (Q's descriptors from
       registers, K's = base + stage + k-block offsets); wait for V_{n-1}; issue
       O += P_{n-1} V_{n-1}; pass the turn. Then, as K10: ``wait_group(1)``, softmax of
       ``n`` under the P V, ``wait_group(0)`` (at D = 128 held behind the row factors,
       ``pv_wait_after_row_scale``), P_n -> ``tOrP`` and, by default, O rescaled by tile
       ``n``'s factor.
    3. Epilogue and producer as K10.

Cost
    Uniform registers: Q's 8 descriptors at D = 128 sit beside K's (an S HGMMA reads A's
    and B's descriptors from four consecutive uniform registers), 32 of the 63. Per KV tile a
    consumer warp issues 438 instructions instead of 469 at D = 128 (29 of them on the
    uniform datapath instead of 59; FA4: 450 and 38), 394 instead of 422 at D = 64, 478
    instead of 492 at D = 256. With the rescale after the wait for P V, the ``D / 2``
    multiplies sit between the end of the P V and the warpgroup's next turn again; where the
    other warpgroup's GEMMs do not cover them, that step is longer (``rescale_before_pv=True``
    restores K9's placement).

Constraints
    head_dim 64, 128 or 256; bf16 or fp16; any Sq, Sk >= 1, batch, heads (Hq % Hkv == 0);
    last dimension contiguous, other strides multiples of 8 elements, 16-byte aligned base
    pointers (tensor-map rules). softmax scale: a positive runtime argument
    (``problem.softmax_scale``). Tuning knobs: ``plan`` (a ``fmha.TilePlan``), ``pingpong``,
    ``rescale_before_pv`` (default: at D = 256 only, where it measured faster), ``ctas`` and
    ``l2_heads`` (default, ``compile_kernel`` by the key count: the GPU's SM count and no
    sections below ``LONG_KEYS`` keys; from there one CTA per query tile, ``ONE_TILE_PER_CTA``,
    and under the causal mask L2 sections, ``l2_heads=0``), ``separate_o`` (default: where it
    fits), ``pv_wait_after_row_scale`` (the wait for the warpgroup's own P V behind the row
    factors; default: at D = 128, where it measured faster: the constructor says why). The lazy
    rescale and two other places for that wait lost and left the rung; the page keeps their
    measurements (K12 takes the lazy rescale).

Run and inspect
    compiled = compile_kernel(problem); run_kernel(compiled, q, k, v, out, lse)
    python -m tools.inspect k10 k11    # SASS mix on a CPU-only machine
    pytest -m gpu tests/test_rungs_gpu.py -k k11    # GPU correctness sweep
"""

from __future__ import annotations

import dataclasses

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .cute import epilogue, fmha, launch, schedulers
from .cute import wgmma as wg
from .cute.barriers import NamedBarrier
from .cute.mask import FragmentMask, first_masked_block
from .cute.softmax import LOG2_E, OnlineSoftmax, rescale_rows

IDEA = "the turn holds only the GEMM issues; descriptors, loop bounds, release lane built once"
RUNG = "k11"
HEAD_DIMS = (64, 128, 256)
DTYPES = ("bf16", "fp16")
SUPPORTS_LSE = True
# keyword arguments of the constructor
KNOBS = ("plan", "pingpong", "rescale_before_pv", "ctas", "separate_o", "l2_heads", "pv_wait_after_row_scale")

# FlashAttention-3's shapes, now that the registers allow them; a producer warpgroup.
TILE_CONFIGS = {
    64: fmha.TilePlan(head_dim=64, consumer_warpgroups=3, block_n=128, producer_warps=4),
    128: fmha.TilePlan(head_dim=128, consumer_warpgroups=2, block_n=128, producer_warps=4),
    256: fmha.TilePlan(head_dim=256, consumer_warpgroups=2, block_n=80, producer_warps=4),
}


# Where K11's default rescales O before the P V after all, inside the turn (the constructor says why).
RESCALE_BEFORE_PV_HEAD_DIMS = (256,)

# Q descriptors held in uniform registers, one per k-block, up to this many k-blocks (D = 128).
MAX_HELD_K_BLOCKS = 8


class LoopOperands(fmha.ConsumerOperands):
    """The consumer's operands with their shared-memory descriptors built once, here, before
    the tile loop: Q's one per k-block (the A operand of every S GEMM, never rebuilt), K's and
    V^T's bases, to which each GEMM adds its stage's and k-blocks' offsets
    (``wgmma.uniform_descriptors``)."""

    def __init__(self, plan: fmha.TilePlan, mmas: fmha.Mmas, ctx: fmha.CtaContext, wg_idx: Int32):
        super().__init__(plan, mmas, ctx, wg_idx)
        # A list, one view per k-block, for wgmma.gemm_k_blocks. Held only where they fit:
        # each S HGMMA reads A's and B's descriptors from four consecutive uniform registers,
        # so D/16 k-blocks hold 4 D/16 of the 63; at D = 256 (64) ptxas spills, and Q keeps
        # the descriptors the DSL builds in the loop (an or with a constant per k-block).
        if const_expr(cute.size(self.tSrQ.shape[2]) <= MAX_HELD_K_BLOCKS):
            self.q_blocks = wg.k_block_descriptors(self.tSrQ)
        else:
            self.q_blocks = [self.tSrQ[None, None, k] for k in range(cute.size(self.tSrQ.shape[2]))]
        self.tSrK = wg.uniform_descriptors(self.tSrK)
        self.tOrVt = wg.uniform_descriptors(self.tOrVt)


class K11FMHA:
    threads_per_row = 4  # the 4 lanes of a quad share an accumulator row

    def __init__(self, head_dim: int, causal: bool, dtype: type[cutlass.Numeric], *,
                 plan: fmha.TilePlan | None = None, pingpong: bool = True,
                 rescale_before_pv: bool | None = None, ctas: int | None = None,
                 separate_o: bool | None = None, l2_heads: int | None = None,
                 pv_wait_after_row_scale: bool | None = None):
        self.head_dim = head_dim
        # Where the wait for the warpgroup's own P V lands. Left to itself, ptxas puts it right
        # after the row max, where Nsight's stall sampling finds K11 waiting and FA4 not: FA4's
        # loop waits after the row factors. The knob holds the wait behind them with an arrive
        # that never runs (fmha.hold_pv_wait_behind); K's stage is released where it was.
        # Default: at D = 128 only, where it measured faster (the page's "Kept" list).
        if pv_wait_after_row_scale is None:
            pv_wait_after_row_scale = head_dim == 128
        self.pv_wait_after_row_scale = pv_wait_after_row_scale
        # Under the causal mask, walk the tiles in sections of (head, batch) pairs whose K and V
        # fit in L2 (FA4's LPT scheduler): 0 = as many as fit (a power of two), n = n. On by
        # default only with one CTA per tile (launch_shape_knobs): the persistent walk measured
        # no better with it (the page).
        self.l2_heads = launch.l2_sections_knob(l2_heads)
        self.causal = causal
        self.dtype = dtype
        default = TILE_CONFIGS[head_dim]
        self.plan = (plan or default).check(head_dim, default.producer_warps)
        self.registers = fmha.REGISTER_SPLITS[self.plan.consumer_warpgroups]
        self.pingpong = pingpong and self.plan.consumer_warpgroups > 1
        # K9's placement (under the S GEMM, inside the turn) lengthens the turn at every head
        # dim; K11's default keeps the turn to the GEMM issues (see the Delta) except at D = 256,
        # where O's multiplies after the wait for P V cost more than the longer turn (the page,
        # "Launch shape by key count").
        if rescale_before_pv is None:
            rescale_before_pv = head_dim in RESCALE_BEFORE_PV_HEAD_DIMS
        self.rescale_before_pv = rescale_before_pv
        self.ctas = launch.persistent_ctas(ctas)
        # O staged in a buffer of its own where shared memory allows (D <= 128): then Q's stage
        # is free at the end of the mainloop, and the next Q loads while O leaves.
        self.separate_o = self.plan.fits_separate_o() if separate_o is None else separate_o

    # ---- host side: shared-memory plan, TMA descriptors, MMAs, grid, launch ------------------
    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor | None, softmax_scale: Float32, stream: cuda.CUstream):
        setup = fmha.host_setup(self.plan, self.dtype, mQ, mK, mV, mO, mLSE, tma_store_o=True,
                                separate_o=self.separate_o)
        # exp(scale * s) = 2^(scale * log2(e) * s): one multiply folded into the scale.
        scale_log2 = softmax_scale * LOG2_E
        # One CTA per SM (at most one per query tile), each walking the tiles ctas apart.
        num_m_blocks, heads, batch = fmha.grid_shape(self.plan, setup.gmem)
        num_tiles = num_m_blocks * heads * batch
        self.kernel(setup.gmem, setup.smem, setup.mmas, scale_log2, num_tiles, setup.storage).launch(
            grid=(cutlass.min(num_tiles, self.ctas), 1, 1), block=(self.plan.num_threads, 1, 1),
            smem=setup.storage.size_in_bytes(), stream=stream, min_blocks_per_mp=1)

    # ---- device side ---------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, gmem: fmha.GmemArgs, smem: fmha.SmemLayouts, mmas: fmha.Mmas,
               scale_log2: Float32, num_tiles: Int32, SharedStorage: cutlass.Constexpr):
        ctx = fmha.enter_kernel(self.plan, self.dtype, gmem, smem, SharedStorage, self.separate_o)
        first_tile, _, _ = cute.arch.block_idx()
        ctas, _, _ = cute.arch.grid_dim()
        if ctx.warp_idx >= self.plan.producer_warp:  # the producer warpgroup
            cute.arch.setmaxregister_decrease(self.registers.producer)
            if ctx.warp_idx == self.plan.producer_warp:
                # The rings run on across tiles: each tile starts where the previous one left them.
                q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
                kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer,
                                                        self.plan.num_stages)
                for tile in cutlass.range(first_tile, num_tiles, ctas, unroll=1):
                    coords = self.tile_coords(gmem, tile, num_tiles, ctas)
                    # K_0 first: its stage is free before the consumers' epilogue frees Q's.
                    q_state, kv_state = fmha.load_tiles(self.plan, gmem, ctx, coords, self.causal,
                                                        v_after_next_k=True, q_state=q_state,
                                                        kv_state=kv_state, q_after_first_k=True)
        else:
            cute.arch.setmaxregister_increase(self.registers.consumer)
            self.compute(gmem, mmas, ctx, first_tile, num_tiles, ctas, scale_log2)

    @cute.jit
    def tile_coords(self, gmem: fmha.GmemArgs, slot: Int32, num_tiles: Int32, ctas: Int32) -> fmha.TileCoords:
        """The tile a CTA takes at ``slot``: K10's static walk; under the causal mask in L2
        sections of (head, batch) pairs where ``l2_heads`` asks for them (``schedulers``)."""
        tile = schedulers.static_walk_tile(slot, num_tiles, ctas, self.causal)
        return schedulers.tile_order(self.plan, gmem, tile, self.causal, self.l2_heads, self.dtype.width // 8)

    # ---- device roles --------------------------------------------------------------------------
    @cute.jit
    def compute(self, gmem: fmha.GmemArgs, mmas: fmha.Mmas, ctx: fmha.CtaContext, first_tile: Int32,
                num_tiles: Int32, ctas: Int32, scale_log2: Float32):
        """Consumer warpgroups: the CTA's query tiles one after the other."""
        # This thread's warpgroup: it owns rows 64 wg_idx .. 64 wg_idx + 63 of the CTA's tile.
        wg_idx = cute.arch.make_warp_uniform(ctx.tidx // wg.WARPGROUP_THREADS)
        ops = LoopOperands(self.plan, mmas, ctx, wg_idx)
        # The lane that releases a K or V stage for its warp, decided here once (the rings
        # built in enter_kernel test the thread index again at every release).
        release_lane = cute.arch.lane_idx() == 0
        ctx = ctx._replace(pipeline_k=dataclasses.replace(ctx.pipeline_k, is_signaling_thread=release_lane),
                           pipeline_v=dataclasses.replace(ctx.pipeline_v, is_signaling_thread=release_lane))
        # tOrP: ((2, 2, 2), 1, Bc/16) P of the previous tile as the A fragment, kept across iterations
        tOrP = cute.make_rmem_tensor_like(wg.acc_as_a_operand(ops.scores_fragment()), self.dtype)
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.plan.num_stages)
        # The turns run on across tiles: every warpgroup takes as many per tile, and the last
        # one of a tile hands the turn back to warpgroup 0.
        if wg_idx == 0:
            self.pass_turn(self.plan.consumer_warpgroups - 1)  # warpgroup 0 opens its first turn
        for tile in cutlass.range(first_tile, num_tiles, ctas, unroll=1):
            coords = self.tile_coords(gmem, tile, num_tiles, ctas)
            q_state, kv_state = self.compute_tile(gmem, mmas, ctx, ops, coords, wg_idx, tOrP, q_state,
                                                  kv_state, scale_log2)
        if const_expr(self.separate_o):  # the last O store reads sO: not past the CTA's end
            epilogue.wait_o_store_read(ctx.tidx, int(NamedBarrier.EPILOGUE), self.plan.num_consumer_threads)

    @cute.jit
    def compute_tile(self, gmem: fmha.GmemArgs, mmas: fmha.Mmas, ctx: fmha.CtaContext,
                     ops: fmha.ConsumerOperands, coords: fmha.TileCoords, wg_idx: Int32, tOrP: cute.Tensor,
                     q_state, kv_state, scale_log2: Float32):
        """One query tile: K9's compute, on ring states that continue from the previous tile;
        ends by handing the Q stage back to the producer."""
        n_block_max = fmha.kv_tile_count(self.plan, gmem, coords, self.causal)

        # ============ Phase 1: Q tile -> sQ; softmax state, O accumulator, mask ============
        ctx.pipeline_q.consumer_wait(q_state)
        # acc_O: ((2, 2, D/8), 1, 1) fp32 -- rows 16 w + l/4 (+8), columns 8 j + 2 (l%4) (+1)
        acc_O = ops.output_fragment()
        acc_O.fill(0.0)
        softmax = OnlineSoftmax(scale_log2, wg.rows_per_thread(acc_O), self.threads_per_row)
        softmax.reset()
        mask = FragmentMask(mmas.qk, ctx.tidx, ops.tile_s, coords.m_block, gmem.mQ.shape[0], gmem.mK.shape[0],
                            self.causal)

        # ============ Phase 2: KV mainloop, pipelined: S_n under the softmax of n - 1 ============
        # The factor O waits for when its rescale runs before the next P V (rescale_before_pv)
        pending_scale = cute.make_rmem_tensor((softmax.num_rows,), Float32)
        pending_scale.fill(1.0)
        if n_block_max > 0:
            kv_state = self.first_half_block(kv_state, mmas, ops, ctx, tOrP, softmax, mask)
            # Tiles before n_block_masked are fully visible to every row: no mask code at all.
            n_block_masked = first_masked_block(coords.m_block, self.plan.block_m, self.plan.block_n,
                                                gmem.mQ.shape[0], gmem.mK.shape[0], n_block_max, self.causal)
            # Opaque and warp-uniform: kept in a register, not recomputed at every loop test.
            n_block_masked = cute.arch.make_warp_uniform(n_block_masked)
            for n_block in cutlass.range(1, n_block_masked, unroll=1):
                kv_state = self.mma_one_n_block(kv_state, n_block, wg_idx, mmas, ops, ctx, acc_O, tOrP,
                                                softmax, pending_scale, mask, False)
            for n_block in cutlass.range(cutlass.max(n_block_masked, 1), n_block_max, unroll=1):
                kv_state = self.mma_one_n_block(kv_state, n_block, wg_idx, mmas, ops, ctx, acc_O, tOrP,
                                                softmax, pending_scale, mask, True)
            kv_state = self.last_half_block(kv_state, mmas, ops, ctx, acc_O, tOrP, pending_scale)
        if const_expr(self.separate_o):
            # Every S of the tile has completed (the last P V waited for all groups): Q's stage
            # goes back to the producer now, and the next Q loads under the epilogue.
            ctx.pipeline_q.consumer_release(q_state)
            q_state.advance()

        # ============ Phase 3: normalize, store O and LSE ============
        rO, lse = epilogue.normalized_output(acc_O, softmax, self.dtype)
        barrier_id, threads = int(NamedBarrier.EPILOGUE), self.plan.num_consumer_threads
        if const_expr(self.separate_o):
            # sO is free once the previous tile's store has read it; this store is waited for
            # one tile later.
            epilogue.wait_o_store_read(ctx.tidx, barrier_id, threads)
            epilogue.store_o_tma(rO, gmem.mO, ctx.sO[None, None, 0], gmem.tma_atom_O, mmas.pv, ctx.tidx,
                                 barrier_id, threads, coords.m_block, coords.head_idx, coords.batch_idx,
                                 wait_for_read=False)
        else:
            # Each warpgroup's last S has completed, so its rows of the Q tile are free to stage O.
            epilogue.store_o_tma(rO, gmem.mO, ctx.sQ[None, None, 0], gmem.tma_atom_O, mmas.pv, ctx.tidx,
                                 barrier_id, threads, coords.m_block, coords.head_idx, coords.batch_idx)
        epilogue.store_lse(lse, gmem.mLSE, ops.thr_mma_pv, ops.tile_o, coords.m_block, coords.head_idx,
                           coords.batch_idx, gmem.mQ.shape[0])
        if const_expr(not self.separate_o):
            # The TMA store has read sQ (warp 0 waited for it): Q's stage is the producer's again.
            cute.arch.barrier(barrier_id=barrier_id, number_of_threads=threads)
            ctx.pipeline_q.consumer_release(q_state)
            q_state.advance()
        return q_state, kv_state

    @cute.jit
    def first_half_block(self, kv_state, mmas: fmha.Mmas, ops: fmha.ConsumerOperands, ctx: fmha.CtaContext,
                         tOrP: cute.Tensor, softmax: OnlineSoftmax, mask: FragmentMask):
        """Step 1, tile 0: S_0, masked softmax (the first tile: no rescale), P_0 -> ``tOrP``."""
        ctx.pipeline_k.consumer_wait(kv_state)
        acc_S = ops.scores_fragment()
        wg.gemm_k_blocks(mmas.qk, acc_S, ops.q_blocks, ops.tSrK[None, None, None, kv_state.index],
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
                        tOrP: cute.Tensor, softmax: OnlineSoftmax, pending_scale: cute.Tensor,
                        mask: FragmentMask, masked: cutlass.Constexpr[bool]):
        """Steps 2a-2d: S of tile ``n_block`` and P V of the tile before it, then the softmax of
        ``n_block`` under that P V. ``kv_state`` enters at the previous tile's stage."""
        v_state = kv_state.clone()  # the previous tile's stage: its V is consumed now
        kv_state.advance()
        # ---- 2a. K tile; this warpgroup's turn: S_n = Q K_n^T issued, O rescaled under it by
        #          tile n-1's factor, O += P_{n-1} V_{n-1} issued
        ctx.pipeline_k.consumer_wait(kv_state)
        self.wait_turn(wg_idx)
        # acc_S: ((2, 2, Bc/8), 1, 1) fp32, same row ownership as acc_O
        acc_S = ops.scores_fragment()
        wg.gemm_k_blocks(mmas.qk, acc_S, ops.q_blocks, ops.tSrK[None, None, None, kv_state.index],
                         zero_init=True, wait=False)
        if const_expr(self.rescale_before_pv):  # O by tile n-1's factor, under the S GEMM
            rescale_rows(wg.acc_rows_view(acc_O), pending_scale)
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
        if const_expr(self.pv_wait_after_row_scale):  # the wait for P V behind the row factors
            fmha.hold_pv_wait_behind(ctx.pipeline_k, kv_state, row_scale[0] + row_scale[1])

        # ---- 2d. P V done: V stage free, tOrP free for P_n; tile n's factor for O kept for 2a
        warpgroup.wait_group(0)
        ctx.pipeline_v.consumer_release(v_state)
        wg.convert_scores_into(acc_S, tOrP)
        if const_expr(self.rescale_before_pv):
            pending_scale.store(row_scale.load())
        else:
            rescale_rows(wg.acc_rows_view(acc_O), row_scale)
        return kv_state

    @cute.jit
    def last_half_block(self, kv_state, mmas: fmha.Mmas, ops: fmha.ConsumerOperands, ctx: fmha.CtaContext,
                        acc_O: cute.Tensor, tOrP: cute.Tensor, pending_scale: cute.Tensor):
        """Step 3: O += P V of the last tile."""
        if const_expr(self.rescale_before_pv):
            rescale_rows(wg.acc_rows_view(acc_O), pending_scale)
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


# ---- the rung interface (kernels/cute/launch.py; the launch shape follows the key count) -----
# From this many keys on, one CTA per query tile (the hardware's scheduling) and, under the causal
# mask, L2 sections beat the persistent walk; below it the walk wins (the page's "Launch shape by
# key count").
LONG_KEYS = 16384
ONE_TILE_PER_CTA = 2**31 - 1  # ``ctas``: a grid of one CTA per query tile


def launch_shape_knobs(problem) -> dict:
    """K11's ``ctas`` and ``l2_heads`` for ``problem`` where the caller sets neither: the
    persistent walk below ``LONG_KEYS`` keys, one CTA per tile (L2 sections under the mask) from there."""
    if problem.seqlen_k < LONG_KEYS:
        return {}
    return {"ctas": ONE_TILE_PER_CTA, **({"l2_heads": 0} if problem.causal else {})}


class K11API(launch.RungAPI):
    def compile_kernel(self, problem, **knobs) -> launch.CompiledFMHA:
        if "ctas" not in knobs and "l2_heads" not in knobs:
            knobs = {**launch_shape_knobs(problem), **knobs}
        return super().compile_kernel(problem, **knobs)


_API = K11API(RUNG, K11FMHA, HEAD_DIMS, DTYPES, TILE_CONFIGS)
can_implement = _API.can_implement
compile_kernel = _API.compile_kernel
run_kernel = _API.run_kernel
compile_for_inspect = _API.compile_for_inspect
knob_error = _API.knob_error


def shared_bytes(head_dim: int, dtype_bytes: int = 2) -> int | None:
    """As every Hopper rung's, plus O's own buffer where the default plan has one."""
    plan = TILE_CONFIGS.get(head_dim)
    if plan is None:
        return None
    o_buffer = plan.q_bytes(dtype_bytes) if plan.fits_separate_o(dtype_bytes) else 0
    return plan.shared_bytes(dtype_bytes) + o_buffer
