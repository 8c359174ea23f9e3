"""Each rung compiles for sm_90a on a CPU-only machine, with the instructions its idea implies.

These are the claims the worklog makes about each rung ("K2 does its math in FFMA and shuffles
through SHFL", "K4 runs on HGMMA"), checked against the disassembly.
"""

import pytest

from kernels.harness import AttentionProblem
from kernels.registry import rung_names
from tools.inspect import inspect

# rung -> (opcodes that must appear, opcodes that must not)
EXPECTED = {
    "k1": ({"FFMA", "LDG", "MUFU"}, {"HGMMA", "HMMA", "LDL", "STL"}),
    "k2": ({"FFMA", "LDS", "STS", "SHFL", "MUFU", "BAR"}, {"HGMMA", "HMMA", "LDL", "STL"}),
    # TMA rungs: every Q/K/V tile arrives by UTMALDG, so no LDG at all.
    "k3": ({"FFMA", "LDS", "SHFL", "UTMALDG", "SYNCS"}, {"LDG", "HGMMA", "HMMA", "LDL", "STL"}),
    "k4": ({"HGMMA", "UTMALDG", "SYNCS", "SHFL", "MUFU"}, {"LDG", "HMMA", "LDL", "STL"}),
}
# Rungs whose dot products run on tensor cores: FFMA may remain in the softmax bookkeeping,
# but a scalar dot-product loop over head_dim would show as hundreds of them.
TENSOR_CORE_RUNGS = {"k4"}
MAX_FFMA_WITH_TENSOR_CORES = 32
VARIANTS = [(d, c) for d in (64, 128) for c in (False, True)]


def test_every_rung_has_expectations():
    assert set(rung_names()) <= set(EXPECTED), "add the new rung's SASS expectations here"


@pytest.fixture(scope="module")
def reports():
    cache = {}

    def get(name, head_dim, causal):
        key = (name, head_dim, causal)
        if key not in cache:
            cache[key] = inspect(name, AttentionProblem(head_dim=head_dim, causal=causal))
        return cache[key]

    return get


@pytest.mark.parametrize("head_dim,causal", VARIANTS, ids=lambda v: str(v))
@pytest.mark.parametrize("name", rung_names())
def test_rung_sass(name, head_dim, causal, reports):
    report = reports(name, head_dim, causal)
    assert report["status"] == "ok", report["status"]
    present, absent = EXPECTED[name]
    mix = report["sass_mix"]
    assert not [op for op in present if mix[op] == 0], f"missing from SASS: {present}, mix {mix}"
    assert not [op for op in absent if mix[op] > 0], f"unexpected in SASS: {absent}, mix {mix}"
    if name in TENSOR_CORE_RUNGS:
        assert mix["FFMA"] <= MAX_FFMA_WITH_TENSOR_CORES, f"{mix['FFMA']} FFMA: a scalar dot-product loop?"
    assert report["local_bytes"] == 0 and report["stack_frame_bytes"] == 0, \
        "registers spilled, or a register array went to local memory"
    assert 0 < report["registers"] <= 255
