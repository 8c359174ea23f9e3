"""K13 — K11 + a dynamic persistent scheduler: one CTA per SM, each taking its next query tile
from a counter in global memory, the producer passing the tile to the consumers in shared memory.

What it computes
    out[b, i, h, :] = softmax(scale * q[b, i, h, :] @ k[b, :, h_kv, :]^T) @ v[b, :, h_kv, :]
    for q ``[B, Sq, Hq, D]``, k and v ``[B, Sk, Hkv, D]``, out ``[B, Sq, Hq, D]`` (bf16 or fp16),
    ``h_kv = h // (Hq // Hkv)`` (GQA), optional causal mask aligned bottom-right (query ``i``
    sees keys ``j <= i + Sk - Sq``), optional ``lse [B, Hq, Sq]`` fp32 (natural log).

Delta from K11
    K11 has two launch shapes, and each pays for something. With one CTA per query tile (its
    default from 16k keys on) the hardware hands a free SM the next tile as soon as one
    finishes, but every CTA starts cold (barriers, descriptors, the register hand-over, Q and
    its first K with nothing to hide them under) and ends with an epilogue that nothing
    overlaps. With K10's persistent walk (below 16k keys) the starts and ends are gone, but
    the tiles are dealt before the launch, ``ctas`` apart, and a CTA whose SM runs slower
    finishes last. K13 keeps one CTA per SM and lets the tiles go to whichever CTA asks first:
    its producer takes a ticket from a counter in global memory (``atomicAdd``) when it has
    issued a tile's last load, and the next tile is ``ctas + ticket``. The tile index reaches
    the consumer warpgroups through a one-entry slot in shared memory between two named
    barriers (``fmha.publish_tile``): the producer writes it once every consumer thread has
    read the previous one, and the consumers read it once it is written. An index past the
    last tile ends the walk. Tiles go in the order in which K11's grid
    hands them out with one CTA per tile: query tiles fastest without a mask; under it the
    longest first, in sections of (head, batch) pairs whose K and V fit in L2.
    The counter resets itself: each CTA's producer counts itself out on a second counter when
    its walk ends, and the last one sets both back to zero for the next launch. Each device
    and stream has its counters (``tile_counter``), so that launches on two streams never share
    them. Without the mask, from ``LONG_KEYS`` keys on, ``compile_kernel`` launches one CTA per
    tile instead (K11's launch there; the producer then takes no ticket): with equal tiles the
    walk has nothing to balance, and it measured slower there, at the GPU's power limit.

How it works (consumer warpgroups first, then the producer warpgroup)
    0. As K11, and before the first tile: read the tile index from the slot.
    1-3. While the index is a tile: wait for the Q stage, K11's prologue, mainloop and
       epilogue (with ``sO``: Q's stage released after the mainloop), then read the next index.
    Producer: the first tile is the CTA's block index. Per tile: its index into the slot, K_0,
    then Q, then K_{n+1} before V_n as K7; after the last V, a ticket for the next tile. When
    the ticket is past the last tile: the end index into the slot, then count itself out.

Cost
    Per tile an atomic on one global counter (132 CTAs, a few thousand tiles: nothing against
    a tile's microseconds), one 4-byte shared-memory store and load, and a named-barrier
    arrive and sync on each side (the producer publishes the next index while the consumers
    still compute the tile before it: neither side waits). Eight bytes of global
    memory per device and stream, kept between launches.

Constraints
    head_dim 64, 128 or 256; bf16 or fp16; any Sq, Sk >= 1, batch, heads (Hq % Hkv == 0);
    last dimension contiguous, other strides multiples of 8 elements, 16-byte aligned base
    pointers (tensor-map rules). softmax scale: a positive runtime argument
    (``problem.softmax_scale``). Launches that share a stream run one after the other (CUDA's
    order), as the counters need. Tuning knobs: ``plan`` (a ``fmha.TilePlan``), ``pingpong``,
    ``rescale_before_pv`` (default: at D = 256, as K11), ``ctas`` (default, ``compile_kernel``:
    the GPU's SM count; without the mask from ``LONG_KEYS`` keys, ``ONE_TILE_PER_CTA``),
    ``separate_o`` (default: where it fits), ``l2_heads`` (under the causal mask, (head, batch)
    pairs per L2 section: default 0, as many as fit; ``None``: no sections),
    ``pv_wait_after_row_scale`` (default: at D = 128, as K11).

Run and inspect
    compiled = compile_kernel(problem); run_kernel(compiled, q, k, v, out, lse)
    python -m tools.inspect k11 k13    # SASS mix on a CPU-only machine
    pytest -m gpu tests/test_rungs_gpu.py -k k13    # GPU correctness sweep
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

IDEA = "a dynamic persistent scheduler: tiles from a global counter, handed to the consumers in shared memory"
RUNG = "k13"
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


class K13FMHA:
    threads_per_row = 4  # the 4 lanes of a quad share an accumulator row

    def __init__(self, head_dim: int, causal: bool, dtype: type[cutlass.Numeric], *,
                 plan: fmha.TilePlan | None = None, pingpong: bool = True,
                 rescale_before_pv: bool | None = None, ctas: int | None = None,
                 separate_o: bool | None = None, l2_heads: int | None = 0,
                 pv_wait_after_row_scale: bool | None = None):
        self.head_dim = head_dim
        # Where the wait for the warpgroup's own P V lands. Left to itself, ptxas puts it right
        # after the row max, where Nsight's stall sampling finds K11 waiting and FA4 not: FA4's
        # loop waits after the row factors. The knob holds the wait behind them with an arrive
        # that never runs (fmha.hold_pv_wait_behind); K's stage is released where it was.
        # Default: at D = 128 only, where it measured faster (K11's page, its "Kept" list).
        if pv_wait_after_row_scale is None:
            pv_wait_after_row_scale = head_dim == 128
        self.pv_wait_after_row_scale = pv_wait_after_row_scale
        # Under the causal mask, the tiles go in sections of (head, batch) pairs whose K and V
        # fit in L2 (0: as many as fit, a power of two; n: n; None: one section).
        self.l2_heads = launch.l2_sections_knob(l2_heads)
        self.causal = causal
        self.dtype = dtype
        default = TILE_CONFIGS[head_dim]
        self.plan = (plan or default).check(head_dim, default.producer_warps)
        self.registers = fmha.REGISTER_SPLITS[self.plan.consumer_warpgroups]
        self.pingpong = pingpong and self.plan.consumer_warpgroups > 1
        # K9's placement (under the S GEMM, inside the turn) lengthens the turn at every head
        # dim; K11's default keeps the turn to the GEMM issues except at D = 256, where O's
        # multiplies after the wait for P V cost more than the longer turn (K11's page,
        # "Launch shape by key count").
        if rescale_before_pv is None:
            rescale_before_pv = head_dim in RESCALE_BEFORE_PV_HEAD_DIMS
        self.rescale_before_pv = rescale_before_pv
        self.ctas = launch.persistent_ctas(ctas)
        # O staged in a buffer of its own where shared memory allows (D <= 128): then Q's stage
        # is free at the end of the mainloop, and the next Q loads while O leaves.
        self.separate_o = self.plan.fits_separate_o() if separate_o is None else separate_o

    def fake_arguments(self, has_lse: bool, tvm_ffi: bool) -> tuple:
        """The host function's arguments at compile time: every rung's, and the tile counter
        (``schedulers.tile_counter``) after the softmax scale."""
        *head, scale, stream = launch.default_fake_arguments(self.dtype, has_lse, tvm_ffi)
        return (*head, scale, schedulers.fake_tile_counter(), stream)

    # ---- host side: shared-memory plan, TMA descriptors, MMAs, grid, launch ------------------
    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor | None, softmax_scale: Float32, mTileCounter: cute.Tensor,
                 stream: cuda.CUstream):
        setup = fmha.host_setup(self.plan, self.dtype, mQ, mK, mV, mO, mLSE, tma_store_o=True,
                                separate_o=self.separate_o)
        # exp(scale * s) = 2^(scale * log2(e) * s): one multiply folded into the scale.
        scale_log2 = softmax_scale * LOG2_E
        # One CTA per SM (at most one per query tile); the tiles go to whichever asks first.
        num_m_blocks, heads, batch = fmha.grid_shape(self.plan, setup.gmem)
        num_tiles = num_m_blocks * heads * batch
        self.kernel(setup.gmem, setup.smem, setup.mmas, scale_log2, num_tiles, mTileCounter,
                    setup.storage).launch(
            grid=(cutlass.min(num_tiles, self.ctas), 1, 1), block=(self.plan.num_threads, 1, 1),
            smem=setup.storage.size_in_bytes(), stream=stream, min_blocks_per_mp=1)

    # ---- device side ---------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, gmem: fmha.GmemArgs, smem: fmha.SmemLayouts, mmas: fmha.Mmas,
               scale_log2: Float32, num_tiles: Int32, mTileCounter: cute.Tensor,
               SharedStorage: cutlass.Constexpr):
        ctx = fmha.enter_kernel(self.plan, self.dtype, gmem, smem, SharedStorage, self.separate_o)
        if ctx.warp_idx >= self.plan.producer_warp:  # the producer warpgroup
            cute.arch.setmaxregister_decrease(self.registers.producer)
            if ctx.warp_idx == self.plan.producer_warp:
                self.produce(gmem, ctx, num_tiles, mTileCounter)
        else:
            cute.arch.setmaxregister_increase(self.registers.consumer)
            self.compute(gmem, mmas, ctx, num_tiles, scale_log2)

    @cute.jit
    def produce(self, gmem: fmha.GmemArgs, ctx: fmha.CtaContext, num_tiles: Int32, mTileCounter: cute.Tensor):
        """The producer warp: the CTA's tiles, each one's loads, then a ticket for the next."""
        tile, _, _ = cute.arch.block_idx()  # the first tile of each CTA is its own
        ctas, _, _ = cute.arch.grid_dim()
        # The rings run on across tiles: each tile starts where the previous one left them.
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.plan.num_stages)
        while tile < num_tiles:
            coords = self.tile_coords(gmem, tile)
            fmha.publish_tile(self.plan, ctx, tile)
            # K_0 first: its stage is free before the consumers' epilogue frees Q's.
            q_state, kv_state = fmha.load_tiles(self.plan, gmem, ctx, coords, self.causal,
                                                v_after_next_k=True, q_state=q_state,
                                                kv_state=kv_state, q_after_first_k=True)
            if const_expr(self.ctas == ONE_TILE_PER_CTA):
                tile = num_tiles  # K11's launch shape: a CTA's one tile, no counter
            else:
                # Asked for only now, after the tile's last load: the producer would wait for
                # a free stage anyway, and a later ticket deals the last tiles to the CTAs that
                # finish first.
                tile = ctas + schedulers.take_ticket(mTileCounter, schedulers.TICKETS)
        fmha.publish_tile(self.plan, ctx, tile)  # past the last tile: the end
        if const_expr(self.ctas != ONE_TILE_PER_CTA):
            schedulers.count_out(mTileCounter, ctas)

    @cute.jit
    def tile_coords(self, gmem: fmha.GmemArgs, tile: Int32) -> fmha.TileCoords:
        """The query tile, head and batch of tile index ``tile``: the order of K11's grid of one
        CTA per tile (``schedulers.tile_order``: under the causal mask longest first, in L2
        sections of ``l2_heads`` (head, batch) pairs)."""
        return schedulers.tile_order(self.plan, gmem, tile, self.causal, self.l2_heads, self.dtype.width // 8)

    # ---- device roles --------------------------------------------------------------------------
    @cute.jit
    def compute(self, gmem: fmha.GmemArgs, mmas: fmha.Mmas, ctx: fmha.CtaContext, num_tiles: Int32,
                scale_log2: Float32):
        """Consumer warpgroups: the tiles the producer hands over, until the end index."""
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
        # The producer hands over each tile's index in a shared-memory slot (fmha.publish_tile).
        fmha.open_tile_slot(self.plan)
        tile = fmha.next_published_tile(self.plan, ctx, num_tiles)
        while tile < num_tiles:
            coords = self.tile_coords(gmem, tile)
            ctx.pipeline_q.consumer_wait(q_state)
            q_state, kv_state = self.compute_tile(gmem, mmas, ctx, ops, coords, wg_idx, tOrP, q_state,
                                                  kv_state, scale_log2)
            tile = fmha.next_published_tile(self.plan, ctx, num_tiles)
        if const_expr(self.separate_o):  # the last O store reads sO: not past the CTA's end
            epilogue.wait_o_store_read(ctx.tidx, int(NamedBarrier.EPILOGUE), self.plan.num_consumer_threads)

    @cute.jit
    def compute_tile(self, gmem: fmha.GmemArgs, mmas: fmha.Mmas, ctx: fmha.CtaContext,
                     ops: fmha.ConsumerOperands, coords: fmha.TileCoords, wg_idx: Int32, tOrP: cute.Tensor,
                     q_state, kv_state, scale_log2: Float32):
        """One query tile, its Q in ``sQ`` (``compute`` waited for it): K11's compute, on ring
        states that continue from the previous tile; ends by handing the Q stage back."""
        n_block_max = fmha.kv_tile_count(self.plan, gmem, coords, self.causal)

        # ============ Phase 1: softmax state, O accumulator, mask ============
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


# ---- the rung interface (kernels/cute/launch.py), with the tile counter -------------------------
# From this many keys on, without the mask, one CTA per query tile (K11's launch there): the
# persistent walk measured slower at 16k keys, with the GPU at its power limit (the page).
LONG_KEYS = 16384
ONE_TILE_PER_CTA = 2**31 - 1  # ``ctas``: a grid of one CTA per query tile


def launch_shape_knobs(problem) -> dict:
    """K13's ``ctas`` for ``problem`` where the caller sets none: one CTA per tile without the
    mask from ``LONG_KEYS`` keys on, else the dynamic walk on one CTA per SM."""
    if problem.causal or problem.seqlen_k < LONG_KEYS:
        return {}
    return {"ctas": ONE_TILE_PER_CTA}


class K13API(launch.RungAPI):
    def compile_kernel(self, problem, **knobs) -> launch.CompiledFMHA:
        if "ctas" not in knobs:
            knobs = {**launch_shape_knobs(problem), **knobs}
        return super().compile_kernel(problem, **knobs)

    @staticmethod
    def run_kernel(compiled: launch.CompiledFMHA, q, k, v, out, lse=None) -> None:
        """out[...] = attention(q, k, v) on torch's current stream; lse (fp32 [B, Hq, Sq]) if given."""
        launch.run_fmha(compiled, q, k, v, out, lse,
                        extra_args=lambda q: (schedulers.tile_counter(q.device),))


_API = K13API(RUNG, K13FMHA, HEAD_DIMS, DTYPES, TILE_CONFIGS)
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
