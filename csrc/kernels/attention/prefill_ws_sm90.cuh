// Warp-specialized Hopper prefill (sm_90a): dense Q [B, Sq, Hq, D] on contiguous K / V
// [B, Sk, Hkv, D], or packed ragged Q [total_q, Hq, D] (cu_seqlens_q) on paged K / V
// [pages, page_size, Hkv, D] (kPaged); TMA in, WGMMA, TMA out. The schedule is the CuTe-DSL ladder's K8
// (kernels/k8.py; docs/worklog/k5.md .. k8.md) written with the csrc building blocks. No torch.
//
// A CTA owns one query tile (64 rows per consumer warpgroup) of one query head; its K / V come
// from kv head = head / group (GQA). Threads: the consumer warpgroups first, then one producer
// warpgroup (PrefillWsTraits, configs.cuh).
//   Producer   setmaxnreg down to 24 (32 with three consumers); one thread of its first warp
//              issues every load: Q once (one box per consumer warpgroup with rows below Sq, all
//              on q_full), then K_0, and for n >= 1 K_n before V_{n-1} (the order the consumers
//              need them in), each into stage n % kStages of its ring after waiting for that
//              stage's `empty` mbarrier; TMA zero-fills rows past Sq / Sk and completes `full`.
//   Consumers  setmaxnreg up to 240 (160); warpgroup w owns rows 64 w .. 64 w + 63.
//              Tile 0: S_0 = Q K_0^T, mask, softmax, P_0 (no turn).
//              Tile n >= 1 (the pipelined step, K7): wait for this warpgroup's turn (a named
//              barrier the previous warpgroup opened, K6's ping-pong), issue S_n = Q K_n^T and
//              O += P_{n-1} V_{n-1} back to back, pass the turn; wgmma.wait_group 1 (S_n is
//              back, P V still runs), free K_n, mask (only on the tiles that need it, K8),
//              online softmax of S_n under the P V; wait_group 0, free V_{n-1}, P_n -> registers
//              (kPackBeforeRescale), rescale O (lazily: only when a row's max grew by more than
//              2^8, PrefillSoftmax).
//              Then the last P V, O / rowsum -> the warpgroup's Q tile in shared memory (its last
//              S has completed) -> one TMA store per warpgroup (rows past Sq clipped), LSE.
// Tile n above is the n-th step's: with kDescendingKv (dense K / V) the steps visit the key tiles
// from the last down, so the masked ones (diagonal, end of the keys) come first (kv_of).
// Grid: one linear index, mapped to a tile by prefill_ws_tile (causal: longest tiles first, in
// L2 sections of heads where the configuration asks for them); paged: (sequence, query tile)
// entries found from cu_seqlens_q on the device (packed_tile), query heads fastest.
// Paged K / V: a tile of kBlockN keys is one box from one page (page_size a multiple of
// kBlockN) or page_size-row boxes per 64-column panel from kBlockN / page_size pages, issued by
// the producer from the page table; pages past the sequence's keys are not loaded. Rows past
// the sequence's last key then hold whatever the stage or the page held: K's scores are
// masked (a select, so even NaN goes), and V's rows are zeroed in shared memory before the
// last P V (0 * NaN would not vanish). A 64-row O box that would cross the sequence's end (into
// the next sequence's rows) is stored from registers row by row instead of by TMA.
//
// Shared-memory tiles are Sw128Tile (wgmma_math.cuh): 64-column (128-byte) panels in the
// hardware's 128-byte swizzle, which TMA writes and WGMMA descriptors read as they are. The
// 5-D tensor map (d % 64, token, d / 64, head, batch) makes one box a whole panelled tile.
//
// Debugging a hang (a barrier waited for that nobody completes): build with
// -DKERNELS_PREFILL_WS_WATCHDOG=<spins> (e.g. 100000000): every mbarrier wait then gives up
// after that many failed polls, prints the block, thread, barrier and parity, and traps, so
// the launch fails with an error instead of hanging. Not for production: printf is a call,
// and with a call in the kernel ptxas serializes the WGMMAs (C7510) and spills.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../common/launch.cuh"
#include "../common/mbarrier.cuh"
#include "../common/sm90.cuh"
#include "../common/tma.cuh"
#include "prefill_kernel.cuh"  // PrefillSoftmax, pack_p_fragments, WgmmaMath, row_lse

#if defined(KERNELS_PREFILL_WS_WATCHDOG) && KERNELS_PREFILL_WS_WATCHDOG > 0
#include <cstdio>
#endif

namespace kernels::attention {

// The kernel's arguments: the four tensor maps (built per call, never cached) and what the
// consumers need besides. Passed as a __grid_constant__ parameter, so the maps' addresses are
// parameter-space addresses the TMA instructions take directly.
struct PrefillWsParams {
  CUtensorMap q, k, v, o;  // 5-D (d % 64, token, d / 64, head, batch); boxes: 64 rows (q, o), kBlockN (k, v)
  float* lse = nullptr;    // optional [B, Hq, Sq]
  int64_t lse_batch_stride = 0, lse_head_stride = 0, lse_token_stride = 0;
  int batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, group = 1;
  int q_tiles = 0;  // ceil(Sq / kBlockM)
  float scale_log2 = 1.f;
  bool causal = false;
  int l2_section = 0;  // causal, kL2Sections: (head, batch) pairs per section (0: no sections)
  // Packed Q on paged K / V (kPaged): the maps' token dimension is total_q (q, o) or a page's
  // rows (k, v), their batch dimension 1 or the pages.
  const int* cu_seqlens_q = nullptr;  // [batch + 1]
  int total_q = 0;                    // rows of q / o
  const int* seqlens_k = nullptr;     // [batch]
  const int* page_table = nullptr;    // [batch, page_table_batch_stride]
  int64_t page_table_batch_stride = 0;
  int page_size = 0;
  int max_pages = 0;       // a seqlens_k entry outside [0, max_pages * page_size] gives NaN rows
  void* o_rows = nullptr;  // O boxes cut by a sequence's end are stored through this, row by row
  int64_t o_token_stride = 0, o_head_stride = 0;
};

// The tile CTA `idx` of the grid computes. Causal with l2_section > 0: section s holds the
// (head, batch) pairs [s * l2_section, ...) (the last may hold fewer), its query tiles from the
// last (longest) down and its pairs fastest. Causal without: every pair's longest tile first,
// heads fastest. Otherwise query tiles fastest (neighbouring CTAs share K / V in L2).
struct PrefillWsTile {
  int m_block, head, batch;
  int q_start = 0, q_len = 0, k_len = 0;  // the sequence's first row in q / o, its rows and keys
  bool k_len_ok = true;                   // paged: seqlens_k in range (else no key is read, O and LSE NaN)
};

__host__ __device__ inline PrefillWsTile prefill_ws_tile(const PrefillWsParams& p, int idx) {
  if (p.causal && p.l2_section > 0) {
    const int pairs = p.heads_q * p.batch;
    const int first = idx / (p.l2_section * p.q_tiles) * p.l2_section;
    const int size = p.l2_section < pairs - first ? p.l2_section : pairs - first;
    const int within = idx - first * p.q_tiles;
    const int pair = first + within % size;
    return {p.q_tiles - 1 - within / size, pair % p.heads_q, pair / p.heads_q};
  }
  if (p.causal) {
    const int rest = idx / p.heads_q;
    return {p.q_tiles - 1 - rest / p.batch, idx % p.heads_q, rest % p.batch};
  }
  const int rest = idx / p.q_tiles;
  return {idx % p.q_tiles, rest % p.heads_q, rest / p.heads_q};
}

// (head, batch) pairs per causal section: query heads whose K and V (seqlen_k keys of
// head_dim elements of element_bytes each, shared by a group's heads) fit in kL2KvBytes,
// rounded down to a power of two, at least one, at most the pairs there are.
inline int prefill_ws_l2_section(int64_t seqlen_k, int head_dim, int element_bytes, int group, int pairs) {
  const int64_t kv_head_bytes = seqlen_k * 2 * head_dim * element_bytes;
  const int64_t kv_heads = kv_head_bytes > 0 ? kL2KvBytes / kv_head_bytes : pairs;
  const int64_t fit = (kv_heads > 1 ? kv_heads : 1) * group;
  int section = 1;
  while (int64_t(section) * 2 <= fit && section * 2 <= pairs) section *= 2;
  return section;
}

namespace prefill_ws {

// Named barriers (id 0 is __syncthreads): warpgroup w issues its GEMMs after a sync on
// kTurnBarrier0 + w, which the previous warpgroup in the round opens with an arrive (both
// count the two warpgroups' 256 threads); kEpilogueBarrier0 + w gathers warpgroup w's 128
// threads once its O tile is staged for the TMA store.
constexpr int kTurnBarrier0 = 1;
constexpr int kEpilogueBarrier0 = 4;
// Paged: every consumer thread, once V's rows past the sequence's keys are zeroed.
constexpr int kVTailBarrier = 7;

// A 4-byte shared-memory store by shared-window address (a generic pointer into the aligned
// dynamic shared memory would compile to a generic ST).
__device__ __forceinline__ void st_shared(uint32_t addr, uint32_t value) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(value) : "memory");
}
__device__ __forceinline__ void st_shared_zero16(uint32_t addr) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};" ::"r"(addr), "r"(0) : "memory");
}

// mbarrier_wait (common/mbarrier.cuh), or with KERNELS_PREFILL_WS_WATCHDOG a bounded one that
// reports which wait never completed and traps.
__device__ __forceinline__ void wait(uint64_t* bar, uint32_t parity, const char* what) {
#if defined(KERNELS_PREFILL_WS_WATCHDOG) && KERNELS_PREFILL_WS_WATCHDOG > 0
  uint32_t done = 0;
  for (long long spins = 0; !done; ++spins) {
    KERNELS_SM90_ASM(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n" : "=r"(
            done) : "r"(smem_addr(bar)),
        "r"(parity) : "memory");
    if (!done && spins > KERNELS_PREFILL_WS_WATCHDOG) {
      printf("attn_prefill_ws_kernel watchdog: block %d thread %d waits on %s (parity %u) forever\n",
             static_cast<int>(blockIdx.x), static_cast<int>(threadIdx.x), what, parity);
      __trap();
    }
  }
#else
  (void)what;
  mbarrier_wait(bar, parity);
#endif
}

// Keeps registers that an in-flight WGMMA reads or writes where they are until this point (an
// empty asm: no instruction): after a wgmma.wait_group, the accumulators and the P fragment
// of the retired group are plain registers again, and nothing moves across the wait.
template <int N>
__device__ __forceinline__ void pin(float (&x)[1][N][4]) {
  wgmma_fence_operand(reinterpret_cast<float (&)[N * 4]>(x));
}
template <int N>
__device__ __forceinline__ void pin(uint32_t (&x)[1][N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(x[0][i][j])::"memory");
}

}  // namespace prefill_ws

template <class Cfg, class Element, bool kPaged>
struct PrefillWs {
  using T = PrefillWsTraits<Cfg>;
  static constexpr int kD = T::kD, kBlockM = T::kBlockM, kBlockN = T::kBlockN, kStages = T::kStages;
  static constexpr int kWarpgroups = T::kConsumerWarpgroups;
  static constexpr int kNT = kBlockN / 8, kDT = kD / 8;
  // One consumer warpgroup's math: S = Q[its 64 rows] K^T from shared memory, O += P V with P
  // from registers; the accumulators are mma.sync C fragments (wgmma_math.cuh).
  using Math = WgmmaMath<Element, kD, 64, kBlockN>;
  using Softmax = PrefillSoftmax<1, kNT, kDT, /*kLazy=*/true>;
  using QTile = Sw128Tile<kD, 64>;

  // The CTA's shared memory (PrefillWsTraits): Q tiles, K ring, V ring, mbarriers.
  struct Smem {
    uint8_t* base;  // 1024-byte aligned
    __device__ __forceinline__ Element* q(int wg) const {
      return reinterpret_cast<Element*>(base) + wg * T::kQTileElems;
    }
    __device__ __forceinline__ Element* k(int stage) const {
      return reinterpret_cast<Element*>(base + T::kQBytes) + stage * T::kKVTileElems;
    }
    __device__ __forceinline__ Element* v(int stage) const { return k(kStages + stage); }
    __device__ __forceinline__ uint64_t* barriers() const {
      return reinterpret_cast<uint64_t*>(base + T::kBarrierOffset);
    }
    __device__ __forceinline__ uint64_t* q_full() const { return barriers(); }
    __device__ __forceinline__ uint64_t* k_full(int stage) const { return barriers() + 1 + stage; }
    __device__ __forceinline__ uint64_t* k_empty(int stage) const { return barriers() + 1 + kStages + stage; }
    __device__ __forceinline__ uint64_t* v_full(int stage) const { return barriers() + 1 + 2 * kStages + stage; }
    __device__ __forceinline__ uint64_t* v_empty(int stage) const { return barriers() + 1 + 3 * kStages + stage; }

    // One thread: full barriers complete on the producer's arrival plus the TMA bytes; empty
    // ones on one arrival per consumer warp.
    __device__ __forceinline__ void init_barriers() const {
      mbarrier_init(q_full(), 1);
      for (int stage = 0; stage < kStages; ++stage) {
        mbarrier_init(k_full(stage), 1);
        mbarrier_init(v_full(stage), 1);
        mbarrier_init(k_empty(stage), T::kConsumerWarps);
        mbarrier_init(v_empty(stage), T::kConsumerWarps);
      }
      fence_barrier_init();
    }
  };

  // The key tile the n-th step of a CTA with n_tiles tiles visits: n, or from the last down.
  static constexpr bool kDescending = Cfg::kDescendingKv && !kPaged;
  __device__ __forceinline__ static int kv_of(int n, int n_tiles) { return kDescending ? n_tiles - 1 - n : n; }

  // Ring slot of KV tile n: stage n % kStages, in its (n / kStages)-th use (the phase parity
  // a consumer waits for on `full`; the producer waits for the one before on `empty`).
  __device__ __forceinline__ static int stage_of(int n) { return n % kStages; }
  __device__ __forceinline__ static uint32_t parity_of(int n) { return static_cast<uint32_t>(n / kStages) & 1u; }

  using Tile = PrefillWsTile;

  // Packed Q: sequence b's rows [start, start + result) of q / o, clamped to [0, total_q] so
  // that offsets the caller did not check cannot move a row outside q / o.
  __device__ __forceinline__ static int packed_rows(const PrefillWsParams& p, int b, int& start) {
    start = min(max(p.cu_seqlens_q[b], 0), p.total_q);
    return min(max(p.cu_seqlens_q[b + 1], start), p.total_q) - start;
  }

  // Packed Q: the CTA's (sequence, query tile), found from cu_seqlens_q on the device, so the
  // host never reads the lengths (no device->host copy; the launch can be graph-captured).
  // Tiles are numbered sequence by sequence, each sequence's from its last (the longest under
  // the causal mask) down; grid index / heads_q is the tile's number. Every warp finds it on
  // its own (the same loads, the same answer, no barrier): lane i counts the tiles of a
  // contiguous share of the sequences, a prefix sum over the lanes picks the share holding the
  // tile, and a walk through that share (L1 hits) the sequence. m_block -1: no such tile (the
  // host sizes the grid by a bound).
  __device__ __forceinline__ static Tile packed_tile(const PrefillWsParams& p) {
    const int idx = static_cast<int>(blockIdx.x) / p.heads_q, head = static_cast<int>(blockIdx.x) % p.heads_q;
    const int lane = threadIdx.x % 32;
    const int share = (p.batch + 31) / 32;
    const int share_begin = min(lane * share, p.batch), share_end = min(share_begin + share, p.batch);
    int start = 0, tiles = 0;
    for (int b = share_begin; b < share_end; ++b) tiles += (packed_rows(p, b, start) + kBlockM - 1) / kBlockM;
    int through = tiles;  // tiles of the shares up to this lane's
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const int below = __shfl_up_sync(0xffffffffu, through, offset);
      if (lane >= offset) through += below;
    }
    const unsigned holders = __ballot_sync(0xffffffffu, through > idx);
    if (holders == 0) return {-1, head, 0};
    const int holder = __ffs(holders) - 1;
    int first = __shfl_sync(0xffffffffu, through - tiles, holder);  // the number of b's first tile
    int b = __shfl_sync(0xffffffffu, share_begin, holder);
    int rows = packed_rows(p, b, start), n = (rows + kBlockM - 1) / kBlockM;
    while (first + n <= idx) {
      first += n;
      rows = packed_rows(p, ++b, start);
      n = (rows + kBlockM - 1) / kBlockM;
    }
    // A length the page table cannot hold would read other sequences' page ids (or past the
    // table): as in the cp.async kernel, such a sequence reads no key and writes NaN.
    const int k_len = p.seqlens_k[b];
    const bool ok = k_len >= 0 && static_cast<int64_t>(k_len) <= static_cast<int64_t>(p.max_pages) * p.page_size;
    return {n - 1 - (idx - first), head, b, start, rows, ok ? k_len : 0, ok};
  }

  __device__ __forceinline__ static Tile tile_of(const PrefillWsParams& p) {
    if constexpr (kPaged) {
      return packed_tile(p);
    } else {
      Tile t = prefill_ws_tile(p, static_cast<int>(blockIdx.x));
      t.q_len = p.seqlen_q;
      t.k_len = p.seqlen_k;
      return t;
    }
  }

  // KV tiles the CTA visits: under the causal mask, up to the last one its last row sees.
  __device__ __forceinline__ static int kv_tiles(const PrefillWsParams& p, const Tile& t) {
    int keys = t.k_len;
    if (p.causal) {
      const int last_row = min(t.m_block * kBlockM + kBlockM, t.q_len) - 1;
      keys = max(0, min(t.k_len, last_row + t.k_len - t.q_len + 1));
    }
    return (keys + kBlockN - 1) / kBlockN;
  }

  // Tiles [0, result) are seen whole by every row from first_row on: entirely below Sk and,
  // under the causal mask, at or left of first_row's diagonal. They need no mask code.
  __device__ __forceinline__ static int mask_free_tiles(const PrefillWsParams& p, const Tile& t, int first_row,
                                                        int n_tiles) {
    int n = t.k_len / kBlockN;
    if (p.causal) n = min(n, max(0, first_row + t.k_len - t.q_len + 1) / kBlockN);
    return min(n, n_tiles);
  }

  // ---- producer: one thread ------------------------------------------------------------------
  __device__ __forceinline__ static void load_kv(const PrefillWsParams& p, const CUtensorMap* map, Element* dst,
                                                 uint64_t* full, uint64_t* empty, int n, int kv, int hkv,
                                                 const Tile& t) {
    prefill_ws::wait(empty, parity_of(n) ^ 1u, "a K / V stage's empty barrier (producer)");
    if constexpr (!kPaged) {
      mbarrier_arrive_expect_tx(full, T::kKVBytes);
      tma_load_5d(dst, map, full, 0, kv * kBlockN, 0, hkv, t.batch);
    } else {
      const int* pages = p.page_table + t.batch * p.page_table_batch_stride;
      const int key0 = kv * kBlockN;
      if (p.page_size >= kBlockN) {  // the tile lies in one page: one box of kBlockN rows
        mbarrier_arrive_expect_tx(full, T::kKVBytes);
        tma_load_5d(dst, map, full, 0, key0 % p.page_size, 0, hkv, pages[key0 / p.page_size]);
      } else {  // page_size-row boxes, one per page holding keys below k_len and 64-column panel
        const int first_page = key0 / p.page_size;
        const int pages_here = min(kBlockN / p.page_size, (t.k_len - key0 + p.page_size - 1) / p.page_size);
        mbarrier_arrive_expect_tx(full, pages_here * (kD / 64) * p.page_size * 64 * static_cast<int>(sizeof(Element)));
        for (int i = 0; i < pages_here; ++i) {
          const int page = pages[first_page + i];
#pragma unroll
          for (int panel = 0; panel < kD / 64; ++panel) {
            tma_load_5d(dst + panel * kBlockN * 64 + i * p.page_size * 64, map, full, 0, 0, panel, hkv, page);
          }
        }
      }
    }
  }

  __device__ __forceinline__ static void produce(const PrefillWsParams& p, const Smem& s, const Tile& t, int n_tiles) {
    prefetch_tensor_map(&p.q);
    prefetch_tensor_map(&p.k);
    prefetch_tensor_map(&p.v);
    prefetch_tensor_map(&p.o);
    // TMA counts whole boxes, the zero-filled rows past Sq included. A warpgroup whose rows
    // all lie past Sq gets no box (its results are never stored).
    // Packed: rows past the sequence's end are the next sequence's (or zeros past total_q).
    const int row0 = t.m_block * kBlockM;
    const int q_boxes = min(kWarpgroups, (t.q_len - row0 + 63) / 64);
    mbarrier_arrive_expect_tx(s.q_full(), q_boxes * T::kQTileElems * static_cast<int>(sizeof(Element)));
    for (int wg = 0; wg < q_boxes; ++wg) {
      tma_load_5d(s.q(wg), &p.q, s.q_full(), 0, t.q_start + row0 + 64 * wg, 0, t.head, kPaged ? 0 : t.batch);
    }
    if (n_tiles <= 0) return;
    const int hkv = t.head / p.group;
    const auto load_k = [&](int n) {
      load_kv(p, &p.k, s.k(stage_of(n)), s.k_full(stage_of(n)), s.k_empty(stage_of(n)), n, kv_of(n, n_tiles), hkv, t);
    };
    const auto load_v = [&](int n) {
      load_kv(p, &p.v, s.v(stage_of(n)), s.v_full(stage_of(n)), s.v_empty(stage_of(n)), n, kv_of(n, n_tiles), hkv, t);
    };
    load_k(0);
    for (int n = 1; n < n_tiles; ++n) {
      load_k(n);
      load_v(n - 1);
    }
    load_v(n_tiles - 1);
  }

  // ---- consumers: one warpgroup's state ------------------------------------------------------
  struct Consumer {
    int wg;        // consumer warpgroup: rows 64 wg .. 64 wg + 63 of the CTA's tile
    int lane;      // lane in the warp
    int row;       // query row of this thread's first fragment row (the second is row + 8)
    int limit[2];  // keys >= limit[h] are masked for fragment row h (Sk, or the causal diagonal)
    int n_tiles;   // key tiles this CTA visits
    float acc_o[1][kDT][4];
    uint32_t p_frag[1][kNT / 2][4];  // P of the previous tile: the A operand of its P V
    Softmax softmax;

    __device__ __forceinline__ void release(uint64_t* empty) const {
      if (lane == 0) mbarrier_arrive(empty);
    }
    __device__ __forceinline__ void wait_turn() const { named_barrier_sync(prefill_ws::kTurnBarrier0 + wg, 256); }
    __device__ __forceinline__ void pass_turn() const {
      const int next = wg + 1 < kWarpgroups ? wg + 1 : 0;
      named_barrier_arrive(prefill_ws::kTurnBarrier0 + next, 256);
    }

    // Scores of keys past a row's limit become -inf: one compare and select per score against
    // compile-time column offsets (thread column 2 (lane % 4) folded into the limit).
    __device__ __forceinline__ void mask(float (&s)[1][kNT][4], int n) const {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int lim = limit[h] - n * kBlockN - 2 * (lane % 4);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            if (8 * nt + c >= lim) s[0][nt][2 * h + c] = -INFINITY;
          }
      }
    }

    // Step 0 (always masked: its tile may be partial or cross the diagonal); O is still zero.
    __device__ __forceinline__ void first_tile(const Smem& s, float scale_log2) {
      prefill_ws::wait(s.k_full(0), 0, "K_0's full barrier");
      float acc_s[1][kNT][4];
      Math::qk_issue(acc_s, s.q(wg), s.k(0));
      wgmma_wait<0>();
      prefill_ws::pin(acc_s);
      release(s.k_empty(0));
      mask(acc_s, kv_of(0, n_tiles));
      float correction[1][2];
      softmax.exponentiate(acc_s, correction, scale_log2);
      pack_p_fragments<Element, 1, kNT>(p_frag, acc_s);
    }

    // Step n >= 1: S_n and P_{n-1} V_{n-1} issued in this warpgroup's turn, the softmax of S_n
    // under the P V.
    template <bool kMasked>
    __device__ __forceinline__ void step(const Smem& s, int n, float scale_log2) {
      const int stage = stage_of(n), prev = stage_of(n - 1);
      prefill_ws::wait(s.k_full(stage), parity_of(n), "a K stage's full barrier");
      wait_turn();
      float acc_s[1][kNT][4];
      Math::qk_issue(acc_s, s.q(wg), s.k(stage));
      prefill_ws::wait(s.v_full(prev), parity_of(n - 1), "a V stage's full barrier");
      Math::pv_issue(acc_o, p_frag, s.v(prev));
      pass_turn();
      wgmma_wait<1>();  // S_n is back; P_{n-1} V_{n-1} may still run
      prefill_ws::pin(acc_s);
      if constexpr (!Cfg::kPinPvWait) release(s.k_empty(stage));
      if constexpr (kMasked) mask(acc_s, kv_of(n, n_tiles));
      float correction[1][2];
      const bool moved = softmax.exponentiate(acc_s, correction, scale_log2);
      if constexpr (Cfg::kPinPvWait) {
        // ptxas keeps mbarrier arrives and wgmma.wait_group in order, but hoists the wait for
        // P V above the exponentials it does not depend on (none then runs under the P V); a
        // release that depends on the row sums holds the wait behind them. True for every sum,
        // NaN included: a skipped release would leave the producer waiting.
        const float total = softmax.row_sum[0][0] + softmax.row_sum[0][1];
        if (!(total < 0.f)) release(s.k_empty(stage));
      }
      if constexpr (Cfg::kPvWaitAfterRowScale) {
        // The same hold behind the row factors only, K's release left above: an arrive that
        // never runs (a factor is 1 or an exp2, so the sum is >= 0 or NaN), which ptxas keeps
        // in front of the wait.
        if (correction[0][0] + correction[0][1] < 0.f) release(s.k_empty(stage));
      }
      wgmma_wait<0>();  // P V retired: O and the P fragment are registers again
      prefill_ws::pin(acc_o);
      prefill_ws::pin(p_frag);
      release(s.v_empty(prev));
      if constexpr (Cfg::kPackBeforeRescale) {  // the packs then mix with the exponentials (configs.cuh)
        pack_p_fragments<Element, 1, kNT>(p_frag, acc_s);
        Softmax::rescale(acc_o, correction, moved || Cfg::kBranchlessRescale);
      } else {
        Softmax::rescale(acc_o, correction, moved);
        pack_p_fragments<Element, 1, kNT>(p_frag, acc_s);
      }
    }

    // Paged: V's rows [valid, kBlockN) of the last tile, past the sequence's keys, hold what the
    // stage or the page held; P is 0 there, but 0 * NaN is not. Every consumer thread zeroes a
    // share (the rows are contiguous in each 64-column panel: the swizzle moves 16-byte chunks
    // within a row), then all meet before any warpgroup's P V reads them.
    __device__ __forceinline__ static void zero_v_tail(Element* v, int valid) {
      const uint32_t tail = smem_addr(v) + valid * 64 * static_cast<int>(sizeof(Element));
      const int chunks = (kBlockN - valid) * 8;  // 16-byte chunks per panel
      for (int i = threadIdx.x; i < chunks * (kD / 64); i += T::kConsumerThreads) {
        const int panel = i / chunks;
        prefill_ws::st_shared_zero16(tail + panel * kBlockN * 64 * static_cast<int>(sizeof(Element)) +
                                     (i - panel * chunks) * 16);
      }
      fence_proxy_async_shared();  // the generic-proxy writes, visible to WGMMA
      named_barrier_sync(prefill_ws::kVTailBarrier, T::kConsumerThreads);
    }

    __device__ __forceinline__ void last_pv(const Smem& s, int n, int k_len) {
      prefill_ws::wait(s.v_full(stage_of(n)), parity_of(n), "the last V stage's full barrier");
      if constexpr (kPaged) {
        if (k_len - n * kBlockN < kBlockN) zero_v_tail(s.v(stage_of(n)), k_len - n * kBlockN);
      }
      Math::pv_issue(acc_o, p_frag, s.v(stage_of(n)));
      wgmma_wait<0>();
      prefill_ws::pin(acc_o);
      prefill_ws::pin(p_frag);
      release(s.v_empty(stage_of(n)));
    }

    // O / rowsum -> this warpgroup's Q tile (free: its last S completed before its last P V,
    // which every warp of the warpgroup issued) -> one TMA store; LSE from the quad's lane 0.
    // A row that saw no key has rowsum 0: zeros and LSE -inf.
    __device__ __forceinline__ void epilogue(const PrefillWsParams& p, const Smem& s, const Tile& t) {
      softmax.reduce_sums();
      const int wg_row0 = t.m_block * kBlockM + 64 * wg;
      if (kPaged && wg_row0 + 64 > t.q_len) {
        store_rows(p, t);
        return;
      }
      Element* sO = s.q(wg);
      const uint32_t sO_addr = smem_addr(sO);
      const int warp_row = 16 * ((threadIdx.x / 32) % 4) + lane / 4;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float inv = inverse_row_sum(h, t);
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          // 4-byte stores: the 8 rows of a store land in 8 different 16-byte bank groups (swizzle)
          const uint32_t offset = (QTile::offset(warp_row + 8 * h, dt) + 2 * (lane % 4)) * sizeof(Element);
          prefill_ws::st_shared(sO_addr + offset,
                                pack2<Element>(acc_o[0][dt][2 * h] * inv, acc_o[0][dt][2 * h + 1] * inv));
        }
      }
      fence_proxy_async_shared();  // the generic-proxy writes, visible to the TMA store
      named_barrier_sync(prefill_ws::kEpilogueBarrier0 + wg, 128);
      const bool store_thread = threadIdx.x % 128 == 0 && wg_row0 < t.q_len;
      if (store_thread) {
        tma_store_5d(&p.o, sO, 0, t.q_start + wg_row0, 0, t.head, kPaged ? 0 : t.batch);
        tma_store_commit();
      }
      store_lse(p, t);
      if (store_thread) tma_store_wait_read<0>();  // shared memory must outlive the store's reads
    }

    // O's factor for fragment row h: 1 / rowsum, 0 for a row that saw no key, NaN where the
    // sequence's seqlens_k was out of range. rowsum >= 1 once a row saw a key (the element that
    // set its max counts 1): the approximate reciprocal needs no slow path (IEEE division has one).
    __device__ __forceinline__ float inverse_row_sum(int h, const Tile& t) const {
      const float sum = softmax.row_sum[0][h];
      return !t.k_len_ok ? NAN : sum > 0.f ? __fdividef(1.f, sum) : 0.f;
    }

    // LSE of this thread's two rows (from the quad's lane 0), rows past the sequence skipped.
    __device__ __forceinline__ void store_lse(const PrefillWsParams& p, const Tile& t) const {
      if (p.lse == nullptr || lane % 4 != 0) return;
      float* lse = p.lse + t.batch * p.lse_batch_stride + t.head * p.lse_head_stride;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (row + 8 * h < t.q_len) {
          lse[static_cast<int64_t>(t.q_start + row + 8 * h) * p.lse_token_stride] =
              t.k_len_ok ? row_lse(softmax.row_max[0][h], softmax.row_sum[0][h], p.scale_log2) : NAN;
        }
      }
    }

    // Paged: a warpgroup whose 64 rows cross the sequence's end stores its rows below it from
    // registers (a TMA box would overwrite the next sequence's first rows).
    __device__ __forceinline__ void store_rows(const PrefillWsParams& p, const Tile& t) const {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (row + 8 * h >= t.q_len) continue;
        const float inv = inverse_row_sum(h, t);
        Element* o = static_cast<Element*>(p.o_rows) +
                     static_cast<int64_t>(t.q_start + row + 8 * h) * p.o_token_stride +
                     static_cast<int64_t>(t.head) * p.o_head_stride + 2 * (lane % 4);
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          *reinterpret_cast<uint32_t*>(o + 8 * dt) =
              pack2<Element>(acc_o[0][dt][2 * h] * inv, acc_o[0][dt][2 * h + 1] * inv);
        }
      }
      store_lse(p, t);
    }
  };

  __device__ __forceinline__ static void consume(const PrefillWsParams& p, const Smem& s, const Tile& t, int n_tiles,
                                                 int warp, int lane) {
    Consumer c;
    c.wg = warp / 4;
    c.lane = lane;
    const int wg_row0 = t.m_block * kBlockM + 64 * c.wg;
    c.row = wg_row0 + 16 * (warp % 4) + lane / 4;  // within the sequence
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      c.limit[h] = p.causal ? min(t.k_len, c.row + 8 * h + t.k_len - t.q_len + 1) : t.k_len;
    }
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) c.acc_o[0][dt][e] = 0.f;
    c.softmax.init();
    c.n_tiles = n_tiles;
    prefill_ws::wait(s.q_full(), 0, "Q's full barrier");
    if (c.wg == 0) named_barrier_arrive(prefill_ws::kTurnBarrier0, 256);  // the first turn
    if (n_tiles > 0) {
      c.first_tile(s, p.scale_log2);
      // Mask-free tiles (a compile-time branch: no mask code) and the masked ones, in the order
      // the steps visit them.
      const int mask_free = mask_free_tiles(p, t, wg_row0, n_tiles);
      int n = 1;
      if constexpr (kDescending) {
        for (; n < n_tiles - mask_free; ++n) c.template step<true>(s, n, p.scale_log2);
        for (; n < n_tiles; ++n) c.template step<false>(s, n, p.scale_log2);
      } else {
        for (; n < mask_free; ++n) c.template step<false>(s, n, p.scale_log2);
        for (; n < n_tiles; ++n) c.template step<true>(s, n, p.scale_log2);
      }
      c.last_pv(s, n_tiles - 1, t.k_len);
    }
    c.epilogue(p, s, t);
  }
};

template <class Cfg, class Element, bool kPaged>
__global__ void __launch_bounds__(PrefillWsTraits<Cfg>::kThreads, 1)
    attn_prefill_ws_kernel(const __grid_constant__ PrefillWsParams p) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using K = PrefillWs<Cfg, Element, kPaged>;
  using T = typename K::T;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  const typename K::Smem s{
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023))};
  if (threadIdx.x == 0) s.init_barriers();
  __syncthreads();  // the barriers are initialised for every thread (and the TMA unit)

  // Broadcast from lane 0: the compiler then knows the warp index is warp-uniform.
  const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 32, 0);
  const int lane = threadIdx.x % 32;
  const typename K::Tile t = K::tile_of(p);
  if (kPaged && t.m_block < 0) return;  // past the last tile (every thread alike)
  const int n_tiles = K::kv_tiles(p, t);
  if (warp >= T::kConsumerWarps) {
    setmaxnreg_dec<T::kProducerRegs>();
    if (warp == T::kConsumerWarps && lane == 0) K::produce(p, s, t, n_tiles);
  } else {
    setmaxnreg_inc<T::kConsumerRegs>();
    K::consume(p, s, t, n_tiles, warp, lane);
  }
#endif
}

// ---- host ------------------------------------------------------------------------------------

// The extents of the TMA views: dense Q [batch, seqlen_q] and K / V [batch, seqlen_k] rows;
// packed Q one sequence of total_q rows, paged K / V num_pages blocks of page_size rows.
struct PrefillWsExtents {
  int64_t q_batch, q_tokens, kv_blocks, kv_tokens;
};
inline PrefillWsExtents prefill_ws_extents(const AttnParams& p) {
  if (p.page_table != nullptr) return {1, p.total_q, p.num_pages, p.page_size};
  return {p.batch, p.seqlen_q, p.batch, p.seqlen_k};
}

// Paged K / V: the kernel's page_size-row boxes must tile its kBlockN-key tiles, or one tile
// must lie in one page; 16-row boxes keep the 1024-byte swizzle alignment.
inline bool prefill_ws_pages_fit(int page_size, int block_n) {
  return page_size > 0 && page_size % 16 == 0 && (block_n % page_size == 0 || page_size % block_n == 0);
}

// Why the warp-specialized kernel cannot run this call (nullptr: it can); block_n: the
// configuration's key tile (default: PrefillWsConfig's for the head_dim). The device check
// (Hopper) is the caller's.
inline const char* prefill_ws_unsupported(const AttnParams& p, int block_n = 0) {
  const bool paged = p.page_table != nullptr;
  if (paged != (p.cu_seqlens_q != nullptr)) return "it takes dense Q on contiguous KV or packed Q on paged KV";
  if (p.mask != nullptr) return "it takes no boolean mask";
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return "head_dim must be 64, 128 or 256";
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  if (!aligned(p.q) || !aligned(p.k) || !aligned(p.v) || !aligned(p.o)) {
    return "q, k, v and out must be 16-byte aligned (TMA)";
  }
  if (paged) {
    if (block_n == 0)
      block_n = p.head_dim == 64    ? PrefillWsConfig<64>::kBlockN
                : p.head_dim == 128 ? PrefillWsConfig<128>::kBlockN
                                    : PrefillWsConfig<256>::kBlockN;
    if (p.total_q <= 0 || p.num_pages <= 0) return "total_q and num_pages must be set";
    if (!prefill_ws_pages_fit(p.page_size, block_n)) {
      return "page_size must be a multiple of 16 that divides its key tile, or a multiple of the tile";
    }
  }
  // Strides of dimensions longer than 1 in 16-byte units (TMA); the others are never stepped.
  const auto ok = [](int64_t size, int64_t stride) { return size <= 1 || (stride % 8 == 0 && stride > 0); };
  const PrefillWsExtents e = prefill_ws_extents(p);
  const bool q_ok = ok(e.q_batch, p.q_batch_stride) && ok(e.q_tokens, p.q_token_stride) &&
                    ok(p.heads_q, p.q_head_stride) && ok(e.q_batch, p.o_batch_stride) &&
                    ok(e.q_tokens, p.o_token_stride) && ok(p.heads_q, p.o_head_stride);
  const bool kv_ok = ok(e.kv_blocks, p.k_block_stride) && ok(e.kv_tokens, p.k_token_stride) &&
                     ok(p.heads_kv, p.k_head_stride) && ok(e.kv_blocks, p.v_block_stride) &&
                     ok(e.kv_tokens, p.v_token_stride) && ok(p.heads_kv, p.v_head_stride);
  if (!q_ok || !kv_ok) return "strides must be positive multiples of 8 elements (16 bytes, TMA)";
  return nullptr;
}

// [batch, tokens, heads, kD] (strides in elements, the last dim contiguous) as the 5-D TMA
// view (d % 64, token, d / 64, head, batch) in boxes of (64, box_rows, box_panels, 1, 1): one
// box of kD / 64 panels is one Sw128Tile<kD, box_rows>, rows past `tokens` zero-filled on loads
// and dropped on stores. Paged K / V: batch = pages, tokens = a page's rows.
template <int kD>
void make_prefill_ws_map(CUtensorMap* map, const void* ptr, AttnDtype dtype, int64_t batch, int64_t tokens,
                         int64_t heads, int64_t batch_stride, int64_t token_stride, int64_t head_stride, int box_rows,
                         const char* name, int box_panels = kD / 64) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  check<CudaError>(encode != nullptr, "prefill: cuTensorMapEncodeTiled is not available from the driver");
  // A dimension of length 1 is never stepped: any valid stride will do.
  const auto stride_bytes = [](int64_t size, int64_t stride) { return cuuint64_t(size <= 1 ? 16 : stride * 2); };
  // Length 0 (no keys) cannot be encoded; such a map is never loaded from.
  const cuuint64_t dims[5] = {64, cuuint64_t(tokens > 0 ? tokens : 1), kD / 64, cuuint64_t(heads), cuuint64_t(batch)};
  const cuuint64_t strides[4] = {stride_bytes(tokens, token_stride), 128, stride_bytes(heads, head_stride),
                                 stride_bytes(batch, batch_stride)};
  const cuuint32_t box[5] = {64, cuuint32_t(box_rows), cuuint32_t(box_panels), 1, 1};
  const cuuint32_t elem_strides[5] = {1, 1, 1, 1, 1};
  const CUresult res =
      encode(map, dtype == AttnDtype::kFP16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 5,
             const_cast<void*>(ptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  check<CudaError>(res == CUDA_SUCCESS, "prefill: cuTensorMapEncodeTiled rejected the tensor map of ", name, " [",
                   batch, ", ", tokens, ", ", heads, ", ", kD, "] (strides ", batch_stride, ", ", token_stride, ", ",
                   head_stride, " elements, box ", box_rows, " rows): CUresult ", int(res));
}

template <class Cfg, class Element = bf16>
void launch_prefill_ws(const AttnParams& p, cudaStream_t stream) {
  using T = PrefillWsTraits<Cfg>;
  check(p.dtype == ElementOps<Element>::kDtype, "prefill: params.dtype does not match the launched element type");
  check(p.head_dim == T::kD, "prefill: head_dim ", p.head_dim, " launched with a head_dim ", T::kD, " configuration");
  if (const char* why = prefill_ws_unsupported(p, T::kBlockN)) {
    throw ValueError(concat("prefill (warp-specialized kernel): ", why));
  }
  const bool paged = p.page_table != nullptr;
  if (p.batch == 0 || p.seqlen_q == 0 || p.heads_q == 0 || (paged && p.total_q == 0)) return;
  check(p.heads_kv > 0 && p.heads_q % p.heads_kv == 0 && p.group == p.heads_q / p.heads_kv,
        "prefill: heads_q must be group * heads_kv");

  PrefillWsParams kp;
  // K / V boxes: whole tiles, or (pages smaller than a tile) one page_size-row box per panel.
  const bool page_boxes = paged && p.page_size < T::kBlockN;
  const int kv_rows = page_boxes ? p.page_size : T::kBlockN, kv_panels = page_boxes ? 1 : T::kD / 64;
  const PrefillWsExtents e = prefill_ws_extents(p);
  make_prefill_ws_map<T::kD>(&kp.q, p.q, p.dtype, e.q_batch, e.q_tokens, p.heads_q, p.q_batch_stride, p.q_token_stride,
                             p.q_head_stride, 64, "q");
  make_prefill_ws_map<T::kD>(&kp.o, p.o, p.dtype, e.q_batch, e.q_tokens, p.heads_q, p.o_batch_stride, p.o_token_stride,
                             p.o_head_stride, 64, "out");
  make_prefill_ws_map<T::kD>(&kp.k, p.k, p.dtype, e.kv_blocks, e.kv_tokens, p.heads_kv, p.k_block_stride,
                             p.k_token_stride, p.k_head_stride, kv_rows, "k", kv_panels);
  make_prefill_ws_map<T::kD>(&kp.v, p.v, p.dtype, e.kv_blocks, e.kv_tokens, p.heads_kv, p.v_block_stride,
                             p.v_token_stride, p.v_head_stride, kv_rows, "v", kv_panels);
  if (paged) {
    kp.cu_seqlens_q = p.cu_seqlens_q;
    kp.total_q = p.total_q;
    kp.seqlens_k = p.seqlens_k;
    kp.page_table = p.page_table;
    kp.page_table_batch_stride = p.page_table_batch_stride;
    kp.page_size = p.page_size;
    kp.max_pages = p.max_pages;
    kp.o_rows = p.o;
    kp.o_token_stride = p.o_token_stride;
    kp.o_head_stride = p.o_head_stride;
  }
  kp.lse = p.lse;
  kp.lse_batch_stride = p.lse_batch_stride;
  kp.lse_head_stride = p.lse_head_stride;
  kp.lse_token_stride = p.lse_token_stride;
  kp.batch = p.batch;
  kp.seqlen_q = p.seqlen_q;
  kp.seqlen_k = p.seqlen_k;
  kp.heads_q = p.heads_q;
  kp.group = p.group;
  kp.scale_log2 = p.scale_log2;
  kp.causal = p.causal;
  const int64_t q_tiles = ceil_div<int64_t>(p.seqlen_q, T::kBlockM);
  // Packed: the kernel finds its tiles on the device; sum_b ceil(len_b / kBlockM) is at most
  // (total_q + batch (kBlockM - 1)) / kBlockM, and CTAs past the last tile return at once.
  const int64_t packed_tiles = (int64_t(p.total_q) + int64_t(p.batch) * (T::kBlockM - 1)) / T::kBlockM;
  const int64_t ctas = (paged ? packed_tiles : q_tiles * p.batch) * int64_t(p.heads_q);
  check(ctas <= 0x7fffffff, "prefill: CTAs per launch (query tiles x heads x batch) must be < 2^31, got ", ctas);
  kp.q_tiles = static_cast<int>(q_tiles);
  if (Cfg::kL2Sections && p.causal && !paged) {
    kp.l2_section = prefill_ws_l2_section(p.seqlen_k, T::kD, int(sizeof(Element)), p.group, p.heads_q * p.batch);
  }

  // One opt-in per kernel: both kernels have the same type, so the tag (not the pointer) tells
  // the lambda's instantiations, and with them their statics, apart.
  const auto launch = [&](auto paged_tag) {
    const auto kernel = attn_prefill_ws_kernel<Cfg, Element, decltype(paged_tag)::value>;
    static SmemOptIn opt_in;
    opt_in.ensure(kernel, T::kSmemBytes);
    kernel<<<static_cast<unsigned>(ctas), T::kThreads, T::kSmemBytes, stream>>>(kp);
  };
  paged ? launch(std::true_type{}) : launch(std::false_type{});
  check_launch("attn_prefill_ws_kernel");
}

// The default warp-specialized configuration for p.head_dim and p.dtype (attn_prefill_ws.cu).
void run_prefill_ws(const AttnParams& p, cudaStream_t stream);

}  // namespace kernels::attention
