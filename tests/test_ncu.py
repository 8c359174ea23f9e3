"""tools.ncu without a GPU: the CSV it parses, the metrics it keeps, and the suites around it."""

import pytest

from tools import ncu
from tools.suites import ladder

HEADER = ["ID", "Kernel Name", "gpu__time_duration.sum",
          "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
          "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
          "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
          "smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio", "smsp__inst_executed.sum"]
UNITS = ["", "", "ns", "%", "inst", "inst", "inst", "inst"]
VALUES = ["0", "kernel_cutlass_kernel", "3,112,448", "80.19", "0.83", "1.54", "0", "1,028,321,240"]
RAW = "==PROF== Connected to process 1 (python3)\n" + "\n".join(
    ",".join(f'"{v}"' for v in line) for line in (HEADER, UNITS, VALUES)) + "\n"


def test_parse_and_summarize_keep_the_metrics_and_sorted_stalls():
    raw = ncu.parse_raw_csv(RAW)
    assert raw["gpu__time_duration.sum"] == "3,112,448"
    out = ncu.summarize(raw)
    assert out["duration_ns"] == 3112448.0 and out["tensor_pipe_active_pct"] == 80.19
    assert out["warp_instructions"] == 1028321240.0
    assert list(out["stalls_per_issue"]) == ["wait", "barrier"], "sorted, zero reasons dropped"


def test_the_longest_launch_of_the_range_is_the_one_kept():
    transpose = ["1", "transpose_kernel", "137,568", "2.6", "0.1", "2.36", "0", "119,537,664"]
    text = RAW.replace(",".join(f'"{v}"' for v in VALUES),
                       "\n".join(",".join(f'"{v}"' for v in row) for row in (transpose, VALUES)))
    out = ncu.summarize(ncu.parse_raw_csv(text))
    assert out["duration_ns"] == 3112448.0 and out["launches_in_range"] == 2
    assert ncu.summarize(ncu.parse_raw_csv(RAW))["launches_in_range"] == 1


def test_an_output_without_a_profiled_launch_is_an_error():
    with pytest.raises(ValueError, match="no profiled launch"):
        ncu.parse_raw_csv("==PROF== No kernels were profiled.\n")


def test_profile_without_ncu_says_so(monkeypatch):
    monkeypatch.setattr(ncu, "ncu_binary", lambda: None)
    with pytest.raises(FileNotFoundError, match="ncu"):
        ncu.profile("k8", ncu.default_problem())


def test_ladder_suite_times_the_scalar_rungs_on_a_subset():
    problems = ladder.problems()
    assert {p.head_dim for p in problems} == {64, 128, 256}
    assert ladder.is_scalar_rung("k1")
    assert not ladder.is_scalar_rung("k8") and not ladder.is_scalar_rung("fa4")
    k1 = [p for p in problems if ladder.runs("k1", p)]
    assert k1 and all(p.head_dim == 128 and p.seqlen_q in ladder.SCALAR_RUNG_SEQLENS for p in k1)
    assert all(ladder.runs("k8", p) == (p.dtype == "bf16") for p in problems)


def test_ladder_suite_runs_each_kernel_in_its_dtypes():
    """Every shape in bf16 and e4m3; the FP8 rung runs exactly the e4m3 ones, the bf16 rungs and
    the peers exactly the bf16 ones, so each e4m3 row has its bf16 neighbours at the same shape."""
    problems = ladder.problems()
    bf16 = [p for p in problems if p.dtype == "bf16"]
    e4m3 = [p for p in problems if p.dtype == "e4m3"]
    assert {p.with_(dtype="bf16") for p in e4m3} == set(bf16) and len(e4m3) == len(bf16)
    assert [p for p in problems if ladder.runs("k12", p)] == e4m3
    for name in ("k10", "fa4", "sdpa-cudnn"):
        assert [p for p in problems if ladder.runs(name, p)] == bf16
