// FP8 GEMM epilogue: dequantise the f32 accumulators (per-tensor scales, then optional
// per-row / per-column scales), add the bias, round to bf16 and store with M / N predication.
// With split-K (SplitKPartials) the GEMM kernel stores fp32 partial sums instead, and
// splitk_reduce_kernel sums them in split order and runs this epilogue.
//
// Both MMA paths hand over accumulators in the same pairs: for every 8-column group a thread
// holds (row, col) and (row, col + 1) with col even (WGMMA m64nN and mma.sync m16n8 share this
// fragment layout), so one store_pair serves both.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "../../common/sm90.cuh"
#include "../../common/smem.cuh"
#include "../../common/tma.cuh"
#include "../common.h"

namespace kernels::fp8::gemm {

// How the sm_90a GEMM stores its interior tiles (Epilogue::store_wgmma_fragment); edge tiles and
// tiles with row / column scales or a bias always take the checked stores. kTma stages whole
// tiles in shared memory for TMA stores (TmaStoreEpilogue; kernels built with
// Sm90Policy::kTmaStore, plain epilogues on 16-byte aligned rows; else as kRows16); kTmaChunked
// stages them 64 columns at a time through one or two small buffers instead (kernels built with
// Sm90Policy::kChunkedStaging as well), so that the staging does not cost the ring a stage.
enum class StoreMode : int { kChecked = 0, kPairs = 1, kRows16 = 2, kTma = 3, kTmaChunked = 4 };

struct Epilogue {
  float alpha = 1.f;  // *scale_a * *scale_b, read once per thread
  const float* row_scale = nullptr;
  const float* col_scale = nullptr;
  const __nv_bfloat16* bias = nullptr;
  __nv_bfloat16* d = nullptr;
  int64_t m = 0, n = 0, ldd = 0;
  bool pair_aligned = false;   // ldd even and d 4-byte aligned: (col, col+1) is one bf16x2
  bool plain = false;          // pair_aligned, and no row / column scale and no bias
  bool row16_aligned = false;  // ldd % 8 == 0 and d 16-byte aligned: 8 columns from col % 8 == 0 are one uint4

  __device__ __forceinline__ static Epilogue make(const GemmParams& p) {
    Epilogue e;
    e.alpha = *p.scale_a * *p.scale_b;
    e.row_scale = p.row_scale;
    e.col_scale = p.col_scale;
    e.bias = static_cast<const __nv_bfloat16*>(p.bias);
    e.d = static_cast<__nv_bfloat16*>(p.d);
    e.m = p.m;
    e.n = p.n;
    e.ldd = p.ldd;
    e.pair_aligned = p.ldd % 2 == 0 && reinterpret_cast<uintptr_t>(p.d) % 4 == 0;
    e.plain = e.pair_aligned && p.row_scale == nullptr && p.col_scale == nullptr && p.bias == nullptr;
    e.row16_aligned = p.ldd % 8 == 0 && reinterpret_cast<uintptr_t>(p.d) % 16 == 0;
    return e;
  }

  __device__ __forceinline__ float finish(float acc, float row_factor, int64_t col) const {
    float v = acc * row_factor;
    if (col_scale != nullptr) v *= __ldg(col_scale + col);
    if (bias != nullptr) v += __bfloat162float(bias[col]);
    return v;
  }

  // The factor of a row: scale (alpha, or 1 for accumulators that already carry it) times its
  // row scale.
  __device__ __forceinline__ float row_factor(int64_t row, float scale) const {
    return scale * (row_scale != nullptr && row < m ? __ldg(row_scale + row) : 1.f);
  }

  // D[row, col .. col+1] from two accumulators; col is even. Every call checks the bounds and
  // each optional operand (about 50 SASS instructions per pair).
  __device__ __forceinline__ void store_pair(int64_t row, int64_t col, float v0, float v1) const {
    store_pair(row, col, v0, v1, row_factor(row, alpha));
  }

  __device__ __forceinline__ void store_pair(int64_t row, int64_t col, float v0, float v1, float row_factor) const {
    if (row >= m || col >= n) return;
    __nv_bfloat16* out = d + row * ldd + col;
    const float o0 = finish(v0, row_factor, col);
    if (col + 1 < n) {
      const float o1 = finish(v1, row_factor, col + 1);
      if (pair_aligned) {
        *reinterpret_cast<__nv_bfloat162*>(out) = __floats2bfloat162_rn(o0, o1);
      } else {
        out[0] = __float2bfloat16_rn(o0);
        out[1] = __float2bfloat16_rn(o1);
      }
    } else {
      out[0] = __float2bfloat16_rn(o0);
    }
  }

  // One thread's part of a WGMMA m64 x kN accumulator: rows `row` and row + 8, columns
  // col0 + 8j and col0 + 8j + 1 (col0 even) from acc[4j .. 4j + 3], j < kN / 8.
  // kScaled: the promoted mainloops fold alpha into their promotion FFMAs, so acc is already
  // scaled and the stores skip that multiply.
  // store (StoreMode): kChecked checks every pair (store_pair, ~50 instructions each: the
  // checked epilogue of a 128 x 128 tile cost 2 x 3200 issue slots per SM sub-partition,
  // against ~16k cycles of tensor-core work in a 4096^3 tile's mainloop). The unchecked modes
  // serve a quad of threads whose rows and columns all lie inside D, with no row / column scale
  // and no bias: kPairs stores each pair as it comes (F2FP + a 4-byte STG), kRows16 first
  // transposes the quad's pairs (store_rows16) so that each thread stores 16 bytes of a row:
  // a quarter of the STG instructions, which the kPairs epilogue queued behind each other
  // (Nsight Compute: its STGs stalled on the LSU queue, "lg throttle", 13% of the kernel's
  // warp samples at 8192 x 8192 x 4096).
  // kRows16 = false compiles the kRows16 mode out (it runs as kPairs): the mainloops that keep
  // a second set of partial sums live across the stores (ping-pong, overlap) spill with it.
  template <int kN, bool kScaled, bool kRows16 = true>
  __device__ __forceinline__ void store_wgmma_fragment(int64_t row, int64_t col0, const float (&acc)[kN / 2],
                                                       StoreMode store) const {
    const float scale = kScaled ? 1.f : alpha;
    const int quad_lane = threadIdx.x % 4;
    const int64_t quad_col0 = col0 - 2 * quad_lane;  // the same for the quad's four threads
    if (store != StoreMode::kChecked && plain && row + 8 < m && quad_col0 + kN <= n) {
      __nv_bfloat16* out = d + row * ldd + col0;
      if constexpr (kRows16) {
        if (store == StoreMode::kRows16 && row16_aligned) {
          store_rows16<kN>(d + row * ldd + quad_col0, acc, scale, quad_lane);
          store_pairs<kN, kN / 32 * 4>(out, acc, scale);  // the groups past the last whole 32 columns
          return;
        }
      }
      store_pairs<kN, 0>(out, acc, scale);
      return;
    }
    const float factor0 = row_factor(row, scale), factor8 = row_factor(row + 8, scale);
#pragma unroll
    for (int j = 0; j < kN / 8; ++j) {
      store_pair(row, col0 + 8 * j, acc[4 * j], acc[4 * j + 1], factor0);
      store_pair(row + 8, col0 + 8 * j, acc[4 * j + 2], acc[4 * j + 3], factor8);
    }
  }

  // Unchecked pair stores of 8-column groups kFirst .. kN / 8 - 1 (out: this thread's first pair
  // of row `row`). kFirst is a compile-time constant so that every acc index is one: a run-time
  // start (rows16 or not) made ptxas keep acc in local memory, stored after every tile's
  // mainloop and read back here.
  template <int kN, int kFirst>
  __device__ __forceinline__ void store_pairs(__nv_bfloat16* out, const float (&acc)[kN / 2], float scale) const {
#pragma unroll
    for (int j = kFirst; j < kN / 8; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(out + 8 * j) =
          __floats2bfloat162_rn(acc[4 * j] * scale, acc[4 * j + 1] * scale);
      *reinterpret_cast<__nv_bfloat162*>(out + 8 * ldd + 8 * j) =
          __floats2bfloat162_rn(acc[4 * j + 2] * scale, acc[4 * j + 3] * scale);
    }
  }

  // Column groups 0 .. 4 * (kN / 32) of a quad's rows (out: its row `row`, column 0 of the
  // fragment, 16-byte aligned): per row half and 4 column groups, thread t holds one bf16 pair of
  // each group (columns 8g + 2t, +1); a 4 x 4 transpose of these words across the quad (two
  // exchanges of two words) leaves thread t the 8 columns of group t, one 16-byte store.
  template <int kN>
  __device__ __forceinline__ void store_rows16(__nv_bfloat16* out, const float (&acc)[kN / 2], float scale,
                                               int t) const {
    const unsigned quad = 0xfu << (threadIdx.x % 32 & ~3u);
    const bool odd = t & 1, upper = t & 2;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int q = 0; q < kN / 32; ++q) {
        uint32_t w[4];
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          const int a = 4 * (4 * q + g) + 2 * half;
          const __nv_bfloat162 pair = __floats2bfloat162_rn(acc[a] * scale, acc[a + 1] * scale);
          w[g] = *reinterpret_cast<const uint32_t*>(&pair);
        }
        // w[g] = M[t][g]; after the exchange with t ^ 1: {M[p][c], M[p + 1][c], M[p][c + 2],
        // M[p + 1][c + 2]} with c = t & 1, p = t & 2; after the one with t ^ 2: column t of M.
        uint32_t send0 = odd ? w[0] : w[1], send1 = odd ? w[2] : w[3];
        uint32_t got0 = __shfl_xor_sync(quad, send0, 1), got1 = __shfl_xor_sync(quad, send1, 1);
        if (odd) {
          w[0] = got0;
          w[2] = got1;
        } else {
          w[1] = got0;
          w[3] = got1;
        }
        send0 = upper ? w[0] : w[2];
        send1 = upper ? w[1] : w[3];
        got0 = __shfl_xor_sync(quad, send0, 2);
        got1 = __shfl_xor_sync(quad, send1, 2);
        const uint4 row8 = upper ? make_uint4(got0, got1, w[2], w[3]) : make_uint4(w[0], w[1], got0, got1);
        *reinterpret_cast<uint4*>(out + 8 * half * ldd + 8 * (4 * q + t)) = row8;
      }
    }
  }
};

// The TMA-store epilogue of one consumer warpgroup (StoreMode::kTma): its m64 x kBN fragment,
// rounded to bf16, goes to its staging block in shared memory as column panels of 64 rows x
// kPanelBytes (64 columns in the 128-byte swizzle, or 16 in the 32-byte one where kBN is not a
// multiple of 64: BN 176), one stmatrix per two 8-column groups (four 8 x 8 matrices: rows 0-7
// and 8-15 of the warp's 16, by two groups); the swizzle (16-byte chunk bits XOR the 128-byte
// line bits, as TMA reads it) spreads a matrix's eight 16-byte rows over all 32 banks. One
// thread then hands each panel to TMA (rows and columns past D are not written: tails need no
// predicates) and the warpgroup goes on to its next tile while the stores drain; the next
// epilogue first waits until they have read the staging block. Against the direct stores, the
// stores leave the warpgroup as a few bulk copies instead of kBN / 16 16-byte STGs per thread
// queued in the LSU while the tensor cores idle.
// kBuffers = 0 stages the whole 64 x kBN block at once: 16 KB per warpgroup at BN 128, 22 / 24
// at 176 / 192, 32 at 256, which costs the ring a stage (Sm90Policy). kBuffers = 1 or 2
// (StoreMode::kTmaChunked) stages it in chunks of 64 columns (the last one 48 at BN 176) through
// that many 8 KB buffers taken in turn: before writing chunk c the store thread waits until the
// stores of chunk c - kBuffers have read its buffer (at c = 0 all earlier ones, the previous
// tile's, issued a mainloop ago), so with two buffers one chunk's stmatrix runs while TMA reads
// the chunk before. Two named-barrier syncs per chunk instead of two per tile.
template <int kBN, int kBuffers = 0>
struct TmaStoreEpilogue {
  static constexpr int kPanelCols = kBN % 64 == 0 ? 64 : 16;
  static constexpr int kPanelBytes = kPanelCols * 2;  // one row of a panel = its swizzle span
  static constexpr int kPanelBlockBytes = 64 * kPanelBytes;
  static constexpr int kChunkCols = kBuffers == 0 ? kBN : 64;
  static constexpr int kChunks = (kBN + kChunkCols - 1) / kChunkCols;
  static constexpr int kBufferBytes = 64 * kChunkCols * 2;
  static constexpr int kStagingBytes = (kBuffers == 0 ? 1 : kBuffers) * kBufferBytes;  // per warpgroup
  static_assert(kBN % 16 == 0, "16-column panels at least");
  static_assert(kBuffers >= 0 && kBuffers <= 2, "whole-block staging, or one or two chunk buffers");
  static_assert(kChunkCols % kPanelCols == 0, "a chunk holds whole panels");

  // Byte offset of 16-byte chunk `chunk` (< kPanelBytes / 16) of row `row` in a panel.
  __host__ __device__ __forceinline__ static constexpr uint32_t chunk_offset(int row, int chunk) {
    const uint32_t linear = uint32_t(row * kPanelBytes + chunk * 16);
    return linear ^ (((linear >> 7) & (kPanelBytes / 16 - 1)) << 4);
  }

  // row0 / col0: the block's first row and column in D; staging: the warpgroup's kStagingBytes;
  // barrier: the warpgroup's named barrier.
  __device__ __forceinline__ static void store(const CUtensorMap* map_d, uint8_t* staging, int barrier, int row0,
                                               int col0, const float (&acc)[kBN / 2], float scale) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
    const bool store_thread = threadIdx.x % 128 == 0;
    // this lane's row address in stmatrix: row lane % 8 of matrix lane / 8
    const int matrix = lane / 8, row = 16 * warp + 8 * (matrix & 1) + lane % 8;
    constexpr int kRowChunks = kPanelBytes / 16;  // 16-byte chunks in a panel row
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      constexpr int kAfterFirst = kBuffers > 1 ? kBuffers - 1 : 0;
      uint8_t* buffer = staging + (kBuffers == 0 ? 0 : c % kBuffers) * kBufferBytes;
      if (store_thread) {  // the stores that last read this buffer are done reading
        if (c == 0) tma_store_wait_read<0>();
        else tma_store_wait_read<kAfterFirst>();
      }
      named_barrier_sync(barrier, 128);
      const int first_group = c * kChunkCols / 8;
      const int chunk_cols = kBN - c * kChunkCols < kChunkCols ? kBN - c * kChunkCols : kChunkCols;
      const uint32_t base = smem_addr(buffer);
#pragma unroll
      for (int j = 0; j < chunk_cols / 8; j += 2) {
        const int group = j + (matrix >> 1), a = 4 * (first_group + j);  // group: in the chunk
        uint32_t w[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const __nv_bfloat162 pair = __floats2bfloat162_rn(acc[a + 2 * q] * scale, acc[a + 2 * q + 1] * scale);
          w[q] = *reinterpret_cast<const uint32_t*>(&pair);
        }
        stmatrix_x4(base + (group / kRowChunks) * kPanelBlockBytes + chunk_offset(row, group % kRowChunks), w[0], w[1],
                    w[2], w[3]);
      }
      fence_proxy_async_shared();  // the stmatrix writes, visible to the TMA unit
      named_barrier_sync(barrier, 128);
      if (store_thread) {
#pragma unroll
        for (int p = 0; p < chunk_cols / kPanelCols; ++p)
          tma_store_2d(map_d, buffer + p * kPanelBlockBytes, col0 + c * kChunkCols + kPanelCols * p, row0);
        tma_store_commit();
      }
    }
  }

  // Before the block exits: its shared memory must outlive the last stores' reads.
  __device__ __forceinline__ static void drain() {
    if (threadIdx.x % 128 == 0) tma_store_wait_read<0>();
  }
};

// Split-K workspace: split s of the K range writes its fp32 partial sum of D, already
// multiplied by scale_a * scale_b, to partials[s][row][col] (row stride ldw = n rounded up
// to 4, so the reduction reads aligned float4 and a fragment's (col, col + 1) pair never
// leaves its row). Only rows < m and columns < n are written; nothing needs zeroing, and
// each element has exactly one writer per split: deterministic, no atomics.
struct SplitKPartials {
  float* partials = nullptr;
  int splits = 1;
  int64_t m = 0, n = 0, ldw = 0;

  __host__ __device__ static int64_t row_stride(int64_t n) { return (n + 3) / 4 * 4; }
  __host__ __device__ static size_t bytes(int splits, int64_t m, int64_t n) {
    return splits > 1 ? size_t(splits) * size_t(m) * size_t(row_stride(n)) * sizeof(float) : 0;
  }

  // One thread's part of a WGMMA m64 x kN accumulator (the layout of
  // Epilogue::store_wgmma_fragment); scale is 1 for accumulators that carry alpha already.
  template <int kN>
  __device__ __forceinline__ void store_wgmma_fragment(int split, int64_t row, int64_t col0, const float (&acc)[kN / 2],
                                                       float scale) const {
    float* base = partials + int64_t(split) * m * ldw;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t r = row + 8 * half;
      if (r >= m) continue;
      float* out = base + r * ldw + col0;
#pragma unroll
      for (int j = 0; j < kN / 8; ++j) {
        if (col0 + 8 * j < n) {
          *reinterpret_cast<float2*>(out + 8 * j) =
              make_float2(acc[4 * j + 2 * half] * scale, acc[4 * j + 2 * half + 1] * scale);
        }
      }
    }
  }
};

// D = epilogue(sum over splits of the partials), summed in split order (deterministic). One
// thread per 4 columns of a row: float4 loads of every split, then two store_pair calls (row
// and column scales, bias, bf16 rounding, M / N predication as the unsplit epilogue).
template <int kThreads>
__global__ void __launch_bounds__(kThreads) splitk_reduce_kernel(const GemmParams p, const SplitKPartials w) {
  const Epilogue epi = Epilogue::make(p);
  const int64_t quads_per_row = (w.n + 3) / 4;
  const int64_t total = w.m * quads_per_row;
  const int64_t split_stride = w.m * w.ldw;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / quads_per_row, col = (i - row * quads_per_row) * 4;
    const float* src = w.partials + row * w.ldw + col;
    float4 sum = __ldg(reinterpret_cast<const float4*>(src));
    for (int s = 1; s < w.splits; ++s) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(src + s * split_stride));
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    const float factor = epi.row_factor(row, 1.f);
    epi.store_pair(row, col, sum.x, sum.y, factor);
    epi.store_pair(row, col + 2, sum.z, sum.w, factor);
  }
}

}  // namespace kernels::fp8::gemm
