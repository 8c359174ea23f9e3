"""K1 — naive attention forward: one thread per query row.

What it computes
    out[b, i, h, :] = softmax(scale * q[b, i, h, :] @ k[b, :, h_kv, :]^T) @ v[b, :, h_kv, :]
    for q ``[B, Sq, Hq, D]``, k and v ``[B, Sk, Hkv, D]``, out ``[B, Sq, Hq, D]`` (bf16 or fp16),
    ``h_kv = h // (Hq // Hkv)`` (GQA), optional causal mask aligned bottom-right (query ``i``
    sees keys ``j <= i + Sk - Sq``), optional ``lse [B, Hq, Sq]`` fp32 (natural log).

The idea (the baseline of the ladder)
    Online softmax: one pass over the keys keeps a running max ``m``, a running sum ``l`` and
    an output accumulator ``o``, so the ``Sq x Sk`` score matrix is never stored. Nothing else:
    no shared memory, no cooperation between threads.

How it works
    1. Grid ``(ceil(Sq / 128), Hq, B)``, 128 threads per CTA; thread ``t`` of CTA ``m`` owns
       query row ``i = 128 m + t`` of one (batch, head). Threads past ``Sq`` exit.
    2. The thread zeroes ``o`` (``D`` fp32 registers), sets ``m = -inf``, ``l = 0``.
    3. For every key ``j`` the row may see (all ``Sk``, or ``j <= i + Sk - Sq`` when causal):
       ``s = (q . k_j) * scale * log2(e)`` (an FFMA chain over 16-byte pieces of q and k_j read
       from global memory; q stays in L1), ``m' = max(m, s)``, ``c = 2^(m - m')``,
       ``p = 2^(s - m')``, ``l = l c + p``, ``o = o c + p v_j``. Folding ``log2(e)`` into the
       scale makes each exponential one MUFU.EX2.
    4. ``out_i = o / l`` (``l = 0`` only for a row that sees no key: it writes zeros and LSE
       ``-inf``), ``lse_i = (m + log2 l) ln 2``.
    All threads of a warp read the same k_j / v_j at the same time, so each load is one
    broadcast from L1; the kernel is bound by scalar FP32 issue and load latency.

Cost
    4 D FLOPs per (query, key) pair on FP32 scalar units with no data reuse across threads
    beyond L1 hits; expect a few TFLOP/s. The score of each key is one serial dependency chain.

Constraints
    head_dim 64 or 128; bf16 or fp16; any Sq, Sk >= 1, batch, heads (Hq % Hkv == 0);
    contiguous BSHD tensors (the device code takes any strides that are multiples of 8
    elements; run_kernel admits contiguous ones, the repository-wide contract), 16-byte aligned
    base pointers. softmax scale: a runtime argument (``problem.softmax_scale``).

Run and inspect
    compiled = compile_kernel(problem); run_kernel(compiled, q, k, v, out, lse)
    python -m tools.inspect k1        # SASS mix on a CPU-only machine (FFMA, LDG, MUFU.EX2)
    pytest -m gpu tests/test_rungs_gpu.py -k k1    # GPU correctness sweep
"""

from __future__ import annotations

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass import Float32, const_expr

from .cute import launch
from .cute.mask import key_limit
from .cute.softmax import LOG2_E, exp2f, finalize_row
from .cute.tensors import bshd_tensor

IDEA = "naive: one thread per query row, Q/K/V straight from global memory, online softmax in fp32 registers"
RUNG = "k1"
HEAD_DIMS = (64, 128)
DTYPES = ("bf16", "fp16")
SUPPORTS_LSE = True
KNOBS = ()  # keyword arguments of the constructor (compile_kernel(problem, **knobs))


class K1FMHA:
    num_threads = 128  # query rows per CTA
    vector = 8  # elements per 16-byte global load

    def __init__(self, head_dim: int, causal: bool, dtype: type[cutlass.Numeric]):
        self.head_dim = head_dim
        self.causal = causal
        self.dtype = dtype

    # ---- host side: views, grid, launch ------------------------------------------------------
    @cute.jit
    def __call__(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
                 mLSE: cute.Tensor | None, softmax_scale: Float32, stream: cuda.CUstream):
        mQ = bshd_tensor(mQ, self.head_dim)
        mK = bshd_tensor(mK, self.head_dim)
        mV = bshd_tensor(mV, self.head_dim)
        mO = bshd_tensor(mO, self.head_dim)
        # exp(scale * s) = 2^(scale * log2(e) * s): one multiply folded into the scale.
        scale_log2 = softmax_scale * LOG2_E
        batch, seqlen_q, heads_q, _ = mQ.shape
        grid = (cute.ceil_div(seqlen_q, self.num_threads), heads_q, batch)
        self.kernel(mQ, mK, mV, mO, mLSE, scale_log2).launch(
            grid=grid, block=(self.num_threads, 1, 1), stream=stream)

    # ---- device side ---------------------------------------------------------------------------
    @cute.kernel
    def kernel(self, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor,
               mLSE: cute.Tensor | None, scale_log2: Float32):
        tidx, _, _ = cute.arch.thread_idx()
        m_block, head_idx, batch_idx = cute.arch.block_idx()
        seqlen_q = mQ.shape[1]
        seqlen_k = mK.shape[1]
        kv_head_idx = head_idx // (mQ.shape[2] // mK.shape[2])
        row_idx = m_block * self.num_threads + tidx
        num_chunks = self.head_dim // self.vector

        if row_idx < seqlen_q:
            # gQ: (D,) this thread's query row; gK, gV: (Sk, D) keys and values of its kv head
            gQ = cute.zipped_divide(mQ[batch_idx, row_idx, head_idx, None], (self.vector,))
            gK = mK[batch_idx, None, kv_head_idx, None]
            gV = mV[batch_idx, None, kv_head_idx, None]

            # ---- 1. empty accumulators -------------------------------------------------------
            acc_O = cute.make_rmem_tensor((self.head_dim,), Float32)
            acc_O.fill(0.0)
            row_max = Float32(-Float32.inf)
            row_sum = Float32(0.0)
            rQ = cute.make_rmem_tensor((self.vector,), self.dtype)
            rK = cute.make_rmem_tensor((self.vector,), self.dtype)
            rV = cute.make_rmem_tensor((self.vector,), self.dtype)

            # ---- 2. one key at a time: online softmax --------------------------------------
            for key_idx in cutlass.range(key_limit(row_idx, seqlen_q, seqlen_k, self.causal), unroll=1):
                # s = (q . k_j) * scale * log2(e), 8 elements per step. q is re-read every key
                # (an L1 hit): o already takes D registers, and a register copy of q on top of
                # it would spill at D = 128.
                gK_row = cute.zipped_divide(gK[key_idx, None], (self.vector,))
                score = Float32(0.0)
                for chunk in cutlass.range(num_chunks, unroll=1):
                    rQ.store(gQ[None, chunk].load())
                    rK.store(gK_row[None, chunk].load())
                    for e in cutlass.range_constexpr(self.vector):
                        score += Float32(rQ[e]) * Float32(rK[e])
                score *= scale_log2

                new_max = cute.arch.fmax(row_max, score)
                correction = exp2f(row_max - new_max)  # 0 on the first key (row_max = -inf)
                p = exp2f(score - new_max)
                row_sum = row_sum * correction + p
                row_max = new_max

                # o = o * correction + p * v_j
                gV_row = cute.zipped_divide(gV[key_idx, None], (self.vector,))
                for chunk in cutlass.range_constexpr(num_chunks):
                    rV.store(gV_row[None, chunk].load())
                    for e in cutlass.range_constexpr(self.vector):
                        d = chunk * self.vector + e
                        acc_O[d] = acc_O[d] * correction + p * Float32(rV[e])

            # ---- 3. normalize, write O (and LSE) -------------------------------------------
            inv_sum, lse = finalize_row(row_max, row_sum)
            rO = cute.make_rmem_tensor((self.head_dim,), self.dtype)
            rO.store((acc_O.load() * inv_sum).to(self.dtype))
            mO[batch_idx, row_idx, head_idx, None].store(rO.load())
            if const_expr(mLSE is not None):
                mLSE[batch_idx, head_idx, row_idx] = lse


# ---- the rung interface (identical for every rung: kernels/cute/launch.py) -------------------
_API = launch.RungAPI(RUNG, K1FMHA, HEAD_DIMS, DTYPES)
can_implement = _API.can_implement
compile_kernel = _API.compile_kernel
run_kernel = _API.run_kernel
compile_for_inspect = _API.compile_for_inspect
knob_error = _API.knob_error
