"""DecodePlan (kernels/extension/backend/plan.py): paged decode planned once per step and run per
layer, with the lengths read only on the device. CPU tests run the torch path against the fp64
reference; the gpu test runs our kernel, eagerly and replayed from a CUDA graph while the lengths
change in place between replays."""

from __future__ import annotations

import pytest
import torch

from kernels.extension.backend import plan as plan_module
from kernels.extension.backend.plan import DecodePlan
from kernels.harness import paged_kv_cache, reference_attention

BATCH, HQ, HKV, D, SK, PAGE = 3, 8, 2, 64, 70, 16


def paged_problem(device="cpu", dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(BATCH, 1, HQ, D, generator=g).to(device, dtype)
    k = torch.randn(BATCH, SK, HKV, D, generator=g).to(device, dtype)
    v = torch.randn(BATCH, SK, HKV, D, generator=g).to(device, dtype)
    k_cache, v_cache, table = paged_kv_cache(k, v, PAGE, generator=torch.Generator().manual_seed(seed))
    return q, k, v, k_cache, v_cache, table


def reference(q, k, v, lens):
    """Each sequence attended over its first lens[b] keys, in fp64."""
    return torch.cat([reference_attention(q[b:b + 1], k[b:b + 1, :n], v[b:b + 1, :n], dtype=torch.float64)[0]
                      for b, n in enumerate(lens)])


def test_run_matches_the_reference_and_follows_lengths_changed_in_place():
    q, k, v, k_cache, v_cache, table = paged_problem()
    lens = torch.tensor([70, 33, 1], dtype=torch.int32)
    plan = DecodePlan(k_cache, v_cache, table, lens, heads_q=HQ)
    assert plan.backend == "torch" and plan.q_shape == (BATCH, 1, HQ, D)
    torch.testing.assert_close(plan.run(q).double(), reference(q, k, v, [70, 33, 1]), atol=1e-5, rtol=1e-5)
    lens.copy_(torch.tensor([17, 70, 64], dtype=torch.int32))  # the next step's lengths, same tensor
    torch.testing.assert_close(plan.run(q).double(), reference(q, k, v, [17, 70, 64]), atol=1e-5, rtol=1e-5)


def test_update_hands_over_new_tensors_and_refuses_other_shapes():
    q, k, v, k_cache, v_cache, table = paged_problem()
    plan = DecodePlan(k_cache, v_cache, table, torch.full((BATCH,), SK, dtype=torch.int32), heads_q=HQ)
    new = torch.tensor([5, 70, 40], dtype=torch.int32)  # a step's lengths, a new tensor
    assert plan.update(new) is plan and plan.seqlens_k is new
    torch.testing.assert_close(plan.run(q).double(), reference(q, k, v, [5, 70, 40]), atol=1e-5, rtol=1e-5)
    flipped = table.flip(0).contiguous()  # sequence b now reads sequence (B - 1 - b)'s pages
    plan.update(page_table=flipped)
    torch.testing.assert_close(plan.run(q).double(), reference(q, k.flip(0), v.flip(0), [5, 70, 40]),
                               atol=1e-5, rtol=1e-5)
    for bad, message in ((new.long(), "seqlens_k must be"), (new[:2], "seqlens_k must be"),
                         ([5, 70, 40], "seqlens_k must be .* got list")):
        with pytest.raises(ValueError, match=message):
            plan.update(bad)
    with pytest.raises(ValueError, match="page_table must be"):
        plan.update(torch.tensor([1, 2, 3], dtype=torch.int32), page_table=table[:, :1])
    assert plan.seqlens_k is new and plan.page_table is flipped  # a refused update changes nothing


def test_run_writes_out_and_a_layers_own_cache():
    q, k, v, k_cache, v_cache, table = paged_problem()
    lens = torch.full((BATCH,), SK, dtype=torch.int32)
    plan = DecodePlan(k_cache, v_cache, table, lens, heads_q=HQ)
    k2, v2 = k.flip(1).contiguous(), v.flip(1).contiguous()
    k2_cache, v2_cache, _ = paged_kv_cache(k2, v2, PAGE, generator=torch.Generator().manual_seed(0))
    out = torch.full_like(q, float("nan"))
    assert plan.run(q, k_cache=k2_cache, v_cache=v2_cache, out=out) is out
    torch.testing.assert_close(out.double(), reference(q, k2, v2, [SK] * BATCH), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("change, message", [
    (lambda q: q[:, :, :4], "q must be"),
    (lambda q: q.to(torch.float64), "q must be"),
    (lambda q: torch.cat([q, q], dim=1), "q must be"),
])
def test_run_refuses_a_query_it_was_not_planned_for(change, message):
    q, _, _, k_cache, v_cache, table = paged_problem()
    plan = DecodePlan(k_cache, v_cache, table, torch.full((BATCH,), SK, dtype=torch.int32), heads_q=HQ)
    with pytest.raises(ValueError, match=message):
        plan.run(change(q))
    with pytest.raises(ValueError, match="k_cache must be"):
        plan.run(q, k_cache=k_cache[:-1], v_cache=v_cache[:-1])


@pytest.mark.parametrize("kwargs, error, message", [
    ({"heads_q": 7}, ValueError, "multiple"),
    ({"heads_q": 0}, ValueError, "positive"),
    ({"heads_q": HQ, "causal": "yes"}, TypeError, "causal"),
    ({"heads_q": HQ, "one_launch": 1}, TypeError, "one_launch must be a bool"),
    ({"heads_q": HQ, "max_seqlen_k": 10_000}, ValueError, "max_seqlen_k"),
    ({"heads_q": HQ, "scale": -1.0}, ValueError, "scale"),
])
def test_plan_refuses_bad_arguments(kwargs, error, message):
    _, _, _, k_cache, v_cache, table = paged_problem()
    with pytest.raises(error, match=message):
        DecodePlan(k_cache, v_cache, table, torch.full((BATCH,), SK, dtype=torch.int32), **kwargs)


def test_plan_refuses_lengths_of_another_dtype_or_batch():
    _, _, _, k_cache, v_cache, table = paged_problem()
    with pytest.raises(TypeError, match="seqlens_k must be int32"):
        DecodePlan(k_cache, v_cache, table, torch.full((BATCH,), SK), heads_q=HQ)
    with pytest.raises(ValueError, match="seqlens_k must have batch"):
        DecodePlan(k_cache, v_cache, table, torch.full((BATCH + 1,), SK, dtype=torch.int32), heads_q=HQ)


def test_check_lengths_reads_them_once_and_names_the_limit():
    _, _, _, k_cache, v_cache, table = paged_problem()
    lens = torch.full((BATCH,), SK, dtype=torch.int32)
    plan = DecodePlan(k_cache, v_cache, table, lens, heads_q=HQ, max_seqlen_k=64)
    with pytest.raises(ValueError, match="max_seqlen_k 64"):
        plan.check_lengths()
    lens.fill_(40)
    plan.check_lengths()


def test_the_kernel_path_launches_with_the_planned_splits_and_no_length_check(monkeypatch):
    """On our kernel, run() passes the split count and workspace fixed at planning and
    check_seqlens=False: nothing in it reads the lengths on the host."""
    q, _, _, k_cache, v_cache, table = paged_problem()
    lens = torch.full((BATCH,), SK, dtype=torch.int32)
    plan = DecodePlan(k_cache, v_cache, table, lens, heads_q=HQ)
    plan.backend, plan.num_splits, plan.workspace = "cuda", 3, torch.empty(5)
    plan.split_counters = torch.zeros(4, dtype=torch.int32)
    seen = {}
    monkeypatch.setattr(plan_module.ops, "paged_decode", lambda *a, **kw: seen.update(args=a, **kw) or "out")
    assert plan.run(q) == "out"
    assert seen["num_splits"] == 3 and seen["workspace"] is plan.workspace and seen["check_seqlens"] is False
    assert seen["split_counters"] is plan.split_counters  # one launch: the last split combines
    assert seen["args"][3] is table and seen["args"][4] is lens


@pytest.mark.gpu
@pytest.mark.parametrize("one_launch", [False, True], ids=["combine-kernel", "one-launch"])
def test_kernel_plan_under_graph_replay_follows_the_lengths(one_launch):
    """Our paged decode through a plan, captured once and replayed while the lengths change in
    place: each replay matches the reference at that step's lengths."""
    from kernels.extension import loader

    if not loader.available("attention"):
        pytest.skip("the attention module is not built: python -m tools.build_ext")
    q, k, v, k_cache, v_cache, table = paged_problem("cuda", torch.bfloat16)
    lens = torch.tensor([70, 33, 1], dtype=torch.int32, device="cuda")
    plan = DecodePlan(k_cache, v_cache, table, lens, heads_q=HQ, one_launch=one_launch)
    assert plan.backend == "cuda"
    out = torch.full_like(q, float("nan"))
    plan.run(q, out=out)  # compile / warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan.run(q, out=out)
    for step in ([70, 33, 1], [12, 70, 48], [64, 65, 66]):
        lens.copy_(torch.tensor(step, dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out.double(), reference(q, k, v, step), atol=2e-2, rtol=2e-2)


def test_the_backend_is_chosen_as_attention_chooses(monkeypatch):
    """use_backend, the measured order and capability, among the backends a plan runs: where
    our kernel can run the call it gets the planned split count; use_backend('fa4') is refused."""
    import importlib

    from kernels.extension.backend import use_backend

    backend = importlib.import_module("kernels.extension.backend.attention")  # the module, not the function

    _, _, _, k_cache, v_cache, table = paged_problem()
    lens = torch.full((BATCH,), SK, dtype=torch.int32)
    with use_backend("fa4"), pytest.raises(RuntimeError, match="use_backend"):
        DecodePlan(k_cache, v_cache, table, lens, heads_q=HQ)
    monkeypatch.setitem(backend._UNSUPPORTED, "cuda", lambda call: None)  # as on a Hopper host
    monkeypatch.setattr(plan_module.ops, "decode_num_splits", lambda *shape: 4)
    monkeypatch.setattr(plan_module.ops, "decode_workspace_size", lambda *shape: 10)
    monkeypatch.setattr(plan_module.ops, "decode_counter_count", lambda *shape: 3)
    plan = DecodePlan(k_cache, v_cache, table, lens, heads_q=HQ)
    assert (plan.backend, plan.num_splits, plan.workspace.numel()) == ("cuda", 4, 10)
    assert plan.split_counters is None  # a combine kernel after the split kernel
    plan = DecodePlan(k_cache, v_cache, table, lens, heads_q=HQ, one_launch=True)
    assert plan.split_counters.dtype == torch.int32 and plan.split_counters.tolist() == [0, 0, 0]
    monkeypatch.setattr(plan_module, "backend_order", lambda call: ("fa4", "torch", "cuda"))
    assert DecodePlan(k_cache, v_cache, table, lens, heads_q=HQ).backend == "torch"


# ---- PrefillPlan: packed ragged queries on the paged cache ---------------------------------------

def test_prefill_plan_runs_as_attention_does():
    """Planned once, run per layer: the same result as attention() on the same call, for the
    planned cache and a layer's own; a query of another shape is refused."""
    from kernels.extension.backend import PrefillPlan, attention

    _, k, v, k_cache, v_cache, table = paged_problem()
    lens = torch.tensor([70, 33, 9], dtype=torch.int32)
    q_lens = [5, 33, 2]
    cu = torch.tensor([0, 5, 38, 40], dtype=torch.int32)
    q = torch.randn(sum(q_lens), HQ, D, generator=torch.Generator().manual_seed(5))
    plan = PrefillPlan(k_cache, v_cache, table, lens, cu, heads_q=HQ, total_q=q.shape[0], scale=0.2)
    assert plan.backend == "torch" and "total_q=40" in repr(plan)
    expected = attention(q, k_cache, v_cache, causal=True, scale=0.2, page_table=table, seqlens_k=lens,
                         cu_seqlens_q=cu)
    torch.testing.assert_close(plan.run(q), expected)
    k2_cache, v2_cache = k_cache.flip(0).contiguous(), v_cache.flip(0).contiguous()  # another layer
    out = torch.full_like(q, float("nan"))
    assert plan.run(q, k_cache=k2_cache, v_cache=v2_cache, out=out) is out
    torch.testing.assert_close(out, attention(q, k2_cache, v2_cache, causal=True, scale=0.2, page_table=table,
                                              seqlens_k=lens, cu_seqlens_q=cu))
    with pytest.raises(ValueError, match="q must be"):
        plan.run(q[:-1])
    with pytest.raises(ValueError, match="k_cache must be"):
        plan.run(q, k_cache=k2_cache[:, :8])


@pytest.mark.parametrize("kwargs,error,message", [
    ({"heads_q": 0}, ValueError, "heads_q must be an int >= 1"),
    ({"total_q": -1}, ValueError, "total_q must be an int >= 0"),
    ({"causal": 1}, TypeError, "causal must be a bool"),
    ({"heads_q": 3}, ValueError, "multiple of heads_kv"),
])
def test_prefill_plan_refuses_bad_arguments(kwargs, error, message):
    from kernels.extension.backend import PrefillPlan

    _, _, _, k_cache, v_cache, table = paged_problem()
    lens = torch.full((BATCH,), SK, dtype=torch.int32)
    cu = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    args = {"heads_q": HQ, "total_q": 3, **kwargs}
    with pytest.raises(error, match=message):
        PrefillPlan(k_cache, v_cache, table, lens, cu, **args)
