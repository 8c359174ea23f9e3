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
// One macro over the instruction's N, its accumulator count ACC (N / 2) and the operand
// numbers after the ACC accumulators (%0 .. %ACC-1): A's and B's descriptors, then scale-d.
#define FP8_WGMMA(N, ACC, DESC_A, DESC_B, SCALE_D, TA, TB)                                                         \
  KERNELS_SM90A_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SCALE_D                                                  \
                    ", 0;\n"                                                                                       \
                    "wgmma.mma_async.sync.aligned.m64n" #N "k32.f32." TA "." TB " {" KERNELS_WGMMA_ACC##ACC##_REGS \
                    "}, %" #DESC_A ", %" #DESC_B ", p, 1, 1;\n}\n" : KERNELS_WGMMA_ACC##ACC(d) : "l"(desc_a),      \
                    "l"(desc_b), "r"(scale_d))
// The instructions wrapped, as macros of the two input types (for FP8_WGMMA_PICK_TYPES).
// n16 / n32 (and n64 / n128): the swap-AB GEMV (gemv_tma.cuh), activation rows in the N slot.
#define FP8_WGMMA_M64N16K32(TA, TB) FP8_WGMMA(16, 8, 8, 9, 10, TA, TB)
#define FP8_WGMMA_M64N32K32(TA, TB) FP8_WGMMA(32, 16, 16, 17, 18, TA, TB)
#define FP8_WGMMA_M64N64K32(TA, TB) FP8_WGMMA(64, 32, 32, 33, 34, TA, TB)
#define FP8_WGMMA_M64N128K32(TA, TB) FP8_WGMMA(128, 64, 64, 65, 66, TA, TB)
#define FP8_WGMMA_M64N176K32(TA, TB) FP8_WGMMA(176, 88, 88, 89, 90, TA, TB)
#define FP8_WGMMA_M64N192K32(TA, TB) FP8_WGMMA(192, 96, 96, 97, 98, TA, TB)
#define FP8_WGMMA_M64N256K32(TA, TB) FP8_WGMMA(256, 128, 128, 129, 130, TA, TB)

template <int N, Format FA, Format FB>
__device__ __forceinline__ void wgmma_fp8(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(N == 16 || N == 32 || N == 64 || N == 128 || N == 176 || N == 192 || N == 256, "wrapped WGMMA n");
#define FP8_WGMMA_PICK_TYPES(MACRO)                                                     \
  if constexpr (FA == Format::kE4M3 && FB == Format::kE4M3) MACRO("e4m3", "e4m3");      \
  else if constexpr (FA == Format::kE4M3 && FB == Format::kE5M2) MACRO("e4m3", "e5m2"); \
  else if constexpr (FA == Format::kE5M2 && FB == Format::kE4M3) MACRO("e5m2", "e4m3"); \
  else MACRO("e5m2", "e5m2")
  if constexpr (N == 16) {
    FP8_WGMMA_PICK_TYPES(FP8_WGMMA_M64N16K32);
  } else if constexpr (N == 32) {
    FP8_WGMMA_PICK_TYPES(FP8_WGMMA_M64N32K32);
  } else if constexpr (N == 64) {
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

#undef FP8_WGMMA_M64N16K32
#undef FP8_WGMMA_M64N32K32
#undef FP8_WGMMA_M64N64K32
#undef FP8_WGMMA_M64N128K32
#undef FP8_WGMMA_M64N176K32
#undef FP8_WGMMA_M64N192K32
#undef FP8_WGMMA_M64N256K32
#undef FP8_WGMMA

}  // namespace kernels::fp8::gemm
