// Host entry points of the attention kernels. Torch-free: included by the pybind11 binding
// (attention.cpp) and by the standalone tests (csrc/tests/attn_*.cu). Errors as in
// common/errors.h: kernels::ValueError for an unsupported configuration (the message lists
// what is supported), kernels::CudaError for a failed CUDA call or launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "attn_params.h"

namespace kernels::attention {

// Split-KV decode on contiguous KV (params.page_table == nullptr) or paged KV. With
// params.num_splits > 1 the caller provides o_partial / lse_partial (see
// decode_workspace_floats); the splits are merged by a combine kernel or, where the caller
// also provides split_counters (decode_counter_count ints, zeroed once), by the last split CTA
// of each row tile, in one launch. No host synchronization.
void run_decode(const AttnParams& params, AttnImpl impl, cudaStream_t stream);

// Split-Q prefill: dense Q on contiguous KV, or packed ragged Q (cu_seqlens_q, and for the
// cp.async kernel q_schedule from plan_packed_q_schedule) on paged KV. `kernel` picks the
// tensor-core kernel (impl = kTensorCore; attn_params.h): by default the warp-specialized one
// where it applies. params.seqlen_q may be any bound >= the longest sequence for packed Q
// on the warp-specialized kernel (it reads the lengths on the device; no host synchronization).
void run_prefill(const AttnParams& params, AttnImpl impl, cudaStream_t stream,
                 PrefillKernel kernel = PrefillKernel::kAuto);

// Why the warp-specialized prefill cannot run `params` on the current device, or nullptr.
const char* prefill_ws_unsupported_here(const AttnParams& params);

// Number of KV splits for a decode call; max_seqlen_k is an upper bound known on the host
// (for paged KV: max_pages * page_size), so the choice never needs the device lengths.
// e4m3_kv: an e4m3 cache, whose tiles (E4m3DecodeConfig) hold twice the keys.
int decode_num_splits(int batch, int heads_kv, int seqlen_q, int group, int max_seqlen_k, int head_dim, int num_sms,
                      bool e4m3_kv = false);

// Floats of workspace a decode call with num_splits > 1 needs (o_partial then lse_partial).
int64_t decode_workspace_floats(int num_splits, int batch, int heads_q, int seqlen_q, int head_dim);

// Arrival counters (ints) a one-launch split decode needs: one per (batch, kv head, row tile).
int64_t decode_counter_count(int batch, int heads_kv, int seqlen_q, int group);

// Packed rows (query, head-in-group) one prefill CTA owns for this head_dim.
int prefill_block_m(int head_dim);

// Host-built packed Q schedule: for every batch, its q tiles of block_m packed rows (query,
// head-in-group; group 1: query rows of one head), as (batch, tile) pairs; the
// longest-running tiles (last rows, most keys under causal) first.
std::vector<int32_t> make_packed_q_schedule(const int32_t* cu_seqlens_q_host, int batch, int group, int block_m);

// Whether run_prefill(params, impl, stream, kernel) runs the warp-specialized kernel, which
// finds packed Q's tiles from cu_seqlens_q on the device (no host schedule). Needs params
// complete but for q_schedule / num_q_tiles (and seqlen_q: any bound).
bool packed_q_tiles_on_device(const AttnParams& params, AttnImpl impl, PrefillKernel kernel);

// The packed Q schedule run_prefill(params, impl, stream, kernel) needs: empty where
// packed_q_tiles_on_device, else the cp.async kernel's (group-packed rows, prefill_block_m).
// The caller sets q_schedule / num_q_tiles from the result.
std::vector<int32_t> plan_packed_q_schedule(const AttnParams& params, const int32_t* cu_seqlens_q_host, AttnImpl impl,
                                            PrefillKernel kernel);

}  // namespace kernels::attention
