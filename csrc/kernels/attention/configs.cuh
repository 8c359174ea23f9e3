// Tile configurations per head_dim: the single source of tile sizes for kernels, launchers
// and host heuristics. Chosen from register and shared-memory budgets on sm_90 (255
// registers/thread, 227 KB shared/CTA): O in registers is 16 * kMT rows x D fp32 per warp.
#pragma once

#include "tile_ops.cuh"

namespace kernels::attention {

// Decode: one CTA = 16 packed rows (query, head-in-group) of one kv head and one KV split.
// Every warp takes kKeysPerWarp keys of each KV tile with its own softmax state; the warps
// are merged in shared memory at the end (split-KV inside the CTA, splits across CTAs).
template <int kD>
struct DecodeConfig;
template <>
struct DecodeConfig<64> {
    static constexpr int kWarps = 4, kKeysPerWarp = 32, kStages = 3;
};
template <>
struct DecodeConfig<128> {
    static constexpr int kWarps = 4, kKeysPerWarp = 16, kStages = 3;
};
template <>
struct DecodeConfig<256> {
    static constexpr int kWarps = 4, kKeysPerWarp = 16, kStages = 2;
};

template <int kD>
struct DecodeTraits : DecodeConfig<kD> {
    using Cfg = DecodeConfig<kD>;
    static constexpr int kThreads = Cfg::kWarps * 32;
    static constexpr int kRows = 16;
    static constexpr int kBlockN = Cfg::kWarps * Cfg::kKeysPerWarp;
    static constexpr int kTileElems = kBlockN * smem_stride<kD>();
    static constexpr int kPipeBytes =
        (kRows * smem_stride<kD>() + 2 * Cfg::kStages * kTileElems) * 2;
    // The warp merge reuses the pipeline buffers: O [warps][16][D] plus max and sum.
    static constexpr int kMergeBytes = (Cfg::kWarps * kRows * kD + 2 * Cfg::kWarps * kRows) * 4;
    static constexpr int kSmemBytes = kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes;
};

// Prefill: one CTA = kBlockM packed rows of one kv head, all of its keys; warps own
// 16 * kMT rows each (two m tiles where registers allow: every K/V fragment then feeds two
// MMAs, which halves shared-memory traffic per FLOP). D=128 with kBlockN = 64 needs 255
// registers and spills 40-56 bytes (ptxas, nvcc 13.0, sm_90a); kBlockN = 32 fits in 240.
template <int kD>
struct PrefillConfig;
template <>
struct PrefillConfig<64> {
    static constexpr int kWarps = 4, kMT = 2, kBlockN = 64, kStages = 2;
};
template <>
struct PrefillConfig<128> {
    static constexpr int kWarps = 4, kMT = 2, kBlockN = 32, kStages = 2;
};
template <>
struct PrefillConfig<256> {
    static constexpr int kWarps = 8, kMT = 1, kBlockN = 32, kStages = 2;
};

template <int kD>
struct PrefillTraits : PrefillConfig<kD> {
    using Cfg = PrefillConfig<kD>;
    static constexpr int kThreads = Cfg::kWarps * 32;
    static constexpr int kBlockM = Cfg::kWarps * 16 * Cfg::kMT;
    static constexpr int kTileElems = Cfg::kBlockN * smem_stride<kD>();
    static constexpr int kSmemBytes =
        (kBlockM * smem_stride<kD>() + 2 * Cfg::kStages * kTileElems) * 2;
};

}  // namespace kernels::attention
