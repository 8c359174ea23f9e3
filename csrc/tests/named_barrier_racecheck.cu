// K13's tile slot, alone: what compute-sanitizer's racecheck makes of a shared-memory word handed
// from a producer warp to consumer warps between two named barriers (docs/worklog/k13.md, "The
// tile index"). The producer waits on *empty* (bar.sync 7), stores, and arrives on *full*
// (bar.arrive 6); the consumers wait on *full* (bar.sync 6), load, and arrive on *empty*
// (bar.arrive 7). PTX orders each store before the loads that follow the other side's bar.sync.
// `sync` mode makes the producer bar.sync on *full* as well (no overlap left), the textbook
// pattern; racecheck reports both modes (docs/worklog/k13.md). Build and run on a GPU, then
// under the sanitizer:
//   python -m tools.nvcc csrc/tests/named_barrier_racecheck.cu && build/csrc-tests/named_barrier_racecheck
//   compute-sanitizer --tool racecheck build/csrc-tests/named_barrier_racecheck [arrive|sync]
// Exit status 0 when every consumer read every index the producer wrote.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "common/cuda_utils.cuh"
#include "test_utils.h"

namespace {

constexpr int kConsumerThreads = 256;
constexpr int kThreads = kConsumerThreads + 32;  // the producer: one more warp
constexpr int kFull = 6, kEmpty = 7;             // K13's barrier ids
constexpr int kRounds = 64;

__device__ __forceinline__ void bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// Every consumer thread sums the indices it read; the host checks the sums.
__global__ void __launch_bounds__(kThreads) hand_over(int* sums, bool producer_syncs) {
  __shared__ int slot;
  const int tid = threadIdx.x;
  if (tid >= kConsumerThreads) {  // the producer warp; its lane 0 writes
    for (int round = 0; round < kRounds; ++round) {
      if (round > 0) bar_sync(kEmpty, kThreads);  // every consumer has read the previous index
      if (tid == kConsumerThreads) slot = round + 1;
      if (producer_syncs) {
        bar_sync(kFull, kThreads);
      } else {
        bar_arrive(kFull, kThreads);
      }
    }
  } else {
    int sum = 0;
    for (int round = 0; round < kRounds; ++round) {
      bar_sync(kFull, kThreads);
      sum += slot;
      if (round + 1 < kRounds) bar_arrive(kEmpty, kThreads);
    }
    sums[blockIdx.x * kConsumerThreads + tid] = sum;
  }
}

bool run(bool producer_syncs) {
  constexpr int kBlocks = 4;
  int* sums = nullptr;
  KERNELS_CUDA_CHECK(cudaMalloc(&sums, kBlocks * kConsumerThreads * sizeof(int)));
  hand_over<<<kBlocks, kThreads>>>(sums, producer_syncs);
  KERNELS_CUDA_CHECK(cudaGetLastError());
  KERNELS_CUDA_CHECK(cudaDeviceSynchronize());
  int host[kBlocks * kConsumerThreads];
  KERNELS_CUDA_CHECK(cudaMemcpy(host, sums, sizeof(host), cudaMemcpyDeviceToHost));
  cudaFree(sums);
  const int expected = kRounds * (kRounds + 1) / 2;
  int wrong = 0;
  for (int s : host) wrong += s != expected;
  std::printf("%-7s %d of %d consumer threads read every index  %s\n", producer_syncs ? "sync" : "arrive",
              kBlocks * kConsumerThreads - wrong, kBlocks * kConsumerThreads, wrong ? "FAIL" : "PASS");
  return wrong == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool only_arrive = argc > 1 && std::strcmp(argv[1], "arrive") == 0;
  const bool only_sync = argc > 1 && std::strcmp(argv[1], "sync") == 0;
  bool ok = true;
  if (!only_sync) ok &= kernels::test::run_guarded("arrive", [] { return run(false); });
  if (!only_arrive) ok &= kernels::test::run_guarded("sync", [] { return run(true); });
  return ok ? 0 : 1;
}
