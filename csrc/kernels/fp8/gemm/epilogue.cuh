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
    return e;
  }

  __device__ __forceinline__ float finish(float acc, float row_factor, int64_t col) const {
    float v = acc * row_factor;
    if (col_scale != nullptr) v *= __ldg(col_scale + col);
    if (bias != nullptr) v += __bfloat162float(bias[col]);
    return v;
  }

  // D[row, col .. col+1] from two accumulators; col is even.
  __device__ __forceinline__ void store_pair(int64_t row, int64_t col, float v0, float v1) const {
    if (row >= m || col >= n) return;
    const float row_factor = alpha * (row_scale != nullptr ? __ldg(row_scale + row) : 1.f);
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
};

}  // namespace fp8::gemm
