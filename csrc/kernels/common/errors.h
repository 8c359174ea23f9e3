// The error model of every csrc family (attention, rotary, fp8). No torch here.
//
// Host code (launchers, planners, dispatch) reports a problem by throwing one of the types
// below; it never returns status codes. Kernels do not report errors: where a row has no valid
// result they write NaN, as each kernel documents. Each type derives from the standard
// exception that pybind11 already maps, and common/binding.h registers the two that need a
// Python name of their own, so every binding raises:
//   kernels::ValueError           -> ValueError   a shape, value, stride, alignment, size or
//                                                 configuration the launcher does not take
//   kernels::TypeError            -> TypeError    an element type or format it does not take
//   kernels::NotImplementedError  -> NotImplementedError  the device cannot run the request
//   kernels::CudaError            -> RuntimeError a CUDA runtime / driver call or a launch failed
// Messages name the entry point and the argument, say what is required and what was given:
//   "fp8 gemm: K must be a multiple of 16 (16-byte rows for TMA / cp.async), got 40"
// The torch bindings check tensors with TORCH_CHECK_VALUE / TORCH_CHECK_TYPE in the same
// style (common/binding.h), which torch maps to the same Python exceptions.
#pragma once

#include <cuda_runtime.h>

#include <sstream>
#include <stdexcept>
#include <string>

namespace kernels {

struct ValueError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
struct TypeError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
struct NotImplementedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The message parts streamed into one string (numbers, strings, anything with operator<<).
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// Throws Error with the concatenated message unless `ok`; the message is built only then.
template <class Error = ValueError, class... Parts>
void check(bool ok, const Parts&... parts) {
  if (!ok) throw Error(concat(parts...));
}

// Throws CudaError unless `err` is cudaSuccess, with the message "<what...> failed: <the CUDA
// error string>" (built only then): the one place that words a CUDA error, for
// KERNELS_CUDA_CHECK and check_launch (launch.cuh) too.
template <class... What>
void check_cuda_error(cudaError_t err, const What&... what) {
  if (err != cudaSuccess) throw CudaError(concat(what..., " failed: ", cudaGetErrorString(err)));
}

}  // namespace kernels

// check_cuda_error for a CUDA runtime call, naming the call and where it is:
// "<expr> at <file>:<line> failed: <the CUDA error string>".
#define KERNELS_CUDA_CHECK(expr) ::kernels::check_cuda_error((expr), #expr, " at ", __FILE__, ":", __LINE__)
