// FP8 quantize and GEMM: what the torch binding (fp8.cpp) calls, compiled apart in
// fp8_launch.cu, so that the binding is host C++ and the kernels compile without torch.
// Errors as in common/errors.h: kernels::ValueError / NotImplementedError for what the kernels
// cannot take (the message says what they can), kernels::CudaError for a failed launch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "common.h"
#include "gemm/request.h"

namespace kernels::fp8 {

// The planner's choice for a problem (gemm/plan.cuh GemmPlan), in names and numbers.
struct GemmPlanSummary {
  const char* path = "";
  int block_m = 0, block_n = 0, tiles = 0, grid = 0;
  bool persistent = false;
  const char* accum = "";  // "fp32" off the WGMMA path
  int promote_every = 0;
  const char* cluster = "";
  int group_m = 0, split_k = 1;
  size_t workspace_bytes = 0;  // fp32 split-K partials a launch of this plan needs
  bool supported = false;      // a compiled kernel runs it
  bool fast_accum = false;     // the WGMMA accumulator only, no fp32 promotion
};

GemmPlanSummary plan_summary(int64_t m, int64_t n, int64_t k, int num_sms, int cc_major, int cc_minor,
                             const gemm::PlanRequest& request);

// Plans p on the device (num_sms, compute capability) as `request` asks and launches it on
// `stream`; a split-K plan takes its workspace from workspace(bytes), which must return 16-byte
// aligned device memory that stays the GEMM's until it completes on `stream`.
// Block scales (BlockScales, both or neither) take the block-scaled kernel (request.accum
// kAccumBlockScaled, e4m3 x e4m3, sm_90a).
void run_gemm(const GemmParams& p, const gemm::PlanRequest& request, int num_sms, int cc_major, int cc_minor,
              cudaStream_t stream, const std::function<void*(size_t)>& workspace, const BlockScales& blocks = {});

void run_quantize(const QuantizeParams& p, int num_sms, cudaStream_t stream);

void run_block_quantize(const BlockQuantizeParams& p, int num_sms, cudaStream_t stream);

}  // namespace kernels::fp8
