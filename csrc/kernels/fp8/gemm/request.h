// FP8 GEMM: what a caller may ask of the planner (PlanRequest) and the limits it checks
// requests against. Host C++ only: the torch binding (fp8.cpp) includes it without the kernels.
#pragma once

namespace kernels::fp8::gemm {

constexpr int kGemvMaxRows = 16;      // M up to this takes the GEMV path (one m16 MMA row tile)
constexpr int kGemvTmaMaxRows = 128;  // M up to this fits the swap-AB GEMV (its widest WGMMA n)
constexpr int kMaxSplitK = 64;        // largest split count a request may force (each split needs a k-block too)
constexpr int kAccumBlockScaled = 4;  // AccumMode::kBlockScaled (policy.cuh): what a call with block scales asks for

struct PlanRequest {
  int force_path = -1;    // -1 auto, else Path
  int force_block_n = 0;  // 0 auto, else 64 / 128 / 176 / 192 / 256 (WGMMA path)
  int persistent = -1;    // -1 auto, 0 one block (cluster) per tile, 1 grid = SM count
  int accum = -1;         // -1 auto, else AccumMode (WGMMA path)
  int promote_every = 0;  // 0 auto, else 1 or 2 k-blocks per promotion (AccumMode::kPromote)
  int stagger = -1;       // -1 auto, 0 / 1: the second consumer's intervals offset by one k-block
  int cluster = -1;       // -1 auto, else ClusterMode (WGMMA path)
  int group_m = 0;        // 0 auto, else raster group height in tiles
  int store = -1;         // -1 auto, else StoreMode: checked / interior pairs / rows / TMA / TMA in 64-column chunks
  int split_k = 0;        // 0 auto, 1 none, n: n splits of K (WGMMA path; capped at the k-blocks)
};

}  // namespace kernels::fp8::gemm
