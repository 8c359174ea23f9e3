// Host-only checks of the attention launch math, no GPU needed, so the CPU CI runs them
// (tests/test_csrc_compile.py):
//   - the decode split heuristic (decode_num_splits) picks the best measured splits of the H200
//     sweeps its cost model was fitted to (attn_decode.cu), on 132 SMs;
//   - FastDivmod (the paged-KV page index) equals integer division for every page size 1..256
//     and dividends across [0, 2^31);
//   - the error model: host rejections throw the types of common/errors.h (an e4m3 KV cache
//     outside the tensor-core paged decode among them), and the e4m3 decode's shared memory;
//   - which calls the warp-specialized Hopper prefill takes (prefill_ws_unsupported), and its
//     grid order (prefill_ws_tile: every tile once, L2 sections) and section sizes;
//   - the WGMMA descriptor step (sw128_desc_advance) against descriptors built from addresses;
//   - the decode's swizzled tile rows (RowSwizzledTile): a permutation of each row's chunks
//     that keeps a 128-byte line of a global row in one 128-byte segment and the 8 rows of an
//     ldmatrix in 8 bank groups.
//   python -m tools.nvcc csrc/tests/attn_host_test.cu csrc/kernels/attention/attn_decode.cu \
//       && build/csrc-tests/attn_host_test
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include <type_traits>

#include "../kernels/attention/attn_api.h"
#include "../kernels/attention/prefill_ws_sm90.cuh"
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
  // An e4m3 KV cache: the tensor-core paged decode only, refused before any launch elsewhere.
  attn::AttnParams e4m3 = p;
  e4m3.num_splits = e4m3.batch = e4m3.seqlen_q = e4m3.heads_q = e4m3.heads_kv = e4m3.group = 1;
  e4m3.head_dim = 128;
  e4m3.kv_dtype = attn::KvDtype::kE4M3;
  failures += !rejects<ValueError>(
      "e4m3 contiguous KV", [&] { attn::run_decode(e4m3, attn::AttnImpl::kTensorCore, nullptr); },
      "decode: an e4m3 KV cache runs on the tensor-core paged decode");
  static const int page_table[1] = {0};
  e4m3.page_table = page_table;
  failures += !rejects<ValueError>(
      "e4m3 scalar", [&] { attn::run_decode(e4m3, attn::AttnImpl::kScalar, nullptr); },
      "decode: an e4m3 KV cache runs on the tensor-core paged decode");
  failures += !rejects<ValueError>(
      "e4m3 without scales", [&] { attn::run_decode(e4m3, attn::AttnImpl::kTensorCore, nullptr); },
      "decode: e4m3 K / V need k_scale and v_scale");
  failures += !rejects<kernels::CudaError>(
      "CUDA error", [] { kernels::check_cuda_error(cudaErrorInvalidValue, "cudaMemcpy"); }, "cudaMemcpy failed: ");
  failures += !rejects<kernels::CudaError>(
      "launch error", [] { kernels::check_launch("k", cudaErrorInvalidValue); }, "k launch failed: ");
  failures += !rejects<kernels::CudaError>(
      "CUDA call error", [] { KERNELS_CUDA_CHECK(cudaErrorInvalidValue); }, "cudaErrorInvalidValue at ");
  return failures;
}

// The warp-specialized prefill takes dense Q on contiguous KV without a mask, with strides and
// pointers TMA can address; anything else goes to the cp.async kernel (or, asked for by name,
// raises with the reason checked here).
static int check_prefill_ws_applicability() {
  namespace attn = kernels::attention;
  alignas(16) static char buffer[64];
  attn::AttnParams base;
  base.q = base.k = base.v = base.o = buffer;
  base.batch = 2, base.seqlen_q = 300, base.seqlen_k = 200, base.heads_q = 8, base.heads_kv = 2, base.group = 4;
  base.head_dim = 128;
  base.q_batch_stride = base.o_batch_stride = 300 * 8 * 128;
  base.q_token_stride = base.o_token_stride = 8 * 128;
  base.q_head_stride = base.o_head_stride = 128;
  base.k_block_stride = base.v_block_stride = 200 * 2 * 128;
  base.k_token_stride = base.v_token_stride = 2 * 128;
  base.k_head_stride = base.v_head_stride = 128;
  struct Case {
    const char* what;
    void (*edit)(attn::AttnParams&);
    const char* reason;  // nullptr: taken
  };
  static int page_table[1], cu[2];
  static bool mask[1];
  // Packed Q on pages of 16 (the kernel finds its tiles from cu_seqlens_q: no schedule).
  static void (*const paged)(attn::AttnParams&) = [](attn::AttnParams& p) {
    p.page_table = page_table, p.cu_seqlens_q = cu;
    p.total_q = 600, p.num_pages = 40, p.page_size = 16;
    p.q_batch_stride = p.o_batch_stride = 0;
    p.k_block_stride = p.v_block_stride = 16 * 2 * 128;
  };
  const Case cases[] = {
      {"dense", [](attn::AttnParams&) {}, nullptr},
      {"batch 1, any batch stride", [](attn::AttnParams& p) { p.batch = 1, p.q_batch_stride = 3; }, nullptr},
      {"one kv head, any head stride", [](attn::AttnParams& p) { p.heads_kv = 1, p.k_head_stride = 5; }, nullptr},
      {"paged KV, dense Q", [](attn::AttnParams& p) { p.page_table = page_table; }, "packed Q on paged KV"},
      {"paged, pages of 16", paged, nullptr},
      {"paged, pages of 256 (two tiles each)", [](attn::AttnParams& p) { paged(p), p.page_size = 256; }, nullptr},
      {"paged, pages of 48", [](attn::AttnParams& p) { paged(p), p.page_size = 48; }, "page_size must be"},
      {"paged, pages of 8", [](attn::AttnParams& p) { paged(p), p.page_size = 8; }, "page_size must be"},
      {"paged, pages of 64 at D = 256 (80-key tiles)",
       [](attn::AttnParams& p) { paged(p), p.page_size = 64, p.head_dim = 256; }, "page_size must be"},
      {"paged, total_q unset", [](attn::AttnParams& p) { paged(p), p.total_q = 0; }, "total_q and num_pages"},
      {"paged, k page stride 100", [](attn::AttnParams& p) { paged(p), p.k_block_stride = 100; },
       "multiples of 8 elements"},
      {"mask", [](attn::AttnParams& p) { p.mask = mask; }, "no boolean mask"},
      {"head_dim 96", [](attn::AttnParams& p) { p.head_dim = 96; }, "head_dim must be 64, 128 or 256"},
      {"q at 8 bytes", [](attn::AttnParams& p) { p.q = buffer + 8; }, "16-byte aligned"},
      {"out at 2 bytes", [](attn::AttnParams& p) { p.o = buffer + 2; }, "16-byte aligned"},
      {"k token stride 100", [](attn::AttnParams& p) { p.k_token_stride = 100; }, "multiples of 8 elements"},
      {"out head stride 4", [](attn::AttnParams& p) { p.o_head_stride = 4; }, "multiples of 8 elements"},
  };
  int failures = 0;
  for (const Case& c : cases) {
    attn::AttnParams p = base;
    c.edit(p);
    const char* why = attn::prefill_ws_unsupported(p);
    const bool ok = c.reason == nullptr ? why == nullptr : why != nullptr && std::strstr(why, c.reason) != nullptr;
    failures += !ok;
    std::printf("%s prefill_ws_unsupported(%s) -> %s\n", ok ? "PASS" : "FAIL", c.what, why ? why : "takes it");
  }
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

// The warp-specialized prefill's grid order (prefill_ws_tile): every tile exactly once, and
// under the causal mask longest first within each L2 section; the section sizes of the launcher.
static int check_prefill_ws_grid() {
  namespace attn = kernels::attention;
  int failures = 0;
  for (int q_tiles : {1, 2, 7, 32})
    for (int heads : {1, 5, 16})
      for (int batch : {1, 3})
        for (int causal : {0, 1})
          for (int section : {0, 1, 2, 4, 8, 64}) {
            if (section > heads * batch || (section > 0 && !causal)) continue;
            attn::PrefillWsParams p;
            p.q_tiles = q_tiles;
            p.heads_q = heads;
            p.batch = batch;
            p.causal = causal;
            p.l2_section = section;
            std::vector<int> seen(size_t(q_tiles) * heads * batch, 0);
            bool ok = true;
            int previous_section = 0, previous_m = q_tiles;
            for (int idx = 0; idx < q_tiles * heads * batch; ++idx) {
              const attn::PrefillWsTile t = attn::prefill_ws_tile(p, idx);
              ok = ok && t.m_block >= 0 && t.m_block < q_tiles && t.head >= 0 && t.head < heads && t.batch >= 0 &&
                   t.batch < batch;
              if (!ok) break;
              ++seen[(size_t(t.batch) * heads + t.head) * q_tiles + t.m_block];
              if (causal && section > 0) {  // within a section the query tiles never grow
                const int s = (t.batch * heads + t.head) / section;
                ok = ok && (s != previous_section || t.m_block <= previous_m);
                previous_section = s;
                previous_m = t.m_block;
              }
            }
            for (int n : seen) ok = ok && n == 1;
            failures += !ok;
            if (!ok)
              std::printf("FAIL prefill_ws_tile q_tiles %d heads %d batch %d causal %d section %d\n", q_tiles, heads,
                          batch, causal, section);
          }
  // 16k keys, D 128, bf16: 8 MB of K and V per kv head, five fit in 40 MB -> 4 pairs (x group 4 -> 16).
  const struct {
    int64_t seqlen_k;
    int head_dim, group, pairs, want;
  } sections[] = {{16384, 128, 1, 16, 4}, {16384, 128, 4, 32, 16}, {4096, 128, 1, 64, 16},
                  {1024, 64, 1, 3, 2},    {1 << 22, 256, 1, 8, 1}, {0, 128, 1, 8, 8}};
  for (const auto& c : sections) {
    const int got = attn::prefill_ws_l2_section(c.seqlen_k, c.head_dim, 2, c.group, c.pairs);
    if (got != c.want) {
      ++failures;
      std::printf("FAIL prefill_ws_l2_section Sk %lld D %d group %d pairs %d: %d, want %d\n", (long long)c.seqlen_k,
                  c.head_dim, c.group, c.pairs, got, c.want);
    }
  }
  std::printf("warp-specialized prefill grid order and L2 sections: %s\n", failures ? "FAIL" : "PASS");
  return failures;
}

// RowSwizzledTile<kD> over 64 rows: every (row, chunk) its own 16-byte slot inside its row;
// the 8 chunks of one 128-byte line of a global row in one 128-byte-aligned segment; and for
// every 8 consecutive rows from a multiple of 8 (an ldmatrix's rows) at one chunk, 8 different
// 16-byte bank groups (offset in bytes / 16 mod 8).
template <int kD>
static int check_row_swizzle() {
  using Tile = kernels::attention::RowSwizzledTile<kD>;
  constexpr int kRows = 64, kChunks = kD / 8;
  int failures = 0;
  std::vector<int> seen(kRows * kChunks, 0);
  for (int row = 0; row < kRows; ++row) {
    for (int chunk = 0; chunk < kChunks; ++chunk) {
      const int off = Tile::offset(row, chunk);
      const bool in_row = off % 8 == 0 && off / kD == row;
      const bool in_segment = (off % kD) / 64 == chunk / 8;
      failures += !in_row || !in_segment;
      if (in_row) ++seen[off / 8];
    }
  }
  for (int n : seen) failures += n != 1;
  for (int row0 = 0; row0 < kRows; row0 += 8) {
    for (int chunk = 0; chunk < kChunks; ++chunk) {
      unsigned groups = 0;
      for (int r = 0; r < 8; ++r) groups |= 1u << ((Tile::offset(row0 + r, chunk) * 2 / 16) % 8);
      failures += groups != 0xffu;
    }
  }
  // The math's hoisted addressing: a lane at (row < 16, chunk < 2) steps by whole 16-row tiles
  // and even chunk counts, as qk and pv do.
  for (int row = 0; row < 16; ++row) {
    for (int chunk = 0; chunk < 2; ++chunk) {
      for (int dr = 0; dr + row < kRows; dr += 16) {
        for (int dc = 0; dc + chunk < kChunks; dc += 2) {
          const int stepped = kernels::attention::tile_step<Tile>(Tile::offset(row, chunk), dr, dc);
          failures += stepped != Tile::offset(row + dr, chunk + dc);
        }
      }
    }
  }
  std::printf(
      "RowSwizzledTile<%d>: permutation, lines in segments, ldmatrix rows in 8 bank groups, "
      "hoisted steps: %s\n",
      kD, failures ? "FAIL" : "PASS");
  return failures;
}

// WGMMA descriptors stepped by sw128_desc_advance (common/sm90.cuh) equal the ones built
// from the stepped address, for every 16-byte address a CTA's shared memory holds and a
// spread of steps within it.
static int check_desc_advance() {
  int failures = 0;
  constexpr uint32_t kSmemBytes = 227 * 1024;  // the most a CTA may use on sm_90
  for (uint32_t addr = 0; addr < kSmemBytes; addr += 16) {
    for (uint32_t step = 0; addr + step < kSmemBytes; step += 16 * 37) {  // a spread of steps
      failures += kernels::sw128_desc_advance(kernels::make_sw128_kmajor_desc(addr), step) !=
                  kernels::make_sw128_kmajor_desc(addr + step);
      failures += kernels::sw128_desc_advance(kernels::make_sw128_desc(addr, 8192, 1024), step) !=
                  kernels::make_sw128_desc(addr + step, 8192, 1024);
    }
  }
  std::printf("sw128_desc_advance: equals the descriptor of the stepped address: %s\n", failures ? "FAIL" : "PASS");
  return failures != 0;
}

// The e4m3 decode's shared memory (DecodeTraits<E4m3DecodeConfig, 1>): a stage of twice the keys
// holds the 16-bit decode's bytes, the ring sits on the swizzle's 128-byte alignment after Q,
// and the whole fits as many CTAs per SM as the 16-bit decode.
template <int kD>
constexpr bool e4m3_decode_layout_holds() {
  using Bf16 = kernels::attention::DecodeTraits<kernels::attention::DecodeConfig<kD>>;
  using E4m3 = kernels::attention::DecodeTraits<kernels::attention::E4m3DecodeConfig<kD>, 1>;
  return E4m3::kConvertsKv && !Bf16::kConvertsKv && E4m3::kBlockN == 2 * Bf16::kBlockN &&
         E4m3::kRingTileElems == Bf16::kTileElems * 2 && E4m3::kRingOffset % 128 == 0 &&
         E4m3::kPageEntriesOffset - E4m3::kRingOffset == Bf16::kPageEntriesOffset - Bf16::kRingOffset &&
         E4m3::kCtasPerSm == Bf16::kCtasPerSm;
}
static_assert(e4m3_decode_layout_holds<64>() && e4m3_decode_layout_holds<128>() && e4m3_decode_layout_holds<256>(),
              "e4m3 decode layout");

int main() {
  struct Case {
    int batch, heads_kv, seqlen_q, group, max_seqlen_k, head_dim;
    int lo, hi;  // accepted split counts (inclusive)
    bool e4m3_kv = false;
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
      // an e4m3 cache (tiles of 128 keys): the best of 1 / 2 / 4 / 8 / 16 / 32 measured on an H100
      // (graph replay)
      {16, 8, 1, 4, 4096, 128, 1, 1, true},
      {4, 8, 1, 4, 4096, 128, 4, 4, true},
      {1, 8, 1, 4, 4096, 128, 16, 16, true},
      {64, 8, 1, 4, 4096, 128, 1, 1, true},
  };
  int failures = 0;
  for (const Case& c : cases) {
    const int s =
        decode_num_splits(c.batch, c.heads_kv, c.seqlen_q, c.group, c.max_seqlen_k, c.head_dim, kSms, c.e4m3_kv);
    const bool ok = s >= c.lo && s <= c.hi;
    failures += !ok;
    std::printf("B%-3d Hkv%-2d Sq%d group %d Sk %-8d D%-3d%s -> %3d splits (want %d..%d)  %s\n", c.batch, c.heads_kv,
                c.seqlen_q, c.group, c.max_seqlen_k, c.head_dim, c.e4m3_kv ? " e4m3" : "", s, c.lo, c.hi,
                ok ? "PASS" : "FAIL");
  }
  failures += check_fast_divmod();
  failures += check_desc_advance();
  failures += check_row_swizzle<64>() + check_row_swizzle<128>() + check_row_swizzle<256>();
  failures += check_errors();
  failures += check_prefill_ws_applicability();
  failures += check_prefill_ws_grid();
  std::printf("attn_host_test: %d failure(s)\n", failures);
  return failures ? 1 : 0;
}
