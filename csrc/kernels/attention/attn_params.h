// The one parameter struct shared by every attention kernel (decode, prefill; contiguous or
// paged KV; dense or packed ragged Q). Plain data, no torch: the torch binding and the
// standalone tests fill it the same way. Strides are in elements; the last dim is contiguous.
#pragma once

#include <cstdint>

#include "../common/cuda_utils.cuh"

namespace kernels::attention {

enum class AttnImpl : int { kTensorCore = 0, kScalar = 1 };

// Which tensor-core prefill kernel run_prefill launches (AttnImpl::kTensorCore only).
enum class PrefillKernel : int {
  // kWarpSpecialized where it applies (a Hopper GPU, dense Q on contiguous KV or packed Q on
  // pages that tile its key tiles, no boolean mask, TMA-compatible strides), else kCpAsync.
  kAuto = 0,
  // prefill_ws_sm90.cuh: a TMA producer warpgroup and two or three WGMMA consumer warpgroups;
  // anything it does not take raises (ValueError; NotImplementedError off Hopper).
  kWarpSpecialized = 1,
  // prefill_kernel.cuh: every warp loads K / V with cp.async (WGMMA on Hopper, mma.sync
  // elsewhere); dense or packed Q, contiguous or paged KV, boolean masks.
  kCpAsync = 2,
};

// Element type of q, k, v and o (the accumulators, lse and the decode workspace are fp32).
enum class AttnDtype : int { kBF16 = 0, kFP16 = 1 };

// Element type of K and V: q's (kSame), or e4m3 (an FP8 KV cache: paged decode only), whose
// values times k_scale / v_scale (per kv head, or one for all) are the keys and values.
enum class KvDtype : int { kSame = 0, kE4M3 = 1 };

// Largest number of KV splits a decode call may use (bounds the workspace).
constexpr int kMaxDecodeSplits = 128;

struct AttnParams {
  // ---- queries and outputs ------------------------------------------------------------
  // Dense:  q, o [B, Sq, Hq, D]; lse [B, Hq, Sq].
  // Packed: q, o [total_q, Hq, D] with cu_seqlens_q [B + 1]; lse [Hq, total_q];
  //         batch strides are 0 and the token index is cu_seqlens_q[b] + t.
  const void* q = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // optional
  int64_t q_batch_stride = 0, q_token_stride = 0, q_head_stride = 0;
  int64_t o_batch_stride = 0, o_token_stride = 0, o_head_stride = 0;
  int64_t lse_batch_stride = 0, lse_head_stride = 0, lse_token_stride = 0;
  const int* cu_seqlens_q = nullptr;  // packed only
  // packed only, for the cp.async kernel: [num_q_tiles][2] = (batch, tile) from
  // plan_packed_q_schedule (the warp-specialized kernel finds its tiles on the device).
  const int* q_schedule = nullptr;
  int num_q_tiles = 0;
  int total_q = 0;  // packed only: rows of q / o

  // ---- keys and values ----------------------------------------------------------------
  // Contiguous: k, v [B, Sk, Hkv, D]; "block" = batch.
  // Paged:      k, v [num_pages, page_size, Hkv, D]; "block" = page.
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t k_block_stride = 0, k_token_stride = 0, k_head_stride = 0;
  int64_t v_block_stride = 0, v_token_stride = 0, v_head_stride = 0;
  KvDtype kv_dtype = KvDtype::kSame;
  // e4m3 K / V only: device fp32 factors, entry hkv * kv_scale_head_stride for kv head hkv
  // (stride 1: one per head; 0: one for all). Read on the device: a CUDA graph sees new values.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  int kv_scale_head_stride = 0;
  const int* page_table = nullptr;  // paged: [B, max_pages]
  int64_t page_table_batch_stride = 0;
  const int* seqlens_k = nullptr;  // paged: [B]
  int page_size = 0;
  int max_pages = 0;
  int num_pages = 0;       // pages in k / v (the warp-specialized kernel's TMA maps)
  FastDivmod page_divmod;  // by page_size; the launchers set it (callers set page_size only)

  // ---- optional boolean mask, True = keep: [B, Sk] (mask_q_stride = 0) or [B, Sq, Sk] --
  const bool* mask = nullptr;
  int64_t mask_batch_stride = 0, mask_q_stride = 0;
  int mask_len = 0;  // keys at or beyond mask_len are masked out

  // ---- sizes ---------------------------------------------------------------------------
  int batch = 0;
  int seqlen_q = 0;  // dense: every batch; packed: the maximum
  int seqlen_k = 0;  // contiguous only
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  int group = 1;  // heads_q / heads_kv
  float scale = 1.f;
  float scale_log2 = 1.f;  // scale * log2(e), for exp2
  bool causal = false;
  AttnDtype dtype = AttnDtype::kBF16;

  // ---- split-KV decode workspace ------------------------------------------------------
  int num_splits = 1;
  float* o_partial = nullptr;    // [num_splits][B][Hq][Sq][D]
  float* lse_partial = nullptr;  // [num_splits][B][Hq][Sq]
  // Optional: [B][Hkv * ceil(Sq * group / 16)] arrival counters, zero before the call and left
  // zero after it. Given, the last split CTA of each row tile combines the splits (one launch);
  // else a combine kernel runs after the split kernel.
  int* split_counters = nullptr;
};

}  // namespace kernels::attention
