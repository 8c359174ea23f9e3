// Tile configurations per head_dim: the single source of tile sizes for kernels, launchers
// and host heuristics. Chosen from register and shared-memory budgets on sm_90 (255
// registers/thread, 227 KB shared/CTA): O in registers is 16 * kMT rows x D fp32 per warp.
#pragma once

#include "tile_ops.cuh"

namespace kernels::attention {

// Decode: one CTA = 16 packed rows (query, head-in-group) of one kv head and one KV split.
// Every warp takes kKeysPerWarp keys of each KV tile with its own softmax state; the warps
// are merged in shared memory at the end (split-KV inside the CTA, splits across CTAs).
// The kernel and its launcher are templated on one DecodeTiles; DecodeConfig<kD> is what
// run_decode uses, DecodeVariants<kD> what `attn_paged_test bench` compares it with.
// kSwizzled: Q, K and V tiles in RowSwizzledTile rows instead of padded ones (tensor cores only).
template <int kD_, int kWarps_, int kKeysPerWarp_, int kStages_, bool kSwizzled_ = false>
struct DecodeTiles {
  static constexpr int kD = kD_, kWarps = kWarps_, kKeysPerWarp = kKeysPerWarp_, kStages = kStages_;
  static constexpr bool kSwizzled = kSwizzled_;
};

template <int kD>
struct DecodeConfig;
// Every head dim reads its K/V rows into swizzled tiles (RowSwizzledTile): each 128-byte line of a
// row stays in one shared-memory segment, and the swizzled tiles were faster than padded rows at
// every head dim and batch measured (`attn_paged_test latency`, H200; docs/production_lab.md,
// "Where B = 16 and 64 stand against cuDNN").
template <>
struct DecodeConfig<64> : DecodeTiles<64, 4, 32, 3, true> {};
template <>
struct DecodeConfig<128> : DecodeTiles<128, 4, 16, 3, true> {};
// D 256 runs one CTA per SM at any ring depth (64 KB a stage); three stages, the deepest that
// fits, were faster than two at every batch measured. At D 64 and 128 the deepest ring (6 stages)
// is no faster (attn_paged_test latency, H200; docs/production_lab.md, "Measured while choosing
// the decode tiles").
template <>
struct DecodeConfig<256> : DecodeTiles<256, 4, 16, 3, true> {};

// A configuration's tiles in padded rows (the scalar math reads only those).
template <class Cfg>
using PaddedDecodeTiles = DecodeTiles<Cfg::kD, Cfg::kWarps, Cfg::kKeysPerWarp, Cfg::kStages, false>;

// The deepest ring of Cfg's tiles that one CTA's shared memory (227 KB) holds: Q, then per stage
// a K and a V tile and the stage's page-table entries.
template <class Cfg>
constexpr int kDeepestRing = (227 * 1024 - 16 * Cfg::kD * 2) / (2 * Cfg::kWarps * Cfg::kKeysPerWarp * (Cfg::kD * 2) +
                                                                Cfg::kWarps * Cfg::kKeysPerWarp * 4);

template <int kD>
struct DecodeVariants {
  using Default = DecodeConfig<kD>;
  // the default's tiles in the deepest ring (6 stages at D 64 and 128): one CTA per SM
  using Deep = DecodeTiles<kD, Default::kWarps, Default::kKeysPerWarp, kDeepestRing<Default>, true>;
  using Padded = PaddedDecodeTiles<Default>;
  using Swizzled = DecodeTiles<kD, Default::kWarps, Default::kKeysPerWarp, Default::kStages, true>;
  // other tile shapes, in the default's swizzled rows
  using W4S2 = DecodeTiles<kD, 4, 16, 2, true>;  // smaller ring: three CTAs per SM at D 128
  using W4S4 = DecodeTiles<kD, 4, 16, 4, true>;  // deeper ring
  using W8S2 = DecodeTiles<kD, 8, 16, 2, true>;  // 128-key tiles, 8 warps
  using W8S3 = DecodeTiles<kD, 8, 16, 3, true>;
  using W4K32S2 = DecodeTiles<kD, 4, 32, 2, true>;  // 128-key tiles, 4 warps of 32 keys
  using W4K32S3 = DecodeTiles<kD, 4, 32, 3, true>;
};

// An FP8 KV cache (e4m3 K / V): DecodeConfig<kD>'s warps and ring depth, twice the keys per
// warp, so that a stage holds as many bytes as the 16-bit decode's (and per-tile costs, the
// barrier and the softmax's row reductions, spread over twice the keys).
template <int kD>
struct E4m3DecodeConfig
    : DecodeTiles<kD, DecodeConfig<kD>::kWarps, 2 * DecodeConfig<kD>::kKeysPerWarp, DecodeConfig<kD>::kStages, true> {};

// kKvBytes: bytes of a K / V element, 2 (q's type) or 1 (e4m3: an FP8 KV cache).
template <class Cfg, int kKvBytes = 2>
struct DecodeTraits : Cfg {
  static constexpr int kD = Cfg::kD;
  static constexpr int kThreads = Cfg::kWarps * 32;
  static constexpr int kRows = 16;
  static constexpr int kBlockN = Cfg::kWarps * Cfg::kKeysPerWarp;
  using Tile = std::conditional_t<Cfg::kSwizzled, RowSwizzledTile<kD>, PaddedTile<kD>>;
  static constexpr int kTileElems = kBlockN * Tile::kRowElems;  // a K or V tile the math reads
  // e4m3 K / V: the ring holds the cache's bytes (ByteSwizzledTile), which the math unpacks
  // straight into its B fragments (E4m3KvMath); Q becomes fp16 in place.
  static_assert(kKvBytes == 1 || kKvBytes == 2, "16-bit or e4m3 K / V");
  static constexpr bool kConvertsKv = kKvBytes == 1;
  using RingTile = std::conditional_t<kConvertsKv, ByteSwizzledTile<kD>, Tile>;
  static constexpr int kRingTileElems = kBlockN * RingTile::kRowElems;
  // Q, the K and V rings, (paged KV) a ring of page-table entries: kBlockN ints per stage, then
  // (e4m3) the warps' Q amax.
  static constexpr int kRingOffset = kRows * Tile::kRowElems * 2;
  static constexpr int kPageEntriesOffset = kRingOffset + 2 * Cfg::kStages * kRingTileElems * kKvBytes;
  static constexpr int kQAmaxOffset = kPageEntriesOffset + Cfg::kStages * kBlockN * 4;
  static constexpr int kPipeBytes = kQAmaxOffset + (kConvertsKv ? Cfg::kWarps * 4 : 0);
  // The warp merge reuses the pipeline buffers: O [warps][16][kMergePitch] plus max and sum.
  // A row of D floats spans whole 128-byte bank cycles, so the 8 rows a warp's fragment
  // stores at once would hit the same banks (8-way conflicts); 8 floats of padding shift each
  // row by 8 banks, and a half-warp's float2 stores (4 rows x 4 lanes) cover all 32.
  static constexpr int kMergePitch = kD + 8;
  static constexpr int kMergeBytes = (Cfg::kWarps * kRows * kMergePitch + 2 * Cfg::kWarps * kRows) * 4;
  static constexpr int kSmemBytes = kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes;
  // CTAs one SM holds at once: shared memory is the limit (228 KB per SM on sm_90, 1 KB of
  // it reserved per CTA); registers and warps allow more.
  static constexpr int kCtasPerSm = (228 * 1024) / (kSmemBytes + 1024);
  static_assert(kCtasPerSm >= 1, "decode tile does not fit in shared memory");
};

// Prefill: one CTA = kBlockM packed rows of one kv head, all of its keys; warps own
// 16 * kMT rows each (two m tiles where registers allow: every K/V fragment then feeds two
// MMAs, which halves shared-memory traffic per FLOP). The kernel and its launcher are
// templated on one PrefillTiles; PrefillConfig<kD> is what run_prefill uses.
//
// Options (kFlags bits), each a schedule or register choice that leaves the math unchanged:
//   kPrefillSplitKV      K and V in separate cp.async groups and rings (FA2's schedule): wait
//                        for K before Q K^T and for V only before P V; V of tile i + S - 1 is
//                        issued at the top of iteration i, K of tile i + S after every warp has
//                        finished Q K_i^T. kStages = 1 is FA2's single-buffered K and V.
//   kPrefillPackP        P -> 16-bit A fragments for the whole tile before P V, so the fp32
//                        scores die before the V loop instead of one 16-key slice at a time.
//   kPrefillLongestFirst causal dense Q: one linear grid with the q tile as the slowest index,
//                        last (longest) tiles first, so the short tiles fill the final wave.
//   kPrefillTwoCtas      __launch_bounds__ minimum of 2 CTAs per SM (caps registers at
//                        32768 / kThreads).
//   kPrefillLazyRescale  a row's running max moves only when it grows by more than 2^8 (exp2
//                        units), and O is rescaled only when some row of the warp moved
//                        (PrefillSoftmax in prefill_kernel.cuh): fewer FMULs, and the rescale
//                        leaves the P V schedule, which lowers register pressure.
//   kPrefillWgmma        sm_90a only: warpgroups of 64 rows (kMT = 1, kWarps a multiple of 4)
//                        multiply with wgmma.mma_async on 128-byte-swizzled tiles
//                        (WgmmaMath, wgmma_math.cuh) instead of ldmatrix + mma.sync.
//   kPrefillSoftmaxOverlap  WGMMA, lazy rescale: iteration i issues Q K_i^T, then P_{i-1} V_{i-1},
//                        and runs the mask and softmax of S_i while the latter is in flight
//                        (FlashAttention-3's intra-warpgroup overlap). One barrier per
//                        iteration; K_j and V_{j-1} travel as one cp.async group.
enum : unsigned {
  kPrefillSplitKV = 1u,
  kPrefillPackP = 2u,
  kPrefillLongestFirst = 4u,
  kPrefillTwoCtas = 8u,
  kPrefillLazyRescale = 16u,
  kPrefillWgmma = 32u,
  kPrefillSoftmaxOverlap = 64u,
};

template <int kD_, int kWarps_, int kMT_, int kBlockN_, int kStages_, unsigned kFlags_ = 0u>
struct PrefillTiles {
  static constexpr int kD = kD_, kWarps = kWarps_, kMT = kMT_, kBlockN = kBlockN_, kStages = kStages_;
  static constexpr unsigned kFlags = kFlags_;
  static constexpr bool kSplitKV = (kFlags & kPrefillSplitKV) != 0;
  static constexpr bool kPackP = (kFlags & kPrefillPackP) != 0;
  static constexpr bool kLongestFirst = (kFlags & kPrefillLongestFirst) != 0;
  static constexpr int kMinBlocks = (kFlags & kPrefillTwoCtas) != 0 ? 2 : 1;
  static constexpr bool kLazyRescale = (kFlags & kPrefillLazyRescale) != 0;
  static constexpr bool kWgmma = (kFlags & kPrefillWgmma) != 0;
  static_assert(kStages >= 1 && (kSplitKV || kStages >= 2), "a joint K/V ring needs two stages");
  static_assert(!kWgmma || (kWarps % 4 == 0 && kMT == 1), "WGMMA tiles are warpgroups of 64 rows");
  static constexpr bool kSoftmaxOverlap = (kFlags & kPrefillSoftmaxOverlap) != 0;
  static_assert(!kSoftmaxOverlap || (kWgmma && kLazyRescale && !kSplitKV && kStages >= 2),
                "the softmax overlap is its own WGMMA schedule and uses the split lazy update");
};

// D=128: FA2's 128 x 64 tile with double-buffered, separately waited K and V; it fits in 255
// registers without spills only with the lazy rescale (with the eager one, kBlockN = 64 spills
// 4-60 bytes; ptxas, nvcc 13.0, sm_90a). On the H200 (`attn_test bench`) it is a little faster
// than the single-buffered tile and ahead of the former 128 x 32 one, and longest-first helps
// the causal rows (docs/production_lab.md, "Measured while choosing the cp.async prefill's tiles").
template <int kD>
struct PrefillConfig;
template <>
struct PrefillConfig<64> : PrefillTiles<64, 4, 2, 64, 2> {};
template <>
struct PrefillConfig<128>
    : PrefillTiles<128, 4, 2, 64, 2, kPrefillLazyRescale | kPrefillSplitKV | kPrefillLongestFirst> {};
template <>
struct PrefillConfig<256> : PrefillTiles<256, 8, 1, 32, 2> {};

// The tensor-core configuration on Hopper (sm_90a; run_prefill picks it by device): two
// warpgroups of 64 rows with WGMMA, the softmax of S_i running under P_{i-1} V_{i-1}.
// kBlockM must stay PrefillConfig's: one packed-Q schedule (prefill_block_m) serves both.
// On the H200 (`attn_test bench`) it is ahead of PrefillConfig at D = 64, 128 and 256. At
// D = 128 the same WGMMA tiles without the softmax overlap, with three stages, with 64-, 160- or
// 176-key tiles, with only P V in flight across the barrier, or with the two warpgroups taking
// turns (a ping-pong on mbarrier-tracked stages and named barriers) were slower: the turns did
// not pay here (docs/production_lab.md, "Measured while choosing the cp.async prefill's tiles").
template <int kD>
struct PrefillSm90Choice {
  static constexpr int kBlockN = kD == 256 ? 64 : 128;  // S, P and O within 255 registers
  using type = PrefillTiles<kD, 8, 1, kBlockN, 2,
                            kPrefillLazyRescale | kPrefillLongestFirst | kPrefillWgmma | kPrefillSoftmaxOverlap>;
};
template <int kD>
using PrefillConfigSm90 = typename PrefillSm90Choice<kD>::type;

// Named alternatives, measured against PrefillConfig<kD> by `attn_test bench`
// (csrc/tests/attn_test.cu). D=128 kBlockN = 64 fits in 255 registers without spills only with
// the lazy rescale (ptxas, nvcc 13.0, sm_90a).
template <int kD>
struct PrefillVariants {
  static constexpr unsigned kLazy = kPrefillLazyRescale;
  using Default = PrefillConfig<kD>;
  // The former D=128 default: 128 x 32, joint K/V double buffer; plus longest-first / lazy rescale.
  using N32 = PrefillTiles<kD, 4, 2, 32, 2>;
  using N32LF = PrefillTiles<kD, 4, 2, 32, 2, kPrefillLongestFirst>;
  using N32Lazy = PrefillTiles<kD, 4, 2, 32, 2, kLazy>;
  // FA2's tile: 128 x 64, 4 warps of 32 rows.
  using N64 = PrefillTiles<kD, 4, 2, 64, 2, kLazy>;
  using N64PackP = PrefillTiles<kD, 4, 2, 64, 2, kLazy | kPrefillPackP>;
  // ... with K and V waited for separately (double-buffered rings).
  using N64Split = PrefillTiles<kD, 4, 2, 64, 2, kLazy | kPrefillSplitKV>;
  // ... FA2's single-buffered K and V (half the K/V shared memory).
  using N64Split1 = PrefillTiles<kD, 4, 2, 64, 1, kLazy | kPrefillSplitKV>;
  // ... plus the longest causal q tiles first (the D=128 default), and with P packed early.
  using N64SplitLF = PrefillTiles<kD, 4, 2, 64, 2, kLazy | kPrefillSplitKV | kPrefillLongestFirst>;
  using N64SplitPackPLF = PrefillTiles<kD, 4, 2, 64, 2, kLazy | kPrefillSplitKV | kPrefillPackP | kPrefillLongestFirst>;
  // The former D=128 default: single-buffered K and V, longest-first.
  using N64Split1LF = PrefillTiles<kD, 4, 2, 64, 1, kLazy | kPrefillSplitKV | kPrefillLongestFirst>;
  // 8 warps of 32 rows (kBlockM = 256): half the K/V traffic per FLOP, one CTA per SM.
  using W8N64 = PrefillTiles<kD, 8, 2, 64, 2, kLazy | kPrefillSplitKV>;
  // 8 warps of 16 rows: few registers, two CTAs (16 warps) per SM, twice the ldmatrix per MMA.
  using W8M1N64 = PrefillTiles<kD, 8, 1, 64, 2, kLazy | kPrefillTwoCtas>;
  // Hopper: two warpgroups with WGMMA and the softmax of S_i under P_{i-1} V_{i-1} (the
  // sm_90a default), with three stages, and without the overlap (128- and 64-key tiles).
  using Sm90 = PrefillConfigSm90<kD>;
  using WgSoftmaxOverlap3 =
      PrefillTiles<kD, 8, 1, 128, 3, kLazy | kPrefillLongestFirst | kPrefillWgmma | kPrefillSoftmaxOverlap>;
  using Wg = PrefillTiles<kD, 8, 1, 128, 2, kLazy | kPrefillSplitKV | kPrefillLongestFirst | kPrefillWgmma>;
  using WgN64 = PrefillTiles<kD, 8, 1, 64, 2, kLazy | kPrefillSplitKV | kPrefillLongestFirst | kPrefillWgmma>;
};

// The warp-specialized Hopper prefill (prefill_ws_sm90.cuh, sm_90a): a producer warpgroup
// streams K and V by TMA through a kStages-deep ring; kConsumerWarpgroups warpgroups of 64 query
// rows each multiply with WGMMA. One CTA per (query tile, query head). The shapes are the
// CuTe-DSL ladder's K8 plans (kernels/k8.py TILE_CONFIGS, FlashAttention-3's): D=64 three
// consumer warpgroups on 128-key tiles, D=128 two on 128-key tiles, D=256 two on 80-key tiles;
// two stages everywhere; key tiles from the last down at D=64 and 128 (kDescendingKv).
// kL2Sections: under the causal mask, the grid walks the (head, batch) pairs in sections whose K
// and V fit in L2 (kL2KvBytes), the longest query tiles of a section first (FlashAttention-4's
// LPT scheduler on Hopper); off, every pair's longest tiles come before any pair's shorter ones.
// kPinPvWait (lab): K's release waits for the softmax's row sums, which keeps ptxas from hoisting
// the wait for the warpgroup's own P V above the exponentials (prefill_ws_sm90.cuh, step).
// kPvWaitAfterRowScale: the wait held behind the row factors instead, K released where it was
// (kernels/k11.py's default at D = 128, and this kernel's: docs/production_lab.md has the timing).
// kDescendingKv (dense K / V; paged K / V keep the first-up order, whose last tile is where
// V's rows past the keys are zeroed): the key tiles from the last down (FlashAttention-3's
// order), so the tiles that need a mask (the causal diagonal, the end of the keys) come first
// and the pipelined steps after them run without mask code. At D=256 it measured slower without
// a mask (docs/production_lab.md).
// kPackBeforeRescale: after the wait for its own P V a step packs P to bf16 before O's lazy
// rescale (a branch: only when a row's max moved), so ptxas interleaves the packs with the
// exponentials it sinks below that wait, as FlashAttention-4's step does with its rescale;
// rescale first, the branch fenced the packs off behind every exponential. kBranchlessRescale
// (lab): O rescaled on every step, without the branch (docs/production_lab.md has both timings).
template <int kD_, int kConsumerWarpgroups_, int kBlockN_, int kStages_, bool kL2Sections_ = true,
          bool kPinPvWait_ = false, bool kPvWaitAfterRowScale_ = false, bool kDescendingKv_ = false,
          bool kPackBeforeRescale_ = false, bool kBranchlessRescale_ = false>
struct PrefillWsTiles {
  static constexpr int kD = kD_, kConsumerWarpgroups = kConsumerWarpgroups_, kBlockN = kBlockN_, kStages = kStages_;
  static constexpr bool kL2Sections = kL2Sections_;
  static constexpr bool kPinPvWait = kPinPvWait_;
  static constexpr bool kPvWaitAfterRowScale = kPvWaitAfterRowScale_;
  static constexpr bool kDescendingKv = kDescendingKv_;
  static constexpr bool kPackBeforeRescale = kPackBeforeRescale_;
  static constexpr bool kBranchlessRescale = kBranchlessRescale_;
  static_assert(!(kPinPvWait && kPvWaitAfterRowScale), "one place for the wait for P V");
};
// L2 bytes (of the H100 / H200's 50 MB) that the K and V of one causal section may take.
constexpr int64_t kL2KvBytes = 40ll << 20;

template <int kD>
struct PrefillWsConfig;
template <>
struct PrefillWsConfig<64> : PrefillWsTiles<64, 3, 128, 2, true, false, false, true, true> {};
template <>
struct PrefillWsConfig<128> : PrefillWsTiles<128, 2, 128, 2, true, false, true, true, true> {};
template <>
struct PrefillWsConfig<256> : PrefillWsTiles<256, 2, 80, 2> {};

// Named alternatives of the warp-specialized kernel that `attn_test bench` times beside
// PrefillWsConfig (the shapes the ladder's pages discuss; each fits 227 KiB of shared memory).
template <int kD>
struct PrefillWsVariants;
template <>
struct PrefillWsVariants<64> {
  // two consumer warpgroups of 240 registers
  using Wg2 = PrefillWsTiles<64, 2, 128, 2, true, false, false, true, true>;
  using Stages3 = PrefillWsTiles<64, 3, 128, 3, true, false, false, true, true>;     // a third stage
  using Ascending = PrefillWsTiles<64, 3, 128, 2, true, false, false, false, true>;  // key tiles from the first up
  using RescaleFirst = PrefillWsTiles<64, 3, 128, 2, true, false, false, true>;      // O rescaled, then P packed
  using Branchless = PrefillWsTiles<64, 3, 128, 2, true, false, false, true, true, true>;  // O rescaled every step
};
template <>
struct PrefillWsVariants<128> {
  // Each differs from PrefillWsConfig<128> in one knob.
  using Stages3 = PrefillWsTiles<128, 2, 128, 3, true, false, true, true, true>;  // three stages: 224 KiB
  using NoL2 = PrefillWsTiles<128, 2, 128, 2, false, false, true, true, true>;    // causal order without L2 sections
  using Pin = PrefillWsTiles<128, 2, 128, 2, true, true, false, true, true>;      // the softmax under the own P V
  using EarlyPvWait = PrefillWsTiles<128, 2, 128, 2, true, false, false, true, true>;  // the wait where ptxas puts it
  using Ascending = PrefillWsTiles<128, 2, 128, 2, true, false, true, false, true>;    // key tiles from the first up
  using RescaleFirst = PrefillWsTiles<128, 2, 128, 2, true, false, true, true>;        // O rescaled, then P packed
  using Branchless = PrefillWsTiles<128, 2, 128, 2, true, false, true, true, true, true>;  // O rescaled every step
};
template <>
struct PrefillWsVariants<256> {
  using N64 = PrefillWsTiles<256, 2, 64, 2>;  // the cp.async kernel's 64-key tiles: 192 KiB
  using Descending = PrefillWsTiles<256, 2, 80, 2, true, false, false, true>;        // key tiles from the last down
  using PackFirst = PrefillWsTiles<256, 2, 80, 2, true, false, false, false, true>;  // P packed first: within noise
};

// Threads, registers and shared memory of a PrefillWsTiles (consumers first, then the producer).
template <class Cfg>
struct PrefillWsTraits : Cfg {
  static constexpr int kD = Cfg::kD, kBlockN = Cfg::kBlockN, kStages = Cfg::kStages;
  static constexpr int kConsumerWarpgroups = Cfg::kConsumerWarpgroups;
  static constexpr int kBlockM = 64 * kConsumerWarpgroups;
  static constexpr int kConsumerWarps = 4 * kConsumerWarpgroups;
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr int kThreads = kConsumerThreads + 128;
  // setmaxnreg budgets (FlashAttention-3's, as kernels/cute/fmha.py REGISTER_SPLITS): the
  // split must fit the 64K-register file, 128 * (warpgroups * consumer + producer) <= 65536.
  static constexpr int kConsumerRegs = kConsumerWarpgroups == 3 ? 160 : 240;
  static constexpr int kProducerRegs = kConsumerWarpgroups == 3 ? 32 : 24;
  static_assert(kConsumerWarpgroups == 2 || kConsumerWarpgroups == 3, "two or three consumer warpgroups");
  static_assert(128 * (kConsumerWarpgroups * kConsumerRegs + kProducerRegs) <= 65536, "register split");
  static_assert(kD == 64 || kD == 128 || kD == 256, "head_dim");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "P V takes keys 16 at a time");
  static_assert(kStages >= 2, "a ring of at least two stages");
  // Shared memory: Q as one Sw128Tile<kD, 64> per consumer warpgroup (the box its O leaves
  // through, too), then the K ring, the V ring (Sw128Tile<kD, kBlockN> each), then the
  // mbarriers: Q full, K full / empty, V full / empty per stage. Every tile is a multiple of
  // 1024 bytes, so each stays on the swizzle pattern's 1024-byte alignment.
  static constexpr int kQTileElems = 64 * kD;
  static constexpr int kKVTileElems = kBlockN * kD;
  static constexpr int kQBytes = kConsumerWarpgroups * kQTileElems * 2;
  static constexpr int kKVBytes = kKVTileElems * 2;
  static_assert(kKVBytes % 1024 == 0, "K / V tiles keep the 1024-byte swizzle alignment");
  static constexpr int kBarrierOffset = kQBytes + 2 * kStages * kKVBytes;
  static constexpr int kBarriers = 1 + 4 * kStages;
  static constexpr int kSmemBytes = 1024 + kBarrierOffset + 8 * kBarriers;  // 1024: base alignment slack
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per CTA on sm_90");
};

template <class Cfg>
struct PrefillTraits : Cfg {
  static constexpr int kD = Cfg::kD;
  static constexpr int kThreads = Cfg::kWarps * 32;
  static constexpr int kBlockM = Cfg::kWarps * 16 * Cfg::kMT;
  // Padded rows for the warp-level math; packed swizzled rows for WGMMA, whose tiles need
  // a 1024-byte aligned base (the kernel rounds the dynamic smem pointer up).
  static constexpr int kRowElems = Cfg::kWgmma ? kD : smem_stride<kD>();
  static constexpr int kTileElems = Cfg::kBlockN * kRowElems;
  static constexpr int kAlignSlack = Cfg::kWgmma ? 1024 : 0;
  static constexpr int kSmemBytes = (kBlockM * kRowElems + 2 * Cfg::kStages * kTileElems) * 2 + kAlignSlack;
};

}  // namespace kernels::attention
