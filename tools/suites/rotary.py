"""The rotary suite: the CUDA kernel (out of place, in place) against the torch paths on the
same data, q and k rotated together.

Bytes = the bytes of q and k each path actually moves, read once and written once (out of place:
all of them, the dims past rotary_dim copied through; in place: only the rotated dims, the
rest is never touched) + the cos/sin rows read once. Every row is checked against a float32
reference first (rel_err = relative Frobenius error, max_abs_err beside it).
"""

from __future__ import annotations

import torch

# batch, seqlen, heads_q, heads_k, head_dim, rotary_dim, interleaved
SHAPES = [
    (8, 4096, 32, 32, 128, 128, False),  # the target shape
    (8, 4096, 32, 32, 128, 128, True),
    (8, 4096, 32, 8, 128, 128, False),   # GQA
    (8, 4096, 32, 32, 128, 64, False),   # partial rotary
    (64, 1, 32, 8, 128, 128, False),     # decode step
]


def _problem(shape) -> dict:
    b, s, hq, hk, d, r, inter = shape
    return {"batch": b, "seqlen": s, "heads_q": hq, "heads_k": hk, "head_dim": d,
            "rotary_dim": r, "layout": "interleaved" if inter else "half_split", "dtype": "bf16"}


def _bytes(q, k, cos, rotary_dim: int | None = None) -> int:
    """Bytes moved; ``rotary_dim``: only the first ``rotary_dim`` dims of each head of q and k
    are read and written (in place), else every dim."""
    rows_read = min(cos.shape[0], q.shape[0] * q.shape[1])
    qk_bytes = (q.numel() + k.numel()) * q.element_size()
    if rotary_dim is not None:
        qk_bytes = qk_bytes * rotary_dim // q.shape[-1]
    return 2 * qk_bytes + 2 * rows_read * cos.shape[1] * 4


def complex_reference(q, k, freqs_cis):
    """The usual torch rotary (Llama): complex multiply of interleaved pairs, fp32 math."""
    def rot(x):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs_cis).flatten(3).type_as(x)
    return rot(q), rot(k)


def run(ctx) -> list[dict]:
    rows = []
    task = ctx.progress.add_task("rotary", total=len(SHAPES))
    for shape in SHAPES:
        ctx.progress.update(task, description=f"rotary {_problem(shape)}")
        rows += _measure_shape(ctx, shape)
        torch.cuda.empty_cache()  # the shape's tensors went with _measure_shape's frame
        ctx.progress.advance(task)
    return rows


def _measure_shape(ctx, shape) -> list[dict]:
    from kernels.extension.backend.rotary import apply_rotary_emb, apply_rotary_torch, rotary_tables
    from kernels.extension.ops import rotary as rotary_ops
    from kernels.harness.timing import rotation_count

    b, s, hq, hk, d, r, inter = shape
    problem = _problem(shape)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, s, hq, d, device="cuda", generator=gen).to(torch.bfloat16)
    k = torch.randn(b, s, hk, d, device="cuda", generator=gen).to(torch.bfloat16)
    cos, sin = rotary_tables(s, r, device="cuda")
    all_bytes, inplace_bytes = _bytes(q, k, cos), _bytes(q, k, cos, rotary_dim=r)
    ref_q, ref_k = apply_rotary_torch(q.float(), k.float(), cos, sin, interleaved=inter)

    def check(out_q, out_k):
        num = (out_q.float() - ref_q).square().sum() + (out_k.float() - ref_k).square().sum()
        den = ref_q.square().sum() + ref_k.square().sum()
        rel = float((num / den).sqrt())
        max_abs = float(max((out_q.float() - ref_q).abs().max(), (out_k.float() - ref_k).abs().max()))
        return rel, max_abs

    # Copies of q and k timed in turn where one call's bytes fit in L2 (the decode step): each
    # comes round again only after twice the L2 has been read (time_cuda's arg_sets).
    sets = [(q, k)] + [(q.clone(), k.clone()) for _ in range(rotation_count(all_bytes) - 1)]
    rows, candidates = [], []
    if rotary_ops.is_available():
        candidates.append(("rotary", lambda q, k: apply_rotary_emb(q, k, cos, sin, interleaved=inter,
                                                                   backend="kernel"), sets))
        sets_ip = [(q.clone(), k.clone()) for _ in sets]
        candidates.append(("rotary-inplace", lambda q, k: apply_rotary_emb(
            q, k, cos, sin, interleaved=inter, inplace=True, backend="kernel"), sets_ip))
    else:
        rows.append({"kernel": "rotary", "problem": problem, "ms": None, "tflops": None,
                     "gbps": None, "rel_err": None,
                     "status": "unsupported: rotary module not built"})
    candidates.append(("torch-rotary", lambda q, k: apply_rotary_torch(q, k, cos, sin, interleaved=inter),
                       sets))
    if inter and r == d:
        freqs_cis = torch.complex(cos, sin).view(1, s, 1, -1)
        candidates.append(("torch-complex", lambda q, k: complex_reference(q, k, freqs_cis), sets))

    for name, fn, arg_sets in candidates:
        if name == "rotary-inplace":  # checked on a fresh copy; timed rotating its own copies
            arg_sets[0][0].copy_(q)
            arg_sets[0][1].copy_(k)
        out_q, out_k = fn(*arg_sets[0])
        torch.cuda.synchronize()
        rel, max_abs = check(out_q, out_k)
        status = "ok" if rel <= 1e-2 and max_abs == max_abs else f"wrong: rel_err {rel:.3g}"
        del out_q, out_k
        ms = ctx.time(fn, arg_sets) if status == "ok" else None
        nbytes = inplace_bytes if name == "rotary-inplace" else all_bytes
        rows.append({"kernel": name, "problem": problem, "ms": ms, "tflops": None,
                     "gbps": nbytes / (ms["median"] * 1e-3) / 1e9 if ms else None,
                     "rel_err": rel, "max_abs_err": max_abs, "status": status})
    return rows
