"""K6 — K5 + ping-pong: named barriers take turns between the consumer warpgroups, so one
warpgroup's softmax runs under the other's GEMMs.

What it computes
    out[b, i, h, :] = softmax(scale * q[b, i, h, :] @ k[b, :, h_kv, :]^T) @ v[b, :, h_kv, :]
    for q ``[B, Sq, Hq, D]``, k and v ``[B, Sk, Hkv, D]``, out ``[B, Sq, Hq, D]`` (bf16 or fp16),
    ``h_kv = h // (Hq // Hkv)`` (GQA), optional causal mask aligned bottom-right (query ``i``
    sees keys ``j <= i + Sk - Sq``), optional ``lse [B, Hq, Sq]`` fp32 (natural log).

Delta from K5
    In K5 each consumer warpgroup runs GEMM, softmax, GEMM on its own schedule, and the two
    keep the tensor cores busy only while they happen to be out of phase; waiting on the same
    K and V stages tends to line them up, so they also compete for the tensor cores and then
    both sit in the softmax. K6 imposes the phase: a warpgroup issues its GEMMs only in its
    *turn*, a named barrier (``bar.sync``) that the previous warpgroup opens (``bar.arrive``)
    right after issuing its own. A turn is ``O += P_n V_n`` followed by ``S_{n+1} = Q K_{n+1}^T``:
    while warpgroup 0 runs its softmax, warpgroup 1's two GEMMs occupy the tensor cores, and
    the other way round, so exponentials and MMAs overlap across warpgroups.

How it works (consumer warpgroups first, then the producer warpgroup)
    0. As K5: the producer warpgroup drops to 24 registers and one warp issues the TMA loads;
       the consumer warpgroups rise to 240 (160 with three).
    1. Warpgroup 0 opens its own first turn (an arrive on ``MMA_TURN_WG0``). Each warpgroup
       waits for its turn before its first GEMM.
    2. Per KV tile ``n``, in a warpgroup:
       a. wait for K_n; ``S = Q K_n^T`` issued (not waited for); **pass the turn** to the next
          warpgroup (``bar.arrive`` on its barrier, 2 x 128 threads); wait for S; release K_n;
       b. mask, online softmax, rescale O, P -> bf16 (while the other warpgroup's GEMMs run);
       c. wait for V_n; **wait for the turn** (``bar.sync`` on its own barrier); ``O += P V_n``;
          wait; release V_n.
    3. After the last tile, pass the turn once more (the next warpgroup's last ``bar.sync``
       needs it), then normalise and store O and the LSE as in K4.

Cost
    Barriers order the issue, not the execution: a turn only says which warpgroup's HGMMAs go
    into the tensor core queue first. The softmax of one warpgroup must take no longer than the
    two GEMMs of the other, or the tensor cores wait again (at D = 64 the GEMMs are half as long
    as at D = 128 while the softmax is the same, which is one reason three warpgroups share
    the tensor cores there). Inside a warpgroup nothing overlaps yet: it waits for its S before
    the softmax and for its P V before the next S.

Constraints
    head_dim 64, 128 or 256; bf16 or fp16; any Sq, Sk >= 1, batch, heads (Hq % Hkv == 0);
    last dimension contiguous, other strides multiples of 8 elements, 16-byte aligned base
    pointers (tensor-map rules). softmax scale: a positive runtime argument
    (``problem.softmax_scale``). Tuning knobs: ``plan`` (a ``fmha.TilePlan``) and ``pingpong``
    (False gives K5's schedule, for ablation).

Run and inspect
    compiled = compile_kernel(problem); run_kernel(compiled, q, k, v, out, lse)
    python -m tools.inspect k6        # SASS mix on a CPU-only machine (BAR.SYNC / BAR.ARV with ids)
    pytest -m gpu tests/test_rungs_gpu.py -k k6    # GPU correctness sweep
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
from .cute.mask import FragmentMask
from .cute.softmax import LOG2_E, OnlineSoftmax, rescale_rows

IDEA = "ping-pong: named barriers order the consumer warpgroups' GEMMs, one's softmax under the other's MMAs"
RUNG = "k6"
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


class K6FMHA:
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
        setup = fmha.host_setup(self.plan, self.dtype, mQ, mK, mV, mO, mLSE)
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
        m_block, head_idx, batch_idx = cute.arch.block_idx()
        coords = fmha.tile_coords(gmem, m_block, head_idx, batch_idx)
        if ctx.warp_idx >= self.plan.producer_warp:  # the producer warpgroup
            cute.arch.setmaxregister_decrease(self.registers.producer)
            if ctx.warp_idx == self.plan.producer_warp:
                fmha.load_tiles(self.plan, gmem, ctx, coords, self.causal)
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

        # ============ Phase 2: KV mainloop, GEMMs in turns ============
        if wg_idx == 0:
            self.pass_turn(self.plan.consumer_warpgroups - 1)  # warpgroup 0 opens its first turn
        self.wait_turn(wg_idx)
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.plan.num_stages)
        for n_block in cutlass.range(n_block_max, unroll=1):
            kv_state = self.mma_one_n_block(kv_state, n_block, wg_idx, mmas, ops, ctx, acc_O, softmax, mask)
        self.pass_turn(wg_idx)

        # ============ Phase 3: normalize, store O and LSE ============
        rO, lse = epilogue.normalized_output(acc_O, softmax, self.dtype)
        epilogue.store_o_direct(rO, gmem.mO, ops.thr_mma_pv, ops.tile_o, coords.m_block, coords.head_idx,
                                coords.batch_idx)
        epilogue.store_lse(lse, gmem.mLSE, ops.thr_mma_pv, ops.tile_o, coords.m_block, coords.head_idx,
                           coords.batch_idx, gmem.mQ.shape[0])

    @cute.jit
    def mma_one_n_block(self, kv_state, n_block: Int32, wg_idx: Int32, mmas: fmha.Mmas,
                        ops: fmha.ConsumerOperands, ctx: fmha.CtaContext, acc_O: cute.Tensor,
                        softmax: OnlineSoftmax, mask: FragmentMask):
        """Steps 2a-2e for KV tile ``n_block``; returns the advanced pipeline state."""
        # ---- 2a. K tile: wait until its TMA load has landed
        ctx.pipeline_k.consumer_wait(kv_state)

        # ---- 2b. S = Q K^T on the tensor cores (the end of this warpgroup's turn), then mask
        # acc_S: ((2, 2, Bc/8), 1, 1) fp32, same row ownership as acc_O
        acc_S = ops.scores_fragment()
        wg.gemm(mmas.qk, acc_S, ops.tSrQ, ops.tSrK[None, None, None, kv_state.index],
                zero_init=True, wait=False)
        self.pass_turn(wg_idx)
        warpgroup.wait_group(0)
        ctx.pipeline_k.consumer_release(kv_state)
        acc_S_mn = wg.acc_rows_view(acc_S)  # (2 rows, Bc/4 columns)
        mask.apply(acc_S_mn, n_block)

        # ---- 2c. online softmax row by row (a quad shares a row), rescale O; P -> bf16 A operand
        row_scale = softmax.update(acc_S_mn)
        rescale_rows(wg.acc_rows_view(acc_O), row_scale)
        tOrP = wg.scores_to_a_operand(acc_S, self.dtype)  # ((2, 2, 2), 1, Bc/16): P as the A fragment

        # ---- 2d. V tile: wait until its TMA load has landed, then for this warpgroup's turn
        ctx.pipeline_v.consumer_wait(kv_state)
        self.wait_turn(wg_idx)

        # ---- 2e. O += P V on the tensor cores (A = P from registers, B = V^T from smem)
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
_API = launch.RungAPI(RUNG, K6FMHA, HEAD_DIMS, DTYPES, TILE_CONFIGS)
can_implement = _API.can_implement
compile_kernel = _API.compile_kernel
run_kernel = _API.run_kernel
compile_for_inspect = _API.compile_for_inspect
knob_error = _API.knob_error
shared_bytes = _API.shared_bytes
