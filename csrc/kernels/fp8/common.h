// FP8 family: the plain parameters and format traits shared by quantize, the GEMM collective
// pieces (gemm/), the host planner (gemm.cuh), the torch binding (fp8.cpp) and the standalone
// test (csrc/tests/fp8_test.cu). No torch here. The launchers report errors as in
// common/errors.h.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/cuda_utils.cuh"

namespace kernels::fp8 {

enum class Format : int { kE4M3 = 0, kE5M2 = 1 };

template <Format F>
struct FormatTraits;

template <>
struct FormatTraits<Format::kE4M3> {
  using Storage = __nv_fp8_e4m3;
  static constexpr __nv_fp8_interpretation_t kInterp = __NV_E4M3;
  static constexpr float kMax = 448.f;
  static constexpr const char* kPtx = "e4m3";
};

template <>
struct FormatTraits<Format::kE5M2> {
  using Storage = __nv_fp8_e5m2;
  static constexpr __nv_fp8_interpretation_t kInterp = __NV_E5M2;
  static constexpr float kMax = 57344.f;
  static constexpr const char* kPtx = "e5m2";
};

inline const char* format_name(Format f) { return f == Format::kE4M3 ? "e4m3" : "e5m2"; }

// Quantize: out = saturate_to_format(x * (*scale)); amax = max |x| (input domain, before the
// multiplier) folded into *amax with an atomic max (the caller zeroes it).
struct QuantizeParams {
  const void* x = nullptr;  // bf16 [rows, cols], row stride ld_x elements
  int64_t rows = 0, cols = 0, ld_x = 0;
  const float* scale = nullptr;  // device scalar multiplier
  void* out = nullptr;           // fp8 [rows, cols] (row stride cols), or nullptr
  void* out_t = nullptr;         // fp8 [cols, rows] (row stride rows), or nullptr
  float* amax = nullptr;         // device scalar, or nullptr
  Format format = Format::kE4M3;
};

// Block quantize (the activations of a block-scaled GEMM): per row and 128 columns, the dequant
// factor scale = amax / 448 (1 where amax is 0) and out = saturate_to_e4m3(x / scale).
struct BlockQuantizeParams {
  const void* x = nullptr;  // bf16 [rows, cols], row stride ld_x elements
  int64_t rows = 0, cols = 0, ld_x = 0;
  void* out = nullptr;     // e4m3 [rows, cols], contiguous
  float* scale = nullptr;  // [ceil(cols / 128), rows], contiguous (BlockScales::a's layout)
};

// GEMM: D[M, N] = (A[M, K] @ B[N, K]^T) * (*scale_a) * (*scale_b) * row_scale[m] * col_scale[n]
//              + bias[n], bf16 out. A and B are K-major fp8 (row strides lda, ldb bytes). Block-
//              scaled (BlockScales): each 128-deep k-block's products times a[kb][m] * b[n / 128][kb].
struct GemmParams {
  const void* a = nullptr;
  const void* b = nullptr;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;  // elements
  Format a_format = Format::kE4M3, b_format = Format::kE4M3;
  const float* scale_a = nullptr;  // device scalars (required)
  const float* scale_b = nullptr;
  const float* row_scale = nullptr;  // [M] or nullptr
  const float* col_scale = nullptr;  // [N] or nullptr
  const void* bias = nullptr;        // bf16 [N] or nullptr
  void* d = nullptr;                 // bf16 [M, N]
};

// Block scales (dequant factors; gemm::AccumMode::kBlockScaled), both or neither: A's 1 x 128
// blocks as [ceil(K / 128), M] (M contiguous: a k-block's factors for consecutive rows sit
// together), B's 128 x 128 blocks as [ceil(N / 128), ceil(K / 128)]; D still takes scale_a,
// scale_b and the epilogue's terms. Apart from GemmParams, which every GEMM kernel holds as its
// parameter (two more pointers in it made ptxas spill in the overlap kernels).
struct BlockScales {
  const float* a = nullptr;
  const float* b = nullptr;
};

}  // namespace kernels::fp8
