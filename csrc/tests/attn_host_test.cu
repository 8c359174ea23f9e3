// Host-only checks of the attention launch math, no GPU needed, so the CPU CI runs them
// (tests/test_csrc_compile.py):
//   - the decode split heuristic (decode_num_splits) picks the best measured splits of the H200
//     sweeps its cost model was fitted to (attn_decode.cu), on 132 SMs;
//   - FastDivmod (the paged-KV page index) equals integer division for every page size 1..256
//     and dividends across [0, 2^31);
//   - the error model: host rejections throw the types of common/errors.h.
//   python -m tools.nvcc csrc/tests/attn_host_test.cu csrc/kernels/attention/attn_decode.cu \
//       && build/csrc-tests/attn_host_test
#include <cstdint>
#include <cstdio>
#include <random>

#include <type_traits>

#include "../kernels/attention/attn_api.h"
#include "../kernels/common/launch.cuh"
#include "test_utils.h"

using kernels::attention::decode_num_splits;

// The error model (common/errors.h) on the host paths that need no GPU: each rejection throws
// its type, with the message naming what is required and what was given.
static int check_errors() {
  static_assert(std::is_base_of_v<std::invalid_argument, kernels::ValueError>, "pybind11: ValueError");
  static_assert(std::is_base_of_v<std::invalid_argument, kernels::TypeError>, "ValueError without a translator");
  static_assert(std::is_base_of_v<std::runtime_error, kernels::NotImplementedError>, "RuntimeError without one");
  static_assert(std::is_base_of_v<std::runtime_error, kernels::CudaError>, "pybind11: RuntimeError");
  using kernels::ValueError;
  using kernels::test::rejects;
  namespace attn = kernels::attention;
  int failures = 0;
  failures += !rejects<ValueError>(
      "head_dim 96", [] { decode_num_splits(1, 1, 1, 1, 64, 96, 132); },
      "head_dim 96 is not supported; supported: 64, 128, 256");
  failures += !rejects<ValueError>("FastDivmod(0)", [] { kernels::FastDivmod(0); }, "must be >= 1, got 0");
  attn::AttnParams p;
  p.num_splits = 0;
  failures += !rejects<ValueError>(
      "num_splits 0", [&] { attn::run_decode(p, attn::AttnImpl::kTensorCore, nullptr); },
      "decode: num_splits must be in [1, 128], got 0");
  failures += !rejects<ValueError>(
      "grid y 70000", [] { kernels::check_grid(dim3(1, 70000, 1), "k", "cause"); },
      "k: grid (1, 70000, 1) exceeds 65535 in y or z (cause)");
  failures += !rejects<kernels::CudaError>(
      "CUDA error", [] { kernels::check_cuda_error(cudaErrorInvalidValue, "cudaMemcpy"); }, "cudaMemcpy failed: ");
  failures += !rejects<kernels::CudaError>(
      "launch error", [] { kernels::check_launch("k", cudaErrorInvalidValue); }, "k launch failed: ");
  failures += !rejects<kernels::CudaError>(
      "CUDA call error", [] { KERNELS_CUDA_CHECK(cudaErrorInvalidValue); }, "cudaErrorInvalidValue at ");
  return failures;
}

static int check_fast_divmod() {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> any(0, 0x7fffffff);
  int failures = 0;
  for (int d = 1; d <= 256 + 8; ++d) {
    const kernels::FastDivmod div(d);
    int bad = 0;
    auto check = [&](int x) { bad += div.div(x) != x / d; };
    for (int x = 0; x < 4096; ++x) check(x);
    for (int i = 0; i < 20000; ++i) check(any(rng));
    for (int64_t q : {int64_t(0x7fffffff) / d, int64_t(0x7fffffff) / d - 1}) {
      for (int r = -1; r <= 1; ++r) {  // around the multiples of d at the top of the range
        const int64_t x = q * d + r;
        if (x >= 0 && x <= 0x7fffffff) check(static_cast<int>(x));
      }
    }
    check(0x7fffffff);
    if (bad) std::printf("FastDivmod(%d): %d wrong quotients  FAIL\n", d, bad);
    failures += bad != 0;
  }
  std::printf("FastDivmod, divisors 1..264: %s\n", failures ? "FAIL" : "PASS");
  return failures;
}

int main() {
  struct Case {
    int batch, heads_kv, seqlen_q, group, max_seqlen_k, head_dim;
    int lo, hi;  // accepted split counts (inclusive)
  };
  constexpr int kSms = 132;
  const Case cases[] = {
      // Sk 4096, 32 / 8 heads, D 128 (the benchmark shapes)
      {16, 8, 1, 4, 4096, 128, 1, 1},  // one CTA per SM already streams near copy speed
      {64, 8, 1, 4, 4096, 128, 1, 1},  // four waves of CTAs: no split
      {1, 8, 1, 4, 4096, 128, 8, 32},  // 8 CTAs: split to fill the GPU
      // short sequences never split below two KV tiles per split
      {1, 8, 1, 4, 64, 128, 1, 1},
      {1, 1, 1, 1, 256, 64, 1, 2},
      // the split count stays within [1, kMaxDecodeSplits]
      {1, 1, 1, 1, 1 << 20, 256, 1, kernels::attention::kMaxDecodeSplits},
  };
  int failures = 0;
  for (const Case& c : cases) {
    const int s = decode_num_splits(c.batch, c.heads_kv, c.seqlen_q, c.group, c.max_seqlen_k, c.head_dim, kSms);
    const bool ok = s >= c.lo && s <= c.hi;
    failures += !ok;
    std::printf("B%-3d Hkv%-2d Sq%d group %d Sk %-8d D%-3d -> %3d splits (want %d..%d)  %s\n", c.batch, c.heads_kv,
                c.seqlen_q, c.group, c.max_seqlen_k, c.head_dim, s, c.lo, c.hi, ok ? "PASS" : "FAIL");
  }
  failures += check_fast_divmod();
  failures += check_errors();
  std::printf("attn_host_test: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
