// Standalone test of the FP8 quantize and GEMM launchers (no torch), against CPU references.
//   python -m tools.nvcc csrc/tests/fp8_test.cu csrc/kernels/fp8/fp8_launch.cu -Xptxas -v
//   timeout 300 build/csrc-tests/fp8_test
// Prints one line per correctness case (every planner variant: block_n, accumulation mode,
// promotion interval, clusters, persistence, fast stores, split-K, with M / N / K tails and
// odd tile counts in the cluster dimension), then checks the timed GEMM variants at 4096^3
// and 8192^3 and the decode-sized split-K rows against the mma.sync path, times them with
// sustained clocks (>= 200 ms of launches as warm-up, then the median of per-launch event
// pairs over >= 300 ms, as the Python harness) and prints compact tables. Exit status 0 when
// every case passes.
//   fp8_test --small           one case per store path (for compute-sanitizer), nothing else
//   fp8_test --no-timing       correctness cases only
//   fp8_test --time-only SUB   no correctness cases; check and time the variants whose label
//                              contains SUB (e.g. "bn192", "fast", "default"; "splitk": the
//                              decode shapes M = 1 / 16 / 128, planner default (split-K
//                              where it picks it), split-K off, and forced split counts;
//                              "gemv": the GEMV kernel's tile variants at M = 1 and 16,
//                              beside the swap-AB TMA GEMV (gemv_tma.cuh) with its own split
//                              count and with 1 and 2 forced; "skinny": M = 32 / 64 / 128 on
//                              LLM shapes, the planner's tiled WGMMA plan against the swap-AB
//                              kernel with its own split count and with 1)
//   fp8_test --shape MxNxK     time the GEMM variants on these shapes (repeatable) instead of
//                              4096^3 and 8192^3
//   fp8_test --graph           the "splitk" rows per call under CUDA-graph replay (20 calls a
//                              graph), as the benchmark's -graph rows: no host launch cost
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_utils.cuh"
#include "test_utils.h"

#include "fp8/gemm.cuh"
#include "fp8/quantize.cuh"

namespace fp8 = kernels::fp8;

namespace {

using fp8::Format;

template <typename T>
std::vector<T> download(const T* dev, size_t n) {
  std::vector<T> host(n);
  KERNELS_CUDA_CHECK(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// ||got - ref||_F / ||ref||_F over bf16 outputs (the timing tables' check against mma.sync)
double relative_frobenius(const std::vector<__nv_bfloat16>& ref, const std::vector<__nv_bfloat16>& got) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double r = __bfloat162float(ref[i]), x = __bfloat162float(got[i]);
    num += (x - r) * (x - r);
    den += r * r;
  }
  return std::sqrt(num / den);
}

uint8_t encode(float v, Format f) { return f == Format::kE4M3 ? __nv_fp8_e4m3(v).__x : __nv_fp8_e5m2(v).__x; }

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
  __nv_bfloat16* dx = kernels::test::to_device(x);
  float* dscale = kernels::test::to_device(std::vector<float>{scale});
  float* damax = kernels::test::to_device(std::vector<float>{0.f});
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
  bool ok = kernels::test::runs("quantize", [&] { fp8::launch_quantize(p, g_sms, 0); });
  KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
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
  std::printf("%s quantize %-5s %5lld x %-5lld transpose=%d amax=%g\n", ok ? "PASS" : "FAIL", fp8::format_name(f),
              (long long)rows, (long long)cols, transpose, amax);
  for (void* ptr : {(void*)dx, (void*)dscale, (void*)damax, (void*)dout, (void*)dout_t}) cudaFree(ptr);
  return ok;
}

// ---- GEMM -------------------------------------------------------------------------------------

struct GemmCase {
  int64_t m, n, k;
  Format fa, fb;
  int path;     // fp8::gemm::Path
  int block_n;  // 0 = planner
  bool extras;  // row / col scales and bias
  // PlanRequest fields beyond path / block_n (-1 / 0 = planner)
  int accum = -1, promote_every = 0, cluster = -1, persistent = -1, group_m = 0, store = -1;
  int sms = 0;  // SM count the planner sees (0: the device's); small values force persistent wrap
  int split_k = 0;
  int stagger = -1;
};

// A forced sm_90a kernel of the correctness cases (PlanRequest fields; block_n is the case's).
struct KernelChoice {
  int block_n, accum, promote_every, cluster;
};

// gc on kernel v, with the persistence, planner SM count and store mode (StoreMode) given.
GemmCase with_kernel(GemmCase gc, const KernelChoice& v, int persistent, int sms, int store) {
  gc.accum = v.accum;
  gc.promote_every = v.promote_every;
  gc.cluster = v.cluster;
  gc.persistent = persistent;
  gc.sms = sms;
  gc.store = store;
  return gc;
}

// The planner request of a test case or a timed variant (both carry the same knobs).
template <class Knobs>
fp8::gemm::PlanRequest request_of(const Knobs& v) {
  fp8::gemm::PlanRequest req;
  req.force_path = v.path;
  req.force_block_n = v.block_n;
  req.accum = v.accum;
  req.promote_every = v.promote_every;
  req.cluster = v.cluster;
  req.persistent = v.persistent;
  req.group_m = v.group_m;
  req.store = v.store;
  req.split_k = v.split_k;
  req.stagger = v.stagger;
  return req;
}

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
  // normal samples through a table: 8192^3 operands (2 x 64 MB) fill in well under a second
  std::vector<uint8_t> table_a(1 << 16), table_b(1 << 16);
  for (auto& v : table_a) v = encode(normal(rng), gc.fa);
  for (auto& v : table_b) v = encode(normal(rng), gc.fb);
  uint64_t x = 0x9E3779B97F4A7C15ull ^ seed;
  const auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return uint32_t(x >> 32) & 0xFFFF;
  };
  for (auto& v : g.a) v = table_a[next()];
  for (auto& v : g.b) v = table_b[next()];
  g.row_scale.resize(gc.m);
  g.col_scale.resize(gc.n);
  g.bias.resize(gc.n);
  for (auto& v : g.row_scale) v = 0.5f + std::uniform_real_distribution<float>()(rng);
  for (auto& v : g.col_scale) v = 0.5f + std::uniform_real_distribution<float>()(rng);
  for (auto& v : g.bias) v = __float2bfloat16(normal(rng));
  fp8::GemmParams& p = g.p;
  p.a = kernels::test::to_device(g.a);
  p.b = kernels::test::to_device(g.b);
  p.m = gc.m;
  p.n = gc.n;
  p.k = gc.k;
  p.lda = gc.k;
  p.ldb = gc.k;
  p.ldd = gc.n;
  p.a_format = gc.fa;
  p.b_format = gc.fb;
  p.scale_a = kernels::test::to_device(std::vector<float>{g.scale_a});
  p.scale_b = kernels::test::to_device(std::vector<float>{g.scale_b});
  if (gc.extras) {
    p.row_scale = kernels::test::to_device(g.row_scale);
    p.col_scale = kernels::test::to_device(g.col_scale);
    p.bias = kernels::test::to_device(g.bias);
  }
  __nv_bfloat16* d = nullptr;
  KERNELS_CUDA_CHECK(cudaMalloc(&d, gc.m * gc.n * 2 + 16));
  KERNELS_CUDA_CHECK(cudaMemset(d, 0xFF, gc.m * gc.n * 2));  // NaN poison
  p.d = d;
  return g;
}

void free_gemm(DeviceGemm& g) {
  for (const void* ptr : {g.p.a, g.p.b, (const void*)g.p.scale_a, (const void*)g.p.scale_b, (const void*)g.p.row_scale,
                          (const void*)g.p.col_scale, g.p.bias, (const void*)g.p.d})
    if (ptr) cudaFree(const_cast<void*>(ptr));
}

// Split-K workspace shared by every launch (grown outside the timed loops: the warm-up's
// first launch sizes it).
void* g_workspace = nullptr;
size_t g_workspace_bytes = 0;

// launch_plan's stream: the legacy default stream, or graph_median_ms's capture stream.
cudaStream_t g_stream = nullptr;
// --graph: time_decode times its rows under CUDA-graph replay (graph_median_ms).
bool g_graph = false;

void* workspace_for(const fp8::gemm::GemmPlan& plan, int64_t m, int64_t n) {
  const size_t bytes = fp8::gemm::gemm_workspace_bytes(plan, m, n);
  if (bytes > g_workspace_bytes) {
    if (g_workspace != nullptr) KERNELS_CUDA_CHECK(cudaFree(g_workspace));
    KERNELS_CUDA_CHECK(cudaMalloc(&g_workspace, bytes));
    g_workspace_bytes = bytes;
  }
  return g_workspace;
}

// Plans and launches one GEMM; throws what the launcher throws (common/errors.h).
void launch_plan(const fp8::GemmParams& p, const fp8::gemm::PlanRequest& req, int sms = 0) {
  const auto plan = fp8::gemm::plan_gemm(p.m, p.n, p.k, sms > 0 ? sms : g_sms, g_cc_major, g_cc_minor, req);
  void* ws = workspace_for(plan, p.m, p.n);
  fp8::gemm::launch_gemm(p, plan, g_cc_major, g_cc_minor, g_stream, ws, g_workspace_bytes);
}

fp8::gemm::PlanRequest forced(int path, int block_n, int persistent = -1) {
  fp8::gemm::PlanRequest req;
  req.force_path = path;
  req.force_block_n = block_n;
  req.persistent = persistent;
  return req;
}

// launch_plan; false (the error printed) when the launcher throws.
bool run_plan(const fp8::GemmParams& p, const fp8::gemm::PlanRequest& req, int sms = 0) {
  return kernels::test::runs("fp8 gemm", [&] { launch_plan(p, req, sms); });
}

bool run_gemm(const fp8::GemmParams& p, int path, int block_n, int persistent = -1) {
  return run_plan(p, forced(path, block_n, persistent));
}

// The plan's accumulation / cluster choices, for labels and tolerances.
fp8::gemm::GemmPlan plan_of(const GemmCase& gc) {
  return fp8::gemm::plan_gemm(gc.m, gc.n, gc.k, gc.sms > 0 ? gc.sms : g_sms, g_cc_major, g_cc_minor, request_of(gc));
}

std::string plan_label(const fp8::gemm::GemmPlan& plan) {
  if (plan.path == fp8::gemm::Path::kMmaSync) return "mma_sync";
  if (plan.path == fp8::gemm::Path::kGemv) return "gemv m" + std::to_string(plan.block_m);
  if (plan.path == fp8::gemm::Path::kGemvTma)  // planned splits (the launcher may take fewer: launch_gemv_tma_splits)
    return "gemv_tma m" + std::to_string(plan.block_m) + " s" +
           std::to_string(plan.tiles > 0 ? plan.grid / plan.tiles : 1);
  std::string s = "bn" + std::to_string(plan.block_n) + " " + fp8::gemm::accum_name(plan.accum);
  if (plan.accum == fp8::gemm::AccumMode::kPromote && plan.promote_every == 2) s += plan.stagger ? "2st" : "2";
  if (plan.accum == fp8::gemm::AccumMode::kPromoteOverlap && plan.promote_every == 2) s += "2";
  if (plan.cluster != fp8::gemm::ClusterMode::kNone) s += std::string(" ") + fp8::gemm::cluster_name(plan.cluster);
  if (plan.split_k > 1) s += " s" + std::to_string(plan.split_k);
  s += plan.persistent ? " pers" : " tile";
  if (plan.group_m != fp8::gemm::PlannerDefaults::kGroupM) s += " g" + std::to_string(plan.group_m);
  if (plan.store) s += plan.store == 4 ? " tma64" : plan.store == 3 ? " tma" : plan.store == 2 ? " fs16" : " fs";
  return s;
}

// Accumulation error bound per plan (see test_gemm).
double accumulation_u(const fp8::gemm::GemmPlan& plan) {
  if (plan.path == fp8::gemm::Path::kMmaSync) return 1e-5;
  if (plan.accum == fp8::gemm::AccumMode::kFast) return std::ldexp(1.0, -11);
  return plan.promote_every == 2 ? std::ldexp(1.0, -12) : std::ldexp(1.0, -13);
}

bool test_gemm(const GemmCase& gc) {
  DeviceGemm g = make_gemm(gc, uint32_t(gc.m * 131 + gc.n * 7 + gc.k));
  const fp8::gemm::GemmPlan plan = plan_of(gc);
  const bool launched = run_plan(g.p, request_of(gc), gc.sms);
  KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
  bool ok = launched;
  const auto d = download(static_cast<__nv_bfloat16*>(g.p.d), gc.m * gc.n);
  bool deterministic = true;
  // the TMA GEMV's split-K inside a cluster (grid = splits x tiles), summed in rank order
  const bool cluster_split = plan.path == fp8::gemm::Path::kGemvTma && plan.grid > plan.tiles;
  if (plan.split_k > 1 || cluster_split) {
    // the split-K reduction sums in split order: a second run gives the same bits
    KERNELS_CUDA_CHECK(cudaMemset(g.p.d, 0xFF, gc.m * gc.n * 2));
    const bool again_ran = run_plan(g.p, request_of(gc), gc.sms);  // always runs (no && short-circuit)
    ok = ok && again_ran;
    KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
    const auto again = download(static_cast<__nv_bfloat16*>(g.p.d), gc.m * gc.n);
    deterministic = std::memcmp(again.data(), d.data(), d.size() * sizeof(d[0])) == 0;
    if (!deterministic) std::printf("  split-K rerun differs\n");
    ok = ok && deterministic;
  }
  std::vector<float> a(g.a.size()), b(g.b.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = decode(g.a[i], gc.fa);
  for (size_t i = 0; i < b.size(); ++i) b[i] = decode(g.b[i], gc.fb);
  // Dot-product error bound: output rounding to bf16 (2^-8 |ref|) plus an accumulation error
  // u * sum_k |a_k b_k| (scaled). mma.sync accumulates in fp32: u = 1e-5. FP8 WGMMAs add
  // inside each 128-deep k-block with a reduced-precision accumulator (about 14 bits) even
  // when the kernel promotes every block to fp32 registers: the H200 showed up to 3.7e-5 of
  // sum |ab| (2026-11-30, K = 128, a single block), so u = 2^-13; promoting every 2 k-blocks
  // at most doubles the in-WGMMA adds per promotion, u = 2^-12. Without promotion (kFast, like
  // cuBLASLt's use_fast_accum) the error grows with K: up to 2.8e-4 seen, u = 2^-11.
  const bool fast_accum = plan.path == fp8::gemm::Path::kWgmma && plan.accum == fp8::gemm::AccumMode::kFast;
  const double u = accumulation_u(plan);
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
  std::printf(
      "%s gemm %-26s %s x %s M=%-5lld N=%-5lld K=%-5lld extras=%d grid=%-4d launched=%d acc_err/sum|ab|=%.1e%s\n",
      ok ? "PASS" : "FAIL", plan_label(plan).c_str(), fp8::format_name(gc.fa), fp8::format_name(gc.fb), (long long)gc.m,
      (long long)gc.n, (long long)gc.k, gc.extras, plan.grid, launched, std::max(worst_u, 0.0),
      fast_accum ? " (fast accum)" : "");
  std::fflush(stdout);  // a hang shows as the case after the last printed line
  free_gemm(g);
  return ok;
}

// Host check of the tile scheduler: over all units and cluster ranks, every in-range tile
// comes up exactly once, and the out-of-range ones only where a cluster dimension is odd.
bool test_scheduler() {
  bool ok = true;
  for (int tiles_m : {1, 2, 3, 7, 32})
    for (int tiles_n : {1, 2, 5, 33})
      for (int group_m : {1, 4, 8, 16})
        for (int cm : {1, 2})
          for (int cn : {1, 2}) {
            fp8::gemm::TileScheduler sched;
            sched.tiles_m = tiles_m;
            sched.tiles_n = tiles_n;
            sched.group_m = group_m;
            sched.cluster_m = cm;
            sched.cluster_n = cn;
            std::vector<int> seen(tiles_m * tiles_n, 0);
            int phantoms = 0;
            for (int unit = 0; unit < sched.num_units(); ++unit)
              for (int rank = 0; rank < sched.cluster_size(); ++rank) {
                int mb, nb;
                sched.tile_coord(unit, rank, mb, nb);
                if (sched.tile_in_range(mb, nb)) {
                  ++seen[mb * tiles_n + nb];
                } else {
                  ++phantoms;
                  ok = ok && mb < tiles_m + cm - 1 && nb < tiles_n + cn - 1;
                }
              }
            for (int v : seen) ok = ok && v == 1;
            const int padded = (tiles_m + cm - 1) / cm * cm * ((tiles_n + cn - 1) / cn * cn);
            ok = ok && phantoms == padded - tiles_m * tiles_n;
          }
  std::printf("%s tile scheduler covers every tile once (clusters 1 / 2 / 2 x 2, odd tile counts)\n",
              ok ? "PASS" : "FAIL");
  return ok;
}

// ---- large problems: every variant checked against mma.sync and timed -------------------------

struct TimedVariant {
  int path, block_n, accum, promote_every, cluster, persistent, group_m, store;
  int split_k = 0;
  int stagger = -1;
};

// The variants the timing table covers (-1 / 0 = planner), the planner's default first; "fs" / "fs16" in a
// label: unchecked interior stores (PlanRequest::store). Pairs that differ in one knob:
// default vs bn128 pingpong pers fs (stores), bn128 promote vs pingpong vs overlap vs fast
// (promotion at one tile), bn128 vs bn176 vs bn192 promote (tile width against wave
// quantization), promote vs overlap (epilogue hidden behind the next tile's first k-block),
// bn256 fast with and without fs, the TMA-store kernels with and without clusters.
std::vector<TimedVariant> timed_variants() {
  using fp8::gemm::AccumMode;
  using fp8::gemm::ClusterMode;
  const int promote = int(AccumMode::kPromote), pingpong = int(AccumMode::kPromotePingPong),
            fast = int(AccumMode::kFast), overlap = int(AccumMode::kPromoteOverlap);
  const int none = int(ClusterMode::kNone), pair_m = int(ClusterMode::kPairM), pair_n = int(ClusterMode::kPairN);
  // clang-format off
  return {
      {-1, 0, -1, 0, -1, -1, 0, -1},              // planner default (bn128 pingpong pers)
      {0, 128, pingpong, 0, none, 1, 0, 1},
      {0, 128, pingpong, 0, pair_m, 1, 0, 1},
      {0, 128, promote, 1, none, 1, 0, 0},
      {0, 128, promote, 1, none, 1, 0, 1},
      {0, 128, promote, 2, none, 1, 0, 1},
      {0, 128, promote, 2, none, 1, 0, 1, 0, 1},
      {0, 128, promote, 2, none, 1, 0, 2},
      {0, 128, overlap, 0, none, 1, 0, 1},
      {0, 128, fast, 0, none, 1, 0, 1},
      {0, 192, promote, 1, none, 1, 0, 0},
      {0, 192, promote, 1, none, 1, 0, 1},
      {0, 192, promote, 1, none, 0, 0, 1},
      {0, 192, promote, 2, none, 1, 0, 1},
      {0, 192, promote, 2, none, 1, 0, 1, 0, 1},
      {0, 192, promote, 2, none, 1, 0, 2},        // 16-byte row stores (StoreMode::kRows16)
      {0, 192, promote, 2, none, 1, 0, 2, 0, 1},
      {0, 192, promote, 2, none, 1, 0, 3},        // TMA-store epilogue (StoreMode::kTma)
      {0, 176, promote, 2, none, 1, 0, 3},
      {0, 192, promote, 1, none, 1, 0, 3},
      {0, 192, promote, 2, pair_m, 1, 0, 3},
      {0, 128, promote, 2, none, 1, 0, 3},
      {0, 128, fast, 0, none, 1, 0, 3},
      {0, 176, promote, 2, none, 1, 0, 4},        // TMA stores staged in 64-column chunks (kTmaChunked):
      {0, 192, promote, 2, none, 1, 0, 4},        // the ring keeps the stage whole-block staging takes
      {0, 256, fast, 0, none, 1, 0, 4},
      {0, 176, promote, 2, none, 1, 0, 4, 0, 1},
      {0, 176, overlap, 0, none, 1, 0, 3},        // the next tile's first k-block under the TMA stores
      {0, 176, overlap, 0, none, 1, 0, 4},
      {0, 192, overlap, 0, none, 1, 0, 4},
      {0, 192, promote, 2, pair_m, 1, 0, 1},
      {0, 192, promote, 1, pair_m, 1, 0, 1},
      {0, 192, promote, 1, pair_n, 1, 0, 1},
      {0, 192, overlap, 0, none, 1, 0, 1},
      {0, 192, overlap, 0, pair_m, 1, 0, 1},
      {0, 176, promote, 1, none, 1, 0, 1},
      {0, 176, promote, 2, none, 1, 0, 1},
      {0, 176, promote, 2, none, 1, 0, 1, 0, 1},  // interval 2, the consumers' drains staggered
      {0, 176, promote, 2, none, 1, 0, 2},
      {0, 176, promote, 2, none, 1, 0, 2, 0, 1},
      {0, 176, promote, 1, pair_m, 1, 0, 1},
      {0, 176, overlap, 0, none, 1, 0, 1},
      {0, 256, fast, 0, none, 1, 0, 0},           // the "bn256 fast" reference
      {0, 256, fast, 0, none, 1, 0, 1},
      {0, 256, fast, 0, none, 1, 0, 2},
      {0, 256, fast, 0, none, 1, 0, 3},
      {0, 256, fast, 0, pair_m, 1, 0, 1},
      {0, 64, promote, 1, none, -1, 0, 1},
      {0, 128, promote, 2, pair_m, 1, 0, 3},      // TMA stores in clusters (cuBLASLt's default at 4096^3:
      {0, 128, promote, 2, pair_n, 1, 0, 3},      // 128 x 128 tiles in pairs along M)
      {0, 128, promote, 1, pair_m, 1, 0, 3},
      {0, 176, promote, 2, pair_m, 1, 0, 3},
      {0, 128, fast, 0, pair_m, 1, 0, 3},
      {0, 256, fast, 0, pair_m, 1, 0, 3},
      {0, 256, fast, 0, pair_n, 1, 0, 3},
      {1, 0, -1, 0, -1, -1, 0, -1},               // mma.sync reference path
  };
  // clang-format on
}

// Sustained timing, as the Python harness: launch for >= warmup_ms of GPU time (clocks and
// power settle; a short burst reads up to 15% fast), then time each launch between its own
// pair of events until >= measure_ms have been timed, and take the median.
template <class Launch>
float sustained_median_ms_of(Launch&& launch, float warmup_ms = 200.f, float measure_ms = 300.f) {
  cudaEvent_t start, stop;
  KERNELS_CUDA_CHECK(cudaEventCreate(&start));
  KERNELS_CUDA_CHECK(cudaEventCreate(&stop));
  // warm-up in batches of growing size, so the host never waits on a single short launch
  float warm = 0.f;
  for (int batch = 1; warm < warmup_ms; batch = std::min(batch * 2, 64)) {
    float ms = 0.f;
    KERNELS_CUDA_CHECK(cudaEventRecord(start));
    for (int i = 0; i < batch; ++i) launch();
    KERNELS_CUDA_CHECK(cudaEventRecord(stop));
    KERNELS_CUDA_CHECK(cudaEventSynchronize(stop));
    KERNELS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    warm += ms;
  }
  // one warm launch's time sizes the timed run: measure_ms worth of launches, at least 20 and
  // at most 4000, queued back to back
  float one = 0.f;
  KERNELS_CUDA_CHECK(cudaEventRecord(start));
  launch();
  KERNELS_CUDA_CHECK(cudaEventRecord(stop));
  KERNELS_CUDA_CHECK(cudaEventSynchronize(stop));
  KERNELS_CUDA_CHECK(cudaEventElapsedTime(&one, start, stop));
  const int reps = std::max(20, std::min(4000, int(measure_ms / std::max(one, 1e-3f))));
  std::vector<cudaEvent_t> events(reps + 1);
  for (auto& e : events) KERNELS_CUDA_CHECK(cudaEventCreate(&e));
  // consecutive launches share an event: launch r runs between events[r] and events[r + 1]
  KERNELS_CUDA_CHECK(cudaEventRecord(events[0]));
  for (int r = 0; r < reps; ++r) {
    launch();
    KERNELS_CUDA_CHECK(cudaEventRecord(events[r + 1]));
  }
  KERNELS_CUDA_CHECK(cudaEventSynchronize(events.back()));
  std::vector<float> ms(reps);
  for (int r = 0; r < reps; ++r) KERNELS_CUDA_CHECK(cudaEventElapsedTime(&ms[r], events[r], events[r + 1]));
  for (auto& e : events) cudaEventDestroy(e);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::nth_element(ms.begin(), ms.begin() + reps / 2, ms.end());
  return ms[reps / 2];
}

float sustained_median_ms(const fp8::GemmParams& p, const fp8::gemm::PlanRequest& req) {
  return sustained_median_ms_of([&] { run_plan(p, req); });
}

// Median ms per call of a CUDA graph of kCalls back-to-back calls of the plan, replayed, as the
// benchmark's `-graph` rows time decode-sized GEMMs: no host launch cost, and each kernel next to
// the one before it in the graph (so a programmatic launch overlaps its predecessor's tail). The
// call before the capture sizes the workspace and sets the kernels' attributes.
float graph_median_ms(const fp8::GemmParams& p, const fp8::gemm::PlanRequest& req) {
  constexpr int kCalls = 20;
  if (!run_plan(p, req)) return 0.f;
  cudaStream_t stream;
  KERNELS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  g_stream = stream;
  KERNELS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kCalls; ++i) launch_plan(p, req);
  KERNELS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  g_stream = nullptr;
  cudaGraphExec_t exec;
  KERNELS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const float ms = sustained_median_ms_of([&] { KERNELS_CUDA_CHECK(cudaGraphLaunch(exec, nullptr)); });
  KERNELS_CUDA_CHECK(cudaGraphExecDestroy(exec));
  KERNELS_CUDA_CHECK(cudaGraphDestroy(graph));
  KERNELS_CUDA_CHECK(cudaStreamDestroy(stream));
  return ms / kCalls;
}

// Every variant on one M x N x K problem: checked against the mma.sync path (relative Frobenius
// error; promoted variants are fp32-accurate, fast accumulation drifts more), then timed.
bool time_large(int64_t m, int64_t n, int64_t k, const char* only, std::vector<std::string>& labels,
                std::vector<double>& tflops) {
  labels.clear();
  tflops.clear();
  const auto label_of = [m, n, k](size_t vi, const TimedVariant& v) {
    const auto plan = fp8::gemm::plan_gemm(m, n, k, g_sms, g_cc_major, g_cc_minor, request_of(v));
    return (vi == 0 ? "default: " : "") + plan_label(plan);
  };
  bool any = only == nullptr;
  for (size_t vi = 0; vi < timed_variants().size() && !any; ++vi)
    any = label_of(vi, timed_variants()[vi]).find(only) != std::string::npos;
  if (!any) return true;  // nothing selected: skip the operands and the reference run
  GemmCase gc{m, n, k, Format::kE4M3, Format::kE4M3, 0, 0, false};
  DeviceGemm g = make_gemm(gc, 3);
  __nv_bfloat16* d_ref = nullptr;
  KERNELS_CUDA_CHECK(cudaMalloc(&d_ref, m * n * 2));
  fp8::GemmParams p_ref = g.p;
  p_ref.d = d_ref;
  bool ok = run_gemm(p_ref, int(fp8::gemm::Path::kMmaSync), 0);
  KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
  const auto ref = download(d_ref, m * n);
  std::vector<__nv_bfloat16> got(m * n);
  const auto variants = timed_variants();
  for (size_t vi = 0; vi < variants.size(); ++vi) {
    const fp8::gemm::PlanRequest req = request_of(variants[vi]);
    const auto plan = fp8::gemm::plan_gemm(m, n, k, g_sms, g_cc_major, g_cc_minor, req);
    const std::string label = label_of(vi, variants[vi]);
    if (only != nullptr && label.find(only) == std::string::npos) continue;
    KERNELS_CUDA_CHECK(cudaMemset(g.p.d, 0xFF, m * n * 2));
    const bool launched = run_plan(g.p, req);
    KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
    KERNELS_CUDA_CHECK(cudaMemcpy(got.data(), g.p.d, m * n * 2, cudaMemcpyDeviceToHost));
    const double rel = relative_frobenius(ref, got);
    const bool fast_accum = plan.path == fp8::gemm::Path::kWgmma && plan.accum == fp8::gemm::AccumMode::kFast;
    const bool good = launched && rel < (fast_accum ? 1e-2 : 1e-3);
    const float ms = good ? sustained_median_ms(g.p, req) : 0.f;
    const double tf = good ? 2.0 * m * n * k / (ms * 1e-3) / 1e12 : 0.0;
    std::printf("%s time %lldx%lldx%lld %-40s grid=%-4d rel_err_vs_mma_sync=%.2e %8.4f ms %6.0f TFLOP/s\n",
                good ? "PASS" : "FAIL", (long long)m, (long long)n, (long long)k, label.c_str(), plan.grid, rel, ms,
                tf);
    std::fflush(stdout);
    labels.push_back(label);
    tflops.push_back(tf);
    ok = ok && good;
  }
  cudaFree(d_ref);
  free_gemm(g);
  return ok;
}

// Decode-sized GEMMs (the shapes of results/h200/fp8.json where cuBLASLt leads): per shape
// the planner's default (split-K where it picks it), split-K off (the plan before split-K),
// forced split counts, and BN 128 / 64 with the planner's split count; each checked against
// the mma.sync path, then timed. Every label starts with "splitk".
struct DecodeShape {
  int64_t m, n, k;
};

std::vector<DecodeShape> decode_shapes() {
  // clang-format off
  return {{1, 4096, 4096},  {1, 11008, 4096},  {1, 14336, 14336},  {16, 4096, 4096},  {16, 11008, 4096},
          {16, 14336, 14336}, {128, 4096, 4096}, {128, 14336, 4096}, {128, 14336, 14336}};
  // clang-format on
}

std::vector<std::pair<std::string, TimedVariant>> decode_variants() {
  const auto with = [](int block_n, int split_k) {
    TimedVariant v{-1, block_n, -1, 0, -1, -1, 0, -1};
    v.split_k = split_k;
    return v;
  };
  // clang-format off
  return {{"default", with(0, 0)}, {"off", with(0, 1)},    {"s2", with(0, 2)},       {"s3", with(0, 3)},
          {"s4", with(0, 4)},      {"s8", with(0, 8)},     {"bn128", with(128, 0)}, {"bn128-s4", with(128, 4)},
          {"bn64", with(64, 0)},   {"bn64-s4", with(64, 4)}};
  // clang-format on
}

// Relative Frobenius error allowed against the mma.sync reference on the decode rows. Both
// outputs are rounded to bf16, so what is measured is mostly how often the WGMMA's reduced-
// precision in-block sums (accumulation_u) tip an element over a bf16 rounding boundary. With
// M = 1 the norm is over a single row of D, i.e. one sample of A: the H200 measured 1.08e-3
// at M = 1, N = K = 4096 for the plain promote2 kernel (split_k 1, no split-K involved) and
// 9.7e-4 with 3 splits, against 8.8e-4 at 4096^3 (time_large's 1e-3). A lost or doubled
// k-block or split is off by >= 1e-1; fast accumulation drifts with K (time_large: 1e-2).
double decode_rel_tolerance(const fp8::gemm::GemmPlan& plan) {
  const bool fast_accum = plan.path == fp8::gemm::Path::kWgmma && plan.accum == fp8::gemm::AccumMode::kFast;
  return fast_accum ? 1e-2 : 2e-3;
}

bool time_decode(const char* only) {
  constexpr double kNotRun = -1.0, kFailed = -2.0;  // table cells: not selected / failed
  bool ok = true;
  const auto variants = decode_variants();
  struct Row {
    std::string shape;
    std::vector<double> us;
  };
  std::vector<Row> rows;
  for (const DecodeShape& shape : decode_shapes()) {
    char shape_label[64];
    std::snprintf(shape_label, sizeof(shape_label), "M=%lld N=%lld K=%lld", (long long)shape.m, (long long)shape.n,
                  (long long)shape.k);
    std::vector<std::string> labels;
    bool any = false;
    for (const auto& [tag, v] : variants) {
      const auto plan = fp8::gemm::plan_gemm(shape.m, shape.n, shape.k, g_sms, g_cc_major, g_cc_minor, request_of(v));
      labels.push_back("splitk " + std::string(shape_label) + " " + tag + ": " + plan_label(plan));
      any = any || only == nullptr || labels.back().find(only) != std::string::npos;
    }
    if (!any) continue;
    GemmCase gc{shape.m, shape.n, shape.k, Format::kE4M3, Format::kE4M3, 0, 0, false};
    DeviceGemm g = make_gemm(gc, 5);
    const int64_t elems = shape.m * shape.n;
    __nv_bfloat16* d_ref = nullptr;
    KERNELS_CUDA_CHECK(cudaMalloc(&d_ref, elems * 2));
    KERNELS_CUDA_CHECK(cudaMemset(d_ref, 0xFF, elems * 2));  // NaN poison: a reference never written shows
    fp8::GemmParams p_ref = g.p;
    p_ref.d = d_ref;
    // The reference runs for every shape, whatever failed before: `ok = ok && run_gemm(...)`
    // skipped it after the first failing row, and every later shape then compared against
    // uninitialised memory (rel_err inf / nan, FAIL on every row).
    const bool ref_ran = run_gemm(p_ref, int(fp8::gemm::Path::kMmaSync), 0);
    KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
    const auto ref = download(d_ref, elems);
    if (!ref_ran) {
      std::printf("FAIL time splitk %s: mma_sync reference did not run\n", shape_label);
      ok = false;
    }
    std::vector<__nv_bfloat16> got(elems);
    Row row{shape_label, std::vector<double>(variants.size(), kNotRun)};
    for (size_t vi = 0; vi < variants.size() && ref_ran; ++vi) {
      if (only != nullptr && labels[vi].find(only) == std::string::npos) continue;
      const fp8::gemm::PlanRequest req = request_of(variants[vi].second);
      const auto plan = fp8::gemm::plan_gemm(shape.m, shape.n, shape.k, g_sms, g_cc_major, g_cc_minor, req);
      KERNELS_CUDA_CHECK(cudaMemset(g.p.d, 0xFF, elems * 2));
      const bool launched = run_plan(g.p, req);
      KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
      KERNELS_CUDA_CHECK(cudaMemcpy(got.data(), g.p.d, elems * 2, cudaMemcpyDeviceToHost));
      const double rel = relative_frobenius(ref, got);
      const bool good = launched && rel < decode_rel_tolerance(plan);
      const float ms = good ? (g_graph ? graph_median_ms(g.p, req) : sustained_median_ms(g.p, req)) : 0.f;
      const double tf = good ? 2.0 * shape.m * shape.n * shape.k / (ms * 1e-3) / 1e12 : 0.0;
      std::printf("%s time %-62s grid=%-4d ws=%-9zu rel_err_vs_mma_sync=%.2e %8.2f us %7.1f TFLOP/s\n",
                  good ? "PASS" : "FAIL", labels[vi].c_str(), plan.grid,
                  fp8::gemm::gemm_workspace_bytes(plan, shape.m, shape.n), rel, ms * 1e3, tf);
      std::fflush(stdout);
      row.us[vi] = good ? ms * 1e3 : kFailed;
      ok = ok && good;
    }
    rows.push_back(row);
    cudaFree(d_ref);
    free_gemm(g);
  }
  if (!rows.empty()) {
    std::printf("\n%-26s", "decode shape (us)");
    for (const auto& v : variants) std::printf(" %9s", v.first.c_str());
    std::printf("   (%s; default = planner, off = split_k 1)\n",
                g_graph ? "per call, median of graph replays" : "median of sustained launches");
    for (const Row& r : rows) {
      std::printf("%-26s", r.shape.c_str());
      for (double us : r.us) {
        if (us == kNotRun) std::printf(" %9s", "-");
        else if (us == kFailed) std::printf(" %9s", "FAIL");
        else std::printf(" %9.2f", us);
      }
      std::printf("\n");
    }
  }
  return ok;
}

// Tables of launch variants (columns) over shapes (rows), e4m3 x e4m3, each cell checked against
// the mma.sync path and timed. "gemv": the GEMV kernel's tiles (GemvTiles<n-tiles per block,
// warps, chunks in flight>) on M = 1 and 16, the default (the planner's GemvPolicy) first, then
// the swap-AB TMA GEMV (gemv_tma.cuh, Path::kGemvTma) with the split count of the SM count
// ("tma") and with 1 / 2 splits forced. "skinny": M = 32 / 64 / 128 on LLM shapes, the planner's
// default (the tiled WGMMA kernel) against the swap-AB kernel ("tma": Path::kGemvTma as a
// forced plan runs it; "tma-s1": one block per tile). Labels start with the table's name.
struct GemvVariant {
  const char* name;
  std::function<void(const fp8::GemmParams&)> launch;  // on the default stream
};

template <int kNTiles, int kWarps, int kUnroll>
GemvVariant gemv_variant(const char* name) {
  using Tiles = fp8::gemm::GemvTiles<kNTiles, kWarps, kUnroll>;
  return {name, [](const fp8::GemmParams& p) { fp8::gemm::launch_gemv<Format::kE4M3, Format::kE4M3, Tiles>(p, 0); }};
}

// rows 0: GemvTmaPolicy::rows_for, else 64 or 128 B rows per block; splits 0: splits_for on the
// device's SM count, fewer where the device holds fewer clusters at once (what Path::kGemvTma
// runs); else exactly that many
GemvVariant gemv_tma_variant(const char* name, int splits, int rows = 0) {
  return {name, [splits, rows](const fp8::GemmParams& p) {
            const int r = rows > 0 ? rows : fp8::gemm::GemvTmaPolicy::rows_for(p.n, p.k, g_sms);
            if (splits > 0) fp8::gemm::launch_gemv_tma_splits<Format::kE4M3, Format::kE4M3>(p, splits, 0, false, r);
            else
              fp8::gemm::launch_gemv_tma_splits<Format::kE4M3, Format::kE4M3>(
                  p, fp8::gemm::GemvTmaPolicy::splits_for(p.n, p.k, g_sms, r), 0, true, r);
          }};
}

// A plan of the planner (the request's), launched through launch_gemm as the binding does.
GemvVariant plan_variant(const char* name, const fp8::gemm::PlanRequest& req) {
  return {name, [req](const fp8::GemmParams& p) { launch_plan(p, req); }};
}

bool time_columns(const char* table, const std::vector<GemvVariant>& variants, const std::vector<DecodeShape>& shapes,
                  const char* legend, const char* only) {
  bool ok = true;
  std::vector<std::string> lines;
  for (const DecodeShape& shape : shapes) {
    char label[64];
    std::snprintf(label, sizeof(label), "%s M=%lld N=%lld K=%lld", table, (long long)shape.m, (long long)shape.n,
                  (long long)shape.k);
    if (only != nullptr && std::string(label).find(only) == std::string::npos) continue;
    GemmCase gc{shape.m, shape.n, shape.k, Format::kE4M3, Format::kE4M3, 0, 0, false};
    DeviceGemm g = make_gemm(gc, 9);
    const int64_t elems = shape.m * shape.n;
    __nv_bfloat16* d_ref = nullptr;
    KERNELS_CUDA_CHECK(cudaMalloc(&d_ref, elems * 2));
    KERNELS_CUDA_CHECK(cudaMemset(d_ref, 0xFF, elems * 2));
    fp8::GemmParams p_ref = g.p;
    p_ref.d = d_ref;
    const bool ref_ran = run_gemm(p_ref, int(fp8::gemm::Path::kMmaSync), 0);
    KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
    const auto ref = download(d_ref, elems);
    std::string line = label;
    line.resize(34, ' ');
    // the planner's own plan, and what the "tma" column runs (Path::kGemvTma): its width, rows,
    // planned splits, and those the device holds
    const int rows = fp8::gemm::GemvTmaPolicy::rows_for(shape.n, shape.k, g_sms);
    const int planned = fp8::gemm::GemvTmaPolicy::splits_for(shape.n, shape.k, g_sms, rows);
    const auto automatic = fp8::gemm::plan_gemm(shape.m, shape.n, shape.k, g_sms, g_cc_major, g_cc_minor);
    std::printf(
        "     %s planner: %s; gemv_tma m%d: %lld tiles of %d rows, %d splits planned, %d launched (clusters "
        "the device holds)\n",
        label, plan_label(automatic).c_str(), fp8::gemm::GemvTmaPolicy::width_for(shape.m),
        (long long)kernels::ceil_div<int64_t>(shape.n, rows), rows, planned,
        fp8::gemm::gemv_tma_fit_splits<Format::kE4M3, Format::kE4M3>(shape.m, shape.n, planned, rows));
    for (const GemvVariant& v : variants) {
      KERNELS_CUDA_CHECK(cudaMemset(g.p.d, 0xFF, elems * 2));
      const bool launched = ref_ran && kernels::test::runs("fp8 gemm", [&] { v.launch(g.p); });
      KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
      const auto got = download(static_cast<const __nv_bfloat16*>(g.p.d), elems);
      const double rel = relative_frobenius(ref, got);
      const bool good = launched && rel < 2e-3;  // as the decode rows' promoted plans
      const float ms = good ? sustained_median_ms_of([&] { v.launch(g.p); }) : 0.f;
      const double tbps = good ? double(shape.n) * shape.k / (ms * 1e-3) / 1e12 : 0.0;  // B's bytes
      const double tflops = good ? 2.0 * shape.m * shape.n * shape.k / (ms * 1e-3) / 1e12 : 0.0;
      std::printf("%s time %s %s: rel_err_vs_mma_sync=%.2e %8.2f us %5.2f TB/s (B) %6.1f TFLOP/s\n",
                  good ? "PASS" : "FAIL", label, v.name, rel, ms * 1e3, tbps, tflops);
      char cell[32];
      if (good) std::snprintf(cell, sizeof(cell), " %7.2f", ms * 1e3);
      else std::snprintf(cell, sizeof(cell), " %7s", "FAIL");
      line += cell;
      ok = ok && good;
    }
    lines.push_back(line);
    cudaFree(d_ref);
    free_gemm(g);
  }
  if (!lines.empty()) {
    std::printf("\n%-34s", (std::string(table) + " shape (us)").c_str());
    for (const GemvVariant& v : variants) std::printf(" %7s", v.name);
    std::printf("   (median of sustained launches; %s)\n", legend);
    for (const auto& line : lines) std::printf("%s\n", line.c_str());
  }
  return ok;
}

bool time_gemv(const char* only) {
  // clang-format off
  const std::vector<GemvVariant> variants = {
      gemv_variant<2, 8, 4>("n2w8u4"), gemv_variant<4, 8, 4>("n4w8u4"), gemv_variant<4, 8, 2>("n4w8u2"),
      gemv_variant<1, 8, 4>("n1w8u4"), gemv_variant<2, 4, 4>("n2w4u4"), gemv_variant<2, 8, 8>("n2w8u8"),
      gemv_variant<4, 4, 4>("n4w4u4"), gemv_variant<8, 4, 2>("n8w4u2"), gemv_tma_variant("tma", 0),
      gemv_tma_variant("tma-r128", 0, 128), gemv_tma_variant("tma-r64", 0, 64), gemv_tma_variant("tma-s1", 1),
      gemv_tma_variant("tma-s2", 2)};
  const std::vector<DecodeShape> shapes = {{1, 4096, 4096}, {1, 11008, 11008}, {1, 14336, 4096}, {1, 4096, 14336},
                                           {16, 4096, 4096}, {16, 11008, 11008}, {16, 14336, 4096}, {16, 4096, 14336}};
  // clang-format on
  return time_columns("gemv", variants, shapes,
                      "nNwWuU: n8 tiles, warps, chunks in flight; tma: gemv_tma, -rR: R rows per block, -sS: S "
                      "splits",
                      only);
}

bool time_skinny(const char* only) {
  const std::vector<GemvVariant> variants = {
      plan_variant("default", forced(-1, 0)), plan_variant("tma", forced(int(fp8::gemm::Path::kGemvTma), 0)),
      gemv_tma_variant("tma-r128", 0, 128), gemv_tma_variant("tma-r64", 0, 64), gemv_tma_variant("tma-s1", 1)};
  std::vector<DecodeShape> shapes;
  for (int64_t m : {32, 64, 128})
    for (const auto& [n, k] :
         {std::pair<int64_t, int64_t>{4096, 4096}, {4096, 11008}, {4096, 14336}, {11008, 4096}, {14336, 4096}})
      shapes.push_back({m, n, k});
  return time_columns("skinny", variants, shapes,
                      "default: the planner's plan; tma: gemv_tma (path 3) with its rows and split count, "
                      "-rR: R rows per block, -s1: one block per tile",
                      only);
}

}  // namespace

// Quantize, scheduler and GEMM correctness cases and the rejected requests; returns failures.
int correctness_cases() {
  int failures = 0;
  failures += !test_scheduler();
  for (Format f : {Format::kE4M3, Format::kE5M2}) {
    failures += !test_quantize(128, 256, f, true);
    failures += !test_quantize(77, 45, f, true);  // scalar path, tails
    failures += !test_quantize(300, 1000, f, false);
  }
  const bool hopper = g_cc_major == 9 && g_cc_minor == 0;
  std::vector<GemmCase> cases;
  for (int path : {0, 1}) {
    if (path == 0 && !hopper) continue;
    for (int bn : {0, 64, 128, 176, 192, 256}) {
      if (path == 1 && bn != 0) continue;
      cases.push_back({128, 256, 128, Format::kE4M3, Format::kE4M3, path, bn, false});
      cases.push_back({257, 131, 400, Format::kE4M3, Format::kE4M3, path, bn, true});
    }
    for (int64_t m : {1, 3, 8, 16}) cases.push_back({m, 96, 272, Format::kE4M3, Format::kE4M3, path, 0, true});
    cases.push_back({129, 333, 1040, Format::kE4M3, Format::kE5M2, path, 0, false});
    cases.push_back({65, 200, 48, Format::kE5M2, Format::kE4M3, path, 0, true});
    cases.push_back(
        {300, 520, 2064, Format::kE4M3, Format::kE4M3, path, 0, false});  // > stages k-blocks, persistent wrap
    if (path == 0) cases.push_back({300, 520, 2064, Format::kE4M3, Format::kE4M3, path, 256, false});
  }
  // The GEMV kernel (path 2, what M <= 16 runs; sm_89 and newer): M inside its m16 tile, N
  // tails in its 16-column blocks, K tails in its 64-byte chunks and in the warps' slices of
  // them (K = 16: one piece; 4096: 64 chunks over 8 warps), every format pair, extras on and off.
  {
    const Format e4 = Format::kE4M3, e5 = Format::kE5M2;
    const std::pair<int64_t, int64_t> gemv_shapes[] = {{1, 16}, {17, 272}, {333, 1040}, {4112, 4096}};
    for (int64_t m : {1, 3, 9, 16})
      for (const auto& [n, k] : gemv_shapes) {
        cases.push_back({m, n, k, e4, e4, 2, 0, m % 2 == 1});
        if (n == 333) {
          cases.push_back({m, n, k, e4, e5, 2, 0, true});
          cases.push_back({m, n, k, e5, e4, 2, 0, false});
        }
      }
  }
  if (hopper) {
    // The swap-AB TMA GEMV (path 3, forced only; sm_90a): M inside WGMMA's n16 (rows past M
    // zero-filled by TMA), N tails in its 128- or 64-column tiles (17: one partial tile of 128;
    // 200: four of 64, 4112: 65 of 64, the last 16 wide), K tails in its 128-deep k-blocks (16:
    // one partial, 272 and 1040: 3 and 9 with a 16-deep tail, 11008: 86, many times round the
    // ring), split-K inside a cluster (132 SMs: 1 split at K = 16, 2 at 272, 8 for N = 17 / 200
    // at K >= 1040, 2 for N = 4112; a split of 1 or 2 k-blocks), every format pair, extras on
    // and off; then one block per tile at long K (the planner sees one SM: 128 rows, no split).
    const Format e4 = Format::kE4M3, e5 = Format::kE5M2;
    const std::pair<Format, Format> pairs[] = {{e4, e4}, {e4, e5}, {e5, e4}};
    for (const auto& [fa, fb] : pairs)
      for (int64_t m : {1, 3, 8, 16})
        for (int64_t n : {17, 200, 4112})
          for (int64_t k : {16, 272, 1040, 11008})
            for (bool extras : {false, true}) cases.push_back({m, n, k, fa, fb, 3, 0, extras});
    for (int64_t m : {1, 16})
      for (int64_t k : {1040, 11008}) {
        GemmCase unsplit{m, 200, k, e4, e4, 3, 0, m == 16};
        unsplit.sms = 1;
        cases.push_back(unsplit);
      }
    // The wider kernels (M > 16: WGMMA n32 for M <= 32, n64, n128; ping-pong promotion up to
    // n64, one partial at n128): M at and around each width's edge (17, 31 / 32 / 33, 64, 100,
    // 128), N tails (200: two tiles, 8 splits at K = 4096; 4112: 33 tiles, 4 splits planned),
    // K tails (272: 3 k-blocks, 2 splits, the last 16 deep) and K = 4096 (32 k-blocks: 4 or 8
    // per split, beyond the 5-stage ring of n128), extras on and off; one mixed pair each way;
    // then one block per tile at long K (86 k-blocks, many times round each ring).
    for (int64_t m : {17, 31, 32, 33, 64, 100, 128})
      for (int64_t n : {200, 4112})
        for (int64_t k : {272, 4096})
          for (bool extras : {false, true}) cases.push_back({m, n, k, e4, e4, 3, 0, extras});
    for (int64_t m : {33, 128}) {
      cases.push_back({m, 200, 4096, e4, e5, 3, 0, true});
      cases.push_back({m, 4112, 272, e5, e4, 3, 0, false});
    }
    for (int64_t m : {32, 64, 128}) {
      GemmCase unsplit{m, 200, 11008, e4, e4, 3, 0, m != 64};
      unsplit.sms = 1;
      cases.push_back(unsplit);
    }
    // 128-row blocks at the wider widths: the planner sees 40 SMs (N = 4112: 33 tiles of 128,
    // 65 of 64 would not fit; unsplit) or 4 (N = 200: two tiles of 128 in pairs).
    for (int64_t m : {17, 33, 100, 128}) {
      GemmCase wide{m, 4112, 4096, e4, e4, 3, 0, m % 2 == 0};
      wide.sms = 40;
      cases.push_back(wide);
      GemmCase pairs{m, 200, 4096, e4, e4, 3, 0, m % 2 == 1};
      pairs.sms = 4;
      cases.push_back(pairs);
    }
  }
  if (hopper) {
    // Split-K: M = 1 / 16 / 128; K tails (1040 = 8 k-blocks + 16, 2064 = 16 + 16: 9 and 17
    // k-blocks, so 2, 4 and 5 splits are uneven); N tails (200, 333, odd 131); extras on and
    // off; every (block_n, accumulation) kernel; clusters; a persistent grid forced to wrap
    // over (tile, split) units (the planner sees 4 SMs); the planner's own choice (split = 0)
    // on a decode shape and a forced count above the k-blocks (capped).
    using fp8::gemm::AccumMode;
    using fp8::gemm::ClusterMode;
    const Format e4 = Format::kE4M3;
    for (int64_t m : {1, 16, 128}) {
      for (int splits : {2, 3, 4, 5}) {
        GemmCase gc{m, 200, 1040, e4, e4, 0, 0, splits % 2 == 1};
        gc.split_k = splits;
        cases.push_back(gc);
      }
      GemmCase wide{m, 333, 2064, e4, Format::kE5M2, 0, 128, true};
      wide.split_k = 5;
      cases.push_back(wide);
      GemmCase decode{m, m == 128 ? 2048 : 4096, 4096, e4, e4, 0, 0, m == 16};
      cases.push_back(decode);  // the planner's choice (split-K on 132 SMs)
    }
    struct SplitVariant {
      int block_n, accum, promote_every, cluster, split_k;
    };
    const SplitVariant split_variants[] = {
        {64, int(AccumMode::kPromote), 1, int(ClusterMode::kNone), 3},
        {128, int(AccumMode::kPromote), 2, int(ClusterMode::kNone), 4},
        {128, int(AccumMode::kPromotePingPong), 0, int(ClusterMode::kNone), 3},
        {128, int(AccumMode::kFast), 0, int(ClusterMode::kNone), 5},
        {128, int(AccumMode::kPromoteOverlap), 0, int(ClusterMode::kNone), 4},
        {176, int(AccumMode::kPromote), 2, int(ClusterMode::kNone), 2},
        {192, int(AccumMode::kPromoteOverlap), 0, int(ClusterMode::kNone), 3},
        {256, int(AccumMode::kFast), 0, int(ClusterMode::kNone), 2},
        {128, int(AccumMode::kPromote), 2, int(ClusterMode::kPairM), 3},
        {128, int(AccumMode::kPromote), 2, int(ClusterMode::kPairN), 2},
        {128, int(AccumMode::kPromote), 1, int(ClusterMode::kQuad), 4},
    };
    for (const SplitVariant& v : split_variants) {
      const auto with = [&v](GemmCase gc, int persistent, int sms) {
        gc.accum = v.accum;
        gc.promote_every = v.promote_every;
        gc.cluster = v.cluster;
        gc.split_k = v.split_k;
        gc.persistent = persistent;
        gc.sms = sms;
        gc.store = 1;
        return gc;
      };
      cases.push_back(with({16, 131, 1040, e4, e4, 0, v.block_n, true}, -1, 0));
      cases.push_back(with({257, 520, 2064, e4, e4, 0, v.block_n, false}, 1, 4));
    }
    GemmCase capped{16, 96, 272, e4, e4, 0, 0, true};  // 3 k-blocks: 8 splits capped to 3
    capped.split_k = 8;
    cases.push_back(capped);
  }
  if (hopper) {
    // every sm_90a variant beyond the planner's default, on tails and odd cluster tile counts:
    // 257 x 131 (3 x 2 tiles at bn128, 3 x 1 at bn256: a phantom partner along N),
    // 300 x 520 (3 x 5 tiles: odd along M and N), M = 1 (one tile: phantom partner along M),
    // K = 400 / 2064 (K tails; more k-blocks than stages), and a persistent grid forced to wrap
    // (the planner sees 4 SMs: 4 blocks, i.e. 2 pairs or 1 quad, stride over the units).
    // All with fast stores: the cases without extras take them on interior fragments and the
    // checked stores at the tails; the cases with extras (scales, bias) take checked stores.
    using fp8::gemm::AccumMode;
    using fp8::gemm::ClusterMode;
    const KernelChoice variants[] = {
        {128, int(AccumMode::kPromote), 2, int(ClusterMode::kNone)},
        {128, int(AccumMode::kPromotePingPong), 0, int(ClusterMode::kNone)},
        {128, int(AccumMode::kFast), 0, int(ClusterMode::kNone)},
        {128, int(AccumMode::kPromote), 1, int(ClusterMode::kPairM)},
        {128, int(AccumMode::kPromote), 1, int(ClusterMode::kPairN)},
        {128, int(AccumMode::kPromote), 2, int(ClusterMode::kPairM)},
        {128, int(AccumMode::kPromotePingPong), 0, int(ClusterMode::kPairM)},
        {128, int(AccumMode::kPromotePingPong), 0, int(ClusterMode::kPairN)},
        {128, int(AccumMode::kFast), 0, int(ClusterMode::kPairM)},
        {256, int(AccumMode::kFast), 0, int(ClusterMode::kPairM)},
        {256, int(AccumMode::kFast), 0, int(ClusterMode::kPairN)},
        {64, int(AccumMode::kPromote), 1, int(ClusterMode::kPairM)},
        {128, int(AccumMode::kPromote), 1, int(ClusterMode::kQuad)},
        {128, int(AccumMode::kPromotePingPong), 0, int(ClusterMode::kQuad)},
        {256, int(AccumMode::kFast), 0, int(ClusterMode::kQuad)},
        {192, int(AccumMode::kPromote), 1, int(ClusterMode::kNone)},
        {192, int(AccumMode::kPromote), 2, int(ClusterMode::kNone)},
        {192, int(AccumMode::kPromote), 1, int(ClusterMode::kPairM)},
        {192, int(AccumMode::kPromote), 1, int(ClusterMode::kPairN)},
        {192, int(AccumMode::kPromote), 2, int(ClusterMode::kQuad)},
        {176, int(AccumMode::kPromote), 1, int(ClusterMode::kNone)},
        {176, int(AccumMode::kPromote), 1, int(ClusterMode::kPairM)},
        {176, int(AccumMode::kPromote), 1, int(ClusterMode::kPairN)},
        {176, int(AccumMode::kPromoteOverlap), 0, int(ClusterMode::kNone)},
        {192, int(AccumMode::kPromoteOverlap), 0, int(ClusterMode::kPairM)},
        {128, int(AccumMode::kPromoteOverlap), 0, int(ClusterMode::kNone)},
        {128, int(AccumMode::kPromoteOverlap), 1, int(ClusterMode::kQuad)},  // overlap promoting every k-block
        {176, int(AccumMode::kPromoteOverlap), 1, int(ClusterMode::kNone)},
        {192, int(AccumMode::kPromoteOverlap), 0, int(ClusterMode::kNone)},
        {192, int(AccumMode::kPromoteOverlap), 0, int(ClusterMode::kPairM)},
        {192, int(AccumMode::kPromoteOverlap), 0, int(ClusterMode::kPairN)},
    };
    for (const KernelChoice& v : variants) {
      const auto with = [&v](GemmCase gc, int persistent, int sms) { return with_kernel(gc, v, persistent, sms, 1); };
      cases.push_back(with({257, 131, 400, Format::kE4M3, Format::kE4M3, 0, v.block_n, true}, 0, 0));
      cases.push_back(with({300, 520, 2064, Format::kE4M3, Format::kE4M3, 0, v.block_n, false}, 0, 0));
      cases.push_back(with({300, 520, 2064, Format::kE4M3, Format::kE4M3, 0, v.block_n, true}, 1, 4));
      cases.push_back(with({1, 96, 272, Format::kE4M3, Format::kE4M3, 0, v.block_n, true}, -1, 0));
      cases.push_back(with({129, 333, 1040, Format::kE4M3, Format::kE5M2, 0, v.block_n, false}, 1, 0));
    }
    // 16-byte row stores (StoreMode::kRows16) at every tile width: interior tiles through the
    // quad transpose, the M / N tails through the checked stores, and N = 333 (rows not
    // 16-byte aligned) through the pair stores.
    for (int block_n : {64, 128, 176, 192, 256}) {
      for (int64_t n : {520, 333}) {
        GemmCase gc{300, n, 2064, Format::kE4M3, Format::kE4M3, 0, block_n, false};
        gc.store = 2;
        cases.push_back(gc);
      }
    }
  }
  if (hopper) {
    // TMA-store epilogues (StoreMode::kTma, and kTmaChunked where the kernel has it) on every
    // kernel that has one: M / N tails clipped by TMA, a wrapped persistent grid (4 SMs), clusters,
    // N = 333 (rows not 16-byte aligned) and extras (scales, bias) through the direct stores, a K tail.
    using fp8::gemm::AccumMode;
    using fp8::gemm::ClusterMode;
    using fp8::gemm::StoreMode;
    const KernelChoice tma_variants[] = {
        {128, int(AccumMode::kPromote), 2, int(ClusterMode::kNone)},
        {128, int(AccumMode::kFast), 0, int(ClusterMode::kPairN)},
        {192, int(AccumMode::kPromote), 1, int(ClusterMode::kNone)},
        {192, int(AccumMode::kPromote), 2, int(ClusterMode::kPairM)},
        {176, int(AccumMode::kPromote), 2, int(ClusterMode::kNone)},
        {176, int(AccumMode::kPromote), 1, int(ClusterMode::kPairN)},
        {176, int(AccumMode::kPromoteOverlap), 1, int(ClusterMode::kNone)},
        {192, int(AccumMode::kPromoteOverlap), 2, int(ClusterMode::kPairM)},
        {256, int(AccumMode::kFast), 0, int(ClusterMode::kNone)},
        {256, int(AccumMode::kFast), 0, int(ClusterMode::kQuad)},
    };
    for (const KernelChoice& v : tma_variants) {
      for (const int store : {int(StoreMode::kTma), int(StoreMode::kTmaChunked)}) {
        // every entry has a kTma kernel (a wrong one fails its cases); kTmaChunked only some
        if (store == int(StoreMode::kTmaChunked) && !fp8::gemm::has_tma_chunked_kernel(v.block_n, AccumMode(v.accum)))
          continue;
        const auto with = [&](GemmCase gc, int persistent, int sms) {
          return with_kernel(gc, v, persistent, sms, store);
        };
        cases.push_back(with({300, 520, 2064, Format::kE4M3, Format::kE4M3, 0, v.block_n, false}, 1, 4));
        cases.push_back(with({257, 131, 400, Format::kE4M3, Format::kE4M3, 0, v.block_n, false}, 0, 0));
        cases.push_back(with({1, 96, 272, Format::kE4M3, Format::kE4M3, 0, v.block_n, false}, -1, 0));
        cases.push_back(with({129, 333, 1040, Format::kE4M3, Format::kE5M2, 0, v.block_n, false}, 1, 0));
        cases.push_back(with({300, 520, 2064, Format::kE5M2, Format::kE4M3, 0, v.block_n, true}, 1, 0));
        cases.push_back(with({640, 1024, 512, Format::kE4M3, Format::kE4M3, 0, v.block_n, false}, 1, 0));
      }
    }
  }
  for (const GemmCase& gc : cases) failures += !test_gemm(gc);

  {
    GemmCase gc{64, 64, 64, Format::kE4M3, Format::kE4M3, 0, 0, false};
    DeviceGemm g = make_gemm(gc, 1);
    using kernels::test::rejects;
    const fp8::gemm::PlanRequest automatic = forced(-1, 0);
    fp8::GemmParams bad = g.p;
    bad.k = 40;
    failures += !rejects<kernels::ValueError>("K % 16 != 0", [&] { launch_plan(bad, automatic); }, "multiple of 16");
    bad = g.p;
    bad.a_format = bad.b_format = Format::kE5M2;
    failures += !rejects<kernels::TypeError>("e5m2 x e5m2", [&] { launch_plan(bad, automatic); }, "format pair");
    bad = g.p;
    bad.a = static_cast<const uint8_t*>(g.p.a) + 8;
    failures += !rejects<kernels::ValueError>("misaligned A", [&] { launch_plan(bad, automatic); }, "16-byte aligned");
    fp8::gemm::PlanRequest unsupported;
    unsupported.force_path = int(fp8::gemm::Path::kWgmma);
    unsupported.force_block_n = 256;
    unsupported.accum = int(fp8::gemm::AccumMode::kPromote);
    failures +=
        !rejects<kernels::ValueError>("promoted bn256", [&] { launch_plan(g.p, unsupported); }, "unsupported plan");
    unsupported.force_block_n = 192;
    unsupported.accum = int(fp8::gemm::AccumMode::kPromotePingPong);
    failures +=
        !rejects<kernels::ValueError>("ping-pong bn192", [&] { launch_plan(g.p, unsupported); }, "unsupported plan");
    if (hopper) {
      fp8::gemm::PlanRequest split;
      split.split_k = 2;
      const auto plan = fp8::gemm::plan_gemm(g.p.m, g.p.n, 256, g_sms, g_cc_major, g_cc_minor, split);
      fp8::GemmParams deep = g.p;
      deep.k = 256;
      deep.lda = deep.ldb = 256;
      // the operands are 64 x 64: a K of 256 is never read, the workspace check comes first
      failures += !rejects<kernels::ValueError>(
          "split-K without workspace", [&] { fp8::gemm::launch_gemm(deep, plan, g_cc_major, g_cc_minor, 0); },
          "workspace");
      fp8::gemm::GemmPlan too_many = plan;
      too_many.split_k = fp8::gemm::kMaxSplitK + 1;
      failures += !rejects<kernels::ValueError>(
          "split_k > kMaxSplitK", [&] { fp8::gemm::launch_gemm(g.p, too_many, g_cc_major, g_cc_minor, 0); },
          "unsupported plan");
      // a hand-made plan with more splits than k-blocks (K = 64: one), which plan_gemm never makes
      fp8::gemm::GemmPlan empty_splits = plan;
      empty_splits.split_k = 2;
      failures += !rejects<kernels::ValueError>(
          "split_k > k-blocks", [&] { fp8::gemm::launch_gemm(g.p, empty_splits, g_cc_major, g_cc_minor, 0); },
          "must not exceed the k-blocks");
      // the TMA GEMV takes M <= 128 (the operands are 64 x 64: M = 129 is never read, the
      // plan check comes first)
      fp8::GemmParams tall = g.p;
      tall.m = 129;
      failures += !rejects<kernels::ValueError>(
          "gemv_tma at M = 129", [&] { launch_plan(tall, forced(int(fp8::gemm::Path::kGemvTma), 0)); },
          "gemv_tma: M <= 128");
      failures += !rejects<kernels::ValueError>(
          "gemv_tma launcher at M = 129",
          [&] { fp8::gemm::launch_gemv_tma_splits<Format::kE4M3, Format::kE4M3>(tall, 1, 0); },
          "the gemv_tma path takes M <= 128");
    } else {
      failures += !rejects<kernels::NotImplementedError>(
          "wgmma path off Hopper", [&] { launch_plan(g.p, forced(int(fp8::gemm::Path::kWgmma), 0)); }, "sm_90a");
      failures += !rejects<kernels::NotImplementedError>(
          "gemv_tma path off Hopper", [&] { launch_plan(g.p, forced(int(fp8::gemm::Path::kGemvTma), 0)); }, "sm_90a");
    }
    free_gemm(g);
  }
  return failures;
}

// `fp8_test --small`: one case per store path of the sm_90a GEMM, for compute-sanitizer
// memcheck / racecheck: TMA stores at BN 128 fast, 176, 192 and 256 (64- and 16-column panels,
// clipped tails, a wrapped persistent grid; staged whole and, but at 128, in 64-column chunks
// through two buffers at 176 / 256 and one at 192; at 176 also with the next tile's first k-block
// in flight under the stores), the 16-byte row stores, the checked stores with
// scales and bias, and a split-K plan; the swap-AB TMA GEMV in 64- and 128-row blocks, split
// in a cluster.
int small_cases() {
  using fp8::gemm::AccumMode;
  using fp8::gemm::ClusterMode;
  using fp8::gemm::StoreMode;
  const Format e4 = Format::kE4M3;
  const int none = int(ClusterMode::kNone);
  int failures = 0;
  for (const KernelChoice& v :
       {KernelChoice{128, int(AccumMode::kFast), 0, none}, KernelChoice{176, int(AccumMode::kPromote), 2, none},
        KernelChoice{192, int(AccumMode::kPromote), 2, none}, KernelChoice{256, int(AccumMode::kFast), 0, none},
        KernelChoice{176, int(AccumMode::kPromoteOverlap), 2, none}}) {
    for (const int store : {int(StoreMode::kTma), int(StoreMode::kTmaChunked)}) {
      if (store == int(StoreMode::kTma) || fp8::gemm::has_tma_chunked_kernel(v.block_n, AccumMode(v.accum)))
        failures += !test_gemm(with_kernel({300, 520, 1040, e4, e4, 0, v.block_n, false}, v, 1, 4, store));
    }
  }
  const KernelChoice bn192{192, int(AccumMode::kPromote), 2, none};
  failures += !test_gemm(with_kernel({300, 520, 1040, e4, e4, 0, 192, false}, bn192, 1, 0, 2));
  failures += !test_gemm(with_kernel({300, 520, 1040, e4, e4, 0, 192, true}, bn192, 1, 0, 3));
  GemmCase split{16, 520, 2048, e4, e4, 0, 128, false};
  split.split_k = 4;
  failures += !test_gemm(split);
  for (int64_t m : {16, 100}) {
    failures += !test_gemm({m, 200, 1040, e4, e4, int(fp8::gemm::Path::kGemvTma), 0, true});  // 64 rows, 8 splits
    GemmCase rows128{m, 200, 1040, e4, e4, int(fp8::gemm::Path::kGemvTma), 0, false};
    rows128.sms = 4;  // two tiles of 128 rows in pairs
    failures += !test_gemm(rows128);
  }
  std::printf("fp8_test small: %d failure(s)\n", failures);
  return failures;
}

int main(int argc, char** argv) {
  int device = 0;
  KERNELS_CUDA_CHECK(cudaGetDevice(&device));
  KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&g_sms, cudaDevAttrMultiProcessorCount, device));
  KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&g_cc_major, cudaDevAttrComputeCapabilityMajor, device));
  KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&g_cc_minor, cudaDevAttrComputeCapabilityMinor, device));
  bool timing = true;
  const char* time_only = nullptr;
  std::vector<std::array<int64_t, 3>> shapes;  // the timed GEMM shapes (default 4096^3 and 8192^3)
  for (int i = 1; i < argc; ++i) {
    long long m = 0, n = 0, k = 0;
    if (std::strcmp(argv[i], "--small") == 0) {
      return small_cases() == 0 ? 0 : 1;
    } else if (std::strcmp(argv[i], "--no-timing") == 0) {
      timing = false;
    } else if (std::strcmp(argv[i], "--graph") == 0) {
      g_graph = true;
    } else if (std::strcmp(argv[i], "--time-only") == 0 && i + 1 < argc) {
      time_only = argv[++i];
    } else if (std::strcmp(argv[i], "--shape") == 0 && i + 1 < argc &&
               std::sscanf(argv[++i], "%lldx%lldx%lld", &m, &n, &k) == 3 && m > 0 && n > 0 && k > 0 && k % 16 == 0) {
      shapes.push_back({m, n, k});
    } else {
      std::fprintf(stderr,
                   "usage: %s [--small | --no-timing | --time-only LABEL_SUBSTRING] [--graph] [--shape MxNxK ...]\n",
                   argv[0]);
      return 2;
    }
  }
  if (shapes.empty()) shapes = {{4096, 4096, 4096}, {8192, 8192, 8192}};
  const bool hopper = g_cc_major == 9 && g_cc_minor == 0;
  int failures = time_only != nullptr ? 0 : correctness_cases();
  if (hopper && timing) {
    std::vector<std::vector<std::string>> labels(shapes.size());
    std::vector<std::vector<double>> tflops(shapes.size());
    for (size_t si = 0; si < shapes.size(); ++si)
      failures += !time_large(shapes[si][0], shapes[si][1], shapes[si][2], time_only, labels[si], tflops[si]);
    if (!labels[0].empty()) {
      std::printf("\n%-40s", "variant");
      for (const auto& sh : shapes) {
        const std::string name = std::to_string(sh[0]) + "x" + std::to_string(sh[1]) + "x" + std::to_string(sh[2]);
        std::printf(" %16s", name.c_str());
      }
      std::printf("   (TFLOP/s, median of sustained launches)\n");
      for (size_t i = 0; i < labels[0].size(); ++i) {
        std::printf("%-40s", labels[0][i].c_str());
        for (size_t si = 0; si < shapes.size(); ++si)
          std::printf(" %16.0f", i < tflops[si].size() ? tflops[si][i] : 0.0);
        std::printf("\n");
      }
    }
    failures += !time_decode(time_only);
    failures += !time_gemv(time_only);
    failures += !time_skinny(time_only);
  }
  std::printf("fp8_test: %d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
