// The rotary kernels' instances for the binding (rotary_api.h): one per element type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "rotary_api.h"
#include "rotary_kernel.cuh"

namespace kernels::rotary {

void run_rotary(const RotaryParams& p, Element element, int num_sms, cudaStream_t stream) {
  if (element == Element::kBFloat16) {
    launch_rotary<__nv_bfloat16>(p, num_sms, stream);
  } else {
    launch_rotary<__half>(p, num_sms, stream);
  }
}

}  // namespace kernels::rotary
