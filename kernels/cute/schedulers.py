"""Tile schedulers of the persistent rungs: which tile a CTA takes next, and which tile an index is.

A persistent CTA walks tile *indices*; the rungs differ in who picks the next index:

* the static walk (K10, K11, K12: :func:`static_walk_tile`): CTA ``c`` takes ``c``, ``c + ctas``,
  ... fixed before the launch, every other full round dealt in reverse under the causal mask;
* dynamic tickets (K13: :func:`take_ticket`): each CTA's producer takes the next index from a
  counter in global memory (:func:`tile_counter`) once it has issued a tile's loads, and hands
  it to the consumers in shared memory (``fmha.publish_tile``); the last CTA to finish resets
  the counter (:func:`count_out`).

:func:`tile_order` says which (query tile, head, batch) an index stands for. Without a mask it
is K8's grid order: query tiles fastest, then heads, then batches (neighbouring tiles share a
head's K and V in L2). Under the mask a tile's work grows with its query index, so the longest
tiles (the most keys) come first with heads and batches fastest (K10), or the same inside
sections of (head, batch) pairs whose K and V fit in L2 (``l2_heads``, K11 and K13:
:func:`l2_section_pairs`, :func:`longest_first_in_sections`).
"""

import functools

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr
from cutlass.cute.runtime import make_fake_tensor

from .fmha import GmemArgs, TileCoords, grid_shape, tile_coords

# Causal tile orders: (head, batch) pairs per L2 section, l2_heads=0 (K11, K13): the bytes their K
# and V may fill.
L2_KV_BYTES = 40 * 1024 * 1024


@cute.jit
def static_walk_tile(slot: Int32, num_tiles: Int32, ctas: Int32, causal: cutlass.Constexpr) -> Int32:
    """The tile index a CTA takes at ``slot`` (its block index, then ``ctas`` further each time).
    Under the causal mask every other full round of ``ctas`` tiles is dealt in reverse: the CTA
    that got a round's longest tile gets the next round's shortest."""
    tile = slot
    if const_expr(causal):
        round_start = slot - slot % ctas
        if (slot // ctas) % 2 == 1 and round_start + ctas <= num_tiles:
            tile = round_start + ctas - 1 - slot % ctas
    return tile


@cute.jit
def tile_order(plan: cutlass.Constexpr, gmem: GmemArgs, tile: Int32, causal: cutlass.Constexpr,
               l2_heads: cutlass.Constexpr = None, dtype_bytes: cutlass.Constexpr = 2) -> TileCoords:
    """The query tile, head and batch of tile index ``tile`` (the module docstring's orders):
    under the causal mask longest first, in L2 sections of ``l2_heads`` (head, batch) pairs (0:
    as many as fit) where it is not None."""
    num_m_blocks, heads, batch = grid_shape(plan, gmem)
    m_block = tile % num_m_blocks
    head_batch = tile // num_m_blocks
    if const_expr(causal and l2_heads is None):
        m_block = num_m_blocks - 1 - tile // (heads * batch)
        head_batch = tile % (heads * batch)
    if const_expr(causal and l2_heads is not None):
        section = l2_section_pairs(gmem, l2_heads, plan.head_dim, dtype_bytes)
        m_block, head_batch = longest_first_in_sections(tile, num_m_blocks, heads * batch, section)
    return tile_coords(gmem, m_block, head_batch % heads, head_batch // heads)


@cute.jit
def l2_section_pairs(gmem: GmemArgs, l2_heads: cutlass.Constexpr, head_dim: cutlass.Constexpr,
                     dtype_bytes: cutlass.Constexpr) -> Int32:
    """(head, batch) pairs per section of a causal tile order: ``l2_heads``, or with 0 the most
    whose K and V fit in ``L2_KV_BYTES`` (a power of two, at least 1)."""
    section = Int32(l2_heads)
    if const_expr(l2_heads == 0):
        kv_bytes = cutlass.Int64(gmem.mK.shape[0]) * (2 * head_dim * dtype_bytes)  # K and V
        fit = cutlass.max(L2_KV_BYTES // cutlass.max(kv_bytes, 1), 1)
        section = Int32(1)
        while section * 2 <= fit:
            section = section * 2
    return section


@cute.jit
def longest_first_in_sections(tile: Int32, num_m_blocks: Int32, pairs: Int32, section: Int32):
    """``(m_block, head_batch)`` of tile index ``tile`` in a causal order: sections of
    ``section`` (head, batch) pairs one after the other; inside one, the longest query tiles
    (the most keys) first and the section's pairs fastest."""
    section = cutlass.min(section, pairs)
    first_pair = tile // (section * num_m_blocks) * section
    size = cutlass.min(section, pairs - first_pair)
    within = tile - first_pair * num_m_blocks
    return num_m_blocks - 1 - within // size, first_pair + within % size


# ---- dynamic tickets (K13) ------------------------------------------------------------------
# The tile counter's two int32 words in global memory: tickets taken, CTAs whose walk has ended.
TICKETS, FINISHED = 0, 1


def fake_tile_counter():
    """The counter's stand-in at compile time (no GPU)."""
    return make_fake_tensor(Int32, (2,), (1,), assumed_align=4)


@cute.jit
def take_ticket(counter: cute.Tensor, word: cutlass.Constexpr[int], sem: cutlass.Constexpr = None) -> Int32:
    """``atomicAdd(counter[word], 1)`` by lane 0, its old value to every lane of the warp."""
    ticket = Int32(0)
    if cute.arch.lane_idx() == 0:
        ticket = cute.arch.atomic_add(counter.iterator + word, Int32(1), sem=sem, scope="gpu")
    return cute.arch.shuffle_sync(ticket, 0)


@cute.jit
def count_out(counter: cute.Tensor, ctas: Int32):
    """A CTA's walk has ended: count it out; the last one resets the counter for the next launch
    (every ticket of every CTA was taken before its count: the acquire-release orders them)."""
    finished = take_ticket(counter, FINISHED, sem="acq_rel")
    if finished == ctas - 1 and cute.arch.lane_idx() == 0:
        counter[TICKETS] = Int32(0)
        counter[FINISHED] = Int32(0)


@functools.cache
def _tile_counter(device_index: int, stream: int):
    import torch

    return torch.zeros(2, dtype=torch.int32, device=torch.device("cuda", device_index))


def tile_counter(device):
    """The tile counter of ``device`` and torch's current stream on it: zeros when made, and
    zeros again after every launch (:func:`count_out`), so launches on two streams never share one."""
    import torch

    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    return _tile_counter(index, torch.cuda.current_stream(index).cuda_stream)
