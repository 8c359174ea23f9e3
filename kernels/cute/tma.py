"""TMA plumbing shared by the Hopper rungs (K3 onwards): smem tiles, tensor views, atoms,
partitions.

A TMA load copies a box of a tensor described by a *tensor map* (built on the host: base
address, extents and strides of up to 5 modes, the box size, the smem swizzle mode). Every
mode is bounds-checked: box elements outside the tensor are zero-filled on loads and dropped
on stores. Viewing ``[B, S, H, D]`` as ``(S, D, H, B)`` makes the box a ``(rows, D)`` slice of
the first two modes, so a tile that runs past ``S`` never reaches into the next head or batch.

Completion is signalled on an mbarrier: the issuing thread first declares the bytes it
expects (``mbarrier.arrive.expect_tx``), the copy engine counts them down as data lands, and
waiters poll the barrier's phase. ``cutlass.pipeline.PipelineTmaAsync`` wraps a ring of such
barriers (full: data landed; empty: consumers are done with the slot).
"""

from __future__ import annotations

import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum


def smem_tile_layout(dtype, rows: int, cols: int, stages: int | None = None):
    """Row-major ``(rows, cols[, stages])`` smem tile (cols contiguous), swizzled.

    The swizzle atom is 8 rows by up to 128 bytes; XOR-ing the 16-byte chunk index with the
    row index (mod 8) spreads the 8 rows of a column chunk over all 32 banks. TMA writes this
    layout (the tensor map carries the same swizzle mode); WGMMA descriptors read it as is.
    """
    atom = warpgroup.make_smem_layout_atom(
        sm90_utils.get_smem_layout_atom(LayoutEnum.ROW_MAJOR, dtype, cols), dtype)
    shape = (rows, cols) if stages is None else (rows, cols, stages)
    order = (0, 1) if stages is None else (0, 1, 2)
    return cute.tile_to_shape(atom, shape, order=order)


def seq_major_view(mX: cute.Tensor) -> cute.Tensor:
    """``[B, S, H, D]`` -> ``(S, D, H, B)``: the same memory, modes in TMA box order."""
    return cute.make_tensor(mX.iterator, cute.select(mX.layout, mode=[1, 3, 2, 0]))


def dim_major_view(mX: cute.Tensor) -> cute.Tensor:
    """``[B, H, D, S]`` (a transposed V: keys contiguous) -> ``(D, S, H, B)``: boxes of
    ``(D, keys)`` in the first two modes, as :func:`seq_major_view` does for ``[B, S, H, D]``."""
    return cute.make_tensor(mX.iterator, cute.select(mX.layout, mode=[2, 3, 1, 0]))


def make_tma_load(mX: cute.Tensor, s_layout, rows: int, head_dim: int):
    """TMA load atom for ``(rows, head_dim)`` boxes of the ``(S, D, H, B)`` view ``mX``.

    ``s_layout`` is the smem layout of one box (or a staged layout, whose first stage is used).
    Returns ``(atom, tma_tensor)``; index the TMA tensor like ``mX`` to get coordinates.
    """
    one_stage = cute.select(s_layout, mode=[0, 1])
    return cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mX, one_stage,
                                       (rows, head_dim))


def make_tma_store(mX: cute.Tensor, s_layout, rows: int, head_dim: int):
    """TMA store atom for ``(rows, head_dim)`` boxes; rows past ``S`` are clipped."""
    return cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mX,
                                       cute.select(s_layout, mode=[0, 1]), (rows, head_dim))


def box_bytes(dtype, s_layout) -> int:
    """Bytes one box moves: the transaction count its mbarrier waits for."""
    return cute.size_in_bytes(dtype, cute.select(s_layout, mode=[0, 1]))


def partition(tma_atom, s_tiles: cute.Tensor, g_tiles: cute.Tensor):
    """``(rows, D, stage)`` smem and ``(rows, D, tile)`` gmem -> ``(TMA, stage)``, ``(TMA, tile)``."""
    return cpasync.tma_partition(tma_atom, 0, cute.make_layout(1),
                                 cute.group_modes(s_tiles, 0, 2), cute.group_modes(g_tiles, 0, 2))


def make_qkv_pipelines(storage, num_stages: int, num_consumer_warps: int, q_bytes: int, kv_bytes: int):
    """The Q ring (one stage) and the K and V rings (``num_stages`` each) of a TMA rung.

    One producer (a thread) and one consumer group (an arrival per compute warp) for all three:
    a stage is full once the TMA has written its ``tx_count`` bytes, empty again once lane 0 of
    every compute warp has arrived. ``defer_sync=True`` skips each ring's own initialisation
    sync; the single ``pipeline_init_arrive`` / ``pipeline_init_wait`` at the end makes all of
    them visible before first use. ``storage`` holds the barriers (``mbar_Q``, ``mbar_K``,
    ``mbar_V``)."""
    producer = pipeline.CooperativeGroup(pipeline.Agent.Thread, 1)
    compute_warps = pipeline.CooperativeGroup(pipeline.Agent.Thread, num_consumer_warps)

    def ring(barriers, stages: int, tx_count: int):
        return pipeline.PipelineTmaAsync.create(
            barrier_storage=barriers.data_ptr(), num_stages=stages, producer_group=producer,
            consumer_group=compute_warps, tx_count=tx_count, defer_sync=True)

    pipeline_q = ring(storage.mbar_Q, 1, q_bytes)
    pipeline_k = ring(storage.mbar_K, num_stages, kv_bytes)
    pipeline_v = ring(storage.mbar_V, num_stages, kv_bytes)
    pipeline.pipeline_init_arrive()
    pipeline.pipeline_init_wait()
    return pipeline_q, pipeline_k, pipeline_v
