// Rotary embedding kernel and launcher (no torch): q and k of one batch rotated in one launch.
//
// Work decomposition: an "item" is one vector access of N elements of one head of one token
// (N = 8 bf16 = 16 bytes when alignment allows). A head has rot_items rotary items (half-split:
// each item reads N elements from both halves; interleaved: kVecs adjacent vectors, 2 where
// the rotary span allows, so that an item moves as many bytes as a half-split one and the
// per-item index arithmetic is paid once per 32 bytes) and, out of place with R < D, pass-through
// items copying the dims [R, D) (two vectors each where they pair up, for the same reason). A
// token has (heads_q + heads_k) * items_per_head items; a block covers tokens_per_block whole
// tokens per step (several when a token has few items) and strides over tokens by the grid, so
// every item of one token shares its cos/sin row in L1.
// The (head, item) pair a thread owns does not depend on the token, so it is decoded once.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../common/half_types.cuh"
#include "../common/launch.cuh"
#include "rotary_params.h"

namespace kernels::rotary {

// N elements of T in one aligned access (16 bytes at N = 8 for 2-byte types).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <int N>
struct alignas(sizeof(float) * (N < 4 ? N : 4)) FloatVec {
  float v[N];
};

// Largest table access a launch may use: float4.
template <int N>
__device__ __forceinline__ FloatVec<N> load_table(const float* ptr) {
  return *reinterpret_cast<const FloatVec<N>*>(ptr);
}

struct LaunchShape {
  int threads = 0;
  int tokens_per_block = 0;
  int blocks = 0;
  int items_per_head = 0;
  int rot_items = 0;
  int pass_vecs = 1;  // vectors per pass-through item: 2 where [R, D) holds an even number of 16-byte ones
};

// kPassVecs: vectors per pass-through item (shape.pass_vecs), a template parameter so that the
// instances without pass-through pairs compile as they did before pairs existed (read at run
// time, it let ptxas split the loop in two and the interleaved full-rotary rows got markedly
// slower on the H200: docs/production_lab.md, "Rotary embedding: the tuning").
template <typename T, int N, Layout kLayout, int kVecs = 1, int kPassVecs = 1>
__global__ void __launch_bounds__(1024) rotary_kernel(const RotaryParams p, const LaunchShape shape) {
  static_assert(kLayout == Layout::kHalfSplit || N % 2 == 0, "interleaved pairs must not straddle a vector access");
  static_assert(kLayout == Layout::kInterleaved || kVecs == 1, "a half-split item already reads two vectors");
  using Ops = HalfTypeOps<T>;
  const int heads = p.heads_q + p.heads_k;
  const int items_per_token = heads * shape.items_per_head;
  const int local_token = threadIdx.x / items_per_token;
  if (local_token >= shape.tokens_per_block) return;
  const int first_item = threadIdx.x - local_token * items_per_token;
  const int first_h = first_item / shape.items_per_head;
  const int first_c = first_item - first_h * shape.items_per_head;
  // Only one token per block step means blockDim may be < items_per_token: step by blockDim.
  const int step_h = blockDim.x / shape.items_per_head;
  const int step_c = blockDim.x - step_h * shape.items_per_head;
  const int half = p.rotary_dim / 2;
  const float sin_sign = p.conjugate ? -1.f : 1.f;
  const int64_t tokens = int64_t(p.batch) * p.seqlen;
  const int64_t token_step = int64_t(gridDim.x) * shape.tokens_per_block;

  for (int64_t t = int64_t(blockIdx.x) * shape.tokens_per_block + local_token; t < tokens; t += token_step) {
    const int64_t b = t / p.seqlen;
    const int64_t s = t - b * p.seqlen;

    // ---- this token's cos/sin row (out-of-range positions produce NaN, never a stray read)
    int64_t row;
    if (p.positions != nullptr) {
      const int64_t pos_idx = b * p.pos_stride_b + s * p.pos_stride_s;
      row = p.positions_int64 ? static_cast<const int64_t*>(p.positions)[pos_idx]
                              : int64_t(static_cast<const int32_t*>(p.positions)[pos_idx]);
    } else {
      row = b * p.table_stride_b + s;
    }
    const bool row_valid = row >= 0 && row < p.table_rows;
    const float* cos_row = p.cos + (row_valid ? row : 0) * p.table_stride_row;
    const float* sin_row = p.sin + (row_valid ? row : 0) * p.table_stride_row;

    int h = first_h, c = first_c;
    for (int item = first_item; item < items_per_token; item += blockDim.x) {
      const bool is_q = h < p.heads_q;
      const TensorView& in = is_q ? p.q : p.k;
      const TensorView& out = is_q ? p.q_out : p.k_out;
      const int64_t head = is_q ? h : h - p.heads_q;
      const T* x = static_cast<const T*>(in.ptr) + b * in.stride_b + s * in.stride_s + head * in.stride_h;
      T* y = static_cast<T*>(out.ptr) + b * out.stride_b + s * out.stride_s + head * out.stride_h;

      if (c < shape.rot_items) {
        const int e = c * N;
        if constexpr (kLayout == Layout::kHalfSplit) {
          // x_a = x[e .. e+N), x_b = x[e+R/2 .. e+R/2+N); table index e .. e+N
          const Vec<T, N> va = *reinterpret_cast<const Vec<T, N>*>(x + e);
          const Vec<T, N> vb = *reinterpret_cast<const Vec<T, N>*>(x + e + half);
          const FloatVec<N> cv = load_table<N>(cos_row + e);
          const FloatVec<N> sv = load_table<N>(sin_row + e);
          Vec<T, N> oa, ob;
#pragma unroll
          for (int j = 0; j < N; ++j) {
            const float xa = Ops::to_float(va.v[j]), xb = Ops::to_float(vb.v[j]);
            const float co = row_valid ? cv.v[j] : NAN;
            const float si = sin_sign * sv.v[j];
            oa.v[j] = Ops::from_float(xa * co - xb * si);
            ob.v[j] = Ops::from_float(xb * co + xa * si);
          }
          *reinterpret_cast<Vec<T, N>*>(y + e) = oa;
          *reinterpret_cast<Vec<T, N>*>(y + e + half) = ob;
        } else {
          // kVecs vectors from e = c * kVecs * N; pairs (x[e + 2j], x[e + 2j + 1]), table index e/2 + j
          Vec<T, N> v[kVecs];
          FloatVec<N / 2> cv[kVecs], sv[kVecs];
#pragma unroll
          for (int u = 0; u < kVecs; ++u) {  // every load first, then the math
            const int eu = e * kVecs + u * N;
            v[u] = *reinterpret_cast<const Vec<T, N>*>(x + eu);
            cv[u] = load_table<N / 2>(cos_row + eu / 2);
            sv[u] = load_table<N / 2>(sin_row + eu / 2);
          }
#pragma unroll
          for (int u = 0; u < kVecs; ++u) {
            Vec<T, N> o;
#pragma unroll
            for (int j = 0; j < N / 2; ++j) {
              const float xa = Ops::to_float(v[u].v[2 * j]), xb = Ops::to_float(v[u].v[2 * j + 1]);
              const float co = row_valid ? cv[u].v[j] : NAN;
              const float si = sin_sign * sv[u].v[j];
              o.v[2 * j] = Ops::from_float(xa * co - xb * si);
              o.v[2 * j + 1] = Ops::from_float(xb * co + xa * si);
            }
            *reinterpret_cast<Vec<T, N>*>(y + e * kVecs + u * N) = o;
          }
        }
      } else {
        // all loads before the stores: a pass-through pair moves as many bytes as a rotary item
        const int e = p.rotary_dim + (c - shape.rot_items) * kPassVecs * N;
        Vec<T, N> v[kPassVecs];
#pragma unroll
        for (int u = 0; u < kPassVecs; ++u) v[u] = *reinterpret_cast<const Vec<T, N>*>(x + e + u * N);
#pragma unroll
        for (int u = 0; u < kPassVecs; ++u) *reinterpret_cast<Vec<T, N>*>(y + e + u * N) = v[u];
      }

      h += step_h;
      c += step_c;
      if (c >= shape.items_per_head) {
        c -= shape.items_per_head;
        ++h;
      }
    }
  }
}

// ---- host side -------------------------------------------------------------------------

inline bool aligned_to(const void* ptr, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % uint64_t(bytes) == 0;
}

// The widest vector (in elements, 8/4/2/1) every access of this launch can use.
// Returns 0 when no width works (interleaved layout with odd strides or offsets).
inline int pick_vector_width(const RotaryParams& p, int elem_bytes) {
  const bool interleaved = p.layout == Layout::kInterleaved;
  const int64_t max_width = 16 / elem_bytes;
  for (int64_t n = max_width; n >= (interleaved ? 2 : 1); n /= 2) {
    const int64_t rot_span = interleaved ? p.rotary_dim : p.rotary_dim / 2;
    const int64_t table_n = interleaved ? n / 2 : n;  // floats per table access
    bool ok = rot_span % n == 0 && (p.head_dim - p.rotary_dim) % n == 0;
    const TensorView* views[4] = {&p.q, &p.k, &p.q_out, &p.k_out};
    for (const TensorView* v : views) {
      if (v->ptr == nullptr) continue;
      ok = ok && aligned_to(v->ptr, n * elem_bytes) && v->stride_b % n == 0 && v->stride_s % n == 0 &&
           v->stride_h % n == 0;
    }
    // the table is read with accesses of up to 4 floats
    const int64_t table_vec = table_n < 4 ? table_n : 4;
    ok = ok && aligned_to(p.cos, table_vec * 4) && aligned_to(p.sin, table_vec * 4) &&
         p.table_stride_row % table_vec == 0;
    if (ok) return int(n);
  }
  return 0;
}

// Vectors per interleaved rotary item: 2 where the rotary span holds an even number of
// vectors, else 1 (half-split: always 1).
inline int interleaved_vectors_per_item(const RotaryParams& p, int vector_width) {
  return p.layout == Layout::kInterleaved && p.rotary_dim % (2 * vector_width) == 0 ? 2 : 1;
}

// Threads and tokens per block from the per-token work; grid from the SM count.
inline LaunchShape plan_launch(const RotaryParams& p, int vector_width, int num_sms) {
  LaunchShape shape;
  const int rot_span = p.layout == Layout::kInterleaved ? p.rotary_dim : p.rotary_dim / 2;
  shape.rot_items = rot_span / (vector_width * interleaved_vectors_per_item(p, vector_width));
  const int pass_vectors = p.copy_passthrough ? (p.head_dim - p.rotary_dim) / vector_width : 0;
  // pairs at the full 16-byte width only (the narrower widths are the misaligned fallbacks)
  shape.pass_vecs = vector_width == 8 && pass_vectors > 0 && pass_vectors % 2 == 0 ? 2 : 1;
  shape.items_per_head = shape.rot_items + pass_vectors / shape.pass_vecs;
  const int64_t items_per_token = int64_t(p.heads_q + p.heads_k) * shape.items_per_head;
  constexpr int kMinThreads = 128, kMaxThreads = 512;
  if (items_per_token >= kMinThreads) {
    shape.tokens_per_block = 1;
    const int64_t rounded = (items_per_token + 31) / 32 * 32;
    shape.threads = int(rounded < kMaxThreads ? rounded : kMaxThreads);
  } else {
    shape.tokens_per_block = int(kMinThreads / items_per_token);
    shape.threads = kMinThreads;
  }
  const int64_t tokens = int64_t(p.batch) * p.seqlen;
  const int64_t needed = (tokens + shape.tokens_per_block - 1) / shape.tokens_per_block;
  // enough resident blocks to fill every SM (2048 threads each), several waves deep
  const int64_t resident = int64_t(num_sms) * (2048 / shape.threads) * 4;
  shape.blocks = int(needed < resident ? needed : resident);
  return shape;
}

// Rotates q (and k) on `stream`; errors as in common/errors.h (kernels::ValueError for a
// rotary_dim or an interleaved layout the kernel cannot take, kernels::CudaError for a failed
// launch).
template <typename T>
void launch_rotary(const RotaryParams& p, int num_sms, cudaStream_t stream) {
  check(p.rotary_dim > 0 && p.rotary_dim % 2 == 0 && p.rotary_dim <= p.head_dim,
        "rotary: rotary_dim must be even, positive and <= head_dim = ", p.head_dim, ", got ", p.rotary_dim);
  if (int64_t(p.batch) * p.seqlen == 0 || p.heads_q + p.heads_k == 0) return;
  const int n = pick_vector_width(p, sizeof(T));
  check(n > 0, "rotary: the interleaved layout needs even strides and 4-byte aligned pointers");
  const LaunchShape shape = plan_launch(p, n, num_sms);
  const bool interleaved = p.layout == Layout::kInterleaved;
  const bool two_vectors = interleaved_vectors_per_item(p, n) == 2;
  // runtime width, layout and vectors per item -> template instance, in one place
#define ROTARY_LAUNCH(N_, L_, V_, P_) \
  rotary_kernel<T, N_, L_, V_, P_><<<shape.blocks, shape.threads, 0, stream>>>(p, shape)
#define ROTARY_LAUNCH_WIDTH(N_, P_)                               \
  (!interleaved  ? ROTARY_LAUNCH(N_, Layout::kHalfSplit, 1, P_)   \
   : two_vectors ? ROTARY_LAUNCH(N_, Layout::kInterleaved, 2, P_) \
                 : ROTARY_LAUNCH(N_, Layout::kInterleaved, 1, P_))
  switch (n) {
    case 8: shape.pass_vecs == 2 ? ROTARY_LAUNCH_WIDTH(8, 2) : ROTARY_LAUNCH_WIDTH(8, 1); break;
    case 4: ROTARY_LAUNCH_WIDTH(4, 1); break;
    case 2: ROTARY_LAUNCH_WIDTH(2, 1); break;
    default: ROTARY_LAUNCH(1, Layout::kHalfSplit, 1, 1); break;
  }
#undef ROTARY_LAUNCH_WIDTH
#undef ROTARY_LAUNCH
  check_launch("rotary_kernel");
}

}  // namespace kernels::rotary
