// FP8 GEMV for decode-sized M (Path::kGemv): D[M, N] = A[M, K] @ B[N, K]^T with M <= 16, on the
// tensor cores.
//
// At M = 1..16 a GEMM reads B (N * K bytes) once and does 2 M flops per byte: it is bound by
// memory. A 128-row WGMMA tile wastes all but M of its rows and its grid (N / BN tiles) leaves
// most SMs idle; converting fp8 to fp32 and multiplying on the CUDA cores costs about four
// instructions per byte of B, which kept the CUDA-core GEMV this replaces issue-bound below the
// copy bandwidth. Here one mma.sync m16n8k32 covers all M rows (rows past M read row M - 1 and
// are not stored) against 8 rows of B. Hopper has no fp8 mma.sync of its own: ptxas turns one
// into fp8 -> f16 unpacks (F2FP.F16.E4M3.UNPACK_B, two bytes each) and two HMMA.16816, so B
// costs about half an instruction per byte, and A's unpacks are shared by the block's n-tiles
// (SASS of this kernel at kNTiles = 2, kUnroll = 4: 128 F2FP, 32 HMMA, 16 LDG.128 per chunk
// group of 4 x 64 bytes of 16 rows of B per warp).
//
// B goes from global memory straight into the MMA's B fragments, without shared memory: for
// n-tile t, lane (group g, quad q) of a warp loads 16 bytes of B row n0 + 8 t + g at k0 + 16 q,
// and the two k32 steps of a 64-byte chunk take words {0, 1} and {2, 3} of that piece as their
// fragment registers.
// The MMA then reads those bytes as other k indices than they are (its fragment puts word 0 at
// k = 4 q, word 1 at k = 16 + 4 q), but a dot product over k does not depend on the order of the
// k: A's fragments are filled from A's 16-byte pieces at the same offsets, so each pair of
// A and B bytes that the MMA multiplies has the same real k. A block owns kNTiles x 8 columns;
// its kWarps warps take contiguous slices of the K chunks (kUnroll chunks per row in flight) and
// add their accumulators in shared memory; the epilogue (scales, row / column scales, bias,
// bf16) is the GEMM's. K % 16 == 0 and 16-byte aligned rows, as for the GEMM: a 16-byte piece is
// wholly inside K or wholly past it (then zeros).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "../../common/launch.cuh"
#include "../common.h"
#include "epilogue.cuh"
#include "mainloop.cuh"
#include "policy.cuh"

namespace kernels::fp8::gemm {

template <Format FA, Format FB, class P = GemvPolicy>
__global__ void __launch_bounds__(P::kThreads) gemv_kernel(const GemmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  __shared__ float partial[P::kWarps - 1][P::kNTiles][4][32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;
  const int64_t n0 = int64_t(blockIdx.x) * P::kColsPerBlock;
  const auto* a = static_cast<const uint8_t*>(p.a);
  const auto* b = static_cast<const uint8_t*>(p.b);
  // Rows past M and columns past N read row M - 1 / column N - 1 again (in bounds), not stored.
  const auto clamp = [](int64_t i, int64_t last) { return i < last ? i : last; };
  const uint8_t* a_lo = a + clamp(group, p.m - 1) * p.lda + quad * 16;
  const uint8_t* a_hi = a + clamp(group + 8, p.m - 1) * p.lda + quad * 16;
  const uint8_t* b_rows[P::kNTiles];
#pragma unroll
  for (int t = 0; t < P::kNTiles; ++t) b_rows[t] = b + clamp(n0 + 8 * t + group, p.n - 1) * p.ldb + quad * 16;

  // This warp's slice of the 64-byte chunks of K.
  const int64_t chunks = ceil_div<int64_t>(p.k, P::kChunk);
  const int64_t per_warp = ceil_div<int64_t>(chunks, P::kWarps);
  const int64_t first = clamp(warp * per_warp, chunks), last = clamp(first + per_warp, chunks);

  float acc[P::kNTiles][4];
#pragma unroll
  for (int t = 0; t < P::kNTiles; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[t][e] = 0.f;

  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t chunk = first; chunk < last; chunk += P::kUnroll) {
    // Every load of the step first (kUnroll chunks of kNTiles B rows, and A's two rows), then the MMAs.
    uint4 bv[P::kUnroll][P::kNTiles], av_lo[P::kUnroll], av_hi[P::kUnroll];
#pragma unroll
    for (int u = 0; u < P::kUnroll; ++u) {
      const int64_t offset = (chunk + u) * P::kChunk;
      const bool valid = chunk + u < last && offset + quad * 16 < p.k;
#pragma unroll
      for (int t = 0; t < P::kNTiles; ++t) {
        bv[u][t] = valid ? __ldcs(reinterpret_cast<const uint4*>(b_rows[t] + offset)) : zero;  // B: read once
      }
      av_lo[u] = valid ? __ldg(reinterpret_cast<const uint4*>(a_lo + offset)) : zero;  // A: every block, L1 / L2
      av_hi[u] = valid ? __ldg(reinterpret_cast<const uint4*>(a_hi + offset)) : zero;
    }
#pragma unroll
    for (int u = 0; u < P::kUnroll; ++u) {
      // k32 step 0: words 0 and 1 of each piece; step 1: words 2 and 3.
      const uint32_t a_step0[4] = {av_lo[u].x, av_hi[u].x, av_lo[u].y, av_hi[u].y};
      const uint32_t a_step1[4] = {av_lo[u].z, av_hi[u].z, av_lo[u].w, av_hi[u].w};
#pragma unroll
      for (int t = 0; t < P::kNTiles; ++t) {
        const uint32_t b_step0[2] = {bv[u][t].x, bv[u][t].y};
        const uint32_t b_step1[2] = {bv[u][t].z, bv[u][t].w};
        mma_fp8_m16n8k32<FA, FB>(acc[t], a_step0, b_step0);
        mma_fp8_m16n8k32<FA, FB>(acc[t], a_step1, b_step1);
      }
    }
  }

  // The warps' partial sums meet in shared memory; warp 0 adds them and stores.
  if (warp > 0) {
#pragma unroll
    for (int t = 0; t < P::kNTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[warp - 1][t][e][lane] = acc[t][e];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int w = 0; w < P::kWarps - 1; ++w)
#pragma unroll
    for (int t = 0; t < P::kNTiles; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[t][e] += partial[w][t][e][lane];

  // m16n8 accumulator: row group (+8), columns 2 quad and 2 quad + 1.
  const Epilogue epi = Epilogue::make(p);
#pragma unroll
  for (int t = 0; t < P::kNTiles; ++t) {
    const int64_t col = n0 + 8 * t + 2 * quad;
    epi.store_pair(group, col, acc[t][0], acc[t][1]);
    epi.store_pair(group + 8, col, acc[t][2], acc[t][3]);
  }
#endif
}

template <Format FA, Format FB, class P = GemvPolicy>
void launch_gemv(const GemmParams& p, cudaStream_t stream) {
  check(p.m <= P::kMaxRows, "fp8 gemm: the GEMV path takes M <= ", P::kMaxRows, ", got M=", p.m);
  const int64_t blocks = ceil_div<int64_t>(p.n, P::kColsPerBlock);
  check(blocks <= 0x7fffffff, "fp8 gemm: N too large for the GEMV grid, got N=", p.n);
  gemv_kernel<FA, FB, P><<<dim3(static_cast<unsigned>(blocks)), P::kThreads, 0, stream>>>(p);
  check_launch("fp8 gemv_kernel");
}

}  // namespace kernels::fp8::gemm
