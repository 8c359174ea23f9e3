// Standalone test of the FP8 quantize and GEMM launchers (no torch), against CPU references.
//   nvcc -std=c++17 -O2 -gencode=arch=compute_90a,code=sm_90a -I csrc/kernels \
//        csrc/tests/fp8_test.cu -o build/fp8_test && build/fp8_test
// Prints one line per case and, for 4096^3, both GEMM paths checked against each other and
// timed with CUDA events. Exit status 0 when every case passes.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "common/cuda_utils.cuh"
#include "test_utils.h"

#include "fp8/gemm.cuh"
#include "fp8/quantize.cuh"


namespace {

using fp8::Format;


template <typename T>
std::vector<T> download(const T* dev, size_t n) {
  std::vector<T> host(n);
  KERNELS_CUDA_CHECK(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

uint8_t encode(float v, Format f) {
  return f == Format::kE4M3 ? __nv_fp8_e4m3(v).__x : __nv_fp8_e5m2(v).__x;
}

float decode(uint8_t bits, Format f) {
  if (f == Format::kE4M3) {
    __nv_fp8_e4m3 x;
    x.__x = bits;
    return float(x);
  }
  __nv_fp8_e5m2 x;
  x.__x = bits;
  return float(x);
}

int g_sms = 0, g_cc_major = 0, g_cc_minor = 0;

// ---- quantize ---------------------------------------------------------------------------------

bool test_quantize(int64_t rows, int64_t cols, Format f, bool transpose) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 3.f);
  std::vector<__nv_bfloat16> x(rows * cols);
  float amax_ref = 0.f;
  for (auto& v : x) {
    v = __float2bfloat16(normal(rng));
    amax_ref = std::max(amax_ref, std::fabs(__bfloat162float(v)));
  }
  const float scale = f == Format::kE4M3 ? 448.f / amax_ref * 2.f : 57344.f / amax_ref * 2.f;  // forces saturation
  __nv_bfloat16* dx = kernels_test::to_device(x);
  float* dscale = kernels_test::to_device(std::vector<float>{scale});
  float* damax = kernels_test::to_device(std::vector<float>{0.f});
  uint8_t *dout = nullptr, *dout_t = nullptr;
  KERNELS_CUDA_CHECK(cudaMalloc(&dout, rows * cols + 16));
  KERNELS_CUDA_CHECK(cudaMalloc(&dout_t, rows * cols + 16));
  fp8::QuantizeParams p;
  p.x = dx;
  p.rows = rows;
  p.cols = cols;
  p.ld_x = cols;
  p.scale = dscale;
  p.out = dout;
  p.out_t = transpose ? dout_t : nullptr;
  p.amax = damax;
  p.format = f;
  const fp8::Status s = fp8::launch_quantize(p, g_sms, 0);
  KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
  bool ok = s == fp8::Status::kOk;
  const auto out = download(dout, rows * cols), out_t = download(dout_t, rows * cols);
  const float amax = download(damax, 1)[0];
  ok = ok && amax == amax_ref;
  for (int64_t r = 0; r < rows && ok; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t want = encode(__bfloat162float(x[r * cols + c]) * scale, f);
      if (out[r * cols + c] != want || (transpose && out_t[c * rows + r] != want)) {
        std::printf("  mismatch at (%lld, %lld)\n", (long long)r, (long long)c);
        ok = false;
        break;
      }
    }
  std::printf("%s quantize %-5s %5lld x %-5lld transpose=%d amax=%g\n", ok ? "PASS" : "FAIL",
              fp8::format_name(f), (long long)rows, (long long)cols, transpose, amax);
  for (void* ptr : {(void*)dx, (void*)dscale, (void*)damax, (void*)dout, (void*)dout_t}) cudaFree(ptr);
  return ok;
}

// ---- GEMM -------------------------------------------------------------------------------------

struct GemmCase {
  int64_t m, n, k;
  Format fa, fb;
  int path;      // fp8::gemm::Path
  int block_n;   // 0 = planner
  bool extras;   // row / col scales and bias
};

struct DeviceGemm {
  fp8::GemmParams p;
  std::vector<uint8_t> a, b;
  std::vector<float> row_scale, col_scale;
  std::vector<__nv_bfloat16> bias;
  float scale_a = 0.5f, scale_b = 0.25f;
};

DeviceGemm make_gemm(const GemmCase& gc, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  DeviceGemm g;
  g.a.resize(gc.m * gc.k);
  g.b.resize(gc.n * gc.k);
  for (auto& v : g.a) v = encode(normal(rng), gc.fa);
  for (auto& v : g.b) v = encode(normal(rng), gc.fb);
  g.row_scale.resize(gc.m);
  g.col_scale.resize(gc.n);
  g.bias.resize(gc.n);
  for (auto& v : g.row_scale) v = 0.5f + std::uniform_real_distribution<float>()(rng);
  for (auto& v : g.col_scale) v = 0.5f + std::uniform_real_distribution<float>()(rng);
  for (auto& v : g.bias) v = __float2bfloat16(normal(rng));
  fp8::GemmParams& p = g.p;
  p.a = kernels_test::to_device(g.a);
  p.b = kernels_test::to_device(g.b);
  p.m = gc.m;
  p.n = gc.n;
  p.k = gc.k;
  p.lda = gc.k;
  p.ldb = gc.k;
  p.ldd = gc.n;
  p.a_format = gc.fa;
  p.b_format = gc.fb;
  p.scale_a = kernels_test::to_device(std::vector<float>{g.scale_a});
  p.scale_b = kernels_test::to_device(std::vector<float>{g.scale_b});
  if (gc.extras) {
    p.row_scale = kernels_test::to_device(g.row_scale);
    p.col_scale = kernels_test::to_device(g.col_scale);
    p.bias = kernels_test::to_device(g.bias);
  }
  __nv_bfloat16* d = nullptr;
  KERNELS_CUDA_CHECK(cudaMalloc(&d, gc.m * gc.n * 2 + 16));
  KERNELS_CUDA_CHECK(cudaMemset(d, 0xFF, gc.m * gc.n * 2));  // NaN poison
  p.d = d;
  return g;
}

void free_gemm(DeviceGemm& g) {
  for (const void* ptr : {g.p.a, g.p.b, (const void*)g.p.scale_a, (const void*)g.p.scale_b,
                          (const void*)g.p.row_scale, (const void*)g.p.col_scale, g.p.bias,
                          (const void*)g.p.d})
    if (ptr) cudaFree(const_cast<void*>(ptr));
}

fp8::Status run_gemm(const fp8::GemmParams& p, int path, int block_n, int persistent = -1) {
  fp8::gemm::PlanRequest req;
  req.force_path = path;
  req.force_block_n = block_n;
  req.persistent = persistent;
  const auto plan = fp8::gemm::plan_gemm(p.m, p.n, p.k, g_sms, g_cc_major, g_cc_minor, req);
  return fp8::gemm::launch_gemm(p, plan, g_cc_major, g_cc_minor, 0);
}

bool test_gemm(const GemmCase& gc) {
  DeviceGemm g = make_gemm(gc, uint32_t(gc.m * 131 + gc.n * 7 + gc.k));
  const fp8::Status s = run_gemm(g.p, gc.path, gc.block_n);
  KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
  bool ok = s == fp8::Status::kOk;
  const auto d = download(static_cast<__nv_bfloat16*>(g.p.d), gc.m * gc.n);
  std::vector<float> a(g.a.size()), b(g.b.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = decode(g.a[i], gc.fa);
  for (size_t i = 0; i < b.size(); ++i) b[i] = decode(g.b[i], gc.fb);
  // Dot-product error bound: output rounding to bf16 (2^-8 |ref|) plus an accumulation error
  // u * sum_k |a_k b_k| (scaled). mma.sync accumulates in fp32: u = 1e-5. FP8 WGMMAs add
  // inside each 128-deep k-block with a reduced-precision accumulator (about 14 bits) even
  // when the kernel promotes every block to fp32 registers: the H200 showed up to 3.7e-5 of
  // sum |ab| (2026-11-30, K = 128, a single block), so u = 2^-13. Without promotion (BN = 256,
  // like cuBLASLt's use_fast_accum) the error grows with K: up to 2.8e-4 seen, u = 2^-11.
  const bool wgmma = gc.path == int(fp8::gemm::Path::kWgmma);
  const bool fast_accum = wgmma && gc.block_n == 256;
  const double u = fast_accum ? std::ldexp(1.0, -11) : wgmma ? std::ldexp(1.0, -13) : 1e-5;
  double max_rel = 0.0, worst_u = 0.0;
  for (int64_t i = 0; i < gc.m && ok; ++i)
    for (int64_t j = 0; j < gc.n; ++j) {
      double acc = 0.0, mag = 0.0;
      for (int64_t kk = 0; kk < gc.k; ++kk) {
        acc += double(a[i * gc.k + kk]) * b[j * gc.k + kk];
        mag += std::fabs(double(a[i * gc.k + kk]) * b[j * gc.k + kk]);
      }
      double factor = double(g.scale_a) * g.scale_b;
      if (gc.extras) factor *= double(g.row_scale[i]) * g.col_scale[j];
      const double ref = acc * factor + (gc.extras ? __bfloat162float(g.bias[j]) : 0.0);
      const double got = __bfloat162float(d[i * gc.n + j]);
      const double tol = std::ldexp(std::fabs(ref), -8) + u * mag * factor + 1e-6;
      max_rel = std::max(max_rel, std::fabs(got - ref) / (std::fabs(ref) + 1e-3));
      worst_u = std::max(worst_u, (std::fabs(got - ref) - std::ldexp(std::fabs(ref), -8)) / (mag * factor + 1e-30));
      if (!(std::fabs(got - ref) <= tol)) {
        std::printf("  (%lld, %lld): got %g want %g\n", (long long)i, (long long)j, got, ref);
        ok = false;
        break;
      }
    }
  std::printf("%s gemm %-8s %s x %s M=%-5lld N=%-5lld K=%-5lld bn=%-3d extras=%d status=%s acc_err/sum|ab|=%.1e%s\n",
              ok ? "PASS" : "FAIL", fp8::gemm::path_name(fp8::gemm::Path(gc.path)),
              fp8::format_name(gc.fa), fp8::format_name(gc.fb), (long long)gc.m, (long long)gc.n,
              (long long)gc.k, gc.block_n, gc.extras, fp8::status_string(s), std::max(worst_u, 0.0),
              fast_accum ? " (fast accum)" : "");
  free_gemm(g);
  return ok;
}

bool expect_status(const char* what, fp8::Status got, fp8::Status want) {
  const bool ok = got == want;
  std::printf("%s reject %-28s -> %s\n", ok ? "PASS" : "FAIL", what, fp8::status_string(got));
  return ok;
}

// Both paths on one large problem: they must agree, and each gets a CUDA-event timing.
bool cross_check_large(int64_t n) {
  GemmCase gc{n, n, n, Format::kE4M3, Format::kE4M3, 0, 0, false};
  DeviceGemm g = make_gemm(gc, 3);
  __nv_bfloat16* d_ref = nullptr;
  KERNELS_CUDA_CHECK(cudaMalloc(&d_ref, n * n * 2));
  fp8::GemmParams p_ref = g.p;
  p_ref.d = d_ref;
  bool ok = run_gemm(p_ref, int(fp8::gemm::Path::kMmaSync), 0) == fp8::Status::kOk;
  KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  KERNELS_CUDA_CHECK(cudaEventCreate(&start));
  KERNELS_CUDA_CHECK(cudaEventCreate(&stop));
  struct Variant { const char* name; int path, block_n, persistent; };
  const Variant variants[] = {{"wgmma auto", 0, 0, -1}, {"wgmma bn256 persistent", 0, 256, 1},
                              {"wgmma bn256 per-tile", 0, 256, 0}, {"wgmma bn128 persistent", 0, 128, 1},
                              {"wgmma bn128 per-tile", 0, 128, 0}, {"wgmma bn64", 0, 64, -1},
                              {"mma_sync", 1, 0, -1}};
  const auto ref = download(d_ref, n * n);
  for (const Variant& v : variants) {
    KERNELS_CUDA_CHECK(cudaMemset(g.p.d, 0xFF, n * n * 2));
    const fp8::Status s = run_gemm(g.p, v.path, v.block_n, v.persistent);
    KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
    const auto got = download(static_cast<__nv_bfloat16*>(g.p.d), n * n);
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n * n; ++i) {
      const double r = __bfloat162float(ref[i]), x = __bfloat162float(got[i]);
      num += (x - r) * (x - r);
      den += r * r;
    }
    const double rel = std::sqrt(num / den);
    // both fp32-accurate: only rare bf16 rounding flips differ; fast accumulation drifts more
    const bool fast_accum = v.path == int(fp8::gemm::Path::kWgmma) && v.block_n == 256;
    const bool good = s == fp8::Status::kOk && rel < (fast_accum ? 1e-2 : 1e-3);
    const int reps = 20;
    KERNELS_CUDA_CHECK(cudaEventRecord(start));
    for (int r = 0; r < reps; ++r) run_gemm(g.p, v.path, v.block_n, v.persistent);
    KERNELS_CUDA_CHECK(cudaEventRecord(stop));
    KERNELS_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.f;
    KERNELS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    ms /= reps;
    std::printf("%s gemm %lld^3 %-24s rel_err_vs_mma_sync=%.2e  %.3f ms  %.0f TFLOP/s\n",
                good ? "PASS" : "FAIL", (long long)n, v.name, rel, ms, 2.0 * n * n * n / (ms * 1e-3) / 1e12);
    ok = ok && good;
  }
  cudaFree(d_ref);
  free_gemm(g);
  return ok;
}

}  // namespace

int main() {
  int device = 0;
  KERNELS_CUDA_CHECK(cudaGetDevice(&device));
  KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, device));
  KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&g_cc_major, cudaDevAttrComputeCapabilityMajor, device));
  KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&g_cc_minor, cudaDevAttrComputeCapabilityMinor, device));
  int failures = 0;
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    failures += !test_quantize(128, 256, f, true);
    failures += !test_quantize(77, 45, f, true);   // scalar path, tails
    failures += !test_quantize(300, 1000, f, false);
  }
  const bool hopper = g_cc_major == 9 && g_cc_minor == 0;
  std::vector<GemmCase> cases;
  for (int path : {0, 1}) {
    if (path == 0 && !hopper) continue;
    for (int bn : {0, 64, 128, 256}) {
      if (path == 1 && bn != 0) continue;
      cases.push_back({128, 256, 128, Format::kE4M3, Format::kE4M3, path, bn, false});
      cases.push_back({257, 131, 400, Format::kE4M3, Format::kE4M3, path, bn, true});
    }
    for (int64_t m : {1, 3, 8, 16}) cases.push_back({m, 96, 272, Format::kE4M3, Format::kE4M3, path, 0, true});
    cases.push_back({129, 333, 1040, Format::kE4M3, Format::kE5M2, path, 0, false});
    cases.push_back({65, 200, 48, Format::kE5M2, Format::kE4M3, path, 0, true});
    cases.push_back({300, 520, 2064, Format::kE4M3, Format::kE4M3, path, 0, false});  // > stages k-blocks, persistent wrap
    if (path == 0) cases.push_back({300, 520, 2064, Format::kE4M3, Format::kE4M3, path, 256, false});
  }
  for (const GemmCase& gc : cases) failures += !test_gemm(gc);

  {
    GemmCase gc{64, 64, 64, Format::kE4M3, Format::kE4M3, 0, 0, false};
    DeviceGemm g = make_gemm(gc, 1);
    fp8::GemmParams bad = g.p;
    bad.k = 40;
    failures += !expect_status("K % 16 != 0", run_gemm(bad, -1, 0), fp8::Status::kUnsupportedK);
    bad = g.p;
    bad.a_format = bad.b_format = Format::kE5M2;
    failures += !expect_status("e5m2 x e5m2", run_gemm(bad, -1, 0), fp8::Status::kUnsupportedFormats);
    bad = g.p;
    bad.a = static_cast<const uint8_t*>(g.p.a) + 8;
    failures += !expect_status("misaligned A", run_gemm(bad, -1, 0), fp8::Status::kMisaligned);
    free_gemm(g);
  }
  if (hopper) failures += !cross_check_large(4096);
  std::printf("fp8_test: %d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
