// FP8 GEMM tile scheduler: linear tile index -> (m_block, n_block), grouped along M so the
// blocks resident at one time share A rows and B columns in L2. The same scheduler serves a
// grid of one block per tile (non-persistent) and a persistent grid that strides over tiles
// (the kernel loops `for (tile = blockIdx.x; tile < num_tiles; tile += gridDim.x)`).
#pragma once

#include <cstdint>

namespace fp8::gemm {

struct TileScheduler {
  int tiles_m = 0, tiles_n = 0;
  int group_m = 8;  // tile rows per raster group

  __host__ __device__ int num_tiles() const { return tiles_m * tiles_n; }

  __device__ __forceinline__ void tile_coord(int tile, int& m_block, int& n_block) const {
    const int tiles_per_group = group_m * tiles_n;
    const int group = tile / tiles_per_group;
    const int first_m = group * group_m;
    const int rows_in_group = min(tiles_m - first_m, group_m);
    const int in_group = tile - group * tiles_per_group;
    m_block = first_m + in_group % rows_in_group;
    n_block = in_group / rows_in_group;
  }
};

}  // namespace fp8::gemm
