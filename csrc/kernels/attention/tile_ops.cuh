// Building blocks shared by the decode and prefill kernel bodies: tile loads into shared
// memory (padded here; the loaders take a tile policy), the two warp-level math policies
// (tensor-core and scalar) working on the same C-fragment layout, masking, and the online
// softmax.
//
// Shared-memory tiles are row-major [rows][kD] elements (bf16 or fp16) with a row stride of
// kD + 8 elements: the 16-byte pad puts the 8 rows an ldmatrix reads in 8 different bank groups.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "../common/cuda_utils.cuh"
#include "attn_params.h"
#include "policies.cuh"
#include "primitives.cuh"

namespace kernels::attention {

template <int kD>
__host__ __device__ constexpr int smem_stride() {
  return kD + 8;
}

// The padded [rows][kD] layout above as a tile policy: element offset of 16-byte chunk
// `chunk` of row `row`. The loaders take a tile policy, so the Hopper prefill can write its
// swizzled tiles (Sw128Tile, wgmma_math.cuh) with the same code.
template <int kD>
struct PaddedTile {
  static constexpr int kRowElems = smem_stride<kD>();
  static constexpr bool kLinear = true;  // offset(r + dr, c + dc) = offset(r, c) + offset(dr, dc)
  __host__ __device__ __forceinline__ static int offset(int row, int chunk) {
    return row * smem_stride<kD>() + chunk * 8;
  }
};

// Unpadded rows of kD elements whose 16-byte chunks are permuted within each 128-byte segment
// by chunk ^ (row % 8): a 128-byte line of a global row lands on one 128-byte-aligned segment
// of shared memory (in the padded layout it straddles two in 7 rows of 8), and the 8 rows an
// ldmatrix reads at one logical chunk still sit in 8 different bank groups. The tile base must
// be 128-byte aligned.
template <int kD>
struct RowSwizzledTile {
  static_assert(kD % 64 == 0, "128-byte segments need head_dim a multiple of 64");
  static constexpr int kRowElems = kD;
  static constexpr bool kLinear = false;
  __host__ __device__ __forceinline__ static int offset(int row, int chunk) {
    return row * kD + ((chunk & ~7) | ((chunk & 7) ^ (row & 7))) * 8;
  }
};

// An FP8 KV cache's element type.
using e4m3 = __nv_fp8_e4m3;

// An FP8 KV cache's rows as the decode ring holds them: kD e4m3 bytes per row, unpadded, whose
// 16-byte chunks are permuted so that the 8 rows an ldmatrix reads at one chunk sit in 8
// different bank groups: chunk ^ row % 8 within each 128-byte segment, or, for rows of 64 bytes
// (two per segment), chunk ^ (row / 2) % 4.
template <int kD>
struct ByteSwizzledTile {
  static_assert(kD % 64 == 0, "rows of whole 64-byte halves of a segment");
  static constexpr int kRowElems = kD;
  static constexpr int kChunkMask = kD >= 128 ? 7 : 3;  // the chunk bits the swizzle permutes
  __host__ __device__ __forceinline__ static int swizzle(int row) { return kD >= 128 ? row & 7 : (row >> 1) & 3; }
  __host__ __device__ __forceinline__ static int offset(int row, int chunk) {
    return row * kD + ((chunk & ~kChunkMask) | ((chunk & kChunkMask) ^ swizzle(row))) * 16;
  }
  // Offset of (row + dr, chunk + dc) for a lane at (row, chunk) whose own offset is lane_offset,
  // dr a multiple of 8 (the swizzle of row kept) and dc's low bits clear of the lane's chunk: one
  // XOR by a constant, then a constant add (as tile_step on a RowSwizzledTile).
  __host__ __device__ __forceinline__ static int step(int lane_offset, int dr, int dc) {
    return (lane_offset ^ ((dc & kChunkMask) * 16)) + dr * kD + (dc & ~kChunkMask) * 16;
  }
};

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// ---- tile loads ------------------------------------------------------------------------
// Each thread owns one 16-byte column chunk and walks rows, so per-row address math (a
// page-table lookup for paged KV) happens once per row per thread, not once per chunk.

// Q rows: row_src(r) returns the global row start, or nullptr for a row past the end.
template <class Element, int kRows, int kD, int kThreads, class Tile = PaddedTile<kD>, class RowSrc>
__device__ __forceinline__ void load_q_tile(Element* sQ, const void* any_valid_ptr, RowSrc row_src) {
  constexpr int kChunks = kD / 8;
  static_assert(kThreads % kChunks == 0, "threads must cover whole rows of 16-byte chunks");
  constexpr int kRowsPerPass = kThreads / kChunks;
  const int chunk = threadIdx.x % kChunks;
#pragma unroll
  for (int r = threadIdx.x / kChunks; r < kRows; r += kRowsPerPass) {
    const Element* src = row_src(r);
    const bool valid = src != nullptr;
    cp_async_16(smem_addr(sQ + Tile::offset(r, chunk)),
                valid ? static_cast<const void*>(src + chunk * 8) : any_valid_ptr, valid);
  }
}

// Copies the page-table entries of keys [first_key, min(first_key + kKeys, kv_len)) into
// `entries` (at most kKeys ints) with 4-byte cp.async in the caller's commit group.
template <int kKeys, int kThreads, class KV>
__device__ __forceinline__ void stage_page_entries(int* entries, const AttnParams& p, int b, int first_key,
                                                   int kv_len) {
  static_assert(KV::kPaged, "only paged KV has page-table entries");
  if (first_key >= kv_len) return;
  const int first = KV::page_index(p, first_key);
  const int count = KV::page_index(p, min(first_key + kKeys, kv_len) - 1) - first + 1;
  const int* src = KV::page_row(p, b) + first;
  for (int t = threadIdx.x; t < count; t += kThreads) cp_async_4(smem_addr(entries + t), src + t);
}

// Rows [first_key, first_key + kRows) of K (kLoadK) and / or V (kLoadV) of kv head hkv into
// smem tiles laid out by Tile; keys >= kv_len are zero-filled. Thread t copies 16-byte column chunk
// t % kChunks of kPerThread consecutive rows. The tile starts at a multiple of kRows, so with
// contiguous KV, or a page size that is a multiple of kPerThread, a thread's rows share a page:
// one lookup and a pointer step per row replace per-row address math. Other page sizes look
// every row up. lookup(pos) gives key pos's KV::Handle; it is called for pos < kv_len.
// Element may be 16-bit or e4m3 (a chunk then holds 16 elements; Tile a ByteSwizzledTile).
template <class Element, int kRows, int kD, int kThreads, class KV, bool kLoadK, bool kLoadV,
          class Tile = PaddedTile<kD>, class Lookup>
__device__ __forceinline__ void load_kv_rows(Element* sK, Element* sV, const AttnParams& p, int b, int hkv,
                                             int first_key, int kv_len, Lookup lookup) {
  constexpr int kChunkElems = 16 / static_cast<int>(sizeof(Element));
  constexpr int kChunks = kD / kChunkElems;
  static_assert(kThreads % kChunks == 0, "threads must cover whole rows of 16-byte chunks");
  constexpr int kRowsPerPass = kThreads / kChunks;
  static_assert(kRows % kRowsPerPass == 0, "threads must cover the tile in whole passes");
  constexpr int kPerThread = kRows / kRowsPerPass;
  const int chunk = threadIdx.x % kChunks;
  const int r0 = (static_cast<int>(threadIdx.x) / kChunks) * kPerThread;
  const int pos0 = first_key + r0;
  const Element* k_base = static_cast<const Element*>(p.k) + hkv * p.k_head_stride + chunk * kChunkElems;
  const Element* v_base = static_cast<const Element*>(p.v) + hkv * p.v_head_stride + chunk * kChunkElems;
  const auto copy = [&](int j, const KvRow& off, bool valid) {
    const int s = Tile::offset(r0 + j, chunk);
    if constexpr (kLoadK) cp_async_16(smem_addr(sK + s), k_base + off.k, valid);
    if constexpr (kLoadV) cp_async_16(smem_addr(sV + s), v_base + off.v, valid);
  };
  if (!KV::kPaged || p.page_size % kPerThread == 0) {
    // Invalid rows are zero-filled without a read, so their (out-of-row) addresses are unused.
    KvRow off = pos0 < kv_len ? KV::row(p, b, pos0, lookup(pos0)) : KvRow{0, 0};
    // Unrolled by at most 8 rows: 16 (D = 256) made ptxas spill the scalar decode kernel.
#pragma unroll 8
    for (int j = 0; j < kPerThread; ++j) {
      copy(j, off, pos0 + j < kv_len);
      off.k += p.k_token_stride;
      off.v += p.v_token_stride;
    }
  } else {
    // Two rows at a time: fully unrolled, the lookups push the D = 128 paged prefill
    // kernel past 255 registers.
#pragma unroll 2
    for (int j = 0; j < kPerThread; ++j) {
      const int pos = pos0 + j;
      const bool valid = pos < kv_len;
      copy(j, valid ? KV::row(p, b, pos, lookup(pos)) : KvRow{0, 0}, valid);
    }
  }
}

// K and V rows [first_key, first_key + kRows), pages looked up in the global page table.
template <class Element, int kRows, int kD, int kThreads, class KV, class Tile = PaddedTile<kD>>
__device__ __forceinline__ void load_kv_tile(Element* sK, Element* sV, const AttnParams& p, int b, int hkv,
                                             int first_key, int kv_len) {
  load_kv_rows<Element, kRows, kD, kThreads, KV, true, true, Tile>(sK, sV, p, b, hkv, first_key, kv_len,
                                                                   [&](int pos) { return KV::locate(p, b, pos); });
}

// ---- e4m3 K / V straight into fp16 B fragments ------------------------------------------------
// Four e4m3 bytes [b0 b1 b2 b3] -> the fp16 pairs (b0, b2) and (b1, b3), exactly: every e4m3
// value is an fp16 value. One byte permute and two hardware conversions.
__device__ __forceinline__ void e4m3x4_to_f16_pairs(uint32_t four, uint32_t& even, uint32_t& odd) {
  const uint32_t split = __byte_perm(four, 0u, 0x3120);  // [b0 b2 b1 b3]
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(even) : "h"(static_cast<uint16_t>(split)));
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(odd) : "h"(static_cast<uint16_t>(split >> 16)));
}

// Q for E4m3KvMath, in place: the CTA's Q tile of Element rows (Tile) becomes fp16 rows whose
// columns, within every 16, are permuted as the K fragments' bytes arrive: logical column
// 2t + i holds physical column 4t + 2i, logical 8 + 2t + i holds 4t + 1 + 2i (t < 4, i < 2).
// Q K^T sums over the columns, so permuting Q's and K's alike leaves S unchanged. bf16 queries
// are scaled by 2^s so that the tile's largest magnitude lies in [2^14, 2^15) (every value
// above amax * 2^-29 is then an exact fp16 normal); returns 2^-s (1 for fp16 queries), which
// the caller folds into the softmax scale. Ends with a barrier; s_amax: kThreads / 32 floats.
template <class Element, int kRows, int kD, int kThreads, class Tile>
__device__ float q_to_permuted_f16(Element* sQ, float* s_amax) {
  constexpr int kQuads = kD / 4;  // groups of 4 physical columns: 16 * c + 4 * t
  static_assert((kRows * kQuads) % kThreads == 0, "whole passes over the tile");
  constexpr int kPerThread = kRows * kQuads / kThreads;
  using Ops = ElementOps<Element>;
  float2 lo[kPerThread], hi[kPerThread];  // physical columns (4t, 4t + 1), (4t + 2, 4t + 3)
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int idx = threadIdx.x + j * kThreads, row = idx / kQuads, quad = idx % kQuads;
    const auto* src = reinterpret_cast<const typename Ops::Pair*>(sQ + Tile::offset(row, quad / 2) + 4 * (quad % 2));
    lo[j] = Ops::to_float2(src[0]);
    hi[j] = Ops::to_float2(src[1]);
    amax = fmaxf(amax, fmaxf(fmaxf(fabsf(lo[j].x), fabsf(lo[j].y)), fmaxf(fabsf(hi[j].x), fabsf(hi[j].y))));
  }
  float scale = 1.f, inverse = 1.f;
  if constexpr (kIsBf16<Element>) {
    amax = warp_reduce_max(amax);
    if (threadIdx.x % 32 == 0) s_amax[threadIdx.x / 32] = amax;
  }
  __syncthreads();  // every read of the 16-bit tile is done (and, bf16, every warp's amax written)
  if constexpr (kIsBf16<Element>) {
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) amax = fmaxf(amax, s_amax[w]);
    if (amax > 0.f && amax <= 3.0e38f) {  // NaN, inf and an all-zero tile keep scale 1
      int exponent;
      frexpf(amax, &exponent);  // amax < 2^exponent
      scale = ldexpf(1.f, 15 - exponent);
      inverse = ldexpf(1.f, exponent - 15);
    }
  }
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int idx = threadIdx.x + j * kThreads, row = idx / kQuads, quad = idx % kQuads;
    const int c = quad / 4, t = quad % 4;
    __half2* dst = reinterpret_cast<__half2*>(sQ);
    dst[(Tile::offset(row, 2 * c) + 2 * t) / 2] = __floats2half2_rn(lo[j].x * scale, hi[j].x * scale);
    dst[(Tile::offset(row, 2 * c + 1) + 2 * t) / 2] = __floats2half2_rn(lo[j].y * scale, hi[j].y * scale);
  }
  __syncthreads();
  return inverse;
}

// P (softmax numerators in the S accumulators) -> Element A fragments of P @ V: the
// accumulator of keys [16kc, 16kc + 16) is exactly the A fragment of that 16-key slice.
template <class Element, int kMT, int kNT>
__device__ __forceinline__ void pack_p_fragments(uint32_t (&pa)[kMT][kNT / 2][4], const float (&s)[kMT][kNT][4]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int kc = 0; kc < kNT / 2; ++kc) {
      pa[mt][kc][0] = pack2<Element>(s[mt][2 * kc][0], s[mt][2 * kc][1]);
      pa[mt][kc][1] = pack2<Element>(s[mt][2 * kc][2], s[mt][2 * kc][3]);
      pa[mt][kc][2] = pack2<Element>(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1]);
      pa[mt][kc][3] = pack2<Element>(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3]);
    }
}

// ---- warp-level math on C fragments -----------------------------------------------------
// qk: acc_s[mt][nt] = Q[16*kMT rows] @ K[8*kNT keys]^T over kD (sQ, sK: the warp's first row/key)
// pv: acc_o[mt][dt] += P[16*kMT rows][8*kNT keys] @ V[8*kNT keys][kD]

// Offset of (row + dr, chunk + dc), dr and dc compile-time steps, for a lane at (row, chunk)
// whose own offset is lane_offset: one constant add on a linear (padded) tile, as the padded
// kernels always addressed it. On a row-swizzled tile, with dr a multiple of 8 (row % 8 kept)
// and the lane's chunk < 8 with dc's low bits clear of it (chunk + dc == chunk ^ dc below 8),
// the swizzled chunk is (chunk ^ row % 8) ^ (dc % 8): one XOR of the lane's offset by a
// constant, then a constant add.
template <class Tile>
__host__ __device__ __forceinline__ int tile_step(int lane_offset, int dr, int dc) {
  if constexpr (Tile::kLinear) {
    return lane_offset + Tile::offset(dr, dc);
  } else {
    return (lane_offset ^ ((dc & 7) * 8)) + dr * Tile::kRowElems + (dc & ~7) * 8;
  }
}

// qk and pv read their tiles (padded by default; Tile: PaddedTile or RowSwizzledTile for Q, K and
// V alike) through the generic proxy; sQ / sK / sV point at the warp's first row or key, a
// multiple of 16 rows into its tile (so the swizzle's row % 8 is that of the tile), and a
// warp's operand rows start at first_q_row(warp) of the Q tile (WgmmaMath in wgmma_math.cuh has
// the same contract).
template <int kMT, int kD, class Tile = PaddedTile<kD>>
struct WarpMathTiles {
  using QSmemTile = Tile;
  using KVSmemTile = Tile;
  static constexpr bool kAsyncProxy = false;
  __device__ __forceinline__ static int first_q_row(int warp) { return warp * 16 * kMT; }
};

template <class Element, int kMT, int kNT, int kD, class Tile = PaddedTile<kD>>
struct TensorCoreMath : WarpMathTiles<kMT, kD, Tile> {
  static_assert(kNT % 2 == 0, "P @ V consumes keys 16 at a time");
  static constexpr int kDT = kD / 8;

  __device__ static void qk(float (&acc)[kMT][kNT][4], const Element* sQ, const Element* sK) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
    // ldmatrix row addresses: A matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) in a0..a3 order;
    // B matrices (keys 0-7, k 0-7), (keys 0-7, k 8-15), (keys 8-15, k 0-7), (keys 8-15, k 8-15)
    const int q_lane = Tile::offset(lane % 16, lane / 16);
    const int k_lane = Tile::offset((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
#pragma unroll
    for (int kc = 0; kc < kD / 16; ++kc) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) ldmatrix_x4(a[mt], smem_addr(sQ + tile_step<Tile>(q_lane, mt * 16, 2 * kc)));
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_addr(sK + tile_step<Tile>(k_lane, np * 16, 2 * kc)));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_16816<Element>(acc[mt][2 * np], a[mt], b[0], b[1]);
          mma_16816<Element>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }

  __device__ static void pv(float (&acc_o)[kMT][kDT][4], const float (&p)[kMT][kNT][4], const Element* sV) {
    const int lane = threadIdx.x % 32;
    // V^T fragments by ldmatrix.trans: matrices (keys 0-7, d 0-7), (keys 8-15, d 0-7),
    // (keys 0-7, d 8-15), (keys 8-15, d 8-15) -> b0, b1 of d tile 0, b0, b1 of d tile 1
    const int v_lane = Tile::offset(((lane / 8) % 2) * 8 + lane % 8, lane / 16);
#pragma unroll
    for (int kc = 0; kc < kNT / 2; ++kc) {
      // The S accumulator of keys [16kc, 16kc + 16) is exactly the A fragment of P.
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a[mt][0] = pack2<Element>(p[mt][2 * kc][0], p[mt][2 * kc][1]);
        a[mt][1] = pack2<Element>(p[mt][2 * kc][2], p[mt][2 * kc][3]);
        a[mt][2] = pack2<Element>(p[mt][2 * kc + 1][0], p[mt][2 * kc + 1][1]);
        a[mt][3] = pack2<Element>(p[mt][2 * kc + 1][2], p[mt][2 * kc + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < kDT / 2; ++dp) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, smem_addr(sV + tile_step<Tile>(v_lane, kc * 16, 2 * dp)));
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_16816<Element>(acc_o[mt][2 * dp], a[mt], b[0], b[1]);
          mma_16816<Element>(acc_o[mt][2 * dp + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }
};

// The same contract with FP32 FMAs reading shared memory: each thread computes exactly the
// C-fragment elements the MMA would give it. P stays in FP32 (no rounding to Element).
template <class Element, int kMT, int kNT, int kD>
struct ScalarMath : WarpMathTiles<kMT, kD> {
  static constexpr int kDT = kD / 8;
  using Ops = ElementOps<Element>;
  using Pair = typename Ops::Pair;

  __device__ static void qk(float (&acc)[kMT][kNT][4], const Element* sQ, const Element* sK) {
    constexpr int S = smem_stride<kD>();
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const Pair* q0 = reinterpret_cast<const Pair*>(sQ + (mt * 16 + g) * S);
      const Pair* q1 = reinterpret_cast<const Pair*>(sQ + (mt * 16 + g + 8) * S);
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const Pair* k0 = reinterpret_cast<const Pair*>(sK + (nt * 8 + 2 * t) * S);
        const Pair* k1 = reinterpret_cast<const Pair*>(sK + (nt * 8 + 2 * t + 1) * S);
        float s00 = 0.f, s01 = 0.f, s10 = 0.f, s11 = 0.f;
#pragma unroll 2
        for (int d2 = 0; d2 < kD / 2; ++d2) {
          const float2 x0 = Ops::to_float2(q0[d2]), x1 = Ops::to_float2(q1[d2]);
          const float2 y0 = Ops::to_float2(k0[d2]), y1 = Ops::to_float2(k1[d2]);
          s00 = fmaf(x0.x, y0.x, fmaf(x0.y, y0.y, s00));
          s01 = fmaf(x0.x, y1.x, fmaf(x0.y, y1.y, s01));
          s10 = fmaf(x1.x, y0.x, fmaf(x1.y, y0.y, s10));
          s11 = fmaf(x1.x, y1.x, fmaf(x1.y, y1.y, s11));
        }
        acc[mt][nt][0] = s00;
        acc[mt][nt][1] = s01;
        acc[mt][nt][2] = s10;
        acc[mt][nt][3] = s11;
      }
    }
  }

  __device__ static void pv(float (&acc_o)[kMT][kDT][4], const float (&p)[kMT][kNT][4], const Element* sV) {
    constexpr int S = smem_stride<kD>();
    const int lane = threadIdx.x % 32, t = lane % 4, quad = lane & ~3;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        // The four lanes of a quad hold a row's keys 2t, 2t + 1 of this n tile.
#pragma unroll 1
        for (int src = 0; src < 4; ++src) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float p0 = __shfl_sync(0xffffffffu, p[mt][nt][c], quad + src);
            const float p1 = __shfl_sync(0xffffffffu, p[mt][nt][2 + c], quad + src);
            const Pair* vrow = reinterpret_cast<const Pair*>(sV + (nt * 8 + 2 * src + c) * S);
#pragma unroll
            for (int dt = 0; dt < kDT; ++dt) {
              const float2 v = Ops::to_float2(vrow[dt * 4 + t]);
              acc_o[mt][dt][0] = fmaf(p0, v.x, acc_o[mt][dt][0]);
              acc_o[mt][dt][1] = fmaf(p0, v.y, acc_o[mt][dt][1]);
              acc_o[mt][dt][2] = fmaf(p1, v.x, acc_o[mt][dt][2]);
              acc_o[mt][dt][3] = fmaf(p1, v.y, acc_o[mt][dt][3]);
            }
          }
        }
      }
    }
  }
};

// Tile: the tensor-core math reads any tile layout; the scalar math reads padded tiles only.
template <AttnImpl kImpl, class Element, int kMT, int kNT, int kD, class Tile = PaddedTile<kD>>
using WarpMath = typename std::conditional<kImpl == AttnImpl::kTensorCore, TensorCoreMath<Element, kMT, kNT, kD, Tile>,
                                           ScalarMath<Element, kMT, kNT, kD>>::type;

// The tensor-core math of the decode over an e4m3 ring: K and V fragments by ldmatrix from the
// bytes (ByteSwizzledTile), unpacked in registers into fp16 B fragments, fp16 MMAs against Q
// from q_to_permuted_f16; no converted tile in shared memory. Same contract as TensorCoreMath
// (kMT = 1), but the output columns are permuted: d tile 2c + e holds the physical columns
// 16c + 2n + e (n its fragment column), so a lane's C fragment of d tiles 2c and 2c + 1 covers
// the 4 contiguous columns 16c + 4t .. 16c + 4t + 3 (store_o_row).
//
// An 8 x 8 b16 matrix of the byte tile is 8 keys x 16 bytes. K (ldmatrix): lane (g, t) gets key
// g's bytes 4t..4t+3 = Q K^T's k (2t, 2t+1) and (2t+8, 2t+9) in Q's permuted order. V
// (ldmatrix.trans): lane (g, t) gets keys 2t, 2t+1 x bytes 2g, 2g+1, whose even bytes are
// P V's b operand (keys 2t, 2t+1) at column 2g, its odd bytes at column 2g + 1.
template <int kNT, int kD, class QTile>
struct E4m3KvMath {
  static_assert(kNT % 2 == 0, "P @ V consumes keys 16 at a time");
  using KvTile = ByteSwizzledTile<kD>;
  static constexpr int kDT = kD / 8;

  // ldmatrix rows of lane l: keys ((l / 8) % 2) * 8 + l % 8 at chunk l / 16, i.e. matrices
  // (keys 0-7, chunk c), (keys 8-15, chunk c), (keys 0-7, chunk c + 1), (keys 8-15, chunk c + 1).
  __device__ __forceinline__ static int kv_lane_offset() {
    const int lane = threadIdx.x % 32;
    return KvTile::offset(((lane / 8) % 2) * 8 + lane % 8, lane / 16);
  }

  __device__ static void qk(float (&acc)[1][kNT][4], const fp16* sQ, const uint8_t* sK) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[0][nt][e] = 0.f;
    const int q_lane = QTile::offset(lane % 16, lane / 16);
    const int k_lane = kv_lane_offset();
#pragma unroll
    for (int kc = 0; kc < kD / 16; kc += 2) {
      uint32_t a[2][4];
      ldmatrix_x4(a[0], smem_addr(sQ + tile_step<QTile>(q_lane, 0, 2 * kc)));
      ldmatrix_x4(a[1], smem_addr(sQ + tile_step<QTile>(q_lane, 0, 2 * kc + 2)));
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t r[4], b[4][2];
        ldmatrix_x4(r, smem_addr(sK + KvTile::step(k_lane, np * 16, kc)));
#pragma unroll
        for (int j = 0; j < 4; ++j) e4m3x4_to_f16_pairs(r[j], b[j][0], b[j][1]);
        mma_16816<fp16>(acc[0][2 * np], a[0], b[0][0], b[0][1]);
        mma_16816<fp16>(acc[0][2 * np + 1], a[0], b[1][0], b[1][1]);
        mma_16816<fp16>(acc[0][2 * np], a[1], b[2][0], b[2][1]);
        mma_16816<fp16>(acc[0][2 * np + 1], a[1], b[3][0], b[3][1]);
      }
    }
  }

  __device__ static void pv(float (&acc_o)[1][kDT][4], const float (&p)[1][kNT][4], const uint8_t* sV) {
    const int v_lane = kv_lane_offset();
#pragma unroll
    for (int kc = 0; kc < kNT / 2; ++kc) {
      const uint32_t a[4] = {
          pack2<fp16>(p[0][2 * kc][0], p[0][2 * kc][1]), pack2<fp16>(p[0][2 * kc][2], p[0][2 * kc][3]),
          pack2<fp16>(p[0][2 * kc + 1][0], p[0][2 * kc + 1][1]), pack2<fp16>(p[0][2 * kc + 1][2], p[0][2 * kc + 1][3])};
#pragma unroll
      for (int c = 0; c < kD / 16; c += 2) {
        uint32_t r[4], b[4][2];
        ldmatrix_x4_trans(r, smem_addr(sV + KvTile::step(v_lane, kc * 16, c)));
#pragma unroll
        for (int j = 0; j < 4; ++j) e4m3x4_to_f16_pairs(r[j], b[j][0], b[j][1]);
        // r[0], r[1]: keys 0-7 and 8-15 of chunk c; r[2], r[3]: of chunk c + 1
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          mma_16816<fp16>(acc_o[0][2 * (c + h)], a, b[2 * h][0], b[2 * h + 1][0]);
          mma_16816<fp16>(acc_o[0][2 * (c + h) + 1], a, b[2 * h][1], b[2 * h + 1][1]);
        }
      }
    }
  }

  // Fragment row h (g + 8h) of O -> row (physical columns) at `dst`, a row of kD floats.
  __device__ __forceinline__ static void store_o_row(float* dst, const float (&acc_o)[1][kDT][4], int h) {
    const int t = threadIdx.x % 4;
#pragma unroll
    for (int c = 0; c < kD / 16; ++c) {
      *reinterpret_cast<float4*>(dst + 16 * c + 4 * t) =
          make_float4(acc_o[0][2 * c][2 * h], acc_o[0][2 * c + 1][2 * h], acc_o[0][2 * c][2 * h + 1],
                      acc_o[0][2 * c + 1][2 * h + 1]);
    }
  }
};

// ---- rows, masking, online softmax --------------------------------------------------------

// Query position of each C-fragment row this thread holds (rows g and g + 8 of every m tile),
// or -1 for a packed row past the end. Packed row r = (query r / group, head r % group).
template <int kMT>
__device__ __forceinline__ void fragment_qpos(int (&qpos)[kMT][2], int first_packed_row, int rows_total, int group) {
  const int g = (threadIdx.x % 32) / 4;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = first_packed_row + mt * 16 + g + 8 * h;
      qpos[mt][h] = r < rows_total ? r / group : -1;
    }
}

// -inf for every score a row may not see: keys past kv_len, keys after the causal diagonal
// (query i sees keys j <= i + causal_offset), keys the boolean mask drops.
template <int kMT, int kNT>
__device__ __forceinline__ void apply_mask(float (&s)[kMT][kNT][4], const AttnParams& p, int b,
                                           const int (&qpos)[kMT][2], int key0, int kv_len, int causal_offset) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int q = qpos[mt][h];
      int last_key = q < 0 ? -1 : kv_len - 1;
      if (p.causal && q >= 0) last_key = min(last_key, q + causal_offset);
      const bool* mask_row =
          (p.mask != nullptr && q >= 0) ? p.mask + b * p.mask_batch_stride + q * p.mask_q_stride : nullptr;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int key = key0 + nt * 8 + 2 * t + c;
          bool keep = key <= last_key;
          if (mask_row != nullptr) keep = keep && key < p.mask_len && mask_row[key];
          if (!keep) s[mt][nt][2 * h + c] = -INFINITY;
        }
    }
}

// FA2 online softmax on C fragments; row_max in raw score units, row_sum per thread until
// reduce_sums() adds up the quad.
template <int kMT, int kNT, int kDT>
struct OnlineSoftmax {
  float row_max[kMT][2];
  float row_sum[kMT][2];

  __device__ void init() {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_max[mt][h] = -INFINITY;
        row_sum[mt][h] = 0.f;
      }
  }

  // The max of `init` and fragment row (mt, h) of this tile's scores, over the row's quad.
  __device__ __forceinline__ static float tile_row_max(const float (&s)[kMT][kNT][4], int mt, int h, float init) {
    float mx = init;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    return fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  }

  // Row (mt, h): s -> exp2(s * scale_log2 - scaled max) in place; returns this thread's sum.
  // A row that has seen no key yet keeps max -inf; subtract 0 then so exp2 gives 0, not NaN.
  __device__ __forceinline__ static float exponentiate_row(float (&s)[kMT][kNT][4], int mt, int h, float row_max,
                                                           float scale_log2) {
    const float max_scaled = row_max == -INFINITY ? 0.f : row_max * scale_log2;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float e = fast_exp2(fmaf(s[mt][nt][2 * h + c], scale_log2, -max_scaled));
        s[mt][nt][2 * h + c] = e;
        sum += e;
      }
    return sum;
  }

  // S -> P = exp(scale * (S - running max)) in place; rescales O and the running sums.
  __device__ void update(float (&s)[kMT][kNT][4], float (&o)[kMT][kDT][4], float scale_log2) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float mx = tile_row_max(s, mt, h, row_max[mt][h]);
        const float correction = fast_exp2(row_max[mt][h] * scale_log2 - (mx == -INFINITY ? 0.f : mx * scale_log2));
        row_max[mt][h] = mx;
        const float sum = exponentiate_row(s, mt, h, mx, scale_log2);
        row_sum[mt][h] = row_sum[mt][h] * correction + sum;
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          o[mt][dt][2 * h] *= correction;
          o[mt][dt][2 * h + 1] *= correction;
        }
      }
  }

  __device__ void reduce_sums() {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_sum[mt][h] += __shfl_xor_sync(0xffffffffu, row_sum[mt][h], 1);
        row_sum[mt][h] += __shfl_xor_sync(0xffffffffu, row_sum[mt][h], 2);
      }
  }
};

// Natural-log LSE of a finished row; -inf for a row that saw no key.
__device__ __forceinline__ float row_lse(float row_max, float row_sum, float scale_log2) {
  constexpr float kLn2 = 0.6931471805599453f;
  return row_sum > 0.f ? (row_max * scale_log2 + __log2f(row_sum)) * kLn2 : -INFINITY;
}

}  // namespace kernels::attention
