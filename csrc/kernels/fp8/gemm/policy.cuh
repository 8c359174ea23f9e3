// FP8 GEMM policies: tile shapes, pipeline depth and the warp-role split of each path, in one
// place. The planner (gemm.cuh) picks among these at run time; nothing else hard-codes them.
#pragma once

#include "../common.h"
#include "epilogue.cuh"
#include "request.h"

namespace kernels::fp8::gemm {

// Largest dynamic shared memory a Hopper block may opt into (227 KiB).
constexpr int kSm90SmemLimit = 232448;

// How the consumer warpgroups accumulate (sm_90a path). FP8 WGMMA adds into its accumulator
// with reduced precision (about 2^-14 of the running sum per add, truncated), so long K drifts
// from an fp32 dot product unless partial sums are promoted into fp32 registers:
//   kPromote          per promotion interval (1 or 2 k-blocks of 128, a run-time choice), a
//                     fresh partial accumulator, wait for it, add it to the fp32 total with
//                     FADDs (DeepGEMM's scheme; cuBLASLt's default, use_fast_accum=False).
//                     Interval 1 is the most accurate; interval 2 drains the WGMMA queue half
//                     as often and at most doubles the in-WGMMA error (8 instead of 4 k32 adds).
//   kPromotePingPong  two partial accumulators: k-block kb+1 is issued into the other one
//                     before waiting for kb, so this warpgroup never drains its WGMMA queue;
//                     accuracy as kPromote with interval 1. 3 x 64 accumulator registers at BN 128.
//   kFast             one hardware accumulator over all of K, one WGMMA group in flight
//                     (cuBLASLt's use_fast_accum=True); the only mode for BN = 256.
//   kPromoteOverlap   kPromote (its interval; a tile's first k-block promoted alone), and the
//                     next tile's first k-block is issued before this tile's epilogue: the
//                     tensor cores have this warpgroup's work queued while it stores, instead of
//                     idling from its last promotion to its next tile's first WGMMA. Same
//                     registers as kPromote; TMA-store kernels at BN 176 / 192.
//   kBlockScaled      block-scaled FP8 (DeepSeek-V3's recipe, DeepGEMM's scheme): kPromote with
//                     interval 1, each k-block's partial sum multiplied by the scales of its
//                     A rows' 1 x 128 blocks and of B's 128 x 128 block (GemmParams::
//                     block_scale_a / _b) as it is added. BN 128 only (one B block per tile and
//                     k-block), e4m3 x e4m3, direct stores.
// Registers bound the tile: kPromote holds 2 x kBN / 2 accumulators per thread (BN 192: 192 of
// 232, 202 in all; BN 224 with a 32 / 240 split spilled the tile counter), ping-pong
// 3 x kBN / 2 (BN <= 128), and 2 x 128 for BN 256 would not fit at all.
enum class AccumMode : int { kPromote = 0, kPromotePingPong = 1, kFast = 2, kPromoteOverlap = 3, kBlockScaled = 4 };

static_assert(int(AccumMode::kBlockScaled) == kAccumBlockScaled, "request.h names the block-scaled mode");

inline const char* accum_name(AccumMode a) {
  switch (a) {
    case AccumMode::kPromote: return "promote";
    case AccumMode::kPromotePingPong: return "pingpong";
    case AccumMode::kFast: return "fast";
    case AccumMode::kPromoteOverlap: return "overlap";
    case AccumMode::kBlockScaled: return "block_scaled";
  }
  return "?";
}

// Thread-block clusters (sm_90a path): blocks of a cluster that share an operand tile per
// k-block each load a half of it and multicast it to the others, cutting L2 reads.
//   kPairM  2 x 1: two tiles adjacent in M, same N: B (the N tile) is shared.
//   kPairN  1 x 2: two tiles adjacent in N, same M: A (the M tile) is shared.
//   kQuad   2 x 2: A shared along N and B along M; each block reads half of each tile.
enum class ClusterMode : int { kNone = 0, kPairM = 1, kPairN = 2, kQuad = 3 };

inline const char* cluster_name(ClusterMode c) {
  switch (c) {
    case ClusterMode::kNone: return "none";
    case ClusterMode::kPairM: return "pair_m";
    case ClusterMode::kPairN: return "pair_n";
    case ClusterMode::kQuad: return "quad";
  }
  return "?";
}
inline int cluster_m_of(ClusterMode c) { return c == ClusterMode::kPairM || c == ClusterMode::kQuad ? 2 : 1; }
inline int cluster_n_of(ClusterMode c) { return c == ClusterMode::kPairN || c == ClusterMode::kQuad ? 2 : 1; }

// sm_90a: TMA + WGMMA, one producer warpgroup and kConsumers math warpgroups of 64 rows each.
// BK = 128 fp8 = 128 bytes: one 128-byte swizzle row per tile row, four k32 WGMMAs per stage.
// Stages: 7 at BN 128 (32 KiB each), 5 at BN 176 / 192 (38 / 40 KiB), 4 at BN 256 (48 KiB).
// kTmaStore: the epilogue stages each consumer's 64 x BN bf16 block in shared memory and TMA
// stores it (TmaStoreEpilogue, epilogue.cuh); the staging costs a stage of the ring: 6 at
// BN 128, 4 at BN 176 / 192, 3 at BN 256. kChunkedStaging (with kTmaStore; StoreMode::kTmaChunked)
// stages 64 columns at a time through kStagingBuffers buffers of 8 KB per consumer, two where
// two fit beside as many stages as one does: 5 stages at BN 176 (two buffers) and 192 (one), 4
// at 256 (two), as many as without any staging (BN 128 would keep 6 either way: no such kernel).
// The promoted widths past 128 trade wave quantization for tile intensity: on 132 SMs,
// 4096^3 has 1024 tiles at BN 128 (7.8 waves), 768 at 176 (5.8), 704 at 192 (5.3); 8192^3
// fills its last wave within 2% at both.
template <int kBlockN, AccumMode kAccumMode, bool kTmaStore_ = false, bool kChunkedStaging_ = false>
struct Sm90Policy {
  static constexpr int kBM = 128;
  static constexpr int kBN = kBlockN;
  static constexpr int kBK = 128;
  static constexpr int kConsumers = kBM / 64;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kStageBytesA = kBM * kBK;
  static constexpr int kStageBytesB = kBN * kBK;
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  static constexpr int kBarrierBytes = 2 * 8 * 16;  // full + empty, room for 16 stages
  static constexpr int kAlignSlack = 1024;          // 128B-swizzled tiles start 1024-aligned
  static constexpr bool kTmaStore = kTmaStore_;
  static constexpr bool kChunkedStaging = kChunkedStaging_;
  static constexpr int kRingBytes = kSm90SmemLimit - kBarrierBytes - kAlignSlack;  // stages + staging
  static constexpr int kChunkBufferBytes = TmaStoreEpilogue<kBN, 1>::kBufferBytes;
  static constexpr int kStagingBuffers = !kChunkedStaging ? 0
                                         : (kRingBytes - 2 * kConsumers * kChunkBufferBytes) / kStageBytes ==
                                                 (kRingBytes - kConsumers * kChunkBufferBytes) / kStageBytes
                                             ? 2
                                             : 1;
  static constexpr int kStagingBytesPerConsumer = kTmaStore ? TmaStoreEpilogue<kBN, kStagingBuffers>::kStagingBytes : 0;
  static constexpr int kStagingBytes = kConsumers * kStagingBytesPerConsumer;
  static constexpr int kMaxStages = 8;
  static constexpr int kFitStages = (kRingBytes - kStagingBytes) / kStageBytes;
  static constexpr int kStages = kFitStages < kMaxStages ? kFitStages : kMaxStages;
  static constexpr int kSmemBytes = kStages * kStageBytes + kStagingBytes + kBarrierBytes + kAlignSlack;
  // Register split after setmaxnreg: 128 * (40 + 2 * 232) = 64512 <= 65536.
  static constexpr int kProducerRegs = 40;
  static constexpr int kConsumerRegs = 232;
  // Accumulator registers per consumer thread: m64 x kBN f32 over 128 threads.
  static constexpr int kAccRegs = 64 * kBN / 128;
  static constexpr AccumMode kAccum = kAccumMode;
  // Promotion doubles (ping-pong: triples) the accumulator registers: 2 x 96 of 232 fit for
  // BN <= 192, 3 x 64 for BN <= 128; BN = 256 keeps the single hardware accumulator.
  static constexpr bool kPromote = kAccum != AccumMode::kFast;
  static_assert(!kPromote || kBN <= 192, "promotion needs BN <= 192 (registers)");
  static_assert(kAccum != AccumMode::kPromotePingPong || kBN <= 128, "ping-pong needs BN <= 128 (registers)");
  static_assert(kAccum != AccumMode::kBlockScaled || (kBN == 128 && !kTmaStore),
                "block scaling: one 128-column B block per tile, direct stores");
  static_assert(kBN == 64 || kBN == 128 || kBN == 176 || kBN == 192 || kBN == 256, "WGMMA n of this path");
  static_assert(kStages >= 2, "pipeline needs two stages");
  static_assert(!kTmaStore || kBN % 16 == 0, "the TMA-store epilogue stages 16- or 64-column panels");
  static_assert(!kChunkedStaging || kTmaStore, "chunked staging is a TMA-store epilogue's");
};

// sm_89 (and a reference path on sm_90): cp.async + mma.sync m16n8k32, 8 warps as 2 (M) x 4 (N),
// each warp 64 x 32, double-buffered 128 x 128 x 64 tiles with padded shared rows.
struct Sm89Policy {
  static constexpr int kBM = 128;
  static constexpr int kBN = 128;
  static constexpr int kBK = 64;
  static constexpr int kWarpsM = 2, kWarpsN = 4;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kWarpM = kBM / kWarpsM, kWarpN = kBN / kWarpsN;  // 64 x 32
  static constexpr int kPadBytes = 16;  // row stride 80 B: the 32 lanes of a fragment load hit 32 banks
  static constexpr int kRowBytes = kBK + kPadBytes;
  static constexpr int kStages = 2;
  static constexpr int kSmemBytes = kStages * (kBM + kBN) * kRowBytes;
};

// The GEMV kernel (gemv.cuh): mma.sync m16n8k32 on M <= 16 rows, B streamed from global memory
// straight into the B fragments. A block owns kNTiles x 8 columns; its warps split K.
// The planner launches GemvPolicy, or GemvLongK at K >= GemvLongK::kMinK; fp8_test times other
// GemvTiles against them.
template <int kNTiles_ = 2, int kWarps_ = 8, int kUnroll_ = 4>
struct GemvTiles {
  static constexpr int kMaxRows = kGemvMaxRows;
  static constexpr int kWarps = kWarps_;  // per block, each a slice of K
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kNTiles = kNTiles_;  // n8 tiles per block (B rows a warp streams side by side)
  static constexpr int kUnroll = kUnroll_;  // 64-byte k chunks per row in flight per warp
  static constexpr int kChunk = 64;         // k per chunk: 4 lanes x 16 bytes, two k32 MMA steps
  static constexpr int kColsPerBlock = kNTiles * 8;
};
using GemvPolicy = GemvTiles<>;
// One n8 tile per block at long K: twice the blocks, so N = 11008 fills whole waves (1376 blocks of
// 8 columns, not 688 of 16 over 528 slots) and each block's K slice still hides the load latency.
// Faster than two tiles from kMinK on, slower at K = 4096 (fp8_test --time-only gemv on the H200;
// docs/production_lab.md has the timings).
struct GemvLongK : GemvTiles<1, 8, 4> {
  static constexpr int64_t kMinK = 8192;
};

// The swap-AB GEMV (gemv_tma.cuh, Path::kGemvTma, sm_90a): WGMMA m64nXk32 with kRows (128 or 64)
// rows of B in WGMMA's M slot (64 per consumer warpgroup) and A's M <= X rows in its N slot
// (X = kWidth: 16, 32, 64 or 128), fed by a TMA ring of kStages stages. The member names are
// Sm90Mainloop's (mainloop.cuh), which runs the ring with the operands swapped: its "A" tile
// (kBM rows) is B's, its "B" tile (kBN rows) A's. A block owns kBM output columns; split-K
// across the blocks of a cluster (GemvTmaPolicy::splits_for). Shared memory per width (ring +
// fp32 totals, of 227 KiB), 128 rows:
//   kBN  16: 18 KiB stages x 12,  8 KiB totals      kBN  64: 24 KiB stages x 8, 32 KiB totals
//   kBN  32: 20 KiB stages x 10, 16 KiB totals      kBN 128: 32 KiB stages x 5, 64 KiB totals
// 64 rows (one consumer warpgroup): 16 stages of 10 / 12 KiB at kBN 16 / 32, 13 of 16 KiB at
// 64, 8 of 24 KiB at 128.
// Registers (no setmaxnreg): ping-pong promotion holds 3 x kBN / 2 accumulators per consumer
// thread. 384 threads at one block per SM leave 168 per thread: 96 at kBN 64 fit, the 192 of
// kBN 128 do not, so 128 rows at that width promote with one partial (2 x 64, kPromote, every
// k-block: the same results, the warpgroup's WGMMAs drained once per k-block while the other
// one's run). 64 rows run 256 threads, 255 registers each: ping-pong at every width.
template <int kWidth, int kRows = 128>
struct GemvTmaTiles {
  static constexpr int kBM = kRows;   // B rows (output columns) per block: WGMMA M, 64 per consumer
  static constexpr int kBN = kWidth;  // A rows (M <= kBN): WGMMA N, rows past M zero-filled by TMA
  static constexpr int kBK = 128;     // one 128-byte swizzle row per tile row, four k32 WGMMAs
  static constexpr int kConsumers = kBM / 64;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kStageBytesA = kBM * kBK;  // B's box: 8 or 16 KiB
  static constexpr int kStageBytesB = kBN * kBK;  // A's box: kBN x 128 B (rows >= M zero-filled, still counted)
  static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
  static constexpr int kBarrierBytes = 2 * 8 * 16;  // full + empty, room for 16 stages
  static constexpr int kAlignSlack = 1024;          // 128B-swizzled tiles start 1024-aligned
  // The block's fp32 totals, [m][n] with rows of kBM floats, n XOR-swizzled by m (totals_index):
  // the fragment stores (8 n x 4 m per instruction) hit 32 banks without padding; split-K's
  // blocks read each other's through DSMEM.
  static constexpr int kStagingBytesPerConsumer = 0, kStagingBytes = 0;  // Sm90Mainloop::Storage: no output staging
  static constexpr int kTotalsPitch = kBM;
  static constexpr int kTotalsBytes = kBN * kTotalsPitch * 4;
  static constexpr int kMaxStages = 16;
  static constexpr int kFitStages = (kSm90SmemLimit - kBarrierBytes - kAlignSlack - kTotalsBytes) / kStageBytes;
  static constexpr int kStages = kFitStages < kMaxStages ? kFitStages : kMaxStages;  // see above
  static constexpr int kSmemBytes = kStages * kStageBytes + kBarrierBytes + kTotalsBytes + kAlignSlack;
  static constexpr int kAccRegs = 64 * kBN / 128;  // m64nX: X / 2 per thread
  // Every 128-deep k-block into a fresh partial, promoted into fp32 registers; two partials where
  // the registers hold them, so the next k-block is issued before waiting for this one (above).
  static constexpr int kAccRegBudget = kConsumers == 1 ? 192 : 96;
  static constexpr AccumMode kAccum = 3 * kAccRegs <= kAccRegBudget ? AccumMode::kPromotePingPong : AccumMode::kPromote;
  static_assert(kBN == 16 || kBN == 32 || kBN == 64 || kBN == 128, "WGMMA n of the swap-AB GEMV");
  static_assert(kBM == 64 || kBM == 128, "one or two consumer warpgroups of 64 B rows");
  static_assert(kStageBytes % 1024 == 0 && kStageBytesA % 1024 == 0, "128B-swizzled tiles start 1024-aligned");
  static_assert(kStages >= 2 && kSmemBytes <= kSm90SmemLimit, "GEMV TMA ring does not fit");
  static_assert(kStages <= 16, "barriers: room for 16 stages");

  // Element (m, n) of the totals: the fragment's stores have m = 8j + 2q + e (q = lane % 4) and n
  // = 8 consecutive values; n ^ 8q puts the four q in four different 8-bank groups. Pairs (n even,
  // n + 1) stay adjacent, so the epilogue reads float2.
  __host__ __device__ static constexpr int totals_index(int m, int n) {
    return m * kTotalsPitch + (n ^ ((m & 6) << 2));
  }
};

// What the widths share: the rows they take, the rows of B per block, the split count and the
// width for M.
struct GemvTmaPolicy {
  static constexpr int kMaxRows = kGemvTmaMaxRows;
  static constexpr int kBM = 128;       // output columns per block, unless rows_for takes kNarrowBM
  static constexpr int kNarrowBM = 64;  // one consumer warpgroup
  static constexpr int kBK = 128;
  static constexpr int kMaxSplits = 8;  // cluster size (portable limit)
  // Clusters of this many blocks of a one-block-per-SM kernel fill every GPC: the H200 holds 64
  // pairs at once but fewer than 32 clusters of 4 (cudaOccupancyMaxActiveClusters: a cluster
  // lives in one GPC, and SMs left over in each GPC hold none), so a launch of 32 tiles in
  // clusters of 4 falls back to pairs (gemv_tma_fit_splits) and leaves half the SMs idle.
  static constexpr int kWholeClusterSize = 2;

  // The narrowest width that holds M rows (16, 32, 64, 128); 0 for M > kMaxRows.
  static constexpr int width_for(int64_t m) {
    return m <= 16 ? 16 : m <= 32 ? 32 : m <= 64 ? 64 : m <= kMaxRows ? 128 : 0;
  }
  // The accumulation of a width's kernel (GemvTmaTiles::kAccum).
  static constexpr AccumMode accum_for(int width, int rows = kBM) {
    return rows == kNarrowBM || width <= 64 ? AccumMode::kPromotePingPong : AccumMode::kPromote;
  }

  // K splits (= cluster size) for blocks of `rows` B rows: the largest power of two up to
  // kMaxSplits with splits x tiles <= the SM count and at least one k-block per split; 1 when the
  // tiles alone fill the SMs.
  static constexpr int splits_for(int64_t n, int64_t k, int num_sms, int rows = kBM) {
    const int64_t tiles = (n + rows - 1) / rows, k_blocks = (k + kBK - 1) / kBK;
    int splits = 1;
    while (2 * splits <= kMaxSplits && 2 * splits * tiles <= num_sms && 2 * splits <= k_blocks) splits *= 2;
    return splits;
  }

  // B rows per block: kNarrowBM where its tiles, split in clusters every GPC holds whole
  // (kWholeClusterSize), put more blocks to work than kBM's (N = 4096: 64 tiles x 2 against 32 x
  // 2 blocks), else kBM (fewer re-reads of A, and no more blocks than tiles of 128 fill).
  static constexpr int rows_for(int64_t n, int64_t k, int num_sms) {
    const auto blocks = [&](int rows) {
      const int splits = splits_for(n, k, num_sms, rows);
      return (n + rows - 1) / rows * (splits < kWholeClusterSize ? splits : kWholeClusterSize);
    };
    const int64_t narrow = blocks(kNarrowBM);
    return narrow <= num_sms && narrow > blocks(kBM) ? kNarrowBM : kBM;
  }

  // Where the planner takes this kernel on its own (sm_90a, no tile request), as the H200 measured
  // it (fp8_test --time-only gemv / skinny, median of sustained launches; fp8 suite, graph replay;
  // the times: docs/production_lab.md, "Measured while choosing the planner's defaults"):
  //  - M <= 16 once B holds kMinAutoElems (16 Mi) values: from 4096 x 14336 on this kernel wins
  //    in any timing; at 4096 x 4096, in 64-row blocks, under graph replay, while sustained eager
  //    launches favour the mma.sync GEMV's plain launch (an eager call is host-bound either way);
  //  - 16 < M <= 64 always: faster than the tiled WGMMA kernel at every LLM shape measured;
  //  - 64 < M <= 128 where rows_for takes 64-row blocks (N = 4096: faster than the tiled kernel in
  //    two K slices), not where it takes 128 (N = 11008 / 14336 at K = 4096: the n128 width's
  //    single-partial promotion and 5-stage ring lose to the tiled kernel).
  static constexpr int64_t kMinAutoElems = int64_t(1) << 24;
  static constexpr bool planner_takes(int64_t m, int64_t n, int64_t k, int num_sms) {
    if (m <= GemvPolicy::kMaxRows) return n * k >= kMinAutoElems;
    return m <= 64 || (m <= kMaxRows && rows_for(n, k, num_sms) == kNarrowBM);
  }
};
static_assert(GemvTmaTiles<16>::kStages == 12 && GemvTmaTiles<32>::kStages == 10 && GemvTmaTiles<64>::kStages == 8 &&
                  GemvTmaTiles<128>::kStages == 5 && GemvTmaTiles<16, 64>::kStages == 16 &&
                  GemvTmaTiles<32, 64>::kStages == 16 && GemvTmaTiles<64, 64>::kStages == 13 &&
                  GemvTmaTiles<128, 64>::kStages == 8,
              "the stage counts documented above");
static_assert(GemvTmaTiles<128>::kAccum == GemvTmaPolicy::accum_for(128) &&
                  GemvTmaTiles<64>::kAccum == GemvTmaPolicy::accum_for(64) &&
                  GemvTmaTiles<16>::kAccum == GemvTmaPolicy::accum_for(16) &&
                  GemvTmaTiles<128, 64>::kAccum == GemvTmaPolicy::accum_for(128, 64) &&
                  GemvTmaTiles<16, 64>::kAccum == GemvTmaPolicy::accum_for(16, 64),
              "accum_for names the kernels' modes");

// kGemv: M <= GemvPolicy::kMaxRows (gemv.cuh: mma.sync m16n8k32), sm_89 and newer.
// kGemvTma: M <= GemvTmaPolicy::kMaxRows (gemv_tma.cuh, widths 16 / 32 / 64 / 128), sm_90a; the
// planner's choice where GemvTmaPolicy::planner_takes says.
enum class Path : int { kWgmma = 0, kMmaSync = 1, kGemv = 2, kGemvTma = 3 };

inline const char* path_name(Path p) {
  switch (p) {
    case Path::kWgmma: return "wgmma";
    case Path::kMmaSync: return "mma_sync";
    case Path::kGemv: return "gemv";
    case Path::kGemvTma: return "gemv_tma";
  }
  return "?";
}

}  // namespace kernels::fp8::gemm
