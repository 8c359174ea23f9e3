// Standalone test of paged decode and ragged paged prefill (random page tables, several page
// sizes) against a CPU reference; prints a correctness table with timings, exits 1 on failure.
// `attn_paged_test bench` instead times every decode tile configuration of DecodeVariants<128>
// over split counts on the benchmark shapes (each output checked against the default's), and
// `attn_paged_test latency [B] [head_dim] [splits] [variants]` their time per call at B = 1, 4, 16 and
// 64 under CUDA-graph replay (head_dim 64 / 256: the default, its other row layout and, at 64, the
// deepest ring; splits: one split count of the default only, for a profiler; variants: the default
// and the named ones, e.g. `latency 16 128 0 deep,w8s3`).
//
//   python -m tools.nvcc csrc/tests/attn_paged_test.cu csrc/kernels/attention/attn_decode.cu \
//       csrc/kernels/attention/attn_prefill.cu csrc/kernels/attention/attn_prefill_ws.cu \
//       && build/csrc-tests/attn_paged_test
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>

#include "../kernels/attention/attn_api.h"
#include "../kernels/attention/decode_kernel.cuh"
#include "attn_test_common.h"

using namespace kernels::attention;

// decode: q [B, 1, Hq, D]; prefill: packed q [sum(q_lens), Hq, D].
static bool run_case(bool decode, const std::vector<int>& q_lens, const std::vector<int>& k_lens, int hq, int hkv,
                     int d, int page_size, bool causal, AttnImpl impl, PrefillKernel kernel = PrefillKernel::kAuto) {
  const int b = int(k_lens.size());
  const int max_k = *std::max_element(k_lens.begin(), k_lens.end());
  const int max_pages = (max_k + page_size - 1) / page_size;
  const int num_pages = b * max_pages + 5;
  std::vector<int> cu(b + 1, 0);
  for (int i = 0; i < b; ++i) cu[i + 1] = cu[i] + q_lens[i];
  const long total_q = cu[b];
  const long row = long(hq) * d, kv_row = long(hkv) * d;
  auto q = kernels::test::random_bf16(total_q * row, 11);
  auto k_cache = kernels::test::random_bf16(long(num_pages) * page_size * kv_row, 12);
  auto v_cache = kernels::test::random_bf16(long(num_pages) * page_size * kv_row, 13);
  std::vector<int> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(page_size));
  std::vector<int> table(perm.begin(), perm.begin() + long(b) * max_pages);
  // Every cache row no sequence uses is NaN (rows past a sequence's keys in its last page, and
  // the pages no table names): a kernel that lets one into a result fails the case.
  {
    std::vector<char> used(long(num_pages) * page_size, 0);
    for (int bi = 0; bi < b; ++bi)
      for (int j = 0; j < k_lens[bi]; ++j)
        used[long(table[bi * max_pages + j / page_size]) * page_size + j % page_size] = 1;
    const __nv_bfloat16 nan = __float2bfloat16(NAN);
    for (long r = 0; r < long(num_pages) * page_size; ++r) {
      if (used[r]) continue;
      std::fill_n(k_cache.begin() + r * kv_row, kv_row, nan);
      std::fill_n(v_cache.begin() + r * kv_row, kv_row, nan);
    }
  }

  // CPU reference on the gathered (contiguous) keys of each batch.
  std::vector<float> ref(total_q * row);
  const double scale = 1.0 / std::sqrt(double(d));
  for (int bi = 0; bi < b; ++bi) {
    std::vector<__nv_bfloat16> kb(std::max(1, k_lens[bi]) * kv_row), vb(kb.size());
    for (int j = 0; j < k_lens[bi]; ++j) {
      const long src = (long(table[bi * max_pages + j / page_size]) * page_size + j % page_size) * kv_row;
      std::copy_n(k_cache.begin() + src, kv_row, kb.begin() + j * kv_row);
      std::copy_n(v_cache.begin() + src, kv_row, vb.begin() + j * kv_row);
    }
    kernels::test::reference_one_batch(q.data() + cu[bi] * row, kb.data(), vb.data(), ref.data() + cu[bi] * row,
                                       q_lens[bi], k_lens[bi], hq, hkv, d, causal, scale, row, kv_row, row);
  }

  auto* dq = kernels::test::to_device(q);
  auto* dk = kernels::test::to_device(k_cache);
  auto* dv = kernels::test::to_device(v_cache);
  auto* dtable = kernels::test::to_device(table);
  auto* dlens = kernels::test::to_device(k_lens);
  auto* dcu = kernels::test::to_device(cu);
  __nv_bfloat16* dout = nullptr;
  KERNELS_CUDA_CHECK(cudaMalloc(&dout, total_q * row * 2));
  KERNELS_CUDA_CHECK(cudaMemset(dout, 0xff, total_q * row * 2));

  AttnParams p;
  p.q = dq;
  p.o = dout;
  p.k = dk;
  p.v = dv;
  p.q_token_stride = p.o_token_stride = row;
  p.q_head_stride = p.o_head_stride = d;
  p.k_block_stride = p.v_block_stride = long(page_size) * kv_row;
  p.k_token_stride = p.v_token_stride = kv_row;
  p.k_head_stride = p.v_head_stride = d;
  p.page_table = dtable;
  p.page_table_batch_stride = max_pages;
  p.seqlens_k = dlens;
  p.page_size = page_size;
  p.max_pages = max_pages;
  p.num_pages = num_pages;
  p.batch = b;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.head_dim = d;
  p.group = hq / hkv;
  p.scale = float(scale);
  p.scale_log2 = float(scale * 1.4426950408889634);
  p.causal = causal;

  float* ws = nullptr;
  int32_t* dschedule = nullptr;
  bool schedule_on_device = false;  // the warp-specialized prefill: no host schedule
  if (decode) {
    p.seqlen_q = 1;
    p.q_batch_stride = p.o_batch_stride = row;
    int dev = 0, sms = 0;
    KERNELS_CUDA_CHECK(cudaGetDevice(&dev));
    KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    p.num_splits = decode_num_splits(b, hkv, 1, p.group, max_pages * page_size, d, sms);
    const int64_t floats = decode_workspace_floats(p.num_splits, b, hq, 1, d);
    if (floats > 0) {
      KERNELS_CUDA_CHECK(cudaMalloc(&ws, floats * 4));
      p.o_partial = ws;
      p.lse_partial = ws + int64_t(p.num_splits) * b * hq * d;
    }
  } else {
    p.seqlen_q = *std::max_element(q_lens.begin(), q_lens.end());
    p.cu_seqlens_q = dcu;
    p.total_q = int(total_q);
    const auto schedule = plan_packed_q_schedule(p, cu.data(), impl, kernel);
    schedule_on_device = schedule.empty();
    if (schedule_on_device) {
      p.seqlen_q = std::max(p.total_q, 1);  // any bound will do (the binding's, without reading the lengths)
    } else {
      dschedule = kernels::test::to_device(schedule);
      p.q_schedule = dschedule;
      p.num_q_tiles = int(schedule.size() / 2);
    }
  }
  auto launch = [&] { decode ? run_decode(p, impl, nullptr) : run_prefill(p, impl, nullptr, kernel); };
  launch();
  KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> out(total_q * row);
  KERNELS_CUDA_CHECK(cudaMemcpy(out.data(), dout, out.size() * 2, cudaMemcpyDeviceToHost));
  const double err = kernels::test::rel_err(out, ref);
  const float ms = kernels::test::time_ms(launch);
  double kv_bytes = 0;
  for (int len : k_lens) kv_bytes += 2.0 * len * kv_row * 2;
  const bool ok = err <= 1e-2;
  const char* impl_name = impl == AttnImpl::kScalar ? "scalar" : decode ? "tc" : schedule_on_device ? "tc-ws" : "tc-cp";
  std::printf("%-13s %-6s b%-3d hq%d/%d d%-3d page %-4d %-6s  rel_err %.2e  %8.3f ms  %7.1f GB/s(KV)  %s\n",
              decode ? "paged-decode" : "paged-prefill", impl_name, b, hq, hkv, d, page_size, causal ? "causal" : "",
              err, ms, kv_bytes / (ms * 1e-3) / 1e9, ok ? "PASS" : "FAIL");
  cudaFree(dq);
  cudaFree(dk);
  cudaFree(dv);
  cudaFree(dtable);
  cudaFree(dlens);
  cudaFree(dcu);
  cudaFree(dout);
  cudaFree(ws);
  cudaFree(dschedule);
  return ok;
}

// ---- bench: decode tile configurations x split counts ------------------------------------------

__global__ void fill_random_bf16(__nv_bfloat16* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = __float2bfloat16(float(h & 0xffff) / 65536.f * 2.f - 1.f);
  }
}

struct DecodeVariant {
  const char* name;
  std::string tiles;
  int ctas_per_sm;
  void (*launch)(const AttnParams&, cudaStream_t);
};

template <class Cfg>
void launch_decode_variant(const AttnParams& p, cudaStream_t stream) {
  p.page_table == nullptr ? launch_decode<Cfg, AttnImpl::kTensorCore, ContiguousKV>(p, stream)
                          : launch_decode<Cfg, AttnImpl::kTensorCore, PagedKV>(p, stream);
}

template <class Cfg>
DecodeVariant make_decode_variant(const char* name) {
  using T = DecodeTraits<Cfg>;
  return {name,
          "w" + std::to_string(Cfg::kWarps) + " n" + std::to_string(T::kBlockN) + " s" + std::to_string(Cfg::kStages),
          T::kCtasPerSm, &launch_decode_variant<Cfg>};
}

// The default, its tiles in the other row layout (padded or swizzled), and at D 128 the tile
// shapes measured before.
template <int kD>
static std::vector<DecodeVariant> decode_variants() {
  using V = DecodeVariants<kD>;
  std::vector<DecodeVariant> variants = {make_decode_variant<typename V::Default>("default")};
  if constexpr (V::Default::kSwizzled) {
    variants.push_back(make_decode_variant<typename V::Padded>("padded"));
  } else {
    variants.push_back(make_decode_variant<typename V::Swizzled>("swizzled"));
  }
  if constexpr (V::Deep::kStages != V::Default::kStages)
    variants.push_back(make_decode_variant<typename V::Deep>("deep"));
  if constexpr (kD == 128) {
    variants.insert(
        variants.end(),
        {make_decode_variant<typename V::W4S2>("w4s2"), make_decode_variant<typename V::W4S4>("w4s4"),
         make_decode_variant<typename V::W8S2>("w8s2"), make_decode_variant<typename V::W8S3>("w8s3"),
         make_decode_variant<typename V::W4K32S2>("w4k32s2"), make_decode_variant<typename V::W4K32S3>("w4k32s3")});
  }
  return variants;
}

// The benchmark's decode step: q [B, 1, hq, d] against keys [B, sk, hkv, d], contiguous
// (table == nullptr) or on pages of `page` keys that `table` [B, sk / page] names.
static AttnParams decode_params(int b, int hq, int hkv, int d, int sk, const void* q, void* o, const void* k,
                                const void* v, int page, const int* table, const int* lens, float* ws) {
  AttnParams p;
  p.q = q;
  p.o = o;
  p.k = k;
  p.v = v;
  p.q_batch_stride = p.o_batch_stride = int64_t(hq) * d;
  p.q_token_stride = p.o_token_stride = int64_t(hq) * d;
  p.q_head_stride = p.o_head_stride = d;
  p.k_token_stride = p.v_token_stride = int64_t(hkv) * d;
  p.k_head_stride = p.v_head_stride = d;
  p.batch = b;
  p.seqlen_q = 1;
  p.seqlen_k = sk;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.head_dim = d;
  p.group = hq / hkv;
  p.scale = float(1.0 / std::sqrt(double(d)));
  p.scale_log2 = p.scale * 1.4426950408889634f;
  p.o_partial = ws;
  if (table == nullptr) {
    p.k_block_stride = p.v_block_stride = int64_t(sk) * hkv * d;
  } else {
    p.k_block_stride = p.v_block_stride = int64_t(page) * hkv * d;
    p.page_table = table;
    p.page_table_batch_stride = sk / page;
    p.seqlens_k = lens;
    p.page_size = page;
    p.max_pages = sk / page;
  }
  return p;
}

// A page table [b, sk / page]: pages in order, or shuffled (the benchmark's) when `shuffled`.
static int* decode_page_table(int b, int sk, int page, bool shuffled) {
  std::vector<int> table(size_t(b) * (sk / page));
  std::iota(table.begin(), table.end(), 0);
  if (shuffled) std::shuffle(table.begin(), table.end(), std::mt19937(page));
  return kernels::test::to_device(table);
}

// Runs `variant` once on `p` (its output poisoned first) and returns its relative error
// against `ref`; `is_reference` (the default variant, unsplit) first makes its output the
// reference that the later runs are held to.
static double run_against_reference(const DecodeVariant& variant, const AttnParams& p, cudaStream_t stream,
                                    __nv_bfloat16* out, __nv_bfloat16* ref, int64_t elems, bool is_reference) {
  KERNELS_CUDA_CHECK(cudaMemset(out, 0xff, elems * 2));
  variant.launch(p, stream);
  KERNELS_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (is_reference) KERNELS_CUDA_CHECK(cudaMemcpy(ref, out, elems * 2, cudaMemcpyDeviceToDevice));
  std::vector<__nv_bfloat16> got(elems), want(elems);
  KERNELS_CUDA_CHECK(cudaMemcpy(got.data(), out, elems * 2, cudaMemcpyDeviceToHost));
  KERNELS_CUDA_CHECK(cudaMemcpy(want.data(), ref, elems * 2, cudaMemcpyDeviceToHost));
  std::vector<float> want_f(want.size());
  for (size_t i = 0; i < want.size(); ++i) want_f[i] = __bfloat162float(want[i]);
  return kernels::test::rel_err(got, want_f);
}

static int bench_decode() {
  const std::vector<DecodeVariant> variants = decode_variants<128>();
  constexpr int hq = 32, hkv = 8, d = 128, sk = 4096, kMaxSplits = 4;
  int dev = 0, sms = 0;
  KERNELS_CUDA_CHECK(cudaGetDevice(&dev));
  KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int failures = 0;
  std::printf("decode variants, q [B, 1, %d, %d], %d / %d heads, Sk %d: KV TB/s (best split)\n", hq, d, hq, hkv, sk);
  std::printf("  %-9s %-12s %3s", "variant", "tiles", "cps");
  // KV sources: contiguous, shuffled pages (the benchmark's), and pages in order (a sorted
  // page table; page 4096 = one page per sequence): the in-order rows tell the cost of the
  // paged code path apart from the cost of scattered pages.
  struct Source {
    int page;
    bool shuffled;
  };
  const Source sources[] = {{0, false}, {16, true}, {64, true}, {64, false}, {sk, false}};
  for (int b : {16, 64})
    for (const Source& src : sources) {
      const std::string name =
          src.page == 0 ? "contig" : "pg" + std::to_string(src.page) + (src.shuffled ? "" : " ord");
      std::printf("   B%-2d %-8s", b, name.c_str());
    }
  std::printf("\n");
  std::vector<std::string> lines(std::size(variants));
  for (size_t vi = 0; vi < std::size(variants); ++vi) {
    char head[96];
    std::snprintf(head, sizeof head, "  %-9s %-12s %3d", variants[vi].name, variants[vi].tiles.c_str(),
                  variants[vi].ctas_per_sm);
    lines[vi] = head;
  }
  for (int b : {16, 64}) {
    const int64_t kv_elems = int64_t(b) * sk * hkv * d, q_elems = int64_t(b) * hq * d;
    __nv_bfloat16 *dq, *dk, *dv, *dout, *dref;
    KERNELS_CUDA_CHECK(cudaMalloc(&dq, q_elems * 2));
    KERNELS_CUDA_CHECK(cudaMalloc(&dk, kv_elems * 2));
    KERNELS_CUDA_CHECK(cudaMalloc(&dv, kv_elems * 2));
    KERNELS_CUDA_CHECK(cudaMalloc(&dout, q_elems * 2));
    KERNELS_CUDA_CHECK(cudaMalloc(&dref, q_elems * 2));
    fill_random_bf16<<<1024, 256>>>(dq, q_elems, 1);
    fill_random_bf16<<<1024, 256>>>(dk, kv_elems, 2);
    fill_random_bf16<<<1024, 256>>>(dv, kv_elems, 3);
    float* ws = nullptr;
    KERNELS_CUDA_CHECK(cudaMalloc(&ws, decode_workspace_floats(kMaxSplits, b, hq, 1, d) * 4));
    for (const Source& src : sources) {
      const int page = src.page;
      int* dtable = page == 0 ? nullptr : decode_page_table(b, sk, page, src.shuffled);
      int* dlens = page == 0 ? nullptr : kernels::test::to_device(std::vector<int>(b, sk));
      AttnParams p = decode_params(b, hq, hkv, d, sk, dq, dout, dk, dv, page, dtable, dlens, ws);
      for (size_t vi = 0; vi < std::size(variants); ++vi) {
        double best_tbps = 0;
        int best_splits = 0;
        for (int splits = 1; splits <= (b >= 64 ? 2 : kMaxSplits); ++splits) {
          p.num_splits = splits;
          p.lse_partial = ws + int64_t(splits) * b * hq * d;
          auto launch = [&] { variants[vi].launch(p, nullptr); };
          const double err =
              run_against_reference(variants[vi], p, nullptr, dout, dref, q_elems, vi == 0 && splits == 1);
          if (!(err <= 1e-2)) {
            std::printf("  %s B%d page %d%s splits %d differs from default: rel_err %.2e  FAIL\n", variants[vi].name, b,
                        page, src.shuffled ? "" : " in order", splits, err);
            ++failures;
            continue;
          }
          const double tbps = 2.0 * kv_elems * 2 / (kernels::test::time_ms(launch) * 1e-3) / 1e12;
          if (tbps > best_tbps) best_tbps = tbps, best_splits = splits;
        }
        char cell[32];
        std::snprintf(cell, sizeof cell, "   %5.2f (s%d)   ", best_tbps, best_splits);
        lines[vi] += cell;
      }
      cudaFree(dtable);
      cudaFree(dlens);
    }
    cudaFree(dq);
    cudaFree(dk);
    cudaFree(dv);
    cudaFree(dout);
    cudaFree(dref);
    cudaFree(ws);
  }
  for (const auto& line : lines) std::printf("%s\n", line.c_str());
  std::printf("attn_paged_test bench: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}

// ---- latency: B = 1 to 64 under CUDA-graph replay --------------------------------------------

// Whether `name` is one of the comma-separated names in `list`.
static bool names_listed(const std::string& list, const char* name) {
  return ("," + list + ",").find("," + std::string(name) + ",") != std::string::npos;
}

// `attn_paged_test latency`: the decode's time per call at B = 1, 4, 16 and 64 (Sk 4096, 32 / 8
// heads, D 128 or the head_dim argument, contiguous and on shuffled pages of 16; contiguous heads-major too, [B, Hkv,
// Sk, D] through the strides, where each CTA's keys are one contiguous run), every variant at every split count (up to
// 8 at B >= 16), each call replayed from a CUDA graph (no launch overhead, as a model's decode loop runs it) on one of
// kCopies K/V caches in turn, so that the keys come from HBM and not from L2 (50 MB: it holds
// one B = 1 cache). The cost model's split count (decode_num_splits) is printed beside. Every
// output is checked against the default's unsplit one. only_splits > 0: that split count only, the
// default variant on contiguous K/V and on pages of 16 (a short run for a profiler, or to compare builds).
// only_variants (names, comma-separated): the default and these variants only, at every split
// count or at only_splits.
template <int d>
static int latency_decode(int only_batch, int only_splits = 0, const std::string& only_variants = "") {
  const std::vector<DecodeVariant> variants = decode_variants<d>();
  constexpr int hq = 32, hkv = 8, sk = 4096, kCopies = 8, kCallsPerGraph = 16, kMaxSplits = 64;
  const int split_counts[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
  // B >= 16 fills the GPU without splits: only up to 8 of them are timed there
  const auto timed = [](int b, int splits) { return b < 16 || splits <= 8; };
  int dev = 0, sms = 0;
  KERNELS_CUDA_CHECK(cudaGetDevice(&dev));
  KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaStream_t stream;  // blocking: ordered with time_ms's events on the legacy default stream
  KERNELS_CUDA_CHECK(cudaStreamCreate(&stream));
  int failures = 0;
  std::printf(
      "decode latency under CUDA-graph replay, q [B, 1, %d, %d], %d / %d heads, Sk %d, %d K/V copies in "
      "turn: us per call by split count\n",
      hq, d, hq, hkv, sk, kCopies);
  for (int b : {1, 4, 16, 64}) {
    if (only_batch > 0 && b != only_batch) continue;
    const int64_t kv_elems = int64_t(b) * sk * hkv * d, q_elems = int64_t(b) * hq * d;
    __nv_bfloat16 *dq, *dout, *dref, *dk[kCopies], *dv[kCopies];
    KERNELS_CUDA_CHECK(cudaMalloc(&dq, q_elems * 2));
    KERNELS_CUDA_CHECK(cudaMalloc(&dout, q_elems * 2));
    KERNELS_CUDA_CHECK(cudaMalloc(&dref, q_elems * 2));
    fill_random_bf16<<<1024, 256>>>(dq, q_elems, 1);
    for (int c = 0; c < kCopies; ++c) {
      KERNELS_CUDA_CHECK(cudaMalloc(&dk[c], kv_elems * 2));
      KERNELS_CUDA_CHECK(cudaMalloc(&dv[c], kv_elems * 2));
      fill_random_bf16<<<1024, 256>>>(dk[c], kv_elems, 2 + 2 * c);
      fill_random_bf16<<<1024, 256>>>(dv[c], kv_elems, 3 + 2 * c);
    }
    float* ws = nullptr;
    KERNELS_CUDA_CHECK(cudaMalloc(&ws, decode_workspace_floats(kMaxSplits, b, hq, 1, d) * 4));
    for (int layout = 0; layout < (only_splits > 0 ? 2 : 3); ++layout) {
      const int page = layout == 1 ? 16 : 0;
      const bool heads_major = layout == 2;
      int* dtable = page == 0 ? nullptr : decode_page_table(b, sk, page, true);
      int* dlens = page == 0 ? nullptr : kernels::test::to_device(std::vector<int>(b, sk));
      const int model = decode_num_splits(b, hkv, 1, hq / hkv, sk, d, sms);
      const char* layout_name[] = {"contiguous", "pages of 16 (shuffled)", "contiguous heads-major"};
      if (only_splits > 1) {  // the unsplit reference the timed split count is held to
        AttnParams p = decode_params(b, hq, hkv, d, sk, dq, dout, dk[0], dv[0], page, dtable, dlens, ws);
        p.num_splits = 1;
        run_against_reference(variants[0], p, stream, dout, dref, q_elems, true);
      }
      std::printf("\n  B%d %s, %.1f MB of K/V; the cost model: %d splits\n  %-9s %-12s", b, layout_name[layout],
                  2.0 * kv_elems * 2 / 1e6, model, "variant", "tiles");
      for (int splits : split_counts)
        if (timed(b, splits) && (only_splits == 0 || splits == only_splits)) std::printf(" %7d", splits);
      std::printf("\n");
      for (size_t vi = 0; vi < variants.size(); ++vi) {
        if (vi > 0 && (only_variants.empty() ? only_splits > 0 : !names_listed(only_variants, variants[vi].name)))
          continue;  // the default (vi 0) always runs: its unsplit output is the reference
        std::printf("  %-9s %-12s", variants[vi].name, variants[vi].tiles.c_str());
        for (int splits : split_counts) {
          if (!timed(b, splits) || (only_splits > 0 && splits != only_splits)) continue;
          AttnParams p = decode_params(b, hq, hkv, d, sk, dq, dout, dk[0], dv[0], page, dtable, dlens, ws);
          if (heads_major) {  // [B, Hkv, Sk, D]: a kv head's keys contiguous
            p.k_token_stride = p.v_token_stride = d;
            p.k_head_stride = p.v_head_stride = int64_t(sk) * d;
          }
          p.num_splits = splits;
          p.lse_partial = ws + int64_t(splits) * b * hq * d;
          if (!(run_against_reference(variants[vi], p, stream, dout, dref, q_elems, vi == 0 && splits == 1) <= 1e-2)) {
            std::printf("    FAIL");
            ++failures;
            continue;
          }
          cudaGraph_t graph;
          cudaGraphExec_t exec;
          KERNELS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
          for (int i = 0; i < kCallsPerGraph; ++i) {
            AttnParams pi = p;
            pi.k = dk[i % kCopies];
            pi.v = dv[i % kCopies];
            variants[vi].launch(pi, stream);
          }
          KERNELS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
          KERNELS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
          const float ms = kernels::test::time_ms([&] { KERNELS_CUDA_CHECK(cudaGraphLaunch(exec, stream)); });
          std::printf(" %7.2f", ms * 1e3f / kCallsPerGraph);
          KERNELS_CUDA_CHECK(cudaGraphExecDestroy(exec));
          KERNELS_CUDA_CHECK(cudaGraphDestroy(graph));
        }
        std::printf("\n");
      }
      cudaFree(dtable);
      cudaFree(dlens);
    }
    for (int c = 0; c < kCopies; ++c) {
      cudaFree(dk[c]);
      cudaFree(dv[c]);
    }
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(dref);
    cudaFree(ws);
  }
  KERNELS_CUDA_CHECK(cudaStreamDestroy(stream));
  std::printf("attn_paged_test latency: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every finished case reaches the log
  if (argc > 1 && std::string(argv[1]) == "bench") return bench_decode();
  // latency [B (0: all)] [head_dim (128)] [splits (0: all)] [variants (comma-separated)]
  if (argc > 1 && std::string(argv[1]) == "latency") {
    const int only_batch = argc > 2 ? std::atoi(argv[2]) : 0, head_dim = argc > 3 ? std::atoi(argv[3]) : 128;
    const int only_splits = argc > 4 ? std::atoi(argv[4]) : 0;
    const std::string only_variants = argc > 5 ? argv[5] : "";
    if (head_dim == 64) return latency_decode<64>(only_batch, only_splits, only_variants);
    if (head_dim == 256) return latency_decode<256>(only_batch, only_splits, only_variants);
    return latency_decode<128>(only_batch, only_splits, only_variants);
  }
  int failures = 0;
  if (argc > 1 && std::string(argv[1]) == "small") {
    // One small case per kernel, for compute-sanitizer memcheck / racecheck: paged decode (split,
    // then the combine), the warp-specialized prefill on pages of 16 and 64, the cp.async one,
    // scalar.
    failures += !run_case(true, {1, 1}, {500, 77}, 8, 2, 128, 16, false, AttnImpl::kTensorCore);
    failures += !run_case(false, {70, 10, 130}, {90, 10, 400}, 16, 2, 128, 16, true, AttnImpl::kTensorCore);
    // A whole query tile and an empty sequence: CTAs past the last tile return at once.
    failures += !run_case(false, {128, 5, 0}, {200, 5, 0}, 8, 2, 64, 64, false, AttnImpl::kTensorCore);
    failures += !run_case(false, {70, 10, 130}, {90, 10, 400}, 16, 2, 128, 16, true, AttnImpl::kTensorCore,
                          PrefillKernel::kCpAsync);
    failures += !run_case(false, {33, 5}, {33, 200}, 8, 8, 64, 16, true, AttnImpl::kScalar);
    std::printf("attn_paged_test small: %d failure(s)\n", failures);
    return failures ? 1 : 0;
  }
  // An exception (launch error, unsupported shape) fails that case; the others still run.
  auto guarded = [](bool decode, const std::vector<int>& q_lens, const std::vector<int>& k_lens, int hq, int hkv, int d,
                    int page_size, bool causal, AttnImpl impl, PrefillKernel kernel = PrefillKernel::kAuto) {
    const std::string label = std::string(decode ? "paged decode" : "paged prefill") + " d" + std::to_string(d) +
                              " page " + std::to_string(page_size);
    return kernels::test::run_guarded(
        label.c_str(), [&] { return run_case(decode, q_lens, k_lens, hq, hkv, d, page_size, causal, impl, kernel); });
  };
  for (AttnImpl impl : {AttnImpl::kTensorCore, AttnImpl::kScalar}) {
    // 12: a thread's rows straddle pages (per-row lookups); 48: one lookup per thread with
    // a divisor that is not a power of two.
    for (int page : {1, 12, 16, 48, 64, 256}) {
      failures += !guarded(true, {1, 1, 1, 1}, {1000, 1, 333, 64}, 32, 8, 128, page, false, impl);
      failures += !guarded(false, {70, 10, 130}, {90, 10, 400}, 16, 2, 128, page, true, impl);
    }
    failures += !guarded(true, {1, 1}, {500, 77}, 8, 1, 64, 16, true, impl);
    failures += !guarded(true, {1, 1, 1}, {700, 1, 64}, 16, 2, 256, 16, false, impl);
    failures += !guarded(false, {33, 5}, {33, 200}, 8, 8, 256, 16, false, impl);
    failures += !guarded(false, {70, 10, 130}, {90, 10, 400}, 16, 2, 64, 64, false, impl);
  }
  // Prefill on Hopper: the warp-specialized kernel (kAuto, above, where the pages fit its tiles)
  // against the cp.async one, and shapes for the former: a sequence's last 64-row box cut by its
  // end, a sequence with more keys than queries (bottom-right causal), one with no keys, pages
  // of 16 / 32 (several boxes per tile), of the tile's size and larger.
  for (int page : {16, 64, 256}) {
    failures += !guarded(false, {70, 10, 130}, {90, 10, 400}, 16, 2, 128, page, true, AttnImpl::kTensorCore,
                         PrefillKernel::kCpAsync);
  }
  for (int page : {16, 32, 128, 256}) {
    for (bool causal : {true, false}) {
      failures +=
          !guarded(false, {200, 1, 64, 0, 129}, {1000, 1, 64, 0, 129}, 32, 8, 128, page, causal, AttnImpl::kTensorCore);
      failures += !guarded(false, {300, 17}, {300, 500}, 8, 2, 64, page, causal, AttnImpl::kTensorCore);
    }
  }
  // More sequences than a warp has lanes (each lane counts the tiles of three when the kernel
  // looks for its tile), some without queries or keys.
  {
    std::vector<int> q_lens(70), k_lens(70);
    for (int i = 0; i < 70; ++i) {
      q_lens[i] = i * 37 % 150;
      k_lens[i] = q_lens[i] + (i % 3) * 20;
    }
    for (bool causal : {true, false}) {
      failures += !guarded(false, q_lens, k_lens, 8, 2, 128, 64, causal, AttnImpl::kTensorCore);
    }
  }
  for (int page : {16, 80, 160, 64}) {  // D = 256: 80-key tiles (64: not a divisor, the cp.async kernel)
    for (bool causal : {true, false}) {
      failures += !guarded(false, {97, 160}, {333, 160}, 4, 1, 256, page, causal, AttnImpl::kTensorCore);
    }
  }
  // The benchmark shape: B=16, Sk=4096, 32/8 heads, D=128, page 64.
  failures +=
      !guarded(true, std::vector<int>(16, 1), std::vector<int>(16, 4096), 32, 8, 128, 64, false, AttnImpl::kTensorCore);
  std::printf("attn_paged_test: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
