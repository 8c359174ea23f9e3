// Split-KV decode: the kernel body (templated on head_dim, math and KV source), the combine
// kernel and the launcher. No torch.
//
// Work decomposition, for q [B, Sq, Hq, D] with Sq small:
//   grid = (num_splits, Hkv * row_tiles, B). A CTA owns 16 packed rows (query, head in the
//   kv head's group: GQA packs the group's query heads into the MMA rows), one kv head, and
//   the KV tiles [tile_begin, tile_begin + n_tiles) of its split.
//   1. Q rows -> smem once; K/V tiles stream through a kStages-deep cp.async ring. An FP8 KV
//      cache (KvElement e4m3) streams half the bytes per key: Q becomes fp16 (bf16 queries
//      scaled by a power of two), and the math (E4m3KvMath) unpacks the ring's bytes straight
//      into fp16 B fragments, exactly; k_scale folds into the softmax scale and v_scale into O
//      (per kv head), and the merge is that of 16-bit K / V.
//   2. Warp w takes keys [w * kKeysPerWarp, ...) of every tile: S = Q K^T, mask, online
//      softmax, O += P V, each warp with its own running max / sum.
//   3. The warps merge in shared memory; with one split the CTA writes O (the inputs' element
//      type) and LSE, otherwise fp32 partial O and LSE, which the combine kernel adds up or,
//      given arrival counters (p.split_counters), the last split of the rows to arrive.
#pragma once

#include "../common/launch.cuh"
#include "configs.cuh"

namespace kernels::attention {

constexpr int kCombineThreads = 128;

// One launch for a split call: each split CTA counts itself in on its rows' counter after its
// partial rows are written; the last to arrive adds up every split's rows (the combine kernel's
// arithmetic) and sets the counter back to zero for the next call. smem: at least
// kRows * (kMaxDecodeSplits + 1) floats, free (the warp merge is done).
template <int kD, int kThreads, int kRows, class Element>
__device__ void combine_splits_if_last(const AttnParams& p, unsigned char* smem, int b, int hkv, int row0,
                                       int rows_total) {
  float* s_weight = reinterpret_cast<float*>(smem);    // [kRows][num_splits]: exp(lse_s - max) / sum
  float* s_lse = s_weight + kRows * kMaxDecodeSplits;  // [kRows]
  int* s_last = reinterpret_cast<int*>(s_lse + kRows);
  const int n = p.num_splits;
  const int counter = b * gridDim.y + blockIdx.y;
  __threadfence();  // this thread's partial rows are visible to the GPU before the CTA counts itself in
  __syncthreads();  // ... every thread's; and every read of the merge buffer is done
  if (threadIdx.x == 0) *s_last = atomicAdd(p.split_counters + counter, 1) == n - 1;
  __syncthreads();
  if (!*s_last) return;
  __threadfence();  // the other splits' rows, counted in before the atomic above, are read after it

  const int64_t rows_all = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  const int rows = min(kRows, rows_total - row0);
  const auto partial_row = [&](int r) {  // the row's index in a split's [B][Hq][Sq] block
    const int packed = row0 + r;
    return (static_cast<int64_t>(b) * p.heads_q + hkv * p.group + packed % p.group) * p.seqlen_q + packed / p.group;
  };
  // Each warp takes rows in turn, its lanes the splits: max, then sum, then the weights.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < rows; r += kThreads / 32) {
    const int64_t row = partial_row(r);
    float mx = -INFINITY;
    bool poisoned = false;
    for (int s = lane; s < n; s += 32) {
      const float lse = __ldcg(p.lse_partial + s * rows_all + row);
      s_weight[r * kMaxDecodeSplits + s] = lse;
      poisoned |= isnan(lse);
      mx = fmaxf(mx, lse);
    }
    mx = warp_reduce_max(mx);
    poisoned = __any_sync(0xffffffffu, poisoned);
    const bool empty = poisoned || mx == -INFINITY;
    float sum = 0.f;
    for (int s = lane; s < n; s += 32) {
      const float w = empty ? 0.f : __expf(s_weight[r * kMaxDecodeSplits + s] - mx);
      s_weight[r * kMaxDecodeSplits + s] = w;
      sum += w;
    }
    sum = warp_reduce_sum(sum);
    const float inv = poisoned ? NAN : (sum > 0.f ? 1.f / sum : 0.f);
    for (int s = lane; s < n; s += 32) s_weight[r * kMaxDecodeSplits + s] *= inv;
    if (lane == 0) s_lse[r] = poisoned ? NAN : (sum > 0.f ? mx + __logf(sum) : -INFINITY);
  }
  __syncthreads();

  // O: a float4 of a row per thread and step, every split's partial row weighted.
  using Ops = ElementOps<Element>;
  constexpr int kChunks = kD / 4;
  for (int idx = threadIdx.x; idx < rows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, chunk = idx % kChunks;
    const int64_t row = partial_row(r);
    const float* weight = s_weight + r * kMaxDecodeSplits;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int s = 0; s < n; ++s) {
      const float4 part = __ldcg(reinterpret_cast<const float4*>(p.o_partial + (s * rows_all + row) * kD) + chunk);
      acc.x = fmaf(weight[s], part.x, acc.x);
      acc.y = fmaf(weight[s], part.y, acc.y);
      acc.z = fmaf(weight[s], part.z, acc.z);
      acc.w = fmaf(weight[s], part.w, acc.w);
    }
    const int packed = row0 + r, qp = packed / p.group, head = hkv * p.group + packed % p.group;
    Element* o = static_cast<Element*>(p.o) + b * p.o_batch_stride + qp * p.o_token_stride + head * p.o_head_stride;
    typename Ops::Pair* o2 = reinterpret_cast<typename Ops::Pair*>(o + 4 * chunk);
    o2[0] = Ops::pair(acc.x, acc.y);
    o2[1] = Ops::pair(acc.z, acc.w);
    if (chunk == 0 && p.lse != nullptr) {
      p.lse[b * p.lse_batch_stride + head * p.lse_head_stride + qp * p.lse_token_stride] = s_lse[r];
    }
  }
  if (threadIdx.x == 0) p.split_counters[counter] = 0;  // ready for the next call
}

template <class Cfg, AttnImpl kImpl, class KV, class Element, class KvElement = Element>
__global__ void __launch_bounds__(Cfg::kWarps * 32) attn_decode_kernel(const __grid_constant__ AttnParams p) {
  using T = DecodeTraits<Cfg, sizeof(KvElement)>;
  using Tile = typename T::Tile;
  using RingTile = typename T::RingTile;
  static_assert(T::kConvertsKv != std::is_same_v<KvElement, Element>, "K / V of q's type or e4m3");
  constexpr int kD = T::kD;
  constexpr int kNT = T::kKeysPerWarp / 8;
  constexpr int kDT = kD / 8;
  static_assert(!Cfg::kSwizzled || kImpl == AttnImpl::kTensorCore, "the scalar math reads padded tiles only");
  using Math = WarpMath<kImpl, Element, 1, kNT, kD, Tile>;
  using E4m3Math = E4m3KvMath<kNT, kD, Tile>;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  Element* sQ = reinterpret_cast<Element*>(smem_raw);
  KvElement* sK = reinterpret_cast<KvElement*>(smem_raw + T::kRingOffset);  // the rings
  KvElement* sV = sK + T::kStages * T::kRingTileElems;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = blockIdx.x;
  const int hkv = blockIdx.y % p.heads_kv;
  const int row0 = (blockIdx.y / p.heads_kv) * T::kRows;
  const int b = blockIdx.z;
  const int q_len = p.seqlen_q;
  const int rows_total = q_len * p.group;

  // The combine kernel (num_splits > 1) may be scheduled from now on: it waits for this grid
  // in wait_for_prerequisites() before it reads a partial row.
  dependents_may_launch();
  // When launched programmatically (launch_decode, a split call): the previous kernel on the
  // stream may still be running, and may be writing q, the cache, the lengths or the page table,
  // or reading the partial rows this grid overwrites (the previous call's combine). Nothing
  // global is touched before it has finished.
  wait_for_prerequisites();
  float scale_log2 = p.scale_log2, v_scale = 1.f;
  if constexpr (T::kConvertsKv) {  // scores are k_scale * (q . k), O is v_scale * (P V)
    scale_log2 *= p.k_scale[hkv * p.kv_scale_head_stride];
    v_scale = p.v_scale[hkv * p.kv_scale_head_stride];
  }
  const bool kv_ok = KV::kv_len_ok(p, b);
  const int kv_len = kv_ok ? KV::kv_len(p, b) : 0;
  const int causal_offset = kv_len - q_len;
  const int last_qpos = (min(row0 + T::kRows, rows_total) - 1) / p.group;
  const int visible = p.causal ? max(0, min(kv_len, last_qpos + causal_offset + 1)) : kv_len;
  const int n_tiles_total = ceil_div(visible, T::kBlockN);
  const int tiles_per_split = ceil_div(n_tiles_total, p.num_splits);
  const int tile_begin = min(split * tiles_per_split, n_tiles_total);
  const int n_tiles = min(tiles_per_split, n_tiles_total - tile_begin);

  // ---- prologue: Q and the first kStages - 1 KV tiles --------------------------------
  const Element* q_base = static_cast<const Element*>(p.q) + b * p.q_batch_stride;
  load_q_tile<Element, T::kRows, kD, T::kThreads, Tile>(sQ, p.q, [&](int r) -> const Element* {
    const int packed = row0 + r;
    if (packed >= rows_total) return nullptr;
    const int head = hkv * p.group + packed % p.group;
    return q_base + (packed / p.group) * p.q_token_stride + head * p.q_head_stride;
  });
  // Paged KV: the page-table entries of a tile travel through shared memory kStages - 1
  // tiles ahead of its K/V copies (commit group g carries tile g's K/V and tile
  // g + kStages - 1's entries), so issuing a tile's copies never waits on a global load.
  // The first kStages - 1 tiles look their pages up directly.
  int* sEntries = reinterpret_cast<int*>(smem_raw + T::kPageEntriesOffset);  // [kStages][kBlockN]
  const auto stage_entries = [&](int tile) {
    if constexpr (KV::kPaged) {
      if (tile < n_tiles) {
        stage_page_entries<T::kBlockN, T::kThreads, KV>(sEntries + (tile % T::kStages) * T::kBlockN, p, b,
                                                        (tile_begin + tile) * T::kBlockN, kv_len);
      }
    }
  };
#pragma unroll
  for (int st = 0; st < T::kStages - 1; ++st) {
    if (st < n_tiles) {
      load_kv_tile<KvElement, T::kBlockN, kD, T::kThreads, KV, RingTile>(
          sK + st * T::kRingTileElems, sV + st * T::kRingTileElems, p, b, hkv, (tile_begin + st) * T::kBlockN, kv_len);
    }
    stage_entries(st + T::kStages - 1);
    cp_async_commit();
  }
  if constexpr (T::kConvertsKv) {  // Q (commit group 0) -> fp16 for E4m3KvMath
    cp_async_wait<T::kStages - 2>();
    __syncthreads();
    scale_log2 *= q_to_permuted_f16<Element, T::kRows, kD, T::kThreads, Tile>(
        sQ, reinterpret_cast<float*>(smem_raw + T::kQAmaxOffset));
  }

  int qpos[1][2];
  fragment_qpos<1>(qpos, row0, rows_total, p.group);
  float acc_o[1][kDT][4];
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc_o[0][dt][e] = 0.f;
  OnlineSoftmax<1, kNT, kDT> softmax;
  softmax.init();

  // ---- main loop -------------------------------------------------------------------------
  for (int i = 0; i < n_tiles; ++i) {
    cp_async_wait<T::kStages - 2>();
    __syncthreads();  // tile i landed for every thread; stage (i - 1) % kStages is free
    const int next = i + T::kStages - 1;
    if (next < n_tiles) {
      const int st = next % T::kStages;
      const int first_key = (tile_begin + next) * T::kBlockN;
      if constexpr (KV::kPaged) {
        // The tile's pages from its staged copy of the page-table entries.
        const int* entries = sEntries + st * T::kBlockN;
        const int first_index = KV::page_index(p, first_key);
        load_kv_rows<KvElement, T::kBlockN, kD, T::kThreads, KV, true, true, RingTile>(
            sK + st * T::kRingTileElems, sV + st * T::kRingTileElems, p, b, hkv, first_key, kv_len,
            [&](int pos) { return KV::locate(p, entries, first_index, pos); });
      } else {
        load_kv_tile<KvElement, T::kBlockN, kD, T::kThreads, KV, RingTile>(
            sK + st * T::kRingTileElems, sV + st * T::kRingTileElems, p, b, hkv, first_key, kv_len);
      }
    }
    // Entry slot (next - 1) % kStages was last read in the previous iteration, before the barrier.
    stage_entries(next + T::kStages - 1);
    cp_async_commit();

    const int st = i % T::kStages;
    const int warp_key0 = warp * T::kKeysPerWarp;
    float acc_s[1][kNT][4];
    // S = Q @ K^T over this warp's keys
    if constexpr (T::kConvertsKv) {
      E4m3Math::qk(acc_s, reinterpret_cast<const fp16*>(sQ),
                   reinterpret_cast<const uint8_t*>(sK + st * T::kRingTileElems) + warp_key0 * kD);
    } else {
      Math::qk(acc_s, sQ, sK + st * T::kTileElems + warp_key0 * Tile::kRowElems);
    }
    const int key0 = (tile_begin + i) * T::kBlockN + warp_key0;
    if (p.causal || p.mask != nullptr || key0 + T::kKeysPerWarp > kv_len) {
      apply_mask<1, kNT>(acc_s, p, b, qpos, key0, kv_len, causal_offset);
    }
    softmax.update(acc_s, acc_o, scale_log2);
    // O += P @ V
    if constexpr (T::kConvertsKv) {
      E4m3Math::pv(acc_o, acc_s, reinterpret_cast<const uint8_t*>(sV + st * T::kRingTileElems) + warp_key0 * kD);
    } else {
      Math::pv(acc_o, acc_s, sV + st * T::kTileElems + warp_key0 * Tile::kRowElems);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // all warps are done with the ring: it becomes the merge buffer

  // ---- merge the warps ---------------------------------------------------------------------
  softmax.reduce_sums();
  constexpr int kPitch = T::kMergePitch;
  float* sO = reinterpret_cast<float*>(smem_raw);    // [kWarps][16][kPitch]
  float* sMax = sO + T::kWarps * T::kRows * kPitch;  // [kWarps][16]
  float* sSum = sMax + T::kWarps * T::kRows;         // [kWarps][16]
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = warp * T::kRows + g + 8 * h;
    if (t == 0) {
      sMax[r] = softmax.row_max[0][h];
      sSum[r] = softmax.row_sum[0][h];
    }
    if constexpr (T::kConvertsKv) {
      E4m3Math::store_o_row(sO + r * kPitch, acc_o, h);
    } else {
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        *reinterpret_cast<float2*>(sO + r * kPitch + dt * 8 + 2 * t) =
            make_float2(acc_o[0][dt][2 * h], acc_o[0][dt][2 * h + 1]);
      }
    }
  }
  __syncthreads();

  for (int idx = threadIdx.x; idx < T::kRows * kD; idx += T::kThreads) {
    const int r = idx / kD, col = idx % kD;
    const int packed = row0 + r;
    if (packed >= rows_total) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < T::kWarps; ++w) mx = fmaxf(mx, sMax[w * T::kRows + r]);
    float sum = 0.f, acc = 0.f;
    if (mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < T::kWarps; ++w) {
        const float f = fast_exp2((sMax[w * T::kRows + r] - mx) * scale_log2);
        sum += sSum[w * T::kRows + r] * f;
        acc += sO[(w * T::kRows + r) * kPitch + col] * f;
      }
    }
    float out = sum > 0.f ? acc / sum : 0.f;
    if constexpr (T::kConvertsKv) out *= v_scale;
    float lse = row_lse(mx, sum, scale_log2);
    if (!kv_ok) out = lse = NAN;
    const int qp = packed / p.group;
    const int head = hkv * p.group + packed % p.group;
    if (p.num_splits == 1) {
      Element* o = static_cast<Element*>(p.o) + b * p.o_batch_stride + qp * p.o_token_stride + head * p.o_head_stride;
      o[col] = ElementOps<Element>::from_float(out);
      if (col == 0 && p.lse != nullptr) {
        p.lse[b * p.lse_batch_stride + head * p.lse_head_stride + qp * p.lse_token_stride] = lse;
      }
    } else {
      const int64_t prow = ((static_cast<int64_t>(split) * p.batch + b) * p.heads_q + head) * q_len + qp;
      p.o_partial[prow * kD + col] = out;
      if (col == 0) p.lse_partial[prow] = lse;
    }
  }
  if (p.num_splits > 1 && p.split_counters != nullptr) {
    combine_splits_if_last<kD, T::kThreads, T::kRows, Element>(p, smem_raw, b, hkv, row0, rows_total);
  }
}

// One CTA per (batch, head, query) row. Split s carries weight exp(lse_s - max lse); the
// threads form kGroups groups of kD / 4 lanes (a float4 of the row each) that take every
// kGroups-th split, so many splits' partial rows are in flight at once (latency, not
// bandwidth, bounds this kernel: a few KB per row), then the groups add up in shared memory.
template <int kD, class Element>
__global__ void __launch_bounds__(kCombineThreads) attn_decode_combine_kernel(const __grid_constant__ AttnParams p) {
  constexpr int kLanesPerRow = kD / 4;
  constexpr int kGroups = kCombineThreads / kLanesPerRow;
  __shared__ float s_lse[kMaxDecodeSplits];
  __shared__ float4 s_acc[kGroups][kLanesPerRow];
  const int64_t rows_total = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  const int64_t row = blockIdx.x;
  const int qp = static_cast<int>(row % p.seqlen_q);
  const int head = static_cast<int>((row / p.seqlen_q) % p.heads_q);
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.seqlen_q) * p.heads_q));
  const int n = p.num_splits;

  // The next kernel on the stream may be scheduled now: one launched programmatically (the
  // next call's attn_decode_kernel) waits for this grid before it touches memory.
  dependents_may_launch();
  wait_for_prerequisites();  // launched programmatically behind attn_decode_kernel
  for (int s = threadIdx.x; s < n; s += kCombineThreads) s_lse[s] = p.lse_partial[s * rows_total + row];
  __syncthreads();
  float mx = -INFINITY;
  bool poisoned = false;
  for (int s = 0; s < n; ++s) {
    poisoned |= isnan(s_lse[s]);
    mx = fmaxf(mx, s_lse[s]);
  }
  const bool empty = poisoned || mx == -INFINITY;

  const int group = threadIdx.x / kLanesPerRow, lane = threadIdx.x % kLanesPerRow;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (!empty) {
#pragma unroll 4
    for (int s = group; s < n; s += kGroups) {
      const float w = __expf(s_lse[s] - mx);
      const float4 part = reinterpret_cast<const float4*>(p.o_partial + (s * rows_total + row) * kD)[lane];
      acc.x = fmaf(w, part.x, acc.x);
      acc.y = fmaf(w, part.y, acc.y);
      acc.z = fmaf(w, part.z, acc.z);
      acc.w = fmaf(w, part.w, acc.w);
    }
  }
  s_acc[group][lane] = acc;
  __syncthreads();
  if (threadIdx.x >= kLanesPerRow) return;
  float sum = 0.f;
  if (!empty) {
    for (int s = 0; s < n; ++s) sum += __expf(s_lse[s] - mx);
  }
#pragma unroll
  for (int g = 1; g < kGroups; ++g) {
    acc.x += s_acc[g][lane].x;
    acc.y += s_acc[g][lane].y;
    acc.z += s_acc[g][lane].z;
    acc.w += s_acc[g][lane].w;
  }
  const float inv = poisoned ? NAN : (sum > 0.f ? 1.f / sum : 0.f);
  using Ops = ElementOps<Element>;
  Element* o = static_cast<Element*>(p.o) + b * p.o_batch_stride + qp * p.o_token_stride + head * p.o_head_stride;
  typename Ops::Pair* o2 = reinterpret_cast<typename Ops::Pair*>(o + 4 * lane);
  o2[0] = Ops::pair(acc.x * inv, acc.y * inv);
  o2[1] = Ops::pair(acc.z * inv, acc.w * inv);
  if (lane == 0 && p.lse != nullptr) {
    p.lse[b * p.lse_batch_stride + head * p.lse_head_stride + qp * p.lse_token_stride] =
        poisoned ? NAN : (sum > 0.f ? mx + __logf(sum) : -INFINITY);
  }
}

// Element: the inputs' type, which p.dtype must name (bf16 by default, as the standalone
// tests' callers assume).
// KvElement: K's and V's type, Element (the default) or e4m3 (p.kv_dtype kE4M3, with p.k_scale
// and p.v_scale).
template <class Cfg, AttnImpl kImpl, class KV, class Element = bf16, class KvElement = Element>
void launch_decode(const AttnParams& p, cudaStream_t stream) {
  using T = DecodeTraits<Cfg, sizeof(KvElement)>;
  constexpr int kD = T::kD;
  check(p.dtype == ElementOps<Element>::kDtype, "decode: params.dtype does not match the launched element type");
  check((p.kv_dtype == KvDtype::kE4M3) == T::kConvertsKv,
        "decode: params.kv_dtype does not match the launched K / V element type");
  check(!T::kConvertsKv || (p.k_scale != nullptr && p.v_scale != nullptr),
        "decode: e4m3 K / V need k_scale and v_scale");
  auto kernel = attn_decode_kernel<Cfg, kImpl, KV, Element, KvElement>;
  static SmemOptIn opt_in;
  opt_in.ensure(kernel, T::kSmemBytes);
  const int64_t row_tiles = ceil_div<int64_t>(static_cast<int64_t>(p.seqlen_q) * p.group, T::kRows);
  const int64_t grid_y = row_tiles * p.heads_kv;
  check(grid_y <= 65535, "decode: heads_kv * ceil(seqlen_q * group / 16) must be <= 65535, got ", grid_y,
        "; use prefill for long query blocks");
  const dim3 grid(p.num_splits, static_cast<unsigned>(grid_y), p.batch);
  check_grid(grid, "attn_decode_kernel", "too many heads x query tiles or batch entries");
  // Programmatic launches when the call has a combine kernel (no arrival counters): each
  // kernel's launch overlaps the previous kernel's tail (the split kernel's: whatever ran before
  // it, the previous call's combine among them; the combine's: the split kernel's). Otherwise the
  // split kernel launches plainly: its CTAs launched early into a stream of unsplit calls sat
  // waiting, which cost B16 time (docs/production_lab.md).
  static_assert(T::kSmemBytes >= (T::kRows * (kMaxDecodeSplits + 1) + 1) * 4, "no room to combine the splits");
  const bool combine_kernel = p.num_splits > 1 && p.split_counters == nullptr;
  launch_ex("attn_decode_kernel", kernel, grid, T::kThreads, T::kSmemBytes, stream,
            LaunchOptions{.programmatic = combine_kernel}, with_page_divmod<KV>(p));
  if (combine_kernel) {
    const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
    check(rows <= 0x7fffffff, "decode: batch * heads_q * seqlen_q must be < 2^31, got ", rows);
    launch_ex("attn_decode_combine_kernel", attn_decode_combine_kernel<kD, Element>, dim3(static_cast<unsigned>(rows)),
              kCombineThreads, 0, stream, LaunchOptions{.programmatic = true}, p);
  }
}

}  // namespace kernels::attention
