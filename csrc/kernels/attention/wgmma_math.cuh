// Warpgroup math for the Hopper prefill: S = Q K^T and O += P V with wgmma.mma_async
// (sm_90a), on the same C-fragment layout as the warp-level math in tile_ops.cuh.
//
// A warpgroup (4 warps) owns 64 query rows; warp w of it holds rows 16w..16w+15, and the
// accumulator of m64nNk16 gives each thread exactly the mma.sync m16n8 C fragment of those
// rows for every 8 columns, in order. So the masking, the online softmax and the epilogue are
// shared with the mma.sync kernels, with kMT = 1 and 16 rows per warp. P feeds P V straight
// from registers (the RS form): its A fragment is the m16n8k16 A fragment.
//
// Shared memory: Q, K and V tiles in the 128-byte swizzle (Sw128Tile), written by cp.async.
// Q and K are K-major operands (head_dim contiguous); V is read as an N-major B operand
// (head_dim = N contiguous), so all three share one layout and one loader.
#pragma once

#include <cstdint>

#include "../common/sm90.cuh"
#include "../common/smem.cuh"
#include "tile_ops.cuh"  // ElementOps, KERNELS_PICK_ELEMENT_TYPE, pack_p_fragments

namespace kernels::attention {

// [kRows][kD] 16-bit elements in 64-column (128-byte) panels of kRows rows each; row r of a panel sits at
// r * 128 bytes with its 16-byte chunks permuted by chunk ^ (r % 8), the hardware's 128-byte
// swizzle. The tile base must be 1024-byte aligned.
template <int kD, int kRows>
struct Sw128Tile {
  static_assert(kD % 64 == 0, "128-byte swizzled panels need head_dim a multiple of 64");
  static_assert(kRows % 8 == 0, "swizzle atoms are 8 rows");
  static constexpr int kElems = kRows * kD;
  static constexpr int kPanelElems = kRows * 64;
  // Element offset of 16-byte chunk `chunk` (8 elements) of row `row`.
  __device__ __forceinline__ static int offset(int row, int chunk) {
    return (chunk / 8) * kPanelElems + row * 64 + ((chunk % 8) ^ (row % 8)) * 8;
  }
};

// ---- wgmma.mma_async wrappers (bf16 or fp16 inputs, f32 accumulate) ---------------------
// SS: A and B from shared memory, both K-major. RS: A from registers, B N-major (V).
// scale_d = 0 overwrites the accumulators instead of adding to them. Each instruction is
// written once, as a macro over its PTX input type ("bf16" or "f16"); wgmma_ss / wgmma_rs
// pick the macro by N and its type by Element (KERNELS_PICK_ELEMENT_TYPE, primitives.cuh).

// m64n64k16 SS: 32 f32 accumulators; %32, %33 descriptors, %34 scale-d.
#define KERNELS_WGMMA_SS_N64(TYPE)                                                                                \
  KERNELS_SM90A_ASM(                                                                                              \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                                \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                                 \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                  \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                         \
      "%32, %33, p, 1, 1, 0, 0;\n}\n" : "+f"(d[0]),                                                               \
      "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), \
      "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),     \
      "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),     \
      "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) : "l"(desc_a), "l"(desc_b),    \
      "r"(scale_d))

// m64n64k16 RS, B N-major: 32 f32 accumulators; %32-%35 A, %36 descriptor, %37 scale-d.
#define KERNELS_WGMMA_RS_N64(TYPE)                                                                                    \
  KERNELS_SM90A_ASM(                                                                                                  \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                                    \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                                     \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                      \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "                             \
      "{%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n" : "+f"(d[0]),                                                     \
      "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),     \
      "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),         \
      "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),         \
      "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), \
      "r"(a[3]), "l"(desc_b), "r"(scale_d))

// m64n128k16 SS: 64 f32 accumulators; %64, %65 descriptors, %66 scale-d.
#define KERNELS_WGMMA_SS_N128(TYPE)                                                                               \
  KERNELS_SM90A_ASM(                                                                                              \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                                \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                                                \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                  \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                          \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                          \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "                         \
      "%64, %65, p, 1, 1, 0, 0;\n}\n" : "+f"(d[0]),                                                               \
      "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), \
      "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),     \
      "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),     \
      "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]),     \
      "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),     \
      "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),     \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),     \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) : "l"(desc_a), "l"(desc_b),    \
      "r"(scale_d))

// m64n128k16 RS, B N-major: 64 f32 accumulators; %64-%67 A, %68 descriptor, %69 scale-d.
#define KERNELS_WGMMA_RS_N128(TYPE)                                                                                   \
  KERNELS_SM90A_ASM(                                                                                                  \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                                    \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                                                    \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                      \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                              \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                              \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "                             \
      "{%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n" : "+f"(d[0]),                                                     \
      "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),     \
      "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),         \
      "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),         \
      "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]),         \
      "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),         \
      "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),         \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),         \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), \
      "r"(a[3]), "l"(desc_b), "r"(scale_d))

// m64n256k16 SS: 128 f32 accumulators; %128, %129 descriptors, %130 scale-d.
#define KERNELS_WGMMA_SS_N256(TYPE)                                                                                   \
  KERNELS_SM90A_ASM(                                                                                                  \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                                   \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE                                                    \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                      \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                              \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                              \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                              \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                              \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                              \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "                  \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "             \
      "%128, %129, p, 1, 1, 0, 0;\n}\n" : "+f"(d[0]),                                                                 \
      "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),     \
      "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),         \
      "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),         \
      "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]),         \
      "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),         \
      "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),         \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),         \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),         \
      "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]),         \
      "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]),         \
      "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),         \
      "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),         \
      "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]),   \
      "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), \
      "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), \
      "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) : "l"(desc_a), "l"(desc_b),  \
      "r"(scale_d))

// m64n256k16 RS, B N-major: 128 f32 accumulators; %128-%131 A, %132 descriptor, %133 scale-d.
#define KERNELS_WGMMA_RS_N256(TYPE)                                                                                   \
  KERNELS_SM90A_ASM(                                                                                                  \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"                                                                   \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE                                                    \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                      \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                              \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                              \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                              \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                              \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                              \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "                  \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "             \
      "{%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n" : "+f"(d[0]),                                                \
      "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),     \
      "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),         \
      "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),         \
      "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]),         \
      "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),         \
      "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),         \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),         \
      "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),         \
      "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]),         \
      "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]),         \
      "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),         \
      "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),         \
      "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]),   \
      "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), \
      "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), \
      "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) : "r"(a[0]), "r"(a[1]),      \
      "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

// The wrappers: N (64, 128 or 256) picks the instruction, Element its input type.
template <class Element, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wrapped WGMMA n");
  if constexpr (N == 64) {
    KERNELS_PICK_ELEMENT_TYPE(KERNELS_WGMMA_SS_N64);
  } else if constexpr (N == 128) {
    KERNELS_PICK_ELEMENT_TYPE(KERNELS_WGMMA_SS_N128);
  } else {
    KERNELS_PICK_ELEMENT_TYPE(KERNELS_WGMMA_SS_N256);
  }
}

template <class Element, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wrapped WGMMA n");
  if constexpr (N == 64) {
    KERNELS_PICK_ELEMENT_TYPE(KERNELS_WGMMA_RS_N64);
  } else if constexpr (N == 128) {
    KERNELS_PICK_ELEMENT_TYPE(KERNELS_WGMMA_RS_N128);
  } else {
    KERNELS_PICK_ELEMENT_TYPE(KERNELS_WGMMA_RS_N256);
  }
}

#undef KERNELS_WGMMA_SS_N64
#undef KERNELS_WGMMA_RS_N64
#undef KERNELS_WGMMA_SS_N128
#undef KERNELS_WGMMA_RS_N128
#undef KERNELS_WGMMA_SS_N256
#undef KERNELS_WGMMA_RS_N256

// ---- the math policy ---------------------------------------------------------------------
// qk: acc_s = Q[the warpgroup's 64 rows] @ K[kBlockN keys]^T; pv: acc_o += P @ V. Both are
// issued by the whole warpgroup and waited for before returning, so callers see plain
// registers, as with the warp-level math (qk_issue / pv_issue / wait_all split them). sQ points at the warpgroup's
// first row in panel 0 (QSmemTile::offset(row, 0)); sK and sV at Sw128Tile<kD, kBlockN> tiles.
template <class Element, int kD, int kBlockM, int kBlockN>
struct WgmmaMath {
  static constexpr int kNT = kBlockN / 8;
  static constexpr int kDT = kD / 8;
  static constexpr bool kAsyncProxy = true;  // operands are read through the async proxy
  using QSmemTile = Sw128Tile<kD, kBlockM>;
  using KVSmemTile = Sw128Tile<kD, kBlockN>;
  static_assert(kBlockN == 64 || kBlockN == 128 || kBlockN == 256, "S tile width is a WGMMA n");
  static_assert(kD == 64 || kD == 128 || kD == 256, "O tile width is a WGMMA n");

  __device__ __forceinline__ static int first_q_row(int warp) { return (warp / 4) * 64; }

  __device__ static void qk(float (&acc)[1][kNT][4], const Element* sQ, const Element* sK) {
    qk_issue(acc, sQ, sK);
    wait_all();
  }

  __device__ static void pv(float (&acc_o)[1][kDT][4], const float (&p)[1][kNT][4], const Element* sV) {
    pv_issue(acc_o, p, sV);
    wait_all();
  }

  // The asynchronous halves: each issues its WGMMAs as one commit group; the accumulators
  // (and P's registers) belong to the tensor cores until wait_all().
  __device__ __forceinline__ static void wait_all() { wgmma_wait<0>(); }

  __device__ static void qk_issue(float (&acc)[1][kNT][4], const Element* sQ, const Element* sK) {
    float (&d)[kBlockN / 2] = reinterpret_cast<float (&)[kBlockN / 2]>(acc);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      // k step ks: panel ks / 4, 32 bytes per step inside the 128-byte row.
      const int q_off = (ks / 4) * QSmemTile::kPanelElems + (ks % 4) * 16;
      const int k_off = (ks / 4) * KVSmemTile::kPanelElems + (ks % 4) * 16;
      wgmma_ss<Element, kBlockN>(d, make_sw128_kmajor_desc(smem_addr(sQ + q_off)),
                                 make_sw128_kmajor_desc(smem_addr(sK + k_off)), ks > 0);
    }
    wgmma_commit();
  }

  __device__ static void pv_issue(float (&acc_o)[1][kDT][4], const float (&p)[1][kNT][4], const Element* sV) {
    uint32_t a[1][kNT / 2][4];
    pack_p_fragments<Element, 1, kNT>(a, p);
    pv_issue(acc_o, a, sV);
  }

  // P already packed into Element A fragments (pack_p_fragments): the registers must stay
  // untouched until wait_all().
  __device__ static void pv_issue(float (&acc_o)[1][kDT][4], const uint32_t (&a)[1][kNT / 2][4], const Element* sV) {
    float (&d)[kD / 2] = reinterpret_cast<float (&)[kD / 2]>(acc_o);
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < kNT / 2; ++kc) {
      // 16 keys = two 8-row groups (SBO); head_dim panels of 64 columns (LBO).
      wgmma_rs<Element, kD>(d, a[0][kc],
                            make_sw128_desc(smem_addr(sV + kc * 16 * 64), KVSmemTile::kPanelElems * 2, 1024), 1);
    }
    wgmma_commit();
  }
};

}  // namespace kernels::attention
