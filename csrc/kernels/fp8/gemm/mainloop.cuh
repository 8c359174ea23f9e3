// FP8 GEMM mainloops.
//
// Sm90Mainloop (sm_90a): a multi-stage ring of (A, B) tiles in shared memory, filled by one
// producer thread with TMA and drained by the consumer warpgroups with WGMMA.
//   full[s]  : the producer arms it with the stage's byte count; TMA completes it.
//   empty[s] : one arrival per consumer warpgroup once its WGMMAs reading stage s retired.
// Phases alternate 0/1 each time the ring wraps; the producer starts one phase ahead so its
// first pass over the ring does not wait. Consumers either promote each k-block's partial sum
// into fp32 registers (BN <= 128, see Sm90Policy::kPromote) or, for BN = 256, keep one WGMMA
// group in flight on a single hardware accumulator (fast accumulation).
//
// Sm89Mainloop: cp.async double buffering into padded shared rows, mma.sync m16n8k32.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../common.h"
#include "load.cuh"
#include "policy.cuh"
#include "wgmma.cuh"

namespace fp8::gemm {

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

template <class Policy, Format FA, Format FB>
struct Sm90Mainloop {
  // Shared storage carved from a 1024-aligned base: stages of [A tile | B tile], then barriers.
  struct Storage {
    uint8_t* base;
    __device__ __forceinline__ uint8_t* a(int stage) const { return base + stage * Policy::kStageBytes; }
    __device__ __forceinline__ uint8_t* b(int stage) const {
      return a(stage) + Policy::kStageBytesA;
    }
    __device__ __forceinline__ uint64_t* full(int stage) const {
      return reinterpret_cast<uint64_t*>(base + Policy::kStages * Policy::kStageBytes) + stage;
    }
    __device__ __forceinline__ uint64_t* empty(int stage) const { return full(Policy::kStages) + stage; }
  };

  __device__ __forceinline__ static void init_barriers(const Storage& s) {
    for (int stage = 0; stage < Policy::kStages; ++stage) {
      mbarrier_init(s.full(stage), 1);
      mbarrier_init(s.empty(stage), Policy::kConsumers);
    }
    fence_barrier_init();
  }

  // One elected thread: stream the k-blocks of one output tile into the ring.
  __device__ __forceinline__ static void produce_tile(const Storage& s, const CUtensorMap* map_a,
                                                      const CUtensorMap* map_b, int m_block,
                                                      int n_block, int k_blocks, PipelineState& st) {
    for (int kb = 0; kb < k_blocks; ++kb) {
      mbarrier_wait(s.empty(st.stage), st.phase ^ 1u);
      mbarrier_arrive_expect_tx(s.full(st.stage), Policy::kStageBytes);
      // TMA counts the whole box, zero-filled out-of-bounds parts included.
      tma_load_2d(s.a(st.stage), map_a, s.full(st.stage), kb * Policy::kBK, m_block * Policy::kBM);
      tma_load_2d(s.b(st.stage), map_b, s.full(st.stage), kb * Policy::kBK, n_block * Policy::kBN);
      st.template advance<Policy::kStages>();
    }
  }

  // One consumer warpgroup: acc (its 64 rows x kBN) += A_tile @ B_tile^T over all k-blocks.
  __device__ __forceinline__ static void consume_tile(const Storage& s, int consumer, int k_blocks,
                                                      float (&acc)[Policy::kAccRegs], PipelineState& st) {
    if constexpr (Policy::kPromote) {
      consume_tile_promoted(s, consumer, k_blocks, acc, st);
    } else {
      consume_tile_fast(s, consumer, k_blocks, acc, st);
    }
  }

  // The four k32 WGMMAs of one stage into d; the first overwrites d when fresh is true.
  __device__ __forceinline__ static void mma_stage(const Storage& s, int consumer, int stage,
                                                   float (&d)[Policy::kAccRegs], bool fresh) {
    const uint32_t a_addr = smem_addr(s.a(stage)) + consumer * 64 * Policy::kBK;
    const uint32_t b_addr = smem_addr(s.b(stage));
#pragma unroll
    for (int k = 0; k < Policy::kBK / 32; ++k) {
      // d += A[64 rows, k32] @ B[kBN rows, k32]^T; k32 = 32 bytes into each 128-byte row
      wgmma_fp8<Policy::kBN, FA, FB>(d, make_smem_desc_sw128(a_addr + 32 * k),
                                     make_smem_desc_sw128(b_addr + 32 * k), (fresh && k == 0) ? 0 : 1);
    }
  }

  // Promoted: per k-block, partial = A_kb @ B_kb^T (fresh), wait for it, free the stage, then
  // acc += partial in fp32. The wait serialises this warpgroup; the other consumer warpgroup
  // and the producer's prefetch keep the tensor cores fed meanwhile.
  __device__ __forceinline__ static void consume_tile_promoted(const Storage& s, int consumer, int k_blocks,
                                                               float (&acc)[Policy::kAccRegs],
                                                               PipelineState& st) {
    const bool leader = threadIdx.x % 128 == 0;
    float partial[Policy::kAccRegs];  // overwritten by each k-block's first WGMMA (scale-d 0)
#pragma unroll
    for (int i = 0; i < Policy::kAccRegs; ++i) partial[i] = 0.f;
    for (int kb = 0; kb < k_blocks; ++kb) {
      mbarrier_wait(s.full(st.stage), st.phase);
      wgmma_fence();  // partial was last read by the FADDs below
      mma_stage(s, consumer, st.stage, partial, true);
      wgmma_commit();
      wgmma_wait<0>();
      if (leader) mbarrier_arrive(s.empty(st.stage));
#pragma unroll
      for (int i = 0; i < Policy::kAccRegs; ++i) acc[i] += partial[i];
      st.template advance<Policy::kStages>();
    }
  }

  // Fast accumulation: one hardware accumulator across all k-blocks, one WGMMA group in flight
  // (after issuing k-block kb, wait for kb-1 and free its stage).
  __device__ __forceinline__ static void consume_tile_fast(const Storage& s, int consumer, int k_blocks,
                                                           float (&acc)[Policy::kAccRegs], PipelineState& st) {
    const bool leader = threadIdx.x % 128 == 0;
    int previous_stage = -1;
    for (int kb = 0; kb < k_blocks; ++kb) {
      mbarrier_wait(s.full(st.stage), st.phase);
      wgmma_fence();
      mma_stage(s, consumer, st.stage, acc, false);
      wgmma_commit();
      wgmma_wait<1>();
      if (previous_stage >= 0 && leader) mbarrier_arrive(s.empty(previous_stage));
      previous_stage = st.stage;
      st.template advance<Policy::kStages>();
    }
    wgmma_wait<0>();
    if (previous_stage >= 0 && leader) mbarrier_arrive(s.empty(previous_stage));
  }
};

// ---- sm_89: cp.async + mma.sync m16n8k32 -----------------------------------------------------

#define FP8_MMA_M16N8K32(TA, TB)                                                              \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." TA "." TB ".f32 "                     \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"              \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

// c (16 x 8 f32) += a (16 x 32 fp8, row-major fragment) @ b (32 x 8 fp8, column fragment)
template <Format FA, Format FB>
__device__ __forceinline__ void mma_fp8_m16n8k32(float (&c)[4], const uint32_t (&a)[4],
                                                 const uint32_t (&b)[2]) {
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
  __device__ __forceinline__ static void load_stage(Storage& s, int stage, const GemmParams& p,
                                                    int64_t m0, int64_t n0, int64_t k0) {
    constexpr int kChunksPerRow = P::kBK / 16;
    const uint8_t* a = static_cast<const uint8_t*>(p.a);
    const uint8_t* b = static_cast<const uint8_t*>(p.b);
    for (int chunk = threadIdx.x; chunk < P::kBM * kChunksPerRow; chunk += P::kThreads) {
      const int row = chunk / kChunksPerRow, kc = (chunk % kChunksPerRow) * 16;
      const bool valid = m0 + row < p.m && k0 + kc < p.k;
      cp_async_16(&s.a[stage][row][kc], valid ? a + (m0 + row) * p.lda + k0 + kc : a, valid);
    }
    for (int chunk = threadIdx.x; chunk < P::kBN * kChunksPerRow; chunk += P::kThreads) {
      const int row = chunk / kChunksPerRow, kc = (chunk % kChunksPerRow) * 16;
      const bool valid = n0 + row < p.n && k0 + kc < p.k;
      cp_async_16(&s.b[stage][row][kc], valid ? b + (n0 + row) * p.ldb + k0 + kc : b, valid);
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

}  // namespace fp8::gemm
