"""Tensors inside poisoned guard regions, to catch out-of-bounds accesses in a test.

Every tensor from a :class:`GuardedAllocator` sits in the middle of a larger byte buffer whose
other bytes are ``0xFF``: NaN in every floating format the kernels use (fp32, bf16, fp16, fp8
e4m3fn and e5m2) and -1 in the integer ones (an invalid page id or length). Then

- a write past either end of an output (or into the gaps of a strided one) changes a guard
  byte, which :meth:`GuardedAllocator.check` reports;
- a read past either end of an input pulls NaN into the result, which the output checks catch;
- a fresh output (:meth:`GuardedAllocator.empty`) is NaN throughout, so an element the kernel
  never writes cannot pass either.

Guards are ``GUARD_BYTES`` long on each side, a multiple of 256, so each tensor starts as
aligned as the allocation (the caching allocator hands out 512-byte aligned blocks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

GUARD_BYTES = 8192
POISON = 0xFF


@dataclass
class _Guarded:
    name: str
    buffer: torch.Tensor        # uint8, guard + span + guard
    span: int                   # bytes between the guards
    gaps: torch.Tensor | None   # bool [span]: bytes no element covers (strided tensors), or None


class GuardedAllocator:
    """Allocates tensors inside guard regions and checks the guards after a run.

    ``copy(t)`` gives an input with t's values, shape and strides; ``empty(shape, dtype)`` an
    output filled with the poison. ``check()`` raises AssertionError naming every tensor whose
    guards (or gaps) changed.
    """

    def __init__(self, device: str | torch.device = "cuda", guard_bytes: int = GUARD_BYTES):
        if guard_bytes <= 0 or guard_bytes % 256:
            raise ValueError(f"guard_bytes must be a positive multiple of 256, got {guard_bytes}")
        self.device = torch.device(device)
        self.guard_bytes = guard_bytes
        self._tensors: list[_Guarded] = []
        self.unchecked = False  # a tensor was allocated since the last check()

    # ---- allocation ------------------------------------------------------------------------
    def _allocate(self, shape, stride, dtype: torch.dtype, device, name: str | None) -> torch.Tensor:
        shape, stride = tuple(shape), tuple(stride)
        if any(s < 0 for s in stride):
            raise ValueError(f"negative strides are not supported, got {stride}")
        itemsize = torch.empty((), dtype=dtype).element_size()
        numel = math.prod(shape)
        span_elems = 0 if numel == 0 else 1 + sum((n - 1) * s for n, s in zip(shape, stride))
        span = span_elems * itemsize
        buffer = torch.full((2 * self.guard_bytes + span,), POISON, dtype=torch.uint8, device=device)
        view = buffer[self.guard_bytes:self.guard_bytes + span].view(dtype).as_strided(shape, stride)
        gaps = None
        if numel and span_elems != numel:  # strided: the bytes between elements are guards too
            index = torch.arange(span_elems, device=device).as_strided(shape, stride).reshape(-1)
            covered = torch.zeros(span_elems, dtype=torch.bool, device=device)
            covered[index] = True
            gaps = ~covered.repeat_interleave(itemsize)
        label = name or f"tensor {len(self._tensors)} {tuple(shape)} {str(dtype).replace('torch.', '')}"
        self._tensors.append(_Guarded(label, buffer, span, gaps))
        self.unchecked = True
        return view

    def empty(self, shape, dtype: torch.dtype, *, device=None, name: str | None = None) -> torch.Tensor:
        """A contiguous tensor whose every byte is the poison (NaN for floats)."""
        shape = tuple(shape)
        stride = torch.empty(shape, device="meta").stride()
        return self._allocate(shape, stride, dtype, device or self.device, name)

    def copy(self, tensor: torch.Tensor, *, name: str | None = None) -> torch.Tensor:
        """A guarded copy of ``tensor``: same values, shape, strides and device."""
        view = self._allocate(tensor.shape, tensor.stride(), tensor.dtype, tensor.device, name)
        view.copy_(tensor)
        return view

    def copies(self, **tensors: torch.Tensor | None) -> tuple:
        """``copy`` for each keyword (None stays None), named after the keywords, in order."""
        return tuple(None if t is None else self.copy(t, name=n) for n, t in tensors.items())

    # ---- checks ------------------------------------------------------------------------------
    def damage(self) -> list[str]:
        """One line per tensor whose guard bytes changed (empty when all are intact)."""
        found = []
        g = self.guard_bytes
        for t in self._tensors:
            before = int((t.buffer[:g] != POISON).sum())
            after = int((t.buffer[g + t.span:] != POISON).sum())
            inside = int((t.buffer[g:g + t.span][t.gaps] != POISON).sum()) if t.gaps is not None else 0
            if before or after or inside:
                parts = [f"{n} bytes {where}" for n, where in ((before, "before the start"),
                                                               (after, "after the end"),
                                                               (inside, "in the gaps between elements"))
                         if n]
                found.append(f"{t.name}: written outside its elements ({', '.join(parts)})")
        return found

    def check(self) -> None:
        """Raise AssertionError if any guard changed."""
        self.unchecked = False
        damage = self.damage()
        assert not damage, "out-of-bounds writes: " + "; ".join(damage)
