// FP8 GEMM umbrella: the two kernels composed from gemm/{policy, load, scheduler, mainloop,
// epilogue} and the launcher; the host planner is gemm/plan.cuh. No torch here.
//
//   D[M, N] (bf16) = A[M, K] (fp8, K-major) @ B[N, K]^T (fp8, K-major)
//                    * scale_a * scale_b [* row_scale[m]] [* col_scale[n]] [+ bias[n]]
//
// sm_90a kernel (Path::kWgmma), 3 warpgroups:
//   warpgroup 0  producer: drops to 40 registers (setmaxnreg), one thread issues TMA loads
//   warpgroups 1-2 consumers: raise to 232 registers, 64 rows each, WGMMA m64nBNk32, epilogue;
//   the accumulation mode (AccumMode, policy.cuh) promotes partial sums into fp32 registers
//   (BN <= 192; per k-block or per 2 k-blocks, either of them with the next tile's first k-block
//   issued before the stores, or ping-ponged between two partials at BN <= 128) or keeps the
//   WGMMA accumulator only (kFast, cuBLAS "fast accumulation"; the only mode at BN = 256).
//   The plan's store (StoreMode) picks the epilogue: checked pairs, unchecked interior pairs or
//   16-byte rows (Epilogue::store_wgmma_fragment), or TMA stores from shared memory
//   (TmaStoreEpilogue, kernels built with Sm90Policy::kTmaStore; the whole block staged at
//   once, or 64 columns at a time with kChunkedStaging).
// A block loops over tiles from the scheduler: grid = tiles (one each) or = SM count
// (persistent: the producer streams the next tile while the consumers store this one).
// Split-K (GemmPlan::split_k > 1, for problems whose tiles leave SMs idle): a work unit is
// (tile, split); split s accumulates k-blocks [s * kb / S, (s + 1) * kb / S) as above and
// stores its fp32 partial (times scale_a * scale_b) to a workspace (SplitKPartials, size from
// gemm_workspace_bytes); splitk_reduce_kernel then sums the splits in order and applies the
// epilogue. Deterministic, no atomics, no host synchronisation (CUDA-graph safe).
// Optional clusters of 2 or 2 x 2 blocks (ClusterMode) multicast the operand tiles they share.
// What the planner picks when a request leaves it open: PlannerDefaults (gemm/plan.cuh).
// sm_89 kernel (Path::kMmaSync): 8 warps, cp.async double buffer, mma.sync m16n8k32.
// GEMV kernel (Path::kGemv, M <= 16, the planner's choice there below 16 Mi values of B or off
// sm_90a): gemm/gemv.cuh.
// Swap-AB GEMV (Path::kGemvTma, M <= 128 in WGMMA n 16 / 32 / 64 / 128, sm_90a; the planner's
// choice at 16 < M <= 64 and up to 128 on narrow N, GemvTmaPolicy::planner_takes): gemm/gemv_tma.cuh.
//
// Constraints (checked; errors as in common/errors.h): K % 16 == 0; A, B 16-byte aligned with row
// strides that are multiples of 16 bytes; format pairs e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3
// (as cuBLASLt). Tails in M, N, K: TMA / cp.async zero-fill, predicated stores.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/launch.cuh"
#include "../common/mbarrier.cuh"
#include "../common/sm90.cuh"
#include "../common/smem.cuh"
#include "../common/tma.cuh"
#include "common.h"
#include "gemm/epilogue.cuh"
#include "gemm/gemv.cuh"
#include "gemm/gemv_tma.cuh"
#include "gemm/load.cuh"
#include "gemm/mainloop.cuh"
#include "gemm/plan.cuh"
#include "gemm/policy.cuh"
#include "gemm/scheduler.cuh"

namespace kernels::fp8::gemm {

// ---- kernels --------------------------------------------------------------------------------

// Named barrier of consumer warpgroup c's TMA-store epilogue: kStoreBarrier0 + c (0 is __syncthreads).
constexpr int kStoreBarrier0 = 1;

template <class Policy, Format FA, Format FB>
__global__ void __launch_bounds__(Policy::kThreads, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     const __grid_constant__ CUtensorMap map_d, const GemmParams p, const TileScheduler sched,
                     const int promote_every, const bool stagger, const StoreMode store, const SplitKPartials split,
                     const BlockScales block_scales) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Mainloop = Sm90Mainloop<Policy, FA, FB>;
  extern __shared__ uint8_t smem_raw[];
  typename Mainloop::Storage storage{
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023))};
  const ClusterRole role = ClusterRole::make(sched.cluster_m, sched.cluster_n);
  if (threadIdx.x == 0) Mainloop::init_barriers(storage, role);
  // partners' multicasts and remote arrivals may target our barriers right after this
  if (role.size > 1) cluster_sync();
  else __syncthreads();

  const int k_blocks = int(ceil_div<int64_t>(p.k, Policy::kBK));
  const int warpgroup = threadIdx.x / 128;
  // all blocks of a cluster walk the same units in the same order, so their rings stay in step
  const int first_unit = blockIdx.x / role.size, unit_stride = gridDim.x / role.size;
  // Work unit w = (scheduler unit w / splits, split w % splits) (scheduler.cuh). Every split
  // has at least one k-block (the planner keeps splits <= k_blocks).
  const int splits = split.splits;
  const int num_work = sched.num_units() * splits;
  const auto k_range = [&](int work, int& tile_unit, int& kb_begin, int& kb_end) {
    tile_unit = work / splits;
    split_k_range(work - tile_unit * splits, splits, k_blocks, kb_begin, kb_end);
  };
  PipelineState st;
  if (warpgroup == 0) {
    // ---- producer
    setmaxnreg_dec<Policy::kProducerRegs>();
    if (threadIdx.x == 0) {
      prefetch_tensor_map(&map_a);
      prefetch_tensor_map(&map_b);
      for (int work = first_unit; work < num_work; work += unit_stride) {
        int unit, kb_begin, kb_end, m_block, n_block;
        k_range(work, unit, kb_begin, kb_end);
        sched.tile_coord(unit, role.rank, m_block, n_block);
        // a tile past the matrix (odd tile count in a cluster dimension) loads the last real
        // tile's rows instead: its partners still need its multicast halves and arrivals
        m_block = min(m_block, sched.tiles_m - 1);
        n_block = min(n_block, sched.tiles_n - 1);
        Mainloop::produce_tile(storage, &map_a, &map_b, m_block, n_block, kb_begin, kb_end, st, role);
      }
    }
  } else {
    // ---- consumers
    setmaxnreg_inc<Policy::kConsumerRegs>();
    const int consumer = warpgroup - 1;
    const Epilogue epi = Epilogue::make(p);
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    // WGMMA m64nN fragment: row 16 * warp + lane / 4 (+8), col 8j + 2 (lane % 4)
    const auto store_tile = [&](int work, int m_block, int n_block, const float (&acc)[Policy::kAccRegs]) {
      const int64_t row = int64_t(m_block) * Policy::kBM + consumer * 64 + warp * 16 + lane / 4;
      const int64_t col0 = int64_t(n_block) * Policy::kBN + 2 * (lane % 4);
      if (splits > 1) {
        split.store_wgmma_fragment<Policy::kBN>(work % splits, row, col0, acc, Policy::kPromote ? 1.f : epi.alpha);
      } else {
        if constexpr (Policy::kTmaStore) {
          if (store == StoreMode::kTma) {  // the launcher checked D for it
            TmaStoreEpilogue<Policy::kBN, Policy::kStagingBuffers>::store(
                &map_d, storage.staging(consumer), kStoreBarrier0 + consumer, m_block * Policy::kBM + consumer * 64,
                n_block * Policy::kBN, acc, Policy::kPromote ? 1.f : epi.alpha);
            return;
          }
        }
        constexpr bool kRows16 = Policy::kAccum == AccumMode::kPromote || Policy::kAccum == AccumMode::kFast ||
                                 Policy::kAccum == AccumMode::kBlockScaled;
        epi.store_wgmma_fragment<Policy::kBN, Policy::kPromote, kRows16>(row, col0, acc, store);
      }
    };
    if constexpr (Policy::kAccum == AccumMode::kPromoteOverlap) {
      // The next tile's first k-block goes out before this tile's stores. The store is written
      // out on both sides of "is there a next tile" so that no path joins with partial in
      // flight on one side only (ptxas would wait for it there: C7517, and nothing overlaps).
      float acc[Policy::kAccRegs], partial[Policy::kAccRegs];
      int work = first_unit;
      if (work < num_work) {
        int first_stage = Mainloop::begin_tile(storage, consumer, partial, st);
        for (;;) {
          int unit, kb_begin, kb_end, m_block, n_block;
          k_range(work, unit, kb_begin, kb_end);
          sched.tile_coord(unit, role.rank, m_block, n_block);
          Mainloop::finish_tile(storage, consumer, kb_end - kb_begin, first_stage, acc, partial, st, role,
                                promote_every, epi.alpha);
          const bool in_range = sched.tile_in_range(m_block, n_block);
          const int done = work;
          work += unit_stride;
          if (work < num_work) {
            first_stage = Mainloop::begin_tile(storage, consumer, partial, st);
            if (in_range) store_tile(done, m_block, n_block, acc);
          } else {
            if (in_range) store_tile(done, m_block, n_block, acc);
            break;
          }
        }
      }
    } else {
      for (int work = first_unit; work < num_work; work += unit_stride) {
        int unit, kb_begin, kb_end, m_block, n_block;
        k_range(work, unit, kb_begin, kb_end);
        sched.tile_coord(unit, role.rank, m_block, n_block);
        float acc[Policy::kAccRegs];
#pragma unroll
        for (int i = 0; i < Policy::kAccRegs; ++i) acc[i] = 0.f;
        BlockScaleCursor blocks;
        if constexpr (Policy::kAccum == AccumMode::kBlockScaled) {
          // rows past M and a cluster's phantom tiles read the last row's / block's factors (not stored)
          const int64_t row = int64_t(m_block) * Policy::kBM + consumer * 64 + warp * 16 + lane / 4;
          const int64_t first = int64_t(kb_begin) * p.m;
          blocks.a0 = block_scales.a + first + min(row, p.m - 1);
          blocks.a1 = block_scales.a + first + min(row + 8, p.m - 1);
          blocks.a_stride = p.m;
          blocks.b = block_scales.b + int64_t(min(n_block, sched.tiles_n - 1)) * k_blocks + kb_begin;
        }
        Mainloop::consume_tile(storage, consumer, kb_end - kb_begin, acc, st, role, promote_every, stagger, epi.alpha,
                               blocks);
        if (sched.tile_in_range(m_block, n_block)) store_tile(work, m_block, n_block, acc);
      }
    }
    if constexpr (Policy::kTmaStore) TmaStoreEpilogue<Policy::kBN, Policy::kStagingBuffers>::drain();
  }
  // no block of a cluster may exit while a partner can still arrive on its barriers
  if (role.size > 1) cluster_sync();
#endif
}

template <Format FA, Format FB>
__global__ void __launch_bounds__(Sm89Policy::kThreads)
    gemm_sm89_kernel(const GemmParams p, const TileScheduler sched) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  using P = Sm89Policy;
  using Mainloop = Sm89Mainloop<FA, FB>;
  __shared__ __align__(16) typename Mainloop::Storage storage;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = warp / P::kWarpsN, warp_n = warp % P::kWarpsN;
  const int k_blocks = int(ceil_div<int64_t>(p.k, P::kBK));
  const Epilogue epi = Epilogue::make(p);

  for (int tile = blockIdx.x; tile < sched.num_units(); tile += gridDim.x) {
    int m_block, n_block;
    sched.tile_coord(tile, 0, m_block, n_block);
    const int64_t m0 = int64_t(m_block) * P::kBM, n0 = int64_t(n_block) * P::kBN;
    float acc[Mainloop::kMTiles][Mainloop::kNTiles][4] = {};

    if (k_blocks > 0) Mainloop::load_stage(storage, 0, p, m0, n0, 0);
    for (int kb = 0; kb < k_blocks; ++kb) {
      if (kb + 1 < k_blocks) {
        Mainloop::load_stage(storage, (kb + 1) % P::kStages, p, m0, n0, int64_t(kb + 1) * P::kBK);
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      Mainloop::mma_stage(storage, kb % P::kStages, warp_m, warp_n, acc);
      __syncthreads();  // the next iteration's load overwrites this stage
    }

    // ---- epilogue: m16n8 fragment: row group (+8), col 2 * quad
    const int group = lane / 4, quad = lane % 4;
#pragma unroll
    for (int mi = 0; mi < Mainloop::kMTiles; ++mi)
#pragma unroll
      for (int ni = 0; ni < Mainloop::kNTiles; ++ni) {
        const int64_t row = m0 + warp_m * P::kWarpM + mi * 16 + group;
        const int64_t col = n0 + warp_n * P::kWarpN + ni * 8 + 2 * quad;
        epi.store_pair(row, col, acc[mi][ni][0], acc[mi][ni][1]);
        epi.store_pair(row + 8, col, acc[mi][ni][2], acc[mi][ni][3]);
      }
  }
#endif
}

// ---- host: checks and launch ----------------------------------------------------------------

// Co-resident clusters of `size` blocks of this kernel on the current device (cached per
// kernel, size and device); a persistent cluster grid larger than that would leave clusters
// for a second wave. 0 when the query fails (the caller keeps its grid).
template <class Policy, Format FA, Format FB>
int max_active_clusters(int size) {
  static int cached[64][2] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 0;
  int& slot = cached[device][size == 4 ? 1 : 0];
  if (slot == 0)
    slot = query_max_active_clusters(gemm_sm90_kernel<Policy, FA, FB>, size, Policy::kThreads, Policy::kSmemBytes);
  return slot;
}

// The split-K reduction after the GEMM kernel, on the same stream.
inline void launch_splitk_reduce(const GemmParams& p, const SplitKPartials& split, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t quads = split.m * ((split.n + 3) / 4);
  const int64_t blocks = ceil_div<int64_t>(quads, kThreads);
  splitk_reduce_kernel<kThreads><<<int(blocks < 16384 ? blocks : 16384), kThreads, 0, stream>>>(p, split);
  check_launch("fp8 splitk_reduce_kernel");
}

// The TMA-store epilogue takes plain epilogues (no row / column scale, no bias) on a D whose rows
// are 16-byte aligned (the tensor map's stride); other calls store as StoreMode::kRows16.
inline bool tma_store_applies(const GemmParams& p) {
  return p.row_scale == nullptr && p.col_scale == nullptr && p.bias == nullptr && p.ldd % 8 == 0 &&
         reinterpret_cast<uintptr_t>(p.d) % 16 == 0;
}

template <int kBlockN, AccumMode kAccum, Format FA, Format FB, bool kTmaStore = false, bool kChunkedStaging = false>
void launch_sm90(const GemmParams& p, const GemmPlan& plan, float* workspace, cudaStream_t stream,
                 const BlockScales& blocks = {}) {
  using Policy = Sm90Policy<kBlockN, kAccum, kTmaStore, kChunkedStaging>;
  TileScheduler sched;
  sched.tiles_m = int(ceil_div<int64_t>(p.m, Policy::kBM));
  sched.tiles_n = int(ceil_div<int64_t>(p.n, Policy::kBN));
  sched.group_m = plan.group_m;
  sched.cluster_m = cluster_m_of(plan.cluster);
  sched.cluster_n = cluster_n_of(plan.cluster);
  // a shared operand is loaded in halves, one per block sharing it
  CUtensorMap map_a, map_b;
  make_kmajor_map(&map_a, p.a, p.m, p.k, p.lda, Policy::kBM / sched.cluster_n, Policy::kBK);
  make_kmajor_map(&map_b, p.b, p.n, p.k, p.ldb, Policy::kBN / sched.cluster_m, Policy::kBK);
  auto kernel = gemm_sm90_kernel<Policy, FA, FB>;
  static SmemOptIn opt_in;
  opt_in.ensure(kernel, Policy::kSmemBytes);
  const int promote_every = plan.promote_every;
  const bool stagger = plan.stagger;
  StoreMode store = StoreMode(plan.store);
  CUtensorMap map_d{};  // read only by the TMA-store epilogue
  if (store == StoreMode::kTma || store == StoreMode::kTmaChunked) {
    if (kTmaStore && plan.split_k == 1 && tma_store_applies(p)) {
      make_output_map(&map_d, p.d, p.m, p.n, p.ldd, 64, TmaStoreEpilogue<kBlockN>::kPanelCols);
      store = StoreMode::kTma;  // to the kernel: "TMA stores", staged as its policy says
    } else {
      store = StoreMode::kRows16;
    }
  }
  SplitKPartials split;
  split.splits = plan.split_k;
  split.partials = workspace;
  split.m = p.m;
  split.n = p.n;
  split.ldw = SplitKPartials::row_stride(p.n);
  const int size = sched.cluster_size();
  if (size == 1) {
    kernel<<<plan.grid, Policy::kThreads, Policy::kSmemBytes, stream>>>(map_a, map_b, map_d, p, sched, promote_every,
                                                                        stagger, store, split, blocks);
    check_launch("fp8 gemm_sm90_kernel");
    if (split.splits > 1) launch_splitk_reduce(p, split, stream);
    return;
  }
  int grid = plan.grid;
  if (plan.persistent) {
    const int clusters = max_active_clusters<Policy, FA, FB>(size);
    if (clusters > 0 && grid > size * clusters) grid = size * clusters;
  }
  launch_in_clusters("fp8 gemm_sm90_kernel (cluster)", kernel, dim3(grid, 1, 1), Policy::kThreads, Policy::kSmemBytes,
                     stream, size, map_a, map_b, map_d, p, sched, promote_every, stagger, store, split, blocks);
  if (split.splits > 1) launch_splitk_reduce(p, split, stream);
}

template <Format FA, Format FB>
void launch_sm89(const GemmParams& p, const GemmPlan& plan, cudaStream_t stream) {
  TileScheduler sched;
  sched.tiles_m = int(ceil_div<int64_t>(p.m, Sm89Policy::kBM));
  sched.tiles_n = int(ceil_div<int64_t>(p.n, Sm89Policy::kBN));
  sched.group_m = plan.group_m;
  gemm_sm89_kernel<FA, FB><<<plan.grid, Sm89Policy::kThreads, 0, stream>>>(p, sched);
  check_launch("fp8 gemm_sm89_kernel");
}

template <Format FA, Format FB>
void launch_formats(const GemmParams& p, const GemmPlan& plan, float* ws, cudaStream_t stream,
                    const BlockScales& blocks) {
  if (plan.path == Path::kMmaSync) return launch_sm89<FA, FB>(p, plan, stream);
  if (plan.path == Path::kGemv)
    return plan.block_n == GemvLongK::kColsPerBlock ? launch_gemv<FA, FB, GemvLongK>(p, stream)
                                                    : launch_gemv<FA, FB>(p, stream);
  // the plan's grid is splits x tiles of block_n B rows (plan_gemm: GemvTmaPolicy::rows_for, splits_for)
  if (plan.path == Path::kGemvTma)
    return launch_gemv_tma_splits<FA, FB>(p, plan.tiles > 0 ? plan.grid / plan.tiles : 1, stream, true, plan.block_n);
  if (plan.accum == AccumMode::kBlockScaled) {  // check_block_scales: e4m3 x e4m3 only
    if constexpr (FA == Format::kE4M3 && FB == Format::kE4M3)
      return launch_sm90<128, AccumMode::kBlockScaled, FA, FB>(p, plan, ws, stream, blocks);
    return;
  }
  // only the pairs plan_supported() admits
  if (plan.store == int(StoreMode::kTmaChunked)) {  // has_tma_chunked_kernel
    switch (plan.block_n) {
      case 256: return launch_sm90<256, AccumMode::kFast, FA, FB, true, true>(p, plan, ws, stream);
      case 192:
        return plan.accum == AccumMode::kPromoteOverlap
                   ? launch_sm90<192, AccumMode::kPromoteOverlap, FA, FB, true, true>(p, plan, ws, stream)
                   : launch_sm90<192, AccumMode::kPromote, FA, FB, true, true>(p, plan, ws, stream);
      case 176:
        return plan.accum == AccumMode::kPromoteOverlap
                   ? launch_sm90<176, AccumMode::kPromoteOverlap, FA, FB, true, true>(p, plan, ws, stream)
                   : launch_sm90<176, AccumMode::kPromote, FA, FB, true, true>(p, plan, ws, stream);
      default: break;
    }
  }
  if (plan.store == int(StoreMode::kTma)) {  // has_tma_store_kernel
    switch (plan.block_n) {
      case 256: return launch_sm90<256, AccumMode::kFast, FA, FB, true>(p, plan, ws, stream);
      case 192:
        return plan.accum == AccumMode::kPromoteOverlap
                   ? launch_sm90<192, AccumMode::kPromoteOverlap, FA, FB, true>(p, plan, ws, stream)
                   : launch_sm90<192, AccumMode::kPromote, FA, FB, true>(p, plan, ws, stream);
      case 176:
        return plan.accum == AccumMode::kPromoteOverlap
                   ? launch_sm90<176, AccumMode::kPromoteOverlap, FA, FB, true>(p, plan, ws, stream)
                   : launch_sm90<176, AccumMode::kPromote, FA, FB, true>(p, plan, ws, stream);
      case 128:
        return plan.accum == AccumMode::kFast
                   ? launch_sm90<128, AccumMode::kFast, FA, FB, true>(p, plan, ws, stream)
                   : launch_sm90<128, AccumMode::kPromote, FA, FB, true>(p, plan, ws, stream);
      default: break;
    }
  }
  switch (plan.block_n) {
    case 256: return launch_sm90<256, AccumMode::kFast, FA, FB>(p, plan, ws, stream);
    case 128:
      switch (plan.accum) {
        case AccumMode::kPromote: return launch_sm90<128, AccumMode::kPromote, FA, FB>(p, plan, ws, stream);
        case AccumMode::kPromotePingPong:
          return launch_sm90<128, AccumMode::kPromotePingPong, FA, FB>(p, plan, ws, stream);
        case AccumMode::kFast: return launch_sm90<128, AccumMode::kFast, FA, FB>(p, plan, ws, stream);
        case AccumMode::kPromoteOverlap:
          return launch_sm90<128, AccumMode::kPromoteOverlap, FA, FB>(p, plan, ws, stream);
        case AccumMode::kBlockScaled: break;  // launched above
      }
      break;
    case 176:
      return plan.accum == AccumMode::kPromoteOverlap
                 ? launch_sm90<176, AccumMode::kPromoteOverlap, FA, FB>(p, plan, ws, stream)
                 : launch_sm90<176, AccumMode::kPromote, FA, FB>(p, plan, ws, stream);
    case 192:
      return plan.accum == AccumMode::kPromoteOverlap
                 ? launch_sm90<192, AccumMode::kPromoteOverlap, FA, FB>(p, plan, ws, stream)
                 : launch_sm90<192, AccumMode::kPromote, FA, FB>(p, plan, ws, stream);
    case 64: return launch_sm90<64, AccumMode::kPromote, FA, FB>(p, plan, ws, stream);
    default: break;
  }
  // launch_gemm checked the plan (check_plan_supported), so a pair that gets here is one
  // has_kernel() admits but the switch above does not instantiate: the two lists disagree.
  throw ValueError(
      concat("fp8 gemm: no kernel instantiated for block_n ", plan.block_n, ", accum ", accum_name(plan.accum)));
}

// Runtime formats -> template instance. The plan must come from plan_gemm for the same device;
// the checks run again here so no caller can skip them. A split-K plan needs
// gemm_workspace_bytes(plan, m, n) bytes of 16-byte aligned device memory in `workspace`, owned
// by the caller and not used by anything else until this GEMM completes on `stream` (no zeroing
// needed). Defined in fp8_launch.cu, the one translation unit that instantiates the planner's
// kernels (the binding and csrc/tests/fp8_test.cu link it).
void launch_gemm(const GemmParams& p, const GemmPlan& plan, int cc_major, int cc_minor, cudaStream_t stream,
                 void* workspace = nullptr, size_t workspace_bytes = 0, const BlockScales& blocks = {});

}  // namespace kernels::fp8::gemm
