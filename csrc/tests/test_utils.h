// Host helpers shared by the standalone csrc tests (no torch).
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "../kernels/common/cuda_utils.cuh"

namespace kernels_test {

// Copies host data into a fresh device buffer. The tail padding keeps 16-byte vector loads
// and TMA boxes that run past the last element inside the allocation.
template <class T>
T* to_device(const std::vector<T>& host, size_t pad_bytes = 256) {
  T* dev = nullptr;
  KERNELS_CUDA_CHECK(cudaMalloc(&dev, host.size() * sizeof(T) + pad_bytes));
  KERNELS_CUDA_CHECK(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return dev;
}

}  // namespace kernels_test
