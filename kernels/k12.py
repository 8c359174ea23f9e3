"""K12 — K11 in FP8: Q, K and V in E4M3 with per-tensor descales, both GEMMs on FP8 WGMMA
(fp32 accumulators), P converted to e4m3 in registers, O in bf16.

What it computes
    out[b, i, h, :] = softmax(scale * qd[b, i, h, :] @ kd[b, :, h_kv, :]^T) @ vd[b, :, h_kv, :]
    with ``xd = x.data * x.descale`` for q, k, v given as ``Fp8Tensor`` (``[B, S, H, D]``
    float8_e4m3fn and a positive fp32 descale each, per tensor; ``quantize_e4m3`` makes them),
    out ``[B, Sq, Hq, D]`` bf16, ``h_kv = h // (Hq // Hkv)`` (GQA), optional causal mask
    aligned bottom-right (query ``i`` sees keys ``j <= i + Sk - Sq``), optional
    ``lse [B, Hq, Sq]`` fp32 (natural log, of the descaled scores).

Delta from K11
    The inputs are half the bytes and the tensor cores run FP8 at twice the bf16 rate
    (``wgmma ... .e4m3.e4m3``, k32 per instruction). Four things change:
    * V^T must be K-major. FP8 WGMMA has no transposed (MN-major) operands, and in
      ``O += P V`` the reduction runs over keys, so the B operand is V^T with the keys
      contiguous. A pass before the kernel writes it, ``[B, Hkv, D, Sk']`` (``Sk'``: Sk
      rounded up to 16), on the same stream and inside the timed launch; the producer loads
      ``(D, Bc)`` boxes of it.
    * P must be an fp8 A operand. The k32 fp8 A fragment gives a thread k-columns
      ``4q .. 4q + 3`` and ``16 + 4q ..`` of each 32 (``q``: its lane in the quad), while the
      accumulator gave it columns ``2q, 2q + 1, 2q + 8, 2q + 9, ...``. Instead of exchanging
      registers between lanes, P V relabels the keys: k-slot ``4q + 2a + c + 16h`` takes the
      score of key ``2q + c + 8 (2h + a)``, a permutation of every 16 keys, and the pass that
      transposes V writes each key's row to that slot. The sum over keys is unchanged; the
      conversion is a choice of registers and one packed ``cvt`` per two scores, no shuffle.
    * Scales. ``q_descale * k_descale`` joins the softmax scale; P is ``exp2(s - max + offset)``,
      up to 256 (next item), so that e4m3 (largest value 448) keeps small probabilities out of its
      subnormals (the factor cancels in ``O / row_sum``, the LSE takes it out); ``v_descale``
      joins the final ``1 / row_sum``. O (bf16) is staged in a buffer of its own at every D.
    * The lazy rescale, a lab knob in K11, is on. E4M3 GEMMs take half the cycles, so the
      softmax sets the pace, and O's rescale is a share of it (64 multiplies per thread at
      D = 128). A row's max moves only when a tile's exceeds it by more than 2 (log2 units),
      and O's multiplies run behind a warp vote, skipped while no row of the warp moved. P
      then reaches ``2^(offset + 2)`` before its max moves, so the offset is 6, not 8.
    K11's loop carries over unchanged: its descriptors are built once for the FP8 operands
    too (Q's k32 k-blocks, D / 32 of them, all held in uniform registers, D = 256 included;
    K's and the transposed V's bases), and the turn holds only the QGMMA issues.

How it works (consumer warpgroups first, then the producer warpgroup)
    Host: ``vt = transpose_v(v.data)`` (``kernels/cute/fp8.py``), then the launch.
    0-3. K11's walk, prologue, mainloop and epilogue, with FP8 operands: ``S = Q K^T`` on
       e4m3 from shared memory; the softmax (offset 6, lazy rescale) on the fp32 scores; ``P -> tOrP``
       (e4m3, keys in slot order); ``O += P V^T`` with V^T K-major; ``O * v_descale / sum``
       -> bf16 -> ``sO`` -> TMA store.
    Producer, per tile: K11's order; the V tiles are ``(D, Bc)`` boxes of V^T.

Cost
    The transpose pass reads V once and writes V^T once (``Sk * Hkv * D`` bytes each way per
    batch) in a kernel before the attention (``kernels/cute/transpose.py``, about 3.5 TB/s on
    the H200), a launch of its own inside the timed run; its share grows as the attention gets
    shorter.
    In the kernel nothing is added: the P conversion takes as many ``F2FP`` as bf16's (one
    per two scores, packed into half a register instead of a whole one). The bf16 O buffer
    costs ``Br x D x 2`` bytes of shared memory (64 KiB at D = 256, where the e4m3 stages
    leave room).

Constraints
    head_dim 64, 128 or 256; q, k, v ``Fp8Tensor`` (float8_e4m3fn); out bf16; any Sq, Sk >= 1,
    batch, heads (Hq % Hkv == 0); contiguous BSHD (V's copy is the kernel's own). softmax
    scale: a positive runtime argument; descales: positive finite floats. block_n a multiple
    of 32 (the k32 steps of P V). Tuning knobs: ``plan`` (a ``fmha.TilePlan``), ``pingpong``,
    ``rescale_before_pv`` (default: False; K11's except at D = 256), ``ctas`` (default: the
    GPU's SM count), ``rescale_threshold`` (the lazy rescale, tried on K11's page, in whole log2
    units: default 2, 0 with ``rescale_before_pv``, which it cannot join; P's offset gives way to
    it). Lab knobs, off: ``exp2_fma_every`` and ``qk_accumulators`` (the page's "Large
    logits"). K11's wait for P V behind the row factors measured no better here and left the
    rung; the page keeps the measurement.

Run and inspect
    compiled = compile_kernel(problem)     # problem.dtype == "e4m3"
    q, k, v = make_inputs(problem)         # Fp8Tensor each: quantize_e4m3 of bf16 randoms
    run_kernel(compiled, q, k, v, out, lse)
    python -m tools.inspect k11 k12   # SASS mix on a CPU-only machine (QGMMA ... E4M3.E4M3)
    pytest -m gpu tests/test_rungs_gpu.py -k k12    # GPU correctness sweep
"""

from __future__ import annotations

import dataclasses

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .cute import epilogue, fmha, fp8, launch, schedulers
from .cute import wgmma as wg
from .cute.barriers import NamedBarrier
from .cute.mask import FragmentMask, first_masked_block
from .cute.softmax import LOG2_E, OnlineSoftmax, rescale_rows

IDEA = "FP8: e4m3 Q, K, V on FP8 WGMMA; V transposed before the kernel, P's keys relabelled in registers"
RUNG = "k12"
HEAD_DIMS = (64, 128, 256)
DTYPES = ("e4m3",)
SUPPORTS_LSE = True
# keyword arguments of the constructor
KNOBS = ("plan", "pingpong", "rescale_before_pv", "ctas", "exp2_fma_every", "rescale_threshold",
         "qk_accumulators")

# K11's CTA shapes; e4m3 tiles take half the shared memory, which leaves room for O's bf16
# buffer at D = 256 and for 128-key tiles there (block_n: a multiple of 32, the k32 of P V).
TILE_CONFIGS = {
    64: fmha.TilePlan(head_dim=64, consumer_warpgroups=3, block_n=128, producer_warps=4),
    # Three consumer warpgroups of 96-key tiles at D = 128 (faster than two of 128-key tiles:
    # the page): an FP8 GEMM takes half a bf16 one, so two warpgroups' softmaxes no longer fit
    # under each other's GEMMs; a third keeps the tensor pipe fed. 128-key tiles do not fit
    # three warpgroups' 160 registers (a stack frame).
    128: fmha.TilePlan(head_dim=128, consumer_warpgroups=3, block_n=96, producer_warps=4),
    256: fmha.TilePlan(head_dim=256, consumer_warpgroups=2, block_n=128, producer_warps=4),
}
# P = exp2(s - max + P_MAX_OFFSET) in [0, 256]: e4m3's range (up to 448) instead of [0, 1].
P_MAX_OFFSET = 8
# O's rescale skipped until a row's max grows by 2^2 (tools.compare on the H200, 16k tokens,
# D = 128, no mask: see the worklog's "Lazy rescale").
DEFAULT_RESCALE_THRESHOLD = 2
# The default's arithmetic, for kernels.harness.reference.fp8_attention_model.
MODEL_ARITHMETIC = dict(max_offset=P_MAX_OFFSET - DEFAULT_RESCALE_THRESHOLD,
                        rescale_threshold=DEFAULT_RESCALE_THRESHOLD)


# Q descriptors held in uniform registers, one per k-block, up to this many k-blocks (D = 128).
MAX_HELD_K_BLOCKS = 8


class LoopOperands(fmha.ConsumerOperands):
    """The consumer's operands with their shared-memory descriptors built once, here, before
    the tile loop: Q's one per k-block (the A operand of every S GEMM, never rebuilt), K's and
    V^T's bases, to which each GEMM adds its stage's and k-blocks' offsets
    (``wgmma.uniform_descriptors``). K11's, on the e4m3 operands: V^T is the transposed
    copy's (D, Bc) stages."""

    def __init__(self, plan: fmha.TilePlan, mmas: fmha.Mmas, ctx: fmha.CtaContext, wg_idx: Int32):
        super().__init__(plan, mmas, ctx, wg_idx, v_transposed=True)
        # A list, one view per k-block, for wgmma.gemm_k_blocks. Held only where they fit:
        # each S QGMMA reads A's and B's descriptors from four consecutive uniform registers,
        # so Q's k-blocks hold 4 of the 63 each; e4m3 k-blocks are k32, D/32 of them, so all
        # three head dims fit (8 at D = 256, as bf16's at D = 128). Past MAX_HELD_K_BLOCKS Q
        # would keep the descriptors the DSL builds in the loop.
        if const_expr(cute.size(self.tSrQ.shape[2]) <= MAX_HELD_K_BLOCKS):
            self.q_blocks = wg.k_block_descriptors(self.tSrQ)
        else:
            self.q_blocks = [self.tSrQ[None, None, k] for k in range(cute.size(self.tSrQ.shape[2]))]
        self.tSrK = wg.uniform_descriptors(self.tSrK)
        self.tOrVt = wg.uniform_descriptors(self.tOrVt)


class K12FMHA:
    threads_per_row = 4  # the 4 lanes of a quad share an accumulator row
    fake_arguments = staticmethod(fp8.fake_arguments)  # the descales join the host function's arguments

    def __init__(self, head_dim: int, causal: bool, dtype: type[cutlass.Numeric], *,
                 plan: fmha.TilePlan | None = None, pingpong: bool = True,
                 rescale_before_pv: bool | None = None, ctas: int | None = None, exp2_fma_every: int = 0,
                 rescale_threshold: int | None = None, qk_accumulators: int = 1):
        self.head_dim = head_dim
        # S = Q K^T in this many fp32 accumulators, k-blocks dealt round-robin, added up after
        # the GEMM (wgmma.gemm_k_blocks_interleaved): FP8 WGMMA's short sums lose less of a
        # large score in shorter chains.
        if qk_accumulators not in (1, 2, 4) or isinstance(qk_accumulators, bool):
            raise ValueError(f"qk_accumulators: 1, 2 or 4, got {qk_accumulators!r}")
        self.qk_accumulators = qk_accumulators
        self.exp2_fma_every = exp2_fma_every  # lab: softmax.exp2_fma for one exponential in every n
        # The lazy rescale (OnlineSoftmax.rescale_threshold, whole log2 units; 0: off): O's
        # rescale waits until a row's max has grown by 2^threshold. It lost on K11; K12's
        # softmax paces the tensor pipe (see the worklog), so its 64 multiplies per thread
        # behind a warp vote pay here. P may then reach 2^(offset + threshold) before the max
        # moves, so the offset gives way to keep P within e4m3's range: offset + threshold =
        # P_MAX_OFFSET. A small threshold keeps most of the offset (small P above e4m3's
        # subnormals).
        if rescale_threshold is None:
            rescale_threshold = 0 if rescale_before_pv else DEFAULT_RESCALE_THRESHOLD
        if (isinstance(rescale_threshold, bool) or not 0 <= rescale_threshold <= P_MAX_OFFSET
                or int(rescale_threshold) != rescale_threshold):
            raise ValueError(f"rescale_threshold: a whole number in [0, {P_MAX_OFFSET}], "
                             f"got {rescale_threshold}")
        if rescale_threshold and rescale_before_pv:
            raise ValueError("rescale_threshold skips O's rescale after the wait for P V: "
                             "not with rescale_before_pv")
        self.rescale_threshold = int(rescale_threshold)
        self.p_max_offset = P_MAX_OFFSET - self.rescale_threshold
        self.causal = causal
        self.dtype = dtype
        self.out_dtype = fp8.OUT_DTYPE
        default = TILE_CONFIGS[head_dim]
        dtype_bytes, out_bytes = dtype.width // 8, self.out_dtype.width // 8
        self.plan = (plan or default).check(head_dim, default.producer_warps, dtype_bytes)
        self.registers = fmha.REGISTER_SPLITS[self.plan.consumer_warpgroups]
        self.pingpong = pingpong and self.plan.consumer_warpgroups > 1
        # K9's placement (under the S GEMM, inside the turn) lengthens the turn at every head
        # dim; K11's default keeps the turn to the GEMM issues (see the Delta).
        self.rescale_before_pv = False if rescale_before_pv is None else rescale_before_pv
        self.ctas = launch.persistent_ctas(ctas)
        # O (bf16) cannot be staged in the e4m3 Q tile: it always has a buffer of its own.
        if not self.plan.fits_separate_o(dtype_bytes, out_bytes):
            raise ValueError(f"{self.plan}: no room for the bf16 O buffer beside the e4m3 stages")
        self.separate_o = True

    # ---- host side: shared-memory plan, TMA descriptors, MMAs, grid, launch ------------------
    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mVt: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor | None, softmax_scale: Float32, q_descale: Float32, k_descale: Float32,
                 v_descale: Float32, stream: cuda.CUstream):
        # mVt: V^T [B, Hkv, D, Sk'], keys in the P V MMA's slot order (fp8.transpose_v)
        setup = fmha.host_setup(self.plan, self.dtype, mQ, mK, mVt, mO, mLSE, tma_store_o=True,
                                separate_o=self.separate_o, v_transposed=True, out_dtype=self.out_dtype)
        # exp(scale * s) = 2^(scale * log2(e) * s), s = q . k of the descaled inputs: the
        # descales of Q and K join the scale (one multiply, on the host).
        scale_log2 = softmax_scale * q_descale * k_descale * LOG2_E
        # One CTA per SM (at most one per query tile), each walking the tiles ctas apart.
        num_m_blocks, heads, batch = fmha.grid_shape(self.plan, setup.gmem)
        num_tiles = num_m_blocks * heads * batch
        self.kernel(setup.gmem, setup.smem, setup.mmas, scale_log2, v_descale, num_tiles,
                    setup.storage).launch(
            grid=(cutlass.min(num_tiles, self.ctas), 1, 1), block=(self.plan.num_threads, 1, 1),
            smem=setup.storage.size_in_bytes(), stream=stream, min_blocks_per_mp=1)

    # ---- device side ---------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, gmem: fmha.GmemArgs, smem: fmha.SmemLayouts, mmas: fmha.Mmas,
               scale_log2: Float32, v_descale: Float32, num_tiles: Int32, SharedStorage: cutlass.Constexpr):
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
                                                        kv_state=kv_state, q_after_first_k=True,
                                                        v_transposed=True)
        else:
            cute.arch.setmaxregister_increase(self.registers.consumer)
            self.compute(gmem, mmas, ctx, first_tile, num_tiles, ctas, scale_log2, v_descale)

    @cute.jit
    def tile_coords(self, gmem: fmha.GmemArgs, slot: Int32, num_tiles: Int32, ctas: Int32) -> fmha.TileCoords:
        """The tile a CTA takes at ``slot`` (its block index, then ``ctas`` further each time): the
        static walk, every other round reversed under the causal mask, in K8's grid order
        without it and longest first under it (``schedulers``)."""
        tile = schedulers.static_walk_tile(slot, num_tiles, ctas, self.causal)
        return schedulers.tile_order(self.plan, gmem, tile, self.causal)

    # ---- device roles --------------------------------------------------------------------------
    @cute.jit
    def compute(self, gmem: fmha.GmemArgs, mmas: fmha.Mmas, ctx: fmha.CtaContext, first_tile: Int32,
                num_tiles: Int32, ctas: Int32, scale_log2: Float32, v_descale: Float32):
        """Consumer warpgroups: the CTA's query tiles one after the other."""
        # This thread's warpgroup: it owns rows 64 wg_idx .. 64 wg_idx + 63 of the CTA's tile.
        wg_idx = cute.arch.make_warp_uniform(ctx.tidx // wg.WARPGROUP_THREADS)
        ops = LoopOperands(self.plan, mmas, ctx, wg_idx)
        # The lane that releases a K or V stage for its warp, decided here once (the rings
        # built in enter_kernel test the thread index again at every release).
        release_lane = cute.arch.lane_idx() == 0
        ctx = ctx._replace(pipeline_k=dataclasses.replace(ctx.pipeline_k, is_signaling_thread=release_lane),
                           pipeline_v=dataclasses.replace(ctx.pipeline_v, is_signaling_thread=release_lane))
        # tOrP: ((4, 2, 2), 1, Bc/32) e4m3 P of the previous tile as the k32 A fragment, kept
        # across iterations (keys in slot order: wg.convert_scores_into)
        tOrP = cute.make_rmem_tensor(ops.thr_mma_pv.partition_shape_A(ops.tile_s), self.dtype)
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, 1)
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.plan.num_stages)
        # The turns run on across tiles: every warpgroup takes as many per tile, and the last
        # one of a tile hands the turn back to warpgroup 0.
        if wg_idx == 0:
            self.pass_turn(self.plan.consumer_warpgroups - 1)  # warpgroup 0 opens its first turn
        for tile in cutlass.range(first_tile, num_tiles, ctas, unroll=1):
            coords = self.tile_coords(gmem, tile, num_tiles, ctas)
            q_state, kv_state = self.compute_tile(gmem, mmas, ctx, ops, coords, wg_idx, tOrP, q_state,
                                                  kv_state, scale_log2, v_descale)
        # the last O store reads sO: not past the CTA's end
        epilogue.wait_o_store_read(ctx.tidx, int(NamedBarrier.EPILOGUE), self.plan.num_consumer_threads)

    @cute.jit
    def compute_tile(self, gmem: fmha.GmemArgs, mmas: fmha.Mmas, ctx: fmha.CtaContext,
                     ops: fmha.ConsumerOperands, coords: fmha.TileCoords, wg_idx: Int32, tOrP: cute.Tensor,
                     q_state, kv_state, scale_log2: Float32, v_descale: Float32):
        """One query tile: K11's, on e4m3 operands, with P offset for e4m3 and O descaled."""
        n_block_max = fmha.kv_tile_count(self.plan, gmem, coords, self.causal)

        # ============ Phase 1: Q tile -> sQ; softmax state, O accumulator, mask ============
        ctx.pipeline_q.consumer_wait(q_state)
        # acc_O: ((2, 2, D/8), 1, 1) fp32 -- rows 16 w + l/4 (+8), columns 8 j + 2 (l%4) (+1)
        acc_O = ops.output_fragment()
        acc_O.fill(0.0)
        softmax = OnlineSoftmax(scale_log2, wg.rows_per_thread(acc_O), self.threads_per_row,
                                self.p_max_offset, self.exp2_fma_every,
                                rescale_threshold=float(self.rescale_threshold))
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
        # Every S of the tile has completed (the last P V waited for all groups): Q's stage
        # goes back to the producer now, and the next Q loads under the epilogue.
        ctx.pipeline_q.consumer_release(q_state)
        q_state.advance()

        # ============ Phase 3: normalize (and descale V), store O and LSE ============
        rO, lse = epilogue.normalized_output(acc_O, softmax, self.out_dtype, scale=v_descale)
        barrier_id, threads = int(NamedBarrier.EPILOGUE), self.plan.num_consumer_threads
        # sO is free once the previous tile's store has read it; this store is waited for
        # one tile later.
        epilogue.wait_o_store_read(ctx.tidx, barrier_id, threads)
        epilogue.store_o_tma(rO, gmem.mO, ctx.sO[None, None, 0], gmem.tma_atom_O, mmas.pv, ctx.tidx,
                             barrier_id, threads, coords.m_block, coords.head_idx, coords.batch_idx,
                             wait_for_read=False)
        epilogue.store_lse(lse, gmem.mLSE, ops.thr_mma_pv, ops.tile_o, coords.m_block, coords.head_idx,
                           coords.batch_idx, gmem.mQ.shape[0])
        return q_state, kv_state

    @cute.jit
    def first_half_block(self, kv_state, mmas: fmha.Mmas, ops: fmha.ConsumerOperands, ctx: fmha.CtaContext,
                         tOrP: cute.Tensor, softmax: OnlineSoftmax, mask: FragmentMask):
        """Step 1, tile 0: S_0, masked softmax (the first tile: no rescale), P_0 -> ``tOrP`` (e4m3)."""
        ctx.pipeline_k.consumer_wait(kv_state)
        acc_S, acc_S_more = self.issue_scores(mmas, ops, kv_state, wait=True)
        ctx.pipeline_k.consumer_release(kv_state)
        self.add_scores(acc_S, acc_S_more)
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
        acc_S, acc_S_more = self.issue_scores(mmas, ops, kv_state, wait=False)
        if const_expr(self.rescale_before_pv):  # O by tile n-1's factor, under the S GEMM
            rescale_rows(wg.acc_rows_view(acc_O), pending_scale)
        ctx.pipeline_v.consumer_wait(v_state)
        wg.gemm(mmas.pv, acc_O, tOrP, ops.tOrVt[None, None, None, v_state.index], zero_init=False, wait=False)
        self.pass_turn(wg_idx)

        # ---- 2b. S_n has landed (the older of the two groups); P V may still be running
        warpgroup.wait_group(1)
        ctx.pipeline_k.consumer_release(kv_state)
        self.add_scores(acc_S, acc_S_more)

        # ---- 2c. mask and online softmax of tile n, under P_{n-1} V_{n-1}
        acc_S_mn = wg.acc_rows_view(acc_S)  # (2 rows, Bc/4 columns)
        if const_expr(masked):
            mask.apply(acc_S_mn, n_block)
        row_scale = softmax.update(acc_S_mn)

        # ---- 2d. P V done: V stage free, tOrP free for P_n; tile n's factor for O kept for 2a
        warpgroup.wait_group(0)
        ctx.pipeline_v.consumer_release(v_state)
        wg.convert_scores_into(acc_S, tOrP)
        if const_expr(self.rescale_before_pv):
            pending_scale.store(row_scale.load())
        elif const_expr(self.rescale_threshold > 0):
            if softmax.any_moved(row_scale):  # else every factor of the warp's rows is 1
                rescale_rows(wg.acc_rows_view(acc_O), row_scale)
        else:
            rescale_rows(wg.acc_rows_view(acc_O), row_scale)
        return kv_state

    @cute.jit
    def issue_scores(self, mmas: fmha.Mmas, ops: fmha.ConsumerOperands, kv_state,
                     wait: cutlass.Constexpr[bool]):
        """``S = Q K^T`` of ``kv_state``'s K stage issued (one commit group): in ``acc_S``, or with
        ``qk_accumulators`` n > 1 k-block ``i`` in accumulator ``i % n``: ``acc_S`` and the
        list of the others returned beside it (empty for n = 1), for :meth:`add_scores`."""
        acc_S = ops.scores_fragment()
        tSrK = ops.tSrK[None, None, None, kv_state.index]
        more = [ops.scores_fragment() for _ in range(min(self.qk_accumulators, len(ops.q_blocks)) - 1)]
        if const_expr(len(more) == 0):
            wg.gemm_k_blocks(mmas.qk, acc_S, ops.q_blocks, tSrK, zero_init=True, wait=wait)
        else:
            wg.gemm_k_blocks_interleaved(mmas.qk, [acc_S, *more], ops.q_blocks, tSrK, wait=wait)
        return acc_S, more

    @cute.jit
    def add_scores(self, acc_S: cute.Tensor, more: cutlass.Constexpr):
        """``acc_S`` += the other accumulators of :meth:`issue_scores`, in fp32."""
        for acc in more:
            acc_S.store(acc_S.load() + acc.load())

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


# ---- the rung interface (FP8's: Fp8Tensor inputs, V transposed first; kernels/cute/fp8.py) -----
_API = fp8.Fp8RungAPI(RUNG, K12FMHA, HEAD_DIMS, DTYPES, TILE_CONFIGS)
can_implement = _API.can_implement
compile_kernel = _API.compile_kernel
run_kernel = _API.run_kernel
compile_for_inspect = _API.compile_for_inspect
knob_error = _API.knob_error
shared_bytes = _API.shared_bytes
