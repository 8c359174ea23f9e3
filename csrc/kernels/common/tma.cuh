// TMA (sm_90): 2-D and 5-D tile loads into shared memory that complete on an mbarrier
// (common/mbarrier.cuh), plain or multicast to the blocks of a cluster, 2-D and 5-D tile
// stores from shared memory (bulk groups), the tensor-map prefetch, and the host side's
// cuTensorMapEncodeTiled taken from the driver through the runtime's entry-point query (no
// libcuda link needed).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "sm90.cuh"
#include "smem.cuh"

namespace kernels {

// One 2-D box (inner coordinate first) into shared memory; completes bytes on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t inner,
                                            int32_t outer) {
  KERNELS_SM90_ASM(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(inner), "r"(outer) : "memory");
}

// The same box into shared memory at the same offset in every block of cta_mask (bit r =
// cluster rank r); each destination block's mbarrier at `bar`'s offset receives the bytes.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t inner,
                                                      int32_t outer, uint16_t cta_mask) {
  KERNELS_SM90_ASM(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(inner), "r"(outer), "h"(cta_mask) : "memory");
}

// One 5-D box into shared memory (coordinates innermost first); completes bytes on `bar`. Five
// modes let one box cover a whole tile whose inner dimension is split into 128-byte swizzle
// panels (attention: d % 64, token, d / 64, head, batch).
__device__ __forceinline__ void tma_load_5d(void* dst, const CUtensorMap* map, uint64_t* bar, int32_t c0, int32_t c1,
                                            int32_t c2, int32_t c3, int32_t c4) {
  KERNELS_SM90_ASM(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
      "r"(c4) : "memory");
}

// One 2-D box from shared memory to global memory (inner coordinate first); elements outside
// the tensor are not written. Completion as tma_store_5d's below.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int32_t inner, int32_t outer) {
  KERNELS_SM90_ASM("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                       reinterpret_cast<uint64_t>(map)),
                   "r"(smem_addr(src)), "r"(inner), "r"(outer) : "memory");
}

// The reverse of tma_load_5d: one 5-D box from shared memory to global memory; elements outside the tensor
// are not written. Asynchronous: tma_store_commit() closes this thread's stores into a bulk
// group, tma_store_wait_read<N>() waits until at most N groups may still read shared memory.
// The shared-memory writes it sends must be made visible to the async proxy first
// (fence_proxy_async_shared, sm90.cuh).
__device__ __forceinline__ void tma_store_5d(const CUtensorMap* map, const void* src, int32_t c0, int32_t c1,
                                             int32_t c2, int32_t c3, int32_t c4) {
  KERNELS_SM90_ASM("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];" ::"l"(
                       reinterpret_cast<uint64_t>(map)),
                   "r"(smem_addr(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4) : "memory");
}
__device__ __forceinline__ void tma_store_commit() { KERNELS_SM90_ASM("cp.async.bulk.commit_group;" :: : "memory"); }
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
  KERNELS_SM90_ASM("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}

// Pulls the descriptor (a __grid_constant__ kernel parameter) into the TMA unit's cache ahead
// of the first load.
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  KERNELS_SM90_ASM("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- host ---------------------------------------------------------------------------------

// cuTensorMapEncodeTiled from the driver the runtime already loaded (cached after the first
// call), or nullptr when the driver does not have it.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult query{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &query);
    if (err != cudaSuccess || query != cudaDriverEntryPointSuccess) ptr = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

}  // namespace kernels
