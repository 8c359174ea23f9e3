// FP8 GEMM loads, host side: the TMA tensor maps of the fp8 operands, and of D for the TMA-store
// epilogue. The device side (TMA, mbarriers, clusters, cp.async) is the families' common one:
// common/{tma, mbarrier, smem}.cuh.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "../../common/tma.cuh"
#include "../common.h"

namespace kernels::fp8::gemm {

// A 2-D row-major tensor map: rows of `inner` elements, row_bytes apart, read or written in
// boxes of box_inner x box_outer. Throws when the driver has no encoder; returns its result.
inline CUresult encode_2d_map(CUtensorMap* map, CUtensorMapDataType dtype, const void* ptr, int64_t inner,
                              int64_t outer, int64_t row_bytes, int box_inner, int box_outer,
                              CUtensorMapSwizzle swizzle, CUtensorMapL2promotion promotion) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  check<CudaError>(encode != nullptr, "fp8 gemm: cuTensorMapEncodeTiled is not available from the driver");
  const cuuint64_t dims[2] = {cuuint64_t(inner), cuuint64_t(outer)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(box_inner), cuuint32_t(box_outer)};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, dtype, 2, const_cast<void*>(ptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle, promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// A K-major fp8 matrix [rows, k] (row stride ld bytes) read in boxes of box_k x box_rows
// with the 128-byte swizzle WGMMA expects; out-of-bounds rows and k are zero-filled, so
// the M, N and K tails need no predication in the mainloop.
inline void make_kmajor_map(CUtensorMap* map, const void* ptr, int64_t rows, int64_t k, int64_t ld, int box_rows,
                            int box_k) {
  const CUresult res = encode_2d_map(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, ptr, k, rows, ld, box_k, box_rows,
                                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  check<CudaError>(res == CUDA_SUCCESS, "fp8 gemm: cuTensorMapEncodeTiled rejected the tensor map of a [", rows, ", ",
                   k, "] operand (row stride ", ld, " bytes, box ", box_rows, " x ", box_k, "): CUresult ", int(res));
}

// D [rows, cols] bf16 (row stride ld elements, a multiple of 8; D 16-byte aligned) as the
// TMA-store epilogue writes it: boxes of box_cols (64: the 128-byte swizzle, 16: the 32-byte
// one) x box_rows.
inline void make_output_map(CUtensorMap* map, void* ptr, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                            int box_cols) {
  const CUresult res = encode_2d_map(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, ptr, cols, rows, ld * 2, box_cols, box_rows,
                                     box_cols == 64 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_32B,
                                     CU_TENSOR_MAP_L2_PROMOTION_NONE);
  check<CudaError>(res == CUDA_SUCCESS, "fp8 gemm: cuTensorMapEncodeTiled rejected the output map of D [", rows, ", ",
                   cols, "] (row stride ", ld, " elements, box ", box_rows, " x ", box_cols, "): CUresult ", int(res));
}

}  // namespace kernels::fp8::gemm
