// The 16-bit float element types of the kernel families, bf16 and fp16: their conversions to
// and from fp32 (rounding to nearest even), one element or a register pair at a time. The
// attention kernels (ElementOps, attention/primitives.cuh) and rotary use these. No torch here.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace kernels {

template <class T>
struct HalfTypeOps;

template <>
struct HalfTypeOps<__nv_bfloat16> {
  using Pair = __nv_bfloat162;
  __device__ __forceinline__ static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  __device__ __forceinline__ static __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
  __device__ __forceinline__ static Pair pair(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
  __device__ __forceinline__ static float2 to_float2(Pair x) { return __bfloat1622float2(x); }
};

template <>
struct HalfTypeOps<__half> {
  using Pair = __half2;
  __device__ __forceinline__ static float to_float(__half x) { return __half2float(x); }
  __device__ __forceinline__ static __half from_float(float x) { return __float2half_rn(x); }
  __device__ __forceinline__ static Pair pair(float lo, float hi) { return __floats2half2_rn(lo, hi); }
  __device__ __forceinline__ static float2 to_float2(Pair x) { return __half22float2(x); }
};

}  // namespace kernels
