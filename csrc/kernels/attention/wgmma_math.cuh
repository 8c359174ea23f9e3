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

// One macro per form, over the instruction's shape, its accumulator count ACC (N / 2) and the
// operand numbers that follow the ACC accumulators (%0 .. %ACC-1): SS takes A's and B's
// descriptors, then scale-d; RS takes A's four registers, B's descriptor, then scale-d.
#define KERNELS_WGMMA_SS(SHAPE, ACC, DESC_A, DESC_B, SCALE_D, TYPE)                                                 \
  KERNELS_SM90A_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SCALE_D                                                   \
                    ", 0;\n"                                                                                        \
                    "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " {" KERNELS_WGMMA_ACC##ACC##_REGS  \
                    "}, %" #DESC_A ", %" #DESC_B ", p, 1, 1, 0, 0;\n}\n" : KERNELS_WGMMA_ACC##ACC(d) : "l"(desc_a), \
                    "l"(desc_b), "r"(scale_d))
#define KERNELS_WGMMA_RS(SHAPE, ACC, A0, A1, A2, A3, DESC_B, SCALE_D, TYPE)                                        \
  KERNELS_SM90A_ASM("{\n.reg .pred p;\nsetp.ne.b32 p, %" #SCALE_D                                                  \
                    ", 0;\n"                                                                                       \
                    "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " {" KERNELS_WGMMA_ACC##ACC##_REGS \
                    "}, {%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #DESC_B                                       \
                    ", p, 1, 1, 1;\n}\n" : KERNELS_WGMMA_ACC##ACC(d) : "r"(a[0]),                                  \
                    "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d))

// The instructions wrapped, as macros of the input type alone (for KERNELS_PICK_ELEMENT_TYPE).
#define KERNELS_WGMMA_SS_N64(TYPE) KERNELS_WGMMA_SS("m64n64k16", 32, 32, 33, 34, TYPE)
#define KERNELS_WGMMA_RS_N64(TYPE) KERNELS_WGMMA_RS("m64n64k16", 32, 32, 33, 34, 35, 36, 37, TYPE)
// 80-key S tiles at D = 256 (the warp-specialized prefill).
#define KERNELS_WGMMA_SS_N80(TYPE) KERNELS_WGMMA_SS("m64n80k16", 40, 40, 41, 42, TYPE)
#define KERNELS_WGMMA_SS_N128(TYPE) KERNELS_WGMMA_SS("m64n128k16", 64, 64, 65, 66, TYPE)
#define KERNELS_WGMMA_RS_N128(TYPE) KERNELS_WGMMA_RS("m64n128k16", 64, 64, 65, 66, 67, 68, 69, TYPE)
#define KERNELS_WGMMA_SS_N256(TYPE) KERNELS_WGMMA_SS("m64n256k16", 128, 128, 129, 130, TYPE)
#define KERNELS_WGMMA_RS_N256(TYPE) KERNELS_WGMMA_RS("m64n256k16", 128, 128, 129, 130, 131, 132, 133, TYPE)

// The wrappers: N (64, 128 or 256; SS also 80) picks the instruction, Element its input type.
template <class Element, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(N == 64 || N == 80 || N == 128 || N == 256, "wrapped WGMMA n");
  if constexpr (N == 64) {
    KERNELS_PICK_ELEMENT_TYPE(KERNELS_WGMMA_SS_N64);
  } else if constexpr (N == 80) {
    KERNELS_PICK_ELEMENT_TYPE(KERNELS_WGMMA_SS_N80);
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
#undef KERNELS_WGMMA_SS_N80
#undef KERNELS_WGMMA_RS_N64
#undef KERNELS_WGMMA_SS_N128
#undef KERNELS_WGMMA_RS_N128
#undef KERNELS_WGMMA_SS_N256
#undef KERNELS_WGMMA_RS_N256
#undef KERNELS_WGMMA_SS
#undef KERNELS_WGMMA_RS

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
  static_assert(kBlockN == 64 || kBlockN == 80 || kBlockN == 128 || kBlockN == 256,
                "S tile width is a wrapped SS WGMMA n; P V takes its keys 16 at a time");
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
    // One descriptor per operand, advanced by a constant per k step (an add, where building each
    // from its address takes four instructions: they ran inside the warpgroup's turn).
    const uint64_t q_desc = make_sw128_kmajor_desc(smem_addr(sQ));
    const uint64_t k_desc = make_sw128_kmajor_desc(smem_addr(sK));
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      // k step ks: panel ks / 4, 32 bytes per step inside the 128-byte row.
      const int q_off = (ks / 4) * QSmemTile::kPanelElems + (ks % 4) * 16;
      const int k_off = (ks / 4) * KVSmemTile::kPanelElems + (ks % 4) * 16;
      wgmma_ss<Element, kBlockN>(d, sw128_desc_advance(q_desc, q_off * sizeof(Element)),
                                 sw128_desc_advance(k_desc, k_off * sizeof(Element)), ks > 0);
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
    // 16 keys = two 8-row groups (SBO); head_dim panels of 64 columns (LBO).
    const uint64_t v_desc = make_sw128_desc(smem_addr(sV), KVSmemTile::kPanelElems * sizeof(Element), 1024);
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < kNT / 2; ++kc) {
      wgmma_rs<Element, kD>(d, a[0][kc], sw128_desc_advance(v_desc, kc * 16 * 64 * sizeof(Element)), 1);
    }
    wgmma_commit();
  }
};

}  // namespace kernels::attention
