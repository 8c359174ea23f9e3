// Host-side launch helpers shared by every csrc kernel family: dynamic shared memory opt-in,
// the cluster launch attribute, grid limits and launch-error checks (errors as in errors.h).
// No torch here.
#pragma once

#include <cuda_runtime.h>

#include <atomic>

#include "errors.h"

namespace kernels {

// Throws CudaError when the launch just issued failed: `launched` is what a launch call that
// returns an error (cudaLaunchKernelEx) gave; a <<<>>> launch leaves cudaGetLastError(), which
// this reads (and so clears) either way.
inline void check_launch(const char* what, cudaError_t launched = cudaSuccess) {
  const cudaError_t last = cudaGetLastError();
  check_cuda_error(launched != cudaSuccess ? launched : last, what, " launch");
}

// Opts one kernel instantiation into its dynamic shared memory, once per device (the first
// call, normally a warm-up outside CUDA-graph capture, so captured launches make no
// configuration calls). Every launcher holds its own function-local static instance: the
// attribute belongs to one instantiation, and kernels of one family often share one function
// type, so a flag keyed on the type alone would configure only the first kernel ever launched.
class SmemOptIn {
 public:
  template <class Kernel>
  void ensure(Kernel kernel, int bytes) {
    int device = 0;
    KERNELS_CUDA_CHECK(cudaGetDevice(&device));
    if (device < kMaxDevices && configured_[device].load(std::memory_order_acquire)) return;
    KERNELS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    if (device < kMaxDevices) configured_[device].store(true, std::memory_order_release);
  }

 private:
  static constexpr int kMaxDevices = 64;
  std::atomic<bool> configured_[kMaxDevices] = {};
};

// Clusters of `size` consecutive blocks along x (sm_90), for cudaLaunchKernelEx and the
// cluster occupancy query.
inline cudaLaunchAttribute cluster_attribute(int size) {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = size;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  return attr;
}

// A cudaLaunchKernelEx configuration for clusters of `attr`'s size (cluster_attribute), shared
// by the cluster launches and the occupancy query below; `attr` must outlive the config.
inline cudaLaunchConfig_t cluster_launch_config(dim3 grid, int threads, int smem_bytes, cudaStream_t stream,
                                                cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads, 1, 1);
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  return config;
}

// How many clusters of `size` blocks of `kernel` (threads, dynamic shared memory) the device
// holds at once (cudaOccupancyMaxActiveClusters); 0 when the query fails, its error cleared.
template <class Kernel>
int query_max_active_clusters(Kernel* kernel, int size, int threads, int smem_bytes) {
  cudaLaunchAttribute attr = cluster_attribute(size);
  const cudaLaunchConfig_t config = cluster_launch_config(dim3(size, 1, 1), threads, smem_bytes, nullptr, &attr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return clusters;
}

// Programmatic dependent launch (sm_90): the kernel launched with this attribute may start
// while the previous kernel on the stream still runs (once that one's blocks have all run
// dependents_may_launch() or exited), and waits for its results in wait_for_prerequisites().
// What it saves is the launch gap between the two kernels; under a CUDA graph the edge is
// kept. Older GPUs ignore the attribute.
inline cudaLaunchAttribute programmatic_launch_attribute() {
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  return attr;
}

// Whether the current device takes programmatic launches (compute capability 9.0 or newer),
// looked up once per device.
inline bool programmatic_launch_supported() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> known[kMaxDevices] = {};  // 0 unknown, 1 no, 2 yes
  int device = 0;
  KERNELS_CUDA_CHECK(cudaGetDevice(&device));
  if (device < kMaxDevices && known[device].load(std::memory_order_acquire) != 0) return known[device] == 2;
  int major = 0;
  KERNELS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (device < kMaxDevices) known[device].store(major >= 9 ? 2 : 1, std::memory_order_release);
  return major >= 9;
}

// How a kernel is launched by launch_ex: in clusters of `cluster_size` blocks along x (> 1), and
// as a programmatic dependent of the kernel before it on the stream (where the device takes it).
struct LaunchOptions {
  int cluster_size = 1;
  bool programmatic = false;
};

// Launches `kernel` with cudaLaunchKernelEx as `options` say; its error through check_launch(what).
template <class... Params, class... Args>
void launch_ex(const char* what, void (*kernel)(Params...), dim3 grid, int threads, int smem_bytes, cudaStream_t stream,
               LaunchOptions options, Args&&... args) {
  cudaLaunchAttribute attrs[2];
  int count = 0;
  if (options.cluster_size > 1) attrs[count++] = cluster_attribute(options.cluster_size);
  if (options.programmatic && programmatic_launch_supported()) attrs[count++] = programmatic_launch_attribute();
  cudaLaunchConfig_t config = cluster_launch_config(grid, threads, smem_bytes, stream, attrs);
  config.numAttrs = count;
  check_launch(what, cudaLaunchKernelEx(&config, kernel, static_cast<Args&&>(args)...));
}

// Launches `kernel` in clusters of `size` blocks along x; its error through check_launch(what).
template <class... Params, class... Args>
void launch_in_clusters(const char* what, void (*kernel)(Params...), dim3 grid, int threads, int smem_bytes,
                        cudaStream_t stream, int size, Args&&... args) {
  launch_ex(what, kernel, grid, threads, smem_bytes, stream, LaunchOptions{.cluster_size = size},
            static_cast<Args&&>(args)...);
}

// In the earlier kernel: its dependent may be scheduled now (the dependent still waits for
// this grid's completion and memory in wait_for_prerequisites()).
__device__ __forceinline__ void dependents_may_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// In the dependent kernel, before it reads what the earlier kernel wrote: returns once that
// grid has completed and its writes are visible (at once for a kernel launched without the
// attribute).
__device__ __forceinline__ void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Grid dimensions y and z are limited to 65535 by the hardware; a larger problem would fail
// at launch with "invalid argument", so it is rejected with the reason (`cause`: what made
// the grid that large) instead.
inline void check_grid(const dim3& grid, const char* what, const char* cause) {
  constexpr unsigned kMaxYZ = 65535;
  check(grid.y <= kMaxYZ && grid.z <= kMaxYZ, what, ": grid (", grid.x, ", ", grid.y, ", ", grid.z,
        ") exceeds 65535 in y or z (", cause, ")");
}

}  // namespace kernels
