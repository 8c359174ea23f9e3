// Small generic helpers shared by every csrc kernel family. No torch here.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "errors.h"

namespace kernels {

template <typename T>
__host__ __device__ constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

// Division by a run-time constant that the host fixes once (a page size, say): a multiply-high
// and a shift instead of the ~20-instruction integer division, and no branch, so the compiler
// can interleave many independent divisions. Round-up multiplier (Granlund-Montgomery):
// m = ceil(2^(31 + l) / d) with l = ceil(log2 d) is exact for dividends in [0, 2^31).
struct FastDivmod {
  int divisor = 1;
  uint32_t multiplier = 0;  // 0: divisor 1, the quotient is the dividend
  int shift = 0;

  FastDivmod() = default;
  __host__ explicit FastDivmod(int d) : divisor(d) {
    check(d >= 1, "FastDivmod: divisor must be >= 1, got ", d);
    if (d == 1) return;
    int l = 0;
    while ((1ll << l) < d) ++l;
    multiplier = static_cast<uint32_t>(((1ull << (31 + l)) + d - 1) / d);
    shift = l - 1;
  }
  // floor(x / divisor) for 0 <= x < 2^31.
  __host__ __device__ __forceinline__ int div(int x) const {
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(static_cast<uint32_t>(x), multiplier);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(static_cast<uint32_t>(x)) * multiplier) >> 32);
#endif
    return multiplier == 0 ? x : static_cast<int>(hi >> shift);
  }
};

// Whether the current device is Hopper (compute capability 9.0), whose kernels this project
// builds for sm_90a (tools.build_ext); the answer is cached per device, so the per-launch
// cost is one cudaGetDevice.
inline bool current_device_is_sm90() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices] = {};  // 0 unknown, 1 yes, 2 no
  int device = 0;
  KERNELS_CUDA_CHECK(cudaGetDevice(&device));
  const int known = device < kMaxDevices ? cached[device].load(std::memory_order_relaxed) : 0;
  if (known != 0) return known == 1;
  int major = 0, minor = 0;
  KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const bool sm90 = major == 9 && minor == 0;
  if (device < kMaxDevices) cached[device].store(sm90 ? 1 : 2, std::memory_order_relaxed);
  return sm90;
}

#ifdef __CUDACC__  // device code: a host-only translation unit (a binding) includes this header too
template <int kWidth = 32>
__device__ __forceinline__ float warp_reduce_max(float x) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

template <int kWidth = 32>
__device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
  for (int offset = kWidth / 2; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  }
  return x;
}
#endif  // __CUDACC__

}  // namespace kernels

// Runtime head_dim -> compile-time constant `kHeadDim`, the one place where that choice is
// made; the error lists what is supported. Usage: KERNELS_DISPATCH_HEAD_DIM(d, [&] { f<kHeadDim>(); });
#define KERNELS_SUPPORTED_HEAD_DIMS "64, 128, 256"
#define KERNELS_DISPATCH_HEAD_DIM(head_dim, ...)                                                                     \
  [&] {                                                                                                              \
    switch (head_dim) {                                                                                              \
      case 64: {                                                                                                     \
        constexpr int kHeadDim = 64;                                                                                 \
        return __VA_ARGS__();                                                                                        \
      }                                                                                                              \
      case 128: {                                                                                                    \
        constexpr int kHeadDim = 128;                                                                                \
        return __VA_ARGS__();                                                                                        \
      }                                                                                                              \
      case 256: {                                                                                                    \
        constexpr int kHeadDim = 256;                                                                                \
        return __VA_ARGS__();                                                                                        \
      }                                                                                                              \
      default:                                                                                                       \
        throw ::kernels::ValueError(                                                                                 \
            ::kernels::concat("head_dim ", head_dim, " is not supported; supported: " KERNELS_SUPPORTED_HEAD_DIMS)); \
    }                                                                                                                \
  }()
