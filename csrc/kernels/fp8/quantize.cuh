// Quantize bf16 -> fp8 (E4M3 / E5M2) with a multiplier; row-major and / or transposed outputs;
// amax of the input. No torch here.
//
// A block owns 64 x 64 tiles (grid-stride over tiles). Each of its 256 threads loads 2 x 8
// consecutive bf16 (16-byte loads on the vector path), converts with saturation
// (cvt.rn.satfinite), stores 8 fp8 row-major and writes them into a shared tile; after a
// barrier it reads 8 consecutive rows of one column from that tile and stores them as one
// 8-byte run of the transposed output. amax: warp shuffle max, block max, one atomicMax on
// the float's bits per block (non-negative floats order like their bit patterns).
// NaN inputs become NaN outputs and do not enter amax (fmaxf ignores NaN).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "../common/launch.cuh"
#include "common.h"

namespace kernels::fp8 {

namespace quantize_detail {

constexpr int kTile = 64;
constexpr int kThreads = 256;
constexpr int kVec = 8;
constexpr int kPad = 8;  // bytes after each shared row: keeps 8-byte rows aligned, spreads banks

template <Format F>
__device__ __forceinline__ uint16_t cvt2(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, FormatTraits<F>::kInterp);
}

template <Format F, bool kVectorized, bool kRowOut, bool kTransOut>
__global__ void __launch_bounds__(kThreads) quantize_kernel(const QuantizeParams p) {
  __shared__ __align__(16) uint8_t tile[kTile][kTile + kPad];
  __shared__ float warp_amax[kThreads / 32];

  const float scale = *p.scale;
  const int64_t tiles_c = ceil_div<int64_t>(p.cols, kTile);
  const int64_t tiles = ceil_div<int64_t>(p.rows, kTile) * tiles_c;
  const int col_in_tile = (threadIdx.x % (kTile / kVec)) * kVec;  // 8 threads per row
  const int row_in_tile = threadIdx.x / (kTile / kVec);           // 32 rows per pass
  float amax = 0.f;
  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(p.x);

  for (int64_t tile_idx = blockIdx.x; tile_idx < tiles; tile_idx += gridDim.x) {
    const int64_t r0 = (tile_idx / tiles_c) * kTile, c0 = (tile_idx % tiles_c) * kTile;

    // ---- load, convert, row-major store, stash for the transpose
#pragma unroll
    for (int pass = 0; pass < kTile / (kThreads / (kTile / kVec)); ++pass) {
      const int r = row_in_tile + pass * (kThreads / (kTile / kVec));
      const int64_t gr = r0 + r, gc = c0 + col_in_tile;
      float v[kVec];
      if constexpr (kVectorized) {
        // cols % 8 == 0: a vector is entirely inside or entirely outside the matrix
        const bool in = gr < p.rows && gc < p.cols;
        uint4 raw = make_uint4(0, 0, 0, 0);
        if (in) raw = *reinterpret_cast<const uint4*>(x + gr * p.ld_x + gc);
        const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int j = 0; j < kVec / 2; ++j) {
          const float2 f = __bfloat1622float2(pairs[j]);
          v[2 * j] = f.x;
          v[2 * j + 1] = f.y;
        }
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j)
          v[j] = (gr < p.rows && gc + j < p.cols) ? __bfloat162float(x[gr * p.ld_x + gc + j]) : 0.f;
      }
      uint16_t packed[kVec / 2];
#pragma unroll
      for (int j = 0; j < kVec / 2; ++j) {
        amax = fmaxf(amax, fmaxf(fabsf(v[2 * j]), fabsf(v[2 * j + 1])));
        packed[j] = cvt2<F>(v[2 * j] * scale, v[2 * j + 1] * scale);
      }
      if constexpr (kRowOut) {
        uint8_t* out = static_cast<uint8_t*>(p.out) + gr * p.cols + gc;
        if constexpr (kVectorized) {
          if (gr < p.rows && gc < p.cols) *reinterpret_cast<uint2*>(out) = *reinterpret_cast<const uint2*>(packed);
        } else {
          const uint8_t* bytes = reinterpret_cast<const uint8_t*>(packed);
          for (int j = 0; j < kVec; ++j)
            if (gr < p.rows && gc + j < p.cols) out[j] = bytes[j];
        }
      }
      if constexpr (kTransOut)
        *reinterpret_cast<uint2*>(&tile[r][col_in_tile]) = *reinterpret_cast<const uint2*>(packed);
    }

    // ---- transposed store: out_t[c][r0 .. r0+64), 8 rows per thread
    if constexpr (kTransOut) {
      __syncthreads();
      const int c = threadIdx.x / (kTile / kVec);            // 32 columns per pass
      const int rr = (threadIdx.x % (kTile / kVec)) * kVec;  // 8 consecutive rows
#pragma unroll
      for (int pass = 0; pass < 2; ++pass) {
        const int cc = c + pass * (kThreads / (kTile / kVec));
        const int64_t gc = c0 + cc, gr = r0 + rr;
        uint8_t run[kVec];
#pragma unroll
        for (int j = 0; j < kVec; ++j) run[j] = tile[rr + j][cc];
        uint8_t* out_t = static_cast<uint8_t*>(p.out_t) + gc * p.rows + gr;
        if constexpr (kVectorized) {
          // rows % 8 == 0 on this path
          if (gc < p.cols && gr < p.rows) *reinterpret_cast<uint2*>(out_t) = *reinterpret_cast<uint2*>(run);
        } else {
          for (int j = 0; j < kVec; ++j)
            if (gc < p.cols && gr + j < p.rows) out_t[j] = run[j];
        }
      }
      __syncthreads();  // the next tile overwrites the shared tile
    }
  }

  // ---- amax: warp, block, then one atomic per block
  if (p.amax != nullptr) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
    __syncthreads();
    if (threadIdx.x == 0) {
      float block_amax = 0.f;
      for (int w = 0; w < kThreads / 32; ++w) block_amax = fmaxf(block_amax, warp_amax[w]);
      atomicMax(reinterpret_cast<int*>(p.amax), __float_as_int(block_amax));
    }
  }
}

// Block quantize: one warp per (row, 128-column group), four columns per lane; the warp's amax
// by shuffles, the factor by an IEEE division (the same rounding as torch's amax / 448), each
// value divided by it (not multiplied by a reciprocal: the same bits as torch's x / scale) and
// converted with saturation. NaN inputs become NaN outputs and do not enter amax.
constexpr int kBlockCols = 128;

__global__ void __launch_bounds__(kThreads) block_quantize_kernel(const BlockQuantizeParams p) {
  const int64_t groups = ceil_div<int64_t>(p.cols, kBlockCols);
  const int64_t units = p.rows * groups;
  const int lane = threadIdx.x % 32;
  const __nv_bfloat16* x = static_cast<const __nv_bfloat16*>(p.x);
  uint8_t* out = static_cast<uint8_t*>(p.out);
  for (int64_t unit = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32; unit < units;
       unit += int64_t(gridDim.x) * (kThreads / 32)) {
    const int64_t row = unit / groups, group = unit % groups;
    const int64_t col = group * kBlockCols + lane * 4;
    float v[4];
    float amax = 0.f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[j] = col + j < p.cols ? __bfloat162float(x[row * p.ld_x + col + j]) : 0.f;
      amax = fmaxf(amax, fabsf(v[j]));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    const float scale = amax > 0.f ? __fdiv_rn(amax, FormatTraits<Format::kE4M3>::kMax) : 1.f;
    if (lane == 0) p.scale[group * p.rows + row] = scale;
    uint8_t* dst = out + row * p.cols + col;
    const uint16_t lo = cvt2<Format::kE4M3>(__fdiv_rn(v[0], scale), __fdiv_rn(v[1], scale));
    const uint16_t hi = cvt2<Format::kE4M3>(__fdiv_rn(v[2], scale), __fdiv_rn(v[3], scale));
    if (col + 4 <= p.cols && p.cols % 4 == 0) {
      *reinterpret_cast<uint32_t*>(dst) = uint32_t(lo) | (uint32_t(hi) << 16);
    } else {
      const uint8_t bytes[4] = {uint8_t(lo), uint8_t(lo >> 8), uint8_t(hi), uint8_t(hi >> 8)};
      for (int j = 0; j < 4; ++j)
        if (col + j < p.cols) dst[j] = bytes[j];
    }
  }
}

}  // namespace quantize_detail

// Throws kernels::CudaError when the launch fails; out must be 4-byte aligned.
inline void launch_block_quantize(const BlockQuantizeParams& p, int num_sms, cudaStream_t stream) {
  using namespace quantize_detail;
  if (p.rows == 0 || p.cols == 0) return;
  const int64_t warps = p.rows * ceil_div<int64_t>(p.cols, kBlockCols);
  const int64_t needed = ceil_div<int64_t>(warps, kThreads / 32), max_blocks = int64_t(num_sms) * 16;
  block_quantize_kernel<<<int(needed < max_blocks ? needed : max_blocks), kThreads, 0, stream>>>(p);
  check_launch("fp8 block_quantize_kernel");
}

inline bool quantize_vectorizable(const QuantizeParams& p) {
  const auto aligned = [](const void* ptr, uintptr_t n) {
    return ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % n == 0;
  };
  return p.cols % 8 == 0 && p.ld_x % 8 == 0 && aligned(p.x, 16) && aligned(p.out, 8) &&
         (p.out_t == nullptr || (p.rows % 8 == 0 && aligned(p.out_t, 8)));
}

template <Format F, bool kVec>
void launch_quantize_format(const QuantizeParams& p, int blocks, cudaStream_t stream) {
  using namespace quantize_detail;
  if (p.out != nullptr && p.out_t != nullptr) quantize_kernel<F, kVec, true, true><<<blocks, kThreads, 0, stream>>>(p);
  else if (p.out != nullptr) quantize_kernel<F, kVec, true, false><<<blocks, kThreads, 0, stream>>>(p);
  else if (p.out_t != nullptr) quantize_kernel<F, kVec, false, true><<<blocks, kThreads, 0, stream>>>(p);
  else  // amax only
    quantize_kernel<F, kVec, false, false><<<blocks, kThreads, 0, stream>>>(p);
  check_launch("fp8 quantize_kernel");
}

// Runtime format and vector path -> template instance, in one place. Throws
// kernels::CudaError when the launch fails.
inline void launch_quantize(const QuantizeParams& p, int num_sms, cudaStream_t stream) {
  if (p.rows == 0 || p.cols == 0) return;
  if (p.out == nullptr && p.out_t == nullptr && p.amax == nullptr) return;
  const QuantizeParams& q = p;
  const int64_t tiles =
      ceil_div<int64_t>(p.rows, quantize_detail::kTile) * ceil_div<int64_t>(p.cols, quantize_detail::kTile);
  const int64_t max_blocks = int64_t(num_sms) * 8;
  const int blocks = int(tiles < max_blocks ? tiles : max_blocks);
  const bool vec = quantize_vectorizable(p);
  if (p.format == Format::kE4M3)
    return vec ? launch_quantize_format<Format::kE4M3, true>(q, blocks, stream)
               : launch_quantize_format<Format::kE4M3, false>(q, blocks, stream);
  return vec ? launch_quantize_format<Format::kE5M2, true>(q, blocks, stream)
             : launch_quantize_format<Format::kE5M2, false>(q, blocks, stream);
}

}  // namespace kernels::fp8
