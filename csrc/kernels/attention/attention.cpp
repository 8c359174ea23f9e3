// pybind11 binding of the attention kernels: guards the device, validates the torch inputs
// (TypeError / ValueError in the style of common/binding.h), fills AttnParams, dispatches through
// attn_api.h, whose errors (common/errors.h) reach Python as the same exceptions.
// Module `attention` (built by csrc/CMakeLists.txt into kernels/extension/lib/).
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "../common/binding.h"
#include "../common/cuda_utils.cuh"
#include "attn_api.h"

namespace attn = kernels::attention;
namespace binding = kernels::binding;
using at::Tensor;

namespace {

attn::AttnImpl parse_impl(const std::string& impl) {
  if (impl == "tc") return attn::AttnImpl::kTensorCore;
  if (impl == "scalar") return attn::AttnImpl::kScalar;
  TORCH_CHECK_VALUE(false, "impl must be 'tc' or 'scalar', got '", impl, "'");
}

// The prefill entry points' impl: "tc" (tensor cores: the warp-specialized kernel where it
// applies, else the cp.async one), "tc-ws" (the warp-specialized kernel, or an error saying why
// not), "tc-cpasync" (the cp.async kernel, the former default) or "scalar".
struct PrefillImpl {
  attn::AttnImpl impl;
  attn::PrefillKernel kernel;
};

PrefillImpl parse_prefill_impl(const std::string& impl) {
  if (impl == "tc") return {attn::AttnImpl::kTensorCore, attn::PrefillKernel::kAuto};
  if (impl == "tc-ws") return {attn::AttnImpl::kTensorCore, attn::PrefillKernel::kWarpSpecialized};
  if (impl == "tc-cpasync") return {attn::AttnImpl::kTensorCore, attn::PrefillKernel::kCpAsync};
  if (impl == "scalar") return {attn::AttnImpl::kScalar, attn::PrefillKernel::kAuto};
  TORCH_CHECK_VALUE(false, "impl must be 'tc', 'tc-ws', 'tc-cpasync' or 'scalar', got '", impl, "'");
}

// q's element type: bf16 or fp16; every other 16-bit tensor (k, v, out) must match it.
attn::AttnDtype element_type(const Tensor& q) {
  TORCH_CHECK_TYPE(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf,
                   "q must be bfloat16 or float16, got ", binding::dtype_name(q.scalar_type()));
  return q.scalar_type() == at::kHalf ? attn::AttnDtype::kFP16 : attn::AttnDtype::kBF16;
}

// A k / v / out tensor (or q itself, through check_q): `dims` dims, q's dtype (or `dtype`: an
// e4m3 cache), on q's CUDA device, 16-byte rows. q has passed check_q.
void check_elements(const Tensor& t, const char* name, int64_t dims, const Tensor& q,
                    std::optional<at::ScalarType> dtype = std::nullopt) {
  binding::check_dims(t, name, dims);
  binding::check_dtype(t, name, dtype.value_or(q.scalar_type()));
  binding::check_device(t, name, q, "q");
  binding::check_contiguous_last_dim(t, name);
  const int64_t row_elems = 16 / static_cast<int64_t>(t.element_size());
  for (int64_t d = 0; d + 1 < dims; ++d) {
    TORCH_CHECK_VALUE(t.stride(d) % row_elems == 0 || t.size(d) == 1, name, " strides must be multiples of ", row_elems,
                      " elements (16-byte rows), got strides ", t.strides());
  }
  TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, name, " must be 16-byte aligned");
}

// q, checked first: `dims` dims, bf16 or fp16, then as check_elements. Returns its element type.
attn::AttnDtype check_q(const Tensor& q, int64_t dims) {
  binding::check_dims(q, "q", dims);
  const attn::AttnDtype dtype = element_type(q);
  check_elements(q, "q", dims, q);
  return dtype;
}

// An int32 index tensor on q's CUDA device, contiguous in its last dim.
void check_int32_cuda(const Tensor& t, const char* name, int64_t dims, const Tensor& q) {
  binding::check_dims(t, name, dims);
  binding::check_dtype(t, name, at::kInt);
  binding::check_device(t, name, q, "q");
  binding::check_contiguous_last_dim(t, name);
}

void check_head_dim(int64_t d) {
  TORCH_CHECK_VALUE(d == 64 || d == 128 || d == 256, "head_dim ", d,
                    " is not supported; supported: " KERNELS_SUPPORTED_HEAD_DIMS);
}

float resolve_scale(std::optional<double> scale, int64_t head_dim) {
  const double s = scale.has_value() ? *scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
  // finite in float, and so is the kernels' scale * log2(e) (past ~2.4e38 it is inf: NaN rows)
  TORCH_CHECK_VALUE(std::isfinite(s) && s > 0.0 && std::isfinite(static_cast<float>(s * 1.4426950408889634)),
                    "scale must be a positive number with scale * log2(e) within float32's range, got ", s);
  return static_cast<float>(s);
}

bool capturing() { return c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None; }

// q: [B, Sq, Hq, D] (dense) or [total_q, Hq, D] (packed).
void fill_q_out(attn::AttnParams& p, const Tensor& q, const Tensor& out, bool packed) {
  p.q = q.data_ptr();
  p.o = out.data_ptr();
  const int off = packed ? 0 : 1;
  p.q_batch_stride = packed ? 0 : q.stride(0);
  p.q_token_stride = q.stride(off);
  p.q_head_stride = q.stride(off + 1);
  p.o_batch_stride = packed ? 0 : out.stride(0);
  p.o_token_stride = out.stride(off);
  p.o_head_stride = out.stride(off + 1);
}

Tensor make_or_check_out(const std::optional<Tensor>& out, const Tensor& q) {
  if (!out.has_value()) return at::empty_like(q, q.options().memory_format(at::MemoryFormat::Contiguous));
  const Tensor& o = *out;
  TORCH_CHECK_VALUE(o.sizes() == q.sizes(), "out must have q's shape ", q.sizes(), ", got ", o.sizes());
  check_elements(o, "out", q.dim(), q);
  binding::check_no_self_overlap(o, "out");
  return o;
}

// lse: dense [B, Hq, Sq], packed [Hq, total_q]; fp32.
void fill_lse(attn::AttnParams& p, const std::optional<Tensor>& lse, const Tensor& q, bool packed) {
  if (!lse.has_value()) return;
  const Tensor& l = *lse;
  binding::check_dtype(l, "lse", at::kFloat);
  binding::check_device(l, "lse", q, "q");
  binding::check_no_self_overlap(l, "lse");
  if (packed) {
    TORCH_CHECK_VALUE(l.dim() == 2 && l.size(0) == q.size(1) && l.size(1) == q.size(0),
                      "lse must have shape [heads_q, total_q] = [", q.size(1), ", ", q.size(0), "], got ", l.sizes());
    p.lse_batch_stride = 0;
    p.lse_head_stride = l.stride(0);
    p.lse_token_stride = l.stride(1);
  } else {
    TORCH_CHECK_VALUE(l.dim() == 3 && l.size(0) == q.size(0) && l.size(1) == q.size(2) && l.size(2) == q.size(1),
                      "lse must have shape [batch, heads_q, seqlen_q] = [", q.size(0), ", ", q.size(2), ", ", q.size(1),
                      "], got ", l.sizes());
    p.lse_batch_stride = l.stride(0);
    p.lse_head_stride = l.stride(1);
    p.lse_token_stride = l.stride(2);
  }
  p.lse = l.data_ptr<float>();
}

// mask: bool [B, L] or [B, Sq, L], True = keep; keys >= L are masked out.
void fill_mask(attn::AttnParams& p, const std::optional<Tensor>& mask, const Tensor& q, int64_t batch, int64_t seqlen_q,
               std::optional<int64_t> required_len) {
  if (!mask.has_value()) return;
  const Tensor& m = *mask;
  TORCH_CHECK_TYPE(m.scalar_type() == at::kBool, "mask must be bool (True = keep), got ",
                   binding::dtype_name(m.scalar_type()));
  binding::check_device(m, "mask", q, "q");
  TORCH_CHECK_VALUE((m.dim() == 2 || m.dim() == 3) && m.size(0) == batch,
                    "mask must have shape [batch, seqlen_k] or [batch, seqlen_q, seqlen_k] with batch = ", batch,
                    ", got ", m.sizes());
  if (m.dim() == 3) {
    TORCH_CHECK_VALUE(m.size(1) == seqlen_q, "mask [batch, seqlen_q, seqlen_k] needs seqlen_q = ", seqlen_q, ", got ",
                      m.sizes());
  }
  if (required_len.has_value()) {
    TORCH_CHECK_VALUE(m.size(-1) == *required_len, "mask last dim must be seqlen_k = ", *required_len, ", got ",
                      m.sizes());
  }
  binding::check_contiguous_last_dim(m, "mask");
  p.mask = m.data_ptr<bool>();
  p.mask_batch_stride = m.stride(0);
  p.mask_q_stride = m.dim() == 3 ? m.stride(1) : 0;
  p.mask_len = binding::int_extent(m.size(-1), "mask's last dim");
}

void fill_common(attn::AttnParams& p, attn::AttnDtype dtype, int64_t heads_q, int64_t heads_kv, int64_t head_dim,
                 bool causal, std::optional<double> scale) {
  check_head_dim(head_dim);
  TORCH_CHECK_VALUE(heads_kv > 0 && heads_q % heads_kv == 0, "heads_q (", heads_q, ") must be a multiple of heads_kv (",
                    heads_kv, ")");
  p.heads_q = static_cast<int>(heads_q);
  p.heads_kv = static_cast<int>(heads_kv);
  p.head_dim = static_cast<int>(head_dim);
  p.group = static_cast<int>(heads_q / heads_kv);
  p.scale = resolve_scale(scale, head_dim);
  p.scale_log2 = p.scale * 1.4426950408889634f;
  p.causal = causal;
  p.dtype = dtype;
}

// K and V base pointers and (block, token, head) strides; a block is a batch entry
// (contiguous [B, Sk, Hkv, D]) or a page (paged [num_pages, page_size, Hkv, D]).
void set_kv_pointers(attn::AttnParams& p, const Tensor& k, const Tensor& v) {
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.k_block_stride = k.stride(0);
  p.k_token_stride = k.stride(1);
  p.k_head_stride = k.stride(2);
  p.v_block_stride = v.stride(0);
  p.v_token_stride = v.stride(1);
  p.v_head_stride = v.stride(2);
}

void fill_contiguous_kv(attn::AttnParams& p, const Tensor& q, const Tensor& k, const Tensor& v) {
  check_elements(k, "k", 4, q);
  check_elements(v, "v", 4, q);
  TORCH_CHECK_VALUE(k.sizes() == v.sizes(), "k and v must have the same shape, got ", k.sizes(), " and ", v.sizes());
  TORCH_CHECK_VALUE(k.size(0) == q.size(0), "k batch (", k.size(0), ") must equal q batch (", q.size(0), ")");
  TORCH_CHECK_VALUE(k.size(3) == q.size(3), "k head_dim (", k.size(3), ") must equal q head_dim (", q.size(3), ")");
  TORCH_CHECK_VALUE(k.size(1) >= 1, "seqlen_k must be >= 1");
  set_kv_pointers(p, k, v);
  p.seqlen_k = binding::int_extent(k.size(1), "seqlen_k");
}

// An e4m3 cache's factors (KvScales): float32 [Hkv] (one per kv head) or [1] (one for all), on
// q's device. Their values (finite, > 0) are checked with the lengths.
struct KvScales {
  std::optional<Tensor> k, v;
};

void fill_kv_scales(attn::AttnParams& p, const KvScales& scales, const Tensor& q, const Tensor& k_cache) {
  const bool e4m3 = k_cache.scalar_type() == at::kFloat8_e4m3fn;
  if (!e4m3) {
    TORCH_CHECK_VALUE(!scales.k.has_value() && !scales.v.has_value(),
                      "k_scale and v_scale are the factors of an e4m3 cache; k_cache is ",
                      binding::dtype_name(k_cache.scalar_type()));
    return;
  }
  TORCH_CHECK_VALUE(scales.k.has_value() && scales.v.has_value(),
                    "an e4m3 cache (float8_e4m3fn k_cache / v_cache) needs k_scale and v_scale");
  const int64_t heads_kv = k_cache.size(2);
  for (const auto& [t, name] : {std::pair{*scales.k, "k_scale"}, std::pair{*scales.v, "v_scale"}}) {
    binding::check_dtype(t, name, at::kFloat);
    binding::check_device(t, name, q, "q");
    TORCH_CHECK_VALUE(t.dim() == 1 && (t.size(0) == heads_kv || t.size(0) == 1) && t.stride(0) == 1, name,
                      " must be a contiguous float32 [Hkv = ", heads_kv, "] (per kv head) or [1], got shape ",
                      t.sizes());
  }
  TORCH_CHECK_VALUE(scales.k->size(0) == scales.v->size(0), "k_scale and v_scale must have one shape, got ",
                    scales.k->sizes(), " and ", scales.v->sizes());
  p.kv_dtype = attn::KvDtype::kE4M3;
  p.k_scale = scales.k->data_ptr<float>();
  p.v_scale = scales.v->data_ptr<float>();
  p.kv_scale_head_stride = scales.k->size(0) == 1 ? 0 : 1;
}

// Paged cache [num_pages, page_size, Hkv, D], of q's dtype or e4m3 (with its factors, decode
// only). Lengths beyond the page table raise here (one device->host copy; skipped under
// CUDA-graph capture, where the kernel writes NaN for such a batch instead). The page ids those
// lengths use, and an e4m3 cache's factors, are checked in the same copy; without
// check_seqlens (and debug) they are the caller's contract.
void fill_paged_kv(attn::AttnParams& p, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                   const Tensor& page_table, const Tensor& seqlens_k, int64_t batch, int64_t head_dim,
                   bool check_seqlens, bool debug, const KvScales& scales = {}) {
  const bool e4m3 = p.kv_dtype == attn::KvDtype::kE4M3;
  const auto kv_dtype = e4m3 ? std::optional{at::kFloat8_e4m3fn} : std::nullopt;
  check_elements(k_cache, "k_cache", 4, q, kv_dtype);
  check_elements(v_cache, "v_cache", 4, q, kv_dtype);
  TORCH_CHECK_VALUE(k_cache.sizes() == v_cache.sizes(), "k_cache and v_cache must have the same shape, got ",
                    k_cache.sizes(), " and ", v_cache.sizes());
  TORCH_CHECK_VALUE(k_cache.size(3) == head_dim, "k_cache head_dim (", k_cache.size(3), ") must equal q head_dim (",
                    head_dim, ")");
  TORCH_CHECK_VALUE(k_cache.size(1) >= 1, "page_size must be >= 1");
  check_int32_cuda(page_table, "page_table", 2, q);
  check_int32_cuda(seqlens_k, "seqlens_k", 1, q);
  TORCH_CHECK_VALUE(page_table.size(0) == batch, "page_table must have shape [batch = ", batch, ", max_pages], got ",
                    page_table.sizes());
  TORCH_CHECK_VALUE(seqlens_k.size(0) == batch, "seqlens_k must have shape [batch = ", batch, "], got ",
                    seqlens_k.sizes());
  set_kv_pointers(p, k_cache, v_cache);
  p.page_table = page_table.data_ptr<int>();
  p.page_table_batch_stride = page_table.stride(0);
  p.seqlens_k = seqlens_k.data_ptr<int>();
  p.page_size = binding::int_extent(k_cache.size(1), "page_size");
  p.max_pages = binding::int_extent(page_table.size(1), "max_pages");
  p.num_pages = binding::int_extent(k_cache.size(0), "num_pages");
  const int64_t capacity = page_table.size(1) * k_cache.size(1);

  if (batch == 0 || capturing()) return;
  if (check_seqlens || debug) {
    // One device->host copy: the lengths' range, and whether any page a length uses (page
    // i < ceil(length / page_size) of its row) lies outside the cache: the kernels would read
    // another allocation from it (TMA zero-fills: wrong rows without a fault).
    const int64_t num_pages = k_cache.size(0);
    const Tensor needed = (seqlens_k.to(at::kLong) + p.page_size - 1).div(p.page_size, "floor");
    const Tensor used =
        at::arange(page_table.size(1), page_table.options().dtype(at::kLong)).unsqueeze(0) < needed.unsqueeze(1);
    const Tensor bad_pages = (used & ((page_table < 0) | (page_table >= num_pages))).any().to(at::kInt);
    Tensor bad_scales = at::zeros({}, seqlens_k.options());
    if (e4m3) {
      const auto bad = [](const Tensor& s) { return (~at::isfinite(s) | (s <= 0)).any(); };
      bad_scales = (bad(*scales.k) | bad(*scales.v)).to(at::kInt);
    }
    const Tensor facts = at::stack({seqlens_k.min(), seqlens_k.max(), bad_pages, bad_scales}).cpu();
    const int lo = facts[0].item<int>(), hi = facts[1].item<int>();
    TORCH_CHECK_VALUE(lo >= 0 && hi <= capacity, "seqlens_k must be in [0, max_pages * page_size = ", capacity,
                      "], got values in [", lo, ", ", hi, "]");
    TORCH_CHECK_INDEX(facts[2].item<int>() == 0, "page_table has page ids outside [0, num_pages = ", num_pages,
                      ") among the pages seqlens_k uses");
    TORCH_CHECK_VALUE(facts[3].item<int>() == 0, "k_scale and v_scale must be finite and positive");
    if (p.mask != nullptr) {
      TORCH_CHECK_VALUE(p.mask_len >= hi, "mask last dim (", p.mask_len, ") is shorter than the longest seqlens_k (",
                        hi, ")");
    }
  }
}

void run_decode_with_workspace(attn::AttnParams& p, const Tensor& q, const Tensor& out,
                               const std::optional<Tensor>& lse, int64_t num_splits, int64_t max_seqlen_k,
                               const std::optional<Tensor>& workspace, const std::optional<Tensor>& split_counters,
                               attn::AttnImpl impl) {
  const int sms = binding::sm_count();
  if (num_splits <= 0) {
    num_splits = attn::decode_num_splits(p.batch, p.heads_kv, p.seqlen_q, p.group, static_cast<int>(max_seqlen_k),
                                         p.head_dim, sms, p.kv_dtype == attn::KvDtype::kE4M3);
  }
  TORCH_CHECK_VALUE(num_splits >= 1 && num_splits <= attn::kMaxDecodeSplits, "num_splits must be in [1, ",
                    attn::kMaxDecodeSplits, "], got ", num_splits);
  p.num_splits = static_cast<int>(num_splits);
  const int64_t floats = attn::decode_workspace_floats(p.num_splits, p.batch, p.heads_q, p.seqlen_q, p.head_dim);
  Tensor ws;
  if (floats > 0) {
    if (workspace.has_value()) {
      ws = *workspace;
      binding::check_dtype(ws, "workspace", at::kFloat);
      TORCH_CHECK_VALUE(ws.is_contiguous() && ws.numel() >= floats, "workspace must be contiguous with at least ",
                        floats, " floats (decode_workspace_size), got ", ws.numel());
      TORCH_CHECK_VALUE(reinterpret_cast<uintptr_t>(ws.data_ptr()) % 16 == 0,
                        "workspace must be 16-byte aligned (the combine kernel reads float4)");
      binding::check_device(ws, "workspace", q, "q");
      // the combine kernel reads the partial rows while it writes out and lse
      binding::check_no_overlap(out, "out", ws, "workspace");
      if (lse.has_value()) binding::check_no_overlap(*lse, "lse", ws, "workspace");
    } else {
      ws = at::empty({floats}, q.options().dtype(at::kFloat));
    }
    p.o_partial = ws.data_ptr<float>();
    p.lse_partial = p.o_partial + static_cast<int64_t>(p.num_splits) * p.batch * p.heads_q * p.seqlen_q * p.head_dim;
  }
  if (split_counters.has_value()) {
    const Tensor& counters = *split_counters;
    const int64_t count = attn::decode_counter_count(p.batch, p.heads_kv, p.seqlen_q, p.group);
    binding::check_dtype(counters, "split_counters", at::kInt);
    TORCH_CHECK_VALUE(counters.is_contiguous() && counters.numel() >= count, "split_counters must be contiguous with ",
                      "at least ", count, " ints (decode_counter_count), got ", counters.numel());
    binding::check_device(counters, "split_counters", q, "q");
    if (floats > 0) binding::check_no_overlap(counters, "split_counters", ws, "workspace");
    p.split_counters = counters.data_ptr<int>();
  }
  attn::run_decode(p, impl, c10::cuda::getCurrentCUDAStream().stream());
}

// ---- entry points ------------------------------------------------------------------------

// out and lse, where the caller passed them, against what the kernels read while they write them:
// q (out may be q itself), K, V. An out allocated here overlaps nothing (no check: the decode
// host path counts its microseconds).
void check_outputs_apart(const std::optional<Tensor>& out, const std::optional<Tensor>& lse, const Tensor& q,
                         const Tensor& k, const Tensor& v) {
  if (out.has_value()) {
    binding::check_no_overlap(*out, "out", q, "q", /*allow_same=*/true);
    binding::check_no_overlap(*out, "out", k, "k");
    binding::check_no_overlap(*out, "out", v, "v");
  }
  if (lse.has_value()) {
    binding::check_no_overlap(*lse, "lse", q, "q");
    binding::check_no_overlap(*lse, "lse", k, "k");
    binding::check_no_overlap(*lse, "lse", v, "v");
    if (out.has_value()) binding::check_no_overlap(*lse, "lse", *out, "out");
  }
}

// Hkv of k or k_cache (4-D), read after its rank is checked, so that the error names it.
int64_t heads_kv_of(const Tensor& k, const char* name) {
  binding::check_dims(k, name, 4);
  return k.size(2);
}

// What every dense-q entry point (q [B, Sq, Hq, D]) sets up first: q's checks, heads, scale,
// batch and query length, out (allocated when not given) and lse. Returns out.
Tensor fill_dense_q(attn::AttnParams& p, const Tensor& q, int64_t heads_kv, bool causal, std::optional<double> scale,
                    const std::optional<Tensor>& out, const std::optional<Tensor>& lse) {
  const attn::AttnDtype dtype = check_q(q, 4);
  fill_common(p, dtype, q.size(2), heads_kv, q.size(3), causal, scale);
  p.batch = binding::int_extent(q.size(0), "batch");
  p.seqlen_q = binding::int_extent(q.size(1), "seqlen_q");
  Tensor o = make_or_check_out(out, q);
  fill_q_out(p, q, o, false);
  fill_lse(p, lse, q, false);
  return o;
}

Tensor decode(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, std::optional<double> scale,
              const std::optional<Tensor>& mask, const std::optional<Tensor>& out, const std::optional<Tensor>& lse,
              int64_t num_splits, const std::string& impl, const std::optional<Tensor>& workspace,
              const std::optional<Tensor>& split_counters) {
  attn::AttnParams p;
  Tensor o = fill_dense_q(p, q, heads_kv_of(k, "k"), causal, scale, out, lse);
  fill_contiguous_kv(p, q, k, v);
  fill_mask(p, mask, q, q.size(0), q.size(1), k.size(1));
  check_outputs_apart(out, lse, q, k, v);
  // Every shape / dtype check above runs before any CUDA call; the guard makes q's device
  // current for the split heuristic, the workspace and the stream.
  const c10::cuda::CUDAGuard guard(q.device());
  run_decode_with_workspace(p, q, o, lse, num_splits, k.size(1), workspace, split_counters, parse_impl(impl));
  return o;
}

Tensor paged_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& page_table,
                    const Tensor& seqlens_k, bool causal, std::optional<double> scale,
                    const std::optional<Tensor>& mask, const std::optional<Tensor>& out,
                    const std::optional<Tensor>& lse, int64_t num_splits, const std::string& impl,
                    const std::optional<Tensor>& workspace, bool check_seqlens, bool debug,
                    const std::optional<Tensor>& split_counters, const std::optional<Tensor>& k_scale,
                    const std::optional<Tensor>& v_scale) {
  attn::AttnParams p;
  Tensor o = fill_dense_q(p, q, heads_kv_of(k_cache, "k_cache"), causal, scale, out, lse);
  const KvScales scales{k_scale, v_scale};
  fill_kv_scales(p, scales, q, k_cache);
  const attn::AttnImpl kernel_impl = parse_impl(impl);
  TORCH_CHECK_VALUE(p.kv_dtype == attn::KvDtype::kSame || kernel_impl == attn::AttnImpl::kTensorCore,
                    "an e4m3 cache runs on impl='tc' only");
  fill_mask(p, mask, q, q.size(0), q.size(1), std::nullopt);
  check_outputs_apart(out, lse, q, k_cache, v_cache);
  const c10::cuda::CUDAGuard guard(q.device());
  fill_paged_kv(p, q, k_cache, v_cache, page_table, seqlens_k, q.size(0), q.size(3), check_seqlens, debug, scales);
  run_decode_with_workspace(p, q, o, lse, num_splits, page_table.size(1) * k_cache.size(1), workspace, split_counters,
                            kernel_impl);
  return o;
}

// Where the first element of `bad` (a bool tensor shaped like `like`) sits, as "[i, j, ...]".
std::string first_index(const Tensor& bad) {
  int64_t flat = bad.flatten().nonzero().index({0, 0}).item<int64_t>();
  std::vector<int64_t> index(bad.dim());
  for (int64_t d = bad.dim() - 1; d >= 0; --d) {
    index[d] = flat % bad.size(d);
    flat /= bad.size(d);
  }
  std::string text = "[";
  for (size_t d = 0; d < index.size(); ++d) text += (d ? ", " : "") + std::to_string(index[d]);
  return text + "]";
}

// prefill's debug mode, after the launch: waits for it, so that a fault of the kernel is reported
// by this call and names the kernel, and holds the warp-specialized kernel's out / lse to the
// cp.async kernel's on the same inputs (out within 0.05 + 0.05 |ref|, lse within 0.02 + 0.001 |ref|,
// the same -inf rows): a cross-check for the new kernel on a caller's real shapes. Both
// tolerances are far above the rounding differences of two bf16 kernels; what they catch is a
// wrong tile, a missed mask, a race or uninitialised memory.
void debug_check_prefill(const attn::AttnParams& p, const PrefillImpl& choice, bool ran_ws, const Tensor& q,
                         const Tensor& o, const std::optional<Tensor>& lse) {
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const char* name = ran_ws                                   ? "the warp-specialized kernel"
                     : choice.impl == attn::AttnImpl::kScalar ? "the scalar kernel"
                                                              : "the cp.async kernel";
  const cudaError_t err = cudaStreamSynchronize(stream);
  TORCH_CHECK(err == cudaSuccess, "prefill (debug): ", name, " failed: ", cudaGetErrorString(err));
  // in place (out is q) the kernel has overwritten the queries the cross-check would run on
  if (!ran_ws || o.data_ptr() == q.data_ptr()) return;
  attn::AttnParams pr = p;
  const Tensor ref = at::empty_like(q, q.options().memory_format(at::MemoryFormat::Contiguous));
  fill_q_out(pr, q, ref, false);
  std::optional<Tensor> ref_lse;
  if (lse.has_value()) {
    ref_lse = at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
    fill_lse(pr, ref_lse, q, false);
  }
  attn::run_prefill(pr, attn::AttnImpl::kTensorCore, stream, attn::PrefillKernel::kCpAsync);
  const Tensor got = o.to(at::kFloat), want = ref.to(at::kFloat);
  const Tensor bad = ((got - want).abs() > 0.05 + 0.05 * want.abs()) | got.isnan();
  TORCH_CHECK(!bad.any().item<bool>(),
              "prefill (debug): the warp-specialized kernel's out differs from the cp.async "
              "kernel's in ",
              bad.sum().item<int64_t>(), " elements; the first at [batch, token, head, dim] = ", first_index(bad), ": ",
              got.index({bad}).index({0}).item<float>(), " against ", want.index({bad}).index({0}).item<float>());
  if (lse.has_value()) {
    const Tensor& l = *lse;
    const Tensor& r = *ref_lse;
    const Tensor lse_bad = (l != r) & ~((l - r).abs() <= 0.02 + 0.001 * r.abs());
    TORCH_CHECK(!lse_bad.any().item<bool>(),
                "prefill (debug): the warp-specialized kernel's lse differs from the "
                "cp.async kernel's in ",
                lse_bad.sum().item<int64_t>(), " rows; the first at [batch, head, token] = ", first_index(lse_bad),
                ": ", l.index({lse_bad}).index({0}).item<float>(), " against ",
                r.index({lse_bad}).index({0}).item<float>());
  }
}

Tensor prefill(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, std::optional<double> scale,
               const std::optional<Tensor>& mask, const std::optional<Tensor>& out, const std::optional<Tensor>& lse,
               const std::string& impl, bool debug) {
  attn::AttnParams p;
  Tensor o = fill_dense_q(p, q, heads_kv_of(k, "k"), causal, scale, out, lse);
  fill_contiguous_kv(p, q, k, v);
  fill_mask(p, mask, q, q.size(0), q.size(1), k.size(1));
  check_outputs_apart(out, lse, q, k, v);
  const PrefillImpl choice = parse_prefill_impl(impl);
  const c10::cuda::CUDAGuard guard(q.device());
  attn::run_prefill(p, choice.impl, c10::cuda::getCurrentCUDAStream().stream(), choice.kernel);
  if (debug && !capturing()) {
    const bool ran_ws = choice.impl == attn::AttnImpl::kTensorCore && choice.kernel != attn::PrefillKernel::kCpAsync &&
                        attn::prefill_ws_unsupported_here(p) == nullptr;
    debug_check_prefill(p, choice, ran_ws, q, o, lse);
  }
  return o;
}

// cu_seqlens_q read back to the host and checked (one device->host copy): [0] = 0,
// non-decreasing, [batch] = total_q. Returns the copy and sets p.seqlen_q to the longest.
Tensor read_cu_seqlens_q(attn::AttnParams& p, const Tensor& cu_seqlens_q, int64_t total_q) {
  const Tensor cu_host = cu_seqlens_q.cpu().contiguous();
  const int32_t* cu = cu_host.data_ptr<int32_t>();
  const int64_t batch = cu_host.size(0) - 1;
  int64_t max_q = 0;
  TORCH_CHECK_VALUE(cu[0] == 0, "cu_seqlens_q[0] must be 0, got ", cu[0]);
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK_VALUE(cu[b + 1] >= cu[b], "cu_seqlens_q must be non-decreasing, got ", cu_host);
    max_q = std::max<int64_t>(max_q, cu[b + 1] - cu[b]);
  }
  TORCH_CHECK_VALUE(cu[batch] == total_q, "cu_seqlens_q[-1] (", cu[batch], ") must equal total_q = q.size(0) (",
                    total_q, ")");
  p.seqlen_q = static_cast<int>(max_q);
  return cu_host;
}

// The warp-specialized kernel finds its query tiles from cu_seqlens_q on the device, so without
// the checks (check_seqlens=False) the call never waits for the GPU and can be graph-captured.
// The cp.async kernel (a mask, page sizes that do not fit the tiles, impl="tc-cpasync") walks a
// schedule built here from a host copy of cu_seqlens_q.
Tensor paged_prefill(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& page_table,
                     const Tensor& cu_seqlens_q, const Tensor& seqlens_k, bool causal, std::optional<double> scale,
                     const std::optional<Tensor>& mask, const std::optional<Tensor>& out,
                     const std::optional<Tensor>& lse, const std::string& impl, bool check_seqlens, bool debug) {
  const attn::AttnDtype dtype = check_q(q, 3);
  check_int32_cuda(cu_seqlens_q, "cu_seqlens_q", 1, q);
  const c10::cuda::CUDAGuard guard(q.device());
  const int64_t batch = cu_seqlens_q.size(0) - 1;
  TORCH_CHECK_VALUE(batch >= 1, "cu_seqlens_q must have batch + 1 >= 2 entries, got ", cu_seqlens_q.sizes());

  attn::AttnParams p;
  fill_common(p, dtype, q.size(1), heads_kv_of(k_cache, "k_cache"), q.size(2), causal, scale);
  p.batch = static_cast<int>(batch);
  p.seqlen_q = binding::int_extent(q.size(0), "total_q");  // a bound on the longest sequence until cu_seqlens_q is read
  p.cu_seqlens_q = cu_seqlens_q.data_ptr<int>();
  p.total_q = static_cast<int>(q.size(0));  // checked on the line above
  Tensor o = make_or_check_out(out, q);
  fill_q_out(p, q, o, true);
  fill_lse(p, lse, q, true);
  check_outputs_apart(out, lse, q, k_cache, v_cache);
  const auto refuse_capture = [] {
    TORCH_CHECK_VALUE(!capturing(),
                      "paged_prefill on the cp.async kernel (a mask, pages that do not fit the warp-specialized "
                      "kernel's tiles, impl='tc-cpasync', or no Hopper GPU) builds its Q schedule on the host and "
                      "cannot be graph-captured");
  };
  Tensor cu_host;
  if (mask.has_value()) {  // the cp.async kernel; the mask's shape check needs Sq
    refuse_capture();
    cu_host = read_cu_seqlens_q(p, cu_seqlens_q, q.size(0));
  }
  fill_mask(p, mask, q, batch, p.seqlen_q, std::nullopt);
  TORCH_CHECK_TYPE(k_cache.scalar_type() != at::kFloat8_e4m3fn,
                   "paged_prefill reads 16-bit pages; an e4m3 cache runs on paged_decode, or on its pages "
                   "dequantized (attention() and PrefillPlan do that)");
  fill_paged_kv(p, q, k_cache, v_cache, page_table, seqlens_k, batch, q.size(2), check_seqlens, debug);
  const PrefillImpl choice = parse_prefill_impl(impl);
  const bool tiles_on_device = attn::packed_q_tiles_on_device(p, choice.impl, choice.kernel);
  if (!tiles_on_device) refuse_capture();
  if (!cu_host.defined() && (!tiles_on_device || ((check_seqlens || debug) && !capturing()))) {
    cu_host = read_cu_seqlens_q(p, cu_seqlens_q, q.size(0));
  }
  Tensor schedule_dev;  // the cp.async kernel's, alive until the launch is queued
  if (!tiles_on_device) {
    const std::vector<int32_t> schedule =
        attn::plan_packed_q_schedule(p, cu_host.data_ptr<int32_t>(), choice.impl, choice.kernel);
    if (schedule.empty()) return o;
    schedule_dev =
        at::from_blob(const_cast<int32_t*>(schedule.data()), {static_cast<int64_t>(schedule.size())}, at::kInt)
            .to(q.device(), /*non_blocking=*/false, /*copy=*/true);
    p.q_schedule = schedule_dev.data_ptr<int>();
    p.num_q_tiles = static_cast<int>(schedule.size() / 2);
  }
  attn::run_prefill(p, choice.impl, c10::cuda::getCurrentCUDAStream().stream(), choice.kernel);
  return o;
}

int64_t decode_num_splits(int64_t batch, int64_t heads_kv, int64_t seqlen_q, int64_t group, int64_t max_seqlen_k,
                          int64_t head_dim, bool e4m3_kv) {
  check_head_dim(head_dim);
  const int sms = binding::sm_count();
  return attn::decode_num_splits(static_cast<int>(batch), static_cast<int>(heads_kv), static_cast<int>(seqlen_q),
                                 static_cast<int>(group), static_cast<int>(max_seqlen_k), static_cast<int>(head_dim),
                                 sms, e4m3_kv);
}

int64_t decode_counter_count(int64_t batch, int64_t heads_kv, int64_t seqlen_q, int64_t group) {
  return attn::decode_counter_count(static_cast<int>(batch), static_cast<int>(heads_kv), static_cast<int>(seqlen_q),
                                    static_cast<int>(group));
}

int64_t decode_workspace_size(int64_t num_splits, int64_t batch, int64_t heads_q, int64_t seqlen_q, int64_t head_dim) {
  return attn::decode_workspace_floats(static_cast<int>(num_splits), static_cast<int>(batch), static_cast<int>(heads_q),
                                       static_cast<int>(seqlen_q), static_cast<int>(head_dim));
}

}  // namespace

// No py::kw_only(): the Python wrappers pass every argument by position, in the order of each
// py::arg list (kernels/extension/ops/attention.py says why; they stay keyword-only for callers).
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  binding::register_exceptions();
  m.doc() = "Attention kernels (bf16 or fp16; head_dim 64/128/256; GQA; bottom-right causal; bool masks, True = keep).";
  m.def("decode", &decode, "Split-KV decode on contiguous KV. q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D].", py::arg("q"),
        py::arg("k"), py::arg("v"), py::arg("causal") = false, py::arg("scale") = py::none(),
        py::arg("mask") = py::none(), py::arg("out") = py::none(), py::arg("lse") = py::none(),
        py::arg("num_splits") = 0, py::arg("impl") = "tc", py::arg("workspace") = py::none(),
        py::arg("split_counters") = py::none());
  m.def("paged_decode", &paged_decode,
        "Split-KV decode on a paged cache k/v_cache [num_pages, page_size, Hkv, D] (q's dtype, or float8_e4m3fn "
        "with float32 k_scale / v_scale [Hkv] or [1]), page_table [B, max_pages] "
        "int32, seqlens_k [B] int32. Graph-capturable (pass num_splits and workspace for a fixed footprint; "
        "split_counters, zeroed once, for one launch).",
        py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("page_table"), py::arg("seqlens_k"),
        py::arg("causal") = false, py::arg("scale") = py::none(), py::arg("mask") = py::none(),
        py::arg("out") = py::none(), py::arg("lse") = py::none(), py::arg("num_splits") = 0, py::arg("impl") = "tc",
        py::arg("workspace") = py::none(), py::arg("check_seqlens") = true, py::arg("debug") = false,
        py::arg("split_counters") = py::none(), py::arg("k_scale") = py::none(), py::arg("v_scale") = py::none());
  m.def("prefill", &prefill,
        "Prefill on contiguous KV. q [B, Sq, Hq, D], k/v [B, Sk, Hkv, D]. impl: 'tc' (tensor cores: on Hopper the "
        "warp-specialized TMA kernel, with a boolean mask the cp.async one), 'tc-ws' (the warp-specialized kernel "
        "only), 'tc-cpasync' (the cp.async kernel), 'scalar'. debug: synchronize, name a failing kernel and check the "
        "warp-specialized kernel against the cp.async one.",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("causal") = false, py::arg("scale") = py::none(),
        py::arg("mask") = py::none(), py::arg("out") = py::none(), py::arg("lse") = py::none(), py::arg("impl") = "tc",
        py::arg("debug") = false);
  m.def("paged_prefill", &paged_prefill,
        "Ragged prefill: packed q [total_q, Hq, D] with cu_seqlens_q [B + 1] int32 on a paged cache.", py::arg("q"),
        py::arg("k_cache"), py::arg("v_cache"), py::arg("page_table"), py::arg("cu_seqlens_q"), py::arg("seqlens_k"),
        py::arg("causal") = false, py::arg("scale") = py::none(), py::arg("mask") = py::none(),
        py::arg("out") = py::none(), py::arg("lse") = py::none(), py::arg("impl") = "tc",
        py::arg("check_seqlens") = true, py::arg("debug") = false);
  m.def("decode_num_splits", &decode_num_splits, "The split count decode or paged_decode would choose.",
        py::arg("batch"), py::arg("heads_kv"), py::arg("seqlen_q"), py::arg("group"), py::arg("max_seqlen_k"),
        py::arg("head_dim"), py::arg("e4m3_kv") = false);
  m.def("decode_counter_count", &decode_counter_count,
        "Ints of split_counters a one-launch split decode needs (zeroed once; each call leaves them zero).",
        py::arg("batch"), py::arg("heads_kv"), py::arg("seqlen_q"), py::arg("group"));
  m.def("decode_workspace_size", &decode_workspace_size, "Floats of workspace a decode call needs.",
        py::arg("num_splits"), py::arg("batch"), py::arg("heads_q"), py::arg("seqlen_q"), py::arg("head_dim"));
  m.attr("max_decode_splits") = attn::kMaxDecodeSplits;
}
