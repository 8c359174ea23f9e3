// FP8 GEMV / skinny GEMM for M <= 128 on Hopper, swap-AB on WGMMA fed by a deep TMA ring
// (Path::kGemvTma, sm_90a; the planner's choice where GemvTmaPolicy::planner_takes, from the
// H200's comparison with gemv.cuh and the tiled kernel): D[M, N] = A[M, K] @ B[N, K]^T with M <= 128.
//
// Why: on an H200 (Nsight Compute, M = 1, N = K = 11008, e4m3) the mma.sync GEMV of gemv.cuh
// (GemvTiles<1, 8, 4>, 1376 blocks x 256 threads) streams B well below DRAM bandwidth: its B
// loads go from global memory straight into registers, and the warps stall mostly on the long
// scoreboard. cuBLASLt (nvjet_sm90_qqtst_128x8_128x12_4x1_v_bz_algo2_TNT) is faster with 88
// blocks of 384 threads, 225 KB of shared memory and a far lower issue rate: it swaps the
// operands, so that 128 rows of the weight matrix B fill WGMMA's M slot and the activation rows
// (M padded to 8) its N slot, and streams B through a 12-stage ring of 128-byte k-stages with one
// producer and two consumer warpgroups. Bandwidth there comes from the bytes in flight per SM (the
// ring), not from issuing loads (the profiles: docs/production_lab.md, "Measured while choosing
// the planner's defaults").
// Up to M = 128 the same layout serves skinny GEMMs: the tiled WGMMA kernel's 128 x 128 tiles of
// D give N = 4096 only 32 tiles (100 of 132 SMs idle: well behind cuBLASLt at M = 128 under graph
// replay on the H200), and its split-K goes through a workspace and a second kernel; here the
// split-K stays inside a cluster. A's rows take the narrowest WGMMA n of 16, 32, 64 and 128 that
// holds M (GemvTmaTiles<width>, GemvTmaPolicy::width_for), so M = 17 loads and multiplies 32 rows,
// not 128.
//
// A block streams 128 rows of B (the default) or 64 (GemvTmaPolicy::rows_for: where the tiles of
// 128 leave SMs idle even split in pairs, e.g. N = 4096: 32 tiles x 2 blocks). Why not split
// 128-row tiles four ways: a cluster lives in one GPC, and the H200's GPCs hold fewer than 32
// clusters of 4 one-block-per-SM blocks, so 32 tiles x 4 splits would not all run at once and the
// launcher falls back to pairs (64 blocks). cuBLASLt's kernel for M = 16, N = K = 4096 (nvjet
// ..._64x8_128x16_1x2) takes 64 rows of B per block, 128 blocks in pairs, and keeps DRAM busier
// than those 64 blocks of 128 rows (Nsight Compute: docs/production_lab.md, "Decode-sized GEMMs").
//
// The kernel takes cuBLASLt's layout, for every width:
//   warpgroup 0     one elected thread issues the TMA loads: per 128-deep k-block a box of the
//                   block's rows of B (8 or 16 KiB) and one of A's kBN rows (kBN x 128 B; rows >= M
//                   lie outside the tensor map, TMA zero-fills them), both 128B-swizzled, into a
//                   ring of kStages stages (what 227 KiB holds beside the fp32 totals, up to 16:
//                   policy.cuh).
//   warpgroups 1-2  64 rows of B each: wgmma m64nXk32 .f32.<FB>.<FA> with X = kBN (B's tile is
//                   WGMMA's A operand, A's tile its B operand, both K-major from shared memory),
//                   four per k-block, each k-block into a fresh partial accumulator that is added
//                   into fp32 registers (FP8 WGMMA accumulates with reduced precision). Two
//                   partials ping-pong, so k-block kb + 1 is issued before kb is waited for, except
//                   at kBN 128 with two consumers: three sets of 64 accumulators would spill (384
//                   threads, no setmaxnreg: 168 registers), so it promotes one partial per k-block
//                   (kPromote). One consumer (64 rows: 256 threads) has the registers for them.
// The ring and the consumers' loop are Sm90Mainloop's (mainloop.cuh) instantiated with the
// operands swapped (GemvTmaTiles names B's tile "A").
//
// Split-K when the N / kBM tiles leave SMs idle: grid (splits, tiles), clusters of `splits` blocks
// along x (GemvTmaPolicy::splits_for: a power of two up to 8 with splits x tiles <= SMs), each
// block a contiguous range of k-blocks (split_k_range). Every block writes its fp32 totals to
// its own shared buffer ([m][n], transposed from the fragment: rows of the fragment are n,
// columns m; n swizzled by m against bank conflicts); after a cluster barrier each block takes
// 1 / splits of the outputs, reads every block's totals for them through distributed shared
// memory (its own locally) and adds them in rank order (deterministic, and the same sum
// whichever block adds), then runs the epilogue on them; a second cluster barrier keeps every
// block alive until the others have read. No workspace, no second kernel.
// The epilogue (scales, row / column scales, bias, bf16, M / N predication) is the GEMM's,
// one bf16 pair along n per thread and step, coalesced along n.
// K % 16 == 0 and 16-byte aligned rows, as for the GEMM; K tails are zero-filled by TMA.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../../common/launch.cuh"
#include "../../common/mbarrier.cuh"
#include "../../common/sm90.cuh"
#include "../../common/smem.cuh"
#include "../../common/tma.cuh"
#include "../common.h"
#include "epilogue.cuh"
#include "load.cuh"
#include "mainloop.cuh"
#include "policy.cuh"
#include "scheduler.cuh"

namespace kernels::fp8::gemm {

// map_b: B [N, K] in boxes of kBM rows x kBK bytes; map_a: A [M, K] in boxes of kBN rows x kBK.
// Block (x, y): split x (its cluster rank) of n-tile y. P: GemvTmaTiles<16 / 32 / 64 / 128>.
template <Format FA, Format FB, class P>
__global__ void __launch_bounds__(P::kThreads, 1)
    gemv_tma_kernel(const __grid_constant__ CUtensorMap map_b, const __grid_constant__ CUtensorMap map_a,
                    const GemmParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  // The GEMM's ring with the operands swapped: its "A" tiles are B's rows, its "B" tiles A's,
  // so its WGMMAs are .f32.<FB>.<FA>.
  using Mainloop = Sm90Mainloop<P, FB, FA>;
  extern __shared__ uint8_t smem_raw[];
  // 1024-aligned by an offset from smem_raw (not through an integer), so the compiler still knows
  // the totals below are shared memory (STS / LDS rather than generic stores and loads)
  uint8_t* const base = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  const typename Mainloop::Storage storage{base};
  float* const totals = reinterpret_cast<float*>(base + P::kStages * P::kStageBytes + P::kBarrierBytes);
  const int splits = int(gridDim.x);
  const uint32_t rank = splits > 1 ? cluster_ctarank() : 0u;
  const int n_tile = int(blockIdx.y);
  int kb_begin = 0, kb_end = 0;
  split_k_range(int(rank), splits, int(ceil_div<int64_t>(p.k, P::kBK)), kb_begin, kb_end);
  // The ring is this block's alone (no multicast): its stages are freed by local arrivals.
  const ClusterRole ring{};
  // A kernel launched programmatically behind this one (the next GEMM of a decode step) may be
  // scheduled now: it cannot share an SM with a block of this one (shared memory), so it takes
  // the SMs as they free up, and waits for this grid before it reads anything. (A no-op where
  // nothing follows programmatically.)
  dependents_may_launch();
  if (threadIdx.x == 0) {
    Mainloop::init_barriers(storage, ring);
    prefetch_tensor_map(&map_b);  // the maps are kernel parameters, not the previous kernel's output
    prefetch_tensor_map(&map_a);
  }
  __syncthreads();
  // Launched programmatically (launch_gemv_tma_tiles, split grids): the kernel before it may still
  // be writing A, B, the scales or the bias, or reading D. Nothing global is touched before it has
  // finished. (Returns at once in a plain launch.)
  wait_for_prerequisites();

  const int warpgroup = int(threadIdx.x) / 128;
  if (warpgroup == 0) {
    // ---- producer: one thread; the rest of the warpgroup waits at the barriers below
    if (threadIdx.x == 0) {
      PipelineState st;
      Mainloop::produce_tile(storage, &map_b, &map_a, n_tile, 0, kb_begin, kb_end, st, ring);
    }
  } else {
    // ---- consumers: 64 rows of B (output columns) each
    const int consumer = warpgroup - 1;
    float acc[P::kAccRegs];
#pragma unroll
    for (int i = 0; i < P::kAccRegs; ++i) acc[i] = 0.f;
    PipelineState st;
    // scale 1: alpha is the epilogue's (store_pair), after the cluster's sum; one k-block per
    // promotion in either mode (P::kAccum)
    Mainloop::consume_tile(storage, consumer, kb_end - kb_begin, acc, st, ring, 1, false, 1.f);
    // m64nX fragment: acc[4j + 2h + e] is (row 16 warp + lane / 4 + 8h, column 8j + 2 (lane % 4) + e),
    // row = n (B's row in the tile), column = m (A's row): totals[m][n] (P::totals_index).
    const int warp = (int(threadIdx.x) % 128) / 32, lane = int(threadIdx.x) % 32;
    const int n = consumer * 64 + warp * 16 + lane / 4, m = 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < P::kBN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        totals[P::totals_index(8 * j + m, n + 8 * h)] = acc[4 * j + 2 * h];
        totals[P::totals_index(8 * j + m + 1, n + 8 * h)] = acc[4 * j + 2 * h + 1];
      }
  }
  // Every block's totals are written and, in a cluster, visible to the whole cluster.
  if (splits > 1) cluster_sync();
  else __syncthreads();

  // The cluster's sum and the epilogue, shared out: block `rank` takes the rank-th of `splits`
  // contiguous ranges of the (m, column pair) items and sums each item over all the blocks'
  // totals in rank order (the same sum, whichever block runs it, every run).
  {
    const Epilogue epi = Epilogue::make(p);
    constexpr int kPairs = P::kBM / 2;
    const int rows = p.m < P::kBN ? int(p.m) : P::kBN;
    const int items = rows * kPairs;
    const int begin = int(uint32_t(rank) * uint32_t(items) / uint32_t(splits));
    const int end = int((uint32_t(rank) + 1u) * uint32_t(items) / uint32_t(splits));
    const int64_t n0 = int64_t(n_tile) * P::kBM;
    for (int i = begin + int(threadIdx.x); i < end; i += P::kThreads) {
      const int m = i / kPairs, n = 2 * (i % kPairs);
      const float* own = totals + P::totals_index(m, n);
      float2 sum;
      if (splits == 1) {
        sum = *reinterpret_cast<const float2*>(own);
      } else {
        // every block's pair first (the loads in flight together), then the adds in rank order
        float2 v[GemvTmaPolicy::kMaxSplits];
#pragma unroll
        for (int r = 0; r < GemvTmaPolicy::kMaxSplits; ++r)
          if (r < splits)
            v[r] = uint32_t(r) == rank ? *reinterpret_cast<const float2*>(own)
                                       : ld_shared_cluster_f32x2(cluster_map_shared(smem_addr(own), uint32_t(r)));
        sum = v[0];
#pragma unroll
        for (int r = 1; r < GemvTmaPolicy::kMaxSplits; ++r)
          if (r < splits) {
            sum.x += v[r].x;
            sum.y += v[r].y;
          }
      }
      epi.store_pair(m, n0 + n, sum.x, sum.y);
    }
  }
  // Every block has read the others' totals: they may exit now.
  if (splits > 1) cluster_sync();
#endif
}

// Co-resident clusters of `splits` blocks of this kernel on the current device (cached per
// device and size); 0 when the query fails.
template <Format FA, Format FB, class P>
int gemv_tma_max_active_clusters(int splits) {
  static int cached[64][4] = {};  // splits 1, 2, 4, 8
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return 0;
  const int slot_index = splits >= 8 ? 3 : splits >= 4 ? 2 : splits >= 2 ? 1 : 0;
  int& slot = cached[device][slot_index];
  if (slot == 0) slot = query_max_active_clusters(gemv_tma_kernel<FA, FB, P>, splits, P::kThreads, P::kSmemBytes);
  return slot;
}

// The kernel's dynamic shared memory opt-in (once per device).
template <Format FA, Format FB, class P>
void gemv_tma_opt_in() {
  static SmemOptIn opt_in;
  opt_in.ensure(gemv_tma_kernel<FA, FB, P>, P::kSmemBytes);
}

// Calls f.template operator()<GemvTmaTiles<w, kRows>>() for the width w = GemvTmaPolicy::width_for(m)
// (M <= GemvTmaPolicy::kMaxRows; checked by the launcher).
template <int kRows, class F>
decltype(auto) with_gemv_tma_width(int64_t m, F&& f) {
  switch (GemvTmaPolicy::width_for(m)) {
    case 16: return f.template operator()<GemvTmaTiles<16, kRows>>();
    case 32: return f.template operator()<GemvTmaTiles<32, kRows>>();
    case 64: return f.template operator()<GemvTmaTiles<64, kRows>>();
    default: return f.template operator()<GemvTmaTiles<128, kRows>>();
  }
}

// As above with rows = 64 or 128 B rows per block (GemvTmaPolicy::kNarrowBM or kBM).
template <class F>
decltype(auto) with_gemv_tma_tiles(int64_t m, int rows, F&& f) {
  if (rows == GemvTmaPolicy::kNarrowBM) return with_gemv_tma_width<GemvTmaPolicy::kNarrowBM>(m, f);
  return with_gemv_tma_width<GemvTmaPolicy::kBM>(m, f);
}

// The split count a launch of N columns with `splits` requested runs: halved while the device
// cannot hold all the tiles' clusters at once (cudaOccupancyMaxActiveClusters: a GPC holds
// whole clusters only, so 132 SMs may take fewer than 33 clusters of 4, and a second wave of
// clusters would cost more than the split saves).
template <Format FA, Format FB, class P>
int gemv_tma_fit_splits_of(int64_t n, int splits) {
  gemv_tma_opt_in<FA, FB, P>();  // the occupancy query needs the kernel's shared memory allowed
  const int64_t tiles = ceil_div<int64_t>(n, P::kBM);
  while (splits > 1) {
    const int clusters = gemv_tma_max_active_clusters<FA, FB, P>(splits);
    if (clusters == 0 || tiles <= clusters) break;
    splits /= 2;
  }
  return splits;
}

// As above for the kernel that M rows run in blocks of `rows` B rows (its width, GemvTmaPolicy::width_for).
template <Format FA, Format FB>
int gemv_tma_fit_splits(int64_t m, int64_t n, int splits, int rows = GemvTmaPolicy::kBM) {
  return with_gemv_tma_tiles(m, rows, [&]<class P>() { return gemv_tma_fit_splits_of<FA, FB, P>(n, splits); });
}

// One launch of the width-P kernel with `splits` (1, 2, 4 or 8) blocks per n-tile: with
// fit_clusters as many as gemv_tma_fit_splits allows, without it exactly `splits` (timing).
template <Format FA, Format FB, class P>
void launch_gemv_tma_tiles(const GemmParams& p, int splits, cudaStream_t stream, bool fit_clusters) {
  const int64_t tiles = ceil_div<int64_t>(p.n, P::kBM);
  check(tiles <= 65535, "fp8 gemm: N too large for the gemv_tma grid (65535 tiles of 128), got N=", p.n);
  CUtensorMap map_b, map_a;
  make_kmajor_map(&map_b, p.b, p.n, p.k, p.ldb, P::kBM, P::kBK);
  make_kmajor_map(&map_a, p.a, p.m, p.k, p.lda, P::kBN, P::kBK);
  auto kernel = gemv_tma_kernel<FA, FB, P>;
  gemv_tma_opt_in<FA, FB, P>();
  if (fit_clusters) splits = gemv_tma_fit_splits_of<FA, FB, P>(p.n, splits);
  const dim3 grid(unsigned(splits), unsigned(tiles), 1);
  // Split (clusters of `splits` blocks per n-tile): launched programmatically, so its blocks start
  // while the kernel before it finishes, and wait for it (wait_for_prerequisites) before they touch
  // global memory, which shortens split calls under graph replay on the H200. Unsplit grids (fewer
  // blocks than SMs: N = 11008 has 86) launch plainly: launched programmatically they got slower
  // (docs/production_lab.md, "Decode-sized GEMMs").
  launch_ex("fp8 gemv_tma_kernel", kernel, grid, P::kThreads, P::kSmemBytes, stream,
            LaunchOptions{.cluster_size = splits, .programmatic = splits > 1}, map_b, map_a, p);
}

// One launch with `splits` (1, 2, 4 or 8) blocks per n-tile of `rows` (64 or 128) B rows, on the
// narrowest width that holds M (16, 32, 64 or 128 rows); M > GemvTmaPolicy::kMaxRows is refused.
template <Format FA, Format FB>
void launch_gemv_tma_splits(const GemmParams& p, int splits, cudaStream_t stream, bool fit_clusters = true,
                            int rows = GemvTmaPolicy::kBM) {
  check(p.m <= GemvTmaPolicy::kMaxRows, "fp8 gemm: the gemv_tma path takes M <= ", GemvTmaPolicy::kMaxRows,
        " (WGMMA n 16 / 32 / 64 / 128), got M=", p.m);
  check(splits == 1 || splits == 2 || splits == 4 || splits == 8,
        "fp8 gemm: the gemv_tma path splits K over 1, 2, 4 or 8 blocks, got ", splits);
  check(rows == GemvTmaPolicy::kBM || rows == GemvTmaPolicy::kNarrowBM,
        "fp8 gemm: the gemv_tma path takes blocks of 64 or 128 B rows, got ", rows);
  if (p.m == 0 || p.n == 0) return;
  check(p.k > 0, "fp8 gemm: the gemv_tma path needs K > 0 (TMA describes K), got K=", p.k);
  with_gemv_tma_tiles(p.m, rows, [&]<class P>() { launch_gemv_tma_tiles<FA, FB, P>(p, splits, stream, fit_clusters); });
}

// The rows per block and split count from the problem and the SM count (GemvTmaPolicy::rows_for,
// splits_for), then as above.
template <Format FA, Format FB>
void launch_gemv_tma(const GemmParams& p, int num_sms, cudaStream_t stream) {
  const int rows = GemvTmaPolicy::rows_for(p.n, p.k, num_sms);
  launch_gemv_tma_splits<FA, FB>(p, GemvTmaPolicy::splits_for(p.n, p.k, num_sms, rows), stream, true, rows);
}

}  // namespace kernels::fp8::gemm
