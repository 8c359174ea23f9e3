"""Plumbing every Hopper rung shares (K4 onwards): the CTA plan, the host setup, the kernel
preamble, the TMA producer and the consumer's operand fragments.

What differs between the rungs (the consumer's mainloop, who runs which role with how many
registers, in which order the warpgroups issue their GEMMs, how the tile is stored) stays in
``kernels/kN.py``, the persistent rungs' tile walks in :mod:`kernels.cute.schedulers`; this
module is everything around them, written once:

* :class:`TilePlan` -- compile-time shape of a CTA: consumer warpgroups (64 query rows each),
  keys per KV tile, pipeline stages, the producer warps; thread and byte counts derived from it.
* :func:`host_setup` -- on the host: shared-memory layouts, TMA atoms over the ``(S, D, H, B)``
  views, the two warpgroup MMAs and the shared-storage struct, bundled as kernel arguments
  (:class:`GmemArgs`, :class:`SmemLayouts`, :class:`Mmas`). FP8 rungs (K12) pass V already
  transposed (``v_transposed``: keys contiguous, the K-major B operand FP8 WGMMA requires)
  and write O in another type (``out_dtype``).
* :func:`enter_kernel` -- on the device, first thing: descriptor prefetch, shared-memory tensors,
  the Q / K / V mbarrier rings (:class:`CtaContext`).
* :func:`tile_coords` -- which query tile, head and batch this CTA owns.
* :func:`kv_tile_count` -- how many KV tiles a query tile visits (the causal mask skips the rest).
* :func:`load_tiles` -- the producer: Q once, then K_n and V_n for every visible KV tile.
* :class:`ConsumerOperands` -- a consumer thread's MMA slices, operand descriptors, fragments.
"""


from dataclasses import dataclass
from typing import NamedTuple

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Float32, Int32

from . import tma
from . import wgmma as wg
from .barriers import NamedBarrier
from .mask import kv_block_count
from .tensors import bhds_tensor, bshd_tensor

WARP_THREADS = 32
# Shared memory a Hopper CTA may opt into (227 KiB), less 1 KiB for the mbarriers (1024-aligned).
MAX_SHARED_BYTES = 226 * 1024


# ---- compile time: the shape of a CTA ---------------------------------------------------------
@dataclass(frozen=True)
class TilePlan:
    """A Hopper rung's CTA: ``consumer_warpgroups`` x 64 query rows against ``block_n``-key
    tiles streamed through ``num_stages`` shared-memory stages by ``producer_warps`` warps
    (1: a producer warp, K4; 4: a producer warpgroup, which ``setmaxnreg`` needs, K5 on).
    Threads: the consumer warpgroups first, then the producer."""

    head_dim: int
    consumer_warpgroups: int
    block_n: int
    num_stages: int = 2
    producer_warps: int = 1

    @property
    def block_m(self) -> int:
        """Query rows per CTA (Br)."""
        return wg.WGMMA_M * self.consumer_warpgroups

    @property
    def num_consumer_threads(self) -> int:
        return wg.WARPGROUP_THREADS * self.consumer_warpgroups

    @property
    def producer_warp(self) -> int:
        """Index of the first producer warp (the one that issues the TMA loads)."""
        return self.num_consumer_threads // WARP_THREADS

    @property
    def num_threads(self) -> int:
        return self.num_consumer_threads + WARP_THREADS * self.producer_warps

    def q_bytes(self, dtype_bytes: int = 2) -> int:
        """Bytes of the Q tile: the transaction count of the Q ring."""
        return self.block_m * self.head_dim * dtype_bytes

    def kv_bytes(self, dtype_bytes: int = 2) -> int:
        """Bytes of one K (or V) tile: the transaction count of a K / V stage."""
        return self.block_n * self.head_dim * dtype_bytes

    def o_bytes(self, out_bytes: int = 2) -> int:
        """Bytes of the O tile staged for its TMA store (``out_bytes`` per element)."""
        return self.block_m * self.head_dim * out_bytes

    def shared_bytes(self, dtype_bytes: int = 2) -> int:
        """Q, and K and V in ``num_stages`` stages each (before alignment; mbarriers not counted)."""
        return self.q_bytes(dtype_bytes) + 2 * self.num_stages * self.kv_bytes(dtype_bytes)

    def fits_separate_o(self, dtype_bytes: int = 2, out_bytes: int | None = None) -> bool:
        """Whether shared memory also holds a buffer of its own for O (``host_setup``'s
        ``separate_o``): at D <= 128 with the default bf16 plans, not at 256. ``out_bytes``:
        bytes per element of O (default: the inputs')."""
        return (self.shared_bytes(dtype_bytes) + self.o_bytes(out_bytes or dtype_bytes)
                <= MAX_SHARED_BYTES)

    def check(self, head_dim: int, producer_warps: int, dtype_bytes: int = 2) -> "TilePlan":
        """The plan, if a rung with this head dimension and producer can run it on elements of
        ``dtype_bytes`` (2: bf16/fp16, 1: fp8); else ValueError."""
        fields = ("head_dim", "consumer_warpgroups", "block_n", "num_stages", "producer_warps")
        not_ints = [f for f in fields if type(getattr(self, f)) is not int]
        if not_ints:
            kind = "an integer" if len(not_ints) == 1 else "integers"
            raise ValueError(f"{self}: {' and '.join(not_ints)} must be {kind}")
        problems = []
        if self.head_dim != head_dim:
            problems.append(f"head_dim {self.head_dim} != the problem's {head_dim}")
        if self.producer_warps != producer_warps:
            problems.append(f"producer_warps must be {producer_warps} for this rung")
        if self.consumer_warpgroups not in (1, 2, 3):
            problems.append("consumer_warpgroups must be 1, 2 or 3")
        k_step = wg.mma_k(dtype_bytes)  # P V consumes block_n keys in steps of k16 (bf16) or k32 (fp8)
        if self.block_n % k_step or not k_step <= self.block_n <= 256:
            problems.append(f"block_n must be a multiple of {k_step} in [{k_step}, 256] "
                            f"(the k{k_step} steps of P V)")
        if self.num_stages < 1:
            problems.append("num_stages must be >= 1")
        if self.shared_bytes(dtype_bytes) > MAX_SHARED_BYTES:
            problems.append(f"{self.shared_bytes(dtype_bytes) // 1024} KiB of shared memory > "
                            f"{MAX_SHARED_BYTES // 1024} KiB")
        if problems:
            raise ValueError(f"{self}: " + "; ".join(problems))
        return self


# ---- host side: layouts, TMA atoms, MMAs, shared storage ------------------------------------
class GmemArgs(NamedTuple):
    """The global-memory side of the kernel. ``mQ``, ``mK``, ``mV`` are TMA coordinate tensors
    over the ``(S, D, H, B)`` views; ``mO`` is one too when O leaves by TMA store
    (``tma_atom_O`` set), else the plain ``(S, D, H, B)`` view of the output."""

    mQ: cute.Tensor
    mK: cute.Tensor
    mV: cute.Tensor
    mO: cute.Tensor
    mLSE: cute.Tensor | None
    tma_atom_Q: cute.CopyAtom
    tma_atom_K: cute.CopyAtom
    tma_atom_V: cute.CopyAtom
    tma_atom_O: cute.CopyAtom | None


class SmemLayouts(NamedTuple):
    sQ: cute.ComposedLayout  # (Br, D, 1): the CTA's Q tile, warpgroup w's rows 64 w .. 64 w + 63
    sKV: cute.ComposedLayout  # (Bc, D, stage): the K ring
    sV: cute.ComposedLayout  # the V ring: (Bc, D, stage) like K, or (D, Bc, stage) if transposed
    sO: cute.ComposedLayout  # (Br, D, 1) in the output type: O staged for its TMA store


class Mmas(NamedTuple):
    """Both GEMMs as tiled MMAs over the CTA's ``Br`` rows, one ``m64`` atom per consumer
    warpgroup: a warpgroup's slice reads its own 64 rows of the shared Q tile."""

    qk: cute.TiledMma  # S = Q K^T: m64 nBc k16 (fp8: k32), A and B K-major in smem
    pv: cute.TiledMma  # O += P V: m64 nD, A (P) from registers, B = V^T: MN-major in smem (bf16),
    #                    K-major from a transposed V (fp8, which has no MN-major B)


class HostSetup(NamedTuple):
    gmem: GmemArgs
    smem: SmemLayouts
    mmas: Mmas
    storage: type  # the @cute.struct of the CTA's shared memory


def host_setup(plan: TilePlan, dtype, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor,
               mO: cute.Tensor, mLSE: cute.Tensor | None, *, tma_store_o: bool = False,
               separate_o: bool = False, v_transposed: bool = False, out_dtype=None) -> HostSetup:
    """Everything the host builds before launching a Hopper rung (called from its ``__call__``).
    ``separate_o``: O is staged for its TMA store in a buffer of its own (``sO``) instead of
    the Q tile (K10, where the next tile's Q may arrive while O leaves).
    ``v_transposed``: ``mV`` is V^T, ``[B, Hkv, D, Sk']`` with the keys contiguous, loaded as
    ``(D, Bc)`` tiles that are the K-major B operand of P V (FP8, K12). ``out_dtype``: the type
    of O (default ``dtype``); O of another type than Q needs ``separate_o``."""
    out_dtype = out_dtype or dtype
    if cutlass.const_expr(out_dtype is not dtype and not separate_o):
        raise ValueError("O of another type than the inputs needs a buffer of its own: separate_o=True")
    mQ, mK, mO = (tma.seq_major_view(bshd_tensor(t, plan.head_dim)) for t in (mQ, mK, mO))

    # Q/K/V tiles: row-major, 128-byte swizzled (what the TMA writes and WGMMA reads).
    sQ_layout = tma.smem_tile_layout(dtype, plan.block_m, plan.head_dim, 1)
    sKV_layout = tma.smem_tile_layout(dtype, plan.block_n, plan.head_dim, plan.num_stages)
    sO_layout = tma.smem_tile_layout(out_dtype, plan.block_m, plan.head_dim, 1)

    # One tensor map per operand over the (S, D, H, B) view; a box is one tile.
    tma_atom_Q, tma_Q = tma.make_tma_load(mQ, sQ_layout, plan.block_m, plan.head_dim)
    tma_atom_K, tma_K = tma.make_tma_load(mK, sKV_layout, plan.block_n, plan.head_dim)
    if cutlass.const_expr(v_transposed):
        # V^T over its (D, Sk', H, B) view; a box is (D, Bc), keys contiguous.
        mV = tma.dim_major_view(bhds_tensor(mV, plan.head_dim))
        sV_layout = tma.smem_tile_layout(dtype, plan.head_dim, plan.block_n, plan.num_stages)
        tma_atom_V, tma_V = tma.make_tma_load(mV, sV_layout, plan.head_dim, plan.block_n)
    else:
        mV = tma.seq_major_view(bshd_tensor(mV, plan.head_dim))
        sV_layout = sKV_layout
        tma_atom_V, tma_V = tma.make_tma_load(mV, sV_layout, plan.block_n, plan.head_dim)
    tma_atom_O, gmem_O = None, mO
    if cutlass.const_expr(tma_store_o):
        tma_atom_O, gmem_O = tma.make_tma_store(mO, sO_layout, plan.block_m, plan.head_dim)

    wgs = plan.consumer_warpgroups
    mmas = Mmas(
        qk=wg.make_warpgroup_mma(dtype, plan.block_n, warpgroups=wgs),
        pv=wg.make_warpgroup_mma(dtype, plan.head_dim, warpgroups=wgs, b_mn_major=not v_transposed,
                                 a_in_registers=True),
    )

    @cute.struct
    class SharedStorage:
        mbar_Q: cute.struct.MemRange[cutlass.Int64, 2]  # full, empty
        mbar_K: cute.struct.MemRange[cutlass.Int64, 2 * plan.num_stages]
        mbar_V: cute.struct.MemRange[cutlass.Int64, 2 * plan.num_stages]
        # The next tile, where the producer picks the tiles (K13's scheduler): publish_tile
        tile_index: cute.struct.MemRange[Int32, 1]
        # 1024-byte alignment: the swizzle pattern repeats every 8 rows of 128 bytes.
        sQ: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sQ_layout)], 1024]
        sK: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sKV_layout)], 1024]
        sV: cute.struct.Align[cute.struct.MemRange[dtype, cute.cosize(sV_layout)], 1024]
        sO: cute.struct.Align[cute.struct.MemRange[out_dtype, cute.cosize(sO_layout) if separate_o else 0],
                              1024]

    gmem = GmemArgs(tma_Q, tma_K, tma_V, gmem_O, mLSE, tma_atom_Q, tma_atom_K, tma_atom_V, tma_atom_O)
    return HostSetup(gmem, SmemLayouts(sQ_layout, sKV_layout, sV_layout, sO_layout), mmas, SharedStorage)


def grid_shape(plan: TilePlan, gmem: GmemArgs):
    """One CTA per (query tile, head, batch)."""
    seqlen_q, _, heads_q, batch = gmem.mQ.shape
    return (cute.ceil_div(seqlen_q, plan.block_m), heads_q, batch)


# ---- device side: preamble and roles ----------------------------------------------------------
class CtaContext(NamedTuple):
    tidx: Int32
    warp_idx: Int32
    sQ: cute.Tensor  # (Br, D, 1)
    sK: cute.Tensor  # (Bc, D, stage)
    sV: cute.Tensor  # (Bc, D, stage), or (D, Bc, stage) for a transposed V (host_setup)
    sO: cute.Tensor  # (Br, D, 1): O's staging for its TMA store, sQ itself unless separate_o
    pipeline_q: pipeline.PipelineTmaAsync
    pipeline_k: pipeline.PipelineTmaAsync
    pipeline_v: pipeline.PipelineTmaAsync
    tile_index: cute.Tensor  # (1,) Int32: the tile slot (publish_tile)


@cute.jit
def enter_kernel(plan: cutlass.Constexpr, dtype: cutlass.Constexpr, gmem: GmemArgs,
                 smem: SmemLayouts, SharedStorage: cutlass.Constexpr,
                 separate_o: cutlass.Constexpr[bool] = False) -> CtaContext:
    """Descriptor prefetch, shared-memory tensors and the Q / K / V mbarrier rings (one producer
    thread; one arrival per consumer warp). ``separate_o`` as in :func:`host_setup`."""
    tidx, _, _ = cute.arch.thread_idx()
    warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
    if warp_idx == plan.producer_warp:
        for tma_atom in (gmem.tma_atom_Q, gmem.tma_atom_K, gmem.tma_atom_V, gmem.tma_atom_O):
            if cutlass.const_expr(tma_atom is not None):
                cute.nvgpu.cpasync.prefetch_descriptor(tma_atom)

    storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
    sQ = storage.sQ.get_tensor(smem.sQ.outer, swizzle=smem.sQ.inner)
    sK = storage.sK.get_tensor(smem.sKV.outer, swizzle=smem.sKV.inner)
    sV = storage.sV.get_tensor(smem.sV.outer, swizzle=smem.sV.inner)
    sO = sQ
    if cutlass.const_expr(separate_o):
        sO = storage.sO.get_tensor(smem.sO.outer, swizzle=smem.sO.inner)
    dtype_bytes = dtype.width // 8
    pipeline_q, pipeline_k, pipeline_v = tma.make_qkv_pipelines(
        storage, plan.num_stages, plan.num_consumer_threads // WARP_THREADS,
        plan.q_bytes(dtype_bytes), plan.kv_bytes(dtype_bytes))
    tile_index = storage.tile_index.get_tensor(cute.make_layout(1))
    return CtaContext(tidx, warp_idx, sQ, sK, sV, sO, pipeline_q, pipeline_k, pipeline_v, tile_index)


class TileCoords(NamedTuple):
    m_block: Int32  # query tile: rows m_block * Br ...
    head_idx: Int32
    kv_head_idx: Int32  # head_idx // (Hq // Hkv): GQA
    batch_idx: Int32


@cute.jit
def tile_coords(gmem: GmemArgs, m_block: Int32, head_idx: Int32, batch_idx: Int32) -> TileCoords:
    kv_head_idx = head_idx // (gmem.mQ.shape[2] // gmem.mK.shape[2])
    return TileCoords(m_block, head_idx, kv_head_idx, batch_idx)


@cute.jit
def load_stage(pipeline_kv, tma_atom: cute.CopyAtom, tXgX: cute.Tensor, tXsX: cute.Tensor,
               n_block: Int32, state):
    """Acquire ``state``'s stage (wait on its *empty* mbarrier, arm its *full* one with the
    tile's bytes), then copy KV tile ``n_block`` into it by TMA."""
    pipeline_kv.producer_acquire(state)
    cute.copy(tma_atom, tXgX[None, n_block], tXsX[None, state.index],
              tma_bar_ptr=pipeline_kv.producer_get_barrier(state))


@cute.jit
def kv_tile_count(plan: cutlass.Constexpr, gmem: GmemArgs, coords: TileCoords,
                  causal: cutlass.Constexpr[bool]) -> Int32:
    """KV tiles query tile ``coords.m_block`` visits (``mask.kv_block_count``; may be <= 0).
    Each role computes it after its ``setmaxnreg``, so that no value crosses the role switch."""
    return kv_block_count(coords.m_block, plan.block_m, plan.block_n, gmem.mQ.shape[0], gmem.mK.shape[0],
                          causal)


@cute.jit
def load_tiles(plan: cutlass.Constexpr, gmem: GmemArgs, ctx: CtaContext, coords: TileCoords,
               causal: cutlass.Constexpr[bool], v_after_next_k: cutlass.Constexpr[bool] = False,
               q_state=None, kv_state=None, q_after_first_k: cutlass.Constexpr[bool] = False,
               v_transposed: cutlass.Constexpr[bool] = False):
    """The producer (one warp; one elected lane issues): Q once, then for every visible KV tile
    ``n`` its K into ``sK[stage]`` and its V into ``sV[stage]``, each copy on the stage's *full*
    mbarrier, each stage first acquired on its *empty* mbarrier (released by the consumers).

    ``v_after_next_k``: load K_{n+1} before V_n, the order in which a consumer that overlaps
    ``S_{n+1} = Q K_{n+1}^T`` with the softmax of tile ``n`` needs them (K7 onwards).
    A persistent CTA (K10) passes the ring states of its previous query tile (``q_state``,
    ``kv_state``; fresh ones when None) and gets them back past this tile's loads; with
    ``q_after_first_k`` the first K tile is requested before Q, whose stage the consumers free
    only at the end of their previous tile. ``v_transposed``: V arrives as V^T (``host_setup``),
    tile ``n`` is the ``(D, Bc)`` box at key ``n * Bc``."""
    # gQ: (Br, D, Sq/Br) this head's query tiles; gK, gV: (Bc, D, Sk/Bc) its KV tiles
    gQ = cute.local_tile(gmem.mQ[None, None, coords.head_idx, coords.batch_idx],
                         (plan.block_m, plan.head_dim), (None, 0))
    gK = cute.local_tile(gmem.mK[None, None, coords.kv_head_idx, coords.batch_idx],
                         (plan.block_n, plan.head_dim), (None, 0))
    if cutlass.const_expr(v_transposed):  # gV: (D, Bc, Sk'/Bc) tiles of V^T
        gV = cute.local_tile(gmem.mV[None, None, coords.kv_head_idx, coords.batch_idx],
                             (plan.head_dim, plan.block_n), (0, None))
    else:
        gV = cute.local_tile(gmem.mV[None, None, coords.kv_head_idx, coords.batch_idx],
                             (plan.block_n, plan.head_dim), (None, 0))
    # (TMA, tile) in global memory, (TMA, stage) in shared memory
    tQsQ, tQgQ = tma.partition(gmem.tma_atom_Q, ctx.sQ, gQ)
    tKsK, tKgK = tma.partition(gmem.tma_atom_K, ctx.sK, gK)
    tVsV, tVgV = tma.partition(gmem.tma_atom_V, ctx.sV, gV)
    n_block_max = kv_tile_count(plan, gmem, coords, causal)
    if cutlass.const_expr(q_state is None):
        q_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, 1)
    if cutlass.const_expr(kv_state is None):
        kv_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, plan.num_stages)

    if cutlass.const_expr(not q_after_first_k):
        load_q(gmem, ctx, tQgQ, tQsQ, coords.m_block, q_state)
        q_state.advance()
    if cutlass.const_expr(not v_after_next_k):
        for n_block in cutlass.range(n_block_max, unroll=1):
            # Waits until the consumers have released this stage (tile n_block - num_stages).
            load_stage(ctx.pipeline_k, gmem.tma_atom_K, tKgK, tKsK, n_block, kv_state)
            load_stage(ctx.pipeline_v, gmem.tma_atom_V, tVgV, tVsV, n_block, kv_state)
            kv_state.advance()
    else:
        if n_block_max > 0:
            load_stage(ctx.pipeline_k, gmem.tma_atom_K, tKgK, tKsK, 0, kv_state)
            if cutlass.const_expr(q_after_first_k):
                load_q(gmem, ctx, tQgQ, tQsQ, coords.m_block, q_state)
                q_state.advance()
            for n_block in cutlass.range(1, n_block_max, unroll=1):
                prev_state = kv_state.clone()
                kv_state.advance()
                load_stage(ctx.pipeline_k, gmem.tma_atom_K, tKgK, tKsK, n_block, kv_state)
                load_stage(ctx.pipeline_v, gmem.tma_atom_V, tVgV, tVsV, n_block - 1, prev_state)
            load_stage(ctx.pipeline_v, gmem.tma_atom_V, tVgV, tVsV, n_block_max - 1, kv_state)
            kv_state.advance()
        elif cutlass.const_expr(q_after_first_k):
            load_q(gmem, ctx, tQgQ, tQsQ, coords.m_block, q_state)
            q_state.advance()
    return q_state, kv_state


@cute.jit
def load_q(gmem: GmemArgs, ctx: CtaContext, tQgQ: cute.Tensor, tQsQ: cute.Tensor, m_block: Int32, q_state):
    """Acquire the Q stage and copy query tile ``m_block`` into it (the caller advances
    ``q_state``: the DSL tracks a state mutated in the branch that uses it, not in a helper)."""
    ctx.pipeline_q.producer_acquire(q_state)
    cute.copy(gmem.tma_atom_Q, tQgQ[None, m_block], tQsQ[None, 0],
              tma_bar_ptr=ctx.pipeline_q.producer_get_barrier(q_state))


# ---- the tile slot: the producer tells the consumers which tile comes next (K13) --------------
# A one-entry queue in shared memory (``ctx.tile_index``) between the producer warp and the
# consumer threads, ordered by two named barriers: the producer writes only after every consumer
# thread has read the previous index (TILE_SLOT_EMPTY), the consumers read only after the write
# (TILE_SLOT_FULL). ``bar.arrive`` -> ``bar.sync`` orders the plain shared-memory accesses of
# every participating thread, in the PTX memory model and for compute-sanitizer's racecheck
# alike (an mbarrier arrival by one lane per warp orders only that lane's reads).
def tile_slot_threads(plan: TilePlan) -> int:
    return plan.num_consumer_threads + WARP_THREADS


@cute.jit
def open_tile_slot(plan: cutlass.Constexpr):
    """Consumers, once before their first :func:`next_published_tile`: the slot starts empty."""
    cute.arch.barrier_arrive(barrier_id=int(NamedBarrier.TILE_SLOT_EMPTY),
                             number_of_threads=tile_slot_threads(plan))


@cute.jit
def publish_tile(plan: cutlass.Constexpr, ctx: CtaContext, tile_index: Int32):
    """The producer warp (all 32 lanes): ``tile_index`` into the slot once the consumers have
    read the previous one. An index past the last tile ends the consumers' walk."""
    threads = tile_slot_threads(plan)
    cute.arch.barrier(barrier_id=int(NamedBarrier.TILE_SLOT_EMPTY), number_of_threads=threads)
    with cute.arch.elect_one():
        ctx.tile_index[0] = tile_index
    cute.arch.barrier_arrive(barrier_id=int(NamedBarrier.TILE_SLOT_FULL), number_of_threads=threads)


@cute.jit
def next_published_tile(plan: cutlass.Constexpr, ctx: CtaContext, num_tiles: Int32) -> Int32:
    """Consumers (every thread): the index the producer published next; the slot is handed back
    unless the index ends the walk (the producer publishes nothing after it)."""
    threads = tile_slot_threads(plan)
    cute.arch.barrier(barrier_id=int(NamedBarrier.TILE_SLOT_FULL), number_of_threads=threads)
    tile = ctx.tile_index[0]
    if tile < num_tiles:
        cute.arch.barrier_arrive(barrier_id=int(NamedBarrier.TILE_SLOT_EMPTY), number_of_threads=threads)
    return tile


class ConsumerOperands:
    """A consumer thread's view of the two MMAs. Descriptors of the shared-memory operands
    come from its warpgroup's slice (they are the same for the 128 threads, and the compiler
    keeps them out of the mainloop); fragments and coordinates from the thread's own slice."""

    def __init__(self, plan: TilePlan, mmas: Mmas, ctx: CtaContext, wg_idx: Int32,
                 v_transposed: bool = False):
        self.tile_s = (plan.block_m, plan.block_n)  # S: the CTA's rows x one KV tile
        self.tile_o = (plan.block_m, plan.head_dim)  # O: the CTA's rows x D
        self.thr_mma_qk = mmas.qk.get_slice(ctx.tidx)
        self.thr_mma_pv = mmas.pv.get_slice(ctx.tidx)
        wg_mma_qk = mmas.qk.get_slice(wg_idx * wg.WARPGROUP_THREADS)
        wg_mma_pv = mmas.pv.get_slice(wg_idx * wg.WARPGROUP_THREADS)
        # tSrQ: (MMA, 1, D/16) descriptors of this warpgroup's 64 rows of Q
        self.tSrQ = wg_mma_qk.make_fragment_A(wg_mma_qk.partition_A(ctx.sQ[None, None, 0]))
        # tSrK: (MMA, 1, D/16, stage) descriptors of the K stages
        self.tSrK = wg_mma_qk.make_fragment_B(wg_mma_qk.partition_B(ctx.sK))
        # tOrVt: (MMA, D/N, Bc/16, stage) descriptors of V^T, the (D, Bc) view of each V stage
        # (a transposed V's stages are (D, Bc) already: Bc/32 k-steps of fp8)
        sVt = ctx.sV if v_transposed else wg.transposed_view(ctx.sV)
        self.tOrVt = wg_mma_pv.make_fragment_B(wg_mma_pv.partition_B(sVt))

    def scores_fragment(self) -> cute.Tensor:
        """A fresh ``acc_S``: ((2, 2, Bc/8), 1, 1) fp32, this thread's share of S."""
        return cute.make_rmem_tensor(self.thr_mma_qk.partition_shape_C(self.tile_s), Float32)

    def output_fragment(self) -> cute.Tensor:
        """``acc_O``: ((2, 2, D/8), 1, 1) fp32, rows 16 w + l/4 (+8), columns 8 j + 2 (l%4) (+1)."""
        return cute.make_rmem_tensor(self.thr_mma_pv.partition_shape_C(self.tile_o), Float32)


# ---- K5 onwards: register reallocation between the roles --------------------------------------
class RegisterSplit(NamedTuple):
    """Registers per thread after ``setmaxnreg``: consumers increase to ``consumer``, producer
    warps decrease to ``producer``. A CTA starts with 65536 / threads each (ptxas rounds down to
    a multiple of 8); the split must fit the same 64K-register file:
    ``128 * (warpgroups * consumer + producer) <= 65536``."""

    consumer: int
    producer: int


# By consumer warpgroups, FlashAttention-3's budgets: 1 -> 256 / 56, 2 -> 240 / 24, 3 -> 160 / 32.
REGISTER_SPLITS = {1: RegisterSplit(256, 56), 2: RegisterSplit(240, 24), 3: RegisterSplit(160, 32)}


# ---- holding the wait for P V behind the softmax's row factors (K11; a lab knob of K12) --------------
@cute.jit
def hold_pv_wait_behind(pipeline_k, kv_state, anchor: Float32):
    """Hold the next wait for the warpgroup's GEMMs (its own P V) behind the float work that
    computes ``anchor``, with K's stage released where it was: an arrive on K's stage, after
    ``anchor`` in program order and before the wait, that never runs. ``anchor`` must be a sum
    of exponentials (the row factors, the row sums): ``>= 0`` or NaN, so ``anchor < 0`` never
    holds; ptxas cannot prove that, keeps the arrive (predicated off: no branch) and keeps it in
    front of the wait, as it keeps any arrive's. Three SASS instructions per
    tile (a compare, a predicate, the arrive); if ptxas ever folded the condition the arrive
    would go and the wait with it, the answer unchanged (``tests/test_rungs_compile.py`` checks
    the wait's place)."""
    if anchor < Float32(0.0):
        pipeline_k.consumer_release(kv_state)

