"""CPU tests of the attention Python layer: validation, backend policy, the torch fallback
on contiguous, paged and ragged inputs (against the fp32 reference, tensors in guard regions)."""

from __future__ import annotations

import pytest
import torch

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
