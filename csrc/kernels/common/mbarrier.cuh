// Shared-memory mbarriers (init, arrive, arrive with an expected transaction count, phase
// wait) and the cluster helpers built on them (rank, cluster-wide barrier, arrival on a
// partner block's mbarrier, loads from a partner block's shared memory), for producer /
// consumer pipelines fed by TMA (common/tma.cuh).
// init and arrive are sm_80 instructions; the rest need sm_90 (KERNELS_SM90_ASM, sm90.cuh).
#pragma once

#include <cstdint>

#include "sm90.cuh"
#include "smem.cuh"

namespace kernels {

// ---- mbarriers ----------------------------------------------------------------------------

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

// Makes the initialised barriers visible to the async (TMA) proxy and to the cluster.
__device__ __forceinline__ void fence_barrier_init() {
  KERNELS_SM90_ASM("fence.mbarrier_init.release.cluster;" :: : "memory");
}

// Arrives and adds `bytes` to the transactions the current phase waits for (TMA completes them).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  KERNELS_SM90_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
                   "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Blocks until the phase with this parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  KERNELS_SM90_ASM(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity) : "memory");
}

// ---- clusters -----------------------------------------------------------------------------

// This block's rank inside its cluster (0 when launched without clusters).
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t rank = 0;
  KERNELS_SM90_ASM("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

// Every thread of every block of the cluster: barrier inits (and, at exit, all remote
// arrivals and multicast writes) are visible cluster-wide once this returns.
__device__ __forceinline__ void cluster_sync() {
  KERNELS_SM90_ASM("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" :: : "memory");
}

// Arrive on the mbarrier at the same shared offset in block `cta` of this cluster: mapa turns
// the local address into that block's shared::cluster address.
// Release at CTA scope (the PTX default, as CUTLASS's ClusterBarrier::arrive(cta_id)): the
// arrival only has to follow this thread's wgmma.wait_group, after which the WGMMA reads of
// the stage are done; no generic-proxy write has to reach the partner. `.release.cluster`
// compiles to MEMBAR.ALL.CTA + MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR before every arrive: the
// arriving warp waits for a GPU-scope fence per release, and its warpgroup's next WGMMA with
// it (the H200 showed every cluster variant of the fp8 GEMM 2-3x slower than without a cluster).
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, uint32_t cta) {
  KERNELS_SM90_ASM(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cta.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(cta) : "memory");
}

// Distributed shared memory: the shared::cluster address of the same shared offset
// (smem_byte_addr, a smem_addr) in block `cta` of this cluster, and a two-float load from such
// an address. The partner's writes are visible after a cluster_sync() that follows them, and
// the partner must not exit before the reads are done (a second cluster_sync()).
__device__ __forceinline__ uint32_t cluster_map_shared(uint32_t smem_byte_addr, uint32_t cta) {
  uint32_t remote = 0;
  KERNELS_SM90_ASM("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_byte_addr), "r"(cta));
  return remote;
}

__device__ __forceinline__ float2 ld_shared_cluster_f32x2(uint32_t cluster_addr) {
  float2 v = make_float2(0.f, 0.f);
  KERNELS_SM90_ASM("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(cluster_addr) : "memory");
  return v;
}

}  // namespace kernels
