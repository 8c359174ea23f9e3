// Torch binding of the FP8 family: guard the device, check inputs, fill QuantizeParams /
// GemmParams and call the kernels' entry points (fp8_api.h, compiled apart in fp8_launch.cu);
// and the CUDA kernels of the operators torch.ops.kernels.fp8_gemm and fp8_quantize
// (gemm_kernel, quantize_kernel: outputs allocated, x flattened to [rows, K]). Host C++. Errors
// in the style of common/binding.h; the launchers' (common/errors.h) reach Python the same way.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include "../common/binding.h"
#include "fp8_api.h"

namespace {

namespace binding = kernels::binding;
namespace fp8 = kernels::fp8;

fp8::Format format_of(const at::Tensor& t, const char* name) {
  if (t.scalar_type() == at::kFloat8_e4m3fn) return fp8::Format::kE4M3;
  if (t.scalar_type() == at::kFloat8_e5m2) return fp8::Format::kE5M2;
  TORCH_CHECK_TYPE(false, name, " must be float8_e4m3fn or float8_e5m2, got ", binding::dtype_name(t.scalar_type()));
  return fp8::Format::kE4M3;
}

// Every tensor argument lives on the device of the first operand (`like`, called like_name).
const float* scalar_f32(const at::Tensor& t, const char* name, const at::Tensor& like, const char* like_name) {
  binding::check_device(t, name, like, like_name);
  binding::check_dtype(t, name, at::kFloat);
  TORCH_CHECK_VALUE(t.numel() == 1, name, " must hold one value, got ", t.numel());
  return t.data_ptr<float>();
}

const float* vector_f32(const c10::optional<at::Tensor>& t, const char* name, int64_t n, const at::Tensor& like,
                        const char* like_name) {
  if (!t) return nullptr;
  binding::check_device(*t, name, like, like_name);
  binding::check_dtype(*t, name, at::kFloat);
  TORCH_CHECK_VALUE(t->dim() == 1 && t->size(0) == n && t->stride(0) == 1, name, " must be a contiguous [", n,
                    "] vector, got ", t->sizes());
  return t->data_ptr<float>();
}

void quantize(const at::Tensor& x, const at::Tensor& scale, const c10::optional<at::Tensor>& out,
              const c10::optional<at::Tensor>& out_t, const c10::optional<at::Tensor>& amax) {
  binding::check_cuda(x, "x");
  binding::check_dtype(x, "x", at::kBFloat16);
  binding::check_dims(x, "x", 2, " [rows, cols]");
  binding::check_contiguous_last_dim(x, "x");
  TORCH_CHECK_VALUE(out || out_t || amax, "nothing to compute: give out, out_t or amax");
  fp8::QuantizeParams p;
  p.x = x.data_ptr();
  p.rows = x.size(0);
  p.cols = x.size(1);
  p.ld_x = x.stride(0);
  p.scale = scalar_f32(scale, "scale", x, "x");
  bool have_format = false;
  if (out) {
    binding::check_device(*out, "out", x, "x");
    p.format = format_of(*out, "out");
    have_format = true;
    TORCH_CHECK_VALUE(out->sizes() == x.sizes() && out->is_contiguous(), "out must be contiguous with x's shape ",
                      x.sizes(), ", got ", out->sizes(), " with strides ", out->strides());
    p.out = out->data_ptr();
  }
  if (out_t) {
    binding::check_device(*out_t, "out_t", x, "x");
    const fp8::Format f = format_of(*out_t, "out_t");
    TORCH_CHECK_TYPE(!have_format || f == p.format, "out_t must have out's fp8 format ",
                     binding::dtype_name(out->scalar_type()), ", got ", binding::dtype_name(out_t->scalar_type()));
    p.format = f;
    TORCH_CHECK_VALUE(
        out_t->dim() == 2 && out_t->size(0) == p.cols && out_t->size(1) == p.rows && out_t->is_contiguous(),
        "out_t must be contiguous [", p.cols, ", ", p.rows, "], got ", out_t->sizes(), " with strides ",
        out_t->strides());
    p.out_t = out_t->data_ptr();
  }
  if (amax) {
    binding::check_device(*amax, "amax", x, "x");
    binding::check_dtype(*amax, "amax", at::kFloat);
    TORCH_CHECK_VALUE(amax->numel() == 1, "amax must hold one value, got ", amax->numel());
    p.amax = amax->data_ptr<float>();
  }
  const c10::cuda::CUDAGuard guard(x.device());
  fp8::run_quantize(p, binding::sm_count(), at::cuda::getCurrentCUDAStream());
}

void quantize_blocks(const at::Tensor& x, const at::Tensor& out, const at::Tensor& scale) {
  binding::check_cuda(x, "x");
  binding::check_dtype(x, "x", at::kBFloat16);
  binding::check_dims(x, "x", 2, " [rows, cols]");
  binding::check_contiguous_last_dim(x, "x");
  binding::check_device(out, "out", x, "x");
  binding::check_dtype(out, "out", at::kFloat8_e4m3fn);
  TORCH_CHECK_VALUE(
      out.sizes() == x.sizes() && out.is_contiguous() && reinterpret_cast<uintptr_t>(out.data_ptr()) % 4 == 0,
      "out must be contiguous, 4-byte aligned, with x's shape ", x.sizes(), ", got ", out.sizes());
  const int64_t groups = (x.size(1) + 127) / 128;
  binding::check_device(scale, "scale", x, "x");
  binding::check_dtype(scale, "scale", at::kFloat);
  TORCH_CHECK_VALUE(scale.dim() == 2 && scale.size(0) == groups && scale.size(1) == x.size(0) && scale.is_contiguous(),
                    "scale must be a contiguous [", groups, ", ", x.size(0), "] float32 tensor, got ", scale.sizes());
  fp8::BlockQuantizeParams p;
  p.x = x.data_ptr();
  p.rows = x.size(0);
  p.cols = x.size(1);
  p.ld_x = x.stride(0);
  p.out = out.data_ptr();
  p.scale = scale.data_ptr<float>();
  const c10::cuda::CUDAGuard guard(x.device());
  fp8::run_block_quantize(p, binding::sm_count(), at::cuda::getCurrentCUDAStream());
}

fp8::gemm::PlanRequest request(int64_t path, int64_t block_n, int64_t persistent, int64_t accum, int64_t promote_every,
                               int64_t cluster, int64_t group_m, int64_t split_k) {
  TORCH_CHECK_VALUE(path >= -1 && path <= 3,
                    "path must be -1 (auto), 0 (wgmma), 1 (mma_sync), 2 (gemv, M <= ", fp8::gemm::kGemvMaxRows,
                    ") or 3 (gemv_tma: swap-AB WGMMA, M <= ", fp8::gemm::kGemvTmaMaxRows, ", sm_90a)");
  TORCH_CHECK_VALUE(
      block_n == 0 || block_n == 64 || block_n == 128 || block_n == 176 || block_n == 192 || block_n == 256,
      "block_n must be 0 (auto), 64, 128, 176, 192 or 256 (256: WGMMA fast accumulation)");
  TORCH_CHECK_VALUE(persistent >= -1 && persistent <= 1, "persistent must be -1, 0 or 1");
  TORCH_CHECK_VALUE(accum >= -1 && accum <= 4,
                    "accum must be -1 (auto), 0 (promote), 1 (promote ping-pong), 2 (fast), 3 (promote, "
                    "next tile issued before the epilogue) or 4 (block-scaled: with block scales only)");
  TORCH_CHECK_VALUE(promote_every >= 0 && promote_every <= 2, "promote_every must be 0 (auto), 1 or 2");
  TORCH_CHECK_VALUE(cluster >= -1 && cluster <= 3,
                    "cluster must be -1 (auto), 0 (none), 1 (pair along M), 2 (pair along N) or 3 (2 x 2)");
  TORCH_CHECK_VALUE(group_m >= 0 && group_m <= 1024, "group_m must be 0 (auto) or 1..1024");
  TORCH_CHECK_VALUE(split_k >= 0 && split_k <= fp8::gemm::kMaxSplitK, "split_k must be 0 (auto), 1 (none) or 2..",
                    fp8::gemm::kMaxSplitK, ", got ", split_k);
  fp8::gemm::PlanRequest req;
  req.force_path = int(path);
  req.force_block_n = int(block_n);
  req.persistent = int(persistent);
  req.accum = int(accum);
  req.promote_every = int(promote_every);
  req.cluster = int(cluster);
  req.group_m = int(group_m);
  req.split_k = int(split_k);
  return req;
}

pybind11::dict plan(int64_t m, int64_t n, int64_t k, int64_t path, int64_t block_n, int64_t persistent, int64_t accum,
                    int64_t promote_every, int64_t cluster, int64_t group_m, int64_t split_k) {
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  const fp8::GemmPlanSummary pl =
      fp8::plan_summary(m, n, k, prop->multiProcessorCount, prop->major, prop->minor,
                        request(path, block_n, persistent, accum, promote_every, cluster, group_m, split_k));
  pybind11::dict d;
  d["path"] = pl.path;
  d["block_m"] = pl.block_m;
  d["block_n"] = pl.block_n;
  d["tiles"] = pl.tiles;
  d["grid"] = pl.grid;
  d["persistent"] = pl.persistent;
  d["accum"] = pl.accum;
  d["promote_every"] = pl.promote_every;
  d["cluster"] = pl.cluster;
  d["group_m"] = pl.group_m;
  d["split_k"] = pl.split_k;
  // fp32 partials the binding allocates per call when split_k > 1
  d["workspace_bytes"] = pl.workspace_bytes;
  d["supported"] = pl.supported;
  // the WGMMA accumulator only, no fp32 promotion (block_n = 256 or accum = fast)
  d["fast_accum"] = pl.fast_accum;
  return d;
}

// A block-scale array: float32 on a's device, contiguous [rows, cols].
const float* block_scales(const at::Tensor& t, const char* name, int64_t rows, int64_t cols, const at::Tensor& like) {
  binding::check_device(t, name, like, "a");
  binding::check_dtype(t, name, at::kFloat);
  TORCH_CHECK_VALUE(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols && t.is_contiguous(), name,
                    " must be a contiguous [", rows, ", ", cols, "] float32 tensor, got ", t.sizes(), " with strides ",
                    t.strides());
  return t.data_ptr<float>();
}

void gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
          const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& row_scale,
          const c10::optional<at::Tensor>& col_scale, const at::Tensor& out, int64_t path, int64_t block_n,
          int64_t persistent, int64_t accum, int64_t promote_every, int64_t cluster, int64_t group_m, int64_t split_k,
          const c10::optional<at::Tensor>& block_scale_a, const c10::optional<at::Tensor>& block_scale_b) {
  binding::check_cuda(a, "a");
  binding::check_device(b, "b", a, "a");
  binding::check_device(out, "out", a, "a");
  fp8::GemmParams p;
  p.a_format = format_of(a, "a");
  p.b_format = format_of(b, "b");
  binding::check_dims(a, "a", 2, " [M, K]");
  binding::check_dims(b, "b", 2, " [N, K]");
  TORCH_CHECK_VALUE(a.size(1) == b.size(1), "a [M, K] and b [N, K] disagree on K: ", a.size(1), " vs ", b.size(1));
  TORCH_CHECK_VALUE(a.stride(1) == 1 && b.stride(1) == 1, "a and b must be K-major (contiguous rows), got strides ",
                    a.strides(), " and ", b.strides());
  binding::check_dtype(out, "out", at::kBFloat16);
  TORCH_CHECK_VALUE(out.dim() == 2 && out.size(0) == a.size(0) && out.size(1) == b.size(0) && out.stride(1) == 1,
                    "out must be [M, N] = [", a.size(0), ", ", b.size(0), "] with contiguous rows, got ", out.sizes(),
                    " with strides ", out.strides());
  binding::check_no_self_overlap(out, "out");
  p.a = a.data_ptr();
  p.b = b.data_ptr();
  p.m = a.size(0);
  p.n = b.size(0);
  p.k = a.size(1);
  // a single row (or K = 0) has no meaningful row stride: describe it as dense
  p.lda = a.size(0) > 1 && p.k > 0 ? a.stride(0) : a.size(1);
  p.ldb = b.size(0) > 1 && p.k > 0 ? b.stride(0) : b.size(1);
  p.ldd = out.size(0) > 1 ? out.stride(0) : out.size(1);
  p.scale_a = scalar_f32(scale_a, "scale_a", a, "a");
  p.scale_b = scalar_f32(scale_b, "scale_b", a, "a");
  p.row_scale = vector_f32(row_scale, "row_scale", p.m, a, "a");
  p.col_scale = vector_f32(col_scale, "col_scale", p.n, a, "a");
  if (bias) {
    binding::check_device(*bias, "bias", a, "a");
    binding::check_dtype(*bias, "bias", at::kBFloat16);
    TORCH_CHECK_VALUE(bias->dim() == 1 && bias->size(0) == p.n && bias->stride(0) == 1, "bias must be a contiguous [",
                      p.n, "] vector, got ", bias->sizes());
    p.bias = bias->data_ptr();
  }
  p.d = out.data_ptr();
  fp8::BlockScales blocks;
  if (block_scale_a || block_scale_b) {
    TORCH_CHECK_VALUE(block_scale_a && block_scale_b, "give both block_scale_a and block_scale_b, or neither");
    TORCH_CHECK_VALUE(accum == -1 || accum == fp8::gemm::kAccumBlockScaled,
                      "block scales take the block-scaled accumulation (accum -1 or 4), got accum ", accum);
    const int64_t k_blocks = (p.k + 127) / 128;
    const float* scales_a = block_scales(*block_scale_a, "block_scale_a", k_blocks, p.m, a);
    const float* scales_b = block_scales(*block_scale_b, "block_scale_b", (p.n + 127) / 128, k_blocks, a);
    if (p.m > 0 && p.n > 0 && p.k > 0) {  // else there is no product to scale (and no scales to point at)
      blocks.a = scales_a;
      blocks.b = scales_b;
      accum = fp8::gemm::kAccumBlockScaled;
    }
  }

  const c10::cuda::CUDAGuard guard(a.device());
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  // Split-K partials: from the caching allocator on the current stream (stream-ordered reuse,
  // capturable in CUDA graphs); released when this returns, after the launches are queued.
  at::Tensor workspace;
  fp8::run_gemm(
      p, request(path, block_n, persistent, accum, promote_every, cluster, group_m, split_k), prop->multiProcessorCount,
      prop->major, prop->minor, at::cuda::getCurrentCUDAStream(),
      [&](size_t bytes) {
        workspace = at::empty({int64_t(bytes / sizeof(float))}, a.options().dtype(at::kFloat));
        return workspace.data_ptr();
      },
      blocks);
}

// ---- the CUDA kernels of torch.ops.kernels.fp8_gemm and fp8_quantize ----------------------
// The operators' schemas and fake kernels are Python's (kernels/extension/ops/fp8.py, which loads
// this module as it is imported). Their CUDA kernels are C++: a decode step calls them once per
// linear layer, and there the host time is the call's time: half (GEMM) to two thirds (quantize)
// of a Python kernel's (docs/production_lab.md, "The operator's host path", has the figures). Each
// tests the conditions of its Python checks without their messages, and hands a call it refuses
// to those checks, which raise the error that says what is wrong.
template <class... Args>
void raise_from_python_checks(const char* check, const Args&... args) {
  pybind11::gil_scoped_acquire gil;
  pybind11::module_::import("kernels.extension.ops.fp8").attr(check)(args...);
}

// f(), with the launchers' errors (common/errors.h) as the dispatcher passes them on to Python.
template <class F>
void with_launcher_errors(F&& f) {
  try {
    f();
  } catch (const kernels::TypeError& e) {
    TORCH_CHECK_TYPE(false, e.what());
  } catch (const kernels::NotImplementedError& e) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, e.what());
  } catch (const kernels::ValueError& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
}

// Whether gemm_kernel takes the call as it is: the conditions of the Python checks
// (ops/fp8.py check_gemm_call), without their messages.
bool gemm_call_passes(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                      const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& row_scale,
                      const c10::optional<at::Tensor>& col_scale, int64_t path, int64_t block_n, int64_t persistent,
                      int64_t split_k) {
  const bool a_e4m3 = a.scalar_type() == at::kFloat8_e4m3fn, a_e5m2 = a.scalar_type() == at::kFloat8_e5m2;
  const bool b_e4m3 = b.scalar_type() == at::kFloat8_e4m3fn, b_e5m2 = b.scalar_type() == at::kFloat8_e5m2;
  if (!((a_e4m3 && (b_e4m3 || b_e5m2)) || (a_e5m2 && b_e4m3)) || a.dim() != 2 || b.dim() != 2) return false;
  const at::Device device = a.device();
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  if (b.size(1) != k || k % 16 || b.device() != device || a.stride(1) != 1 || b.stride(1) != 1) return false;
  if (k && ((m > 1 && a.stride(0) % 16) || (n > 1 && b.stride(0) % 16))) return false;  // fp8: strides are bytes
  if (reinterpret_cast<uintptr_t>(a.data_ptr()) % 16 || reinterpret_cast<uintptr_t>(b.data_ptr()) % 16) return false;
  for (const at::Tensor* scale : {&scale_a, &scale_b}) {
    if (scale->scalar_type() != at::kFloat || scale->numel() != 1 || scale->device() != device) return false;
  }
  const auto vector_passes = [&](const c10::optional<at::Tensor>& t, int64_t size, at::ScalarType dtype) {
    return !t || (t->scalar_type() == dtype && t->dim() == 1 && t->size(0) == size && t->device() == device &&
                  t->stride(0) == 1);
  };
  if (!vector_passes(bias, n, at::kBFloat16) || !vector_passes(row_scale, m, at::kFloat) ||
      !vector_passes(col_scale, n, at::kFloat)) {
    return false;
  }
  const bool block_n_passes =
      block_n == 0 || block_n == 64 || block_n == 128 || block_n == 176 || block_n == 192 || block_n == 256;
  if (path < -1 || path > 3 || !block_n_passes || persistent < -1 || persistent > 1 || split_k < 0 ||
      split_k > fp8::gemm::kMaxSplitK || (path == 3 && m > fp8::gemm::kGemvTmaMaxRows)) {
    return false;
  }
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device.index());
  const int cc = prop->major * 10 + prop->minor;
  return cc >= 89 && ((path != 0 && path != 3) || cc == 90);
}

at::Tensor gemm_kernel(const at::Tensor& a, const at::Tensor& b, const at::Tensor& scale_a, const at::Tensor& scale_b,
                       const c10::optional<at::Tensor>& bias, const c10::optional<at::Tensor>& row_scale,
                       const c10::optional<at::Tensor>& col_scale, int64_t path, int64_t block_n, int64_t persistent,
                       int64_t split_k) {
  if (!gemm_call_passes(a, b, scale_a, scale_b, bias, row_scale, col_scale, path, block_n, persistent, split_k)) {
    raise_from_python_checks("check_gemm_call", a, b, scale_a, scale_b, bias, row_scale, col_scale, path, block_n,
                             persistent, split_k);
  }
  at::Tensor out = at::empty({a.size(0), b.size(0)}, a.options().dtype(at::kBFloat16));
  with_launcher_errors([&] {
    gemm(a, b, scale_a, scale_b, bias, row_scale, col_scale, out, path, block_n, persistent, -1, 0, -1, 0, split_k,
         c10::nullopt, c10::nullopt);
  });
  return out;
}

// out = sat(x * scale) with x's shape (rowwise), out_t [K, rows] (transpose), amax = max |x|; x
// any bf16 tensor, viewed as [rows, K] (ops/fp8.py check_quantize_args' conditions).
std::tuple<at::Tensor, at::Tensor, at::Tensor> quantize_kernel(const at::Tensor& x, const at::Tensor& scale,
                                                               at::ScalarType fp8_dtype, bool rowwise, bool transpose) {
  const bool passes = x.scalar_type() == at::kBFloat16 &&
                      (fp8_dtype == at::kFloat8_e4m3fn || fp8_dtype == at::kFloat8_e5m2) && x.dim() >= 1 &&
                      scale.scalar_type() == at::kFloat && scale.numel() == 1 && scale.device() == x.device();
  if (!passes) raise_from_python_checks("check_quantize_args", x, scale, fp8_dtype, rowwise, transpose);
  const int64_t k = x.size(-1), rows = k ? x.numel() / k : 0;
  const at::TensorOptions fp8_options = x.options().dtype(fp8_dtype);
  at::Tensor out = rowwise ? at::empty(x.sizes(), fp8_options) : at::empty({0}, fp8_options);
  at::Tensor out_t = transpose ? at::empty({k, rows}, fp8_options) : at::empty({0}, fp8_options);
  at::Tensor amax = at::zeros({}, x.options().dtype(at::kFloat));
  if (x.numel()) {
    at::Tensor x2 = x.reshape({rows, k});
    if (x2.stride(1) != 1) x2 = x2.contiguous();
    with_launcher_errors([&] {
      quantize(x2, scale, rowwise ? c10::optional<at::Tensor>(out.view({rows, k})) : c10::nullopt,
               transpose ? c10::optional<at::Tensor>(out_t) : c10::nullopt, amax.view({1}));
    });
  }
  return {out, out_t, amax};
}

}  // namespace

TORCH_LIBRARY_IMPL(kernels, CUDA, m) {
  m.impl("fp8_gemm", TORCH_FN(gemm_kernel));
  m.impl("fp8_quantize", TORCH_FN(quantize_kernel));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  binding::register_exceptions();
  namespace py = pybind11;
  m.doc() = "FP8 quantize and GEMM (csrc/kernels/fp8).";
  m.def("quantize", &quantize, py::arg("x"), py::arg("scale"), py::arg("out"), py::arg("out_t"), py::arg("amax"),
        "out = sat(x * scale) as out's fp8 format, out_t its [cols, rows] transpose, amax = "
        "max(amax, max|x|) (atomic; zero it first). x bf16 [rows, cols]; scale f32 scalar.");
  m.def("quantize_blocks", &quantize_blocks, py::arg("x"), py::arg("out"), py::arg("scale"),
        "Per row and 128 columns of x (bf16 [rows, cols]): scale[group][row] = amax / 448 (1 where 0) and out = "
        "e4m3(x / scale), saturated; out e4m3 [rows, cols], scale float32 [ceil(cols / 128), rows].");
  m.def("gemm", &gemm, py::arg("a"), py::arg("b"), py::arg("scale_a"), py::arg("scale_b"), py::arg("bias"),
        py::arg("row_scale"), py::arg("col_scale"), py::arg("out"), py::arg("path") = -1, py::arg("block_n") = 0,
        py::arg("persistent") = -1, py::arg("accum") = -1, py::arg("promote_every") = 0, py::arg("cluster") = -1,
        py::arg("group_m") = 0, py::arg("split_k") = 0, py::arg("block_scale_a") = py::none(),
        py::arg("block_scale_b") = py::none(),
        "out[M, N] (bf16) = a[M, K] @ b[N, K]^T * scale_a * scale_b [* row_scale[:, None]] "
        "[* col_scale] [+ bias]; a, b fp8 K-major, K % 16 == 0. path/block_n/persistent/accum/"
        "promote_every/cluster/group_m/split_k override the planner (-1/0/-1/-1/0/-1/0/0 = auto); accum 0 "
        "promote, 1 promote ping-pong, 2 fast, 3 promote overlapped with the epilogue; cluster 0 none, 1 pair "
        "along M, 2 pair along N, 3 2 x 2; split_k 1 none, n: K in n slices summed by a reduction kernel "
        "(fp32 workspace allocated here). block_scale_a [ceil(K / 128), M] and block_scale_b [ceil(N / 128), "
        "ceil(K / 128)] (float32, contiguous; e4m3 a and b): each 128-deep k-block's products times its rows' A "
        "factor and its 128 x 128 B block's factor (accum 4, sm_90a).");
  m.def("plan", &plan, py::arg("m"), py::arg("n"), py::arg("k"), py::arg("path") = -1, py::arg("block_n") = 0,
        py::arg("persistent") = -1, py::arg("accum") = -1, py::arg("promote_every") = 0, py::arg("cluster") = -1,
        py::arg("group_m") = 0, py::arg("split_k") = 0,
        "The planner's choice for this problem on the current device (path, tile, grid, split_k, "
        "workspace_bytes).");
}
