// FP8 GEMM epilogue: dequantise the f32 accumulators (per-tensor scales, then optional
// per-row / per-column scales), add the bias, round to bf16 and store with M / N predication.
//
// Both MMA paths hand over accumulators in the same pairs: for every 8-column group a thread
// holds (row, col) and (row, col + 1) with col even (WGMMA m64nN and mma.sync m16n8 share this
// fragment layout), so one store_pair serves both.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "../common.h"

namespace fp8::gemm {

struct Epilogue {
  float alpha = 1.f;  // *scale_a * *scale_b, read once per thread
  const float* row_scale = nullptr;
  const float* col_scale = nullptr;
  const __nv_bfloat16* bias = nullptr;
  __nv_bfloat16* d = nullptr;
  int64_t m = 0, n = 0, ldd = 0;
  bool pair_aligned = false;  // ldd even and d 4-byte aligned: (col, col+1) is one bf16x2
  bool plain = false;         // pair_aligned, and no row / column scale and no bias

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

  __device__ __forceinline__ void store_pair(int64_t row, int64_t col, float v0, float v1,
                                             float row_factor) const {
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
  // With interior_fast, a thread whose rows and columns all lie inside D, with no row / column
  // scale and no bias, stores without any per-pair check: F2FP + STG per pair (+ 2 FMUL when
  // not kScaled), where the checked store_pair spends ~50 instructions: the checked epilogue of
  // a 128 x 128 tile cost 2 x 3200 issue slots per SM sub-partition, against ~16k cycles of
  // tensor-core work in a 4096^3 tile's mainloop.
  template <int kN, bool kScaled>
  __device__ __forceinline__ void store_wgmma_fragment(int64_t row, int64_t col0, const float (&acc)[kN / 2],
                                                       bool interior_fast) const {
    const float scale = kScaled ? 1.f : alpha;
    if (interior_fast && plain && row + 8 < m && col0 + kN - 6 <= n) {
      __nv_bfloat16* out = d + row * ldd + col0;
      __nv_bfloat16* out8 = out + 8 * ldd;
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
        *reinterpret_cast<__nv_bfloat162*>(out + 8 * j) = __floats2bfloat162_rn(acc[4 * j] * scale, acc[4 * j + 1] * scale);
        *reinterpret_cast<__nv_bfloat162*>(out8 + 8 * j) =
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
};

}  // namespace fp8::gemm
