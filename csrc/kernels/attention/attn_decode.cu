// Decode entry points (torch-free translation unit): dispatch + split heuristic.
#include <algorithm>

#include "attn_api.h"
#include "decode_kernel.cuh"

namespace kernels::attention {

void run_decode(const AttnParams& p, AttnImpl impl, cudaStream_t stream) {
    if (p.num_splits < 1 || p.num_splits > kMaxDecodeSplits) {
        throw std::invalid_argument("num_splits must be in [1, " + std::to_string(kMaxDecodeSplits) +
                                    "], got " + std::to_string(p.num_splits));
    }
    if (p.num_splits > 1 && (p.o_partial == nullptr || p.lse_partial == nullptr)) {
        throw std::invalid_argument("num_splits > 1 needs the o_partial / lse_partial workspace");
    }
    if (p.batch == 0 || p.seqlen_q == 0) return;
    DISPATCH_HEAD_DIM(p.head_dim, [&] {
        const bool paged = p.page_table != nullptr;
        if (impl == AttnImpl::kTensorCore) {
            paged ? launch_decode<kHeadDim, AttnImpl::kTensorCore, PagedKV>(p, stream)
                  : launch_decode<kHeadDim, AttnImpl::kTensorCore, ContiguousKV>(p, stream);
        } else {
            paged ? launch_decode<kHeadDim, AttnImpl::kScalar, PagedKV>(p, stream)
                  : launch_decode<kHeadDim, AttnImpl::kScalar, ContiguousKV>(p, stream);
        }
    });
}

int decode_num_splits(int batch, int heads_kv, int seqlen_q, int group, int max_seqlen_k,
                      int head_dim, int num_sms) {
    const int block_n = DISPATCH_HEAD_DIM(head_dim, [&] { return DecodeTraits<kHeadDim>::kBlockN; });
    const int row_tiles = ceil_div(std::max(seqlen_q, 1) * group, 16);
    const int ctas = std::max(1, batch * heads_kv * row_tiles);
    // Enough CTAs for two resident per SM, but at least two KV tiles per split so the
    // cp.async ring has something to overlap.
    const int wanted = ceil_div(2 * std::max(num_sms, 1), ctas);
    const int by_length = std::max(1, ceil_div(std::max(max_seqlen_k, 1), block_n) / 2);
    return std::clamp(std::min(wanted, by_length), 1, kMaxDecodeSplits);
}

int64_t decode_workspace_floats(int num_splits, int batch, int heads_q, int seqlen_q, int head_dim) {
    if (num_splits <= 1) return 0;
    const int64_t rows = static_cast<int64_t>(num_splits) * batch * heads_q * seqlen_q;
    return rows * (head_dim + 1);
}

}  // namespace kernels::attention
