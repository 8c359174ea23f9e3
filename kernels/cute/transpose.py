"""V^T for the FP8 rungs in one kernel: ``v [B, Sk, Hkv, D]`` e4m3 -> ``vt [B, Hkv, D, Sk'']``,
keys contiguous, each group of 16 keys in the k-slot order of the kernel's P fragment
(``kernels.cute.wgmma.fp8_key_slot``), zeros past ``Sk``.

Why a kernel: the torch gather that does the same (``kernels.cute.fp8.transpose_v_reference``)
reads one byte per output byte from ``Hkv * D`` bytes away, so its loads are uncoalesced and it
moves V far below copy bandwidth. Here a CTA takes 64 keys of one head: it copies their rows
into shared memory as 16-byte pieces (coalesced: a key's row is ``D`` contiguous bytes). Then
each thread owns four columns and one group of 16 keys: it reads the group's 16 rows as 4-byte
words (four columns each, the keys in slot order), transposes them 4 x 4 bytes at a time with
byte permutes (``PRMT``, eight per block), and writes each column's 16 keys as one 16-byte store
into ``vt``'s row. The two threads of a pair take neighbouring groups, so each store instruction
fills whole 32-byte sectors of ``vt``'s rows: stores of half sectors, not the shuffle's
instructions, were what held an earlier version back (docs/worklog/k12.md).

``Sk''`` is ``Sk`` rounded up to ``BLOCK_KEYS``; the FP8 rungs read a view of the first
``Sk'`` (rounded to 16) keys, whose row stride stays ``Sk''``.
"""

from __future__ import annotations

import functools

import cuda.bindings.driver as cuda
import cutlass
import cutlass.cute as cute

from . import launch
from .tensors import bhds_tensor, bshd_tensor
from .wgmma import FP8_KEY_PERIOD, key_of_slot, padded_keys

BLOCK_KEYS = 64  # keys per CTA: four groups of 16, one per thread of each column quad
PIECE = 16  # bytes per global load / store


def stored_keys(seqlen_k: int) -> int:
    """Keys per row of the buffer the kernel writes: ``seqlen_k`` rounded up to ``BLOCK_KEYS``."""
    return -(-seqlen_k // BLOCK_KEYS) * BLOCK_KEYS


class TransposeV:
    """``vt[b, h, d, 16 g + fp8_key_slot(i)] = v[b, 16 g + i, h, d]`` (bytes), zeros past Sk."""

    def __init__(self, head_dim: int):
        self.head_dim = head_dim
        self.num_threads = head_dim  # (D / 4 column quads) x (4 key groups)
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

        # ---- 2. four columns x 16 keys per thread: word loads, 4 x 4 byte transposes ------------
        quads = self.head_dim // 4
        # Thread pairs on neighbouring groups: a store fills whole 32-byte sectors of vt's rows
        # (the pair's rows, 16 keys apart, share banks: 2-way conflicts on the word loads).
        rest = tidx // 2
        quad, group = rest % quads, 2 * (rest // quads) + tidx % 2
        sV_words = cute.recast_tensor(sV, cutlass.Uint32)  # (64 keys, D / 4) words
        words = cute.make_rmem_tensor((FP8_KEY_PERIOD,), cutlass.Uint32)
        for slot in cutlass.range_constexpr(FP8_KEY_PERIOD):
            words[slot] = sV_words[group * FP8_KEY_PERIOD + self.order[slot], quad]
        # (column of the quad, 4 words of slots): a column's 16 bytes contiguous
        columns = cute.make_rmem_tensor(cute.make_layout((4, 4), stride=(4, 1)), cutlass.Uint32)
        for block in cutlass.range_constexpr(4):
            w = [words[4 * block + i] for i in range(4)]
            # bytes b of w0..w3 -> one word per b: pair the words, then the pairs
            lo01, hi01 = byte_perm(w[0], w[1], 0x5140), byte_perm(w[0], w[1], 0x7362)
            lo23, hi23 = byte_perm(w[2], w[3], 0x5140), byte_perm(w[2], w[3], 0x7362)
            columns[0, block] = byte_perm(lo01, lo23, 0x5410)
            columns[1, block] = byte_perm(lo01, lo23, 0x7632)
            columns[2, block] = byte_perm(hi01, hi23, 0x5410)
            columns[3, block] = byte_perm(hi01, hi23, 0x7632)
        column_bytes = cute.recast_tensor(columns, cutlass.Uint8)  # (4 columns, 16 slots)
        for j in cutlass.range_constexpr(4):
            gVt = cute.local_tile(mVt[batch, head, 4 * quad + j, None], (FP8_KEY_PERIOD,),
                                  (key_block * (BLOCK_KEYS // FP8_KEY_PERIOD) + group,))
            gVt.store(column_bytes[j, None].load())


@cute.jit
def byte_perm(a: cutlass.Uint32, b: cutlass.Uint32, selector: cutlass.Constexpr[int]) -> cutlass.Uint32:
    """``prmt.b32``: byte i of the result is byte ``selector >> 4 i & 7`` of ``b:a``."""
    return cutlass.Uint32(cute.arch.prmt(a, b, cutlass.Int32(selector)))


@functools.cache
def compiled(head_dim: int, options: str | None = None):
    """The transpose for ``head_dim``, compiled once per process (and options); without
    ``options``, for the GPU present, with the TVM-FFI launch path (``launch.LAUNCH_OPTIONS``)."""
    fake_v = launch.fake_bshd(cutlass.Uint8)
    fake_vt = launch.fake_bshd(cutlass.Uint8)
    tvm_ffi = options is None
    return cute.compile(TransposeV(head_dim), fake_v, fake_vt, launch.fake_stream(tvm_ffi),
                        options=launch.LAUNCH_OPTIONS if tvm_ffi else options)


def transpose_v(v):
    """``v [B, Sk, Hkv, D]`` float8_e4m3fn (CUDA) -> ``vt [B, Hkv, D, Sk']``, ``Sk'`` = ``Sk``
    rounded up to 16, a view of a buffer whose rows hold ``stored_keys(Sk)`` keys."""
    import torch

    batch, seqlen_k, heads, head_dim = v.shape
    buffer = torch.empty(batch, heads, head_dim, stored_keys(seqlen_k), dtype=torch.uint8, device=v.device)
    if seqlen_k > 0 and batch * heads > 0:
        compiled(head_dim)(v.view(torch.uint8), buffer)
    return buffer[..., :padded_keys(seqlen_k)].view(torch.float8_e4m3fn)
