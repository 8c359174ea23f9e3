// FP8 GEMM host planning: the planner's defaults, the plan and request types, plan_gemm (tile
// shape, accumulation, clusters, persistence, split-K from the problem and the SM count),
// plan_supported, the launch checks (errors as in common/errors.h) and the split-K workspace size. Host code only:
// nothing here instantiates a kernel, so planner tests (csrc/tests/fp8_plan_test.cu) build without the kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../common.h"
#include "epilogue.cuh"
#include "policy.cuh"
#include "request.h"

namespace kernels::fp8::gemm {

// The planner's choices when a request leaves them open (sm_90a path): the one place to flip
// after measuring variants on the GPU (csrc/tests/fp8_test.cu times each of them).
struct PlannerDefaults {
  // Promoted (fp32) accumulation for BN <= 192; kFast is only ever taken when asked for (or
  // with block_n = 256), since it changes results, not just speed. Promotion every 2 k-blocks
  // (256-deep partial sums) was faster on the H200 (sustained fp8_test timing) than ping-pong
  // promotion every k-block and than every k-block with one partial (docs/production_lab.md,
  // "How the GEMM accumulates and picks its tiles"); its error against an fp32 reference stays
  // that of torch._scaled_mm's precise mode (tests/test_fp8.py).
  static constexpr AccumMode kAccum = AccumMode::kPromote;
  static constexpr int kPromoteEvery = 2;  // k-blocks per promotion (kPromote)
  // With interval 2, the second consumer warpgroup's first interval is a single k-block, so
  // the two warpgroups drain their WGMMAs at different times (Sm90Mainloop::consume_tile_promoted).
  static constexpr bool kStagger = false;
  static constexpr ClusterMode kCluster = ClusterMode::kNone;
  static constexpr int kGroupM = 8;  // raster group height in tiles
  // Unchecked stores for interior tiles without row / column scales or bias (same results,
  // fewer instructions: see Epilogue::store_wgmma_fragment) were faster as 4-byte pairs
  // (StoreMode::kPairs) and faster again as 16-byte rows (kRows16), a quarter of the stores.
  // Staged in shared memory and stored by TMA (kTma), the consumers go on to their next tile
  // while the stores drain: faster than the row stores at BN 192 promoted, about level at BN 256
  // fast (fp8_test on the H200; docs/production_lab.md, "Where the gap sits" and "Two more
  // per-tile costs"). The planner's default where the tile has a TMA-store kernel
  // (has_tma_store_kernel), else kRows16.
  static constexpr int kStore = int(StoreMode::kTma);
  // The overlap accumulation's TMA-store kernels (514a816) are not measured yet: a plan that asks
  // for that accumulation and leaves the store open takes the row stores until this flips.
  static constexpr bool kOverlapTakesTmaStore = false;
  // Split-K when the tiles leave SMs idle (tiles < SM count; never otherwise, so every plan
  // that fills the GPU is unchanged). Among split counts S with at least kSplitMinKBlocks
  // k-blocks per split and at most kSplitMaxWaves waves of (tile, split) units, the planner
  // takes the lowest estimated time in k-block steps of one block:
  //   waves(S) * (ceil(k_blocks / S) + kSplitUnitCost)
  //   + (S > 1: kSplitReduceCost + the partials' write and read per SM, in k-block loads)
  // and keeps S = 1 unless that estimate is kSplitMinGain lower. The costs are estimates
  // until the H200 measures fp8_test --time-only splitk (forced split counts sit beside).
  // The model stays off by default: on the H200 (the fp8 suite, split_k 0 against 1) its splits
  // gained on some decode-sized shapes and lost on as many others, with no K or N bound
  // separating them (docs/production_lab.md, "Measured while choosing the planner's defaults").
  // split_k = 0 means no split until the model is refitted; callers may still ask for S.
  static constexpr bool kAutoSplitK = false;
  static constexpr int kSplitMinKBlocks = 4;
  static constexpr int kSplitMaxWaves = 4;
  static constexpr int kSplitMax = 32;
  static constexpr double kSplitUnitCost = 1.0;    // pipeline fill and partial store per unit
  static constexpr double kSplitReduceCost = 8.0;  // the second launch, in k-block steps
  static constexpr double kSplitMinGain = 0.97;
  // With the model off, the one split the H200 measured a win for everywhere it applies (the
  // fp8 suite under graph replay, M = 128, N = 4096: two slices faster than unsplit at every K
  // measured): a single row of tiles whose doubled count still fits in one wave, at K >=
  // kSplitTwoMinKBlocks k-blocks. N = 11008 at M = 128 (86 tiles, slower in two slices) and
  // prefill-sized M never take it (docs/production_lab.md, "Measured while choosing the
  // planner's defaults").
  static constexpr int kSplitTwoMinKBlocks = 32;
};

struct GemmPlan {
  Path path = Path::kWgmma;
  int block_m = 128, block_n = 128;
  int tiles = 0, grid = 0;  // grid in blocks (a multiple of the cluster size)
  bool persistent = true;
  AccumMode accum = PlannerDefaults::kAccum;
  int promote_every = PlannerDefaults::kPromoteEvery;
  bool stagger = PlannerDefaults::kStagger;  // kPromote, interval 2: consumers' drains offset by a k-block
  ClusterMode cluster = ClusterMode::kNone;
  int group_m = PlannerDefaults::kGroupM;
  int store = PlannerDefaults::kStore;  // StoreMode
  int split_k = 1;                      // K splits per tile (> 1: fp32 partials + splitk_reduce_kernel)
};

// The (block_n, accumulation) pairs with a compiled sm_90a kernel (launch_formats).
inline bool has_kernel(int block_n, AccumMode accum) {
  switch (block_n) {
    case 64: return accum == AccumMode::kPromote;
    case 128: return int(accum) >= 0 && int(accum) <= 4;  // every mode, block scaling only here
    case 176:
    case 192: return accum == AccumMode::kPromote || accum == AccumMode::kPromoteOverlap;
    case 256: return accum == AccumMode::kFast;
    default: return false;
  }
}

// The pairs with a TMA-store epilogue kernel as well (StoreMode::kTma, Sm90Policy::kTmaStore).
inline bool has_tma_store_kernel(int block_n, AccumMode accum) {
  switch (block_n) {
    case 128: return accum == AccumMode::kPromote || accum == AccumMode::kFast;
    case 176:
    case 192: return accum == AccumMode::kPromote || accum == AccumMode::kPromoteOverlap;
    case 256: return accum == AccumMode::kFast;
    default: return false;
  }
}

// The pairs with a chunk-staged TMA-store kernel (StoreMode::kTmaChunked, Sm90Policy::kChunkedStaging):
// the widths where chunks give the ring back the stage that whole-block staging takes (not 128).
inline bool has_tma_chunked_kernel(int block_n, AccumMode accum) {
  return block_n != 128 && has_tma_store_kernel(block_n, accum);
}

// Whether a (block_n, accumulation) pair's kernels include one for `store`: the TMA modes have
// their own kernels, the direct stores are in every kernel.
inline bool has_store_kernel(int store, int block_n, AccumMode accum) {
  if (store == int(StoreMode::kTma)) return has_tma_store_kernel(block_n, accum);
  if (store == int(StoreMode::kTmaChunked)) return has_tma_chunked_kernel(block_n, accum);
  return true;
}

inline int64_t tiles_for(int64_t m, int64_t n, int bm, int bn) {
  return ceil_div<int64_t>(m, bm) * ceil_div<int64_t>(n, bn);
}

// The split-K cost model of PlannerDefaults for a WGMMA plan of `blocks` blocks (tiles,
// phantom cluster tiles included): only problems with fewer blocks than SMs split.
inline int split_k_model(int64_t m, int64_t n, int64_t k, int64_t blocks, int block_m, int block_n, int num_sms) {
  using D = PlannerDefaults;
  const int64_t k_blocks = ceil_div<int64_t>(k, 128);
  if (k_blocks <= 1 || blocks >= num_sms || num_sms <= 0) return 1;
  const double kblock_bytes = double(block_m + block_n) * 128;
  const auto cost = [&](int64_t splits) {
    const int64_t waves = ceil_div<int64_t>(blocks * splits, num_sms);
    double c = double(waves) * (double(ceil_div<int64_t>(k_blocks, splits)) + D::kSplitUnitCost);
    if (splits > 1) {
      const double partial_bytes = 2.0 * double(splits) * double(m) * double(SplitKPartials::row_stride(n)) * 4.0;
      c += D::kSplitReduceCost + partial_bytes / num_sms / kblock_bytes;
    }
    return c;
  };
  const double unsplit = cost(1);
  int best_splits = 1;
  double best = unsplit * D::kSplitMinGain;
  for (int64_t splits = 2; splits <= D::kSplitMax && splits * D::kSplitMinKBlocks <= k_blocks; ++splits) {
    if (ceil_div<int64_t>(blocks * splits, num_sms) > D::kSplitMaxWaves) break;
    const double c = cost(splits);
    if (c < best) {
      best = c;
      best_splits = int(splits);
    }
  }
  return best_splits;
}

// K splits for a WGMMA plan: the request's count (capped at the k-blocks), or with split_k = 0
// the model's while PlannerDefaults::kAutoSplitK allows it (off: two slices for one half-wave
// row of tiles with deep K, kSplitTwoMinKBlocks; else none).
inline int choose_split_k(int64_t m, int64_t n, int64_t k, int64_t blocks, int block_m, int block_n, int num_sms,
                          int requested) {
  const int64_t k_blocks = ceil_div<int64_t>(k, 128);
  if (k_blocks <= 1 || requested == 1) return 1;
  if (requested > 1) return int(requested < k_blocks ? requested : k_blocks);
  if (!PlannerDefaults::kAutoSplitK)
    return m <= block_m && 2 * blocks <= num_sms && k_blocks >= PlannerDefaults::kSplitTwoMinKBlocks ? 2 : 1;
  return split_k_model(m, n, k, blocks, block_m, block_n, num_sms);
}

// Tile shape from the problem and the SM count: among the candidate BN (128 / 64 promoted,
// 256 / 128 / 64 with fast accumulation), maximise (fraction of the last wave that is busy) x
// (tile arithmetic intensity bm*bn/(bm+bn)). Large problems take the widest tile; small M or N
// take 64 when that occupies more SMs, or when N is narrower than the wider tiles (the
// intensity counts the N columns a tile stores: at 8192 x 64 x 4096, 128 x 64 tiles were much
// faster than 128 x 192 on the H200, docs/production_lab.md). BN 64 has only the kPromote kernel (a
// default mode without one falls back to it). block_n = 256 implies fast accumulation unless the request
// names another mode (then launch_gemm rejects the plan: kUnsupportedPlan). BN 176 and 192
// exist for the promoted modes only; the score picks 176 at 4096^3 (768 tiles, 5.8 of 6
// waves busy) and 192 at 8192^3, as measured best there.
inline GemmPlan plan_gemm(int64_t m, int64_t n, int64_t k, int num_sms, int cc_major, int cc_minor,
                          const PlanRequest& req = {}) {
  GemmPlan plan;
  const bool hopper = cc_major == 9 && cc_minor == 0;
  // Decode-sized M goes to a GEMV kernel unless the request names a tile choice (block_n,
  // accumulation, split-K, persistence, clusters), which only the tiled kernels have: on sm_90a
  // the swap-AB TMA one where GemvTmaPolicy::planner_takes (16 < M <= 64, up to 128 where its
  // blocks of 64 rows fill more SMs than tiles of 128 in pairs, and M <= 16 with a large B),
  // else the mma.sync one at M <= 16.
  const bool tile_request = req.force_block_n > 0 || req.accum >= 0 || req.promote_every > 0 || req.split_k > 0 ||
                            req.persistent >= 0 || req.cluster >= 0;
  const bool gemv_tma = hopper && !tile_request && GemvTmaPolicy::planner_takes(m, n, k, num_sms);
  const bool gemv = m <= GemvPolicy::kMaxRows && !tile_request;
  plan.path = req.force_path >= 0 ? Path(req.force_path)
              : gemv_tma          ? Path::kGemvTma
              : gemv              ? Path::kGemv
              : hopper            ? Path::kWgmma
                                  : Path::kMmaSync;
  plan.group_m = req.group_m > 0 ? req.group_m : PlannerDefaults::kGroupM;
  plan.store = req.store >= 0 ? req.store : PlannerDefaults::kStore;
  int cluster_size = 1;
  if (plan.path == Path::kWgmma) {
    plan.block_m = 128;
    plan.accum = req.accum >= 0             ? AccumMode(req.accum)
                 : req.force_block_n == 256 ? AccumMode::kFast
                                            : PlannerDefaults::kAccum;
    const bool block_scaled = plan.accum == AccumMode::kBlockScaled;  // asked for: it takes other inputs
    plan.promote_every = req.promote_every > 0 ? req.promote_every : block_scaled ? 1 : PlannerDefaults::kPromoteEvery;
    plan.stagger = req.stagger >= 0 ? req.stagger == 1 : PlannerDefaults::kStagger;
    if (req.force_block_n > 0) {
      plan.block_n = req.force_block_n;
    } else {
      double best = -1.0;
      for (int bn : {256, 192, 176, 128, 64}) {
        if (bn == 256 && plan.accum != AccumMode::kFast) continue;
        if (block_scaled && bn != 128) continue;
        if ((bn == 192 || bn == 176) && !has_kernel(bn, plan.accum)) continue;
        const int64_t tiles = tiles_for(m, n, plan.block_m, bn);
        const int64_t waves = ceil_div<int64_t>(tiles, num_sms);
        const double wave_fill = double(tiles) / double(waves * num_sms);
        // a tile wider than N loads and multiplies bn columns of B but stores only N of them
        const int64_t used = n < bn ? n : bn;
        const double intensity = double(plan.block_m) * used / double(plan.block_m + bn);
        const double score = wave_fill * intensity;
        if (score > best * 1.0001) {
          best = score;
          plan.block_n = bn;
        }
      }
    }
    // BN 64, 176 and 192 have only the kPromote kernel
    if (req.accum < 0 && !has_kernel(plan.block_n, plan.accum)) plan.accum = AccumMode::kPromote;
    // a default of TMA stores where the tile has no such kernel (or, for the overlap accumulation,
    // until PlannerDefaults takes its TMA-store kernels): 16-byte row stores
    const bool overlap_waits = plan.accum == AccumMode::kPromoteOverlap && !PlannerDefaults::kOverlapTakesTmaStore;
    if (req.store < 0 && (!has_store_kernel(plan.store, plan.block_n, plan.accum) || overlap_waits))
      plan.store = int(StoreMode::kRows16);
    if (req.cluster >= 0) {
      plan.cluster = ClusterMode(req.cluster);  // kept even with one tile in a cluster dimension
    } else {
      // the default, minus any cluster dimension the problem has a single tile in
      const ClusterMode c = PlannerDefaults::kCluster;
      const bool along_m = cluster_m_of(c) > 1 && ceil_div<int64_t>(m, plan.block_m) >= 2;
      const bool along_n = cluster_n_of(c) > 1 && ceil_div<int64_t>(n, plan.block_n) >= 2;
      plan.cluster = along_m && along_n ? ClusterMode::kQuad
                     : along_m          ? ClusterMode::kPairM
                     : along_n          ? ClusterMode::kPairN
                                        : ClusterMode::kNone;
    }
    if (int(plan.cluster) >= 0 && int(plan.cluster) <= 3)
      cluster_size = cluster_m_of(plan.cluster) * cluster_n_of(plan.cluster);
  } else if (plan.path == Path::kGemv) {
    // one m16 tile (a forced GEMV with M > kMaxRows: kMaxRows + 1, unsupported)
    plan.block_m = m <= GemvPolicy::kMaxRows ? GemvPolicy::kMaxRows : GemvPolicy::kMaxRows + 1;
    plan.block_n = k >= GemvLongK::kMinK ? GemvLongK::kColsPerBlock : GemvPolicy::kColsPerBlock;
    plan.cluster = ClusterMode::kNone;
  } else if (plan.path == Path::kGemvTma) {
    // 128 or 64 columns per block (block_n: GemvTmaPolicy::rows_for), M in the narrowest WGMMA n
    // of 16 / 32 / 64 / 128 that holds it (block_m; M > kMaxRows: kMaxRows + 1, unsupported),
    // every k-block promoted (ping-pong, but one partial at 128 rows x 128 columns). Its split-K
    // runs inside a cluster and needs no workspace: split_k stays 1, the grid says splits x
    // tiles. The device check (sm_90a) is launch_gemm's, as for the WGMMA path.
    const int width = GemvTmaPolicy::width_for(m);
    plan.block_m = width > 0 ? width : GemvTmaPolicy::kMaxRows + 1;
    plan.block_n = GemvTmaPolicy::rows_for(n, k, num_sms);
    plan.accum = GemvTmaPolicy::accum_for(plan.block_m, plan.block_n);
    plan.promote_every = 1;
    plan.cluster = ClusterMode::kNone;
  } else {
    plan.block_m = Sm89Policy::kBM;
    plan.block_n = Sm89Policy::kBN;
    plan.cluster = ClusterMode::kNone;
  }
  plan.tiles = int(tiles_for(m, n, plan.block_m, plan.block_n));
  if (plan.path == Path::kGemv) {
    plan.tiles = int(ceil_div<int64_t>(n, plan.block_n));
    plan.persistent = false;
    plan.grid = plan.tiles;
  } else if (plan.path == Path::kGemvTma) {
    plan.tiles = int(ceil_div<int64_t>(n, plan.block_n));
    plan.persistent = false;
    plan.grid = plan.tiles * GemvTmaPolicy::splits_for(n, k, num_sms, plan.block_n);
  } else if (plan.path == Path::kMmaSync) {
    plan.persistent = req.persistent >= 0 ? req.persistent == 1 : plan.tiles > num_sms;
    // two 256-thread blocks (40 KB shared each) fit an SM comfortably
    plan.grid = plan.persistent ? (plan.tiles < 2 * num_sms ? plan.tiles : 2 * num_sms) : plan.tiles;
  } else {
    const int64_t units = ceil_div<int64_t>(m, plan.block_m * cluster_m_of(plan.cluster)) *
                          ceil_div<int64_t>(n, plan.block_n * cluster_n_of(plan.cluster));
    plan.split_k = choose_split_k(m, n, k, units * cluster_size, plan.block_m, plan.block_n, num_sms, req.split_k);
    const int64_t work = units * plan.split_k;  // in units of cluster_size blocks
    plan.persistent = req.persistent >= 0 ? req.persistent == 1 : int64_t(plan.tiles) * plan.split_k > num_sms;
    const int64_t resident = num_sms / cluster_size;
    plan.grid = int((plan.persistent ? (work < resident ? work : resident) : work) * cluster_size);
  }
  if (plan.grid < 1) plan.grid = 1;
  return plan;
}

// A plan launch_gemm can run: a compiled (block_n, accumulation) pair and valid other fields.
inline bool plan_supported(const GemmPlan& plan) {
  if (plan.path == Path::kGemv)
    return plan.split_k == 1 && plan.block_m <= GemvPolicy::kMaxRows &&
           (plan.block_n == GemvPolicy::kColsPerBlock || plan.block_n == GemvLongK::kColsPerBlock);
  if (plan.path == Path::kGemvTma)
    return plan.split_k == 1 && plan.block_m <= GemvTmaPolicy::kMaxRows &&
           plan.block_m == GemvTmaPolicy::width_for(plan.block_m) &&
           (plan.block_n == GemvTmaPolicy::kBM || plan.block_n == GemvTmaPolicy::kNarrowBM);
  if (plan.path != Path::kWgmma) return plan.split_k == 1;
  if (plan.promote_every != 1 && plan.promote_every != 2) return false;
  if (plan.accum == AccumMode::kBlockScaled && plan.promote_every != 1) return false;  // a factor per k-block
  if (plan.store < 0 || plan.store > int(StoreMode::kTmaChunked)) return false;
  if (!has_store_kernel(plan.store, plan.block_n, plan.accum)) return false;
  if (int(plan.cluster) < 0 || int(plan.cluster) > 3 || plan.group_m < 1) return false;
  if (plan.split_k < 1 || plan.split_k > kMaxSplitK) return false;
  return has_kernel(plan.block_n, plan.accum);
}

// Throws kernels::ValueError for a plan no compiled kernel runs (a forced combination).
inline void check_plan_supported(const GemmPlan& plan) {
  check(plan_supported(plan), "fp8 gemm: unsupported plan (path ", path_name(plan.path), ", block_n ", plan.block_n,
        ", accum ", accum_name(plan.accum), ", promote_every ", plan.promote_every, ", cluster ", int(plan.cluster),
        ", group_m ", plan.group_m, ", split_k ", plan.split_k,
        "): promoted accumulation needs block_n 64, 128, 176 or 192 (ping-pong and fast at 128 only, 256 fast only; "
        "overlap at 128 / 176 / 192; block-scaled at 128, promote_every 1, direct stores; TMA stores (store 3) at 128 "
        "promote / fast, 176 / 192 promote / overlap, "
        "256 fast, "
        "chunk-staged (store 4) at those but 128), "
        "promote_every 1 or 2, cluster 0-3, group_m >= 1, split_k 1-",
        kMaxSplitK, " (WGMMA path only); the GEMV path takes M <= ", GemvPolicy::kMaxRows,
        " (gemv_tma: M <= ", GemvTmaPolicy::kMaxRows, ", block_m 16 / 32 / 64 / 128, block_n 64 / 128)");
}

// What every GEMM launch checks first (launch_gemm): the device, the format pair, K and the
// operand alignment.
inline void check_gemm(const GemmParams& p, int cc_major, int cc_minor) {
  check<NotImplementedError>(cc_major * 10 + cc_minor >= 89, "fp8 gemm: needs sm_89 or newer, the device is sm_",
                             cc_major, cc_minor);
  check<TypeError>(!(p.a_format == Format::kE5M2 && p.b_format == Format::kE5M2), "fp8 gemm: unsupported format pair ",
                   format_name(p.a_format), " x ", format_name(p.b_format),
                   " (supported: e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3)");
  check(p.k % 16 == 0, "fp8 gemm: K must be a multiple of 16 (16-byte rows for TMA / cp.async), got M=", p.m,
        ", N=", p.n, ", K=", p.k);
  const auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  check(aligned16(p.a) && aligned16(p.b) && p.lda % 16 == 0 && p.ldb % 16 == 0,
        "fp8 gemm: A and B must have 16-byte aligned base pointers and row strides, got A ",
        reinterpret_cast<uintptr_t>(p.a) % 16, " and B ", reinterpret_cast<uintptr_t>(p.b) % 16,
        " bytes past a 16-byte boundary, row strides ", p.lda, " and ", p.ldb, " bytes");
}

// Block scales and the plan agree: both scale arrays or neither, e4m3 x e4m3, and the block-scaled
// WGMMA kernel exactly when they are given (any other kernel would ignore them).
inline void check_block_scales(const GemmParams& p, const BlockScales& blocks, const GemmPlan& plan) {
  const bool given = blocks.a != nullptr || blocks.b != nullptr;
  const bool planned = plan.path == Path::kWgmma && plan.accum == AccumMode::kBlockScaled;
  if (!given && !planned) return;
  check(blocks.a != nullptr && blocks.b != nullptr,
        "fp8 gemm: block scaling needs both block_scale_a and block_scale_b");
  check<TypeError>(p.a_format == Format::kE4M3 && p.b_format == Format::kE4M3,
                   "fp8 gemm: block scaling takes e4m3 x e4m3, got ", format_name(p.a_format), " x ",
                   format_name(p.b_format));
  check<NotImplementedError>(plan.path == Path::kWgmma,
                             "fp8 gemm: block scaling runs on the sm_90a WGMMA path only, the plan's path is ",
                             path_name(plan.path));
  check(planned, "fp8 gemm: block scales need the block-scaled accumulation (accum ", int(AccumMode::kBlockScaled),
        "), the plan has ", accum_name(plan.accum));
}

// Bytes of fp32 split-K partials a plan needs from the caller (0 without split-K).
inline size_t gemm_workspace_bytes(const GemmPlan& plan, int64_t m, int64_t n) {
  return plan.path == Path::kWgmma ? SplitKPartials::bytes(plan.split_k, m, n) : 0;
}

}  // namespace kernels::fp8::gemm
