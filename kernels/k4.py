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
    as the A operand of ``O += P V``. What follows from WGMMA: the CTA is now two warpgroups
    of 64 rows (128 query rows) and tiles of 128 keys, the shapes the instruction and the
    register file suit (``TILE_CONFIGS``; at D = 256 the accumulators of two warpgroups do not
    fit: one warpgroup, 64-key tiles), and O leaves from the accumulator fragment, each thread
    storing its own column pairs.

How it works (two consumer warpgroups, warps 0-7, own 64 query rows each; warp 8 is K3's producer)
    0. Warp 8 issues the TMA loads as in K3: Q (one 128 x D tile; warpgroup ``w`` multiplies its
       rows ``64 w .. 64 w + 63``), then K_n and V_n for every visible KV tile into the 2-stage
       ring (``fmha.load_tiles``).
    1. Wait for Q. ``acc_O = 0``, and the softmax state (``OnlineSoftmax``: ``row_max = -inf``,
       ``row_sum = 0``) for the thread's two rows. The accumulator of a 64 x N WGMMA gives
       thread ``t`` (warp ``w``, lane ``l``) rows ``16 w + l / 4`` and ``16 w + l / 4 + 8``
       and, in every group of 8 columns, the pair ``2 (l % 4) + {0, 1}``: a row belongs to the
       4 lanes of a quad, the same ownership K2 chose by hand (4 threads per row), so K2's
       shuffle reductions (``threads_in_group = 4``: SHFL.BFLY xor 1, xor 2) apply unchanged.
    2. For each visible KV tile ``n``:
       a. wait for K_n;
       b. ``S = Q K_n^T``: D/16 HGMMA (m64 n128 k16), one commit group, wait; release K_n;
          keys past ``Sk`` or (causal) past ``i + Sk - Sq`` become ``-inf`` (``FragmentMask``);
       c. online softmax per row on the fragment (``P = exp2(S * scale * log2 e - max * scale
          * log2 e)`` in place: one FFMA and one MUFU.EX2 per score), rescale ``acc_O``;
          P -> bf16 in registers, viewed as the WGMMA A fragment (for 16-bit types the
          accumulator of two n8 column groups *is* the A fragment of one k16 step: a
          regrouping of modes, no shuffles, no shared memory);
       d. wait for V_n;
       e. ``O += P V_n``: Bc/16 HGMMA with A from registers and B = V_n^T (the smem tile
          read MN-major through a transposed view); wait; release V_n.
    3. ``out = acc_O * rcp(row_sum)`` (rows that saw no key: zeros, LSE ``-inf``), converted to
       bf16 and stored from the fragment: each thread writes its column pairs of its two
       rows, rows past ``Sq`` skipped. LSE: the quad lane holding column 0 of each row.

Cost
    Tensor cores do the 4 D FLOPs per (query, key) pair, so the ceiling moves from the FP32 pipe
    (~67 TFLOP/s by the datasheet) to the bf16 tensor cores (see the cuBLAS GEMM ceiling
    measured with every table). Within a warpgroup the two GEMMs and the softmax run back to
    back (softmax waits for S, the PV GEMM waits for P), and the softmax is not cheap: 64 x Bc
    exponentials at 16 per clock per SM (MUFU) take about as long as one of the two GEMMs (64 x
    Bc x D x 2 FLOPs at ~4096 per clock). The tensor cores stay busy only while the two
    warpgroups are out of phase, one in its softmax while the other runs its GEMMs; nothing
    enforces that, there is no overlap of softmax and GEMMs inside a warpgroup, and the
    producer warp holds as many registers as a consumer thread. Registers: ptxas caps this
    288-thread CTA at 168 registers per thread (as for 384 threads: it budgets whole
    warpgroups). That fits D <= 128 (O 64 + S 64 + P 32 registers plus addresses) but not
    D = 256, which runs one consumer warpgroup (160 threads) on 64-key tiles. Every tile pays
    for the mask (a compare and a select per score), and the 4-byte stores of the epilogue are
    many small transactions; both are small next to the mainloop at long sequences.

Constraints
    head_dim 64, 128 or 256; bf16 or fp16; any Sq, Sk >= 1, batch, heads (Hq % Hkv == 0);
    last dimension contiguous, other strides multiples of 8 elements, 16-byte aligned base
    pointers (tensor-map rules). softmax scale: a positive runtime argument
    (``problem.softmax_scale``). Shared memory: ``TilePlan.shared_bytes``: 160 KiB at D = 128,
    80 KiB at D = 64, 160 KiB at 256.

Run and inspect
    compiled = compile_kernel(problem); run_kernel(compiled, q, k, v, out, lse)
    python -m tools.inspect k4        # SASS mix on a CPU-only machine (HGMMA, UTMALDG, SYNCS)
    pytest -m gpu tests/test_rungs_gpu.py -k k4    # GPU correctness sweep
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

IDEA = "WGMMA: S = QK^T and O += PV on tensor cores (bf16 in, fp32 accumulators), softmax on the fragments"
RUNG = "k4"
HEAD_DIMS = (64, 128, 256)
DTYPES = ("bf16", "fp16")
SUPPORTS_LSE = True
KNOBS = ("plan",)  # keyword arguments of the constructor (compile_kernel(problem, **knobs))

# FlashAttention-3's shapes where registers allow (see "Cost"); one producer warp.
TILE_CONFIGS = {
    64: fmha.TilePlan(head_dim=64, consumer_warpgroups=2, block_n=128),
    128: fmha.TilePlan(head_dim=128, consumer_warpgroups=2, block_n=128),
    256: fmha.TilePlan(head_dim=256, consumer_warpgroups=1, block_n=64),
}


class K4FMHA:
    threads_per_row = 4  # the 4 lanes of a quad share an accumulator row

    def __init__(self, head_dim: int, causal: bool, dtype: type[cutlass.Numeric], *,
                 plan: fmha.TilePlan | None = None):
        self.head_dim = head_dim
        self.causal = causal
        self.dtype = dtype
        default = TILE_CONFIGS[head_dim]
        self.plan = (plan or default).check(head_dim, default.producer_warps)

    # ---- host side: shared-memory plan, TMA descriptors, MMAs, grid, launch ------------------
    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor | None, softmax_scale: Float32, stream: cuda.CUstream):
        setup = fmha.host_setup(self.plan, self.dtype, mQ, mK, mV, mO, mLSE)
        # exp(scale * s) = 2^(scale * log2(e) * s): one multiply folded into the scale.
        scale_log2 = softmax_scale * LOG2_E
        self.kernel(setup.gmem, setup.smem, setup.mmas, scale_log2, setup.storage).launch(
            grid=fmha.grid_shape(self.plan, setup.gmem), block=(self.plan.num_threads, 1, 1),
            smem=setup.storage.size_in_bytes(), stream=stream)

    # ---- device side ---------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, gmem: fmha.GmemArgs, smem: fmha.SmemLayouts, mmas: fmha.Mmas,
               scale_log2: Float32, SharedStorage: cutlass.Constexpr):
        ctx = fmha.enter_kernel(self.plan, self.dtype, gmem, smem, SharedStorage)
        m_block, head_idx, batch_idx = cute.arch.block_idx()
        coords = fmha.tile_coords(gmem, m_block, head_idx, batch_idx)
        if ctx.warp_idx == self.plan.producer_warp:
            fmha.load_tiles(self.plan, gmem, ctx, coords, self.causal)
        elif ctx.warp_idx < self.plan.producer_warp:
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
_API = launch.RungAPI(RUNG, K4FMHA, HEAD_DIMS, DTYPES, TILE_CONFIGS)
can_implement = _API.can_implement
compile_kernel = _API.compile_kernel
run_kernel = _API.run_kernel
compile_for_inspect = _API.compile_for_inspect
knob_error = _API.knob_error
shared_bytes = _API.shared_bytes
