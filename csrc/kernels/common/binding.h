// What the torch bindings (attention.cpp, rotary.cpp, fp8.cpp) share: tensor checks in one message
// style, the device's SM count, and the Python names of the launchers' exceptions. Includes
// torch: only a binding translation unit (the one file with PYBIND11_MODULE) may include this.
//
// Errors, as in errors.h: a bad argument raises ValueError, a wrong dtype TypeError, through
// torch's TORCH_CHECK_VALUE / TORCH_CHECK_TYPE here and kernels::ValueError / TypeError in the
// torch-free launchers; messages read "<argument> must <requirement>, got <what was given>".
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/extension.h>

#include <climits>
#include <exception>

#include "errors.h"

namespace kernels::binding {

// The dtype as Python spells it (torch.<name>), for messages.
inline const char* dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kBool: return "bool";
    case at::kFloat8_e4m3fn: return "float8_e4m3fn";
    case at::kFloat8_e5m2: return "float8_e5m2";
    default: return c10::toString(dtype);
  }
}

inline void check_cuda(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.is_cuda(), name, " must be a CUDA tensor, got device ", t.device());
}

// `name` is a CUDA tensor on the device of `like` (the argument called like_name).
inline void check_device(const at::Tensor& t, const char* name, const at::Tensor& like, const char* like_name) {
  check_cuda(t, name);
  TORCH_CHECK_VALUE(t.device() == like.device(), name, " must be on the device of ", like_name, " (", like.device(),
                    "), got ", t.device());
}

inline void check_dtype(const at::Tensor& t, const char* name, at::ScalarType dtype) {
  TORCH_CHECK_TYPE(t.scalar_type() == dtype, name, " must be ", dtype_name(dtype), ", got ",
                   dtype_name(t.scalar_type()));
}

// `layout` names the dims when given, e.g. " [batch, seqlen, heads, head_dim]".
inline void check_dims(const at::Tensor& t, const char* name, int64_t dims, const char* layout = "") {
  TORCH_CHECK_VALUE(t.dim() == dims, name, " must have ", dims, " dims", layout, ", got shape ", t.sizes());
}

inline void check_contiguous_last_dim(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(t.dim() > 0 && t.stride(-1) == 1, name, " must have a contiguous last dim, got strides ",
                    t.strides());
}

// An output the kernel writes element by element: no two of its elements may share memory (a
// stride of 0, as expand() makes), or they would all hold whichever write came last.
inline void check_no_self_overlap(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(at::has_internal_overlap(t) != at::MemOverlap::Yes, name,
                    " must not have elements that share memory (a stride of 0, as expand() makes), got strides ",
                    t.strides(), " for shape ", t.sizes());
}

// An output the kernel writes while it reads `in`: they may not share memory, or a CTA would read
// what another has already overwritten. allow_same admits `in` itself (the very same view,
// in-place: each element is read by the CTA that writes it, before it writes it).
inline void check_no_overlap(const at::Tensor& out, const char* out_name, const at::Tensor& in, const char* in_name,
                             bool allow_same = false) {
  const at::MemOverlapStatus status = at::get_overlap_status(out, in);
  TORCH_CHECK_VALUE(status != at::MemOverlapStatus::Partial && (allow_same || status != at::MemOverlapStatus::Full),
                    out_name, " shares memory with ", in_name,
                    allow_same ? " (only the very same view is allowed: in place)" : "", "; pass separate memory");
}

// An extent the kernels hold in an int (lengths, heads): at most INT_MAX. Tensors that large fit
// in no memory, but a stride-0 (expanded) tensor can claim any size.
inline int int_extent(int64_t value, const char* what) {
  TORCH_CHECK_VALUE(value <= INT_MAX, what, " must be at most ", INT_MAX, ", got ", value);
  return static_cast<int>(value);
}

// SMs of the current device (torch caches the properties).
inline int sm_count() { return at::cuda::getCurrentDeviceProperties()->multiProcessorCount; }

// kernels::TypeError and kernels::NotImplementedError under their Python names; the other two
// error types need nothing (pybind11 maps std::invalid_argument to ValueError and other
// std::exceptions to RuntimeError). Call once in PYBIND11_MODULE.
inline void register_exceptions() {
  pybind11::register_local_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    } catch (const NotImplementedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what());
    }
  });
}

}  // namespace kernels::binding
