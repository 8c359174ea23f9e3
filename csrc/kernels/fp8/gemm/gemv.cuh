// FP8 GEMV for decode-sized M (Path::kGemv): D[M, N] = A[M, K] @ B[N, K]^T with M <= 8.
//
// At M = 1..8 a GEMM reads B (N * K bytes) once and does 2 M flops per byte: it is bound by
// memory, and a 128-row WGMMA tile wastes all but M of its rows while its grid (N / BN tiles)
// leaves most SMs idle or splits K. Here a warp owns kColsPerWarp columns of D (rows of B):
// each lane reads 16-byte pieces of those B rows (consecutive lanes, consecutive pieces: 512
// contiguous bytes per warp and row per step, kUnroll steps in flight) and the same pieces of
// A's M rows (the same for every warp: L1 hits), converts both to fp32 in pairs and
// accumulates in fp32 (the products of two fp8 numbers are exact in fp32). A butterfly of
// shuffles sums the lanes, and the epilogue (scales, row / column scales, bias, bf16) is the
// GEMM's (Epilogue::finish). K % 16 == 0 and 16-byte aligned rows, as for the GEMM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "../../common/launch.cuh"
#include "../common.h"
#include "epilogue.cuh"
#include "policy.cuh"

namespace kernels::fp8::gemm {

// acc += dot(a, b) over one 16-byte piece of each (fp8 pairs -> half2 -> float2; exact).
template <Format FA, Format FB>
__device__ __forceinline__ float dot_piece(const uint4& a, const uint4& b, float acc) {
  const auto* a2 = reinterpret_cast<const __nv_fp8x2_storage_t*>(&a);
  const auto* b2 = reinterpret_cast<const __nv_fp8x2_storage_t*>(&b);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const __half2_raw ha = __nv_cvt_fp8x2_to_halfraw2(a2[i], FormatTraits<FA>::kInterp);
    const __half2_raw hb = __nv_cvt_fp8x2_to_halfraw2(b2[i], FormatTraits<FB>::kInterp);
    const float2 fa = __half22float2(*reinterpret_cast<const __half2*>(&ha));
    const float2 fb = __half22float2(*reinterpret_cast<const __half2*>(&hb));
    acc = fmaf(fa.x, fb.x, acc);
    acc = fmaf(fa.y, fb.y, acc);
  }
  return acc;
}

template <int kRows, Format FA, Format FB>
__global__ void __launch_bounds__(GemvPolicy::kThreads) gemv_kernel(const GemmParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  using P = GemvPolicy;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t col0 = (int64_t(blockIdx.x) * P::kWarps + warp) * P::kColsPerWarp;
  if (col0 >= p.n) return;  // no block-wide barrier below: a warp past N just leaves
  const auto* a = static_cast<const uint8_t*>(p.a);
  const auto* b = static_cast<const uint8_t*>(p.b);
  // Rows past M and columns past N read row M - 1 / column N - 1 again (in bounds) and are
  // not stored.
  const uint4* a_rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    a_rows[r] = reinterpret_cast<const uint4*>(a + (r < p.m ? r : p.m - 1) * p.lda);
  }
  const uint4* b_rows[P::kColsPerWarp];
#pragma unroll
  for (int c = 0; c < P::kColsPerWarp; ++c) {
    b_rows[c] = reinterpret_cast<const uint4*>(b + (col0 + c < p.n ? col0 + c : p.n - 1) * p.ldb);
  }

  float acc[P::kColsPerWarp][kRows];
#pragma unroll
  for (int c = 0; c < P::kColsPerWarp; ++c)
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[c][r] = 0.f;

  const int64_t pieces = p.k / P::kPiece;
  constexpr int kStride = 32 * P::kUnroll;
  for (int64_t base = 0; base < pieces; base += kStride) {
    // Issue every load of the step first (kColsPerWarp x kUnroll pieces of B), then compute.
    uint4 bv[P::kColsPerWarp][P::kUnroll];
#pragma unroll
    for (int u = 0; u < P::kUnroll; ++u) {
      const int64_t piece = base + u * 32 + lane;
#pragma unroll
      for (int c = 0; c < P::kColsPerWarp; ++c) {
        bv[c][u] = piece < pieces ? __ldcs(b_rows[c] + piece) : make_uint4(0, 0, 0, 0);  // B: read once
      }
    }
#pragma unroll
    for (int u = 0; u < P::kUnroll; ++u) {
      const int64_t piece = base + u * 32 + lane;
      if (piece >= pieces) break;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const uint4 av = __ldg(a_rows[r] + piece);  // A: every warp reads it, L1 keeps it
#pragma unroll
        for (int c = 0; c < P::kColsPerWarp; ++c) acc[c][r] = dot_piece<FA, FB>(av, bv[c][u], acc[c][r]);
      }
    }
  }

#pragma unroll
  for (int c = 0; c < P::kColsPerWarp; ++c)
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) acc[c][r] += __shfl_xor_sync(0xffffffffu, acc[c][r], offset);

  // Lane c * kRows + r stores D[r, col0 + c].
  const Epilogue e = Epilogue::make(p);
#pragma unroll
  for (int c = 0; c < P::kColsPerWarp; ++c) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t col = col0 + c;
      if (lane == c * kRows + r && r < p.m && col < p.n) {
        e.d[r * e.ldd + col] = __float2bfloat16_rn(e.finish(acc[c][r], e.row_factor(r, e.alpha), col));
      }
    }
  }
#endif
}

template <Format FA, Format FB>
void launch_gemv(const GemmParams& p, cudaStream_t stream) {
  check(p.m <= GemvPolicy::kMaxRows, "fp8 gemm: the GEMV path takes M <= ", GemvPolicy::kMaxRows, ", got M=", p.m);
  const int64_t blocks = ceil_div<int64_t>(p.n, GemvPolicy::kColsPerBlock);
  check(blocks <= 0x7fffffff, "fp8 gemm: N too large for the GEMV grid, got N=", p.n);
  const dim3 grid(static_cast<unsigned>(blocks));
  switch (gemv_rows_bucket(p.m)) {
    case 1: gemv_kernel<1, FA, FB><<<grid, GemvPolicy::kThreads, 0, stream>>>(p); break;
    case 2: gemv_kernel<2, FA, FB><<<grid, GemvPolicy::kThreads, 0, stream>>>(p); break;
    case 4: gemv_kernel<4, FA, FB><<<grid, GemvPolicy::kThreads, 0, stream>>>(p); break;
    default: gemv_kernel<8, FA, FB><<<grid, GemvPolicy::kThreads, 0, stream>>>(p); break;
  }
  check_launch("fp8 gemv_kernel");
}

}  // namespace kernels::fp8::gemm
