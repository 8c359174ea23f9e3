// WGMMA fp8 instruction wrappers: wgmma.mma_async m64nNk32 with f32 accumulators in
// registers and both operands from shared memory (K-major, the only fp8 form).
// The operand lists are long (N/2 accumulator registers); each N has one macro that
// spells its asm statement for a given type pair, and wgmma_fp8<N, FA, FB> picks the pair.
// The asm goes through KERNELS_SM90A_ASM (common/sm90.cuh), as every sm_90a-only instruction's.
#pragma once

#include <cstdint>

#include "../../common/sm90.cuh"
#include "../common.h"

namespace kernels::fp8::gemm {
// m64n64k32: 32 f32 accumulators per thread; %32, %33 descriptors, %34 scale-d.
#define FP8_WGMMA_M64N64K32(TA, TB)                                     \
  KERNELS_SM90A_ASM(                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                      \
      "wgmma.mma_async.sync.aligned.m64n64k32.f32." TA "." TB           \
      " "                                                               \
      "{" KERNELS_WGMMA_ACC32_REGS                                      \
      "}, "                                                             \
      "%32, %33, p, 1, 1;\n}\n" : KERNELS_WGMMA_ACC32(d) : "l"(desc_a), \
      "l"(desc_b), "r"(scale_d))
// m64n128k32: 64 f32 accumulators per thread; %64, %65 descriptors, %66 scale-d.
#define FP8_WGMMA_M64N128K32(TA, TB)                                    \
  KERNELS_SM90A_ASM(                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                      \
      "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB          \
      " "                                                               \
      "{" KERNELS_WGMMA_ACC64_REGS                                      \
      "}, "                                                             \
      "%64, %65, p, 1, 1;\n}\n" : KERNELS_WGMMA_ACC64(d) : "l"(desc_a), \
      "l"(desc_b), "r"(scale_d))
// m64n176k32: 88 f32 accumulators per thread; %88, %89 descriptors, %90 scale-d.
#define FP8_WGMMA_M64N176K32(TA, TB)                                    \
  KERNELS_SM90A_ASM(                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %90, 0;\n"                      \
      "wgmma.mma_async.sync.aligned.m64n176k32.f32." TA "." TB          \
      " "                                                               \
      "{" KERNELS_WGMMA_ACC88_REGS                                      \
      "}, "                                                             \
      "%88, %89, p, 1, 1;\n}\n" : KERNELS_WGMMA_ACC88(d) : "l"(desc_a), \
      "l"(desc_b), "r"(scale_d))
// m64n192k32: 96 f32 accumulators per thread; %96, %97 descriptors, %98 scale-d.
#define FP8_WGMMA_M64N192K32(TA, TB)                                    \
  KERNELS_SM90A_ASM(                                                    \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"                      \
      "wgmma.mma_async.sync.aligned.m64n192k32.f32." TA "." TB          \
      " "                                                               \
      "{" KERNELS_WGMMA_ACC96_REGS                                      \
      "}, "                                                             \
      "%96, %97, p, 1, 1;\n}\n" : KERNELS_WGMMA_ACC96(d) : "l"(desc_a), \
      "l"(desc_b), "r"(scale_d))
// m64n256k32: 128 f32 accumulators per thread; %128, %129 descriptors, %130 scale-d.
#define FP8_WGMMA_M64N256K32(TA, TB)                                       \
  KERNELS_SM90A_ASM(                                                       \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                        \
      "wgmma.mma_async.sync.aligned.m64n256k32.f32." TA "." TB             \
      " "                                                                  \
      "{" KERNELS_WGMMA_ACC128_REGS                                        \
      "}, "                                                                \
      "%128, %129, p, 1, 1;\n}\n" : KERNELS_WGMMA_ACC128(d) : "l"(desc_a), \
      "l"(desc_b), "r"(scale_d))

template <int N, Format FA, Format FB>
__device__ __forceinline__ void wgmma_fp8(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 176 || N == 192 || N == 256, "wrapped WGMMA n");
#define FP8_WGMMA_PICK_TYPES(MACRO)                                                     \
  if constexpr (FA == Format::kE4M3 && FB == Format::kE4M3) MACRO("e4m3", "e4m3");      \
  else if constexpr (FA == Format::kE4M3 && FB == Format::kE5M2) MACRO("e4m3", "e5m2"); \
  else if constexpr (FA == Format::kE5M2 && FB == Format::kE4M3) MACRO("e5m2", "e4m3"); \
  else MACRO("e5m2", "e5m2")
  if constexpr (N == 64) {
    FP8_WGMMA_PICK_TYPES(FP8_WGMMA_M64N64K32);
  } else if constexpr (N == 128) {
    FP8_WGMMA_PICK_TYPES(FP8_WGMMA_M64N128K32);
  } else if constexpr (N == 176) {
    FP8_WGMMA_PICK_TYPES(FP8_WGMMA_M64N176K32);
  } else if constexpr (N == 192) {
    FP8_WGMMA_PICK_TYPES(FP8_WGMMA_M64N192K32);
  } else {
    FP8_WGMMA_PICK_TYPES(FP8_WGMMA_M64N256K32);
  }
#undef FP8_WGMMA_PICK_TYPES
}

#undef FP8_WGMMA_M64N64K32
#undef FP8_WGMMA_M64N128K32
#undef FP8_WGMMA_M64N176K32
#undef FP8_WGMMA_M64N192K32
#undef FP8_WGMMA_M64N256K32

}  // namespace kernels::fp8::gemm
