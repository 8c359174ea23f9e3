// Host helpers shared by the standalone csrc tests (no torch).
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "../kernels/common/errors.h"

namespace kernels::test {

// Copies host data into a fresh device buffer. The tail padding keeps 16-byte vector loads
// and TMA boxes that run past the last element inside the allocation.
template <class T>
T* to_device(const std::vector<T>& host, size_t pad_bytes = 256) {
  T* dev = nullptr;
  KERNELS_CUDA_CHECK(cudaMalloc(&dev, host.size() * sizeof(T) + pad_bytes));
  KERNELS_CUDA_CHECK(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return dev;
}

// Runs one case and returns its verdict; an exception (launch error, unsupported shape: the
// errors of common/errors.h) counts as that case's FAIL, printed with `label` by `format`
// (label, then the message), and the remaining cases still run.
template <class Case>
bool run_guarded(const char* label, Case&& run, const char* format = "%-40s FAIL (exception: %s)\n") {
  try {
    return run();
  } catch (const std::exception& e) {
    std::printf(format, label, e.what());
    return false;
  }
}

// Runs `launch`: true when it returns, false (with the error printed after `what`) when a
// launcher throws.
template <class Launch>
bool runs(const char* what, Launch&& launch) {
  return run_guarded(
      what,
      [&] {
        launch();
        return true;
      },
      "  %s: %s\n");
}

// Whether `launch` throws Error with `expected` in its message; prints a PASS / FAIL line.
template <class Error, class Launch>
bool rejects(const char* what, Launch&& launch, const char* expected) {
  std::string got = "no error";
  bool ok = false;
  try {
    launch();
  } catch (const Error& e) {
    got = e.what();
    ok = got.find(expected) != std::string::npos;
  } catch (const std::exception& e) {
    got = std::string("wrong error type: ") + e.what();
  }
  std::printf("%s reject %-28s -> %s\n", ok ? "PASS" : "FAIL", what, got.c_str());
  return ok;
}

}  // namespace kernels::test
