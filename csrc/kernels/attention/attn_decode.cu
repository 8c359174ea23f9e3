// Decode entry points (torch-free translation unit): dispatch + split heuristic.
#include <algorithm>
#include <utility>

#include "attn_api.h"
#include "decode_kernel.cuh"

namespace kernels::attention {

void run_decode(const AttnParams& p, AttnImpl impl, cudaStream_t stream) {
  check(p.num_splits >= 1 && p.num_splits <= kMaxDecodeSplits, "decode: num_splits must be in [1, ", kMaxDecodeSplits,
        "], got ", p.num_splits);
  if (p.batch == 0 || p.seqlen_q == 0 || p.heads_q == 0) return;  // nothing to do (and no workspace sized)
  check(p.num_splits == 1 || (p.o_partial != nullptr && p.lse_partial != nullptr),
        "decode: num_splits > 1 needs the o_partial / lse_partial workspace");
  const bool paged = p.page_table != nullptr;
  if (p.kv_dtype == KvDtype::kE4M3) {
    check(paged && impl == AttnImpl::kTensorCore, "decode: an e4m3 KV cache runs on the tensor-core paged decode");
  }
  KERNELS_DISPATCH_HEAD_DIM(p.head_dim, [&] {
    KERNELS_DISPATCH_ELEMENT(p.dtype, [&] {
      using Cfg = DecodeConfig<kHeadDim>;
      if (p.kv_dtype == KvDtype::kE4M3) {
        launch_decode<E4m3DecodeConfig<kHeadDim>, AttnImpl::kTensorCore, PagedKV, Element, e4m3>(p, stream);
      } else if (impl == AttnImpl::kTensorCore) {
        paged ? launch_decode<Cfg, AttnImpl::kTensorCore, PagedKV, Element>(p, stream)
              : launch_decode<Cfg, AttnImpl::kTensorCore, ContiguousKV, Element>(p, stream);
      } else {
        using Scalar = PaddedDecodeTiles<Cfg>;
        paged ? launch_decode<Scalar, AttnImpl::kScalar, PagedKV, Element>(p, stream)
              : launch_decode<Scalar, AttnImpl::kScalar, ContiguousKV, Element>(p, stream);
      }
    });
  });
}

int decode_num_splits(int batch, int heads_kv, int seqlen_q, int group, int max_seqlen_k, int head_dim, int num_sms,
                      bool e4m3_kv) {
  const std::pair<int, int> tile = KERNELS_DISPATCH_HEAD_DIM(head_dim, [&] {
    using T = DecodeTraits<DecodeConfig<kHeadDim>>;
    using E4m3T = DecodeTraits<E4m3DecodeConfig<kHeadDim>, 1>;
    return e4m3_kv ? std::pair{E4m3T::kBlockN, E4m3T::kCtasPerSm} : std::pair{T::kBlockN, T::kCtasPerSm};
  });
  const int block_n = tile.first, ctas_per_sm = tile.second;
  const int row_tiles = ceil_div(std::max(seqlen_q, 1) * group, 16);
  const int ctas = std::max(1, batch * heads_kv * row_tiles);
  const int sms = std::max(num_sms, 1);
  // Cost model in KV-tile times, fitted to H200 sweeps (B 1 / 16 / 64, Sk 4096, 32 / 8
  // heads, D 128, splits 1..32). An SM runs n = ceil(ctas * s / sms) CTAs, each streaming
  // tiles / s tiles plus a fixed start (Q load, first-tile latency, merge: about 2 tiles).
  // One CTA alone streams about its SM's share of the copy bandwidth, with contiguous or
  // paged KV alike (`attn_paged_test bench`, B 16: 3.64 / 3.56 TB/s unsplit). Any split adds
  // the partial rows and the combine launch (about 4 tiles). At least two tiles per split.
  const int tiles = ceil_div(std::max(max_seqlen_k, 1), block_n);
  const int max_splits = std::min(kMaxDecodeSplits, std::max(1, tiles / 2));
  constexpr double kCtaStartTiles = 2.0, kCombineTiles = 4.0;
  const auto cost = [&](int s) {
    const int n = ceil_div(ctas * s, sms);
    const double sm_rate = std::min(1.0, static_cast<double>(std::min(n, ctas_per_sm)));
    return n * (static_cast<double>(tiles) / s + kCtaStartTiles) / sm_rate + (s > 1 ? kCombineTiles : 0.0);
  };
  int best = 1;
  for (int s = 2; s <= max_splits; ++s) {
    if (cost(s) < cost(best)) best = s;
  }
  return best;
}

int64_t decode_counter_count(int batch, int heads_kv, int seqlen_q, int group) {
  const int64_t row_tiles = ceil_div<int64_t>(static_cast<int64_t>(seqlen_q) * group, 16);
  return static_cast<int64_t>(batch) * heads_kv * row_tiles;
}

int64_t decode_workspace_floats(int num_splits, int batch, int heads_q, int seqlen_q, int head_dim) {
  if (num_splits <= 1) return 0;
  const int64_t rows = static_cast<int64_t>(num_splits) * batch * heads_q * seqlen_q;
  return rows * (head_dim + 1);
}

}  // namespace kernels::attention
