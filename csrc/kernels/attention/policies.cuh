// The two independent choices every attention kernel body is templated on:
//   KV source:  where key `pos` of batch `b` lives (contiguous [B, Sk, Hkv, D] or paged).
//   Q schedule: which (batch, q tile) a CTA owns and where that batch's queries start.
// Kernel bodies only talk to these, so the contiguous and paged variants cannot drift.
#pragma once

#include <cstdint>

#include "attn_params.h"

namespace kernels::attention {

// Element offsets of one key's K and V rows (head 0); add head * head_stride.
struct KvRow {
  int64_t k;
  int64_t v;
};

// Every source locates a key in two steps: locate(...) gives a Handle (for paged KV from the
// global page table or from a kernel's shared-memory copy of it), row(p, b, pos, handle) the
// element offsets. A thread whose rows share a page looks up once and steps from there
// (load_kv_rows in tile_ops.cuh).
struct ContiguousKV {
  static constexpr bool kPaged = false;
  using Handle = int;  // the batch entry is the "block"
  __device__ static int kv_len(const AttnParams& p, int /*b*/) { return p.seqlen_k; }
  // Lengths are shapes on the host, so they cannot be out of range.
  __device__ static bool kv_len_ok(const AttnParams&, int) { return true; }
  __device__ static Handle locate(const AttnParams&, int b, int /*pos*/) { return b; }
  __device__ static KvRow row(const AttnParams& p, int /*b*/, int pos, Handle block) {
    return {block * p.k_block_stride + pos * p.k_token_stride, block * p.v_block_stride + pos * p.v_token_stride};
  }
};

// Paged cache [num_pages, page_size, Hkv, D]: key `pos` of batch b lives in page
// page_table[b][pos / page_size] at slot pos % page_size. Page ids are the caller's contract
// (the bindings check them with check_seqlens or debug); lengths are checked on the host, and a length
// beyond the page table that slips through (CUDA-graph capture) poisons the output with NaN.
struct PagedKV {
  static constexpr bool kPaged = true;
  __device__ static int kv_len(const AttnParams& p, int b) { return p.seqlens_k[b]; }
  __device__ static bool kv_len_ok(const AttnParams& p, int b) {
    const int len = p.seqlens_k[b];
    return len >= 0 && static_cast<int64_t>(len) <= static_cast<int64_t>(p.max_pages) * p.page_size;
  }
  // The page id and the slot in the page.
  struct Handle {
    int page;
    int slot;
  };
  // Index of key `pos`'s page in its batch's page-table row. Address math is on the critical
  // path of a decode CTA: a multiply-high by the launcher's FastDivmod, branch-free, so the
  // lookups of a thread's rows overlap (a per-row `pow2 ? shift : divide` branch serialized
  // them and halved what one CTA streams).
  __device__ static int page_index(const AttnParams& p, int pos) { return p.page_divmod.div(pos); }
  __device__ static const int* page_row(const AttnParams& p, int b) {
    return p.page_table + b * p.page_table_batch_stride;
  }
  __device__ static Handle locate(const AttnParams& p, int b, int pos) {
    const int index = page_index(p, pos);
    return {page_row(p, b)[index], pos - index * p.page_size};
  }
  // The same from a copy of the page-table entries first_index, first_index + 1, ...
  __device__ static Handle locate(const AttnParams& p, const int* entries, int first_index, int pos) {
    const int index = page_index(p, pos);
    return {entries[index - first_index], pos - index * p.page_size};
  }
  __device__ static KvRow row(const AttnParams& p, int /*b*/, int /*pos*/, Handle h) {
    return {h.page * p.k_block_stride + h.slot * p.k_token_stride,
            h.page * p.v_block_stride + h.slot * p.v_token_stride};
  }
};

struct QTile {
  int batch;
  int tile;     // index of this CTA's block of packed rows within the batch
  int q_start;  // token offset of the batch in q / o / lse (0 for dense)
  int q_len;
};

// q [B, Sq, Hq, D]: grid.x = q tiles, grid.z = batch.
struct DenseQ {
  static constexpr bool kPacked = false;
  __device__ static QTile tile(const AttnParams& p) {
    return {static_cast<int>(blockIdx.z), static_cast<int>(blockIdx.x), 0, p.seqlen_q};
  }
};

// q [total_q, Hq, D] with cu_seqlens_q: grid.x walks the host-built (batch, tile) schedule.
struct PackedQ {
  static constexpr bool kPacked = true;
  __device__ static QTile tile(const AttnParams& p) {
    const int b = p.q_schedule[2 * blockIdx.x];
    const int start = p.cu_seqlens_q[b];
    return {b, p.q_schedule[2 * blockIdx.x + 1], start, p.cu_seqlens_q[b + 1] - start};
  }
};

// The kernel's copy of the parameters, with the page-size divisor that PagedKV divides by (the
// launchers pass this, so callers set page_size only).
template <class KV>
AttnParams with_page_divmod(const AttnParams& p) {
  AttnParams kp = p;
  if constexpr (KV::kPaged) kp.page_divmod = FastDivmod(p.page_size);
  return kp;
}

}  // namespace kernels::attention
