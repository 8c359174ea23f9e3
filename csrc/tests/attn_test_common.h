// Shared helpers of the standalone attention tests: random bf16 data, a double-precision CPU
// reference (GQA, bottom-right causal, per-batch key lengths), the error metric, a timer.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include "../kernels/common/cuda_utils.cuh"
#include "test_utils.h"

namespace kernels::test {

inline std::vector<__nv_bfloat16> random_bf16(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<__nv_bfloat16> v(n);
  for (auto& x : v) x = __float2bfloat16(dist(rng));
  return v;
}

// q [Sq][Hq][D], k/v [Sk][Hkv][D] of one batch (row strides in elements) -> out [Sq][Hq][D] and,
// when lse is given, lse[h * lse_head_stride + i] (natural log of the scaled scores' sum of
// exponentials; -inf for a row that sees no key).
inline void reference_one_batch(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, float* out,
                                int sq, int kv_len, int hq, int hkv, int d, bool causal, double scale,
                                long q_token_stride, long kv_token_stride, long out_token_stride, float* lse = nullptr,
                                long lse_head_stride = 0) {
  const int group = hq / hkv;
  std::vector<double> s(kv_len > 0 ? kv_len : 1);
  for (int i = 0; i < sq; ++i)
    for (int h = 0; h < hq; ++h) {
      const int hk = h / group;
      const int last = causal ? std::min(kv_len - 1, i + kv_len - sq) : kv_len - 1;
      double mx = -INFINITY;
      for (int j = 0; j <= last; ++j) {
        double acc = 0;
        for (int e = 0; e < d; ++e)
          acc += double(__bfloat162float(q[i * q_token_stride + h * d + e])) *
                 __bfloat162float(k[j * kv_token_stride + hk * d + e]);
        s[j] = acc * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (int j = 0; j <= last; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int e = 0; e < d; ++e) {
        double acc = 0;
        for (int j = 0; j <= last; ++j) acc += s[j] * __bfloat162float(v[j * kv_token_stride + hk * d + e]);
        out[i * out_token_stride + h * d + e] = last >= 0 ? float(acc / sum) : 0.f;
      }
      if (lse != nullptr) lse[h * lse_head_stride + i] = last >= 0 ? float(mx + std::log(sum)) : -INFINITY;
    }
}

// Relative Frobenius error; NaN anywhere gives NaN (never a pass).
inline double rel_err(const std::vector<__nv_bfloat16>& out, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double o = __bfloat162float(out[i]);
    if (std::isnan(o)) return NAN;
    num += (o - ref[i]) * (o - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Median time of one launch of `fn` (ms) under sustained load, as the Python harness times:
// launches back to back for about warmup_ms, then one event pair per launch for about
// measure_ms. Short bursts read a few percent fast, before clocks settle under the power limit.
template <class Fn>
float time_ms(Fn fn, float warmup_ms = 50.f, float measure_ms = 150.f) {
  cudaEvent_t a, b;
  KERNELS_CUDA_CHECK(cudaEventCreate(&a));
  KERNELS_CUDA_CHECK(cudaEventCreate(&b));
  fn();
  KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
  KERNELS_CUDA_CHECK(cudaEventRecord(a));
  int launched = 0;
  float elapsed = 0.f;
  do {
    for (int i = 0; i < 8; ++i) fn();
    launched += 8;
    KERNELS_CUDA_CHECK(cudaEventRecord(b));
    KERNELS_CUDA_CHECK(cudaEventSynchronize(b));
    KERNELS_CUDA_CHECK(cudaEventElapsedTime(&elapsed, a, b));
  } while (elapsed < warmup_ms && launched < 100000);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  const int iters = std::clamp(static_cast<int>(measure_ms / (elapsed / launched)), 10, 5000);
  std::vector<cudaEvent_t> events(2 * iters);
  for (auto& e : events) KERNELS_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    KERNELS_CUDA_CHECK(cudaEventRecord(events[2 * i]));
    fn();
    KERNELS_CUDA_CHECK(cudaEventRecord(events[2 * i + 1]));
  }
  KERNELS_CUDA_CHECK(cudaEventSynchronize(events.back()));
  std::vector<float> t(iters);
  for (int i = 0; i < iters; ++i) KERNELS_CUDA_CHECK(cudaEventElapsedTime(&t[i], events[2 * i], events[2 * i + 1]));
  for (auto& e : events) cudaEventDestroy(e);
  std::nth_element(t.begin(), t.begin() + iters / 2, t.end());
  return t[iters / 2];
}

}  // namespace kernels::test
