// Standalone test of contiguous-KV decode and prefill (tensor-core and scalar) against a CPU
// reference; prints a correctness table with timings, exits 1 on any mismatch. Then both
// tensor-core prefill kernels, warp-specialized ("tc-ws", prefill_ws_sm90.cuh) and cp.async
// ("tc-cpasync"), on odd shapes in bf16 and fp16 (prefill_kernels_sweep).
// `attn_test bench [64|128|256]` instead checks every prefill tile configuration of
// PrefillVariants<D> and PrefillWsVariants<D> (dense and paged ragged, tails, GQA, causal,
// masks; the warp-specialized ones take no paged KV and no masks) and prints TFLOP/s per
// configuration on the benchmark shapes (D=128: all variants; 64 and 256: the mma.sync
// default, sm90 and the warp-specialized ones). "default" is the mma.sync configuration
// (PrefillConfig); "sm90" the cp.async WGMMA one (PrefillConfigSm90); "ws" the warp-specialized
// one (PrefillWsConfig) that run_prefill takes on Hopper for dense Q without masks. Needs an
// sm_90a build. `attn_test bench 128 ws,ws_s3` keeps the named variants beside "default"
// (the reference), `attn_test bench 0 ws` at every head_dim.
//
//   python -m tools.nvcc csrc/tests/attn_test.cu csrc/kernels/attention/attn_decode.cu \
//       csrc/kernels/attention/attn_prefill.cu csrc/kernels/attention/attn_prefill_ws.cu \
//       && build/csrc-tests/attn_test
// A hang in the warp-specialized kernel: add -DKERNELS_PREFILL_WS_WATCHDOG=100000000 to that
// command (prefill_ws_sm90.cuh) and the waiting thread reports itself and traps.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>

#include <type_traits>

#include "../kernels/attention/attn_api.h"
#include "../kernels/attention/prefill_kernel.cuh"
#include "../kernels/attention/prefill_ws_sm90.cuh"
#include "attn_test_common.h"

using namespace kernels::attention;

struct Case {
  const char* kind;  // "decode" | "prefill"
  int b, sq, sk, hq, hkv, d;
  bool causal;
};

// The problem's sizes, scale and mask flag (Case and WsCase name them alike).
template <class C>
static void set_problem(AttnParams& p, const C& c, double scale) {
  p.batch = c.b;
  p.seqlen_q = c.sq;
  p.seqlen_k = c.sk;
  p.heads_q = c.hq;
  p.heads_kv = c.hkv;
  p.head_dim = c.d;
  p.group = c.hq / c.hkv;
  p.scale = float(scale);
  p.scale_log2 = float(scale * 1.4426950408889634);
  p.causal = c.causal;
}

static bool run_case(const Case& c, AttnImpl impl) {
  const long q_elems = long(c.b) * c.sq * c.hq * c.d, kv_elems = long(c.b) * c.sk * c.hkv * c.d;
  auto q = kernels::test::random_bf16(q_elems, 1), k = kernels::test::random_bf16(kv_elems, 2),
       v = kernels::test::random_bf16(kv_elems, 3);
  std::vector<float> ref(q_elems);
  const double scale = 1.0 / std::sqrt(double(c.d));
  for (int bi = 0; bi < c.b; ++bi) {
    kernels::test::reference_one_batch(
        q.data() + long(bi) * c.sq * c.hq * c.d, k.data() + long(bi) * c.sk * c.hkv * c.d,
        v.data() + long(bi) * c.sk * c.hkv * c.d, ref.data() + long(bi) * c.sq * c.hq * c.d, c.sq, c.sk, c.hq, c.hkv,
        c.d, c.causal, scale, long(c.hq) * c.d, long(c.hkv) * c.d, long(c.hq) * c.d);
  }
  auto* dq = kernels::test::to_device(q);
  auto* dk = kernels::test::to_device(k);
  auto* dv = kernels::test::to_device(v);
  __nv_bfloat16* dout = nullptr;
  KERNELS_CUDA_CHECK(cudaMalloc(&dout, q_elems * 2));
  KERNELS_CUDA_CHECK(cudaMemset(dout, 0xff, q_elems * 2));  // NaN poison

  AttnParams p;
  p.q = dq;
  p.o = dout;
  p.k = dk;
  p.v = dv;
  p.q_batch_stride = p.o_batch_stride = long(c.sq) * c.hq * c.d;
  p.q_token_stride = p.o_token_stride = long(c.hq) * c.d;
  p.q_head_stride = p.o_head_stride = c.d;
  p.k_block_stride = p.v_block_stride = long(c.sk) * c.hkv * c.d;
  p.k_token_stride = p.v_token_stride = long(c.hkv) * c.d;
  p.k_head_stride = p.v_head_stride = c.d;
  set_problem(p, c, scale);

  const bool decode = std::string(c.kind) == "decode";
  float* ws = nullptr;
  if (decode) {
    int dev = 0, sms = 0;
    KERNELS_CUDA_CHECK(cudaGetDevice(&dev));
    KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    p.num_splits = decode_num_splits(c.b, c.hkv, c.sq, p.group, c.sk, c.d, sms);
    const int64_t floats = decode_workspace_floats(p.num_splits, c.b, c.hq, c.sq, c.d);
    if (floats > 0) {
      KERNELS_CUDA_CHECK(cudaMalloc(&ws, floats * 4));
      p.o_partial = ws;
      p.lse_partial = ws + int64_t(p.num_splits) * c.b * c.hq * c.sq * c.d;
    }
  }
  auto launch = [&] { decode ? run_decode(p, impl, nullptr) : run_prefill(p, impl, nullptr); };
  launch();
  KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> out(q_elems);
  KERNELS_CUDA_CHECK(cudaMemcpy(out.data(), dout, q_elems * 2, cudaMemcpyDeviceToHost));
  const double err = kernels::test::rel_err(out, ref);
  const float ms = kernels::test::time_ms(launch);
  double pairs = 0;
  for (int i = 0; i < c.sq; ++i) pairs += c.causal ? std::clamp(i + c.sk - c.sq + 1, 0, c.sk) : c.sk;
  const double tflops = 4.0 * c.d * c.b * c.hq * pairs / (ms * 1e-3) / 1e12;
  const double gbps = 2.0 * kv_elems * 2 / (ms * 1e-3) / 1e9;
  const bool ok = err <= 1e-2;
  std::printf(
      "%-7s %-6s b%-3d sq%-5d sk%-5d h%d/%d d%-3d %-6s splits %-3d  rel_err %.2e  %8.3f ms  %7.1f TFLOP/s  %7.1f "
      "GB/s(KV)  %s\n",
      c.kind, impl == AttnImpl::kTensorCore ? "tc" : "scalar", c.b, c.sq, c.sk, c.hq, c.hkv, c.d,
      c.causal ? "causal" : "", p.num_splits, err, ms, tflops, gbps, ok ? "PASS" : "FAIL");
  cudaFree(dq);
  cudaFree(dk);
  cudaFree(dv);
  cudaFree(dout);
  cudaFree(ws);
  return ok;
}

// ---- the two tensor-core prefill kernels on odd shapes, bf16 and fp16 --------------------------
// Every case runs the warp-specialized kernel (PrefillKernel::kWarpSpecialized: an error where it
// cannot run) and the cp.async kernel against the CPU reference: out and LSE, rows that see no
// key exactly zero with LSE -inf, nothing written outside out's rows (padding head slots and a
// tail poisoned with NaN must stay NaN), and a second run bit-identical to the first.

struct WsCase {
  int b, sq, sk, hq, hkv, d;
  bool causal;
  bool fp16;
  bool padded;  // q, k, v and out rows padded by one head slot (token stride (heads + 1) * d)
};

template <class Element>
static float element_to_float(Element x) {
  if constexpr (std::is_same_v<Element, __half>) {
    return __half2float(x);
  } else {
    return __bfloat162float(x);
  }
}

template <class Element>
static bool run_ws_case(const WsCase& c, PrefillKernel kernel) {
  const long q_row = long(c.hq + c.padded) * c.d, kv_row = long(c.hkv + c.padded) * c.d;
  const long q_elems = long(c.b) * c.sq * q_row, kv_elems = long(c.b) * std::max(c.sk, 1) * kv_row;
  // Inputs are bf16 values (exact in fp16 at these magnitudes): one CPU reference for both types.
  const auto q = kernels::test::random_bf16(q_elems, 11), k = kernels::test::random_bf16(kv_elems, 12),
             v = kernels::test::random_bf16(kv_elems, 13);
  const auto convert = [](const std::vector<__nv_bfloat16>& x) {
    std::vector<Element> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = Element(__bfloat162float(x[i]));
    return y;
  };
  const double scale = 1.0 / std::sqrt(double(c.d));
  std::vector<float> ref(q_elems, NAN), ref_lse(long(c.b) * c.hq * c.sq);
  for (int bi = 0; bi < c.b; ++bi) {
    kernels::test::reference_one_batch(q.data() + bi * c.sq * q_row, k.data() + bi * std::max(c.sk, 1) * kv_row,
                                       v.data() + bi * std::max(c.sk, 1) * kv_row, ref.data() + bi * c.sq * q_row, c.sq,
                                       c.sk, c.hq, c.hkv, c.d, c.causal, scale, q_row, kv_row, q_row,
                                       ref_lse.data() + long(bi) * c.hq * c.sq, c.sq);
  }
  const long guard = 4096;  // elements of NaN poison past out's last row
  std::vector<void*> device;
  const auto upload = [&](const auto& host) {
    auto* ptr = kernels::test::to_device(host);
    device.push_back(ptr);
    return ptr;
  };
  Element* dout = nullptr;
  float* dlse = nullptr;
  KERNELS_CUDA_CHECK(cudaMalloc(&dout, (q_elems + guard) * sizeof(Element)));
  KERNELS_CUDA_CHECK(cudaMalloc(&dlse, (ref_lse.size() + guard) * sizeof(float)));
  device.push_back(dout);
  device.push_back(dlse);

  AttnParams p;
  p.q = upload(convert(q));
  p.k = upload(convert(k));
  p.v = upload(convert(v));
  p.o = dout;
  p.lse = dlse;
  p.q_batch_stride = p.o_batch_stride = long(c.sq) * q_row;
  p.q_token_stride = p.o_token_stride = q_row;
  p.q_head_stride = p.o_head_stride = c.d;
  p.k_block_stride = p.v_block_stride = long(std::max(c.sk, 1)) * kv_row;
  p.k_token_stride = p.v_token_stride = kv_row;
  p.k_head_stride = p.v_head_stride = c.d;
  p.lse_batch_stride = long(c.hq) * c.sq;
  p.lse_head_stride = c.sq;
  p.lse_token_stride = 1;
  set_problem(p, c, scale);
  p.dtype = std::is_same_v<Element, __half> ? AttnDtype::kFP16 : AttnDtype::kBF16;

  std::vector<Element> out(q_elems + guard), first;
  std::vector<float> lse(ref_lse.size() + guard);
  bool ok = true;
  std::string why;
  for (int run = 0; run < 2; ++run) {
    KERNELS_CUDA_CHECK(cudaMemset(dout, 0xff, (q_elems + guard) * sizeof(Element)));  // NaN poison
    KERNELS_CUDA_CHECK(cudaMemset(dlse, 0xff, (ref_lse.size() + guard) * sizeof(float)));
    run_prefill(p, AttnImpl::kTensorCore, nullptr, kernel);
    KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
    KERNELS_CUDA_CHECK(cudaMemcpy(out.data(), dout, out.size() * sizeof(Element), cudaMemcpyDeviceToHost));
    KERNELS_CUDA_CHECK(cudaMemcpy(lse.data(), dlse, lse.size() * sizeof(float), cudaMemcpyDeviceToHost));
    if (run == 0) {
      first = out;
    } else if (std::memcmp(first.data(), out.data(), out.size() * sizeof(Element)) != 0) {
      ok = false;
      why += " second run differs;";
    }
  }
  double num = 0, den = 0, worst = 0, worst_lse = 0;
  long outside = 0, nonzero_empty = 0;
  for (long i = 0; i < q_elems + guard; ++i) {
    const float o = element_to_float(out[i]);
    const bool in_tensor = i < q_elems && (i % q_row) < long(c.hq) * c.d;
    if (!in_tensor) {
      outside += !std::isnan(o);
      continue;
    }
    const double diff = std::fabs(double(o) - ref[i]);
    if (std::isnan(diff)) {
      worst = NAN;
      break;
    }
    worst = std::max(worst, diff);
    num += diff * diff;
    den += double(ref[i]) * ref[i];
    const long token = (i / q_row) % c.sq;
    const bool sees_no_key = c.sk == 0 || (c.causal && token + c.sk - c.sq < 0);
    nonzero_empty += sees_no_key && o != 0.f;
  }
  const double err = std::sqrt(num / std::max(den, 1e-30));
  long lse_bad = 0;
  for (size_t i = 0; i < lse.size(); ++i) {
    if (i >= ref_lse.size()) {
      lse_bad += !std::isnan(lse[i]);  // the tail stays poisoned
    } else if (std::isinf(ref_lse[i]) || std::isinf(lse[i])) {
      lse_bad += lse[i] != ref_lse[i];
    } else {
      const double diff = std::fabs(double(lse[i]) - ref_lse[i]);
      worst_lse = std::max(worst_lse, diff);
      lse_bad += !(diff <= 1e-2 + 1e-3 * std::fabs(ref_lse[i]));
    }
  }
  if (!(err <= 1e-2 && worst <= 5e-2)) ok = false, why += " out differs from the reference;";
  if (outside) ok = false, why += " " + std::to_string(outside) + " writes outside out;";
  if (nonzero_empty) ok = false, why += " " + std::to_string(nonzero_empty) + " non-zero values in rows with no key;";
  if (lse_bad) ok = false, why += " " + std::to_string(lse_bad) + " bad LSE values;";
  std::printf("prefill %-10s %s b%d sq%-4d sk%-4d h%d/%d d%-3d %-6s %-6s rel_err %.2e max_abs %.2e lse %.1e  %s%s\n",
              kernel == PrefillKernel::kWarpSpecialized ? "tc-ws" : "tc-cpasync", c.fp16 ? "fp16" : "bf16", c.b, c.sq,
              c.sk, c.hq, c.hkv, c.d, c.causal ? "causal" : "", c.padded ? "padded" : "", err, worst, worst_lse,
              ok ? "PASS" : "FAIL:", why.c_str());
  for (void* ptr : device) cudaFree(ptr);
  return ok;
}

// small: one case per prefill kernel (compute-sanitizer runs take minutes per case otherwise).
static int prefill_kernels_sweep(bool small = false) {
  // clang-format off
  const WsCase cases[] = {
      // tails (Sq, Sk not tile multiples), Sq != Sk under the causal mask (Sq > Sk: rows with no key),
      // GQA, batch > 1, one query, one key, no keys, a single partial tile, several full ones
      {1, 1, 1, 1, 1, 128, false, false, false},   {2, 130, 257, 8, 2, 64, true, false, false},
      {1, 300, 200, 4, 4, 128, true, false, false}, {3, 77, 1000, 6, 3, 128, false, true, false},
      {1, 517, 517, 2, 2, 256, true, false, false}, {2, 200, 128, 4, 1, 64, true, true, true},
      {1, 1000, 1024, 2, 2, 128, false, false, true}, {2, 1, 100, 8, 2, 256, true, true, false},
      {1, 64, 0, 2, 1, 128, false, false, false},   {2, 193, 300, 3, 1, 256, false, false, false},
      {1, 250, 250, 4, 2, 64, false, true, false},  {1, 129, 700, 2, 1, 256, true, true, true},
      {1, 400, 80, 2, 2, 256, true, false, false},  {2, 192, 192, 2, 2, 64, true, false, false},
  };
  // clang-format on
  int failures = 0;
  for (const WsCase& c : cases) {
    if (small && &c != &cases[1]) continue;  // GQA, batch 2, tails, causal with Sq != Sk
    for (PrefillKernel kernel : {PrefillKernel::kWarpSpecialized, PrefillKernel::kCpAsync}) {
      const std::string label = std::string("prefill ") +
                                (kernel == PrefillKernel::kWarpSpecialized ? "tc-ws" : "tc-cpasync") + " d" +
                                std::to_string(c.d) + " sq" + std::to_string(c.sq) + " sk" + std::to_string(c.sk);
      failures += !kernels::test::run_guarded(label.c_str(), [&] {
        return c.fp16 ? run_ws_case<__half>(c, kernel) : run_ws_case<__nv_bfloat16>(c, kernel);
      });
    }
  }
  return failures;
}

// ---- prefill tile configurations (bench mode) --------------------------------------------

struct Variant {
  std::string name;
  std::string tiles;  // e.g. "w4 m32 n64 s2 split packP"
  int block_m;
  bool paged;  // the paged-KV / packed-Q instantiation exists
  void (*launch)(const AttnParams&, cudaStream_t);
  const void* dense_kernel;  // for the register / local-memory / occupancy report
  int smem_bytes;
  int threads;
  bool masks = true;  // takes boolean masks (the warp-specialized kernel does not)
};

// kPaged = false leaves the paged instantiation out of this test: ptxas spills a few bytes
// in the paged kBlockN = 64 kernels with two stages, and CI rejects spills in csrc/ units.
template <class Cfg, bool kPaged>
void launch_variant(const AttnParams& p, cudaStream_t stream) {
  if (p.page_table == nullptr) {
    launch_prefill<Cfg, AttnImpl::kTensorCore, DenseQ, ContiguousKV>(p, stream);
  } else if constexpr (kPaged) {
    launch_prefill<Cfg, AttnImpl::kTensorCore, PackedQ, PagedKV>(p, stream);
  } else {
    throw kernels::ValueError("attn_test: paged KV is not instantiated for this variant");
  }
}

template <class Cfg, bool kPaged = true>
Variant make_variant(const char* name) {
  using T = PrefillTraits<Cfg>;
  std::string tiles = "w" + std::to_string(Cfg::kWarps) + " m" + std::to_string(T::kBlockM) + " n" +
                      std::to_string(Cfg::kBlockN) + " s" + std::to_string(Cfg::kStages);
  if (Cfg::kSplitKV) tiles += " split";
  if (Cfg::kPackP) tiles += " packP";
  if (Cfg::kLongestFirst) tiles += " LF";
  if (Cfg::kMinBlocks > 1) tiles += " 2cta";
  if (Cfg::kLazyRescale) tiles += " lazy";
  if (Cfg::kWgmma) tiles += " wgmma";
  if (Cfg::kSoftmaxOverlap) tiles += " smx-ovlp";
  return {name,
          tiles,
          T::kBlockM,
          kPaged,
          &launch_variant<Cfg, kPaged>,
          reinterpret_cast<const void*>(&attn_prefill_kernel<Cfg, AttnImpl::kTensorCore, DenseQ, ContiguousKV, bf16>),
          T::kSmemBytes,
          T::kThreads};
}

// The warp-specialized kernel (prefill_ws_sm90.cuh): dense Q, contiguous KV, no masks.
template <class Cfg>
Variant make_ws_variant(const char* name) {
  using T = PrefillWsTraits<Cfg>;
  const std::string tiles = "ws wg" + std::to_string(T::kConsumerWarpgroups) + " m" + std::to_string(T::kBlockM) +
                            " n" + std::to_string(T::kBlockN) + " s" + std::to_string(T::kStages) + " tma" +
                            (Cfg::kL2Sections ? " l2" : "") + (Cfg::kPinPvWait ? " pin" : "") +
                            (Cfg::kPvWaitAfterRowScale ? " rowscale" : "") + (Cfg::kDescendingKv ? " desc" : "") +
                            (Cfg::kPackBeforeRescale ? " pack1st" : "") + (Cfg::kBranchlessRescale ? " eager" : "");
  Variant v{name,
            tiles,
            T::kBlockM,
            false,
            &launch_prefill_ws<Cfg, bf16>,
            reinterpret_cast<const void*>(&attn_prefill_ws_kernel<Cfg, bf16, false>),
            T::kSmemBytes,
            T::kThreads};
  v.masks = false;
  return v;
}

template <int kD>
static std::vector<Variant> prefill_variants() {
  using V = PrefillVariants<kD>;
  using Ws = PrefillWsVariants<kD>;
  if constexpr (kD == 64) {
    // The mma.sync default against the Hopper ones: cp.async WGMMA, warp-specialized.
    return {make_variant<typename V::Default>("default"),
            make_variant<typename V::Sm90>("sm90"),
            make_ws_variant<PrefillWsConfig<kD>>("ws"),
            make_ws_variant<typename Ws::Wg2>("ws_wg2"),
            make_ws_variant<typename Ws::Stages3>("ws_s3"),
            make_ws_variant<typename Ws::Ascending>("ws_asc"),
            make_ws_variant<typename Ws::RescaleFirst>("ws_rescale_first"),
            make_ws_variant<typename Ws::Branchless>("ws_branchless")};
  } else if constexpr (kD == 256) {
    return {
        make_variant<typename V::Default>("default"),        make_variant<typename V::Sm90>("sm90"),
        make_ws_variant<PrefillWsConfig<kD>>("ws"),          make_ws_variant<typename Ws::N64>("ws_n64"),
        make_ws_variant<typename Ws::Descending>("ws_desc"), make_ws_variant<typename Ws::PackFirst>("ws_pack_first")};
  } else {
    using W = PrefillVariants<128>;  // every tile configuration, at D = 128 only
    return {make_variant<W::Default>("default"),
            make_variant<W::N32>("n32"),
            make_variant<W::N32LF>("n32_lf"),
            make_variant<W::N32Lazy>("n32_lazy"),
            make_variant<W::N64, false>("n64"),
            make_variant<W::N64PackP, false>("n64_packp"),
            make_variant<W::N64Split, false>("n64_split"),
            make_variant<W::N64Split1>("n64_split1"),
            make_variant<W::N64SplitPackPLF, false>("n64_split_packp_lf"),
            make_variant<W::N64Split1LF>("n64_split1_lf"),
            make_variant<W::W8N64, false>("w8_n64"),
            make_variant<W::W8M1N64, false>("w8_m1_n64"),
            make_variant<W::Sm90>("sm90"),
            make_variant<W::WgSoftmaxOverlap3>("wg_smx3"),
            make_variant<W::Wg>("wg"),
            make_variant<W::WgN64>("wg_n64"),
            make_ws_variant<PrefillWsConfig<128>>("ws"),
            make_ws_variant<PrefillWsVariants<128>::Stages3>("ws_s3"),
            make_ws_variant<PrefillWsVariants<128>::NoL2>("ws_nol2"),
            make_ws_variant<PrefillWsVariants<128>::Pin>("ws_pin"),
            make_ws_variant<PrefillWsVariants<128>::EarlyPvWait>("ws_early_pv"),
            make_ws_variant<PrefillWsVariants<128>::RescaleFirst>("ws_rescale_first"),
            make_ws_variant<PrefillWsVariants<128>::Branchless>("ws_branchless"),
            make_ws_variant<PrefillWsVariants<128>::Ascending>("ws_asc")};
  }
}

// One prefill problem with device inputs: dense q [B, Sq, Hq, D] on contiguous KV, or packed
// ragged q on a shuffled paged cache holding the same keys; optional boolean mask.
struct PrefillProblem {
  std::vector<int> q_lens, k_lens;
  int hq, hkv, d;
  bool causal;
  int page_size;  // 0: dense Q, contiguous KV
  int mask_kind;  // 0: none, 1: [B, Sk], 2: [B, Sq, Sk]
};

struct PrefillRun {
  PrefillProblem pr;
  AttnParams p;
  long out_elems = 0, lse_elems = 0;
  std::vector<__nv_bfloat16> q, k, v;  // host copies (k, v contiguous [B, max_k, Hkv, D])
  std::vector<void*> device;           // everything to free

  template <class T>
  T* upload(const std::vector<T>& host) {
    T* ptr = kernels::test::to_device(host);
    device.push_back(ptr);
    return ptr;
  }
  template <class T>
  T* alloc(long n) {
    T* ptr = nullptr;
    KERNELS_CUDA_CHECK(cudaMalloc(&ptr, std::max<long>(n, 1) * sizeof(T)));
    device.push_back(ptr);
    return ptr;
  }
  ~PrefillRun() {
    for (void* ptr : device) cudaFree(ptr);
  }
};

static void setup_prefill(PrefillRun& r, const PrefillProblem& pr, int block_m_for_schedule) {
  r.pr = pr;
  const int b = int(pr.k_lens.size());
  const int max_q = *std::max_element(pr.q_lens.begin(), pr.q_lens.end());
  const int max_k = *std::max_element(pr.k_lens.begin(), pr.k_lens.end());
  const bool paged = pr.page_size > 0;
  std::vector<int> cu(b + 1, 0);
  for (int i = 0; i < b; ++i) cu[i + 1] = cu[i] + (paged ? pr.q_lens[i] : max_q);
  const long row = long(pr.hq) * pr.d, kv_row = long(pr.hkv) * pr.d;
  r.q = kernels::test::random_bf16(cu[b] * row, 21);
  r.k = kernels::test::random_bf16(long(b) * max_k * kv_row, 22);
  r.v = kernels::test::random_bf16(long(b) * max_k * kv_row, 23);
  r.out_elems = cu[b] * row;
  r.lse_elems = long(cu[b]) * pr.hq;

  AttnParams& p = r.p;
  p.q = r.upload(r.q);
  p.o = r.alloc<__nv_bfloat16>(r.out_elems);
  p.lse = r.alloc<float>(r.lse_elems);
  p.q_token_stride = p.o_token_stride = row;
  p.q_head_stride = p.o_head_stride = pr.d;
  p.k_head_stride = p.v_head_stride = pr.d;
  p.k_token_stride = p.v_token_stride = kv_row;
  p.batch = b;
  p.seqlen_q = max_q;
  p.heads_q = pr.hq;
  p.heads_kv = pr.hkv;
  p.head_dim = pr.d;
  p.group = pr.hq / pr.hkv;
  const double scale = 1.0 / std::sqrt(double(pr.d));
  p.scale = float(scale);
  p.scale_log2 = float(scale * 1.4426950408889634);
  p.causal = pr.causal;
  if (!paged) {
    p.k = r.upload(r.k);
    p.v = r.upload(r.v);
    p.seqlen_k = max_k;
    p.q_batch_stride = p.o_batch_stride = long(max_q) * row;
    p.k_block_stride = p.v_block_stride = long(max_k) * kv_row;
    p.lse_batch_stride = long(pr.hq) * max_q;
    p.lse_head_stride = max_q;
    p.lse_token_stride = 1;
  } else {
    const int max_pages = (max_k + pr.page_size - 1) / pr.page_size;
    const int num_pages = b * max_pages + 3;
    std::vector<int> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(pr.page_size));
    std::vector<int> table(perm.begin(), perm.begin() + long(b) * max_pages);
    std::vector<__nv_bfloat16> k_cache(long(num_pages) * pr.page_size * kv_row), v_cache(k_cache.size());
    for (int bi = 0; bi < b; ++bi)
      for (int j = 0; j < pr.k_lens[bi]; ++j) {
        const long dst = (long(table[bi * max_pages + j / pr.page_size]) * pr.page_size + j % pr.page_size) * kv_row;
        const long src = (long(bi) * max_k + j) * kv_row;
        std::copy_n(r.k.begin() + src, kv_row, k_cache.begin() + dst);
        std::copy_n(r.v.begin() + src, kv_row, v_cache.begin() + dst);
      }
    p.k = r.upload(k_cache);
    p.v = r.upload(v_cache);
    p.k_block_stride = p.v_block_stride = long(pr.page_size) * kv_row;
    p.page_table = r.upload(table);
    p.page_table_batch_stride = max_pages;
    p.seqlens_k = r.upload(pr.k_lens);
    p.page_size = pr.page_size;
    p.max_pages = max_pages;
    p.cu_seqlens_q = r.upload(cu);
    const auto schedule = make_packed_q_schedule(cu.data(), b, p.group, block_m_for_schedule);
    p.q_schedule = r.upload(schedule);
    p.num_q_tiles = int(schedule.size() / 2);
    p.lse_head_stride = cu[b];
    p.lse_token_stride = 1;
  }
  if (pr.mask_kind != 0) {
    const long per_batch = pr.mask_kind == 2 ? long(max_q) * max_k : max_k;
    std::vector<uint8_t> mask(b * per_batch);
    std::mt19937 rng(7);
    for (auto& m : mask) m = (rng() % 5) != 0;  // keep 80%
    p.mask = reinterpret_cast<const bool*>(r.upload(mask));
    p.mask_batch_stride = per_batch;
    p.mask_q_stride = pr.mask_kind == 2 ? max_k : 0;
    p.mask_len = max_k;
  }
}

// CPU reference of an unmasked problem, in the output's (dense or packed) layout.
static std::vector<float> prefill_reference(const PrefillRun& r) {
  const PrefillProblem& pr = r.pr;
  const int b = int(pr.k_lens.size());
  const int max_k = *std::max_element(pr.k_lens.begin(), pr.k_lens.end());
  const long row = long(pr.hq) * pr.d, kv_row = long(pr.hkv) * pr.d;
  std::vector<float> ref(r.out_elems);
  long q_off = 0;
  for (int bi = 0; bi < b; ++bi) {
    const int q_len = pr.page_size > 0 ? pr.q_lens[bi] : r.p.seqlen_q;
    kernels::test::reference_one_batch(r.q.data() + q_off * row, r.k.data() + long(bi) * max_k * kv_row,
                                       r.v.data() + long(bi) * max_k * kv_row, ref.data() + q_off * row, q_len,
                                       pr.k_lens[bi], pr.hq, pr.hkv, pr.d, pr.causal, 1.0 / std::sqrt(double(pr.d)),
                                       row, kv_row, row);
    q_off += q_len;
  }
  return ref;
}

static std::vector<__nv_bfloat16> run_and_fetch(const Variant& v, const AttnParams& p, long out_elems,
                                                std::vector<float>* lse = nullptr) {
  KERNELS_CUDA_CHECK(cudaMemset(p.o, 0xff, out_elems * 2));  // NaN poison
  v.launch(p, nullptr);
  KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> out(out_elems);
  KERNELS_CUDA_CHECK(cudaMemcpy(out.data(), p.o, out_elems * 2, cudaMemcpyDeviceToHost));
  if (lse != nullptr) {
    lse->resize(size_t(out_elems / p.head_dim));
    KERNELS_CUDA_CHECK(cudaMemcpy(lse->data(), p.lse, lse->size() * 4, cudaMemcpyDeviceToHost));
  }
  return out;
}

static double max_abs_diff(const std::vector<__nv_bfloat16>& out, const std::vector<float>& ref) {
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(double(__bfloat162float(out[i])) - ref[i]);
    if (std::isnan(d)) return NAN;
    worst = std::max(worst, d);
  }
  return worst;
}

// LSE agreement (same -inf rows, finite values within tol).
static bool lse_match(const std::vector<float>& a, const std::vector<float>& b, double tol) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i]) return false;
    } else if (!(std::fabs(a[i] - b[i]) <= tol)) {
      return false;
    }
  }
  return true;
}

static std::vector<float> to_float(const std::vector<__nv_bfloat16>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = __bfloat162float(x[i]);
  return y;
}

// A variant is right on a small problem when it matches the CPU reference (unmasked) or the
// default configuration's output and LSE (masked: the CPU reference has no masks).
// cpu_ref caches the CPU reference of this problem across variants (inputs are seeded).
static bool check_variant(const Variant& v, const Variant& baseline, const PrefillProblem& pr, const char* what,
                          std::vector<float>& cpu_ref) {
  PrefillRun r;
  setup_prefill(r, pr, v.block_m);
  std::vector<float> ref, ref_lse, lse;
  const char* against = "cpu";
  if (pr.mask_kind == 0) {
    if (cpu_ref.empty()) cpu_ref = prefill_reference(r);
    ref = cpu_ref;
  } else {
    // The baseline's packed schedule must use its own block_m.
    PrefillRun rb;
    setup_prefill(rb, pr, baseline.block_m);
    ref = to_float(run_and_fetch(baseline, rb.p, rb.out_elems, &ref_lse));
    against = baseline.name.c_str();
  }
  const auto out = run_and_fetch(v, r.p, r.out_elems, &lse);
  const double err = kernels::test::rel_err(out, ref), worst = max_abs_diff(out, ref);
  const bool lse_ok = ref_lse.empty() || lse_match(lse, ref_lse, 1e-3);
  const bool ok = err <= 1e-2 && worst <= 5e-2 && lse_ok;
  if (!ok) {
    std::printf("  %-13s %-34s vs %-8s rel_err %.2e  max_abs %.2e  lse %s  FAIL\n", v.name.c_str(), what, against, err,
                worst, lse_ok ? "ok" : "MISMATCH");
  }
  return ok;
}

// `only`: comma-separated variant names to keep (empty: all); the first variant, the
// reference of the others, always stays.
template <int kD>
static int bench_head_dim(const std::string& only) {
  auto variants = prefill_variants<kD>();
  if (!only.empty()) {
    const std::string list = "," + only + ",";
    variants.erase(std::remove_if(variants.begin() + 1, variants.end(),
                                  [&](const Variant& v) { return list.find("," + v.name + ",") == std::string::npos; }),
                   variants.end());
  }
  const Variant& baseline = variants[0];
  int failures = 0;

  // Correctness of every variant: tails, GQA, causal with Sq != Sk (rows that see no key),
  // masks, paged KV with packed ragged Q (page sizes below and above kBlockN).
  struct Check {
    const char* what;
    PrefillProblem pr;
  };
  const Check checks[] = {
      {"dense sq200 sk300 h8/2 causal", {{200}, {300}, 8, 2, kD, true, 0, 0}},
      {"dense b2 sq300 sk200 h4/4 causal", {{300, 300}, {200, 200}, 4, 4, kD, true, 0, 0}},
      {"dense b2 sq130 sk257 h8/1", {{130, 130}, {257, 257}, 8, 1, kD, false, 0, 0}},
      {"dense sq517 sk517 h2/2 causal", {{517}, {517}, 2, 2, kD, true, 0, 0}},
      {"dense sq200 sk300 h8/2 causal mask[B,Sq,Sk]", {{200}, {300}, 8, 2, kD, true, 0, 2}},
      {"dense b2 sq100 sk333 h4/2 mask[B,Sk]", {{100, 100}, {333, 333}, 4, 2, kD, false, 0, 1}},
      {"paged16 q70/10/130 k90/10/400 h16/2 causal", {{70, 10, 130}, {90, 10, 400}, 16, 2, kD, true, 16, 0}},
      {"paged64 q70/10/130 k90/10/400 h16/2", {{70, 10, 130}, {90, 10, 400}, 16, 2, kD, false, 64, 0}},
      {"paged256 q33/5 k33/200 h8/8 causal", {{33, 5}, {33, 200}, 8, 8, kD, true, 256, 0}},
      {"paged1 q40/7 k300/9 h8/4 causal", {{40, 7}, {300, 9}, 8, 4, kD, true, 1, 0}},
  };
  std::printf("prefill variants (d%d, tensor cores): correctness on %zu small problems each\n", kD,
              sizeof(checks) / sizeof(checks[0]));
  std::printf("  %-13s %-32s %5s %6s %8s %7s %s\n", "variant", "tiles", "regs", "local", "smem", "ctas/sm", "checks");
  std::vector<std::vector<float>> cpu_refs(sizeof(checks) / sizeof(checks[0]));
  for (const Variant& v : variants) {
    cudaFuncAttributes attr{};
    KERNELS_CUDA_CHECK(cudaFuncGetAttributes(&attr, v.dense_kernel));
    // Occupancy needs the dynamic shared memory opt-in, which the first launch makes.
    int passed = 0, total = 0, skipped = 0;
    for (size_t ci = 0; ci < cpu_refs.size(); ++ci) {
      const Check& c = checks[ci];
      if ((c.pr.page_size > 0 && !v.paged) || (c.pr.mask_kind != 0 && !v.masks)) {
        ++skipped;
        continue;
      }
      ++total;
      const std::string label = v.name + " " + c.what;
      passed += kernels::test::run_guarded(label.c_str(),
                                           [&] { return check_variant(v, baseline, c.pr, c.what, cpu_refs[ci]); });
    }
    int ctas = 0;
    KERNELS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, v.dense_kernel, v.threads, v.smem_bytes));
    std::printf("  %-13s %-32s %5d %6zu %8d %7d %d/%d %s%s\n", v.name.c_str(), v.tiles.c_str(), attr.numRegs,
                attr.localSizeBytes, v.smem_bytes, ctas, passed, total, passed == total ? "PASS" : "FAIL",
                skipped ? (v.masks ? " (paged not built)" : " (no paged KV, no masks)") : "");
    failures += total - passed;
  }

  // Timing on the benchmark shapes; each output is checked against the default's.
  struct Shape {
    const char* label;
    PrefillProblem pr;
  };
  // The same FLOPs at every head_dim: 2048 / kD query heads.
  const int heads = 16 * 128 / kD;
  const std::string d = " d" + std::to_string(kD);
  // The last two: one 16k sequence, the profile suite's shape (tools/ncu.py default_problem).
  const std::string labels[] = {
      "b4 s4096 h" + std::to_string(heads) + d, "b4 s4096 h" + std::to_string(heads) + d + " causal",
      "b4 s4096 h" + std::to_string(2 * heads) + "/" + std::to_string(heads / 2) + d,
      "b1 s16384 h" + std::to_string(heads) + d, "b1 s16384 h" + std::to_string(heads) + d + " causal"};
  const Shape shapes[] = {
      {labels[0].c_str(), {std::vector<int>(4, 4096), std::vector<int>(4, 4096), heads, heads, kD, false, 0, 0}},
      {labels[1].c_str(), {std::vector<int>(4, 4096), std::vector<int>(4, 4096), heads, heads, kD, true, 0, 0}},
      {labels[2].c_str(),
       {std::vector<int>(4, 4096), std::vector<int>(4, 4096), 2 * heads, heads / 2, kD, false, 0, 0}},
      {labels[3].c_str(), {{16384}, {16384}, heads, heads, kD, false, 0, 0}},
      {labels[4].c_str(), {{16384}, {16384}, heads, heads, kD, true, 0, 0}},
  };
  std::vector<std::vector<double>> tflops(variants.size());
  for (const Shape& sh : shapes) {
    PrefillRun r;
    setup_prefill(r, sh.pr, baseline.block_m);
    const PrefillProblem& pr = sh.pr;
    double pairs = 0;
    const int sq = pr.q_lens[0], sk = pr.k_lens[0];
    for (int i = 0; i < sq; ++i) pairs += pr.causal ? std::clamp(i + sk - sq + 1, 0, sk) : sk;
    const double flops = 4.0 * pr.d * pr.q_lens.size() * pr.hq * pairs;
    std::vector<float> base_lse;
    const auto base = to_float(run_and_fetch(baseline, r.p, r.out_elems, &base_lse));
    for (size_t vi = 0; vi < variants.size(); ++vi) {
      const Variant& v = variants[vi];
      double value = -1;
      const std::string label = v.name + " " + sh.label;
      const bool ok = kernels::test::run_guarded(label.c_str(), [&] {
        std::vector<float> lse;
        const auto out = run_and_fetch(v, r.p, r.out_elems, &lse);
        const double err = kernels::test::rel_err(out, base);
        if (!(err <= 1e-2) || !lse_match(lse, base_lse, 1e-3)) {
          std::printf("  %-13s %-26s differs from default: rel_err %.2e  FAIL\n", v.name.c_str(), sh.label, err);
          return false;
        }
        const float ms = kernels::test::time_ms([&] { v.launch(r.p, nullptr); });
        value = flops / (ms * 1e-3) / 1e12;
        return true;
      });
      failures += !ok;
      tflops[vi].push_back(value);
    }
  }
  std::printf("\nTFLOP/s (sustained median, as the Python harness; -1 = failed)\n  %-13s %-32s", "variant", "tiles");
  for (const Shape& sh : shapes) std::printf(" %26s", sh.label);
  std::printf("\n");
  for (size_t vi = 0; vi < variants.size(); ++vi) {
    std::printf("  %-13s %-32s", variants[vi].name.c_str(), variants[vi].tiles.c_str());
    for (double t : tflops[vi]) std::printf(" %26.1f", t);
    std::printf("\n");
  }
  return failures;
}

// `attn_test bench [64|128|256|0 [variant,variant,...]]`: one head_dim or all three (0), every
// variant or the named ones (beside the first, the reference).
static int bench_main(int head_dim, const std::string& only) {
  int failures = 0;
  if (head_dim == 0 || head_dim == 128) failures += bench_head_dim<128>(only);
  if (head_dim == 0 || head_dim == 64) failures += bench_head_dim<64>(only);
  if (head_dim == 0 || head_dim == 256) failures += bench_head_dim<256>(only);
  std::printf("attn_test bench: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every finished case reaches the log
  if (argc > 1 && std::strcmp(argv[1], "bench") == 0)
    return bench_main(argc > 2 ? std::atoi(argv[2]) : 0, argc > 3 ? argv[3] : "");
  // `attn_test small`: one small case per kernel (decode and its combine, both tensor-core
  // prefills, the scalar paths), for compute-sanitizer memcheck / racecheck.
  const bool small = argc > 1 && std::strcmp(argv[1], "small") == 0;
    // Small shapes check every head_dim, GQA and tails against the CPU reference; the last
    // rows are the benchmark shapes (their CPU reference takes a few seconds).
    // clang-format off
    const Case cases[] = {
        {"decode", 2, 1, 1000, 32, 8, 64, false},   {"decode", 2, 1, 1000, 32, 8, 128, false},
        {"decode", 2, 3, 777, 8, 1, 256, true},     {"decode", 1, 1, 4096, 32, 8, 128, false},
        {"prefill", 2, 130, 257, 8, 2, 64, true},   {"prefill", 1, 200, 200, 4, 4, 128, false},
        {"prefill", 1, 200, 300, 8, 2, 128, true},  {"prefill", 1, 97, 130, 4, 1, 256, true},
        {"prefill", 1, 1024, 1024, 4, 4, 128, false},
    };
  // clang-format on
  int failures = 0;
  for (const Case& c : cases) {
    if (small && &c != &cases[1] && &c != &cases[6]) continue;  // decode d128 (split), prefill d128 GQA causal
    for (AttnImpl impl : {AttnImpl::kTensorCore, AttnImpl::kScalar}) {
      const std::string label = std::string(c.kind) + (impl == AttnImpl::kTensorCore ? " tc" : " scalar") + " d" +
                                std::to_string(c.d) + " sq" + std::to_string(c.sq) + " sk" + std::to_string(c.sk);
      failures += !kernels::test::run_guarded(label.c_str(), [&] { return run_case(c, impl); });
    }
  }
  failures += prefill_kernels_sweep(small);
  std::printf("attn_test: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
