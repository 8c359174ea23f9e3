// Torch binding of the rotary kernel (host C++; the kernels are rotary_launch.cu's): guard the
// device, check inputs, fill RotaryParams, launch. Shape normalisation (3-D token inputs,
// broadcast positions, output allocation) lives in kernels/extension/ops/rotary.py; this file
// trusts nothing it is given. Errors in the style of common/binding.h; the launcher's
// (common/errors.h) reach Python the same way.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include "../common/binding.h"
#include "rotary_api.h"

namespace {

namespace binding = kernels::binding;
namespace rotary = kernels::rotary;
using rotary::RotaryParams;
using rotary::TensorView;

TensorView view_of(const at::Tensor& t) {
  TensorView v;
  v.ptr = t.data_ptr();
  v.stride_b = t.stride(0);
  v.stride_s = t.stride(1);
  v.stride_h = t.stride(2);
  return v;
}

// x (q or k) and its output `out_name`: [batch, seqlen, heads, head_dim] on q's device, q's
// dtype (bfloat16 or float16), contiguous last dim, batch / seqlen / head_dim of q.
void check_qk(const at::Tensor& x, const char* name, const at::Tensor& out, const char* out_name, const at::Tensor& q) {
  binding::check_device(x, name, q, "q");
  binding::check_device(out, out_name, q, "q");
  TORCH_CHECK_TYPE(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf, name,
                   " must be bfloat16 or float16, got ", binding::dtype_name(x.scalar_type()));
  binding::check_dtype(x, name, q.scalar_type());
  binding::check_dtype(out, out_name, q.scalar_type());
  binding::check_dims(x, name, 4, " [batch, seqlen, heads, head_dim]");
  TORCH_CHECK_VALUE(out.sizes() == x.sizes(), out_name, " must have the shape of ", name, " ", x.sizes(), ", got ",
                    out.sizes());
  binding::check_contiguous_last_dim(x, name);
  binding::check_contiguous_last_dim(out, out_name);
  binding::check_no_self_overlap(out, out_name);
  TORCH_CHECK_VALUE(x.size(0) == q.size(0) && x.size(1) == q.size(1) && x.size(3) == q.size(3), name,
                    " must have q's batch, seqlen and head_dim ", q.sizes(), ", got ", x.sizes());
}

void rotary_apply(const at::Tensor& q, const c10::optional<at::Tensor>& k, const at::Tensor& q_out,
                  const c10::optional<at::Tensor>& k_out, const at::Tensor& cos, const at::Tensor& sin,
                  const c10::optional<at::Tensor>& positions, int64_t table_stride_b, bool interleaved,
                  bool conjugate) {
  check_qk(q, "q", q_out, "q_out", q);
  TORCH_CHECK_VALUE(k.has_value() == k_out.has_value(), "k and k_out must be given together, got ",
                    k.has_value() ? "k only" : "k_out only");
  if (k) check_qk(*k, "k", *k_out, "k_out", q);
  // each output against what the kernel reads: its own input may be itself (in place), the
  // other input and the other output may not be touched
  binding::check_no_overlap(q_out, "q_out", q, "q", /*allow_same=*/true);
  if (k) {
    binding::check_no_overlap(*k_out, "k_out", *k, "k", /*allow_same=*/true);
    binding::check_no_overlap(q_out, "q_out", *k, "k");
    binding::check_no_overlap(*k_out, "k_out", q, "q");
    binding::check_no_overlap(*k_out, "k_out", q_out, "q_out");
  }
  binding::check_device(cos, "cos", q, "q");
  binding::check_device(sin, "sin", q, "q");
  binding::check_dtype(cos, "cos", at::kFloat);
  binding::check_dtype(sin, "sin", at::kFloat);
  TORCH_CHECK_VALUE(cos.dim() == 2 && cos.sizes() == sin.sizes(),
                    "cos and sin must be [rows, rotary_dim / 2] of one shape, got ", cos.sizes(), " and ", sin.sizes());
  // positions outside the table read row 0 (and write NaN): there must be one
  TORCH_CHECK_VALUE(cos.size(0) >= 1, "cos and sin must have at least one row, got ", cos.sizes());
  TORCH_CHECK_VALUE(cos.stride(1) == 1 && sin.stride(1) == 1 && cos.stride(0) == sin.stride(0),
                    "cos and sin must have contiguous rows and one row stride, got strides ", cos.strides(), " and ",
                    sin.strides());
  const int64_t rotary_dim = 2 * cos.size(1);
  const int64_t head_dim = q.size(3);
  TORCH_CHECK_VALUE(rotary_dim > 0 && rotary_dim <= head_dim,
                    "rotary_dim = 2 * cos.size(1) must be in [2, head_dim = ", head_dim, "], got ", rotary_dim);

  RotaryParams p;
  p.q = view_of(q);
  p.q_out = view_of(q_out);
  if (k) {
    p.k = view_of(*k);
    p.k_out = view_of(*k_out);
    p.heads_k = binding::int_extent(k->size(2), "k heads");
  }
  p.batch = binding::int_extent(q.size(0), "batch");
  p.seqlen = binding::int_extent(q.size(1), "seqlen");
  p.heads_q = binding::int_extent(q.size(2), "q heads");
  p.head_dim = binding::int_extent(head_dim, "head_dim");
  p.rotary_dim = binding::int_extent(rotary_dim, "rotary_dim");
  p.cos = cos.data_ptr<float>();
  p.sin = sin.data_ptr<float>();
  p.table_rows = cos.size(0);
  p.table_stride_row = cos.stride(0);
  if (positions) {
    const at::Tensor& pos = *positions;
    binding::check_device(pos, "positions", q, "q");
    TORCH_CHECK_TYPE(pos.scalar_type() == at::kInt || pos.scalar_type() == at::kLong,
                     "positions must be int32 or int64, got ", binding::dtype_name(pos.scalar_type()));
    TORCH_CHECK_VALUE(pos.dim() == 2 && pos.size(0) == q.size(0) && pos.size(1) == q.size(1),
                      "positions must be [batch, seqlen] (broadcast strides allowed), got ", pos.sizes());
    p.positions = pos.data_ptr();
    p.positions_int64 = pos.scalar_type() == at::kLong;
    p.pos_stride_b = pos.stride(0);
    p.pos_stride_s = pos.stride(1);
  } else {
    TORCH_CHECK_VALUE(table_stride_b == 0 || table_stride_b == q.size(1),
                      "table_stride_b must be 0 (shared table) or seqlen = ", q.size(1), " (per-token tables), got ",
                      table_stride_b);
    const int64_t rows_needed = (q.size(0) - 1) * table_stride_b + q.size(1);
    TORCH_CHECK_VALUE(q.size(0) == 0 || cos.size(0) >= rows_needed, "cos and sin must have at least ", rows_needed,
                      " rows without positions, got ", cos.size(0));
    p.table_stride_b = table_stride_b;
  }
  p.layout = interleaved ? rotary::Layout::kInterleaved : rotary::Layout::kHalfSplit;
  p.conjugate = conjugate;
  p.copy_passthrough =
      rotary_dim < head_dim && (q_out.data_ptr() != q.data_ptr() || (k && k_out->data_ptr() != k->data_ptr()));

  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const auto element = q.scalar_type() == at::kBFloat16 ? rotary::Element::kBFloat16 : rotary::Element::kFloat16;
  rotary::run_rotary(p, element, binding::sm_count(), stream);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  binding::register_exceptions();
  m.doc() = "Rotary position embedding (csrc/kernels/rotary): q and k in one launch.";
  m.def("apply", &rotary_apply, pybind11::arg("q"), pybind11::arg("k"), pybind11::arg("q_out"), pybind11::arg("k_out"),
        pybind11::arg("cos"), pybind11::arg("sin"), pybind11::arg("positions"), pybind11::arg("table_stride_b") = 0,
        pybind11::arg("interleaved") = false, pybind11::arg("conjugate") = false,
        "Rotate q [B, S, Hq, D] (and k [B, S, Hk, D]) into q_out (k_out) with f32 cos/sin "
        "tables [rows, R/2]; positions [B, S] int32/int64 pick rows, else row = b * "
        "table_stride_b + s. Out-of-range positions give NaN. In place when out is the input.");
}
