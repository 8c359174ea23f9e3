"""Named-barrier ids of the Hopper rungs, in one place.

A CTA has 16 hardware barriers. Id 0 is ``__syncthreads`` (``cute.arch.sync_threads``); the
rest are *named* barriers: ``bar.sync id, n`` blocks until ``n`` threads have arrived at ``id``
(``bar.arrive id, n`` counts without blocking), so subsets of warps can meet without stopping
the others. Ids are per CTA and reused across phases; two uses of one id must never overlap.
"""

import enum


class NamedBarrier(enum.IntEnum):
    # K3: the 256 compute threads around the P tile in shared memory.
    COMPUTE = 1
    # K8 onwards: the consumers' epilogue (O staged in the Q tile's smem, then one TMA store).
    EPILOGUE = 2
    # K6 onwards: the ping-pong schedule; warpgroup w issues its GEMMs after a sync on
    # MMA_TURN_WG0 + w, which the previous warpgroup in the round opens with an arrive.
    MMA_TURN_WG0 = 3
    MMA_TURN_WG1 = 4
    MMA_TURN_WG2 = 5
    # K13: the tile index the producer hands the consumers in shared memory (fmha.publish_tile):
    # the producer writes it after a sync on TILE_SLOT_EMPTY and opens TILE_SLOT_FULL; the
    # consumers read it after a sync on TILE_SLOT_FULL and open TILE_SLOT_EMPTY.
    TILE_SLOT_FULL = 6
    TILE_SLOT_EMPTY = 7
