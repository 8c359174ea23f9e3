"""Context parallelism: attention over one sequence sharded across the ranks of a
torch.distributed process group (NCCL for CUDA tensors, gloo for CPU tensors).

When one sequence outgrows one GPU (long-context prefill), its tokens are split across W ranks
and each rank holds the queries, keys and values of its shard: `q [B, S/W, Hq, D]`,
`k, v [B, S/W, Hkv, D]`. Two ways to attend over the whole sequence, with one signature:

- `ring_attention`: each rank keeps its queries while the K/V shards travel round the ring
  (rank r sends to r + 1 and receives from r - 1, one batched isend/irecv per step). Step s
  attends the local queries to the shard of rank (r - s) mod W with one `attention()` call
  (so the production prefill kernel, or the fallbacks, run each step) that also returns its
  log-sum-exp; the partial outputs merge in fp32 through their LSEs. The transfer of the next
  shard starts before a step's compute and is waited after it, so communication hides behind
  compute. Memory: two K/V shards in flight besides the rank's own.
- `allgather_kv_attention`: one all-gather of every K/V shard, then the local queries attend
  to the keys they may see. No overlap and the whole K/V on every rank: the comparison point.

Layout. Causal attention over a contiguous split is unbalanced: rank r's queries see r + 1 of
the W key shards, so the last rank does W times the work of the first. The zig-zag layout
(`zigzag_shard`) cuts the sequence into 2W equal chunks and gives rank r chunks r and
2W - 1 - r, an early and a late one. With c = S / 2W tokens per chunk, every step of the ring
then costs every rank the same 2c^2 query-key pairs:

| step | K/V of rank | local queries | keys | mask |
|---|---|---|---|---|
| 0 | r (own) | both chunks | both chunks | causal |
| s > 0, src = (r - s) mod W < r | src | both chunks | first chunk (chunk src) | none |
| s > 0, src > r | src | second chunk (chunk 2W - 1 - r) | both chunks | none |

Without causal masking the layout does not matter (every query sees every key); `zigzag`
only says how to read the shards then. `zigzag=False` takes contiguous shards (rank r holds
chunk r of W); causal attention over them skips the steps whose keys lie in the future, so
its ranks finish unevenly.

Merge. For a row with partial outputs o_a, o_b and log-sum-exps l_a, l_b:
`l = logaddexp(l_a, l_b)`, `o = exp(l_a - l) o_a + exp(l_b - l) o_b`, in fp32; a row that has
seen no key yet (LSE -inf) takes the other part whole (`merge_partial`).

Forward only: autograd does not cross the ring. Typical use, under `torchrun`:

```python
import torch.distributed as dist
from kernels.extension.backend.context_parallel import gather_sequence, ring_attention, zigzag_shard

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(rank)
q, k, v = (zigzag_shard(t, rank, world) for t in (q_full, k_full, v_full))  # [B, S/W, H, D]
out = ring_attention(q, k, v, causal=True)             # this rank's rows, zig-zag order
full = gather_sequence(out)                             # [B, S, Hq, D] on every rank
```
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from .attention import attention, validate_inputs

# Position of a dtype in the shape check's gathered metadata.
_DTYPE_CODES = (torch.bfloat16, torch.float16, torch.float32)


# ---- layouts ----------------------------------------------------------------------------------

def zigzag_shard(x: torch.Tensor, rank: int, world_size: int, dim: int = 1) -> torch.Tensor:
    """This rank's zig-zag shard of a full sequence.

    Args:
        x: The whole sequence, e.g. `[B, S, H, D]` (or an LSE `[B, H, S]` with `dim=2`).
        rank: The rank whose shard to take, in `[0, world_size)`.
        world_size: The number of ranks W.
        dim: The sequence dimension.

    Returns:
        Chunks `rank` and `2W - 1 - rank` of the 2W equal chunks of `x` along `dim`,
        concatenated (a new tensor with `S / W` tokens along `dim`).

    Raises:
        ValueError: The sequence length is not a multiple of 2W, rank is out of range, or
            `dim` is not a dimension of `x`.
    """
    _check_rank(rank, world_size)
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"zigzag_shard: dim {dim} is not a dimension of a {x.dim()}-D tensor of shape "
                         f"{tuple(x.shape)} (1-D position ids: dim=0)")
    length = x.shape[dim]
    chunks = 2 * world_size
    if length % chunks:
        raise ValueError(f"zigzag_shard: the sequence length {length} (dim {dim}) must be a multiple of "
                         f"2 x world_size = {chunks}, so that every rank gets two equal chunks")
    parts = x.chunk(chunks, dim=dim)
    return torch.cat([parts[rank], parts[chunks - 1 - rank]], dim=dim)


def zigzag_unshard(shards: Sequence[torch.Tensor], dim: int = 1) -> torch.Tensor:
    """The full sequence from the zig-zag shards of every rank (the inverse of `zigzag_shard`).

    Args:
        shards: One shard per rank, in rank order, all of one shape with an even length
            along `dim`.
        dim: The sequence dimension.

    Returns:
        The chunks in sequence order: the first halves of ranks 0 .. W-1, then the second
        halves of ranks W-1 .. 0.

    Raises:
        ValueError: No shards, shards of different shapes, or an odd shard length.
    """
    if not shards:
        raise ValueError("zigzag_unshard: needs at least one shard")
    shape = shards[0].shape
    if any(s.shape != shape for s in shards):
        raise ValueError(f"zigzag_unshard: every shard must have one shape, got "
                         f"{[tuple(s.shape) for s in shards]}")
    if shape[dim] % 2:
        raise ValueError(f"zigzag_unshard: a zig-zag shard holds two equal chunks; its length {shape[dim]} "
                         f"(dim {dim}) is odd")
    halves = [s.chunk(2, dim=dim) for s in shards]
    return torch.cat([h[0] for h in halves] + [h[1] for h in reversed(halves)], dim=dim)


def gather_sequence(local: torch.Tensor, *, group: dist.ProcessGroup | None = None, zigzag: bool = True,
                    dim: int = 1) -> torch.Tensor:
    """The full sequence on every rank, all-gathered from each rank's shard (a collective:
    every rank of `group` calls it).

    Args:
        local: This rank's shard (same shape on every rank), e.g. the output of `ring_attention`.
        group: The process group (default: the world).
        zigzag: The shards are in the zig-zag layout (else contiguous, rank order).
        dim: The sequence dimension.

    Returns:
        The tensor of the whole sequence, in sequence order.
    """
    _, world = _group_info(group, "gather_sequence")
    shards = [torch.empty_like(local, memory_format=torch.contiguous_format) for _ in range(world)]
    dist.all_gather(shards, local.contiguous(), group=group)
    return zigzag_unshard(shards, dim) if zigzag else torch.cat(shards, dim=dim)


# ---- merging partial results -----------------------------------------------------------------

def merge_partial(out: torch.Tensor, lse: torch.Tensor, part_out: torch.Tensor,
                  part_lse: torch.Tensor) -> None:
    """Fold one partial attention result into an accumulated one, in place.

    Both are softmax-normalized over their own keys; the merged result is normalized over the
    union: `l = logaddexp(lse, part_lse)`,
    `out = exp(lse - l) * out + exp(part_lse - l) * part_out`, `lse = l`. Rows with LSE -inf
    (no key seen) carry no weight, and a row that is -inf in both stays zero with LSE -inf.

    Args:
        out: The accumulated output `[B, S, H, D]`, fp32 (updated).
        lse: Its log-sum-exp `[B, H, S]`, fp32 (updated).
        part_out: The partial output `[B, S, H, D]`, any float dtype.
        part_lse: Its log-sum-exp `[B, H, S]`, fp32.

    Raises:
        ValueError: Shapes or dtypes that do not fit together.
    """
    if out.dtype != torch.float32 or lse.dtype != torch.float32 or part_lse.dtype != torch.float32:
        raise ValueError(f"merge_partial: out, lse and part_lse must be float32, got {out.dtype}, "
                         f"{lse.dtype}, {part_lse.dtype}")
    if part_out.shape != out.shape or out.dim() != 4:
        raise ValueError(f"merge_partial: out and part_out must be one [B, S, H, D] shape, got "
                         f"{tuple(out.shape)} and {tuple(part_out.shape)}")
    expected = (out.shape[0], out.shape[2], out.shape[1])
    if lse.shape != expected or part_lse.shape != expected:
        raise ValueError(f"merge_partial: lse and part_lse must be [B, H, S] = {list(expected)}, got "
                         f"{tuple(lse.shape)} and {tuple(part_lse.shape)}")
    merged = torch.logaddexp(lse, part_lse)
    # Where both parts are -inf the merged LSE is -inf too, and x - merged would be NaN; against
    # 0 instead, both weights come out exp(-inf) = 0.
    reference = torch.where(torch.isneginf(merged), 0.0, merged)
    keep = torch.exp(lse - reference).transpose(1, 2).unsqueeze(-1)  # [B, S, H, 1]
    take = torch.exp(part_lse - reference).transpose(1, 2).unsqueeze(-1)
    out.mul_(keep).addcmul_(part_out, take)
    lse.copy_(merged)


# ---- entry points ------------------------------------------------------------------------------

def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                   scale: float | None = None, group: dist.ProcessGroup | None = None, zigzag: bool = True,
                   return_lse: bool = False,
                   check_shapes: bool = True) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention of this rank's queries over the whole sharded sequence, by ring exchange of
    the K/V shards (see the module docstring).

    Every rank of `group` calls it at once with its own shards. Each step is one `attention()`
    call, so the backend choice (our CUDA prefill, FlashAttention-4, torch) and
    `use_backend` apply per step.

    Args:
        q: This rank's queries `[B, S/W, Hq, D]`.
        k: This rank's keys `[B, S/W, Hkv, D]` (GQA: Hq a multiple of Hkv; the K/V shards
            travel with Hkv heads).
        v: This rank's values, shaped like `k`.
        causal: Causal masking over the global token order (queries see earlier keys).
        scale: Softmax scale (default `1 / sqrt(D)`).
        group: The process group (default: the world); its rank order is the layout's.
        zigzag: The shards are in the zig-zag layout (`zigzag_shard`); False: contiguous
            shards, rank r holding chunk r of W.
        return_lse: Also return the log-sum-exp of this rank's rows.
        check_shapes: Check with one small all-gather that every rank passes the same shapes
            and dtype (a mismatch would otherwise hang or corrupt the exchange); False skips
            it, and its host synchronization.

    Returns:
        The output `[B, S/W, Hq, D]` in q's dtype (this rank's rows, in the layout of q), and
        with `return_lse` also the LSE `[B, Hq, S/W]` fp32 (natural log).

    Raises:
        RuntimeError: torch.distributed is not initialized, or autograd records the call.
        ValueError: Inputs that do not fit (see `attention`), q and k/v shards of different
            lengths, an odd shard length with the causal zig-zag layout, or shards that differ
            across ranks.
        TypeError: Inputs of another type or dtype than `attention` takes.
    """
    rank, world = _enter("ring_attention", q, k, v, scale, causal, zigzag, group, check_shapes)
    batch, local, heads_q, _ = q.shape
    lse = torch.empty(batch, heads_q, local, dtype=torch.float32, device=q.device)
    if world == 1:
        out = attention(q, k, v, causal=causal, scale=scale, lse=lse if return_lse else None)
        return (out, lse) if return_lse else out

    # ---- the ring ---------------------------------------------------------------------------
    half = local // 2
    send_to, recv_from = _global_rank(group, (rank + 1) % world), _global_rank(group, (rank - 1) % world)
    own = (k.contiguous(), v.contiguous())  # P2P sends whole, contiguous buffers
    # Two receive buffers: step s computes on the shard received into one while the next shard
    # arrives in the other (the user's k and v are never written).
    buffers = [torch.empty((2, *own[0].shape), dtype=k.dtype, device=k.device)
               for _ in range(min(2, world - 1))]

    # Step 0, the rank's own shard: under the zig-zag layout the two local chunks are in
    # sequence order relative to each other, so plain causal attention is exact.
    pending = _exchange(own, buffers[0], send_to, recv_from, group)
    acc = attention(q, k, v, causal=causal, scale=scale, lse=lse).float()
    for step in range(1, world):
        for work in pending:
            work.wait()
        current = tuple(buffers[(step - 1) % 2].unbind(0))
        if step < world - 1:  # start the next transfer before this step's compute
            pending = _exchange(current, buffers[step % 2], send_to, recv_from, group)
        source = (rank - step) % world
        keys, values = current
        if not causal:
            part_lse = torch.empty_like(lse)
            part = attention(q, keys, values, scale=scale, lse=part_lse)
            merge_partial(acc, lse, part, part_lse)
        elif not zigzag:
            if source < rank:  # an earlier shard, whole; later shards are masked out entirely
                part_lse = torch.empty_like(lse)
                part = attention(q, keys, values, scale=scale, lse=part_lse)
                merge_partial(acc, lse, part, part_lse)
        elif source < rank:
            # Chunk `source` precedes both local chunks; chunk 2W-1-source follows both.
            part_lse = torch.empty_like(lse)
            part = attention(q, keys[:, :half], values[:, :half], scale=scale, lse=part_lse)
            merge_partial(acc, lse, part, part_lse)
        else:
            # Both received chunks precede local chunk 2W-1-r and follow local chunk r.
            part_lse = torch.empty(batch, heads_q, local - half, dtype=torch.float32, device=q.device)
            part = attention(q[:, half:], keys, values, scale=scale, lse=part_lse)
            merge_partial(acc[:, half:], lse[:, :, half:], part, part_lse)
    out = acc.to(q.dtype)
    return (out, lse) if return_lse else out


def allgather_kv_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
                           scale: float | None = None, group: dist.ProcessGroup | None = None,
                           zigzag: bool = True, return_lse: bool = False,
                           check_shapes: bool = True) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention of this rank's queries over the whole sharded sequence, after one all-gather
    of every K/V shard (the comparison point for `ring_attention`: the same arguments and
    results, no overlap of communication and compute, the whole K/V on every rank).

    Causal with the zig-zag layout: two `attention()` calls, local chunk r on the keys up to
    its end and local chunk 2W-1-r on the keys up to its end (bottom-right causal alignment);
    contiguous: one call on the keys up to the shard's end; not causal: one call on every key.

    Args:
        q: This rank's queries `[B, S/W, Hq, D]`.
        k: This rank's keys `[B, S/W, Hkv, D]`.
        v: This rank's values, shaped like `k`.
        causal: Causal masking over the global token order.
        scale: Softmax scale (default `1 / sqrt(D)`).
        group: The process group (default: the world).
        zigzag: The shards are in the zig-zag layout; False: contiguous.
        return_lse: Also return the log-sum-exp of this rank's rows.
        check_shapes: Check that every rank passes the same shapes and dtype (as in
            `ring_attention`).

    Returns:
        As `ring_attention`: the output `[B, S/W, Hq, D]`, and the LSE `[B, Hq, S/W]` with
        `return_lse`.

    Raises:
        RuntimeError: torch.distributed is not initialized, or autograd records the call.
        ValueError: As `ring_attention`.
        TypeError: As `ring_attention`.
    """
    rank, world = _enter("allgather_kv_attention", q, k, v, scale, causal, zigzag, group, check_shapes)
    batch, local, heads_q, _ = q.shape
    lse = torch.empty(batch, heads_q, local, dtype=torch.float32, device=q.device) if return_lse else None
    if world == 1:
        out = attention(q, k, v, causal=causal, scale=scale, lse=lse)
        return (out, lse) if return_lse else out

    packed = torch.stack([k, v])  # [2, B, S/W, Hkv, D]: one collective for both
    gathered = torch.empty((world, *packed.shape), dtype=packed.dtype, device=packed.device)
    _all_gather_into(gathered, packed, group)
    shards = list(gathered.unbind(0))
    full = zigzag_unshard(shards, dim=2) if zigzag else torch.cat(shards, dim=2)
    del gathered, shards
    keys, values = full[0], full[1]  # [B, S, Hkv, D], in sequence order
    if not causal:
        out = attention(q, keys, values, scale=scale, lse=lse)
    elif not zigzag:
        end = (rank + 1) * local
        out = attention(q, keys[:, :end], values[:, :end], causal=True, scale=scale, lse=lse)
    else:
        half = local // 2
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        # (local rows, end of the keys they may see): chunk r, then chunk 2W-1-r.
        chunks = ((slice(0, half), (rank + 1) * half), (slice(half, local), (2 * world - rank) * half))
        for rows, end in chunks:
            attention(q[:, rows], keys[:, :end], values[:, :end], causal=True, scale=scale, out=out[:, rows],
                      lse=None if lse is None else lse[:, :, rows])
    return (out, lse) if return_lse else out


# ---- helpers -----------------------------------------------------------------------------------

def _check_rank(rank: int, world_size: int) -> None:
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in [0, world_size = {world_size})")


def _enter(name, q, k, v, scale, causal, zigzag, group, check_shapes) -> tuple[int, int]:
    """The checks every entry point runs first, local ones before any communication; returns
    (rank, world size) in `group`."""
    _validate(q, k, v, scale, causal, zigzag, name)
    rank, world = _group_info(group, name)
    if check_shapes:
        _check_same_across_ranks(q, k, group, rank, world, name)
    return rank, world


def _validate(q, k, v, scale, causal, zigzag, name) -> None:
    """Local checks, before any communication (every rank raises alike on the same shapes)."""
    validate_inputs(q, k, v, scale=scale)
    for flag, value in (("causal", causal), ("zigzag", zigzag)):
        if not isinstance(value, bool):
            raise TypeError(f"{name}: {flag} must be a bool, got {value!r}")
    if k.shape[1] != q.shape[1]:
        raise ValueError(f"{name}: q and k/v shards must hold the same tokens: local seqlen of q is "
                         f"{q.shape[1]}, of k/v {k.shape[1]}")
    if q.shape[1] == 0:
        raise ValueError(f"{name}: empty shards (local seqlen 0)")
    if causal and zigzag and q.shape[1] % 2:
        raise ValueError(f"{name}: the causal zig-zag layout holds two equal chunks per rank, so the local "
                         f"seqlen must be even, got {q.shape[1]} (the global seqlen must be a multiple of "
                         f"2 x world_size); pad the sequence, or pass contiguous shards with zigzag=False")
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise RuntimeError(f"{name} is forward-only (autograd does not cross the ring): call it under "
                           f"torch.no_grad() or torch.inference_mode(), or on tensors that do not "
                           f"require grad")


def _group_info(group, name) -> tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"{name} runs over a torch.distributed process group: call "
                           f"torch.distributed.init_process_group first (torchrun sets up its environment; "
                           f"NCCL for CUDA tensors, gloo for CPU tensors)")
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError(f"{name}: this process is not a member of the given group")
    return rank, dist.get_world_size(group)


def _global_rank(group, group_rank: int) -> int:
    """P2P ops name their peer by its global rank."""
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def _check_same_across_ranks(q, k, group, rank, world, name) -> None:
    if world == 1:
        return
    mine = torch.tensor([*q.shape, k.shape[2], _DTYPE_CODES.index(q.dtype)], dtype=torch.int64,
                        device=q.device)
    every = torch.empty((world, mine.numel()), dtype=torch.int64, device=q.device)
    _all_gather_into(every, mine, group)
    rows = every.tolist()
    if all(row == rows[0] for row in rows):
        return
    described = "; ".join(f"rank {r}: q {row[:4]}, {row[4]} kv heads, {_DTYPE_CODES[row[5]]}"
                          for r, row in enumerate(rows))
    raise ValueError(f"{name}: every rank must pass shards of one shape and dtype, got {described} "
                     f"(this is rank {rank})")


def _all_gather_into(output: torch.Tensor, local: torch.Tensor, group) -> None:
    """All-gather `local` (contiguous) into `output` [W, *local.shape] (contiguous)."""
    # all_gather_single is the newer name of all_gather_into_tensor (torch >= 2.13 warns on the
    # old one). Flat views: gloo takes only the concatenated form.
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(output.view(-1), local.view(-1), group=group)


def _exchange(send: tuple[torch.Tensor, torch.Tensor], receive: torch.Tensor, send_to: int, recv_from: int,
              group) -> list:
    """Start sending (k, v) to the next rank and receiving the previous rank's into `receive`
    [2, ...]; returns the works to wait on. With NCCL the transfer runs on NCCL's stream, after
    the work already queued on the current stream; waiting makes the current stream wait for it."""
    ops = [dist.P2POp(dist.isend, send[0], send_to, group, tag=0),
           dist.P2POp(dist.isend, send[1], send_to, group, tag=1),
           dist.P2POp(dist.irecv, receive[0], recv_from, group, tag=0),
           dist.P2POp(dist.irecv, receive[1], recv_from, group, tag=1)]
    return dist.batch_isend_irecv(ops)
