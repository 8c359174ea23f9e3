// FP8 GEMM tile scheduler: linear work-unit index -> (m_block, n_block), grouped along M so the
// blocks resident at one time share A rows and B columns in L2. The same scheduler serves a
// grid of one block (or cluster) per unit (non-persistent) and a persistent grid that strides
// over units (the kernel loops `for (unit = first; unit < num_units; unit += stride)`).
//
// A unit is the tile of one block, or with clusters (cluster_m, cluster_n in {1, 2}) the
// cluster_m x cluster_n adjacent tiles of one cluster: rank r = rank_m + cluster_m * rank_n
// takes tile (cluster_m * unit_m + rank_m, cluster_n * unit_n + rank_n). When the tile count
// in a cluster dimension is odd, the last unit's rank-1 tiles lie past the matrix: such a
// block still runs the mainloop (its partners need its half of the shared operands and its
// barrier arrivals) on clamped coordinates and skips the store (tile_in_range() false).
//
// Split-K multiplies the work: work unit w is scheduler unit w / splits and split w % splits,
// and split s covers k-blocks split_k_range(s, splits, k_blocks). Split-K plans have fewer
// tiles than SMs, so their units run in a wave or a few; every byte of B is read by one unit
// whatever the order, and A (M <= a few tiles) stays in L2.
#pragma once

#include <cstdint>

namespace kernels::fp8::gemm {

// K-block range [begin, end) of split s of k_blocks over `splits` (<= k_blocks): sizes differ
// by at most one, none is empty. 32-bit unsigned arithmetic (a 64-bit division is a called
// routine on the GPU): splits <= 64 and k_blocks < 2^25 (K < 2^32) keep the product < 2^31.
__host__ __device__ __forceinline__ void split_k_range(int s, int splits, int k_blocks, int& begin, int& end) {
  begin = int(uint32_t(s) * uint32_t(k_blocks) / uint32_t(splits));
  end = int(uint32_t(s + 1) * uint32_t(k_blocks) / uint32_t(splits));
}

struct TileScheduler {
  int tiles_m = 0, tiles_n = 0;
  int group_m = 8;  // tiles along M per raster group
  int cluster_m = 1, cluster_n = 1;

  __host__ __device__ int units_m() const { return (tiles_m + cluster_m - 1) / cluster_m; }
  __host__ __device__ int units_n() const { return (tiles_n + cluster_n - 1) / cluster_n; }
  __host__ __device__ int num_units() const { return units_m() * units_n(); }
  __host__ __device__ int cluster_size() const { return cluster_m * cluster_n; }

  // rank: this block's rank in its cluster (0 without clusters).
  __host__ __device__ __forceinline__ void tile_coord(int unit, int rank, int& m_block, int& n_block) const {
    const int group_units = group_m >= 2 * cluster_m ? group_m / cluster_m : 1;
    const int um_total = units_m(), un_total = units_n();
    const int units_per_group = group_units * un_total;
    const int group = unit / units_per_group;
    const int first_m = group * group_units;
    const int rows_in_group = um_total - first_m < group_units ? um_total - first_m : group_units;
    const int in_group = unit - group * units_per_group;
    const int unit_m = first_m + in_group % rows_in_group;
    const int unit_n = in_group / rows_in_group;
    m_block = unit_m * cluster_m + rank % cluster_m;
    n_block = unit_n * cluster_n + rank / cluster_m;
  }

  __host__ __device__ __forceinline__ bool tile_in_range(int m_block, int n_block) const {
    return m_block < tiles_m && n_block < tiles_n;
  }
};

}  // namespace kernels::fp8::gemm
