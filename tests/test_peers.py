"""The library peers of the registry (kernels/registry/peers.py) as a machine without a GPU, or
without the peers extra, meets them: their limits, the reasons they give, the pure helpers
behind their layouts, and tools.compare naming them."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from kernels.harness.problem import AttentionProblem
from kernels.registry import get, names, peers
from kernels.registry.production import PAGE_SIZE, as_paged_cache
from tools import compare

NEW_PEERS = ("cudnn-fe", "flashinfer-paged-decode", "flashinfer-paged-prefill")
PACKAGES = {"cudnn-fe": ("cudnn", "nvidia-cudnn-frontend"),
            "flashinfer-paged-decode": ("flashinfer", "flashinfer-python"),
            "flashinfer-paged-prefill": ("flashinfer", "flashinfer-python")}
DECODE = AttentionProblem(batch=4, seqlen_q=1, seqlen_k=4096, heads_q=32, heads_kv=8, head_dim=128)
PREFILL = AttentionProblem(batch=2, seqlen_q=1024, seqlen_k=1024, heads_q=16, heads_kv=16, head_dim=128)


@pytest.mark.parametrize("name", NEW_PEERS)
def test_new_peers_are_in_the_registry(name):
    runner = get(name)
    assert runner.kind == "peer" and name in names("peer") and runner.description


def test_cudnn_limits_dtypes_head_dims_and_causal_alignment():
    limits = get("cudnn-fe").limits
    for dtype in ("bf16", "fp16", "e4m3"):
        for head_dim in (64, 128, 256):
            assert limits(PREFILL.with_(dtype=dtype, head_dim=head_dim)) is None
    assert limits(DECODE) is None and limits(DECODE.with_(dtype="e4m3", causal=True)) is None
    assert "head_dim 512" in limits(PREFILL.with_(head_dim=512))
    assert "head_dim 100" in limits(PREFILL.with_(head_dim=100))       # not a multiple of 8
    assert limits(PREFILL.with_(head_dim=72)) is None                   # bf16: a multiple of 8
    assert "multiple of 16" in limits(PREFILL.with_(head_dim=72, dtype="e4m3"))
    # bottom-right causal with fewer keys than queries: rows that see nothing, refused
    assert "seqlen_q <= seqlen_k" in limits(PREFILL.with_(causal=True, seqlen_k=512))
    assert limits(PREFILL.with_(causal=True, seqlen_q=512)) is None


@pytest.mark.parametrize("name", ["sdpa-flash", "sdpa-cudnn", "fa4",
                                  "flashinfer-paged-decode", "flashinfer-paged-prefill"])
def test_only_cudnn_fe_takes_e4m3(name):
    problem = DECODE if "decode" in name else PREFILL
    assert get(name).limits(problem) is None
    assert "dtype e4m3" in get(name).limits(problem.with_(dtype="e4m3"))


def test_flashinfer_limits():
    decode, prefill = get("flashinfer-paged-decode").limits, get("flashinfer-paged-prefill").limits
    assert decode(DECODE) is None and decode(DECODE.with_(heads_kv=32, dtype="fp16")) is None
    assert decode(DECODE.with_(causal=True)) is None                   # one row sees every key
    assert "seqlen_q == 1" in decode(PREFILL)
    assert prefill(PREFILL) is None and prefill(DECODE) is None
    assert prefill(PREFILL.with_(causal=True, seqlen_q=256, heads_kv=4)) is None
    assert "seqlen_q <= seqlen_k" in prefill(PREFILL.with_(causal=True, seqlen_q=2048))
    for limits, problem in ((decode, DECODE), (prefill, PREFILL)):
        assert f"seqlen_k % {PAGE_SIZE}" in limits(problem.with_(seqlen_k=1000))
        assert "head_dim 96" in limits(problem.with_(head_dim=96))


@pytest.mark.parametrize("name", NEW_PEERS)
def test_unsupported_names_the_missing_package_and_the_extra(name, monkeypatch):
    module, package = PACKAGES[name]
    monkeypatch.setitem(sys.modules, module, None)  # import fails, installed or not
    problem = DECODE if "decode" in name else PREFILL
    reason = get(name).unsupported(problem)
    assert package in reason and 'pip install -e ".[peers]"' in reason
    # the problem's own limits come first: they hold on every machine
    assert get(name).unsupported(problem.with_(head_dim=512)) == get(name).limits(problem.with_(head_dim=512))


@pytest.mark.parametrize("name", NEW_PEERS)
def test_unsupported_without_a_gpu(name, monkeypatch):
    module, _ = PACKAGES[name]
    monkeypatch.setitem(sys.modules, module, types.ModuleType(module))  # "installed"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    problem = DECODE if "decode" in name else PREFILL
    assert get(name).unsupported(problem) == f"{name}: needs a CUDA device"


def test_bshd_as_cudnn_bhsd_is_the_transposed_view():
    for shape in ((2, 100, 8, 64), (1, 1, 32, 128), (3, 7, 5, 256)):
        t = torch.empty(shape)
        dims, strides = peers.bhsd_dims_strides(t.shape, t.stride())
        view = t.transpose(1, 2)
        assert dims == tuple(view.shape) and strides == view.stride()
        assert peers.contiguous_strides(shape) == t.stride()
    # e.g. b2 s3 h4 d8: heads step d, sequence steps h * d
    assert peers.bhsd_dims_strides((2, 3, 4, 8), (96, 32, 8, 1)) == ((2, 4, 3, 8), (96, 8, 32, 1))


def test_cudnn_diagonal():
    assert peers.cudnn_diagonal(PREFILL) is None
    assert peers.cudnn_diagonal(PREFILL.with_(causal=True)) == "TOP_LEFT"        # Sq == Sk: one diagonal
    assert peers.cudnn_diagonal(PREFILL.with_(causal=True, seqlen_q=256)) == "BOTTOM_RIGHT"
    assert peers.cudnn_diagonal(DECODE.with_(causal=True)) is None               # one row sees every key


def test_identity_page_table_gathers_each_sequence_back():
    batch, seqlen, heads, head_dim = 3, 4 * PAGE_SIZE, 2, 8
    k = torch.randn(batch, seqlen, heads, head_dim)
    indptr, indices, last_page_len = peers.identity_page_csr(batch, seqlen)
    assert indptr.dtype == indices.dtype == last_page_len.dtype == torch.int32
    assert indptr.tolist() == [0, 4, 8, 12] and last_page_len.tolist() == [PAGE_SIZE] * batch
    cache = as_paged_cache(k)                                                          # [pages, page, H, D]
    for b in range(batch):
        pages = indices[indptr[b]:indptr[b + 1]].long()
        assert torch.equal(cache[pages].reshape(seqlen, heads, head_dim), k[b])
    with pytest.raises(ValueError, match="seqlen_k %"):
        peers.identity_page_csr(1, PAGE_SIZE + 1)


def test_compare_cpu_mode_names_the_new_peers(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert compare.main(["cudnn-fe", "--cpu", "--seqlen", "1024", "--causal", "no"]) == 0
    assert "cudnn-fe is a peer" in capsys.readouterr().out
    assert compare.main(["k12", "cudnn-fe", "--cpu", "--seqlen", "1024", "--dtype", "e4m3"]) == 0
    # the decode wrapper runs none of compare's queries = keys shapes, and says why (exit 2)
    assert compare.main(["flashinfer-paged-decode", "--cpu", "--seqlen", "1024", "--causal", "no"]) == 2
    assert "seqlen_q == 1" in capsys.readouterr().err
    assert compare.main(["flashinfer-paged-prefill", "--cpu", "--seqlen", "1024", "--causal", "no"]) == 0
