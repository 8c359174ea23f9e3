"""The rungs' launch path: builds for the GPU take torch tensors through TVM-FFI, builds for
inspection keep the plain host function (kernels/cute/launch.py)."""

import pytest

from kernels.cute import launch, transpose


class Recorder:
    """Stands in for cute.compile: keeps the arguments and options of each call."""

    def __init__(self):
        self.calls = []

    def __call__(self, fn, *args, options=None):
        self.calls.append((fn, args, options))
        return object()


class Kernel:
    def __init__(self, head_dim, causal, dtype):
        self.head_dim = head_dim


@pytest.mark.parametrize("options,tvm_ffi", [(None, True), (launch.INSPECT_OPTIONS, False)],
                         ids=["gpu-build", "inspect-build"])
def test_gpu_builds_launch_through_tvm_ffi_and_inspect_builds_do_not(monkeypatch, options, tvm_ffi):
    compile_calls = Recorder()
    monkeypatch.setattr(launch.cute, "compile", compile_calls)
    key = launch.CompileKey(f"test-launch-{tvm_ffi}", 128, False, "bf16", True)  # not in the cache
    try:
        launch.compile_fmha(Kernel, key, options)
    finally:
        launch._COMPILED.pop(key, None)
        launch.COMPILE_SECONDS.pop(key, None)
    (_, args, used), = compile_calls.calls
    assert used == ("--enable-tvm-ffi" if tvm_ffi else options)
    assert args[-1].use_tvm_ffi_env_stream is tvm_ffi  # under TVM-FFI: torch's current stream
    assert len(args) == 7 and args[4] is not None  # q, k, v, out, lse, scale, stream


@pytest.mark.parametrize("options,tvm_ffi", [(None, True), (launch.INSPECT_OPTIONS, False)],
                         ids=["gpu-build", "inspect-build"])
def test_the_v_transpose_launches_the_same_way(monkeypatch, options, tvm_ffi):
    compile_calls = Recorder()
    monkeypatch.setattr(transpose.cute, "compile", compile_calls)
    transpose.compiled.cache_clear()
    try:
        transpose.compiled(128, options)
    finally:
        transpose.compiled.cache_clear()
    (_, args, used), = compile_calls.calls
    assert used == ("--enable-tvm-ffi" if tvm_ffi else options)
    assert args[-1].use_tvm_ffi_env_stream is tvm_ffi


@pytest.mark.parametrize("seqlen_k,causal,given,expected", [
    (16383, True, {}, {}),  # below LONG_KEYS: the persistent walk
    (16384, False, {}, {"ctas": "one"}),
    (20000, True, {}, {"ctas": "one", "l2_heads": 0}),
    (20000, True, {"ctas": 132}, {"ctas": 132}),  # a launch shape the caller sets stays whole
    (20000, True, {"l2_heads": 4}, {"l2_heads": 4}),
    (20000, False, {"pingpong": False}, {"ctas": "one", "pingpong": False}),
])
def test_k11_launch_shape_follows_the_key_count(monkeypatch, seqlen_k, causal, given, expected):
    from kernels import k11
    from kernels.harness import AttentionProblem

    monkeypatch.setattr(launch, "CompiledFMHA", lambda rung, cls, problem, knobs: dict(knobs))
    problem = AttentionProblem(seqlen_q=1024, seqlen_k=seqlen_k, heads_q=16, heads_kv=16, causal=causal)
    expected = {k: k11.ONE_TILE_PER_CTA if v == "one" else v for k, v in expected.items()}
    assert k11.compile_kernel(problem, **given) == expected


@pytest.mark.parametrize("seqlen_k,causal,given,expected", [
    (16383, False, {}, {}),  # below LONG_KEYS: the dynamic walk
    (16384, False, {}, {"ctas": "one"}),  # K11's launch without the mask from there
    (20000, True, {}, {}),  # under the mask the dynamic walk at every length
    (20000, False, {"ctas": 132}, {"ctas": 132}),
    (20000, False, {"l2_heads": 4}, {"ctas": "one", "l2_heads": 4}),
])
def test_k13_launch_shape_follows_the_key_count(monkeypatch, seqlen_k, causal, given, expected):
    from kernels import k13
    from kernels.harness import AttentionProblem

    monkeypatch.setattr(launch, "CompiledFMHA", lambda rung, cls, problem, knobs: dict(knobs))
    problem = AttentionProblem(seqlen_q=1024, seqlen_k=seqlen_k, heads_q=16, heads_kv=16, causal=causal)
    expected = {k: k13.ONE_TILE_PER_CTA if v == "one" else v for k, v in expected.items()}
    assert k13.compile_kernel(problem, **given) == expected
