// Rotary embedding: the plain parameters shared by the kernel, its launcher, the torch
// binding (rotary.cpp) and the standalone test (csrc/tests/rotary_test.cu). No torch here.
//
// Math (rotary_dim R, pair index i in [0, R/2), c = cos[row][i], s = sin[row][i]):
//   out_a = x_a * c - x_b * s
//   out_b = x_b * c + x_a * s
// where (x_a, x_b) = (x[i], x[i + R/2]) in the half-split (NeoX) layout and
// (x[2i], x[2i+1]) in the interleaved (GPT-J) layout. Dims [R, D) pass through unchanged.
// `conjugate` negates s (the inverse rotation, i.e. the backward of the forward).
#pragma once

#include <cstdint>

namespace kernels::rotary {

enum class Layout : int { kHalfSplit = 0, kInterleaved = 1 };

// One [batch, seqlen, heads, head_dim] view with its element strides (head_dim stride is 1).
struct TensorView {
  void* ptr = nullptr;
  int64_t stride_b = 0;
  int64_t stride_s = 0;
  int64_t stride_h = 0;
};

struct RotaryParams {
  TensorView q, k;          // inputs; k.ptr == nullptr when only q is rotated
  TensorView q_out, k_out;  // outputs; equal to the inputs for in-place
  int batch = 0, seqlen = 0, heads_q = 0, heads_k = 0;
  int head_dim = 0;    // D
  int rotary_dim = 0;  // R, even, <= D

  // cos/sin: f32, R/2 contiguous values per row.
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t table_rows = 0;        // rows in the table (bound for positions)
  int64_t table_stride_row = 0;  // elements between rows
  // Row selection: with positions, row = positions[b * pos_stride_b + s * pos_stride_s];
  // without, the row is b * table_stride_b + s (table_stride_b = 0: one [S, R/2] table for
  // every sequence; = S: per-token tables [B, S, R/2]).
  const void* positions = nullptr;  // int32 or int64 (see positions_int64)
  bool positions_int64 = false;
  int64_t pos_stride_b = 0, pos_stride_s = 0;
  int64_t table_stride_b = 0;

  Layout layout = Layout::kHalfSplit;
  bool conjugate = false;
  bool copy_passthrough = false;  // out-of-place with R < D: copy dims [R, D)
};

}  // namespace kernels::rotary
