// The FP8 kernels' one set of instances: launch_gemm (gemm.cuh) over every planner kernel and
// format pair, and the binding's entry points (fp8_api.h) on top of it.
#include "fp8_api.h"
#include "gemm.cuh"
#include "quantize.cuh"

namespace kernels::fp8 {
namespace gemm {

void launch_gemm(const GemmParams& p, const GemmPlan& plan, int cc_major, int cc_minor, cudaStream_t stream,
                 void* workspace, size_t workspace_bytes, const BlockScales& blocks) {
  check_gemm(p, cc_major, cc_minor);
  check<NotImplementedError>(
      (plan.path != Path::kWgmma && plan.path != Path::kGemvTma) || (cc_major == 9 && cc_minor == 0), "fp8 gemm: the ",
      path_name(plan.path), " path needs sm_90a, the device is sm_", cc_major, cc_minor);
  check_plan_supported(plan);
  check_block_scales(p, blocks, plan);
  // every split needs a k-block (the mainloops assume at least one); plan_gemm caps its splits so
  check(plan.split_k == 1 || plan.split_k <= ceil_div<int64_t>(p.k, 128), "fp8 gemm: split_k (", plan.split_k,
        ") must not exceed the k-blocks of 128 (", ceil_div<int64_t>(p.k, 128), " at K = ", p.k, ")");
  if (p.m == 0 || p.n == 0) return;
  const size_t needed = p.k > 0 ? gemm_workspace_bytes(plan, p.m, p.n) : 0;
  if (needed > 0) {
    check(workspace != nullptr && workspace_bytes >= needed, "fp8 gemm: a split-K plan (split_k ", plan.split_k,
          ") needs a workspace of gemm_workspace_bytes(plan, m, n) = ", needed, " bytes, got ",
          workspace == nullptr ? size_t(0) : workspace_bytes);
    check(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, "fp8 gemm: the split-K workspace must be 16-byte aligned");
  }
  if (p.k == 0 && (plan.path == Path::kWgmma || plan.path == Path::kGemvTma)) {
    // no K extent to describe to TMA; the mma.sync kernel writes the epilogue of a zero sum
    PlanRequest req;
    req.force_path = int(Path::kMmaSync);
    req.persistent = 0;
    const GemmPlan fallback = plan_gemm(p.m, p.n, p.k, plan.grid, cc_major, cc_minor, req);
    return launch_gemm(p, fallback, cc_major, cc_minor, stream);
  }
  float* ws = static_cast<float*>(workspace);
  if (p.a_format == Format::kE4M3 && p.b_format == Format::kE4M3)
    return launch_formats<Format::kE4M3, Format::kE4M3>(p, plan, ws, stream, blocks);
  if (p.a_format == Format::kE4M3 && p.b_format == Format::kE5M2)
    return launch_formats<Format::kE4M3, Format::kE5M2>(p, plan, ws, stream, blocks);
  return launch_formats<Format::kE5M2, Format::kE4M3>(p, plan, ws, stream, blocks);
}

}  // namespace gemm

GemmPlanSummary plan_summary(int64_t m, int64_t n, int64_t k, int num_sms, int cc_major, int cc_minor,
                             const gemm::PlanRequest& request) {
  const gemm::GemmPlan plan = gemm::plan_gemm(m, n, k, num_sms, cc_major, cc_minor, request);
  const bool wgmma = plan.path == gemm::Path::kWgmma;
  GemmPlanSummary s;
  s.path = gemm::path_name(plan.path);
  s.block_m = plan.block_m;
  s.block_n = plan.block_n;
  s.tiles = plan.tiles;
  s.grid = plan.grid;
  s.persistent = plan.persistent;
  s.accum = wgmma ? gemm::accum_name(plan.accum) : "fp32";
  s.promote_every = plan.promote_every;
  s.cluster = gemm::cluster_name(plan.cluster);
  s.group_m = plan.group_m;
  s.split_k = plan.split_k;
  s.workspace_bytes = gemm::gemm_workspace_bytes(plan, m, n);
  s.supported = gemm::plan_supported(plan);
  s.fast_accum = wgmma && plan.accum == gemm::AccumMode::kFast;
  return s;
}

void run_gemm(const GemmParams& p, const gemm::PlanRequest& request, int num_sms, int cc_major, int cc_minor,
              cudaStream_t stream, const std::function<void*(size_t)>& workspace, const BlockScales& blocks) {
  const gemm::GemmPlan plan = gemm::plan_gemm(p.m, p.n, p.k, num_sms, cc_major, cc_minor, request);
  const size_t workspace_bytes = p.k > 0 ? gemm::gemm_workspace_bytes(plan, p.m, p.n) : 0;
  gemm::launch_gemm(p, plan, cc_major, cc_minor, stream, workspace_bytes > 0 ? workspace(workspace_bytes) : nullptr,
                    workspace_bytes, blocks);
}

void run_quantize(const QuantizeParams& p, int num_sms, cudaStream_t stream) { launch_quantize(p, num_sms, stream); }

void run_block_quantize(const BlockQuantizeParams& p, int num_sms, cudaStream_t stream) {
  launch_block_quantize(p, num_sms, stream);
}

}  // namespace kernels::fp8
