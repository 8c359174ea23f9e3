// FP8 GEMM umbrella: the two kernels composed from gemm/{policy, load, scheduler, mainloop,
// epilogue}, the host planner and the launcher. No torch here.
//
//   D[M, N] (bf16) = A[M, K] (fp8, K-major) @ B[N, K]^T (fp8, K-major)
//                    * scale_a * scale_b [* row_scale[m]] [* col_scale[n]] [+ bias[n]]
//
// sm_90a kernel (Path::kWgmma), 3 warpgroups:
//   warpgroup 0  producer: drops to 40 registers (setmaxnreg), one thread issues TMA loads
//   warpgroups 1-2 consumers: raise to 232 registers, 64 rows each, WGMMA m64nBNk32, epilogue;
//   BN <= 128 promotes each k-block's partial sum to fp32 registers (fp32-accurate like
//   mma.sync), BN = 256 accumulates in the WGMMA accumulator only (cuBLAS "fast accumulation")
// A block loops over tiles from the scheduler: grid = tiles (one each) or = SM count
// (persistent: the producer streams the next tile while the consumers store this one).
// sm_89 kernel (Path::kMmaSync): 8 warps, cp.async double buffer, mma.sync m16n8k32.
//
// Constraints (checked, Status on failure): K % 16 == 0; A, B 16-byte aligned with row
// strides that are multiples of 16 bytes; format pairs e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3
// (as cuBLASLt). Tails in M, N, K: TMA / cp.async zero-fill, predicated stores.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common.h"
#include "gemm/epilogue.cuh"
#include "gemm/load.cuh"
#include "gemm/mainloop.cuh"
#include "gemm/policy.cuh"
#include "gemm/scheduler.cuh"

namespace fp8::gemm {

// ---- kernels --------------------------------------------------------------------------------

template <class Policy, Format FA, Format FB>
__global__ void __launch_bounds__(Policy::kThreads, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     const GemmParams p, const TileScheduler sched) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Mainloop = Sm90Mainloop<Policy, FA, FB>;
  extern __shared__ uint8_t smem_raw[];
  typename Mainloop::Storage storage{reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023))};
  if (threadIdx.x == 0) Mainloop::init_barriers(storage);
  __syncthreads();

  const int k_blocks = int(ceil_div<int64_t>(p.k, Policy::kBK));
  const int warpgroup = threadIdx.x / 128;
  PipelineState st;
  if (warpgroup == 0) {
    // ---- producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Policy::kProducerRegs));
    if (threadIdx.x == 0) {
      prefetch_tensor_map(&map_a);
      prefetch_tensor_map(&map_b);
      for (int tile = blockIdx.x; tile < sched.num_tiles(); tile += gridDim.x) {
        int m_block, n_block;
        sched.tile_coord(tile, m_block, n_block);
        Mainloop::produce_tile(storage, &map_a, &map_b, m_block, n_block, k_blocks, st);
      }
    }
  } else {
    // ---- consumers
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Policy::kConsumerRegs));
    const int consumer = warpgroup - 1;
    const Epilogue epi = Epilogue::make(p);
    const int warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    for (int tile = blockIdx.x; tile < sched.num_tiles(); tile += gridDim.x) {
      int m_block, n_block;
      sched.tile_coord(tile, m_block, n_block);
      float acc[Policy::kAccRegs];
#pragma unroll
      for (int i = 0; i < Policy::kAccRegs; ++i) acc[i] = 0.f;
      Mainloop::consume_tile(storage, consumer, k_blocks, acc, st);

      // ---- epilogue: WGMMA m64nN fragment: row 16 * warp + lane / 4 (+8), col 8j + 2 (lane % 4)
      const int64_t row = int64_t(m_block) * Policy::kBM + consumer * 64 + warp * 16 + lane / 4;
      const int64_t col0 = int64_t(n_block) * Policy::kBN + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < Policy::kBN / 8; ++j) {
        epi.store_pair(row, col0 + 8 * j, acc[4 * j], acc[4 * j + 1]);
        epi.store_pair(row + 8, col0 + 8 * j, acc[4 * j + 2], acc[4 * j + 3]);
      }
    }
  }
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

  for (int tile = blockIdx.x; tile < sched.num_tiles(); tile += gridDim.x) {
    int m_block, n_block;
    sched.tile_coord(tile, m_block, n_block);
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

// ---- host planning --------------------------------------------------------------------------

struct GemmPlan {
  Path path = Path::kWgmma;
  int block_m = 128, block_n = 128;
  int tiles = 0, grid = 0;
  bool persistent = true;
};

struct PlanRequest {
  int force_path = -1;     // -1 auto, else Path
  int force_block_n = 0;   // 0 auto, else 64 / 128 / 256 (WGMMA path)
  int persistent = -1;     // -1 auto, 0 one block per tile, 1 grid = SM count
};

inline int64_t tiles_for(int64_t m, int64_t n, int bm, int bn) { return ceil_div<int64_t>(m, bm) * ceil_div<int64_t>(n, bn); }

// Tile shape from the problem and the SM count: among the promoted tiles BN = 128 / 64,
// maximise (fraction of the last wave that is busy) x (tile arithmetic intensity
// bm*bn/(bm+bn)). Large problems take 128; small M or N take 64 when that occupies more SMs.
// BN = 256 (fast accumulation, no promotion: see Sm90Policy::kPromote) only when forced.
inline GemmPlan plan_gemm(int64_t m, int64_t n, int64_t k, int num_sms, int cc_major, int cc_minor,
                          const PlanRequest& req = {}) {
  (void)k;
  GemmPlan plan;
  const bool hopper = cc_major == 9 && cc_minor == 0;
  plan.path = req.force_path >= 0 ? Path(req.force_path) : (hopper ? Path::kWgmma : Path::kMmaSync);
  if (plan.path == Path::kWgmma) {
    plan.block_m = 128;
    if (req.force_block_n > 0) {
      plan.block_n = req.force_block_n;
    } else {
      double best = -1.0;
      for (int bn : {128, 64}) {
        const int64_t tiles = tiles_for(m, n, plan.block_m, bn);
        const int64_t waves = ceil_div<int64_t>(tiles, num_sms);
        const double wave_fill = double(tiles) / double(waves * num_sms);
        const double intensity = double(plan.block_m) * bn / double(plan.block_m + bn);
        const double score = wave_fill * intensity;
        if (score > best * 1.0001) {
          best = score;
          plan.block_n = bn;
        }
      }
    }
  } else {
    plan.block_m = Sm89Policy::kBM;
    plan.block_n = Sm89Policy::kBN;
  }
  plan.tiles = int(tiles_for(m, n, plan.block_m, plan.block_n));
  plan.persistent = req.persistent >= 0 ? req.persistent == 1 : plan.tiles > num_sms;
  if (plan.path == Path::kMmaSync) {
    // two 256-thread blocks (40 KB shared each) fit an SM comfortably
    plan.grid = plan.persistent ? (plan.tiles < 2 * num_sms ? plan.tiles : 2 * num_sms) : plan.tiles;
  } else {
    plan.grid = plan.persistent ? (plan.tiles < num_sms ? plan.tiles : num_sms) : plan.tiles;
  }
  if (plan.grid < 1) plan.grid = 1;
  return plan;
}

inline Status check_gemm(const GemmParams& p, int cc_major, int cc_minor) {
  if (cc_major * 10 + cc_minor < 89) return Status::kUnsupportedArch;
  if (p.a_format == Format::kE5M2 && p.b_format == Format::kE5M2) return Status::kUnsupportedFormats;
  if (p.k % 16 != 0) return Status::kUnsupportedK;
  const auto aligned16 = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (!aligned16(p.a) || !aligned16(p.b) || p.lda % 16 != 0 || p.ldb % 16 != 0) return Status::kMisaligned;
  return Status::kOk;
}

template <int kBlockN, Format FA, Format FB>
Status launch_sm90(const GemmParams& p, const GemmPlan& plan, cudaStream_t stream) {
  using Policy = Sm90Policy<kBlockN>;
  CUtensorMap map_a, map_b;
  Status s = make_kmajor_map(&map_a, p.a, p.m, p.k, p.lda, Policy::kBM, Policy::kBK);
  if (s != Status::kOk) return s;
  s = make_kmajor_map(&map_b, p.b, p.n, p.k, p.ldb, Policy::kBN, Policy::kBK);
  if (s != Status::kOk) return s;
  auto kernel = gemm_sm90_kernel<Policy, FA, FB>;
  // per device and process; setting it again is cheap and keeps multi-GPU hosts correct
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Policy::kSmemBytes) !=
      cudaSuccess)
    return Status::kLaunchFailed;
  TileScheduler sched;
  sched.tiles_m = int(ceil_div<int64_t>(p.m, Policy::kBM));
  sched.tiles_n = int(ceil_div<int64_t>(p.n, Policy::kBN));
  kernel<<<plan.grid, Policy::kThreads, Policy::kSmemBytes, stream>>>(map_a, map_b, p, sched);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kLaunchFailed;
}

template <Format FA, Format FB>
Status launch_sm89(const GemmParams& p, const GemmPlan& plan, cudaStream_t stream) {
  TileScheduler sched;
  sched.tiles_m = int(ceil_div<int64_t>(p.m, Sm89Policy::kBM));
  sched.tiles_n = int(ceil_div<int64_t>(p.n, Sm89Policy::kBN));
  gemm_sm89_kernel<FA, FB><<<plan.grid, Sm89Policy::kThreads, 0, stream>>>(p, sched);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kLaunchFailed;
}

template <Format FA, Format FB>
Status launch_formats(const GemmParams& p, const GemmPlan& plan, cudaStream_t stream) {
  if (plan.path == Path::kMmaSync) return launch_sm89<FA, FB>(p, plan, stream);
  switch (plan.block_n) {
    case 256: return launch_sm90<256, FA, FB>(p, plan, stream);
    case 128: return launch_sm90<128, FA, FB>(p, plan, stream);
    case 64: return launch_sm90<64, FA, FB>(p, plan, stream);
    default: return Status::kUnsupportedFormats;
  }
}

// Runtime formats -> template instance, in one place. The plan must come from plan_gemm
// for the same device; the checks run again here so no caller can skip them.
inline Status launch_gemm(const GemmParams& p, const GemmPlan& plan, int cc_major, int cc_minor,
                          cudaStream_t stream) {
  const Status s = check_gemm(p, cc_major, cc_minor);
  if (s != Status::kOk) return s;
  if (plan.path == Path::kWgmma && !(cc_major == 9 && cc_minor == 0)) return Status::kUnsupportedArch;
  if (p.m == 0 || p.n == 0) return Status::kOk;
  if (p.k == 0 && plan.path == Path::kWgmma) {
    // no K extent to describe to TMA; the mma.sync kernel writes the epilogue of a zero sum
    GemmPlan fallback = plan_gemm(p.m, p.n, p.k, plan.grid, cc_major, cc_minor, {int(Path::kMmaSync), 0, 0});
    return launch_gemm(p, fallback, cc_major, cc_minor, stream);
  }
  if (p.a_format == Format::kE4M3 && p.b_format == Format::kE4M3)
    return launch_formats<Format::kE4M3, Format::kE4M3>(p, plan, stream);
  if (p.a_format == Format::kE4M3 && p.b_format == Format::kE5M2)
    return launch_formats<Format::kE4M3, Format::kE5M2>(p, plan, stream);
  return launch_formats<Format::kE5M2, Format::kE4M3>(p, plan, stream);
}

}  // namespace fp8::gemm
