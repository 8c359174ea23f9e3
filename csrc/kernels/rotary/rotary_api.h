// Rotary embedding: what the torch binding (rotary.cpp) calls, compiled apart in
// rotary_launch.cu, so that the binding is host C++ and the kernels compile without torch.
#pragma once

#include <cuda_runtime.h>

#include "rotary_params.h"

namespace kernels::rotary {

enum class Element : int { kBFloat16 = 0, kFloat16 = 1 };

// launch_rotary (rotary_kernel.cuh) for the element type: kernels::ValueError for parameters the
// kernel cannot take, kernels::CudaError for a failed launch.
void run_rotary(const RotaryParams& p, Element element, int num_sms, cudaStream_t stream);

}  // namespace kernels::rotary
