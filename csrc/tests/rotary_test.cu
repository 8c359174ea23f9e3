// Standalone test of the rotary launcher (no torch): every layout / width / table mode
// against a double-precision CPU reference. Build and run:
//   python -m tools.nvcc csrc/tests/rotary_test.cu && build/csrc-tests/rotary_test
// Exit status 0 when every case passes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "common/cuda_utils.cuh"
#include "test_utils.h"

#include "rotary/rotary_kernel.cuh"

namespace rotary = kernels::rotary;

namespace {

struct Case {
  const char* name;
  int batch, seqlen, heads_q, heads_k, head_dim, rotary_dim;
  rotary::Layout layout;
  bool inplace, use_positions, per_token_table;
};

// Rotates one head (double precision) the way rotary_params.h defines it.
void reference_head(const float* x, float* y, const float* c, const float* s, int d, int r, rotary::Layout layout) {
  for (int i = 0; i < d; ++i) y[i] = x[i];
  for (int i = 0; i < r / 2; ++i) {
    const int a = layout == rotary::Layout::kHalfSplit ? i : 2 * i;
    const int b = layout == rotary::Layout::kHalfSplit ? i + r / 2 : 2 * i + 1;
    y[a] = float(double(x[a]) * c[i] - double(x[b]) * s[i]);
    y[b] = float(double(x[b]) * c[i] + double(x[a]) * s[i]);
  }
}

bool run_case(const Case& tc, int num_sms) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal;
  const int tokens = tc.batch * tc.seqlen, half = tc.rotary_dim / 2;
  const int max_pos = 2 * tc.seqlen + 7;
  const int table_rows = tc.per_token_table ? tokens : max_pos;

  std::vector<__nv_bfloat16> q(size_t(tokens) * tc.heads_q * tc.head_dim);
  std::vector<__nv_bfloat16> k(size_t(tokens) * tc.heads_k * tc.head_dim);
  for (auto& v : q) v = __float2bfloat16(normal(rng));
  for (auto& v : k) v = __float2bfloat16(normal(rng));
  std::vector<float> cos(size_t(table_rows) * half), sin(cos.size());
  for (int row = 0; row < table_rows; ++row)
    for (int i = 0; i < half; ++i) {
      const double angle = row * std::pow(10000.0, -2.0 * i / tc.rotary_dim);
      cos[size_t(row) * half + i] = float(std::cos(angle));
      sin[size_t(row) * half + i] = float(std::sin(angle));
    }
  std::vector<int64_t> positions(tokens);
  for (auto& p : positions) p = std::uniform_int_distribution<int>(0, max_pos - 1)(rng);

  __nv_bfloat16 *dq = kernels::test::to_device(q), *dk = kernels::test::to_device(k);
  __nv_bfloat16 *dq_out = dq, *dk_out = dk;
  if (!tc.inplace) {
    std::vector<__nv_bfloat16> poison(std::max(q.size(), k.size()), __float2bfloat16(NAN));
    dq_out = kernels::test::to_device(std::vector<__nv_bfloat16>(poison.begin(), poison.begin() + q.size()));
    dk_out = kernels::test::to_device(std::vector<__nv_bfloat16>(poison.begin(), poison.begin() + k.size()));
  }
  float *dcos = kernels::test::to_device(cos), *dsin = kernels::test::to_device(sin);
  int64_t* dpos = kernels::test::to_device(positions);

  rotary::RotaryParams p;
  const auto view = [&](void* ptr, int heads) {
    rotary::TensorView v;
    v.ptr = ptr;
    v.stride_h = tc.head_dim;
    v.stride_s = int64_t(heads) * tc.head_dim;
    v.stride_b = v.stride_s * tc.seqlen;
    return v;
  };
  p.q = view(dq, tc.heads_q);
  p.q_out = view(dq_out, tc.heads_q);
  if (tc.heads_k > 0) {
    p.k = view(dk, tc.heads_k);
    p.k_out = view(dk_out, tc.heads_k);
  }
  p.batch = tc.batch;
  p.seqlen = tc.seqlen;
  p.heads_q = tc.heads_q;
  p.heads_k = tc.heads_k;
  p.head_dim = tc.head_dim;
  p.rotary_dim = tc.rotary_dim;
  p.cos = dcos;
  p.sin = dsin;
  p.table_rows = table_rows;
  p.table_stride_row = half;
  if (tc.use_positions) {
    p.positions = dpos;
    p.positions_int64 = true;
    p.pos_stride_b = tc.seqlen;
    p.pos_stride_s = 1;
  } else {
    p.table_stride_b = tc.per_token_table ? tc.seqlen : 0;
  }
  p.layout = tc.layout;
  p.copy_passthrough = !tc.inplace && tc.rotary_dim < tc.head_dim;

  const bool launched = kernels::test::runs(tc.name, [&] { rotary::launch_rotary<__nv_bfloat16>(p, num_sms, 0); });
  KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
  if (!launched) {
    std::printf("FAIL %-28s launch\n", tc.name);
    return false;
  }
  std::vector<__nv_bfloat16> q_got(q.size()), k_got(k.size());
  KERNELS_CUDA_CHECK(cudaMemcpy(q_got.data(), dq_out, q.size() * 2, cudaMemcpyDeviceToHost));
  KERNELS_CUDA_CHECK(cudaMemcpy(k_got.data(), dk_out, k.size() * 2, cudaMemcpyDeviceToHost));

  // bf16 output: one rounding of an f32 result -> at most half an ulp (2^-8 relative) plus
  // f32 rounding of the products (relative to the inputs, not the possibly cancelled output).
  double max_err = 0.0;
  bool ok = true;
  std::vector<float> xin(tc.head_dim), yref(tc.head_dim);
  for (int t = 0; t < tokens; ++t) {
    const int s = t % tc.seqlen, b = t / tc.seqlen;
    const int row = tc.use_positions ? int(positions[t]) : (tc.per_token_table ? t : s);
    for (int which = 0; which < 2; ++which) {
      const int heads = which == 0 ? tc.heads_q : tc.heads_k;
      const auto& src = which == 0 ? q : k;
      const auto& got = which == 0 ? q_got : k_got;
      for (int h = 0; h < heads; ++h) {
        const size_t base = (size_t(t) * heads + h) * tc.head_dim;
        for (int i = 0; i < tc.head_dim; ++i) xin[i] = __bfloat162float(src[base + i]);
        reference_head(xin.data(), yref.data(), &cos[size_t(row) * half], &sin[size_t(row) * half], tc.head_dim,
                       tc.rotary_dim, tc.layout);
        for (int i = 0; i < tc.head_dim; ++i) {
          const double err = std::fabs(double(__bfloat162float(got[base + i])) - yref[i]);
          const double tol = std::ldexp(std::fabs(yref[i]), -8) + 1e-6 * (1 + std::fabs(xin[i]));
          max_err = std::max(max_err, err);
          if (!(err <= tol)) ok = false;
        }
      }
      (void)b;
    }
  }
  std::printf("%s %-28s max_abs_err=%.3g\n", ok ? "PASS" : "FAIL", tc.name, max_err);
  for (void* ptr : {(void*)dq, (void*)dk, (void*)dcos, (void*)dsin, (void*)dpos}) cudaFree(ptr);
  if (!tc.inplace) {
    cudaFree(dq_out);
    cudaFree(dk_out);
  }
  return ok;
}

}  // namespace

int main() {
  int device = 0, num_sms = 0;
  KERNELS_CUDA_CHECK(cudaGetDevice(&device));
  KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  using rotary::Layout;
  const Case cases[] = {
      {"neox_d128", 2, 37, 8, 2, 128, 128, Layout::kHalfSplit, false, true, false},
      {"gptj_d128", 2, 37, 8, 2, 128, 128, Layout::kInterleaved, false, true, false},
      {"neox_partial_inplace", 3, 19, 4, 4, 128, 64, Layout::kHalfSplit, true, true, false},
      {"gptj_partial_copy", 3, 19, 4, 4, 128, 32, Layout::kInterleaved, false, false, false},
      {"neox_partial_copy", 2, 11, 4, 2, 128, 64, Layout::kHalfSplit, false, false, false},  // pass items of 2 vectors
      {"neox_odd_pass_copy", 2, 11, 4, 2, 72, 64, Layout::kHalfSplit, false, true, false},   // one pass vector a head
      {"neox_d64_shared_table", 1, 65, 3, 1, 64, 64, Layout::kHalfSplit, false, false, false},
      {"neox_per_token_table", 2, 33, 2, 2, 96, 96, Layout::kHalfSplit, false, false, true},
      {"neox_q_only_narrow", 2, 9, 5, 0, 80, 20, Layout::kHalfSplit, false, true, false},
      {"gptj_d256_many_heads", 1, 17, 40, 8, 256, 256, Layout::kInterleaved, true, true, false},
  };
  int failures = 0;
  for (const Case& tc : cases) failures += run_case(tc, num_sms) ? 0 : 1;
  std::printf("rotary_test: %d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
