"""A paged KV cache: a page allocator, per-layer page pools and one page table.

Layout (the one `attention()` reads, docs/design.md): per layer, `k, v [num_pages, page_size,
Hkv, D]`; a sequence lives in a *row* of `page_table [max_batch, max_pages] int32` (its page
ids in order) with its length in `seqlens [max_batch] int32`. Token `t` of row `b` is stored at
page `page_table[b, t // page_size]`, offset `t % page_size`.

The bookkeeping is on the host (Python lists), so growing a sequence never reads the device;
`commit()` copies the lengths (and the page table, when it changed) to the device tensors in
place, so a CUDA graph that captured those tensors sees the new values.

Page 0 is the *null page*: never handed out, it is what an empty row's page table points to.
Padding rows of a batch bucket (length 0) write their K/V there and attend to no key.

An FP8 cache (`dtype=torch.float8_e4m3fn`) stores e4m3 pages, half the bytes of bf16, and per
layer and kv head the factors `k_scale`, `v_scale` [num_layers, Hkv] (float32, on the device)
that turn them back into keys and values: `write` divides by them and rounds to e4m3 (values
past e4m3's range saturate at +-448 times the factor), `layer_scales` hands a layer's to
`attention()` / `DecodePlan`. They are static, as in FP8 checkpoints: set them (calibrated
amax / 448 per head, or `kv_scale` for all) before the first write.
"""

from __future__ import annotations

import operator

import torch

from ..harness.quantize import E4M3_MAX

NULL_PAGE = 0


def _whole(name: str, value) -> int:
    """`value` as an int: Python and NumPy integers pass, a float, bool or other object raises
    (a length of 6.5 would otherwise be stored and break the slot arithmetic)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None


class OutOfPages(RuntimeError):
    """The pool has fewer free pages than a request needs."""


class PageAllocator:
    """Free list over page ids `1 .. num_pages - 1` (page 0 is the null page)."""

    def __init__(self, num_pages: int):
        if num_pages < 2:
            raise ValueError(f"num_pages must be >= 2 (page 0 is reserved), got {num_pages}")
        self.num_pages = num_pages
        # Popped from the end: ids come out in increasing order from a fresh pool.
        self._free = list(range(num_pages - 1, NULL_PAGE, -1))
        # Membership of _free, so that free() checks a page in O(1) rather than rebuilding a set.
        self._is_free = bytearray(num_pages)
        self._is_free[NULL_PAGE + 1:] = b"\x01" * (num_pages - 1)

    @property
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self, count: int) -> list[int]:
        count = _whole("count", count)
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        if count > len(self._free):
            raise OutOfPages(f"out of KV pages: {count} needed, {len(self._free)} free "
                             f"of {self.num_pages - 1}")
        pages = self._free[len(self._free) - count:][::-1]
        del self._free[len(self._free) - count:]
        for page in pages:
            self._is_free[page] = 0
        return pages

    def free(self, pages) -> None:
        pages = list(pages)
        seen = set()  # a page twice in one call
        for page in pages:
            if (isinstance(page, bool) or not isinstance(page, int) or not NULL_PAGE < page < self.num_pages
                    or self._is_free[page] or page in seen):  # an int page id, allocated, once
                raise ValueError(f"page {page} is not an allocated page of this pool")
            seen.add(page)
        for page in pages:
            self._is_free[page] = 1
        self._free.extend(reversed(pages))


class PagedKVCache:
    """K/V pages of every layer, a page table and lengths for up to `max_batch` rows.

    `num_pages` defaults to every row at `max_seqlen` plus the null page; `dtype` (bf16, fp16, or
    float8_e4m3fn with `kv_scale`, the initial factor of every layer and head) and `device`
    ("cuda") are the K/V pages'."""

    def __init__(self, *, num_layers: int, heads_kv: int, head_dim: int, max_batch: int,
                 max_seqlen: int, page_size: int, num_pages: int | None = None,
                 dtype=torch.bfloat16, device="cuda", kv_scale: float = 1.0):
        for name, value in (("num_layers", num_layers), ("heads_kv", heads_kv), ("head_dim", head_dim),
                            ("max_batch", max_batch), ("max_seqlen", max_seqlen), ("page_size", page_size)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self.page_size = page_size
        self.max_batch = max_batch
        self.max_seqlen = max_seqlen
        self.max_pages = -(-max_seqlen // page_size)
        if num_pages is None:  # room for every row at full length, plus the null page
            num_pages = max_batch * self.max_pages + 1
        self.allocator = PageAllocator(num_pages)
        shape = (num_layers, num_pages, page_size, heads_kv, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.k_scale = self.v_scale = None
        if dtype == torch.float8_e4m3fn:
            if (isinstance(kv_scale, bool) or not isinstance(kv_scale, (int, float))
                    or not 0 < kv_scale < float("inf")):
                raise ValueError(f"kv_scale must be a positive finite number, got {kv_scale!r}")
            self.k_scale = torch.full((num_layers, heads_kv), float(kv_scale), dtype=torch.float32,
                                      device=device)
            self.v_scale = self.k_scale.clone()
        # One device buffer: the page table, then the lengths (16-byte aligned), so that one copy
        # updates both.
        table = max_batch * self.max_pages
        self._lengths_at = -(-table // 4) * 4
        state = torch.zeros(self._lengths_at + max_batch, dtype=torch.int32, device=device)
        self.page_table = state[:table].view(max_batch, self.max_pages)
        self.seqlens = state[self._lengths_at:]
        self._state = state
        # Host copies to stage from: pinned and used in turn on a GPU, so that a commit does not
        # wait for the device (a buffer is reused only after its previous copy has completed).
        pinned = torch.device(device).type == "cuda"
        self._staging = [torch.zeros(state.shape, dtype=torch.int32, pin_memory=pinned)
                         for _ in range(2 if pinned else 1)]
        self._staged = [None] * len(self._staging)
        self._turn = 0
        self._table_host = torch.zeros(max_batch, self.max_pages, dtype=torch.int32)
        self._pages: list[list[int]] = [[] for _ in range(max_batch)]
        self._lengths = [0] * max_batch
        self._table_dirty = False

    # ---- bookkeeping (host) ------------------------------------------------------------------

    def _check_row(self, row) -> None:
        """A row index: an int in [0, max_batch) (a negative one would wrap around to another
        sequence's row)."""
        row = _whole("row", row)
        if not 0 <= row < self.max_batch:
            raise IndexError(f"row {row} outside [0, {self.max_batch})")

    def length(self, row: int) -> int:
        self._check_row(row)
        return self._lengths[row]

    def pages(self, row: int) -> list[int]:
        self._check_row(row)
        return list(self._pages[row])

    def grow(self, row: int, length: int) -> None:
        """Make row `row` hold `length` tokens, allocating pages as needed (ValueError for a
        length below the row's current one: rows never shrink; `release` empties one)."""
        self._check_row(row)
        length = _whole("length", length)
        if length > self.max_seqlen:
            raise ValueError(f"row {row}: length {length} exceeds max_seqlen {self.max_seqlen}")
        if length < self._lengths[row]:
            raise ValueError(f"row {row} holds {self._lengths[row]} tokens; cannot grow to {length}")
        pages = self._pages[row]
        needed = -(-length // self.page_size) - len(pages)
        if needed > 0:
            new = self.allocator.allocate(needed)
            self._table_host[row, len(pages):len(pages) + needed] = torch.tensor(new, dtype=torch.int32)
            pages.extend(new)
            self._table_dirty = True
        self._lengths[row] = length

    def release(self, row: int) -> None:
        """Return row `row`'s pages to the pool; the row becomes empty (null page, length 0)."""
        self._check_row(row)
        self.allocator.free(self._pages[row])
        self._pages[row] = []
        self._lengths[row] = 0
        self._table_host[row] = NULL_PAGE
        self._table_dirty = True

    def release_all(self) -> None:
        for row in range(self.max_batch):
            if self._pages[row] or self._lengths[row]:
                self.release(row)

    def advance(self, batch: int) -> None:
        """Rows `0 .. batch - 1` each grow by one token (a decode step). Checked before any row
        changes: rows in range, none at max_seqlen, the pages the step needs free."""
        batch = _whole("batch", batch)
        if not 0 <= batch <= self.max_batch:
            raise ValueError(f"batch must be an int in [0, max_batch = {self.max_batch}], got {batch!r}")
        lengths, limit = self._lengths, self.max_seqlen
        full = next((row for row in range(batch) if lengths[row] >= limit), None)
        if full is not None:
            raise ValueError(f"row {full}: length {lengths[full] + 1} exceeds max_seqlen {limit}")
        needed = sum(1 for row in range(batch) if lengths[row] + 1 > len(self._pages[row]) * self.page_size)
        if needed > self.allocator.num_free:
            free = self.allocator.num_free
            raise OutOfPages(f"out of KV pages: {needed} needed for this step, {free} free "
                             f"of {self.allocator.num_pages - 1}")
        for row in range(batch):
            length = lengths[row] + 1
            if length > limit or length > len(self._pages[row]) * self.page_size:
                self.grow(row, length)  # a new page, or the error
            else:
                lengths[row] = length

    def commit(self) -> None:
        """Copy the host bookkeeping into the device tensors, in place, without waiting for
        the device (on a GPU)."""
        staging, copied = self._staging[self._turn], self._staged[self._turn]
        if copied is not None:
            copied.synchronize()  # the copy out of this buffer two commits ago (long done)
        first = self._lengths_at
        staging[first:] = torch.tensor(self._lengths, dtype=torch.int32)
        if self._table_dirty:
            staging[:self._table_host.numel()] = self._table_host.view(-1)
            first = 0
            self._table_dirty = False
        self._state[first:].copy_(staging[first:], non_blocking=staging.is_pinned())
        if staging.is_pinned():
            self._staged[self._turn] = torch.cuda.Event()
            self._staged[self._turn].record()
            self._turn = (self._turn + 1) % len(self._staging)

    # ---- addressing ----------------------------------------------------------------------------

    def slots(self, row: int, start: int, end: int) -> list[int]:
        """Flat slot ids (page * page_size + offset) of tokens `start .. end - 1` of a row."""
        self._check_row(row)
        if not 0 <= start <= end <= self._lengths[row]:
            raise ValueError(f"row {row}: tokens [{start}, {end}) outside its {self._lengths[row]}")
        pages, size = self._pages[row], self.page_size
        return [pages[t // size] * size + t % size for t in range(start, end)]

    def slots_at(self, rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """On the device, from the committed page table, no host work: the flat slots (int64) of
        tokens at `positions` of `rows` (device tensors of one shape). Graph-capturable."""
        positions = positions.long()
        page = self.page_table[rows, positions // self.page_size]
        return page.long() * self.page_size + positions % self.page_size

    def last_slots(self, batch: int) -> torch.Tensor:
        """The slot of the last token of rows `0 .. batch - 1` (empty rows: slot 0 of the null
        page), on the device."""
        rows = torch.arange(batch, device=self.seqlens.device)
        return self.slots_at(rows, (self.seqlens[:batch] - 1).clamp_min(0))

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`k, v [num_pages, page_size, Hkv, D]` of one layer (views)."""
        return self.k[index], self.v[index]

    def layer_scales(self, index: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """An FP8 cache's `k_scale, v_scale [Hkv]` of one layer (views), (None, None) otherwise:
        what `attention(..., k_scale=, v_scale=)` takes with `layer(index)`."""
        if self.k_scale is None:
            return None, None
        return self.k_scale[index], self.v_scale[index]

    def calibrate(self, reference: PagedKVCache, pages: torch.Tensor | None = None,
                  headroom: float = 2.0) -> None:
        """Set an FP8 cache's factors from the K/V a 16-bit cache of the same layers and heads
        holds (its `pages`, all by default): `headroom * amax / 448` per layer and kv head, the
        calibration an FP8 checkpoint ships (headroom for values larger than the sample's)."""
        if self.k_scale is None:
            raise ValueError("calibrate: this cache is not FP8 (dtype=torch.float8_e4m3fn)")
        same_heads = reference.k.shape[0] == self.k.shape[0] and reference.k.shape[3] == self.k.shape[3]
        if reference.k_scale is not None or not same_heads:
            raise ValueError("calibrate: the reference must be a 16-bit cache of the same layers and kv "
                             "heads")
        for mine, seen in ((self.k_scale, reference.k), (self.v_scale, reference.v)):
            if pages is not None:
                seen = seen[:, pages.to(seen.device)]
            amax = seen.float().abs().amax(dim=(1, 2, 4))  # [layers, Hkv]
            mine.copy_((headroom * amax / E4M3_MAX).clamp_min(torch.finfo(torch.float32).tiny))

    def write(self, index: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store `k, v [tokens, Hkv, D]` at flat `slots [tokens]` (int64) of layer `index`; an FP8
        cache stores them divided by the layer's factors, saturated and rounded to e4m3."""
        k_cache, v_cache = self.layer(index)
        k_scale, v_scale = self.layer_scales(index)
        if k_scale is not None:  # stored as bytes: index_copy_ has no e4m3 kernel
            k, v = _to_e4m3(k, k_scale).view(torch.uint8), _to_e4m3(v, v_scale).view(torch.uint8)
            k_cache, v_cache = k_cache.view(torch.uint8), v_cache.view(torch.uint8)
        k_cache.view(-1, *k_cache.shape[2:]).index_copy_(0, slots, k)
        v_cache.view(-1, *v_cache.shape[2:]).index_copy_(0, slots, v)


def _to_e4m3(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x [tokens, Hkv, D] / scale [Hkv], saturated to e4m3's range and rounded to nearest even
    (a value past the range would otherwise become NaN)."""
    return (x.float() / scale.view(1, -1, 1)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
