"""CPU tests of the attention Python layer: validation, backend policy, the torch fallback
on contiguous, paged and ragged inputs (against the fp32 reference, tensors in guard regions)."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from autograd_reference import reference_fp64  # tests/autograd_reference.py
from support import ROOT

from kernels.extension import loader
from kernels.extension.backend import ENV_VAR, attention, select_backend, use_backend
from kernels.extension.ops import attention as ops
from kernels.harness import AttentionProblem, paged_kv_cache, reference_attention, rel_err, verify_attention


def qkv(b, sq, sk, hq, hkv, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, sq, hq, d, generator=g), torch.randn(b, sk, hkv, d, generator=g),
            torch.randn(b, sk, hkv, d, generator=g))


def test_cpu_inputs_fall_back_to_torch():
    q, k, v = qkv(2, 5, 9, 4, 2, 16)
    assert select_backend(q, k, v) == "torch"
    out = attention(q, k, v, causal=True)
    assert rel_err(out, reference_attention(q, k, v, causal=True)[0]) < 1e-5


def test_strict_backend_raises_instead_of_switching():
    q, k, v = qkv(1, 2, 3, 2, 2, 16)
    with use_backend("cuda"), pytest.raises(RuntimeError, match="cuda.*cannot run"):
        attention(q, k, v)
    with pytest.raises(ValueError, match="unknown attention backend"):
        with use_backend("triton"):
            pass


def test_env_override_validated(monkeypatch):
    q, k, v = qkv(1, 2, 3, 2, 2, 16)
    monkeypatch.setenv(ENV_VAR, "nope")
    with pytest.raises(ValueError, match=ENV_VAR):
        attention(q, k, v)
    monkeypatch.setenv(ENV_VAR, "torch")
    assert select_backend(q, k, v) == "torch"


def test_ops_raise_runtime_error_when_not_built(monkeypatch, tmp_path):
    monkeypatch.setattr(loader, "LIB_DIR", tmp_path)
    loader.load.cache_clear()
    q, k, v = qkv(1, 2, 3, 2, 2, 64)
    with pytest.raises(RuntimeError, match="tools.build_ext"):
        ops.prefill(q, k, v)
    loader.load.cache_clear()


def test_a_module_once_found_is_not_looked_for_again(monkeypatch, tmp_path):
    """attention() asks whether the module is built on every call: no file-system lookup
    once it was found; until then, every call looks (a build during the process is seen)."""
    monkeypatch.setattr(loader, "LIB_DIR", tmp_path)
    assert not loader.available("attention")
    (tmp_path / "attention.so").touch()
    assert loader.available("attention")
    monkeypatch.setattr(loader.os.path, "exists", lambda path: pytest.fail("looked again"))
    assert loader.available("attention")


@pytest.mark.parametrize("problem", [
    AttentionProblem(2, 5, 9, 4, 2, 64, causal=True),
    AttentionProblem(1, 9, 5, 2, 2, 64, causal=True),   # rows 0-3 see no key: zeros, LSE -inf
    AttentionProblem(3, 17, 17, 8, 1, 128),
    AttentionProblem(1, 1, 40, 4, 4, 256, causal=True, scale=0.3),
], ids=lambda p: p.label().replace(" ", "-"))
def test_torch_fallback_in_guard_regions(problem):
    """The fallback as the GPU kernels are checked: guarded, poisoned outputs, repeated run."""
    def run(q, k, v, out, lse):
        with use_backend("torch"):
            attention(q, k, v, causal=problem.causal, scale=problem.scale, out=out, lse=lse)

    result = verify_attention(run, problem, device="cpu")
    assert result, result.reason


@pytest.mark.parametrize("causal", [False, True])
def test_torch_fallback_masks_and_empty_rows(causal):
    q, k, v = qkv(2, 6, 10, 4, 1, 16, seed=1)
    mask = torch.rand(2, 6, 10, generator=torch.Generator().manual_seed(2)) > 0.4
    mask[1, 2] = False
    lse = torch.empty(2, 4, 6)
    out = attention(q, k, v, causal=causal, mask=mask, lse=lse)
    ref, ref_lse = reference_attention(q, k, v, causal=causal, mask=mask)
    assert rel_err(out, ref) < 1e-5 and not torch.isnan(out).any()
    assert torch.all(out[1, 2] == 0)
    torch.testing.assert_close(lse, ref_lse)


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_torch_fallback_paged_decode_and_ragged_prefill(page_size, guards):
    q, k, v = qkv(3, 1, 40, 8, 2, 16, seed=3)
    lens = torch.tensor([40, 7, 1], dtype=torch.int32)
    k_cache, v_cache, table = paged_kv_cache(k, v, page_size, generator=torch.Generator().manual_seed(0))
    q, k_cache, v_cache, table, lens = guards.copies(q=q, k_cache=k_cache, v_cache=v_cache, page_table=table,
                                                     seqlens_k=lens)
    out = attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens, causal=True)
    assert rel_err(out, reference_attention(q, k, v, causal=True, key_lens=lens)[0]) < 1e-5

    q_lens = [5, 1, 3]
    qp = torch.randn(sum(q_lens), 8, 16)
    cu = torch.tensor([0, 5, 6, 9], dtype=torch.int32)
    out = attention(qp, k_cache, v_cache, page_table=table, seqlens_k=lens, cu_seqlens_q=cu, causal=True)
    for b, (lo, hi) in enumerate(zip(cu.tolist()[:-1], cu.tolist()[1:])):
        ref = reference_attention(qp[lo:hi].unsqueeze(0), k[b:b + 1], v[b:b + 1], causal=True,
                                  key_lens=lens[b:b + 1])[0]
        assert rel_err(out[lo:hi], ref[0]) < 1e-5


def test_validation_errors():
    q, k, v = qkv(1, 2, 8, 4, 2, 16)
    with pytest.raises(TypeError, match="bfloat16, float16 or float32"):
        attention(q.int(), k.int(), v.int())
    with pytest.raises(ValueError, match="multiple of heads_kv"):
        attention(q[:, :, :3], k, v)
    with pytest.raises(ValueError, match="head_dim"):
        attention(q, k[..., :8], v[..., :8])
    with pytest.raises(ValueError, match="scale"):
        attention(q, k, v, scale=float("nan"))
    with pytest.raises(TypeError, match="mask must be bool"):
        attention(q, k, v, mask=torch.ones(1, 8))
    lens = torch.tensor([9], dtype=torch.int32)
    k_cache, v_cache, table = paged_kv_cache(k, v, 4)
    with pytest.raises(ValueError, match="seqlens_k"):
        attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens)
    with pytest.raises(TypeError, match="int32"):
        attention(q, k_cache, v_cache, page_table=table.long(), seqlens_k=lens)
    with pytest.raises(ValueError, match="paged"):
        attention(q[0], k, v, cu_seqlens_q=torch.tensor([0, 2], dtype=torch.int32))


def test_bad_arguments_are_named_before_anything_runs():
    q, k, v = qkv(2, 3, 8, 4, 2, 16)
    k_cache, v_cache, table = paged_kv_cache(k, v, 4)
    lens = torch.tensor([8, 5], dtype=torch.int32)
    with pytest.raises(TypeError, match="mask must be a torch.Tensor"):
        attention(q, k, v, mask=[[True] * 8] * 2)
    with pytest.raises(TypeError, match="page_table must be a torch.Tensor"):
        attention(q, k_cache, v_cache, page_table=table.tolist(), seqlens_k=lens)
    with pytest.raises(TypeError, match="scale must be a number"):
        attention(q, k, v, scale=True)
    with pytest.raises(ValueError, match="float32's range"):
        attention(q, k, v, scale=1e300)
    with pytest.raises(ValueError, match=r"scale \* log2\(e\) within float32's range"):
        attention(q, k, v, scale=3e38)  # finite in float32, but scale * log2(e) is not
    with pytest.raises(ValueError, match=r"a one-element tensor, got a tensor of shape \(2,\)"):
        attention(q, k, v, scale=torch.tensor([0.1, 0.2]))
    for flag in ("no", 1, torch.tensor(True)):  # taken for its truth, it would run a mask nobody meant
        with pytest.raises(TypeError, match="causal must be a bool"):
            attention(q, k, v, causal=flag)
    with pytest.raises(ValueError, match="head_dim must be at least 1"):
        attention(q[..., :0], k[..., :0], v[..., :0], lse=torch.empty(2, 4, 3))
    with pytest.raises(ValueError, match="needs a paged cache"):  # it would be ignored
        attention(q, k, v, seqlens_k=lens)
    with pytest.raises(ValueError, match=r"needs Sq = 3"):
        attention(q, k, v, mask=torch.ones(2, 4, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"needs Sq = 3"):
        attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens,
                  mask=torch.ones(2, 1, 8, dtype=torch.bool))
    packed = q.reshape(6, 4, 16)
    with pytest.raises(ValueError, match=r"1-D \[B \+ 1\]"):
        attention(packed, k_cache, v_cache, page_table=table, seqlens_k=lens,
                  cu_seqlens_q=torch.tensor(0).int())
    with pytest.raises(ValueError, match="end at total_q = q.shape\\[0\\] = 6"):  # no sequence, 6 query rows
        attention(packed, k_cache, v_cache, page_table=table[:0], seqlens_k=lens[:0],
                  cu_seqlens_q=torch.zeros(1, dtype=torch.int32))


@pytest.mark.parametrize("kind", ["dense", "paged", "packed"])
def test_out_and_lse_are_checked_not_converted_or_broadcast(kind):
    """The torch path fills out and lse by copy: a wrong dtype or shape raises as the binding's
    checks do, instead of being converted (an int32 out would read all zeros) or broadcast."""
    q, k, v = qkv(2, 3, 8, 4, 2, 16)
    kwargs = {}
    if kind != "dense":
        k, v, table = paged_kv_cache(k, v, 4)
        kwargs = {"page_table": table, "seqlens_k": torch.tensor([8, 5], dtype=torch.int32)}
    if kind == "packed":
        q = q.reshape(6, 4, 16)
        kwargs["cu_seqlens_q"] = torch.tensor([0, 3, 6], dtype=torch.int32)
    lse_shape = (4, 6) if kind == "packed" else (2, 4, 3)
    for out in (torch.empty(q.shape, dtype=torch.int32), torch.empty(q.shape, dtype=torch.float16),
                torch.empty(3, *q.shape)):
        with pytest.raises(ValueError, match="out must have q's dtype, shape and device"):
            attention(q, k, v, out=out, **kwargs)
    for lse in (torch.empty(lse_shape, dtype=torch.int64), torch.empty(2, *lse_shape),
                torch.empty(lse_shape[::-1])):
        with pytest.raises(ValueError, match="lse must be float32"):
            attention(q, k, v, lse=lse, **kwargs)
    out, lse = torch.empty_like(q), torch.empty(lse_shape)
    assert attention(q, k, v, out=out, lse=lse, **kwargs) is out
    assert torch.equal(out, attention(q, k, v, **kwargs)) and torch.isfinite(lse).all()


def test_the_torch_path_checks_the_page_ids_it_reads():
    """Entries of the page table that hold a sequence's keys must name pages of the cache (a
    negative id would wrap around to the last page); entries past a sequence's length may hold
    anything (padding such as -1 or num_pages)."""
    q, k, v = qkv(2, 1, 8, 4, 2, 16)
    k_cache, v_cache, table = paged_kv_cache(k, v, 4)
    lens = torch.tensor([8, 3], dtype=torch.int32)
    expected = attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens)
    num_pages = k_cache.shape[0]
    for bad in (-1, num_pages):
        wrong = table.clone()
        wrong[0, 1] = bad
        with pytest.raises(ValueError, match=rf"page_table\[0, 1\] = {bad} is not a page of the cache"):
            attention(q, k_cache, v_cache, page_table=wrong, seqlens_k=lens)
        padded = table.clone()
        padded[1, 1:] = bad  # sequence 1 holds 3 keys: one page of 4
        assert torch.equal(attention(q, k_cache, v_cache, page_table=padded, seqlens_k=lens), expected)
    with pytest.raises(ValueError, match="max_pages \\* page_size = 8"):  # check_seqlens=False lets it pass
        attention(q, k_cache, v_cache, page_table=table, seqlens_k=torch.tensor([9, 3], dtype=torch.int32),
                  check_seqlens=False)


def test_a_paged_mask_must_cover_the_longest_sequence():
    q, k, v = qkv(2, 1, 10, 4, 2, 16)
    k_cache, v_cache, table = paged_kv_cache(k, v, 4)
    lens = torch.tensor([10, 7], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"mask last dim \(3\) is shorter than the longest seqlens_k \(10\)"):
        attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens,
                  mask=torch.ones(2, 3, dtype=torch.bool))
    keep = torch.ones(2, 12, dtype=torch.bool)
    assert torch.equal(attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens, mask=keep),
                       attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens))
    qp = torch.randn(5, 4, 16)
    cu = torch.tensor([0, 3, 5], dtype=torch.int32)
    with pytest.raises(ValueError, match="needs seqlen_q = 3"):
        attention(qp, k_cache, v_cache, page_table=table, seqlens_k=lens, cu_seqlens_q=cu,
                  mask=torch.ones(2, 2, 10, dtype=torch.bool))


def test_numpy_scales_are_numbers():
    np = pytest.importorskip("numpy")
    q, k, v = qkv(1, 2, 8, 4, 2, 16)
    expected = attention(q, k, v, scale=0.25)
    for scale in (np.float32(0.25), np.float64(0.25), torch.tensor(0.25), torch.tensor([0.25]), 1):
        want = expected if scale != 1 else attention(q, k, v, scale=1.0)
        torch.testing.assert_close(attention(q, k, v, scale=scale), want)


def test_select_backend_takes_the_arguments_of_the_call_it_describes(cuda_on_cpu):
    """The same keywords as attention() (the lengths are not read), so a caller can ask about the
    very call it is about to make, and the answer is the backend that call then runs on (bf16 here
    routes to the recording cuda backend, fp32 to torch); a bad scale or causal is refused as
    attention() refuses it."""
    q, k, v = (t.bfloat16() for t in qkv(2, 1, 8, 4, 2, 16))
    k_cache, v_cache, table = paged_kv_cache(k, v, 4)
    lens = torch.tensor([8, 5], dtype=torch.int32)
    kwargs = dict(causal=True, scale=0.3, page_table=table, seqlens_k=lens, out=torch.empty_like(q),
                  lse=None, check_seqlens=False)
    assert select_backend(q, k_cache, v_cache, **kwargs) == "cuda"
    attention(q, k_cache, v_cache, **kwargs)
    assert [name for name, _ in cuda_on_cpu["calls"]] == ["paged_decode"], "the call ran where it said"
    assert select_backend(q.float(), k_cache.float(), v_cache.float(), **{**kwargs, "out": None}) == "torch"
    with pytest.raises(ValueError, match="scale must be a positive number"):
        select_backend(q, k_cache, v_cache, page_table=table, seqlens_k=lens, scale=-1.0)
    with pytest.raises(TypeError, match="causal must be a bool"):
        select_backend(q, k_cache, v_cache, page_table=table, causal="yes")
    with pytest.raises(TypeError, match="seqlens_k must be int32"):
        select_backend(q, k_cache, v_cache, page_table=table, seqlens_k=lens.long())


def test_select_backend_refuses_what_attention_refuses_and_calls_without_keys_take_torch():
    """select_backend validates as attention() does (it answered 'torch' for heads 5 / 2); calls
    with nothing to attend to are answered by the torch path on every backend, since our kernels
    and FA4's refuse them (contiguous K/V of no keys, packed queries of no sequence)."""
    import importlib

    backend = importlib.import_module("kernels.extension.backend.attention")
    q, k, v = qkv(1, 2, 8, 5, 2, 16)
    with pytest.raises(ValueError, match="multiple of heads_kv"):
        select_backend(q, k, v)
    q, k, v = qkv(1, 2, 8, 4, 2, 16)
    empty = k[:, :0]
    for name in ("cuda", "fa4"):
        assert backend._runner(name, q, empty, None, None) is backend._run_torch
        assert backend._runner(name, q[0], k, k, torch.zeros(1, dtype=torch.int32)) is backend._run_torch
    assert backend._runner("cuda", q, k, None, None) is not backend._run_torch


def test_paged_calls_without_keys_or_sequences():
    """No key at all (every length 0, a page table without columns) gives zeros and LSE -inf; no
    sequence at all gives empty results."""
    q, k, v = qkv(2, 3, 8, 4, 2, 16)
    k_cache, v_cache, table = paged_kv_cache(k, v, 4)
    zero = torch.zeros(2, dtype=torch.int32)
    lse = torch.empty(2, 4, 3)
    out = attention(q, k_cache, v_cache, page_table=table[:, :0], seqlens_k=zero, lse=lse)
    assert not out.any() and torch.equal(lse, torch.full_like(lse, float("-inf")))
    packed, cu = q.reshape(6, 4, 16), torch.tensor([0, 2, 6], dtype=torch.int32)
    lens = torch.tensor([0, 5], dtype=torch.int32)
    lse = torch.empty(4, 6)
    out = attention(packed, k_cache, v_cache, page_table=table, seqlens_k=lens, cu_seqlens_q=cu, lse=lse)
    assert not out[:2].any() and (lse[:, :2] == float("-inf")).all() and torch.isfinite(lse[:, 2:]).all()
    assert attention(q[:0], k_cache, v_cache, page_table=table[:0], seqlens_k=zero[:0]).shape == (0, 3, 4, 16)
    empty = attention(packed[:0], k_cache, v_cache, page_table=table[:0], seqlens_k=zero[:0],
                      cu_seqlens_q=torch.zeros(1, dtype=torch.int32))
    assert empty.shape == (0, 4, 16)


# ---- every call validated, lengths read when they may have changed --------------------------------

def test_every_call_is_validated_and_routed(monkeypatch):
    """attention() remembers no call: validation and routing run on each (a loop that repeats
    one call plans it, DecodePlan), while the lengths' check reads data only when it may have
    changed (below)."""
    import sys

    module = sys.modules["kernels.extension.backend.attention"]
    validated, routed = [], []
    real_validate, real_choose = module.validate_inputs, module.choose_backend
    monkeypatch.setattr(module, "validate_inputs",
                        lambda *a, **kw: validated.append(1) or real_validate(*a, **kw))
    monkeypatch.setattr(module, "choose_backend", lambda call: routed.append(call) or real_choose(call))
    q, k, v = qkv(1, 1, 8, 4, 2, 16)
    k_cache, v_cache, table = paged_kv_cache(k, v, 4)
    lens = torch.tensor([8], dtype=torch.int32)
    first = attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens)
    again = attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens)
    assert len(validated) == len(routed) == 2 and torch.equal(first, again)
    with pytest.raises(ValueError, match="seqlens_k must be in"):     # the same tensor, changed in place
        attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens.fill_(99))


@pytest.fixture
def length_reads(monkeypatch):
    """A list that grows by one on every device->host read of the lengths (_length_range), with
    the checked-lengths memory cleared."""
    import sys

    validation = sys.modules["kernels.extension.backend.validation"]
    reads = []
    real = validation._length_range
    monkeypatch.setattr(validation, "_length_range", lambda *args: reads.append(1) or real(*args))
    return reads


def test_the_seqlens_check_reads_a_tensor_again_only_when_it_may_have_changed(length_reads):
    """The layers of a decode step pass one seqlens_k: only the first call reads it back (a
    device->host copy that waits for the GPU). An in-place change (version counter), another
    tensor, another capacity or a failed check read it again; inference tensors, which keep no
    version counter, are read on every call."""
    reads = length_reads
    q, k, v = qkv(1, 1, 8, 4, 2, 16)
    k_cache, v_cache, table = paged_kv_cache(k, v, 4)
    lens = torch.tensor([8], dtype=torch.int32)

    def reads_of(lens, table=table):
        before = len(reads)
        attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens)
        return len(reads) - before

    assert [reads_of(lens) for _ in range(3)] == [1, 0, 0]
    lens.add_(-1)                                                      # in place: read again, once
    assert [reads_of(lens) for _ in range(2)] == [1, 0]
    assert reads_of(lens.clone()) == 1                                 # another tensor, same values
    with pytest.raises(ValueError, match="page_size = 4"):            # a smaller page table
        reads_of(lens, table=table[:, :1])
    lens.fill_(99)
    for _ in range(2):                                                 # a failed check is not kept
        with pytest.raises(ValueError, match="seqlens_k must be in"):
            attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens)
    with torch.inference_mode():
        frozen = torch.tensor([8], dtype=torch.int32)
        assert [reads_of(frozen) for _ in range(2)] == [1, 1]


def test_packed_query_offsets_are_checked_with_the_lengths(length_reads):
    """cu_seqlens_q must run from 0 to total_q without decreasing (the warp-specialized kernel
    reads it on the device, unchecked); it is read back with seqlens_k, once while neither
    changes."""
    reads = length_reads
    q, k, v = qkv(2, 1, 8, 4, 2, 16)
    k_cache, v_cache, table = paged_kv_cache(k, v, 4)
    lens = torch.tensor([8, 3], dtype=torch.int32)
    qp = torch.randn(7, 4, 16)
    cu = torch.tensor([0, 5, 7], dtype=torch.int32)

    def reads_of(cu):
        before = len(reads)
        attention(qp, k_cache, v_cache, page_table=table, seqlens_k=lens, cu_seqlens_q=cu)
        return len(reads) - before

    assert [reads_of(cu) for _ in range(2)] == [1, 0]
    cu[1] = 4                                                          # in place: read again
    assert [reads_of(cu) for _ in range(2)] == [1, 0]
    for bad in ([1, 5, 7], [0, 6, 5], [0, 5, 6]):
        with pytest.raises(ValueError, match=r"must start at 0, end at total_q = q\.shape\[0\] = 7"):
            reads_of(torch.tensor(bad, dtype=torch.int32))


def test_a_rejected_call_is_rejected_every_time():
    q, k, v = qkv(1, 2, 8, 4, 2, 16)
    for _ in range(2):
        with pytest.raises(ValueError, match="scale"):
            attention(q, k, v, scale=-1.0)
    attention(q, k, v)
    with pytest.raises(ValueError, match="head_dim"):      # same shapes of q, new ones of k and v
        attention(q, k[..., :8], v[..., :8])
    with pytest.raises(ValueError, match="scale"):         # a scale the cache does not take
        attention(q, k, v, scale=torch.tensor(float("nan")))


@pytest.fixture
def cuda_on_cpu(monkeypatch):
    """attention() routing CPU bf16 / fp16 calls to the cuda backend, whose ops record each call
    (entry point and keywords) instead of launching; and counting validations."""
    import sys

    module = sys.modules["kernels.extension.backend.attention"]
    monkeypatch.setattr(ops, "available", lambda: True)
    monkeypatch.setitem(module._UNSUPPORTED, "cuda",
                        lambda call: None if call.dtype in ops.DTYPES else f"dtype {call.dtype}")
    record = {"calls": [], "validated": 0}

    def recorder(name):
        def op(q, *args, out=None, **kwargs):
            record["calls"].append((name, kwargs))
            return torch.zeros_like(q) if out is None else out
        return op

    for name in ("paged_decode", "paged_prefill", "decode", "prefill"):
        monkeypatch.setattr(ops, name, recorder(name))
    real = module.validate_inputs

    def validate(*args, **kwargs):
        record["validated"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "validate_inputs", validate)
    return record


def test_each_call_takes_the_kernel_its_inputs_call_for(cuda_on_cpu, monkeypatch):
    """Each call is validated and routed on its own inputs: a dtype, a device, a page size, a
    query length, a stride, an index dtype or the environment that differs from the last call's
    takes its own kernel or error, alternating calls included."""
    record = cuda_on_cpu
    q, k, v = (t.bfloat16() for t in qkv(1, 1, 8, 4, 2, 64))
    k_cache, v_cache, table = paged_kv_cache(k, v, 4)
    lens = torch.tensor([8], dtype=torch.int32)

    def run(q=q, k_cache=k_cache, v_cache=v_cache, table=table, lens=lens):
        before = (len(record["calls"]), record["validated"])
        attention(q, k_cache, v_cache, page_table=table, seqlens_k=lens, check_seqlens=False)
        calls = record["calls"][before[0]:]
        assert record["validated"] - before[1] == 1
        return calls[0][0] if calls else "torch"

    assert run() == run() == "paged_decode"
    assert run(q=q.half(), k_cache=k_cache.half(), v_cache=v_cache.half()) == "paged_decode"
    assert run(q=q.float(), k_cache=k_cache.float(), v_cache=v_cache.float()) == "torch"
    long_q = q.expand(1, 16, 4, 64).contiguous()
    for _ in range(2):                                         # alternating decode and long queries
        assert run() == "paged_decode" and run(q=long_q) == "paged_prefill"
    k8, v8, table8 = paged_kv_cache(k, v, 8)                   # pages of 8
    assert run(k_cache=k8.bfloat16(), v_cache=v8.bfloat16(), table=table8) == "paged_decode"
    with pytest.raises(ValueError, match="one device"):       # same shapes, another device
        run(v_cache=v_cache.to("meta"))
    strided = torch.zeros(1, 1, 4, 128, dtype=torch.bfloat16)[..., ::2]  # q's shape, stride 2
    for _ in range(2):
        with pytest.raises(ValueError, match="contiguous last dim"):
            run(q=strided)
        with pytest.raises(TypeError, match="page_table must be int32"):
            run(table=table.long())
        with pytest.raises(ValueError, match="seqlens_k must have batch"):
            run(lens=lens.repeat(2))
    monkeypatch.setenv(ENV_VAR, "torch")
    assert run() == "torch"
    monkeypatch.delenv(ENV_VAR)
    assert run() == "paged_decode"
    monkeypatch.setenv("KERNELS_DEBUG", "1")
    assert run() == "paged_decode" and record["calls"][-1][1]["debug"] is True
    monkeypatch.delenv("KERNELS_DEBUG")
    assert run() == "paged_decode" and record["calls"][-1][1]["debug"] is False


# ---- the ladder backend ---------------------------------------------------------------------------

def hopper_call(**changes):
    """A Call our ladder rung can run (dense bf16 prefill on sm_90), with `changes`."""
    import dataclasses
    import sys

    module = sys.modules["kernels.extension.backend.attention"]
    call = module.Call("cuda", (9, 0), "h200", torch.bfloat16, 128, "prefill", False, False)
    return dataclasses.replace(call, **changes)


@pytest.mark.parametrize("changes,reason", [
    ({}, None),
    ({"phase": "decode", "dtype": torch.float16, "head_dim": 64}, None),
    ({"device_type": "cpu", "capability": None}, "not on a CUDA device"),
    ({"capability": (8, 9)}, "built for sm_90a, device is sm_89"),
    ({"capability": (10, 0)}, "built for sm_90a, device is sm_100"),
    ({"phase": "paged-decode"}, "paged-decode calls"),
    ({"phase": "paged-prefill"}, "paged-prefill calls"),
    ({"masked": True}, "boolean mask"),
    ({"needs_grad": True}, "no backward"),
    ({"dtype": torch.float32}, "dtype torch.float32"),
    ({"head_dim": 96}, "head_dim 96"),
])
def test_the_ladder_backend_takes_dense_hopper_calls(changes, reason):
    from kernels.extension.backend import ladder_path

    found = ladder_path.unsupported(hopper_call(**changes))
    assert found is None if reason is None else reason in found


def test_the_ladder_backend_says_when_the_dsl_is_missing(monkeypatch):
    from kernels.extension.backend import ladder_path

    monkeypatch.setattr(ladder_path, "rung", lambda name=None: "the CuTe DSL is not importable (no module)")
    assert "not importable" in ladder_path.unsupported(hopper_call())


@pytest.fixture
def ladder_on_cpu(monkeypatch):
    """attention() sending CPU bf16 calls to the ladder backend, whose rung computes the fp32
    reference on contiguous tensors (as the real rung demands) and records each problem."""
    import sys
    import types

    from kernels.extension.backend import ladder_path

    module = sys.modules["kernels.extension.backend.attention"]
    problems = []

    def run_kernel(problem, q, k, v, out, lse=None):
        assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous() and out.is_contiguous()
        assert lse is None or lse.is_contiguous()
        ref, ref_lse = reference_attention(q, k, v, causal=problem.causal, scale=problem.softmax_scale)
        out.copy_(ref)
        if lse is not None:
            lse.copy_(ref_lse)

    rung = types.SimpleNamespace(HEAD_DIMS=(64, 128), compile_kernel=lambda p: problems.append(p) or p,
                                 run_kernel=run_kernel)
    monkeypatch.setattr(ladder_path, "rung", lambda name=None: rung)
    monkeypatch.setitem(module._UNSUPPORTED, "ladder", lambda call: None)
    return problems


def test_the_ladder_backend_runs_the_rung_on_the_call(ladder_on_cpu):
    """use_backend('ladder'): the rung's problem carries the call's shape, causal flag and scale;
    strided inputs and outputs travel through contiguous copies; results match the reference."""
    q, k, v = (t.bfloat16() for t in qkv(2, 37, 53, 8, 2, 64))
    q_strided = torch.empty(2, 37, 8, 128, dtype=torch.bfloat16)[..., :64].copy_(q)
    out = torch.empty(2, 37, 8, 128, dtype=torch.bfloat16)[..., :64]
    lse = torch.empty(2, 37, 8).transpose(1, 2)  # [B, Hq, Sq], not contiguous
    with use_backend("ladder"):
        result = attention(q_strided, k, v, causal=True, scale=0.3, out=out, lse=lse)
    [problem] = ladder_on_cpu
    expected = AttentionProblem(2, 37, 53, 8, 2, 64, causal=True, dtype="bf16", scale=0.3)
    assert problem == expected
    ref, ref_lse = reference_attention(q, k, v, causal=True, scale=0.3)
    assert result is out and rel_err(out.float(), ref) < 1e-2 and rel_err(lse, ref_lse) < 1e-3
    with use_backend("ladder"):
        assert attention(q[:, :0], k, v).shape == (2, 0, 8, 64)  # no query row: not the rung's
    assert len(ladder_on_cpu) == 1


# ---- FP8 inputs ------------------------------------------------------------------------------------

def fp8_qkv(b, sq, sk, hq, hkv, d, seed=0):
    from kernels.harness import quantize_e4m3

    return tuple(quantize_e4m3(t) for t in qkv(b, sq, sk, hq, hkv, d, seed=seed))


def test_fp8_inputs_fall_back_to_torch_on_the_dequantized_values():
    """Off Hopper (here: the CPU) Fp8Tensor q, k, v run on torch with their dequantized values;
    the output is bf16 and the LSE fp32, the caller's out and lse filled in place."""
    q, k, v = fp8_qkv(2, 37, 53, 8, 2, 64)
    ref, ref_lse = reference_attention(q.dequantize(), k.dequantize(), v.dequantize(), causal=True, scale=0.2)
    out = torch.full((2, 37, 8, 64), float("nan"), dtype=torch.bfloat16)
    lse = torch.full((2, 8, 37), float("nan"))
    assert attention(q, k, v, causal=True, scale=0.2, out=out, lse=lse) is out
    assert rel_err(out.float(), ref) < 1e-2 and rel_err(lse, ref_lse) < 1e-4
    with use_backend("torch"):
        assert attention(q, k, v).dtype == torch.bfloat16


@pytest.mark.parametrize("call,error,message", [
    (lambda q, k, v: attention(q, k.dequantize(), v), TypeError, "Fp8Tensor q, k and v; k is Tensor"),
    (lambda q, k, v: attention(q, k, v, mask=torch.ones(2, 53, dtype=bool)), ValueError, "without mask"),
    (lambda q, k, v: attention(q, k, v, causal="yes"), TypeError, "causal"),
    (lambda q, k, v: attention(q, k, v, scale=-1.0), ValueError, "scale"),
    (lambda q, k, v: attention(q, k, v, out=torch.empty(2, 37, 8, 64)), ValueError, "out must have"),
    (lambda q, k, v: attention(q, k, v, lse=torch.empty(2, 37, 8)), ValueError, "lse must be float32"),
])
def test_fp8_inputs_are_checked(call, error, message):
    with pytest.raises(error, match=message):
        call(*fp8_qkv(2, 37, 53, 8, 2, 64))


def test_fp8_inputs_refuse_backends_without_fp8():
    q, k, v = fp8_qkv(1, 4, 8, 2, 2, 64)
    for name in ("cuda", "fa4"):
        with use_backend(name), pytest.raises(RuntimeError, match="takes no FP8 inputs"):
            attention(q, k, v)
    with use_backend("ladder"), pytest.raises(RuntimeError, match="not on a CUDA device"):
        attention(q, k, v)


def test_fp8_inputs_run_the_fp8_rung_where_it_runs(monkeypatch):
    """Where the FP8 rung can run (faked here), it gets the call's e4m3 problem and the
    Fp8Tensors themselves, and writes a bf16 out."""
    import types

    from kernels.extension.backend import ladder_path

    seen = []

    def run_kernel(problem, q, k, v, out, lse=None):
        seen.append((problem, q, lse))
        out.fill_(1.0)

    rung = types.SimpleNamespace(HEAD_DIMS=(64,), compile_kernel=lambda p: p, run_kernel=run_kernel)
    monkeypatch.setattr(ladder_path, "_fp8_unsupported", lambda q, head_dim: None)
    monkeypatch.setattr(ladder_path, "rung", lambda name=None: rung)
    q, k, v = fp8_qkv(2, 37, 53, 8, 2, 64)
    out = attention(q, k, v, causal=True)
    [(problem, passed_q, lse)] = seen
    assert problem == AttentionProblem(2, 37, 53, 8, 2, 64, causal=True, dtype="e4m3") and passed_q is q
    assert out.dtype == torch.bfloat16 and bool((out == 1).all()) and lse is None


# ---- autograd ------------------------------------------------------------------------------------

def leaves(*tensors):
    return [t.detach().clone().requires_grad_(True) for t in tensors]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b,sq,sk,hq,hkv", [
    (2, 7, 7, 4, 4),     # MHA, square
    (2, 5, 9, 8, 2),     # GQA 4:1, Sq < Sk
    (1, 9, 5, 6, 3),     # GQA 2:1, Sq > Sk: causal rows 0-3 see no key
    (3, 1, 12, 8, 1),    # decode-shaped, MQA
])
def test_autograd_gradients_match_the_reference(causal, b, sq, sk, hq, hkv):
    q, k, v = qkv(b, sq, sk, hq, hkv, 16, seed=sq * 10 + sk)
    grad_out = torch.randn(b, sq, hq, 16, generator=torch.Generator().manual_seed(5))
    q1, k1, v1 = leaves(q, k, v)
    out = attention(q1, k1, v1, causal=causal)
    assert out.grad_fn is not None
    (out * grad_out).sum().backward()
    q2, k2, v2 = leaves(q, k, v)
    ref = reference_fp64(q2, k2, v2, causal)
    (ref * grad_out.double()).sum().backward()
    torch.testing.assert_close(out, ref.float(), rtol=1e-5, atol=1e-5)
    for name, ours, theirs in (("dq", q1.grad, q2.grad), ("dk", k1.grad, k2.grad), ("dv", v1.grad, v2.grad)):
        assert ours is not None and torch.isfinite(ours).all(), name
        torch.testing.assert_close(ours, theirs.float(), rtol=1e-4, atol=1e-5, msg=name)


def test_autograd_sum_backward_as_a_new_user_writes_it():
    q, k, v = leaves(*qkv(2, 6, 6, 4, 2, 32))
    attention(q, k, v, causal=True).sum().backward()
    assert all(t.grad is not None and t.grad.abs().sum() > 0 for t in (q, k, v))


def test_autograd_one_input_and_out_lse_buffers():
    q, k, v = qkv(1, 4, 6, 4, 2, 16, seed=2)
    (k1,) = leaves(k)
    out, lse = torch.empty(1, 4, 4, 16), torch.empty(1, 4, 4)
    result = attention(q, k1, v, causal=True, out=out, lse=lse)
    assert result is out and out.grad_fn is not None
    out.sum().backward()
    (k2,) = leaves(k)
    reference_fp64(q, k2, v, True).sum().backward()
    torch.testing.assert_close(k1.grad, k2.grad.float(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(lse, reference_attention(q, k, v, causal=True)[1])


def test_autograd_through_a_paged_cache_and_ragged_queries():
    q, k, v = qkv(2, 3, 20, 4, 2, 16, seed=4)
    lens = torch.tensor([20, 9], dtype=torch.int32)
    k_cache, v_cache, table = paged_kv_cache(k, v, 4, generator=torch.Generator().manual_seed(1))
    q1, kc1, vc1 = leaves(q, k_cache, v_cache)
    attention(q1, kc1, vc1, page_table=table, seqlens_k=lens, causal=True).sum().backward()
    q2, k2, v2 = leaves(q, k, v)
    reference_fp64(q2, k2, v2, True, key_lens=lens).sum().backward()
    torch.testing.assert_close(q1.grad, q2.grad.float(), rtol=1e-4, atol=1e-5)
    # the cache's gradient lands on the pages the table names, for the keys seqlens_k covers
    for b in range(2):
        n = int(lens[b])
        pages = table[b, : -(-n // 4)].long()
        got = kc1.grad[pages].reshape(-1, 2, 16)[:n]
        torch.testing.assert_close(got, k2.grad[b, :n].float(), rtol=1e-4, atol=1e-5)
    qp1, = leaves(q.reshape(6, 4, 16))
    cu = torch.tensor([0, 3, 6], dtype=torch.int32)
    out = attention(qp1, k_cache, v_cache, page_table=table, seqlens_k=lens, cu_seqlens_q=cu, causal=True)
    out.sum().backward()
    torch.testing.assert_close(qp1.grad.view(2, 3, 4, 16), q2.grad.float(), rtol=1e-4, atol=1e-5)


def test_outputs_without_autograd_are_unchanged():
    q, k, v = qkv(2, 5, 9, 8, 2, 16, seed=6)
    plain = attention(q, k, v, causal=True)
    assert plain.grad_fn is None and not plain.requires_grad
    q1, k1, v1 = leaves(q, k, v)
    recorded = attention(q1, k1, v1, causal=True)
    torch.testing.assert_close(recorded.detach(), plain, rtol=0, atol=0)
    with torch.no_grad():
        assert attention(q1, k1, v1, causal=True).grad_fn is None
    with torch.inference_mode():
        assert not attention(q1, k1, v1).requires_grad
    assert rel_err(plain, reference_attention(q, k, v, causal=True)[0]) < 1e-5


# ---- dtypes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_dtypes_on_the_torch_path(dtype):
    q, k, v = (t.to(dtype) for t in qkv(2, 5, 9, 8, 2, 32, seed=8))
    out = attention(q, k, v, causal=True)
    assert out.dtype == dtype
    tol = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-5}[dtype]
    assert rel_err(out, reference_attention(q, k, v, causal=True)[0]) < tol
    q1, k1, v1 = leaves(q, k, v)
    attention(q1, k1, v1, causal=True).sum().backward()
    assert q1.grad.dtype == dtype and torch.isfinite(q1.grad.float()).all()


def test_dtype_errors_name_the_inputs():
    q, k, v = qkv(1, 2, 8, 4, 2, 16)
    with pytest.raises(TypeError, match="share a dtype"):
        attention(q.half(), k, v)
    with pytest.raises(TypeError, match="bfloat16, float16 or float32"):
        attention(q.double(), k.double(), v.double())


def _binding_arg_names(entry_point: str) -> list[str]:
    """The py::arg names of `entry_point` in the attention binding, in order."""
    source = (ROOT / "csrc" / "kernels" / "attention" / "attention.cpp").read_text()
    definition = re.search(rf'm\.def\("{entry_point}",(.*?)\);\n', source, re.S)
    assert definition, entry_point
    return re.findall(r'py::arg\("(\w+)"\)', definition.group(1))


@pytest.mark.parametrize("entry_point", ["decode", "paged_decode", "prefill", "paged_prefill"])
def test_the_ops_pass_the_binding_every_argument_by_position_in_its_order(entry_point, monkeypatch):
    """The wrappers call the binding positionally (a keyword costs pybind11 a name match per
    call), so each wrapper's parameters must be the binding's, in the binding's order."""
    names = _binding_arg_names(entry_point)
    wrapper = getattr(ops, entry_point)
    assert list(inspect.signature(wrapper).parameters) == names
    received = []

    class Binding:
        def __getattr__(self, name):
            return lambda *args, **kwargs: received.append((name, args, kwargs))

    monkeypatch.setattr(ops, "_module", Binding)
    values = {name: object() for name in names}
    wrapper(**values)
    assert received == [(entry_point, tuple(values[name] for name in names), {})]
