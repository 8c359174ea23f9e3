// Hopper (sm_90a) warpgroup plumbing shared by the kernel families: the wgmma fence /
// commit / wait trio, shared-memory matrix descriptors for 128-byte-swizzled tiles, the
// proxy fence that makes generic-proxy writes (cp.async, st.shared) visible to WGMMA reads,
// named barriers, stmatrix, and setmaxnreg, which moves registers between the warpgroups of a
// warp-specialized block.
// The instructions exist only in sm_90a code: elsewhere KERNELS_SM90A_ASM traps, so a module
// built for another target fails loudly if a host ever launches a Hopper path on it.
// KERNELS_SM90_ASM does the same for the sm_90 instructions (TMA, clusters, mbarrier phase
// waits: common/tma.cuh, common/mbarrier.cuh) below sm_90.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KERNELS_SM90A_ASM(...) asm volatile(__VA_ARGS__)
#else
#define KERNELS_SM90A_ASM(...) __trap()
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KERNELS_SM90_ASM(...) asm volatile(__VA_ARGS__)
#else
#define KERNELS_SM90_ASM(...) __trap()
#endif

// The f32 accumulator operands of a warpgroup MMA, written once for every instruction
// wrapper: N/2 accumulators per thread at n = N (m64nN), as "+f" constraints on d[0 .. count)
// and as the PTX operand list "%0, %1, ..." they fill (the accumulators come first). Each size
// extends the one below it; KERNELS_WGMMA_ACC8_AT(d, i) is the block of eight from d[i] they are
// built from.
#define KERNELS_WGMMA_ACC8_AT(d, i)                                                                               \
  "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
      "+f"(d[i + 7])
#define KERNELS_WGMMA_ACC8(d) KERNELS_WGMMA_ACC8_AT(d, 0)
#define KERNELS_WGMMA_ACC16(d) KERNELS_WGMMA_ACC8_AT(d, 0), KERNELS_WGMMA_ACC8_AT(d, 8)
#define KERNELS_WGMMA_ACC32(d) KERNELS_WGMMA_ACC16(d), KERNELS_WGMMA_ACC8_AT(d, 16), KERNELS_WGMMA_ACC8_AT(d, 24)
#define KERNELS_WGMMA_ACC40(d) KERNELS_WGMMA_ACC32(d), KERNELS_WGMMA_ACC8_AT(d, 32)
#define KERNELS_WGMMA_ACC64(d)                                                                                      \
  KERNELS_WGMMA_ACC32(d), KERNELS_WGMMA_ACC8_AT(d, 32), KERNELS_WGMMA_ACC8_AT(d, 40), KERNELS_WGMMA_ACC8_AT(d, 48), \
      KERNELS_WGMMA_ACC8_AT(d, 56)
#define KERNELS_WGMMA_ACC88(d) \
  KERNELS_WGMMA_ACC64(d), KERNELS_WGMMA_ACC8_AT(d, 64), KERNELS_WGMMA_ACC8_AT(d, 72), KERNELS_WGMMA_ACC8_AT(d, 80)
#define KERNELS_WGMMA_ACC96(d) KERNELS_WGMMA_ACC88(d), KERNELS_WGMMA_ACC8_AT(d, 88)
#define KERNELS_WGMMA_ACC128(d)                                                                                       \
  KERNELS_WGMMA_ACC96(d), KERNELS_WGMMA_ACC8_AT(d, 96), KERNELS_WGMMA_ACC8_AT(d, 104), KERNELS_WGMMA_ACC8_AT(d, 112), \
      KERNELS_WGMMA_ACC8_AT(d, 120)
#define KERNELS_WGMMA_ACC8_REGS "%0, %1, %2, %3, %4, %5, %6, %7"
#define KERNELS_WGMMA_ACC16_REGS "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define KERNELS_WGMMA_ACC32_REGS \
  KERNELS_WGMMA_ACC16_REGS       \
  ", "                           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define KERNELS_WGMMA_ACC40_REGS \
  KERNELS_WGMMA_ACC32_REGS       \
  ", "                           \
  "%32, %33, %34, %35, %36, %37, %38, %39"
#define KERNELS_WGMMA_ACC64_REGS                                                                                   \
  KERNELS_WGMMA_ACC32_REGS                                                                                         \
  ", "                                                                                                             \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, " \
  "%54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define KERNELS_WGMMA_ACC88_REGS                                                                                   \
  KERNELS_WGMMA_ACC64_REGS                                                                                         \
  ", "                                                                                                             \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, " \
  "%86, %87"
#define KERNELS_WGMMA_ACC96_REGS \
  KERNELS_WGMMA_ACC88_REGS       \
  ", "                           \
  "%88, %89, %90, %91, %92, %93, %94, %95"
#define KERNELS_WGMMA_ACC128_REGS                                                                                  \
  KERNELS_WGMMA_ACC96_REGS                                                                                         \
  ", "                                                                                                             \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, " \
  "%115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

namespace kernels {

// Orders register accesses before the WGMMAs that follow (wgmma.fence), closes the batch
// of issued WGMMAs into a group, and waits until at most N groups are still in flight.
__device__ __forceinline__ void wgmma_fence() { KERNELS_SM90A_ASM("wgmma.fence.sync.aligned;" :: : "memory"); }
__device__ __forceinline__ void wgmma_commit() { KERNELS_SM90A_ASM("wgmma.commit_group.sync.aligned;" :: : "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  KERNELS_SM90A_ASM("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Pins accumulator registers at this point of the instruction stream, so the compiler neither
// reads them before a wgmma wait nor moves their writes past a wgmma issue (an empty asm: no
// instruction, any target).
template <int N>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// This thread's completed generic-proxy shared-memory writes (cp.async included) become
// visible to the async proxy (WGMMA operand reads) once a barrier follows.
__device__ __forceinline__ void fence_proxy_async_shared() {
  KERNELS_SM90A_ASM("fence.proxy.async.shared::cta;" :: : "memory");
}

// Named barriers (id 0 is __syncthreads): `threads` (a multiple of 32) of the block meet at
// barrier `id` (1-15); arrive counts this warp in without waiting. The kernels number theirs
// in one enum each.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Four 8 x 8 matrices of 16-bit elements from registers to shared memory: register i holds
// this thread's element pair of matrix i in the mma C-fragment layout (row lane / 4, columns
// 2 (lane % 4), +1), and lanes 8i .. 8i + 7 give the shared addresses of matrix i's eight
// 16-byte rows.
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  KERNELS_SM90_ASM("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
                   "r"(r2), "r"(r3) : "memory");
}

// Register reallocation (all 128 threads of a warpgroup execute it): dec hands this
// warpgroup's registers above kRegs per thread back to the block's pool (a producer that only
// issues loads), inc blocks until kRegs per thread are free and takes them (the consumers).
// The kernel needs a register cap at launch (__launch_bounds__ with a minimum of 1 block).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0, "setmaxnreg takes 24 to 256 registers, a multiple of 8");
  KERNELS_SM90A_ASM("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0, "setmaxnreg takes 24 to 256 registers, a multiple of 8");
  KERNELS_SM90A_ASM("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// Shared-memory matrix descriptor of a tile in the 128-byte swizzle (PTX ISA, "Matrix
// Descriptor Format"): start address >> 4 in bits 0-13, leading-dimension byte offset >> 4
// in 16-29, stride byte offset >> 4 in 32-45, base offset 0 in 49-51 (swizzle atoms are
// 1024-byte aligned), swizzle mode in 62-63 (1 = 128B). Rows are 128 bytes, 8-row atoms.
//   K-major operand: SBO = bytes between 8-row groups (1024 when rows are packed); LBO is
//     unused (conventionally 16); a k step inside the 128-byte row moves the start address.
//   MN-major operand: SBO = bytes between 8-row groups along K; LBO = bytes between
//     64-element (128-byte) column panels along M / N.
__host__ __device__ __forceinline__ uint64_t make_sw128_desc(uint32_t smem_byte_addr, uint32_t lbo_bytes,
                                                             uint32_t sbo_bytes) {
  uint64_t desc = 0;
  desc |= uint64_t((smem_byte_addr & 0x3FFFF) >> 4);
  desc |= uint64_t((lbo_bytes & 0x3FFFF) >> 4) << 16;
  desc |= uint64_t((sbo_bytes & 0x3FFFF) >> 4) << 32;
  desc |= uint64_t(1) << 62;
  return desc;
}

// The K-major operand with packed 128-byte rows (a TMA box, a Sw128Tile panel): 1024 bytes
// between 8-row groups. A k step inside the row advances the start address (32 bytes per
// k16 of 16-bit elements or k32 of fp8).
__host__ __device__ __forceinline__ uint64_t make_sw128_kmajor_desc(uint32_t smem_byte_addr) {
  return make_sw128_desc(smem_byte_addr, 16, 1024);
}

// The descriptor of the same operand `bytes` further on (a k step, another panel): only the
// start-address field moves. Shared memory ends below 256 KB, so the field (address / 16 in
// 14 bits) never carries into the next, and the step is one 64-bit add (UIADD3.64, which
// writes both halves of the WGMMA's descriptor register pair), where building each descriptor
// from its address takes a mask, a shift, an or and a move of the constant upper half.
__host__ __device__ __forceinline__ uint64_t sw128_desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

}  // namespace kernels
