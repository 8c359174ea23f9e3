"""Context parallelism on GPUs, NCCL: ring and all-gather attention on 1 GPU (world size 1:
the NCCL group, the default backend, the LSE path) and, where that many GPUs are visible, on
2, 4 and 8, against the fp32 reference on the whole sequence (kernels.harness, not our
kernels). bf16, batch 2, causal zig-zag and contiguous, and not causal; GQA 16/4 heads,
head_dim 128, seqlen 4096."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

SEQLEN, HEADS_Q, HEADS_KV, HEAD_DIM = 4096, 16, 4, 128
TOL = 1e-2        # relative Frobenius error of bf16 outputs (both sides rounded to bf16)
LSE_TOL = 1e-3    # absolute, fp32 LSEs of the same scores summed in another order


def checks_on_every_rank(rank, world, device_type="cuda", seqlen=SEQLEN):
    """{check: (output rel_err, LSE max abs error)} on this rank, and the backend that ran
    (device_type "cpu" runs the same checks on gloo, for trying the test without GPUs)."""
    import torch

    from kernels.extension.backend.attention import select_backend
    from kernels.extension.backend.context_parallel import (
        allgather_kv_attention,
        gather_sequence,
        ring_attention,
        zigzag_shard,
    )
    from kernels.harness.checks import rel_err
    from kernels.harness.reference import reference_attention

    device = torch.device("cuda", rank) if device_type == "cuda" else torch.device("cpu")
    g = torch.Generator(device=device).manual_seed(0)  # the same inputs on every rank

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=device).to(torch.bfloat16)

    q = randn(2, seqlen, HEADS_Q, HEAD_DIM)
    k, v = randn(2, seqlen, HEADS_KV, HEAD_DIM), randn(2, seqlen, HEADS_KV, HEAD_DIM)
    errors = {}
    for causal, zigzag in ((True, True), (True, False), (False, True)):
        ref, ref_lse = reference_attention(q, k, v, causal=causal)

        def shard(t, dim=1, zigzag=zigzag):
            return zigzag_shard(t, rank, world, dim) if zigzag else t.chunk(world, dim)[rank].contiguous()

        for method in (ring_attention, allgather_kv_attention):
            out, lse = method(shard(q), shard(k), shard(v), causal=causal, zigzag=zigzag, return_lse=True)
            full = gather_sequence(out, zigzag=zigzag)
            errors[f"{method.__name__} causal={causal} zigzag={zigzag}"] = (
                rel_err(full, ref), (lse - shard(ref_lse, 2)).abs().max().item())
    if device.type == "cuda":
        torch.cuda.synchronize()
    return errors, select_backend(shard(q), shard(k), shard(v))


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_sharded_attention_on_gpus_matches_one_gpu(world):
    import torch
    import torch.distributed as dist

    from kernels.harness.distributed import run_distributed

    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs, {torch.cuda.device_count()} visible")
    if not dist.is_nccl_available():
        pytest.skip("torch is built without NCCL")
    from kernels.extension.backend.attention import select_backend
    from kernels.extension.ops import attention as ops

    results = run_distributed(checks_on_every_rank, world, backend="nccl", timeout_s=240)
    # every rank's shards went where attention() routes such a call here: our kernel or FA4
    # where the extension is built, never a silent fallback to torch
    shard = torch.empty(2, SEQLEN // world, HEADS_Q, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    kv = torch.empty(2, SEQLEN // world, HEADS_KV, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    expected = select_backend(shard, kv, kv)
    assert [backend for _, backend in results] == [expected] * world
    assert expected != "torch" or not ops.available(), "the extension is built, yet the shards ran on torch"
    bad = [f"rank {rank} ({backend} backend), {check}: output rel_err {out_err:.3g}, LSE error {lse_err:.3g}"
           for rank, (errors, backend) in enumerate(results)
           for check, (out_err, lse_err) in errors.items() if not (out_err <= TOL and lse_err <= LSE_TOL)]
    assert not bad, "\n".join(bad)
