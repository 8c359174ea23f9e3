// Split-Q prefill (FlashAttention-2 style): the kernel body, templated on a tile
// configuration (PrefillTiles, configs.cuh), math (tensor-core or scalar; the tensor cores
// through mma.sync, or through WGMMA on Hopper), Q schedule (dense or packed ragged) and KV
// source (contiguous or paged), and its launcher. No torch.
//
// Work decomposition: grid = (q tiles, Hkv, B) dense, or (scheduled tiles, Hkv) packed, or
// one linear longest-first grid for causal dense Q when the configuration asks for it.
// A CTA owns kBlockM packed rows (query, head in group) of one kv head: the group's query
// heads share every K/V tile, so K/V stream once per group.
//   1. Q rows -> smem; K/V tiles through a kStages-deep cp.async ring (joint K+V groups,
//      separate K and V groups so Q K^T only waits for K and P V only for V, or K_i with
//      V_{i-1} for the softmax overlap).
//   2. Warp w owns 16 * kMT rows: S = Q K^T (ldmatrix + mma.sync m16n8k16, or its
//      warpgroup's wgmma), masks only on tiles that need them (tail, causal diagonal, boolean
//      mask), online softmax, O += P V with P taken from the S accumulators.
//   3. O / rowsum -> output in the inputs' element type (bf16 or fp16), LSE; a row that sees no
//      key writes zeros and -inf.
#pragma once

#include <type_traits>

#include "../common/launch.cuh"
#include "configs.cuh"
#include "wgmma_math.cuh"

namespace kernels::attention {

// ---- prefill-only building blocks --------------------------------------------------------

// acc_o += P @ V with P already packed (same V^T ldmatrix.trans fragments as TensorCoreMath::pv).
template <class Element, int kMT, int kNT, int kD>
__device__ __forceinline__ void pv_packed(float (&acc_o)[kMT][kD / 8][4], const uint32_t (&pa)[kMT][kNT / 2][4],
                                          const Element* sV) {
  constexpr int S = smem_stride<kD>();
  const int lane = threadIdx.x % 32;
  const Element* v_lane = sV + (((lane / 8) % 2) * 8 + lane % 8) * S + (lane / 16) * 8;
#pragma unroll
  for (int kc = 0; kc < kNT / 2; ++kc)
#pragma unroll
    for (int dp = 0; dp < kD / 16; ++dp) {
      uint32_t bv[4];
      ldmatrix_x4_trans(bv, smem_addr(v_lane + kc * 16 * S + dp * 16));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma_16816<Element>(acc_o[mt][2 * dp], pa[mt][kc], bv[0], bv[1]);
        mma_16816<Element>(acc_o[mt][2 * dp + 1], pa[mt][kc], bv[2], bv[3]);
      }
    }
}

// The online softmax with an optional lazy rescale (kLazy): a row's running max only moves
// when the tile's max exceeds it by more than 2^8 in exp2 units, and O is rescaled only when
// some row of the warp moved (a warp-uniform branch). With a stale max P <= 256, exact in
// fp32 sums and as precise in bf16 or fp16; the final O / rowsum and the LSE use the same max, so
// the result is the same attention. Saves kMT * kD / 2 FMULs per tile and keeps the rescale
// out of the P V schedule. kLazy = false is OnlineSoftmax::update.
template <int kMT, int kNT, int kDT, bool kLazy>
struct PrefillSoftmax : OnlineSoftmax<kMT, kNT, kDT> {
  using Base = OnlineSoftmax<kMT, kNT, kDT>;
  static constexpr float kRescaleThreshold = 8.f;

  __device__ void update(float (&s)[kMT][kNT][4], float (&o)[kMT][kDT][4], float scale_log2) {
    if constexpr (!kLazy) {
      Base::update(s, o, scale_log2);
    } else {
      float correction[kMT][2];
      const bool moved = exponentiate(s, correction, scale_log2);
      rescale(o, correction, moved);
    }
  }

  // The lazy update in two halves, so O's rescale can wait for a P V still in flight:
  // S -> P in place with the running max and sums updated; returns whether some row of the
  // warp moved its max (then O must be multiplied by `correction`).
  __device__ bool exponentiate(float (&s)[kMT][kNT][4], float (&correction)[kMT][2], float scale_log2) {
    static_assert(kLazy, "the split update is the lazy one");
    bool moved = false;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float mx = Base::tile_row_max(s, mt, h, -INFINITY);
        const float old = this->row_max[mt][h];
        // -inf + threshold stays -inf: a row's first finite score always moves it.
        const bool grow = mx * scale_log2 > old * scale_log2 + kRescaleThreshold;
        correction[mt][h] = grow ? fast_exp2(old * scale_log2 - mx * scale_log2) : 1.f;
        if (grow) this->row_max[mt][h] = mx;
        moved |= grow;
        const float sum = Base::exponentiate_row(s, mt, h, this->row_max[mt][h], scale_log2);
        this->row_sum[mt][h] = this->row_sum[mt][h] * correction[mt][h] + sum;
      }
    return __any_sync(0xffffffffu, moved);
  }

  __device__ static void rescale(float (&o)[kMT][kDT][4], const float (&correction)[kMT][2], bool moved) {
    if (!moved) return;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        o[mt][dt][0] *= correction[mt][0];
        o[mt][dt][1] *= correction[mt][0];
        o[mt][dt][2] *= correction[mt][1];
        o[mt][dt][3] *= correction[mt][1];
      }
  }
};

// The (batch, q tile, kv head) of this CTA. Longest-first (causal dense Q only): blockIdx.x
// walks kv head fastest, then batch, then q tiles from the last one down, so every CTA of
// the first waves sees the most keys and the last wave holds the shortest tiles.
template <class Cfg, class QS>
__device__ __forceinline__ QTile prefill_tile(const AttnParams& p, int& hkv) {
  if constexpr (Cfg::kLongestFirst && !QS::kPacked) {
    if (p.causal) {
      const int q_tiles = ceil_div(p.seqlen_q * p.group, PrefillTraits<Cfg>::kBlockM);
      const int idx = blockIdx.x;
      hkv = idx % p.heads_kv;
      const int rest = idx / p.heads_kv;
      return {rest % p.batch, q_tiles - 1 - rest / p.batch, 0, p.seqlen_q};
    }
  }
  hkv = blockIdx.y;
  return QS::tile(p);
}

template <class Cfg, AttnImpl kImpl, class QS, class KV, class Element>
__global__ void __launch_bounds__(PrefillTraits<Cfg>::kThreads, Cfg::kMinBlocks)
    attn_prefill_kernel(const __grid_constant__ AttnParams p) {
  using T = PrefillTraits<Cfg>;
  constexpr int kD = T::kD;
  constexpr int kMT = T::kMT;
  constexpr int kNT = T::kBlockN / 8;
  constexpr int kDT = kD / 8;
  constexpr int kWarpRows = 16 * kMT;
  static_assert(!Cfg::kWgmma || kImpl == AttnImpl::kTensorCore, "WGMMA tiles are a tensor-core configuration");
  constexpr bool kPackP = Cfg::kPackP && kImpl == AttnImpl::kTensorCore && !Cfg::kWgmma;
  using Math = std::conditional_t<Cfg::kWgmma, WgmmaMath<Element, kD, T::kBlockM, T::kBlockN>,
                                  WarpMath<kImpl, Element, kMT, kNT, kD>>;
  using QSmemTile = typename Math::QSmemTile;
  using KVSmemTile = typename Math::KVSmemTile;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  unsigned char* smem = smem_raw;
  if constexpr (T::kAlignSlack > 0) {
    smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_raw) + T::kAlignSlack - 1) &
                                            ~uintptr_t(T::kAlignSlack - 1));
  }
  Element* sQ = reinterpret_cast<Element*>(smem);
  Element* sK = sQ + T::kBlockM * T::kRowElems;
  Element* sV = sK + T::kStages * T::kTileElems;
  // cp.async writes, WGMMA reads through the async proxy: each thread fences its landed
  // copies before the barrier that publishes them.
  const auto publish_landed = [] {
    if constexpr (Math::kAsyncProxy) fence_proxy_async_shared();
  };

  int hkv;
  const QTile qt = prefill_tile<Cfg, QS>(p, hkv);
  const int b = qt.batch;
  const int rows_total = qt.q_len * p.group;
  const int row0 = qt.tile * T::kBlockM;
  if (row0 >= rows_total) return;
  // Broadcast from lane 0 so the compiler knows the warp index (and everything derived from
  // it below) is warp-uniform and can keep it in uniform registers, off the 255 budget.
  const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 32, 0);
  const int lane = threadIdx.x % 32;

  const bool kv_ok = KV::kv_len_ok(p, b);
  const int kv_len = kv_ok ? KV::kv_len(p, b) : 0;
  const int causal_offset = kv_len - qt.q_len;
  const int last_qpos = (min(row0 + T::kBlockM, rows_total) - 1) / p.group;
  const int visible = p.causal ? max(0, min(kv_len, last_qpos + causal_offset + 1)) : kv_len;
  const int n_tiles = ceil_div(visible, T::kBlockN);
  // Tiles from this one on need masking in this warp: the kv_len tail, or keys past the
  // causal diagonal of the warp's first row (tile i is clear while i * kBlockN + kBlockN - 1
  // <= that row's last visible key).
  int first_masked_tile = kv_len / T::kBlockN;
  if (p.causal) {
    const int warp_last_unmasked_key = (row0 + warp * kWarpRows) / p.group + causal_offset;
    const int clear_tiles = warp_last_unmasked_key + 1 < T::kBlockN ? 0 : (warp_last_unmasked_key + 1) / T::kBlockN;
    first_masked_tile = min(first_masked_tile, clear_tiles);
  }

  const auto lookup = [&](int pos) { return KV::locate(p, b, pos); };
  auto load_k = [&](int tile) {
    load_kv_rows<Element, T::kBlockN, kD, T::kThreads, KV, true, false, KVSmemTile>(
        sK + (tile % T::kStages) * T::kTileElems, nullptr, p, b, hkv, tile * T::kBlockN, kv_len, lookup);
  };
  auto load_v = [&](int tile) {
    load_kv_rows<Element, T::kBlockN, kD, T::kThreads, KV, false, true, KVSmemTile>(
        nullptr, sV + (tile % T::kStages) * T::kTileElems, p, b, hkv, tile * T::kBlockN, kv_len, lookup);
  };

  // ---- prologue ---------------------------------------------------------------------------
  const Element* q_base = static_cast<const Element*>(p.q) + b * p.q_batch_stride + qt.q_start * p.q_token_stride;
  load_q_tile<Element, T::kBlockM, kD, T::kThreads, QSmemTile>(sQ, p.q, [&](int r) -> const Element* {
    const int packed = row0 + r;
    if (packed >= rows_total) return nullptr;
    const int head = hkv * p.group + packed % p.group;
    return q_base + (packed / p.group) * p.q_token_stride + head * p.q_head_stride;
  });
  if constexpr (Cfg::kSoftmaxOverlap) {
    // Group j holds K_j and V_{j-1} (group 0: Q and K_0), so iteration i waits for one
    // group: the K it multiplies now and the V that P_{i-1} multiplies with it.
    for (int j = 0; j < T::kStages - 1; ++j) {
      if (j < n_tiles) load_k(j);
      if (j >= 1 && j - 1 < n_tiles) load_v(j - 1);
      cp_async_commit();
    }
  } else if constexpr (Cfg::kSplitKV) {
    // Commit order is K0, V0, K1, V1, ... (one group each, empty past the last tile), so
    // K_i and V_i are each waited for with 2 * kStages - 2 younger groups in flight.
    for (int j = 0; j < T::kStages; ++j) {
      if (j < n_tiles) load_k(j);
      cp_async_commit();
      if (j + 1 < T::kStages) {
        if (j < n_tiles) load_v(j);
        cp_async_commit();
      }
    }
  } else {
#pragma unroll
    for (int st = 0; st < T::kStages - 1; ++st) {
      if (st < n_tiles) {
        load_k(st);
        load_v(st);
      }
      cp_async_commit();
    }
  }

  float acc_o[kMT][kDT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mt][dt][e] = 0.f;
  PrefillSoftmax<kMT, kNT, kDT, Cfg::kLazyRescale> softmax;
  softmax.init();
  // The first Q row of this warp's operand (its warpgroup's, for WGMMA).
  const Element* sQ_warp = sQ + QSmemTile::offset(Math::first_q_row(warp), 0);

  // Masks only the tiles that need it (tail, causal diagonal, boolean mask); row positions
  // are recomputed here rather than kept live across the loop.
  const auto mask_tile = [&](float (&acc_s)[kMT][kNT][4], int tile) {
    if (tile >= first_masked_tile || p.mask != nullptr) {
      int qpos[kMT][2];
      fragment_qpos<kMT>(qpos, row0 + warp * kWarpRows, rows_total, p.group);
      apply_mask<kMT, kNT>(acc_s, p, b, qpos, tile * T::kBlockN, kv_len, causal_offset);
    }
  };

  // ---- main loop -------------------------------------------------------------------------
  if constexpr (Cfg::kSoftmaxOverlap) {
    // Iteration i issues Q K_i^T and then P_{i-1} V_{i-1}; once S_i is back, its mask and
    // softmax run while the tensor cores still work on P_{i-1} V_{i-1} (FlashAttention-3's
    // intra-warpgroup overlap); O is rescaled after that WGMMA retires.
    uint32_t p_prev[1][kNT / 2][4];
    for (int i = 0; i < n_tiles; ++i) {
      cp_async_wait<T::kStages - 2>();  // group i: K_i and V_{i-1}
      publish_landed();
      __syncthreads();  // landed for every thread; every warpgroup is done with Q K_{i-1}^T, P V_{i-2}
      const int ahead = i + T::kStages - 1;
      if (ahead < n_tiles) load_k(ahead);
      if (ahead - 1 < n_tiles) load_v(ahead - 1);
      cp_async_commit();

      float acc_s[kMT][kNT][4];
      Math::qk_issue(acc_s, sQ_warp, sK + (i % T::kStages) * T::kTileElems);
      if (i > 0) {
        Math::pv_issue(acc_o, p_prev, sV + ((i - 1) % T::kStages) * T::kTileElems);
        wgmma_wait<1>();  // S_i back; P_{i-1} V_{i-1} may still run
      } else {
        Math::wait_all();
      }
      mask_tile(acc_s, i);
      float correction[kMT][2];
      const bool moved = softmax.exponentiate(acc_s, correction, p.scale_log2);
      Math::wait_all();  // P_{i-1} V_{i-1} retired: O and p_prev are registers again
      softmax.rescale(acc_o, correction, moved);
      pack_p_fragments<Element, kMT, kNT>(p_prev, acc_s);
    }
    cp_async_wait<0>();  // the last group holds V_{n-1}
    publish_landed();
    __syncthreads();
    if (n_tiles > 0) {
      Math::pv_issue(acc_o, p_prev, sV + ((n_tiles - 1) % T::kStages) * T::kTileElems);
      Math::wait_all();
    }
  } else {
    for (int i = 0; i < n_tiles; ++i) {
      if constexpr (Cfg::kSplitKV) {
        cp_async_wait<2 * T::kStages - 2>();
        publish_landed();
        __syncthreads();  // K_i landed for every thread; every warp is done with P V_{i-1}
        if (i + T::kStages - 1 < n_tiles) load_v(i + T::kStages - 1);
        cp_async_commit();
      } else {
        cp_async_wait<T::kStages - 2>();
        publish_landed();
        __syncthreads();  // tile i landed for every thread; stage (i - 1) % kStages is free
        const int next = i + T::kStages - 1;
        if (next < n_tiles) {
          load_k(next);
          load_v(next);
        }
        cp_async_commit();
      }

      const int st = i % T::kStages;
      float acc_s[kMT][kNT][4];
      // S = Q @ K^T
      Math::qk(acc_s, sQ_warp, sK + st * T::kTileElems);
      mask_tile(acc_s, i);
      if constexpr (Cfg::kSplitKV) {
        cp_async_wait<2 * T::kStages - 2>();
        publish_landed();
        __syncthreads();  // V_i landed for every thread; every warp is done with Q K_i^T
        if (i + T::kStages < n_tiles) load_k(i + T::kStages);
        cp_async_commit();
      }
      softmax.update(acc_s, acc_o, p.scale_log2);
      // O += P @ V
      if constexpr (kPackP) {
        uint32_t pa[kMT][kNT / 2][4];
        pack_p_fragments<Element, kMT, kNT>(pa, acc_s);
        pv_packed<Element, kMT, kNT, kD>(acc_o, pa, sV + st * T::kTileElems);
      } else {
        Math::pv(acc_o, acc_s, sV + st * T::kTileElems);
      }
    }
    cp_async_wait<0>();
  }

  // ---- epilogue ----------------------------------------------------------------------------
  softmax.reduce_sums();
  const int g = lane / 4, t = lane % 4;
  using Ops = ElementOps<Element>;
  Element* o_base = static_cast<Element*>(p.o) + b * p.o_batch_stride + qt.q_start * p.o_token_stride;
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
      Element* o_row = o_base + qp * p.o_token_stride + head * p.o_head_stride;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        *reinterpret_cast<typename Ops::Pair*>(o_row + dt * 8 + 2 * t) =
            Ops::pair(acc_o[mt][dt][2 * h] * inv, acc_o[mt][dt][2 * h + 1] * inv);
      }
      if (t == 0 && p.lse != nullptr) {
        p.lse[b * p.lse_batch_stride + head * p.lse_head_stride + (qt.q_start + qp) * p.lse_token_stride] =
            kv_ok ? row_lse(softmax.row_max[mt][h], sum, p.scale_log2) : NAN;
      }
    }
}

// Element: the inputs' type, which p.dtype must name (bf16 by default, as the standalone
// tests' callers assume).
template <class Cfg, AttnImpl kImpl, class QS, class KV, class Element = bf16>
void launch_prefill(const AttnParams& p, cudaStream_t stream) {
  using T = PrefillTraits<Cfg>;
  check(p.dtype == ElementOps<Element>::kDtype, "prefill: params.dtype does not match the launched element type");
  auto kernel = attn_prefill_kernel<Cfg, kImpl, QS, KV, Element>;
  static SmemOptIn opt_in;
  opt_in.ensure(kernel, T::kSmemBytes);
  const int64_t q_tiles =
      QS::kPacked ? p.num_q_tiles : ceil_div<int64_t>(static_cast<int64_t>(p.seqlen_q) * p.group, T::kBlockM);
  check(q_tiles <= 0x7fffffff, "prefill: query tiles per launch must be < 2^31, got ", q_tiles);
  dim3 grid(static_cast<unsigned>(q_tiles), p.heads_kv, QS::kPacked ? 1 : p.batch);
  if (Cfg::kLongestFirst && !QS::kPacked && p.causal) {
    const int64_t ctas = q_tiles * p.heads_kv * p.batch;
    check(ctas <= 0x7fffffff, "prefill: CTAs per launch must be < 2^31, got ", ctas);
    grid = dim3(static_cast<unsigned>(ctas), 1, 1);
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  check_grid(grid, "attn_prefill_kernel", "too many heads x query tiles or batch entries");
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(with_page_divmod<KV>(p));
  check_launch("attn_prefill_kernel");
}

}  // namespace kernels::attention
