"""V^T for the FP8 rungs in one kernel: ``v [B, Sk, Hkv, D]`` e4m3 -> ``vt [B, Hkv, D, Sk'']``,
keys contiguous, each group of 16 keys in the k-slot order of the kernel's P fragment
(``kernels.cute.wgmma.fp8_key_slot``), zeros past ``Sk``.

Why a kernel: the torch gather that does the same (``kernels.cute.fp8.transpose_v_reference``)
reads one byte per output byte from ``Hkv * D`` bytes away, so its loads are uncoalesced and it
moves V far below copy bandwidth (on the H200 at 16k keys, D = 128: about a tenth of K12's
call). Here a CTA takes 64 keys of one head: it copies their rows into shared memory as 16-byte
pieces (coalesced: a key's row is ``D`` contiguous bytes), then thread ``d`` gathers column
``d`` of the tile, in slot order, and writes it as four 16-byte stores (64 contiguous bytes of
``vt``'s row ``d``). Both sides of the copy are whole sectors; the byte shuffle happens in
shared memory, where a warp reads 32 neighbouring bytes of one row per load.

``Sk''`` is ``Sk`` rounded up to ``BLOCK_KEYS``; the FP8 rungs read a view of the first
``Sk'`` (rounded to 16) keys, whose row stride stays ``Sk''``.
"""

from __future__ import annotations

import functools

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_stream

from kernels.cute import launch
from kernels.cute.fp8 import key_of_slot, padded_keys
from kernels.cute.tensors import bhds_tensor, bshd_tensor
from kernels.cute.wgmma import FP8_KEY_PERIOD

BLOCK_KEYS = 64  # keys per CTA: each thread writes 64 bytes of its vt row (two full sectors)
PIECE = 16  # bytes per global load / store


def stored_keys(seqlen_k: int) -> int:
    """Keys per row of the buffer the kernel writes: ``seqlen_k`` rounded up to ``BLOCK_KEYS``."""
    return -(-seqlen_k // BLOCK_KEYS) * BLOCK_KEYS


class TransposeV:
    """``vt[b, h, d, 16 g + fp8_key_slot(i)] = v[b, 16 g + i, h, d]`` (bytes), zeros past Sk."""

    def __init__(self, head_dim: int):
        self.head_dim = head_dim
        self.num_threads = head_dim  # one thread per row of vt's tile
        self.order = key_of_slot()

    @cute.jit
    def __call__(self, mV: cute.Tensor, mVt: cute.Tensor, stream: cuda.CUstream):
        mV = bshd_tensor(mV, self.head_dim)
        mVt = bhds_tensor(mVt, self.head_dim)
        s_layout = cute.make_layout((BLOCK_KEYS, self.head_dim), stride=(self.head_dim, 1))

        @cute.struct
        class SharedStorage:
            sV: cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, cute.cosize(s_layout)], 128]

        batch, seqlen_k, heads, _ = mV.shape
        grid = (cute.ceil_div(seqlen_k, BLOCK_KEYS), heads, batch)
        self.kernel(mV, mVt, s_layout, SharedStorage).launch(
            grid=grid, block=(self.num_threads, 1, 1), smem=SharedStorage.size_in_bytes(), stream=stream)

    @cute.kernel
    def kernel(self, mV: cute.Tensor, mVt: cute.Tensor, s_layout: cute.Layout,
               SharedStorage: cutlass.Constexpr):
        tidx, _, _ = cute.arch.thread_idx()
        key_block, head, batch = cute.arch.block_idx()
        smem = cutlass.memory.SmemAllocator()
        sV = smem.allocate(SharedStorage).sV.get_tensor(s_layout)  # (64 keys, D) bytes

        # ---- 1. 64 key rows -> sV, 16-byte pieces; rows past Sk are zeros -------------------
        gV = cute.local_tile(mV[batch, None, head, None], (BLOCK_KEYS, self.head_dim), (key_block, 0))
        rows_valid = mV.shape[1] - key_block * BLOCK_KEYS
        gV_pieces = cute.zipped_divide(gV, (1, PIECE))
        sV_pieces = cute.zipped_divide(sV, (1, PIECE))
        pieces_per_row = self.head_dim // PIECE
        for step in cutlass.range_constexpr(BLOCK_KEYS * pieces_per_row // self.num_threads):
            # Consecutive threads take consecutive pieces of a row: coalesced reads.
            piece = step * self.num_threads + tidx
            row = piece // pieces_per_row
            column = piece % pieces_per_row
            if row < rows_valid:
                sV_pieces[None, (row, column)].store(gV_pieces[None, (row, column)].load())
            else:
                sV_pieces[None, (row, column)].fill(0)
        cute.arch.sync_threads()

        # ---- 2. column tidx of the tile, keys in slot order -> 64 bytes of vt's row tidx -----
        column_bytes = cute.make_rmem_tensor((BLOCK_KEYS,), cutlass.Uint8)
        for slot in cutlass.range_constexpr(BLOCK_KEYS):
            group, within = divmod(slot, FP8_KEY_PERIOD)
            column_bytes[slot] = sV[group * FP8_KEY_PERIOD + self.order[within], tidx]
        gVt = cute.local_tile(mVt[batch, head, tidx, None], (BLOCK_KEYS,), (key_block,))
        gVt.store(column_bytes.load())


@functools.cache
def compiled(head_dim: int, options: str | None = None):
    """The transpose for ``head_dim``, compiled once per process (and options)."""
    fake_v = launch.fake_bshd(cutlass.Uint8)
    fake_vt = launch.fake_bshd(cutlass.Uint8)
    extra = {} if options is None else {"options": options}
    return cute.compile(TransposeV(head_dim), fake_v, fake_vt, make_fake_stream(), **extra)


def transpose_v(v):
    """``v [B, Sk, Hkv, D]`` float8_e4m3fn (CUDA) -> ``vt [B, Hkv, D, Sk']``, ``Sk'`` = ``Sk``
    rounded up to 16, a view of a buffer whose rows hold ``stored_keys(Sk)`` keys."""
    import torch

    batch, seqlen_k, heads, head_dim = v.shape
    buffer = torch.empty(batch, heads, head_dim, stored_keys(seqlen_k), dtype=torch.uint8, device=v.device)
    if seqlen_k > 0 and batch * heads > 0:
        compiled(head_dim)(launch.to_cute_bshd(v.view(torch.uint8)), launch.to_cute_bshd(buffer),
                           launch.current_stream(v.device))
    return buffer[..., :padded_keys(seqlen_k)].view(torch.float8_e4m3fn)
