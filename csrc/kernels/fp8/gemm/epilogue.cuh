// FP8 GEMM epilogue: dequantise the f32 accumulators (per-tensor scales, then optional
// per-row / per-column scales), add the bias, round to bf16 and store with M / N predication.
// With split-K (SplitKPartials) the GEMM kernel stores fp32 partial sums instead, and
// splitk_reduce_kernel sums them in split order and runs this epilogue.
//
// Both MMA paths hand over accumulators in the same pairs: for every 8-column group a thread
// holds (row, col) and (row, col + 1) with col even (WGMMA m64nN and mma.sync m16n8 share this
// fragment layout), so one store_pair serves both.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "../common.h"

namespace kernels::fp8::gemm {

// How the sm_90a GEMM stores its interior tiles (Epilogue::store_wgmma_fragment); edge tiles and
// tiles with row / column scales or a bias always take the checked stores.
enum class StoreMode : int { kChecked = 0, kPairs = 1, kRows16 = 2 };

struct Epilogue {
  float alpha = 1.f;  // *scale_a * *scale_b, read once per thread
  const float* row_scale = nullptr;
  const float* col_scale = nullptr;
  const __nv_bfloat16* bias = nullptr;
  __nv_bfloat16* d = nullptr;
  int64_t m = 0, n = 0, ldd = 0;
  bool pair_aligned = false;   // ldd even and d 4-byte aligned: (col, col+1) is one bf16x2
  bool plain = false;          // pair_aligned, and no row / column scale and no bias
  bool row16_aligned = false;  // ldd % 8 == 0 and d 16-byte aligned: 8 columns from col % 8 == 0 are one uint4

  __device__ __forceinline__ static Epilogue make(const GemmParams& p) {
    Epilogue e;
    e.alpha = *p.scale_a * *p.scale_b;
    e.row_scale = p.row_scale;
    e.col_scale = p.col_scale;
    e.bias = static_cast<const __nv_bfloat16*>(p.bias);
    e.d = static_cast<__nv_bfloat16*>(p.d);
    e.m = p.m;
    e.n = p.n;
    e.ldd = p.ldd;
    e.pair_aligned = p.ldd % 2 == 0 && reinterpret_cast<uintptr_t>(p.d) % 4 == 0;
    e.plain = e.pair_aligned && p.row_scale == nullptr && p.col_scale == nullptr && p.bias == nullptr;
    e.row16_aligned = p.ldd % 8 == 0 && reinterpret_cast<uintptr_t>(p.d) % 16 == 0;
    return e;
  }

  __device__ __forceinline__ float finish(float acc, float row_factor, int64_t col) const {
    float v = acc * row_factor;
    if (col_scale != nullptr) v *= __ldg(col_scale + col);
    if (bias != nullptr) v += __bfloat162float(bias[col]);
    return v;
  }

  // The factor of a row: scale (alpha, or 1 for accumulators that already carry it) times its
  // row scale.
  __device__ __forceinline__ float row_factor(int64_t row, float scale) const {
    return scale * (row_scale != nullptr && row < m ? __ldg(row_scale + row) : 1.f);
  }

  // D[row, col .. col+1] from two accumulators; col is even. Every call checks the bounds and
  // each optional operand (about 50 SASS instructions per pair).
  __device__ __forceinline__ void store_pair(int64_t row, int64_t col, float v0, float v1) const {
    store_pair(row, col, v0, v1, row_factor(row, alpha));
  }

  __device__ __forceinline__ void store_pair(int64_t row, int64_t col, float v0, float v1, float row_factor) const {
    if (row >= m || col >= n) return;
    __nv_bfloat16* out = d + row * ldd + col;
    const float o0 = finish(v0, row_factor, col);
    if (col + 1 < n) {
      const float o1 = finish(v1, row_factor, col + 1);
      if (pair_aligned) {
        *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(o0, o1);
      } else {
        out[0] = __float2bfloat16_rn(o0);
        out[1] = __float2bfloat16_rn(o1);
      }
    } else {
      out[0] = __float2bfloat16_rn(o0);
    }
  }

  // One thread's part of a WGMMA m64 x kN accumulator: rows `row` and row + 8, columns
  // col0 + 8j and col0 + 8j + 1 (col0 even) from acc[4j .. 4j + 3], j < kN / 8.
  // kScaled: the promoted mainloops fold alpha into their promotion FFMAs, so acc is already
  // scaled and the stores skip that multiply.
  // store (StoreMode): kChecked checks every pair (store_pair, ~50 instructions each: the
  // checked epilogue of a 128 x 128 tile cost 2 x 3200 issue slots per SM sub-partition,
  // against ~16k cycles of tensor-core work in a 4096^3 tile's mainloop). The unchecked modes
  // serve a quad of threads whose rows and columns all lie inside D, with no row / column scale
  // and no bias: kPairs stores each pair as it comes (F2FP + a 4-byte STG), kRows16 first
  // transposes the quad's pairs (store_rows16) so that each thread stores 16 bytes of a row:
  // a quarter of the STG instructions, which the kPairs epilogue queued behind each other
  // (Nsight Compute: its STGs stalled on the LSU queue, "lg throttle", 13% of the kernel's
  // warp samples at 8192 x 8192 x 4096).
  // kRows16 = false compiles the kRows16 mode out (it runs as kPairs): the mainloops that keep
  // a second set of partial sums live across the stores (ping-pong, overlap) spill with it.
  template <int kN, bool kScaled, bool kRows16 = true>
  __device__ __forceinline__ void store_wgmma_fragment(int64_t row, int64_t col0, const float (&acc)[kN / 2],
                                                       StoreMode store) const {
    const float scale = kScaled ? 1.f : alpha;
    const int quad_lane = threadIdx.x % 4;
    const int64_t quad_col0 = col0 - 2 * quad_lane;  // the same for the quad's four threads
    if (store != StoreMode::kChecked && plain && row + 8 < m && quad_col0 + kN <= n) {
      __nv_bfloat16* out = d + row * ldd + col0;
      int j = 0;
      if constexpr (kRows16) {
        if (store == StoreMode::kRows16 && row16_aligned) {
          store_rows16<kN>(d + row * ldd + quad_col0, acc, scale, quad_lane);
          j = kN / 32 * 4;
        }
      }
#pragma unroll
      for (; j < kN / 8; ++j) {
        *reinterpret_cast<__nv_bfloat162*>(out + 8 * j) =
            __floats2bfloat162_rn(acc[4 * j] * scale, acc[4 * j + 1] * scale);
        *reinterpret_cast<__nv_bfloat162*>(out + 8 * ldd + 8 * j) =
            __floats2bfloat162_rn(acc[4 * j + 2] * scale, acc[4 * j + 3] * scale);
      }
      return;
    }
    const float factor0 = row_factor(row, scale), factor8 = row_factor(row + 8, scale);
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
      store_pair(row, col0 + 8 * j, acc[4 * j], acc[4 * j + 1], factor0);
      store_pair(row + 8, col0 + 8 * j, acc[4 * j + 2], acc[4 * j + 3], factor8);
    }
  }

  // Column groups 0 .. 4 * (kN / 32) of a quad's rows (out: its row `row`, column 0 of the
  // fragment, 16-byte aligned): per row half and 4 column groups, thread t holds one bf16 pair of
  // each group (columns 8g + 2t, +1); a 4 x 4 transpose of these words across the quad (two
  // exchanges of two words) leaves thread t the 8 columns of group t, one 16-byte store.
  template <int kN>
  __device__ __forceinline__ void store_rows16(__nv_bfloat16* out, const float (&acc)[kN / 2], float scale,
                                               int t) const {
    const unsigned quad = 0xfu << (threadIdx.x % 32 & ~3u);
    const bool odd = t & 1, upper = t & 2;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int q = 0; q < kN / 32; ++q) {
        uint32_t w[4];
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          const int a = 4 * (4 * q + g) + 2 * half;
          const __nv_bfloat162 pair = __floats2bfloat162_rn(acc[a] * scale, acc[a + 1] * scale);
          w[g] = *reinterpret_cast<const uint32_t*>(&pair);
        }
        // w[g] = M[t][g]; after the exchange with t ^ 1: {M[p][c], M[p + 1][c], M[p][c + 2],
        // M[p + 1][c + 2]} with c = t & 1, p = t & 2; after the one with t ^ 2: column t of M.
        uint32_t send0 = odd ? w[0] : w[1], send1 = odd ? w[2] : w[3];
        uint32_t got0 = __shfl_xor_sync(quad, send0, 1), got1 = __shfl_xor_sync(quad, send1, 1);
        if (odd) {
          w[0] = got0;
          w[2] = got1;
        } else {
          w[1] = got0;
          w[3] = got1;
        }
        send0 = upper ? w[0] : w[2];
        send1 = upper ? w[1] : w[3];
        got0 = __shfl_xor_sync(quad, send0, 2);
        got1 = __shfl_xor_sync(quad, send1, 2);
        const uint4 row8 = upper ? make_uint4(got0, got1, w[2], w[3]) : make_uint4(w[0], w[1], got0, got1);
        *reinterpret_cast<uint4*>(out + 8 * half * ldd + 8 * (4 * q + t)) = row8;
      }
    }
  }
};

// Split-K workspace: split s of the K range writes its fp32 partial sum of D, already
// multiplied by scale_a * scale_b, to partials[s][row][col] (row stride ldw = n rounded up
// to 4, so the reduction reads aligned float4 and a fragment's (col, col + 1) pair never
// leaves its row). Only rows < m and columns < n are written; nothing needs zeroing, and
// each element has exactly one writer per split: deterministic, no atomics.
struct SplitKPartials {
  float* partials = nullptr;
  int splits = 1;
  int64_t m = 0, n = 0, ldw = 0;

  __host__ __device__ static int64_t row_stride(int64_t n) { return (n + 3) / 4 * 4; }
  __host__ __device__ static size_t bytes(int splits, int64_t m, int64_t n) {
    return splits > 1 ? size_t(splits) * size_t(m) * size_t(row_stride(n)) * sizeof(float) : 0;
  }

  // One thread's part of a WGMMA m64 x kN accumulator (the layout of
  // Epilogue::store_wgmma_fragment); scale is 1 for accumulators that carry alpha already.
  template <int kN>
  __device__ __forceinline__ void store_wgmma_fragment(int split, int64_t row, int64_t col0, const float (&acc)[kN / 2],
                                                       float scale) const {
    float* base = partials + int64_t(split) * m * ldw;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t r = row + 8 * half;
      if (r >= m) continue;
      float* out = base + r * ldw + col0;
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
        if (col0 + 8 * j < n) {
          *reinterpret_cast<float2*>(out + 8 * j) =
              make_float2(acc[4 * j + 2 * half] * scale, acc[4 * j + 2 * half + 1] * scale);
        }
      }
    }
  }
};

// D = epilogue(sum over splits of the partials), summed in split order (deterministic). One
// thread per 4 columns of a row: float4 loads of every split, then two store_pair calls (row
// and column scales, bias, bf16 rounding, M / N predication as the unsplit epilogue).
template <int kThreads>
__global__ void __launch_bounds__(kThreads) splitk_reduce_kernel(const GemmParams p, const SplitKPartials w) {
  const Epilogue epi = Epilogue::make(p);
  const int64_t quads_per_row = (w.n + 3) / 4;
  const int64_t total = w.m * quads_per_row;
  const int64_t split_stride = w.m * w.ldw;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / quads_per_row, col = (i - row * quads_per_row) * 4;
    const float* src = w.partials + row * w.ldw + col;
    float4 sum = __ldg(reinterpret_cast<const float4*>(src));
    for (int s = 1; s < w.splits; ++s) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(src + s * split_stride));
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    const float factor = epi.row_factor(row, 1.f);
    epi.store_pair(row, col, sum.x, sum.y, factor);
    epi.store_pair(row, col + 2, sum.z, sum.w, factor);
  }
}

}  // namespace kernels::fp8::gemm
