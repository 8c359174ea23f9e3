// Prefill entry points (torch-free translation unit): dispatch + packed Q schedule. The
// warp-specialized kernel's instantiations live in attn_prefill_ws.cu.
#include "attn_api.h"
#include "prefill_kernel.cuh"
#include "prefill_ws_sm90.cuh"

namespace kernels::attention {

const char* prefill_ws_unsupported_here(const AttnParams& p) {
  if (!current_device_is_sm90()) return "it needs a Hopper GPU (sm_90)";
  return prefill_ws_unsupported(p);
}

void run_prefill(const AttnParams& p, AttnImpl impl, cudaStream_t stream, PrefillKernel kernel) {
  const bool paged = p.page_table != nullptr;
  const bool packed = p.cu_seqlens_q != nullptr;
  check(p.kv_dtype == KvDtype::kSame,
        "prefill: K and V must have q's type (an e4m3 KV cache runs on the paged decode)");
  check(paged == packed, "prefill: needs dense Q on contiguous KV, or packed Q (cu_seqlens_q) on paged KV");
  check(impl == AttnImpl::kTensorCore || kernel == PrefillKernel::kAuto,
        "prefill: the choice of tensor-core kernel needs impl = tensor cores");
  if (p.batch == 0) return;
  if (impl == AttnImpl::kTensorCore && kernel != PrefillKernel::kCpAsync) {
    if (kernel == PrefillKernel::kWarpSpecialized) {
      check<NotImplementedError>(current_device_is_sm90(),
                                 "prefill (warp-specialized kernel): it needs a Hopper GPU (sm_90)");
    }
    const char* why = prefill_ws_unsupported_here(p);
    if (why == nullptr) return run_prefill_ws(p, stream);
    check(kernel == PrefillKernel::kAuto, "prefill (warp-specialized kernel): ", why);
  }
  check(!packed || p.q_schedule != nullptr,
        "prefill: packed Q on this kernel needs q_schedule (plan_packed_q_schedule)");
  KERNELS_DISPATCH_HEAD_DIM(p.head_dim, [&] {
    static_assert(
        PrefillTraits<PrefillConfigSm90<kHeadDim>>::kBlockM == PrefillTraits<PrefillConfig<kHeadDim>>::kBlockM,
        "the packed-Q schedule (prefill_block_m) must fit both tensor-core configurations");
    KERNELS_DISPATCH_ELEMENT(p.dtype, [&] {
      using Sm90 = PrefillConfigSm90<kHeadDim>;
      using Cfg = PrefillConfig<kHeadDim>;
      constexpr AttnImpl kTC = AttnImpl::kTensorCore, kScalar = AttnImpl::kScalar;
      if (impl == kTC && current_device_is_sm90()) {
        paged ? launch_prefill<Sm90, kTC, PackedQ, PagedKV, Element>(p, stream)
              : launch_prefill<Sm90, kTC, DenseQ, ContiguousKV, Element>(p, stream);
      } else if (impl == kTC) {
        paged ? launch_prefill<Cfg, kTC, PackedQ, PagedKV, Element>(p, stream)
              : launch_prefill<Cfg, kTC, DenseQ, ContiguousKV, Element>(p, stream);
      } else {
        paged ? launch_prefill<Cfg, kScalar, PackedQ, PagedKV, Element>(p, stream)
              : launch_prefill<Cfg, kScalar, DenseQ, ContiguousKV, Element>(p, stream);
      }
    });
  });
}

int prefill_block_m(int head_dim) {
  return KERNELS_DISPATCH_HEAD_DIM(head_dim, [&] { return PrefillTraits<PrefillConfig<kHeadDim>>::kBlockM; });
}

bool packed_q_tiles_on_device(const AttnParams& p, AttnImpl impl, PrefillKernel kernel) {
  return impl == AttnImpl::kTensorCore && kernel != PrefillKernel::kCpAsync &&
         prefill_ws_unsupported_here(p) == nullptr;
}

std::vector<int32_t> plan_packed_q_schedule(const AttnParams& p, const int32_t* cu_seqlens_q_host, AttnImpl impl,
                                            PrefillKernel kernel) {
  if (packed_q_tiles_on_device(p, impl, kernel)) return {};
  return make_packed_q_schedule(cu_seqlens_q_host, p.batch, p.group, prefill_block_m(p.head_dim));
}

std::vector<int32_t> make_packed_q_schedule(const int32_t* cu_seqlens_q_host, int batch, int group, int block_m) {
  std::vector<int32_t> schedule;
  for (int b = 0; b < batch; ++b) {
    const int64_t rows = static_cast<int64_t>(cu_seqlens_q_host[b + 1] - cu_seqlens_q_host[b]) * group;
    // Last tiles first: under causal masking they see the most keys.
    for (int64_t tile = ceil_div<int64_t>(rows, block_m) - 1; tile >= 0; --tile) {
      schedule.push_back(b);
      schedule.push_back(static_cast<int32_t>(tile));
    }
  }
  return schedule;
}

}  // namespace kernels::attention
