"""Context parallelism (kernels/extension/backend/context_parallel.py) on CPUs: ring and
all-gather attention over gloo groups of 2 and 4 spawned processes, on the torch backend of
attention(), against attention() on the whole sequence in one process; the layouts and the
LSE merge without processes; the context_parallel bench suite end to end on gloo.

Spawning costs ~2 s of imports per process, so each world size runs every case in one job
(`cases_on_every_rank`) and the tests read its results.
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest
import torch

from kernels.extension.backend.context_parallel import (
    allgather_kv_attention,
    gather_sequence,
    merge_partial,
    ring_attention,
    zigzag_shard,
    zigzag_unshard,
)
from kernels.harness.distributed import run_distributed

ROOT = Path(__file__).resolve().parent.parent
FP32_TOL = 2e-5   # absolute, on outputs of magnitude ~1 and on LSEs
BF16_TOL = 1e-2   # relative Frobenius error (bf16 outputs on both sides)
CHUNK = 12        # tokens per zig-zag chunk: the sequence is 2W chunks, not a tile multiple


# ---- layouts and the merge, in one process ---------------------------------------------------------

@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_zigzag_shard_and_unshard_round_trip(world):
    x = torch.randn(2, 2 * world * 5, 3, 4)
    shards = [zigzag_shard(x, r, world) for r in range(world)]
    chunks = x.chunk(2 * world, dim=1)
    for r, shard in enumerate(shards):
        assert torch.equal(shard, torch.cat([chunks[r], chunks[2 * world - 1 - r]], dim=1))
    assert torch.equal(zigzag_unshard(shards), x)
    lse = torch.randn(2, 3, 2 * world * 5)  # [B, H, S]: the sequence in dim 2
    assert torch.equal(zigzag_unshard([zigzag_shard(lse, r, world, dim=2) for r in range(world)], dim=2), lse)


def test_zigzag_shards_position_ids():
    """The docs' recipe: position ids sharded like the tokens, [B, S] as they are, 1-D with dim=0."""
    ids = torch.arange(16)
    assert zigzag_shard(ids, 1, 2, dim=0).tolist() == [4, 5, 6, 7, 8, 9, 10, 11]
    assert torch.equal(zigzag_shard(ids.expand(3, 16), 1, 2), zigzag_shard(ids, 1, 2, dim=0).expand(3, 8))
    with pytest.raises(ValueError, match="dim 1 is not a dimension of a 1-D tensor"):
        zigzag_shard(ids, 0, 2)


def test_zigzag_bad_inputs():
    x = torch.randn(1, 10, 2, 4)
    with pytest.raises(ValueError, match="multiple of 2 x world_size = 4"):
        zigzag_shard(x, 0, 2)  # 10 tokens in 4 chunks
    with pytest.raises(ValueError, match="rank 2 is not in"):
        zigzag_shard(torch.randn(1, 8, 2, 4), 2, 2)
    with pytest.raises(ValueError, match="is odd"):
        zigzag_unshard([torch.randn(1, 3, 2, 4)] * 2)
    with pytest.raises(ValueError, match="one shape"):
        zigzag_unshard([torch.randn(1, 4, 2, 4), torch.randn(1, 6, 2, 4)])


def _softmax_parts(scores, values):
    """out [B, S, H, D] and lse [B, H, S] of softmax(scores [B, H, S, K]) @ values [B, H, K, D]."""
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.softmax(scores, dim=-1).nan_to_num(0.0) @ values
    return out.transpose(1, 2), lse


def test_merge_partial_equals_attention_over_the_union_of_keys():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 5, 16, generator=g, dtype=torch.float64) * 4
    values = torch.randn(2, 3, 16, 8, generator=g, dtype=torch.float64)
    whole, whole_lse = _softmax_parts(scores, values)
    out, lse = (t.float().contiguous() for t in _softmax_parts(scores[..., :6], values[:, :, :6]))
    for lo, hi in ((6, 11), (11, 16)):
        part, part_lse = _softmax_parts(scores[..., lo:hi], values[:, :, lo:hi])
        merge_partial(out, lse, part.to(torch.bfloat16) if lo == 11 else part.float(), part_lse.float())
    assert (out.double() - whole).abs().max() < 2e-2  # one part was rounded to bf16
    assert (lse.double() - whole_lse).abs().max() < 1e-5


def test_merge_partial_rows_that_saw_no_key():
    """-inf LSE: a row empty in the accumulator takes the part, one empty in the part keeps the
    accumulator, one empty in both stays zero with -inf; never NaN."""
    inf = float("-inf")
    out = torch.tensor([[[[0.0, 0.0]], [[1.0, 2.0]], [[0.0, 0.0]], [[3.0, 3.0]]]])  # [1, 4, 1, 2]
    lse = torch.tensor([[[inf, 0.5, inf, 0.0]]])                                       # [1, 1, 4]
    part = torch.tensor([[[[5.0, 6.0]], [[0.0, 0.0]], [[0.0, 0.0]], [[1.0, 1.0]]]])
    part_lse = torch.tensor([[[1.0, inf, inf, 0.0]]])
    merge_partial(out, lse, part, part_lse)
    assert not out.isnan().any() and not lse.isnan().any()
    assert out[0, :, 0].tolist() == [[5.0, 6.0], [1.0, 2.0], [0.0, 0.0], [2.0, 2.0]]
    assert lse[0, 0, :3].tolist() == [1.0, 0.5, inf]
    assert lse[0, 0, 3].item() == pytest.approx(math.log(2.0))


def test_merge_partial_checks_its_arguments():
    out, lse = torch.zeros(1, 4, 2, 8), torch.zeros(1, 2, 4)
    with pytest.raises(ValueError, match="float32"):
        merge_partial(out.double(), lse, out, lse)
    with pytest.raises(ValueError, match=r"\[B, H, S\]"):
        merge_partial(out, lse.transpose(1, 2), out, lse)


def test_ring_attention_checks_before_communicating():
    """Local mistakes raise before any collective, with or without a process group."""
    q, k = torch.randn(1, 6, 4, 64), torch.randn(1, 6, 2, 64)
    with pytest.raises(ValueError, match="local seqlen must be even, got 3"):
        ring_attention(q[:, :3], k[:, :3], k[:, :3], causal=True)
    with pytest.raises(ValueError, match="same tokens"):
        allgather_kv_attention(q, k[:, :4], k[:, :4])
    with pytest.raises(ValueError, match="multiple of heads_kv"):
        ring_attention(q, torch.randn(1, 6, 3, 64), torch.randn(1, 6, 3, 64))
    with pytest.raises(TypeError, match="ring_attention: causal must be a bool, got 'yes'"):
        ring_attention(q, k, k, causal="yes")
    with pytest.raises(TypeError, match="zigzag must be a bool"):
        allgather_kv_attention(q, k, k, zigzag=None)
    with pytest.raises(RuntimeError, match="forward-only"):
        ring_attention(q.requires_grad_(), k, k)
    with pytest.raises(RuntimeError, match="init_process_group"):
        ring_attention(q.detach(), k, k, causal=True)


# ---- gloo groups of 2 and 4 processes ---------------------------------------------------------------

def _inputs(seed, world, heads_q, heads_kv, dtype, batch=2, head_dim=64):
    g = torch.Generator().manual_seed(seed)
    seqlen = 2 * world * CHUNK
    q = torch.randn(batch, seqlen, heads_q, head_dim, generator=g).to(dtype)
    k = torch.randn(batch, seqlen, heads_kv, head_dim, generator=g).to(dtype)
    v = torch.randn(batch, seqlen, heads_kv, head_dim, generator=g).to(dtype)
    return q, k, v


# (name, dtype, causal, zigzag layout, heads_q, heads_kv, scale)
CASES = [
    ("causal-zigzag-gqa-fp32", torch.float32, True, True, 4, 2, None),
    ("causal-contiguous-gqa-fp32", torch.float32, True, False, 4, 2, None),
    ("causal-zigzag-scale-fp32", torch.float32, True, True, 4, 2, 0.3),
    ("full-zigzag-mha-fp32", torch.float32, False, True, 4, 4, None),
    ("full-contiguous-gqa-fp32", torch.float32, False, False, 4, 2, None),
    ("causal-zigzag-gqa-bf16", torch.bfloat16, True, True, 4, 2, None),
]


def _errors(out, lse, ref_out, ref_lse):
    """(output error, LSE error): max abs in fp32, relative Frobenius for bf16 outputs."""
    from kernels.harness.checks import rel_err

    out_err = (rel_err(out, ref_out) if out.dtype == torch.bfloat16
               else (out - ref_out).abs().max().item())
    return out_err, (lse - ref_lse).abs().max().item()


def cases_on_every_rank(rank, world):
    """Every case on this rank (inside a gloo group): {check: (output error, LSE error)} and
    {check: error message} for the inputs that must be refused."""
    from kernels.extension.backend.attention import attention, use_backend

    errors, refusals = {}, {}
    with use_backend("torch"):
        for index, (name, dtype, causal, zigzag, heads_q, heads_kv, scale) in enumerate(CASES):
            q, k, v = _inputs(index, world, heads_q, heads_kv, dtype)
            ref_lse = torch.empty(q.shape[0], heads_q, q.shape[1])
            ref = attention(q, k, v, causal=causal, scale=scale, lse=ref_lse)

            def shard(t, dim=1, zigzag=zigzag):
                return zigzag_shard(t, rank, world, dim) if zigzag else t.chunk(world, dim)[rank]

            for method in (ring_attention, allgather_kv_attention):
                out, lse = method(shard(q), shard(k), shard(v), causal=causal, scale=scale, zigzag=zigzag,
                                  return_lse=True)
                assert out.dtype == dtype and out.shape == shard(q).shape
                errors[f"{name} {method.__name__}"] = _errors(out, lse, shard(ref), shard(ref_lse, 2))
                full = gather_sequence(out, zigzag=zigzag)
                full_lse = gather_sequence(lse, zigzag=zigzag, dim=2)
                errors[f"{name} {method.__name__} gathered"] = _errors(full, full_lse, ref, ref_lse)

        # A sub-group (ranks 1 and 3 of 4): peers are named by global rank.
        if world == 4:
            import torch.distributed as dist

            pairs = [dist.new_group([0, 2]), dist.new_group([1, 3])]
            group = pairs[rank % 2]
            q, k, v = _inputs(99, 2, 4, 2, torch.float32)
            ref_lse = torch.empty(q.shape[0], 4, q.shape[1])
            ref = attention(q, k, v, causal=True, lse=ref_lse)
            sub = rank // 2
            out, lse = ring_attention(*(zigzag_shard(t, sub, 2) for t in (q, k, v)), causal=True, group=group,
                                      return_lse=True)
            errors["causal-zigzag sub-group ring_attention"] = _errors(
                out, lse, zigzag_shard(ref, sub, 2), zigzag_shard(ref_lse, sub, 2, dim=2))

        # Shards that differ across ranks are refused on every rank, before the exchange.
        q, k, v = _inputs(7, world, 4, 2, torch.float32)
        local = q.shape[1] // world - (2 if rank == world - 1 else 0)
        for method in (ring_attention, allgather_kv_attention):
            try:
                method(q[:, :local], k[:, :local], v[:, :local], causal=True)
                refusals[method.__name__] = "no error"
            except ValueError as exc:
                refusals[method.__name__] = str(exc)
    return errors, refusals


@pytest.mark.parametrize("world", [2, 4])
def test_sharded_attention_matches_one_process(world):
    results = run_distributed(cases_on_every_rank, world, backend="gloo", threads=1, timeout_s=120)
    bad = []
    for rank, (errors, refusals) in enumerate(results):
        assert len(errors) == 4 * len(CASES) + (world == 4), sorted(errors)
        for check, (out_err, lse_err) in errors.items():
            out_tol = BF16_TOL if "bf16" in check else FP32_TOL
            if not (out_err <= out_tol and lse_err <= FP32_TOL):
                bad.append(f"rank {rank}, {check}: output error {out_err:.3g} (tol {out_tol}), "
                           f"LSE error {lse_err:.3g}")
        for method, message in refusals.items():
            expected = r"every rank must pass shards of one shape and dtype, got rank 0: q \[2, \d+, 4, 64\]"
            if not re.search(expected, message):
                bad.append(f"rank {rank}, {method} on mismatched shards: {message}")
    assert not bad, "\n".join(bad)


# ---- the bench suite, end to end on gloo -------------------------------------------------------------

def test_bench_suite_on_cpu_writes_valid_rows():
    from tools import report
    from tools.suites import context_parallel as suite

    setup = suite.Setup(seqlens=(64,), world_sizes=(1, 2), heads_q=2, heads_kv=2, head_dim=64, device="cpu",
                        warmup=1, rep_ms=1.0, min_reps=2, max_reps=2, timeout_s=120)
    rows = suite.measure(setup)
    meta = {"suite": "context_parallel", "gpu": "cpu (test)", "driver": "-", "cuda": None,
            "torch": torch.__version__, "cutlass_dsl": None, "commit": "0" * 40, "date": "2026-01-01",
            "ceilings": {"copy_tbps": 1.0}, "gpus": 2}
    report.validate({"meta": meta, "rows": rows})
    by_kernel = {(r["kernel"], r["problem"]["world_size"]): r for r in rows}
    assert set(by_kernel) == {("attention", 1)} | {(k, 2) for k in suite.KERNELS}
    for row in rows:
        assert row["status"] == "ok", row
        assert row["rel_err"] <= suite.TOL and row["ms"]["reps"] == 2 and row["tflops"] > 0
        assert row["scaling_efficiency"] == pytest.approx(row["tflops"] / by_kernel["attention", 1]["tflops"])
    headers, table = report.scaling_table({"meta": meta, "rows": rows}, "ring-zigzag")
    assert headers == ["seqlen", "1 GPU (attention)", "2 GPUs"]
    assert table[0][0] == "64" and re.fullmatch(r"[\d.]+ \(\d+%\)", table[0][2])


def test_results_schema_of_the_suite():
    from tools import report

    row = {"kernel": "ring-zigzag", "problem": {"seqlen_q": 64, "world_size": 2}, "ms": {"median": 1.0},
           "tflops": 1.0, "gbps": None, "rel_err": 0.0, "status": "ok", "scaling_efficiency": 0.9}
    meta = {"suite": "context_parallel", "gpu": "x", "driver": "-", "cuda": "-", "torch": "-",
            "cutlass_dsl": None, "commit": "c", "date": "d", "ceilings": {"copy_tbps": 1.0}, "gpus": 2}
    report.validate({"meta": meta, "rows": [row]})
    for breakage, message in [
        (lambda d: d["meta"].pop("gpus"), "lacks gpus"),
        (lambda d: d["rows"][0].pop("scaling_efficiency"), "lacks scaling_efficiency"),
        (lambda d: d["rows"][0]["problem"].pop("world_size"), "lacks problem world_size"),
        (lambda d: d["rows"][0]["problem"].update(world_size=4), "world_size 4, not in 1..2"),
        (lambda d: d["rows"][0].update(scaling_efficiency=-1.0), "scaling_efficiency -1.0"),
        (lambda d: d["rows"][0].update(status="wrong: x"), "scaling_efficiency 0.9"),
    ]:
        import copy

        doc = copy.deepcopy({"meta": meta, "rows": [row]})
        breakage(doc)
        with pytest.raises(report.ResultsError, match=re.escape(message)):
            report.validate(doc)


def test_bench_refuses_too_few_gpus(monkeypatch, capsys):
    from tools import bench
    from tools.suites import attention, context_parallel

    assert bench.gpus_for(context_parallel, None, 8) == 8
    assert bench.gpus_for(context_parallel, None, 6) == 4
    assert bench.gpus_for(context_parallel, 2, 8) == 2
    assert bench.gpus_for(attention, None, 8) == 1
    for suite, asked, visible, message in [
        (context_parallel, 8, 4, "asks for 8 GPUs and 4 are visible"),
        (context_parallel, None, 1, "runs on 2 / 4 / 8 GPUs and 1 is visible"),
        (context_parallel, 3, 8, "not --gpus 3"),
        (attention, 2, 8, "--gpus is for multi-GPU suites"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            bench.gpus_for(suite, asked, visible)
    assert bench.results_folder("NVIDIA H200", 4, True) == "h200x4"
    assert bench.results_folder("NVIDIA H200", 1, False) == "h200"
    # The command itself stops before measuring anything (ceilings included), naming the counts.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert bench.main(["--suite", "context_parallel", "--gpus", "4"]) == 2
    assert "asks for 4 GPUs and 2 are visible" in capsys.readouterr().err


def test_docs_page_examples_import_what_they_name():
    import importlib

    text = (ROOT / "docs" / "context_parallel.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks
    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"from {node.module} import {alias.name}"
