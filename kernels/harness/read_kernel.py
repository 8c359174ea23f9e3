"""The Triton kernel behind :func:`kernels.harness.ceilings.streaming_read`: each CTA sums its
``BLOCK * ITERS`` elements (bf16, read once) into one float. Imported only where it runs (Triton
comes with torch's CUDA builds, not its CPU ones)."""

import triton
import triton.language as tl


@triton.jit
def read_kernel(x_ptr, part_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in tl.static_range(ITERS):
        offs = pid * BLOCK * ITERS + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(part_ptr + pid, tl.sum(acc))
