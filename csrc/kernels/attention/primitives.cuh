// sm80+ warp-level primitives used by the attention kernels: the element types (bf16, fp16),
// ldmatrix and mma.sync m16n8k16 (bf16 or fp16 in, fp32 accumulate). Shared-memory addresses
// and cp.async are the families' common ones (common/smem.cuh).
//
// Fragment layouts of mma.m16n8k16 (lane = 4 * g + t, g = lane / 4, t = lane % 4):
//   A 16x16 (row-major):  a0 = (g, 2t..2t+1)  a1 = (g+8, 2t..)  a2 = (g, 2t+8..)  a3 = (g+8, 2t+8..)
//   B 16x8  (k x n):      b0 = (k 2t..2t+1, n g)               b1 = (k 2t+8..2t+9, n g)
//   C 16x8  (fp32):       c0, c1 = (g, 2t..2t+1)               c2, c3 = (g+8, 2t..2t+1)
// Every attention kernel keeps S and O in the C layout, so the softmax, masking and epilogue
// code below is the same for the tensor-core and the scalar math.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "../common/half_types.cuh"
#include "../common/smem.cuh"
#include "attn_params.h"

namespace kernels::attention {

using bf16 = __nv_bfloat16;
using fp16 = __half;

// The element types of q, k, v and o. Both are 16 bits wide, so tiles, copies and ldmatrix
// fragments are the same for both; the MMA instructions' input type (KERNELS_PICK_ELEMENT_TYPE
// below) and the conversions to and from fp32 (common/half_types.cuh) differ.
template <class Element>
struct ElementOps;

template <>
struct ElementOps<bf16> : HalfTypeOps<bf16> {
  static constexpr AttnDtype kDtype = AttnDtype::kBF16;
};

template <>
struct ElementOps<fp16> : HalfTypeOps<fp16> {
  static constexpr AttnDtype kDtype = AttnDtype::kFP16;
};

template <class Element>
inline constexpr bool kIsBf16 = std::is_same_v<Element, bf16>;

// MACRO("bf16") or MACRO("f16"): an instruction macro over its PTX input type, instantiated for
// the `Element` in scope (the MMA wrappers here and in wgmma_math.cuh).
#define KERNELS_PICK_ELEMENT_TYPE(MACRO)                               \
  if constexpr (::kernels::attention::kIsBf16<Element>) MACRO("bf16"); \
  else MACRO("f16")

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a @ b, a and b of Element (bf16 or fp16: the same fragment layouts).
#define KERNELS_MMA_16816(TYPE)                                                    \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TYPE "." TYPE              \
               ".f32 "                                                             \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                    \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
template <class Element>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  KERNELS_PICK_ELEMENT_TYPE(KERNELS_MMA_16816);
}
#undef KERNELS_MMA_16816

// Two floats -> one register of two Elements, `lo` in the low half (the lower column index).
template <class Element>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  typename ElementOps<Element>::Pair v = ElementOps<Element>::pair(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

}  // namespace kernels::attention

// Runtime AttnDtype -> the element type `Element`, the one place where that choice is made.
// Usage: KERNELS_DISPATCH_ELEMENT(p.dtype, [&] { f<Element>(); });
#define KERNELS_DISPATCH_ELEMENT(dtype, ...)                                    \
  [&] {                                                                         \
    switch (dtype) {                                                            \
      case ::kernels::attention::AttnDtype::kBF16: {                            \
        using Element = ::kernels::attention::bf16;                             \
        return __VA_ARGS__();                                                   \
      }                                                                         \
      case ::kernels::attention::AttnDtype::kFP16: {                            \
        using Element = ::kernels::attention::fp16;                             \
        return __VA_ARGS__();                                                   \
      }                                                                         \
    }                                                                           \
    throw ::kernels::TypeError("attention: dtype must be bfloat16 or float16"); \
  }()
