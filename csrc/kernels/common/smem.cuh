// Shared-memory plumbing of every kernel family (sm_80 and later): the generic -> shared
// address conversion the shared-memory instructions take, and cp.async global -> shared
// copies with their commit / wait groups. The "memory" clobbers keep the compiler from moving
// plain loads and stores across a copy or a wait, whatever barrier the caller puts after it.
#pragma once

#include <cstdint>

namespace kernels {

// The 32-bit shared-window address of a pointer into shared memory.
__device__ __forceinline__ uint32_t smem_addr(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// 16 bytes global -> shared (dst: a smem_addr), bypassing L1; when !valid nothing is read and
// the destination is zero-filled (tails: zero rows keep the MMAs over them exact and finite).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

// 4 bytes global -> shared (dst: a smem_addr), cached in L1 (small tables: page-table entries).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}

// Closes this thread's issued copies into a group; waits until at most kPending groups are
// still in flight (their data is then in shared memory, visible to other threads after a barrier).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

}  // namespace kernels
