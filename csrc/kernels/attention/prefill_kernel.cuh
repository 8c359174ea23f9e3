// Split-Q prefill (FlashAttention-2 style): the kernel body, templated on head_dim, math
// (tensor-core or scalar), Q schedule (dense or packed ragged) and KV source (contiguous or
// paged), and its launcher. No torch.
//
// Work decomposition: grid = (q tiles, Hkv, B) dense, or (scheduled tiles, Hkv) packed.
// A CTA owns kBlockM packed rows (query, head in group) of one kv head: the group's query
// heads share every K/V tile, so K/V stream once per group.
//   1. Q rows -> smem; K/V tiles double-buffered with cp.async (tile j + 1 loads while
//      tile j is computed).
//   2. Warp w owns 16 * kMT rows: S = Q K^T (ldmatrix + mma.sync m16n8k16), masks only on
//      tiles that need them (tail, causal diagonal, boolean mask), online softmax,
//      O += P V with P taken straight from the S accumulators.
//   3. O / rowsum -> bf16 output, LSE; a row that sees no key writes zeros and -inf.
#pragma once

#include "configs.cuh"
#include "decode_kernel.cuh"  // check_launch, check_grid, SmemOptIn

namespace kernels::attention {

template <int kD, AttnImpl kImpl, class QS, class KV>
__global__ void __launch_bounds__(PrefillTraits<kD>::kThreads)
    attn_prefill_kernel(const __grid_constant__ AttnParams p) {
    using T = PrefillTraits<kD>;
    constexpr int S = smem_stride<kD>();
    constexpr int kMT = T::kMT;
    constexpr int kNT = T::kBlockN / 8;
    constexpr int kDT = kD / 8;
    constexpr int kWarpRows = 16 * kMT;
    using Math = WarpMath<kImpl, kMT, kNT, kD>;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
    bf16* sK = sQ + T::kBlockM * S;
    bf16* sV = sK + T::kStages * T::kTileElems;

    const QTile qt = QS::tile(p);
    const int b = qt.batch;
    const int hkv = blockIdx.y;
    const int rows_total = qt.q_len * p.group;
    const int row0 = qt.tile * T::kBlockM;
    if (row0 >= rows_total) return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    const bool kv_ok = KV::kv_len_ok(p, b);
    const int kv_len = kv_ok ? KV::kv_len(p, b) : 0;
    const int causal_offset = kv_len - qt.q_len;
    const int last_qpos = (min(row0 + T::kBlockM, rows_total) - 1) / p.group;
    const int visible = p.causal ? max(0, min(kv_len, last_qpos + causal_offset + 1)) : kv_len;
    const int n_tiles = ceil_div(visible, T::kBlockN);
    // Keys beyond this one can be hidden from some row of this warp by the causal diagonal.
    const int warp_first_qpos = (row0 + warp * kWarpRows) / p.group;
    const int warp_last_unmasked_key = warp_first_qpos + causal_offset;

    // ---- prologue ---------------------------------------------------------------------------
    const bf16* q_base = static_cast<const bf16*>(p.q) + b * p.q_batch_stride + qt.q_start * p.q_token_stride;
    load_q_tile<T::kBlockM, kD, T::kThreads>(sQ, p.q, [&](int r) -> const bf16* {
        const int packed = row0 + r;
        if (packed >= rows_total) return nullptr;
        const int head = hkv * p.group + packed % p.group;
        return q_base + (packed / p.group) * p.q_token_stride + head * p.q_head_stride;
    });
#pragma unroll
    for (int st = 0; st < T::kStages - 1; ++st) {
        if (st < n_tiles) {
            load_kv_tile<T::kBlockN, kD, T::kThreads, KV>(sK + st * T::kTileElems, sV + st * T::kTileElems,
                                                          p, b, hkv, st * T::kBlockN, kv_len);
        }
        cp_async_commit();
    }

    int qpos[kMT][2];
    fragment_qpos<kMT>(qpos, row0 + warp * kWarpRows, rows_total, p.group);
    float acc_o[kMT][kDT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[mt][dt][e] = 0.f;
    OnlineSoftmax<kMT, kNT, kDT> softmax;
    softmax.init();
    const bf16* sQ_warp = sQ + warp * kWarpRows * S;

    // ---- main loop -------------------------------------------------------------------------
    for (int i = 0; i < n_tiles; ++i) {
        cp_async_wait<T::kStages - 2>();
        __syncthreads();  // tile i landed for every thread; stage (i - 1) % kStages is free
        const int next = i + T::kStages - 1;
        if (next < n_tiles) {
            const int st = next % T::kStages;
            load_kv_tile<T::kBlockN, kD, T::kThreads, KV>(sK + st * T::kTileElems, sV + st * T::kTileElems,
                                                          p, b, hkv, next * T::kBlockN, kv_len);
        }
        cp_async_commit();

        const int st = i % T::kStages;
        const int key0 = i * T::kBlockN;
        float acc_s[kMT][kNT][4];
        // S = Q @ K^T
        Math::qk(acc_s, sQ_warp, sK + st * T::kTileElems);
        const bool needs_mask = p.mask != nullptr || key0 + T::kBlockN > kv_len ||
                                (p.causal && key0 + T::kBlockN - 1 > warp_last_unmasked_key);
        if (needs_mask) apply_mask<kMT, kNT>(acc_s, p, b, qpos, key0, kv_len, causal_offset);
        softmax.update(acc_s, acc_o, p.scale_log2);
        // O += P @ V
        Math::pv(acc_o, acc_s, sV + st * T::kTileElems);
    }
    cp_async_wait<0>();

    // ---- epilogue ----------------------------------------------------------------------------
    softmax.reduce_sums();
    const int g = lane / 4, t = lane % 4;
    bf16* o_base = static_cast<bf16*>(p.o) + b * p.o_batch_stride + qt.q_start * p.o_token_stride;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int packed = row0 + warp * kWarpRows + mt * 16 + g + 8 * h;
            if (packed >= rows_total) continue;
            const int qp = packed / p.group;
            const int head = hkv * p.group + packed % p.group;
            const float sum = softmax.row_sum[mt][h];
            const float inv = kv_ok ? (sum > 0.f ? 1.f / sum : 0.f) : NAN;
            bf16* o_row = o_base + qp * p.o_token_stride + head * p.o_head_stride;
#pragma unroll
            for (int dt = 0; dt < kDT; ++dt) {
                *reinterpret_cast<__nv_bfloat162*>(o_row + dt * 8 + 2 * t) =
                    __floats2bfloat162_rn(acc_o[mt][dt][2 * h] * inv, acc_o[mt][dt][2 * h + 1] * inv);
            }
            if (t == 0 && p.lse != nullptr) {
                p.lse[b * p.lse_batch_stride + head * p.lse_head_stride + (qt.q_start + qp) * p.lse_token_stride] =
                    kv_ok ? row_lse(softmax.row_max[mt][h], sum, p.scale_log2) : NAN;
            }
        }
}

template <int kD, AttnImpl kImpl, class QS, class KV>
void launch_prefill(const AttnParams& p, cudaStream_t stream) {
    using T = PrefillTraits<kD>;
    auto kernel = attn_prefill_kernel<kD, kImpl, QS, KV>;
    static SmemOptIn opt_in;
    opt_in.ensure(kernel, T::kSmemBytes);
    const int64_t q_tiles = QS::kPacked ? p.num_q_tiles
                                        : ceil_div<int64_t>(static_cast<int64_t>(p.seqlen_q) * p.group, T::kBlockM);
    if (q_tiles > 0x7fffffff) throw std::invalid_argument("prefill: too many query tiles for one launch");
    const dim3 grid(static_cast<unsigned>(q_tiles), p.heads_kv, QS::kPacked ? 1 : p.batch);
    if (grid.x == 0) return;
    check_grid(grid, "attn_prefill_kernel");
    kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
    check_launch("attn_prefill_kernel");
}

}  // namespace kernels::attention
