"""K5 — K4 + warp specialization: a producer warpgroup, and the registers it does not need
handed to the consumers (``setmaxnreg``).

What it computes
    out[b, i, h, :] = softmax(scale * q[b, i, h, :] @ k[b, :, h_kv, :]^T) @ v[b, :, h_kv, :]
    for q ``[B, Sq, Hq, D]``, k and v ``[B, Sk, Hkv, D]``, out ``[B, Sq, Hq, D]`` (bf16 or fp16),
    ``h_kv = h // (Hq // Hkv)`` (GQA), optional causal mask aligned bottom-right (query ``i``
    sees keys ``j <= i + Sk - Sq``), optional ``lse [B, Hq, Sq]`` fp32 (natural log).

Delta from K4
    K4 already splits the work by warps (one producer warp issues the TMA loads, two consumer
    warpgroups do the math), but every thread gets the same register budget: ptxas gives the
    288-thread CTA 168 registers per thread, the producer warp holds 168 it never uses, and the
    consumers are at the cap with S, P and O. K5 makes the producer a whole warpgroup (warps
    8-11; one warp of it issues the loads, the other three only give up registers) because
    ``setmaxnreg`` acts on a warpgroup: the producer drops to 24 registers per thread and the
    consumers rise to 240 (``fmha.REGISTER_SPLITS``). The registers are the point: at D = 256
    two consumer warpgroups now fit (128 query rows, 80-key tiles, as FlashAttention-3), and at
    D = 64 three do (192 rows) within 160 registers each. The mainloop is K4's.

How it works (consumer warpgroups first, then the producer warpgroup)
    0. Every warp starts with the CTA's budget (65536 / threads). The producer warpgroup runs
       ``setmaxnreg.dec`` to 24, the consumers ``setmaxnreg.inc`` to 240 (160 with three
       consumer warpgroups); an increase waits until the registers are free. The kernel is
       launched with a register cap at entry (``minctasm = 1``), which ``setmaxnreg`` needs.
    1. The first producer warp issues the TMA loads as in K4 (``fmha.load_tiles``): Q, then K_n
       and V_n for every visible KV tile into the ``num_stages``-deep ring.
    2. The consumers run K4's steps 1-3 unchanged: wait for Q; per KV tile S = Q K^T (HGMMA),
       mask, online softmax on the fragment, P -> bf16 in registers, O += P V (HGMMA); then
       normalise and store O and the LSE.

Cost
    Nothing is overlapped that K4 did not overlap: each consumer warpgroup still waits for
    its S before the softmax and for its P V before the next tile, and the two warpgroups
    are kept out of phase only by chance. What K5 buys is room: more rows per CTA at D = 64
    and 256 (fewer CTAs re-reading K and V, more MMA work per barrier), and, for the rungs
    after it, registers for a second S fragment in flight. Shared memory: ``TilePlan.shared_bytes``
    (224 KiB at D = 256: Q 64 KiB and two stages each of 80-key K and V).

Constraints
    head_dim 64, 128 or 256; bf16 or fp16; any Sq, Sk >= 1, batch, heads (Hq % Hkv == 0);
    last dimension contiguous, other strides multiples of 8 elements, 16-byte aligned base
    pointers (tensor-map rules). softmax scale: a positive runtime argument
    (``problem.softmax_scale``). Tuning knob: ``plan`` (a ``fmha.TilePlan``: consumer
    warpgroups, keys per tile, stages; producer_warps must be 4).

Run and inspect
    compiled = compile_kernel(problem); run_kernel(compiled, q, k, v, out, lse)
    python -m tools.inspect k5        # SASS mix on a CPU-only machine (USETMAXREG, HGMMA, UTMALDG)
    pytest -m gpu tests/test_rungs_gpu.py -k k5    # GPU correctness sweep
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Float32, Int32

from .cute import epilogue, fmha, launch
from .cute import wgmma as wg
from .cute.mask import FragmentMask
from .cute.softmax import LOG2_E, OnlineSoftmax, rescale_rows

IDEA = "warp specialization: a producer warpgroup gives its registers to the consumers (setmaxnreg 24 / 240)"
RUNG = "k5"
HEAD_DIMS = (64, 128, 256)
DTYPES = ("bf16", "fp16")
SUPPORTS_LSE = True
KNOBS = ("plan",)  # keyword arguments of the constructor (compile_kernel(problem, **knobs))

# FlashAttention-3's shapes, now that the registers allow them; a producer warpgroup.
TILE_CONFIGS = {
    64: fmha.TilePlan(head_dim=64, consumer_warpgroups=3, block_n=128, producer_warps=4),
    128: fmha.TilePlan(head_dim=128, consumer_warpgroups=2, block_n=128, producer_warps=4),
    256: fmha.TilePlan(head_dim=256, consumer_warpgroups=2, block_n=80, producer_warps=4),
}


class K5FMHA:
    threads_per_row = 4  # the 4 lanes of a quad share an accumulator row

    def __init__(self, head_dim: int, causal: bool, dtype: type[cutlass.Numeric], *,
                 plan: fmha.TilePlan | None = None):
        self.head_dim = head_dim
        self.causal = causal
        self.dtype = dtype
        default = TILE_CONFIGS[head_dim]
        self.plan = (plan or default).check(head_dim, default.producer_warps)
        self.registers = fmha.REGISTER_SPLITS[self.plan.consumer_warpgroups]

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

        # ============ Phase 2: KV mainloop ============
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.plan.num_stages)
        for n_block in cutlass.range(n_block_max, unroll=1):
            kv_state = self.mma_one_n_block(kv_state, n_block, mmas, ops, ctx, acc_O, softmax, mask)

        # ============ Phase 3: normalize, store O and LSE ============
        rO, lse = epilogue.normalized_output(acc_O, softmax, self.dtype)
        epilogue.store_o_direct(rO, gmem.mO, ops.thr_mma_pv, ops.tile_o, coords.m_block, coords.head_idx,
                                coords.batch_idx)
        epilogue.store_lse(lse, gmem.mLSE, ops.thr_mma_pv, ops.tile_o, coords.m_block, coords.head_idx,
                           coords.batch_idx, gmem.mQ.shape[0])

    @cute.jit
    def mma_one_n_block(self, kv_state, n_block: Int32, mmas: fmha.Mmas, ops: fmha.ConsumerOperands,
                        ctx: fmha.CtaContext, acc_O: cute.Tensor, softmax: OnlineSoftmax,
                        mask: FragmentMask):
        """Steps 2a-2e for KV tile ``n_block``; returns the advanced pipeline state."""
        # ---- 2a. K tile: wait until its TMA load has landed
        ctx.pipeline_k.consumer_wait(kv_state)

        # ---- 2b. S = Q K^T on the tensor cores, then causal / tail mask
        # acc_S: ((2, 2, Bc/8), 1, 1) fp32, same row ownership as acc_O
        acc_S = ops.scores_fragment()
        wg.gemm(mmas.qk, acc_S, ops.tSrQ, ops.tSrK[None, None, None, kv_state.index],
                zero_init=True, wait=True)
        ctx.pipeline_k.consumer_release(kv_state)
        acc_S_mn = wg.acc_rows_view(acc_S)  # (2 rows, Bc/4 columns)
        mask.apply(acc_S_mn, n_block)

        # ---- 2c. online softmax row by row (a quad shares a row), rescale O; P -> bf16 A operand
        row_scale = softmax.update(acc_S_mn)
        rescale_rows(wg.acc_rows_view(acc_O), row_scale)
        tOrP = wg.scores_to_a_operand(acc_S, self.dtype)  # ((2, 2, 2), 1, Bc/16): P as the A fragment

        # ---- 2d. V tile: wait until its TMA load has landed
        ctx.pipeline_v.consumer_wait(kv_state)

        # ---- 2e. O += P V on the tensor cores (A = P from registers, B = V^T from smem)
        wg.gemm(mmas.pv, acc_O, tOrP, ops.tOrVt[None, None, None, kv_state.index], zero_init=False, wait=True)
        ctx.pipeline_v.consumer_release(kv_state)
        kv_state.advance()
        return kv_state


# ---- the rung interface (identical for every rung: kernels/cute/launch.py) -------------------
_API = launch.RungAPI(RUNG, K5FMHA, HEAD_DIMS, DTYPES, TILE_CONFIGS)
can_implement = _API.can_implement
compile_kernel = _API.compile_kernel
run_kernel = _API.run_kernel
compile_for_inspect = _API.compile_for_inspect
knob_error = _API.knob_error
shared_bytes = _API.shared_bytes
