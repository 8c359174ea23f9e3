// FP8 GEMM mainloops.
//
// Sm90Mainloop (sm_90a): a multi-stage ring of (A, B) tiles in shared memory, filled by one
// producer thread with TMA and drained by the consumer warpgroups with WGMMA.
//   full[s]  : the producer arms it with the stage's byte count; TMA completes it.
//   empty[s] : one arrival per consumer warpgroup once its WGMMAs reading stage s retired.
// Phases alternate 0/1 each time the ring wraps; the producer starts one phase ahead so its
// first pass over the ring does not wait. Consumers promote partial sums into fp32 registers
// or keep one hardware accumulator (see AccumMode in policy.cuh). With clusters (2 or 2 x 2
// blocks) the shared operands are multicast and empty[s] gathers the consumers of every block
// this block's producer writes into; those remote arrivals are CTA-scope releases
// (mbarrier_arrive_cluster, common/mbarrier.cuh).
//
// Sm89Mainloop: cp.async double buffering into padded shared rows, mma.sync m16n8k32.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../../common/mbarrier.cuh"
#include "../../common/sm90.cuh"
#include "../../common/smem.cuh"
#include "../../common/tma.cuh"
#include "../common.h"
#include "policy.cuh"
#include "wgmma.cuh"

namespace kernels::fp8::gemm {

struct PipelineState {
  int stage = 0;
  uint32_t phase = 0;

  template <int kStages>
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// ---- sm_90a: TMA producer, WGMMA consumers -----------------------------------------------

// Where this block sits in its cluster of cluster_m x cluster_n blocks (each 1 or 2; rank =
// rank_m + cluster_m * rank_n). Blocks with the same rank_m share the A tile (same m_block),
// blocks with the same rank_n share the B tile; each loads its half of a shared tile and
// multicasts it to the blocks sharing it.
struct ClusterRole {
  int size = 1, cluster_m = 1, cluster_n = 1;
  uint32_t rank = 0, rank_m = 0, rank_n = 0;

  __device__ __forceinline__ static ClusterRole make(int cluster_m, int cluster_n) {
    ClusterRole r;
    r.cluster_m = cluster_m;
    r.cluster_n = cluster_n;
    r.size = cluster_m * cluster_n;
    r.rank = r.size > 1 ? cluster_ctarank() : 0;
    r.rank_m = r.rank % cluster_m;
    r.rank_n = r.rank / cluster_m;
    return r;
  }
  __device__ __forceinline__ bool share_a() const { return cluster_n > 1; }
  __device__ __forceinline__ bool share_b() const { return cluster_m > 1; }
  // the blocks that receive this block's A half (same rank_m) and B half (same rank_n)
  __device__ __forceinline__ uint16_t a_mask() const { return uint16_t((1u | (1u << cluster_m)) << rank_m); }
  __device__ __forceinline__ uint16_t b_mask() const { return uint16_t(0x3u << (cluster_m * rank_n)); }
  // Blocks whose producers write into this block's ring: itself, its A partner, its B partner.
  __device__ __forceinline__ int writers() const { return cluster_m + cluster_n - 1; }
  __device__ __forceinline__ uint32_t a_partner() const { return rank_m + cluster_m * (1 - rank_n); }
  __device__ __forceinline__ uint32_t b_partner() const { return (1 - rank_m) + cluster_m * rank_n; }
  // Writer index w in 1 .. writers() - 1 -> that partner's rank (the A partner first if A is shared).
  __device__ __forceinline__ uint32_t partner(int w) const { return w == 1 && share_a() ? a_partner() : b_partner(); }
};

// A consumer thread's block scales for one tile (AccumMode::kBlockScaled), at the tile's first
// k-block: the factors of its two accumulator rows (A; the next k-block's are a_stride floats on)
// and of the tile's 128-column B block (the next k-block's are the next float).
struct BlockScaleCursor {
  const float* a0 = nullptr;
  const float* a1 = nullptr;
  const float* b = nullptr;
  int64_t a_stride = 0;
};

template <class Policy, Format FA, Format FB>
struct Sm90Mainloop {
  static constexpr int kAccRegs = Policy::kAccRegs;

  // Shared storage carved from a 1024-aligned base: stages of [A tile | B tile], the
  // consumers' output staging (Policy::kTmaStore; 1024-aligned), then barriers. The offsets
  // are the same in every block of a cluster, which multicast relies on.
  struct Storage {
    uint8_t* base;
    __device__ __forceinline__ uint8_t* a(int stage) const { return base + stage * Policy::kStageBytes; }
    __device__ __forceinline__ uint8_t* b(int stage) const { return a(stage) + Policy::kStageBytesA; }
    __device__ __forceinline__ uint8_t* staging(int consumer) const {
      return base + Policy::kStages * Policy::kStageBytes + consumer * Policy::kStagingBytesPerConsumer;
    }
    __device__ __forceinline__ uint64_t* full(int stage) const {
      return reinterpret_cast<uint64_t*>(base + Policy::kStages * Policy::kStageBytes + Policy::kStagingBytes) + stage;
    }
    __device__ __forceinline__ uint64_t* empty(int stage) const { return full(Policy::kStages) + stage; }
  };

  // empty[s] collects one arrival per consumer warpgroup of every block this block's producer
  // writes into (itself and its A / B partners): with multicast, stage s may be refilled only
  // once all of its readers are done with it.
  __device__ __forceinline__ static void init_barriers(const Storage& s, const ClusterRole& role) {
    for (int stage = 0; stage < Policy::kStages; ++stage) {
      mbarrier_init(s.full(stage), 1);
      mbarrier_init(s.empty(stage), Policy::kConsumers * role.writers());
    }
    fence_barrier_init();
  }

  // One elected thread: stream k-blocks [kb_begin, kb_end) of one output tile into the ring
  // (all of K, or one split-K slice of it). Every block
  // arms its own full[s] with the whole stage (its own loads plus its partners' multicast
  // halves); a multicast half may land before the arming, which mbarrier transaction counts
  // allow. It cannot land early by a whole phase: its sender first waited for this block's
  // consumers to free the stage (they arrive on the sender's empty[s] too).
  __device__ __forceinline__ static void produce_tile(const Storage& s, const CUtensorMap* map_a,
                                                      const CUtensorMap* map_b, int m_block, int n_block, int kb_begin,
                                                      int kb_end, PipelineState& st, const ClusterRole& role) {
    constexpr int kHalfA = Policy::kBM / 2, kHalfB = Policy::kBN / 2;
    for (int kb = kb_begin; kb < kb_end; ++kb) {
      mbarrier_wait(s.empty(st.stage), st.phase ^ 1u);
      uint64_t* full = s.full(st.stage);
      mbarrier_arrive_expect_tx(full, Policy::kStageBytes);
      const int k = kb * Policy::kBK;
      // TMA counts the whole box, zero-filled out-of-bounds parts included.
      if (role.share_a()) {
        tma_load_2d_multicast(s.a(st.stage) + role.rank_n * kHalfA * Policy::kBK, map_a, full, k,
                              m_block * Policy::kBM + int(role.rank_n) * kHalfA, role.a_mask());
      } else {
        tma_load_2d(s.a(st.stage), map_a, full, k, m_block * Policy::kBM);
      }
      if (role.share_b()) {
        tma_load_2d_multicast(s.b(st.stage) + role.rank_m * kHalfB * Policy::kBK, map_b, full, k,
                              n_block * Policy::kBN + int(role.rank_m) * kHalfB, role.b_mask());
      } else {
        tma_load_2d(s.b(st.stage), map_b, full, k, n_block * Policy::kBN);
      }
      st.template advance<Policy::kStages>();
    }
  }

  // Frees a stage in every block that writes into it (see writers()): lane w < writers() of
  // the warpgroup's first warp arrives on writer w's empty[stage] (w = 0: this block), so the
  // arrivals leave as one warp-wide instruction rather than a serial chain (DeepGEMM's
  // lane_idx < kNumTMAMulticast; CUTLASS uses lanes of warp 0 too for clusters of up to 4).
  // Called by the whole warpgroup after the wgmma.wait_group that retired the stage; every
  // arrival follows that warp's wait, as the single-block arrival does.
  __device__ __forceinline__ static void release(const Storage& s, int stage, const ClusterRole& role) {
    if (threadIdx.x % 128 >= 32) return;
    const int lane = threadIdx.x % 32;
    if (role.size == 1) {
      if (lane == 0) mbarrier_arrive(s.empty(stage));
    } else if (lane < role.writers()) {
      mbarrier_arrive_cluster(s.empty(stage), lane == 0 ? role.rank : role.partner(lane));
    }
  }

  // One consumer warpgroup: acc (its 64 rows x kBN) += A_tile @ B_tile^T over all k-blocks;
  // the promoted modes add scale * partial (acc comes out multiplied by scale), kFast ignores
  // scale (the epilogue applies it); kBlockScaled multiplies each k-block's partial by its
  // block scales (blocks) as well.
  __device__ __forceinline__ static void consume_tile(const Storage& s, int consumer, int k_blocks,
                                                      float (&acc)[kAccRegs], PipelineState& st,
                                                      const ClusterRole& role, int promote_every, bool stagger,
                                                      float scale, const BlockScaleCursor& blocks = {}) {
    if constexpr (Policy::kAccum == AccumMode::kBlockScaled) {
      consume_tile_block_scaled(s, consumer, k_blocks, acc, st, role, blocks, scale);
    } else if constexpr (Policy::kAccum == AccumMode::kPromote) {
      consume_tile_promoted(s, consumer, k_blocks, acc, st, role, promote_every, stagger && consumer == 1, scale);
    } else if constexpr (Policy::kAccum == AccumMode::kPromotePingPong) {
      consume_tile_pingpong(s, consumer, k_blocks, acc, st, role, scale);
    } else {
      consume_tile_fast(s, consumer, k_blocks, acc, st, role);
    }
  }

  // The four k32 WGMMAs of one stage into d; the first overwrites d when fresh is true.
  __device__ __forceinline__ static void mma_stage(const Storage& s, int consumer, int stage, float (&d)[kAccRegs],
                                                   bool fresh) {
    const uint64_t a_desc = make_sw128_kmajor_desc(smem_addr(s.a(stage)) + consumer * 64 * Policy::kBK);
    const uint64_t b_desc = make_sw128_kmajor_desc(smem_addr(s.b(stage)));
#pragma unroll
    for (int k = 0; k < Policy::kBK / 32; ++k) {
      // d += A[64 rows, k32] @ B[kBN rows, k32]^T; k32 = 32 bytes into each 128-byte row
      wgmma_fp8<Policy::kBN, FA, FB>(d, sw128_desc_advance(a_desc, 32 * k), sw128_desc_advance(b_desc, 32 * k),
                                     (fresh && k == 0) ? 0 : 1);
    }
  }

  // Waits for the stage, then issues its WGMMAs into d as one commit group.
  __device__ __forceinline__ static void issue_stage(const Storage& s, int consumer, const PipelineState& st,
                                                     float (&d)[kAccRegs], bool fresh) {
    mbarrier_wait(s.full(st.stage), st.phase);
    wgmma_fence_operand(d);
    wgmma_fence();
    mma_stage(s, consumer, st.stage, d, fresh);
    wgmma_commit();
  }

  // acc += scale * partial: one FFMA per accumulator, so folding the per-tensor scale in here
  // (as DeepGEMM folds its block scales) costs nothing and spares the epilogue its multiply.
  __device__ __forceinline__ static void promote(float (&acc)[kAccRegs], float (&partial)[kAccRegs], float scale) {
    wgmma_fence_operand(partial);
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) acc[i] = fmaf(partial[i], scale, acc[i]);
  }

  // Promoted: per interval of promote_every (1 or 2) k-blocks, partial = sum of the interval's
  // A_kb @ B_kb^T (fresh at its first k-block), one full wait at its end, then acc += partial
  // in fp32; each stage but the last is freed as soon as the next k-block is issued
  // (promote_intervals). The full wait drains this warpgroup's WGMMAs; the other consumer
  // warpgroup and the producer's prefetch keep the tensor cores fed meanwhile (DeepGEMM's
  // schedule). One loop per interval length, so every iteration starts and ends with nothing
  // in flight: a single loop choosing "last k-block of the interval" at run time left ptxas
  // unsure what was in flight at its head, and it inserted a wgmma.wait_group 0 after every
  // k-block (C7517), so interval 2 drained exactly as often as interval 1.
  // lead_single (interval 2 only): this warpgroup's first interval is one k-block, so its
  // drains fall between the other warpgroup's instead of with them (both wait on the same
  // stages and would otherwise drain together, leaving the tensor cores idle meanwhile).
  __device__ __forceinline__ static void consume_tile_promoted(const Storage& s, int consumer, int k_blocks,
                                                               float (&acc)[kAccRegs], PipelineState& st,
                                                               const ClusterRole& role, int promote_every,
                                                               bool lead_single, float scale) {
    float partial[kAccRegs];  // no init: each interval's first WGMMA ignores it (scale-d 0)
    int kb = 0;
    if (promote_every > 1 && lead_single && k_blocks > 0) {
      promote_intervals<1>(s, consumer, 1, kb, acc, partial, st, role, scale);
    }
    if (promote_every >= 2) promote_intervals<2>(s, consumer, k_blocks, kb, acc, partial, st, role, scale);
    promote_intervals<1>(s, consumer, k_blocks, kb, acc, partial, st, role, scale);
  }

  // Whole intervals of kInterval k-blocks from kb while they fit in k_blocks: each k-block's
  // WGMMAs chain into partial; once the next one is issued, wait until only it is in flight
  // and free the previous stage, so the producer refills the ring during the interval instead
  // of after it. The interval ends with nothing in flight and partial promoted into acc.
  template <int kInterval>
  __device__ __forceinline__ static void promote_intervals(const Storage& s, int consumer, int k_blocks, int& kb,
                                                           float (&acc)[kAccRegs], float (&partial)[kAccRegs],
                                                           PipelineState& st, const ClusterRole& role, float scale) {
    for (; kb + kInterval <= k_blocks; kb += kInterval) {
      int previous_stage = st.stage;
      issue_stage(s, consumer, st, partial, true);
      st.template advance<Policy::kStages>();
#pragma unroll
      for (int j = 1; j < kInterval; ++j) {
        const int stage = st.stage;
        issue_stage(s, consumer, st, partial, false);
        st.template advance<Policy::kStages>();
        wgmma_wait<1>();
        release(s, previous_stage, role);
        previous_stage = stage;
      }
      wgmma_wait<0>();
      release(s, previous_stage, role);
      promote(acc, partial, scale);
    }
  }

  // Block-scaled: per k-block a fresh partial, one full wait, then acc += partial * (the row's A
  // factor * the tile's B factor * scale); a thread's accumulator registers 4j, 4j + 1 hold its
  // row, 4j + 2, 4j + 3 the row 8 below (the m64nN fragment). The factors are loaded before the
  // stage's wait and WGMMAs, which hide their latency.
  __device__ __forceinline__ static void consume_tile_block_scaled(const Storage& s, int consumer, int k_blocks,
                                                                   float (&acc)[kAccRegs], PipelineState& st,
                                                                   const ClusterRole& role,
                                                                   const BlockScaleCursor& blocks, float scale) {
    float partial[kAccRegs];  // no init: each k-block's first WGMMA ignores it (scale-d 0)
    for (int kb = 0; kb < k_blocks; ++kb) {
      const float b_factor = __ldg(blocks.b + kb) * scale;
      const float a0 = __ldg(blocks.a0 + kb * blocks.a_stride), a1 = __ldg(blocks.a1 + kb * blocks.a_stride);
      const int stage = st.stage;
      issue_stage(s, consumer, st, partial, true);
      st.template advance<Policy::kStages>();
      wgmma_wait<0>();
      release(s, stage, role);
      wgmma_fence_operand(partial);
      const float f0 = a0 * b_factor, f1 = a1 * b_factor;
#pragma unroll
      for (int i = 0; i < kAccRegs; ++i) acc[i] = fmaf(partial[i], (i & 2) ? f1 : f0, acc[i]);
    }
  }

  // kPromoteOverlap, first half: issue a tile's first k-block into partial (fresh) and return
  // its stage. The kernel calls it before the previous tile's epilogue.
  __device__ __forceinline__ static int begin_tile(const Storage& s, int consumer, float (&partial)[kAccRegs],
                                                   PipelineState& st) {
    const int stage = st.stage;
    issue_stage(s, consumer, st, partial, true);
    st.template advance<Policy::kStages>();
    return stage;
  }

  // kPromoteOverlap, second half: acc = scale * (A_tile @ B_tile^T) for a tile whose first
  // k-block begin_tile() issued from first_stage; the rest as kPromote with its interval
  // (promote_every 1 or 2; the first k-block is promoted alone either way). Returns with
  // nothing in flight.
  __device__ __forceinline__ static void finish_tile(const Storage& s, int consumer, int k_blocks, int first_stage,
                                                     float (&acc)[kAccRegs], float (&partial)[kAccRegs],
                                                     PipelineState& st, const ClusterRole& role, int promote_every,
                                                     float scale) {
    wgmma_wait<0>();
    release(s, first_stage, role);
    wgmma_fence_operand(partial);
#pragma unroll
    for (int i = 0; i < kAccRegs; ++i) acc[i] = partial[i] * scale;
    int kb = 1;
    if (promote_every >= 2) promote_intervals<2>(s, consumer, k_blocks, kb, acc, partial, st, role, scale);
    promote_intervals<1>(s, consumer, k_blocks, kb, acc, partial, st, role, scale);
  }

  // Ping-pong: k-block kb accumulates into partial[kb % 2]. Issue kb + 1 into the other
  // partial, wait until only it is in flight, free kb's stage and promote kb's partial.
  __device__ __forceinline__ static void consume_tile_pingpong(const Storage& s, int consumer, int k_blocks,
                                                               float (&acc)[kAccRegs], PipelineState& st,
                                                               const ClusterRole& role, float scale) {
    // No init: every k-block's first WGMMA ignores its partial (scale-d 0). Zeroing them here
    // made ptxas wait for the tile's first k-block before entering the loop (C7517), one
    // drain per tile.
    float even[kAccRegs], odd[kAccRegs];
    PipelineState in_flight = st;  // the oldest k-block not yet promoted
    const auto retire = [&](float (&partial)[kAccRegs]) {
      release(s, in_flight.stage, role);
      in_flight.template advance<Policy::kStages>();
      promote(acc, partial, scale);
    };
    if (k_blocks == 0) return;
    issue_stage(s, consumer, st, even, true);
    st.template advance<Policy::kStages>();
    // Two k-blocks per iteration keep the partial arrays' indices compile-time constants and
    // the loop body free of branches, so ptxas can track which group each wait retires (it
    // serialises every WGMMA otherwise). Invariant at the top: even(kb) is in flight.
    int kb = 0;
    for (; kb + 2 < k_blocks; kb += 2) {
      issue_stage(s, consumer, st, odd, true);
      st.template advance<Policy::kStages>();
      wgmma_wait<1>();
      retire(even);
      issue_stage(s, consumer, st, even, true);
      st.template advance<Policy::kStages>();
      wgmma_wait<1>();
      retire(odd);
    }
    if (kb + 1 < k_blocks) {
      issue_stage(s, consumer, st, odd, true);
      st.template advance<Policy::kStages>();
      wgmma_wait<1>();
      retire(even);
      wgmma_wait<0>();
      retire(odd);
    } else {
      wgmma_wait<0>();
      retire(even);
    }
  }

  // Fast accumulation: one hardware accumulator across all k-blocks, one WGMMA group in flight
  // (after issuing k-block kb, wait for kb-1 and free its stage).
  __device__ __forceinline__ static void consume_tile_fast(const Storage& s, int consumer, int k_blocks,
                                                           float (&acc)[kAccRegs], PipelineState& st,
                                                           const ClusterRole& role) {
    int previous_stage = -1;
    for (int kb = 0; kb < k_blocks; ++kb) {
      issue_stage(s, consumer, st, acc, false);
      wgmma_wait<1>();
      if (previous_stage >= 0) release(s, previous_stage, role);
      previous_stage = st.stage;
      st.template advance<Policy::kStages>();
    }
    wgmma_wait<0>();
    wgmma_fence_operand(acc);
    if (previous_stage >= 0) release(s, previous_stage, role);
  }
};

// ---- sm_89: cp.async + mma.sync m16n8k32 -----------------------------------------------------

#define FP8_MMA_M16N8K32(TA, TB)                                                 \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." TA "." TB                \
               ".f32 "                                                           \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};" \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                  \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

// c (16 x 8 f32) += a (16 x 32 fp8, row-major fragment) @ b (32 x 8 fp8, column fragment)
template <Format FA, Format FB>
__device__ __forceinline__ void mma_fp8_m16n8k32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (FA == Format::kE4M3 && FB == Format::kE4M3) FP8_MMA_M16N8K32("e4m3", "e4m3");
  else if constexpr (FA == Format::kE4M3 && FB == Format::kE5M2) FP8_MMA_M16N8K32("e4m3", "e5m2");
  else if constexpr (FA == Format::kE5M2 && FB == Format::kE4M3) FP8_MMA_M16N8K32("e5m2", "e4m3");
  else FP8_MMA_M16N8K32("e5m2", "e5m2");
}
#undef FP8_MMA_M16N8K32

template <Format FA, Format FB>
struct Sm89Mainloop {
  using P = Sm89Policy;
  static constexpr int kMTiles = P::kWarpM / 16;  // 4 x m16
  static constexpr int kNTiles = P::kWarpN / 8;   // 4 x n8

  struct Storage {
    uint8_t a[P::kStages][P::kBM][P::kRowBytes];
    uint8_t b[P::kStages][P::kBN][P::kRowBytes];
  };

  // Rows of 64 bytes as 4 x 16-byte chunks; K % 16 == 0 so a chunk is wholly in or out.
  __device__ __forceinline__ static void load_stage(Storage& s, int stage, const GemmParams& p, int64_t m0, int64_t n0,
                                                    int64_t k0) {
    constexpr int kChunksPerRow = P::kBK / 16;
    const uint8_t* a = static_cast<const uint8_t*>(p.a);
    const uint8_t* b = static_cast<const uint8_t*>(p.b);
    for (int chunk = threadIdx.x; chunk < P::kBM * kChunksPerRow; chunk += P::kThreads) {
      const int row = chunk / kChunksPerRow, kc = (chunk % kChunksPerRow) * 16;
      const bool valid = m0 + row < p.m && k0 + kc < p.k;
      const uint8_t* src = valid ? a + (m0 + row) * p.lda + k0 + kc : a;
      cp_async_16(smem_addr(&s.a[stage][row][kc]), src, valid);
    }
    for (int chunk = threadIdx.x; chunk < P::kBN * kChunksPerRow; chunk += P::kThreads) {
      const int row = chunk / kChunksPerRow, kc = (chunk % kChunksPerRow) * 16;
      const bool valid = n0 + row < p.n && k0 + kc < p.k;
      const uint8_t* src = valid ? b + (n0 + row) * p.ldb + k0 + kc : b;
      cp_async_16(smem_addr(&s.b[stage][row][kc]), src, valid);
    }
    cp_async_commit();
  }

  // This warp's 64 x 32 block of the tile, over one stage (two k32 steps).
  __device__ __forceinline__ static void mma_stage(const Storage& s, int stage, int warp_m, int warp_n,
                                                   float (&acc)[kMTiles][kNTiles][4]) {
    const int lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;
#pragma unroll
    for (int ks = 0; ks < P::kBK; ks += 32) {
      uint32_t a_frag[kMTiles][4], b_frag[kNTiles][2];
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi) {
        const int r = warp_m * P::kWarpM + mi * 16 + group;
        a_frag[mi][0] = *reinterpret_cast<const uint32_t*>(&s.a[stage][r][ks + quad * 4]);
        a_frag[mi][1] = *reinterpret_cast<const uint32_t*>(&s.a[stage][r + 8][ks + quad * 4]);
        a_frag[mi][2] = *reinterpret_cast<const uint32_t*>(&s.a[stage][r][ks + 16 + quad * 4]);
        a_frag[mi][3] = *reinterpret_cast<const uint32_t*>(&s.a[stage][r + 8][ks + 16 + quad * 4]);
      }
#pragma unroll
      for (int ni = 0; ni < kNTiles; ++ni) {
        const int r = warp_n * P::kWarpN + ni * 8 + group;
        b_frag[ni][0] = *reinterpret_cast<const uint32_t*>(&s.b[stage][r][ks + quad * 4]);
        b_frag[ni][1] = *reinterpret_cast<const uint32_t*>(&s.b[stage][r][ks + 16 + quad * 4]);
      }
#pragma unroll
      for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNTiles; ++ni) mma_fp8_m16n8k32<FA, FB>(acc[mi][ni], a_frag[mi], b_frag[ni]);
    }
  }
};

}  // namespace kernels::fp8::gemm
