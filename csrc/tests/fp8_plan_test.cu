// Host-only test of the FP8 GEMM planner's split-K choices (no GPU, no kernel launched):
//   python -m tools.nvcc csrc/tests/fp8_plan_test.cu && build/csrc-tests/fp8_plan_test
// Checks, on an H200-like device (132 SMs, sm_90a): automatic plans do not split while
// PlannerDefaults::kAutoSplitK is off; the cost model (split_k_model) leaves problems whose
// tiles fill the SMs as with split-K off (the big squares keep their tiles), its splits respect
// PlannerDefaults (k-blocks per split, waves, only when tiles < SMs), and the decode shapes of
// results/h200/fp8.json get the split counts listed below; forced counts are capped at the
// k-blocks and never reach the mma.sync path; split_k_range partitions the k-blocks; the
// workspace size follows the plan; the swap-AB TMA GEMV (Path::kGemvTma) is planned only when
// forced, with its width for M (16 / 32 / 64 / 128), in-cluster split counts, stages and totals
// layout; the launch checks throw the errors of common/errors.h.
// Prints the decode plans and "N failure(s)".
#include <array>
#include <cstdint>
#include <cstdio>
#include <string>

#include "fp8/gemm/plan.cuh"
#include "fp8/gemm/scheduler.cuh"
#include "test_utils.h"

namespace {

using namespace kernels::fp8::gemm;
using kernels::ceil_div;

constexpr int kSms = 132;
int failures = 0;

void expect(bool ok, const char* what, long long m, long long n, long long k) {
  if (!ok) {
    ++failures;
    std::printf("FAIL %s (M=%lld N=%lld K=%lld)\n", what, m, n, k);
  }
}

GemmPlan plan_of(int64_t m, int64_t n, int64_t k, int split_k = 0, int path = -1) {
  PlanRequest req;
  req.split_k = split_k;
  req.force_path = path;
  return plan_gemm(m, n, k, kSms, 9, 0, req);
}

// The plan with the split count of the cost model (split_k_model), whether or not the planner
// applies it on its own (PlannerDefaults::kAutoSplitK).
GemmPlan model_plan(int64_t m, int64_t n, int64_t k) {
  const GemmPlan off = plan_of(m, n, k, 1);
  if (off.path != Path::kWgmma) return off;
  const int splits = split_k_model(m, n, k, off.tiles, off.block_m, off.block_n, kSms);
  return splits > 1 ? plan_of(m, n, k, splits) : off;
}

}  // namespace

int main() {
  const int64_t sizes[] = {1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 11008, 14336, 16384};
  const int64_t depths[] = {16, 128, 272, 1040, 4096, 11008, 14336};
  int split_plans = 0;
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : depths) {
        const GemmPlan automatic = plan_of(m, n, k), off = plan_of(m, n, k, 1);
        // with the model off, only the two slices of one half-wave row of tiles at deep K
        const bool split_two = automatic.path == Path::kWgmma && m <= automatic.block_m &&
                               2 * automatic.tiles <= kSms &&
                               ceil_div<int64_t>(k, 128) >= PlannerDefaults::kSplitTwoMinKBlocks;
        expect(PlannerDefaults::kAutoSplitK || automatic.split_k == (split_two ? 2 : 1),
               "split while kAutoSplitK is off", m, n, k);
        expect((automatic.path == Path::kGemvTma) == GemvTmaPolicy::planner_takes(m, n, k, kSms),
               "the planner's gemv_tma choice is not planner_takes", m, n, k);
        expect(plan_supported(automatic), "unsupported automatic plan", m, n, k);
        const GemmPlan modelled = model_plan(m, n, k);
        const int64_t k_blocks = ceil_div<int64_t>(k, 128);
        expect(off.split_k == 1, "split_k = 1 request splits", m, n, k);
        expect(modelled.block_n == off.block_n && modelled.accum == off.accum && modelled.cluster == off.cluster,
               "split-K changed the tile choice", m, n, k);
        if (modelled.tiles >= kSms) {
          expect(modelled.split_k == 1 && modelled.grid == off.grid && modelled.persistent == off.persistent,
                 "a plan that fills the SMs changed", m, n, k);
        }
        if (modelled.split_k > 1) {
          ++split_plans;
          expect(modelled.tiles < kSms, "split with tiles >= SMs", m, n, k);
          expect(k_blocks / modelled.split_k >= PlannerDefaults::kSplitMinKBlocks, "too few k-blocks per split", m, n,
                 k);
          expect(ceil_div<int64_t>(int64_t(modelled.tiles) * modelled.split_k, kSms) <= PlannerDefaults::kSplitMaxWaves,
                 "too many waves", m, n, k);
          expect(modelled.grid <= kSms || !modelled.persistent, "persistent grid above the SM count", m, n, k);
          expect(gemm_workspace_bytes(modelled, m, n) ==
                     size_t(modelled.split_k) * size_t(m) * size_t((n + 3) / 4 * 4) * sizeof(float),
                 "workspace size", m, n, k);
        } else {
          expect(gemm_workspace_bytes(modelled, m, n) == 0, "workspace without split-K", m, n, k);
        }
        expect(plan_supported(modelled), "unsupported modelled plan", m, n, k);
      }
  expect(split_plans > 0, "the model never splits", 0, 0, 0);

  // The decode shapes of results/h200/fp8.json, and the big squares (unchanged tiles).
  struct Expected {
    int64_t m, n, k;
    int block_n, split_k;
  };
  // clang-format off
  const Expected expected[] = {
      {1, 4096, 4096, 64, 2},     {16, 4096, 4096, 64, 2},    {128, 4096, 4096, 64, 2},
      {1, 4096, 14336, 64, 2},    {1, 11008, 4096, 128, 1},   {1, 11008, 14336, 128, 3},
      {1, 14336, 14336, 128, 1},  {128, 14336, 4096, 128, 1}, {128, 14336, 14336, 128, 1},
      {4096, 4096, 4096, 176, 1}, {8192, 8192, 8192, 192, 1},
  };
  // clang-format on
  for (const Expected& e : expected) {
    const GemmPlan plan = model_plan(e.m, e.n, e.k);
    std::printf(
        "plan M=%-5lld N=%-6lld K=%-6lld bn=%-3d tiles=%-5d split_k=%-2d grid=%-4d persistent=%d workspace=%zu\n",
        (long long)e.m, (long long)e.n, (long long)e.k, plan.block_n, plan.tiles, plan.split_k, plan.grid,
        int(plan.persistent), gemm_workspace_bytes(plan, e.m, e.n));
    expect(plan.block_n == e.block_n && plan.split_k == e.split_k, "decode / square plan", e.m, e.n, e.k);
  }

  // N narrower than the wide tiles: BN 64 (the intensity counts the columns a tile stores; at
  // N = 64 every width gives 64 tiles, and BN 192 wasted two thirds of each).
  for (int64_t n : {16, 64, 96, 100})
    expect(plan_of(8192, n, 4096).block_n == 64, "narrow N takes BN 64", 8192, n, 4096);

  // Forced counts: capped at the k-blocks, ignored by the mma.sync path, 1 k-block never split.
  expect(plan_of(16, 96, 272, 8).split_k == 3, "forced split above the k-blocks is capped", 16, 96, 272);
  expect(plan_of(1, 4096, 4096, 7).split_k == 7, "forced split", 1, 4096, 4096);
  expect(plan_of(1, 4096, 4096, 4, int(Path::kMmaSync)).split_k == 1, "mma.sync split", 1, 4096, 4096);
  expect(plan_of(1, 4096, 128, 4).split_k == 1, "one k-block split", 1, 4096, 128);
  expect(plan_of(1, 4096, 0, 4).split_k == 1, "K = 0 split", 1, 4096, 0);

  // Decode-sized M with B under 16 Mi values: the mma.sync GEMV kernel, one block per
  // GemvPolicy::kColsPerBlock columns, unless the request names a tile choice; M > kMaxRows
  // never, even when forced.
  for (int64_t m : {1, 2, 3, 5, 8, 9, 16}) {
    const GemmPlan gemv = plan_of(m, 4000, 4000);
    expect(gemv.path == Path::kGemv && gemv.block_m == GemvPolicy::kMaxRows &&
               gemv.grid == ceil_div<int64_t>(4000, GemvPolicy::kColsPerBlock) && gemv.split_k == 1 &&
               !gemv.persistent && gemm_workspace_bytes(gemv, m, 4000) == 0 && plan_supported(gemv),
           "GEMV plan", m, 4000, 4000);
  }
  // At K >= GemvLongK::kMinK one n8 tile per block (twice the blocks).
  for (int64_t k : {8192, 11008, 14336}) {
    const GemmPlan gemv = plan_of(16, 1024, k);
    expect(gemv.path == Path::kGemv && gemv.block_n == GemvLongK::kColsPerBlock && gemv.grid == 1024 / 8 &&
               plan_supported(gemv),
           "long-K GEMV plan", 16, 1024, k);
  }
  expect(plan_of(1, 2048, 8191).block_n == GemvPolicy::kColsPerBlock, "GEMV below the long K", 1, 2048, 8191);
  expect(plan_of(1, 4096, 4096, 2).path == Path::kWgmma, "a split-K request keeps the tiles", 1, 4096, 4096);
  expect(plan_gemm(1, 4096, 4096, kSms, 8, 9).path == Path::kGemv, "GEMV on sm_89", 1, 4096, 4096);
  expect(plan_gemm(1, 11008, 11008, kSms, 8, 9).path == Path::kGemv &&
             plan_gemm(32, 4096, 4096, kSms, 8, 9).path == Path::kMmaSync,
         "no gemv_tma off sm_90a", 32, 4096, 4096);
  // The planner's own gemv_tma (GemvTmaPolicy::planner_takes): the LLM shapes the H200 measured.
  struct Auto {
    int64_t m, n, k;
    Path path;
  };
  // clang-format off
  const Auto automatic[] = {
      {1, 4096, 4096, Path::kGemvTma},     {16, 4096, 4096, Path::kGemvTma},    {1, 4096, 8192, Path::kGemvTma},
      {1, 4096, 4080, Path::kGemv},        {16, 2048, 4096, Path::kGemv},
      {1, 4096, 14336, Path::kGemvTma},    {1, 11008, 11008, Path::kGemvTma},   {16, 14336, 4096, Path::kGemvTma},
      {17, 4096, 4096, Path::kGemvTma},    {32, 200, 272, Path::kGemvTma},      {64, 14336, 4096, Path::kGemvTma},
      {65, 4096, 4096, Path::kGemvTma},    {65, 4096, 8192, Path::kGemvTma},    {128, 4096, 11008, Path::kGemvTma},
      {128, 4096, 4096, Path::kGemvTma},   {128, 11008, 4096, Path::kWgmma},    {128, 14336, 14336, Path::kWgmma},
      {128, 8192, 4096, Path::kWgmma},     {129, 4096, 14336, Path::kWgmma},    {65, 14336, 4096, Path::kWgmma},
  };
  // clang-format on
  for (const Auto& e : automatic) {
    const GemmPlan plan = plan_of(e.m, e.n, e.k);
    expect(plan.path == e.path && plan_supported(plan), "the planner's path", e.m, e.n, e.k);
  }
  expect(plan_of(32, 4096, 4096, 1).path == Path::kWgmma, "a tile request keeps the tiles", 32, 4096, 4096);
  // Two K slices with the model off: M = 128, N = 4096 (64 tiles of BN 64) at K >= 4096 only
  // (the tiled path forced: on its own the planner takes gemv_tma there).
  for (int64_t k : {4096, 11008, 14336}) {
    const GemmPlan plan = plan_of(128, 4096, k, 0, int(Path::kWgmma));
    expect(plan.tiles == 64 && plan.split_k == 2 && plan.grid == 128 && plan_supported(plan) &&
               gemm_workspace_bytes(plan, 128, 4096) == size_t(2) * 128 * 4096 * sizeof(float),
           "two K slices", 128, 4096, k);
  }
  expect(plan_of(128, 4096, 3968, 0, int(Path::kWgmma)).split_k == 1 && plan_of(128, 11008, 14336).split_k == 1 &&
             plan_of(129, 4096, 14336).split_k == 1 && plan_of(2048, 4096, 14336).split_k == 1,
         "no split: shallow K, a full wave of tiles, two rows of tiles", 128, 4096, 3968);
  expect(!plan_supported(plan_of(17, 4096, 4096, 0, int(Path::kGemv))), "forced GEMV at M = 17", 17, 4096, 4096);
  // The swap-AB TMA GEMV, forced or chosen: 128 or 64 columns per block (rows: 64 where its
  // tiles, split in pairs, put more blocks to work), M in the narrowest WGMMA n of 16 / 32 / 64 /
  // 128 that holds it (block_m), grid = splits x tiles with splits the largest power of two <= 8
  // that keeps splits x tiles <= 132 and splits <= the k-blocks, whatever the width; its split-K
  // lives in a cluster (split_k 1, no workspace). Ping-pong promotion but at 128 rows x width 128
  // (one partial: registers). M > 128: unsupported.
  struct TmaExpected {
    int64_t m, n, k;
    int rows, tiles, splits, width;
  };
  // clang-format off
  const TmaExpected tma_expected[] = {
      {1, 11008, 11008, 128, 86, 1, 16},  {16, 11008, 11008, 128, 86, 1, 16}, {1, 14336, 4096, 128, 112, 1, 16},
      {1, 4096, 4096, 64, 64, 2, 16},     {16, 4096, 14336, 64, 64, 2, 16},   {1, 2048, 4096, 64, 32, 4, 16},
      {3, 200, 1040, 64, 4, 8, 16},       {8, 200, 272, 64, 4, 2, 16},        {1, 17, 16, 128, 1, 1, 16},
      {16, 4112, 11008, 64, 65, 2, 16},   {1, 8448, 4096, 128, 66, 2, 16},    {1, 8576, 4096, 128, 67, 1, 16},
      {17, 200, 272, 64, 4, 2, 32},       {32, 4096, 4096, 64, 64, 2, 32},    {33, 4112, 4096, 64, 65, 2, 64},
      {64, 4096, 11008, 64, 64, 2, 64},   {65, 14336, 4096, 128, 112, 1, 128}, {100, 200, 4096, 64, 4, 8, 128},
      {128, 4096, 4096, 64, 64, 2, 128},  {128, 4096, 14336, 64, 64, 2, 128}, {128, 11008, 4096, 128, 86, 1, 128},
      {128, 2048, 272, 64, 32, 2, 128},   {128, 8192, 4096, 128, 64, 2, 128},
  };
  // clang-format on
  for (const TmaExpected& e : tma_expected) {
    const GemmPlan plan = plan_of(e.m, e.n, e.k, 0, int(Path::kGemvTma));
    std::printf(
        "plan gemv_tma M=%-3lld N=%-6lld K=%-6lld block_m=%-3d block_n=%-3d %-8s tiles=%-4d grid=%-4d (splits %d)\n",
        (long long)e.m, (long long)e.n, (long long)e.k, plan.block_m, plan.block_n, accum_name(plan.accum), plan.tiles,
        plan.grid, plan.tiles > 0 ? plan.grid / plan.tiles : 0);
    const AccumMode accum = e.width <= 64 || e.rows == 64 ? AccumMode::kPromotePingPong : AccumMode::kPromote;
    expect(plan.path == Path::kGemvTma && plan.block_m == e.width && plan.block_n == e.rows && plan.tiles == e.tiles &&
               plan.grid == e.tiles * e.splits && plan.split_k == 1 && !plan.persistent && plan.accum == accum &&
               plan.promote_every == 1 && gemm_workspace_bytes(plan, e.m, e.n) == 0 && plan_supported(plan),
           "gemv_tma plan", e.m, e.n, e.k);
    expect(GemvTmaPolicy::rows_for(e.n, e.k, kSms) == e.rows, "gemv_tma rows", e.m, e.n, e.k);
    expect(GemvTmaPolicy::splits_for(e.n, e.k, kSms, e.rows) == e.splits, "gemv_tma splits", e.m, e.n, e.k);
    expect(GemvTmaPolicy::width_for(e.m) == e.width, "gemv_tma width", e.m, e.n, e.k);
  }
  for (int64_t m = 1; m <= GemvTmaPolicy::kMaxRows; ++m) {
    const int width = GemvTmaPolicy::width_for(m);
    expect(
        width >= m && (width == 16 || width / 2 < m) && plan_supported(plan_of(m, 4096, 4096, 0, int(Path::kGemvTma))),
        "gemv_tma: the narrowest width that holds M", m, 4096, 4096);
  }
  expect(plan_of(1, 4096, 256, 0, int(Path::kGemvTma)).grid == 64 * 2, "gemv_tma splits capped at the k-blocks", 1,
         4096, 256);
  expect(plan_of(1, 4096, 128, 0, int(Path::kGemvTma)).grid == 64, "gemv_tma: one k-block, 64 tiles of 64 rows", 1,
         4096, 128);
  GemmPlan odd_rows = plan_of(17, 4096, 4096, 0, int(Path::kGemvTma));
  odd_rows.block_n = 96;
  expect(!plan_supported(odd_rows), "gemv_tma with block_n 96 accepted", 17, 4096, 4096);
  expect(plan_of(16, 4096, 4096, 4, int(Path::kGemvTma)).split_k == 1, "gemv_tma takes no split_k", 16, 4096, 4096);
  expect(!plan_supported(plan_of(129, 4096, 4096, 0, int(Path::kGemvTma))), "forced gemv_tma at M = 129", 129, 4096,
         4096);
  GemmPlan odd_width = plan_of(17, 4096, 4096, 0, int(Path::kGemvTma));
  odd_width.block_m = 48;
  expect(!plan_supported(odd_width), "gemv_tma with block_m 48 accepted", 17, 4096, 4096);
  // Stages from the shared memory left beside the fp32 totals (kBN x kBM floats), up to 16: 18 / 20
  // / 24 / 32 KiB stages at 128 rows, 10 / 12 / 16 / 24 KiB at 64.
  expect(GemvTmaTiles<16>::kStages == 12 && GemvTmaTiles<32>::kStages == 10 && GemvTmaTiles<64>::kStages == 8 &&
             GemvTmaTiles<128>::kStages == 5,
         "gemv_tma rings of 12 / 10 / 8 / 5 stages", 0, 0, 0);
  expect(GemvTmaTiles<16, 64>::kStages == 16 && GemvTmaTiles<32, 64>::kStages == 16 &&
             GemvTmaTiles<64, 64>::kStages == 13 && GemvTmaTiles<128, 64>::kStages == 8,
         "gemv_tma rings of 16 / 16 / 13 / 8 stages at 64 rows", 0, 0, 0);
  expect(GemvTmaTiles<16>::kSmemBytes <= kSm90SmemLimit && GemvTmaTiles<32>::kSmemBytes <= kSm90SmemLimit &&
             GemvTmaTiles<64>::kSmemBytes <= kSm90SmemLimit && GemvTmaTiles<128>::kSmemBytes <= kSm90SmemLimit &&
             GemvTmaTiles<128, 64>::kSmemBytes <= kSm90SmemLimit && GemvTmaTiles<64, 64>::kSmemBytes <= kSm90SmemLimit,
         "gemv_tma shared memory", 0, 0, 0);
  std::printf("gemv_tma shared memory (bytes): n16 %d, n32 %d, n64 %d, n128 %d; 64 rows: %d, %d, %d, %d\n",
              GemvTmaTiles<16>::kSmemBytes, GemvTmaTiles<32>::kSmemBytes, GemvTmaTiles<64>::kSmemBytes,
              GemvTmaTiles<128>::kSmemBytes, GemvTmaTiles<16, 64>::kSmemBytes, GemvTmaTiles<32, 64>::kSmemBytes,
              GemvTmaTiles<64, 64>::kSmemBytes, GemvTmaTiles<128, 64>::kSmemBytes);
  // The totals' swizzle: a permutation of each row that keeps (n even, n + 1) adjacent, and every
  // fragment store (8 consecutive n of one warp x the four m of lane % 4) hits 32 banks, for
  // rows of 128 and of 64 floats.
  const auto check_totals_swizzle = []<class T>() {
    bool ok = true;
    for (int m = 0; m < T::kBN && ok; ++m) {
      bool seen[T::kBM] = {};
      for (int n = 0; n < T::kBM; ++n) {
        const int i = T::totals_index(m, n) - m * T::kTotalsPitch;
        ok = ok && i >= 0 && i < T::kBM && !seen[i];
        if (ok) seen[i] = true;
        if (n % 2 == 1) ok = ok && T::totals_index(m, n) == T::totals_index(m, n - 1) + 1;
      }
    }
    for (int j = 0; j < T::kBN / 8 && ok; ++j)
      for (int e = 0; e < 2; ++e)
        for (int n0 = 0; n0 < T::kBM; n0 += 8) {
          bool bank[32] = {};
          for (int q = 0; q < 4; ++q)
            for (int r = 0; r < 8; ++r) {
              const int b = T::totals_index(8 * j + 2 * q + e, n0 + r) % 32;
              ok = ok && !bank[b];
              bank[b] = true;
            }
        }
    expect(ok, "gemv_tma totals swizzle", T::kBM, T::kBN, 0);
  };
  check_totals_swizzle.operator()<GemvTmaTiles<128>>();
  check_totals_swizzle.operator()<GemvTmaTiles<128, 64>>();
  GemmPlan too_many = plan_of(1, 4096, 4096, 2);
  too_many.split_k = kMaxSplitK + 1;
  expect(!plan_supported(too_many), "split_k above kMaxSplitK accepted", 1, 4096, 4096);

  // split_k_range: contiguous, non-empty, sizes within one of each other, covering all k-blocks.
  for (int k_blocks = 1; k_blocks <= 300; ++k_blocks)
    for (int splits = 1; splits <= kMaxSplitK && splits <= k_blocks; ++splits) {
      int expected_begin = 0, smallest = k_blocks, largest = 0;
      bool ok = true;
      for (int s = 0; s < splits; ++s) {
        int begin, end;
        split_k_range(s, splits, k_blocks, begin, end);
        ok = ok && begin == expected_begin && end > begin;
        smallest = end - begin < smallest ? end - begin : smallest;
        largest = end - begin > largest ? end - begin : largest;
        expected_begin = end;
      }
      ok = ok && expected_begin == k_blocks && largest - smallest <= 1;
      expect(ok, "split_k_range partition", splits, 0, k_blocks);
    }

  // Store modes: the default is the TMA-store epilogue where the tile has that kernel (BN 128 /
  // 176 / 192 promoted, 128 / 256 fast), the 16-byte row stores elsewhere; a forced TMA store on
  // a tile without it is no plan.
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{4096, 4096, 4096}, {8192, 8192, 8192}, {8192, 11008, 4096}}) {
    const GemmPlan plan = plan_of(m, n, k);
    expect(plan.store == int(StoreMode::kTma) && has_tma_store_kernel(plan.block_n, plan.accum) && plan_supported(plan),
           "default plan stores by TMA", m, n, k);
  }
  {
    PlanRequest req;
    req.force_block_n = 64;
    GemmPlan plan = plan_gemm(2048, 2048, 2048, kSms, 9, 0, req);
    expect(plan.store == int(StoreMode::kRows16) && plan_supported(plan), "BN 64 falls back to row stores", 2048, 2048,
           2048);
    plan.store = int(StoreMode::kTma);
    expect(!plan_supported(plan), "a forced TMA store without its kernel is no plan", 2048, 2048, 2048);
  }

  // Chunk-staged TMA stores (StoreMode::kTmaChunked): the ring keeps the stages it has without
  // staging (5 at BN 176 / 192, 4 at 256) where whole-block staging costs one, with two 8 KB
  // buffers per consumer where two fit beside them (176, 256) and one where only one does (192);
  // BN 128 (6 stages either way) and BN 64 have no such kernel.
  {
    using kernels::fp8::gemm::AccumMode;
    using kernels::fp8::gemm::Sm90Policy;
    using P176 = Sm90Policy<176, AccumMode::kPromote, true, true>;
    using P192 = Sm90Policy<192, AccumMode::kPromote, true, true>;
    using P256 = Sm90Policy<256, AccumMode::kFast, true, true>;
    static_assert(P176::kStages == 5 && P176::kStagingBuffers == 2 &&
                      Sm90Policy<176, AccumMode::kPromote>::kStages == 5 &&
                      Sm90Policy<176, AccumMode::kPromote, true>::kStages == 4,
                  "BN 176 chunk staging: 5 stages, two buffers");
    static_assert(
        P192::kStages == 5 && P192::kStagingBuffers == 1 && Sm90Policy<192, AccumMode::kPromote, true>::kStages == 4,
        "BN 192 chunk staging: 5 stages, one buffer");
    static_assert(
        P256::kStages == 4 && P256::kStagingBuffers == 2 && Sm90Policy<256, AccumMode::kFast, true>::kStages == 3,
        "BN 256 chunk staging: 4 stages, two buffers");
    static_assert(
        P176::kSmemBytes <= kSm90SmemLimit && P192::kSmemBytes <= kSm90SmemLimit && P256::kSmemBytes <= kSm90SmemLimit,
        "shared memory of the chunk-staged kernels");
    for (const int bn : {176, 192, 256}) {
      PlanRequest req;
      req.force_block_n = bn;
      req.store = int(StoreMode::kTmaChunked);
      const GemmPlan plan = plan_gemm(4096, 4096, 4096, kSms, 9, 0, req);
      const std::string what = "forced chunk-staged TMA stores at BN " + std::to_string(bn);
      expect(plan.store == int(StoreMode::kTmaChunked) && plan_supported(plan), what.c_str(), 4096, 4096, 4096);
    }
    for (const int bn : {64, 128}) {
      PlanRequest req;
      req.force_block_n = bn;
      req.store = int(StoreMode::kTmaChunked);
      const std::string what = "no chunk-staged kernel at BN " + std::to_string(bn);
      expect(!plan_supported(plan_gemm(4096, 4096, 4096, kSms, 9, 0, req)), what.c_str(), 4096, 4096, 4096);
    }
    PlanRequest overlap;
    overlap.force_block_n = 176;
    overlap.accum = int(AccumMode::kPromoteOverlap);
    const GemmPlan overlap_plan = plan_gemm(4096, 4096, 4096, kSms, 9, 0, overlap);
    expect(overlap_plan.store == int(StoreMode::kRows16) && plan_supported(overlap_plan),
           "overlap takes its TMA-store kernels only when asked (unmeasured)", 4096, 4096, 4096);
    overlap.store = int(StoreMode::kTmaChunked);
    expect(plan_supported(plan_gemm(4096, 4096, 4096, kSms, 9, 0, overlap)), "overlap's chunk-staged kernel", 4096,
           4096, 4096);
    GemmPlan beyond = plan_of(4096, 4096, 4096);
    beyond.store = int(StoreMode::kTmaChunked) + 1;
    expect(!plan_supported(beyond), "store modes end at kTmaChunked", 4096, 4096, 4096);
  }

  // The launch checks throw the error types of common/errors.h (what the binding raises).
  {
    using kernels::test::rejects;
    alignas(16) static uint8_t operand[64];
    kernels::fp8::GemmParams p;
    p.a = p.b = operand;
    p.m = p.n = 64;
    p.k = p.lda = p.ldb = 64;
    failures += !kernels::test::runs("check_gemm", [&] { check_gemm(p, 9, 0); });
    kernels::fp8::GemmParams bad = p;
    bad.a_format = bad.b_format = kernels::fp8::Format::kE5M2;
    failures += !rejects<kernels::TypeError>("e5m2 x e5m2", [&] { check_gemm(bad, 9, 0); }, "format pair");
    failures += !rejects<kernels::NotImplementedError>("sm_80", [&] { check_gemm(p, 8, 0); }, "sm_89 or newer");
    bad = p;
    bad.k = 40;
    failures += !rejects<kernels::ValueError>("K % 16 != 0", [&] { check_gemm(bad, 9, 0); }, "got M=64, N=64, K=40");
    bad = p;
    bad.a = operand + 8;
    failures += !rejects<kernels::ValueError>("misaligned A", [&] { check_gemm(bad, 9, 0); }, "16-byte aligned");
    GemmPlan unsupported = plan_of(4096, 4096, 4096, 0, int(Path::kWgmma));
    unsupported.block_n = 256;
    unsupported.accum = AccumMode::kPromote;
    failures += !rejects<kernels::ValueError>(
        "promoted bn256", [&] { check_plan_supported(unsupported); }, "unsupported plan (path wgmma, block_n 256");

    // Block scaling: asked for by its accumulation (the binding does, given block scales), it
    // takes the WGMMA tiles at every M (no GEMV reads them), BN 128, a factor per k-block; the
    // plan and the scales must agree, else the launch refuses (a kernel that ignores them would
    // be silently wrong).
    PlanRequest block_request;
    block_request.accum = int(AccumMode::kBlockScaled);
    for (int64_t m : {1, 64, 4096}) {
      const GemmPlan plan = plan_gemm(m, 7168, 2048, kSms, 9, 0, block_request);
      expect(plan.path == Path::kWgmma && plan.block_n == 128 && plan.promote_every == 1 &&
                 plan.store == int(StoreMode::kRows16) && plan_supported(plan),
             "block-scaled plan", m, 7168, 2048);
    }
    GemmPlan block_plan = plan_gemm(256, 512, 1024, kSms, 9, 0, block_request);
    const float factors[64] = {};
    const kernels::fp8::BlockScales scales{factors, factors}, none{}, half{factors, nullptr};
    failures += !kernels::test::runs("block scales", [&] { check_block_scales(p, scales, block_plan); });
    failures += !kernels::test::runs("no block scales", [&] { check_block_scales(p, none, plan_of(64, 64, 64)); });
    failures += !rejects<kernels::ValueError>(
        "block scales, promoted plan", [&] { check_block_scales(p, scales, plan_of(4096, 4096, 4096, 0, 0)); },
        "need the block-scaled accumulation");
    failures += !rejects<kernels::ValueError>(
        "block-scaled plan, no scales", [&] { check_block_scales(p, none, block_plan); }, "needs both");
    failures += !rejects<kernels::ValueError>(
        "one block scale", [&] { check_block_scales(p, half, block_plan); }, "needs both");
    bad = p;
    bad.b_format = kernels::fp8::Format::kE5M2;
    failures += !rejects<kernels::TypeError>(
        "block-scaled e5m2", [&] { check_block_scales(bad, scales, block_plan); }, "e4m3 x e4m3");
    failures += !rejects<kernels::NotImplementedError>(
        "block scales on sm_89",
        [&] { check_block_scales(p, scales, plan_gemm(256, 512, 1024, kSms, 8, 9, block_request)); }, "sm_90a");
    block_plan.promote_every = 2;
    expect(!plan_supported(block_plan), "block scaling promotes every k-block", 256, 512, 1024);
    block_plan.promote_every = 1;
    block_plan.block_n = 192;
    expect(!plan_supported(block_plan), "block scaling at BN 192", 256, 512, 1024);
  }

  std::printf("fp8_plan_test: %d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
