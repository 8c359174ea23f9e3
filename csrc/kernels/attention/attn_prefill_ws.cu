// The warp-specialized Hopper prefill's instantiations (torch-free translation unit, apart from
// attn_prefill.cu so the two compile in parallel): one kernel per head_dim and element type.
#include "attn_api.h"
#include "prefill_ws_sm90.cuh"

namespace kernels::attention {

void run_prefill_ws(const AttnParams& p, cudaStream_t stream) {
  KERNELS_DISPATCH_HEAD_DIM(p.head_dim, [&] {
    KERNELS_DISPATCH_ELEMENT(p.dtype, [&] { launch_prefill_ws<PrefillWsConfig<kHeadDim>, Element>(p, stream); });
  });
}

}  // namespace kernels::attention
