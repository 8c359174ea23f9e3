"""The error model of the csrc bindings (csrc/kernels/common/errors.h, binding.h), called directly
(no Python checks in front): every family raises ValueError for a bad argument, TypeError for a
bad dtype or format, with "<argument> must <requirement>, got <what was given>" messages, both
from the binding's tensor checks and from the torch-free launchers behind it. GPU only: the
modules need a CUDA build (`python -m tools.build_ext`, which `make test` runs where CUDA is).
The host-side C++ of the same model is checked without a GPU by csrc/tests/attn_host_test.cu
and fp8_plan_test.cu (tests/test_csrc_compile.py, tests/test_fp8.py)."""

from __future__ import annotations

import pytest
import torch

from kernels.extension import loader

pytestmark = pytest.mark.gpu


def module(name: str):
    # No CUDA check: the gpu mark has the conftest skip this module without a device.
    if not loader.available(name):
        pytest.skip(f"module {name!r} not built (python -m tools.build_ext)")
    return loader.load(name)


def test_attention_binding_errors():
    attention = module("attention")
    q = torch.zeros(1, 4, 2, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(TypeError, match="q must be bfloat16 or float16, got float32"):
        attention.prefill(q.float(), q.float(), q.float())
    with pytest.raises(TypeError, match="k must be float16, got bfloat16"):
        attention.prefill(q.half(), q, q.half())
    with pytest.raises(ValueError, match="k must be a CUDA tensor, got device cpu"):
        attention.prefill(q, q.cpu(), q)
    with pytest.raises(ValueError, match="impl must be 'tc', 'tc-ws', 'tc-cpasync' or 'scalar', got 'fast'"):
        attention.prefill(q, q, q, impl="fast")
    with pytest.raises(ValueError, match="impl must be 'tc' or 'scalar', got 'tc-ws'"):
        attention.decode(q, q, q, impl="tc-ws")
    # the launcher's check, behind the binding's: the decode grid's y dimension
    long_q = torch.zeros(1, 16 * 65536, 1, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="decode: heads_kv .* must be <= 65535, got 65536; use prefill"):
        attention.decode(long_q, q[:, :, :1], q[:, :, :1])


def test_outputs_sharing_memory_with_inputs_are_refused():
    """An output the kernels write while other CTAs still read an input may not share its
    memory (garbage rows otherwise); the very same view as its own input is in place, allowed."""
    attention, rotary = module("attention"), module("rotary")
    q = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16, device="cuda")
    k, v = torch.randn_like(q), torch.randn_like(q)
    with pytest.raises(ValueError, match="out shares memory with k; pass separate memory"):
        attention.prefill(q, k, v, out=k)
    with pytest.raises(ValueError, match="out shares memory with v"):
        attention.decode(q[:, :1].contiguous(), k, v, out=v[:, :1])
    buffer = torch.randn(1, 9, 2, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="out shares memory with q .only the very same view"):
        attention.prefill(buffer[:, :8], k, v, out=buffer[:, 1:])  # shifted by a token: partial overlap
    lse = torch.empty(1, 2, 1, device="cuda")
    workspace = torch.empty(attention.decode_workspace_size(4, 1, 2, 1, 64), device="cuda")
    with pytest.raises(ValueError, match="lse shares memory with workspace"):
        attention.decode(q[:, :1].contiguous(), k, v, lse=workspace[:2].view(1, 2, 1), num_splits=4,
                         workspace=workspace)
    same = q.clone()
    attention.prefill(same, k, v, out=same)  # in place
    assert torch.isfinite(same).all()
    attention.decode(q[:, :1].contiguous(), k, v, lse=lse, num_splits=4, workspace=workspace)
    cos = torch.ones(8, 32, device="cuda")
    with pytest.raises(ValueError, match="q_out shares memory with k"):
        rotary.apply(q, k, k, torch.empty_like(k), cos, cos, None)
    rotary.apply(q, k, q, k, cos, cos, None)  # in place, both


def test_rotary_binding_errors():
    rotary = module("rotary")
    q = torch.zeros(1, 3, 2, 64, dtype=torch.bfloat16, device="cuda")
    cos = torch.ones(8, 32, device="cuda")
    with pytest.raises(TypeError, match="k must be bfloat16, got float16"):
        rotary.apply(q, q.half(), q, q.half(), cos, cos, None)
    with pytest.raises(ValueError, match="cos must be a CUDA tensor, got device cpu"):
        rotary.apply(q, None, q, None, cos.cpu(), cos, None)
    # the launcher's check: the interleaved layout needs even strides (heads 65 elements apart)
    odd = torch.zeros(1, 3, 2, 65, dtype=torch.bfloat16, device="cuda")[..., :64]
    with pytest.raises(ValueError, match="rotary: the interleaved layout needs even strides"):
        rotary.apply(odd, None, odd, None, cos, cos, None, interleaved=True)


def test_fp8_binding_errors():
    fp8 = module("fp8")
    s = torch.ones((), device="cuda")
    out = torch.empty(64, 64, dtype=torch.bfloat16, device="cuda")
    e4m3 = torch.zeros(64, 64, device="cuda").to(torch.float8_e4m3fn)
    e5m2 = torch.zeros(64, 64, device="cuda").to(torch.float8_e5m2)
    # the launcher's checks (kernels::TypeError / ValueError through the module's translator)
    with pytest.raises(TypeError, match="fp8 gemm: unsupported format pair e5m2 x e5m2"):
        fp8.gemm(e5m2, e5m2, s, s, None, None, None, out)
    with pytest.raises(ValueError, match="fp8 gemm: K must be a multiple of 16 .*K=40"):
        fp8.gemm(e4m3[:, :40], e4m3[:, :40], s, s, None, None, None, out)
    # the binding's
    with pytest.raises(ValueError, match="scale_a must be a CUDA tensor, got device cpu"):
        fp8.gemm(e4m3, e4m3, s.cpu(), s, None, None, None, out)
    with pytest.raises(TypeError, match="out must be bfloat16, got float32"):
        fp8.gemm(e4m3, e4m3, s, s, None, None, None, out.float())
    with pytest.raises(ValueError, match="block_n must be"):
        fp8.gemm(e4m3, e4m3, s, s, None, None, None, out, block_n=96)


def test_outputs_that_share_memory_and_empty_calls():
    """An output whose elements share memory (expand()'s stride 0) would keep whichever write
    came last: refused by every binding; an empty decode returns an empty output (it asked for a
    split workspace first); a rotary table without rows would be read at row 0."""
    attention, rotary, fp8 = module("attention"), module("rotary"), module("fp8")
    q = torch.randn(4, 1, 8, 64, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(4, 64, 2, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="out must not have elements that share memory"):
        attention.decode(q, k, k, out=torch.empty_like(q[:1]).expand(4, 1, 8, 64))
    with pytest.raises(ValueError, match="lse must not have elements that share memory"):
        attention.prefill(q, k, k, lse=torch.empty(1, 8, 1, device="cuda").expand(4, 8, 1))
    assert attention.decode(q[:0], k[:0], k[:0]).shape == (0, 1, 8, 64)
    assert attention.decode(q[:, :, :0], k, k).shape == (4, 1, 0, 64)
    with pytest.raises(ValueError, match="k must have 4 dims"):
        attention.decode(q, k[0], k[0])
    qr = torch.randn(1, 16, 8, 128, dtype=torch.bfloat16, device="cuda")
    empty = torch.empty(0, 64, device="cuda")
    with pytest.raises(ValueError, match="at least one row"):
        rotary.apply(qr, None, qr, None, empty, empty, torch.zeros(1, 16, dtype=torch.int32, device="cuda"))
    s = torch.ones((), device="cuda")
    e4m3 = torch.zeros(64, 64, device="cuda").to(torch.float8_e4m3fn)
    row = torch.empty(1, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="out must not have elements that share memory"):
        fp8.gemm(e4m3, e4m3, s, s, None, None, None, row.expand(64, 64))
