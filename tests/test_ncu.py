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


# A consumer loop of 9 instructions (executed 100 times) between a prologue and a producer wait
# (executed 10 times), with the turn and both WGMMA waits: (SASS, samples, executed).
SOURCE_ROWS = [("LDC R1, c[0x0][0x28]", 5, 10),
               ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR10+0x10], R2", 7, 100),
               ("BAR.SYNC.DEFER_BLOCKING R4, 0x100", 1, 100),
               ("UMOV UR19, 0x40000040", 30, 100),
               ("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT", 20, 100),
               ("BAR.ARV R4, 0x100", 2, 100),
               ("WARPGROUP.DEPBAR.LE gsb0, 0x1", 40, 100),
               ("MUFU.EX2 R28, R28", 50, 100),
               ("WARPGROUP.DEPBAR.LE gsb0, 0x0", 9, 100),
               ("FMUL R88, R88, R3", 11, 100),
               ("@!P0  BRA 0x7f0bef7addd0", 13, 10)]


def source_csv(rows, kernel="gemm_sm90_kernel"):
    """An ncu source page (--page source --csv --print-source sass) of rows (SASS, samples, executed)."""
    return "".join([
        f'"Kernel Name","{kernel}"\n',
        '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
        '"Instructions Executed"\n',
        *[f'"0x{i:x}","      {sass}","{samples}","0","{executed}"\n' for i, (sass, samples, executed)
          in enumerate(rows)]])


SOURCE = source_csv(SOURCE_ROWS, "kernel_cutlass_kernel")


def test_loop_segments_split_the_ping_pong_loop_at_the_turn_and_the_wgmma_waits():
    """The turn from its BAR.SYNC (the wait for it shows on the next instruction) to its BAR.ARV;
    each WGMMA wait closes the step it ends; K's wait at the loop's top counts with the loop's
    last step; rarely executed code (prologue, producer) is outside."""
    instructions = ncu.parse_source_csv(SOURCE)
    assert [i["sass"] for i in instructions] == [row[0] for row in SOURCE_ROWS]
    segments = ncu.loop_segments(instructions)
    assert segments == {"turn": 53, "S wait": 40, "softmax to the P V wait": 59, "after the P V wait": 18,
                        ncu.OUTSIDE: 18}
    assert list(segments) == [*ncu.SEGMENTS, ncu.OUTSIDE]


# A GEMM's SASS: the producer's rarely executed TMA issue and empty-barrier spin, the consumers'
# hot loop (full-barrier spin, WGMMAs, the wait, the promotion's FFMAs), then the epilogue.
GEMM_ROWS = [("UTMALDG.2D [UR8], [UR4]", 3, 10),
             ("SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR6+0x8], R3", 2, 10),
             ("@!P1 BRA 0x1d0", 40, 10),
             ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR6], R2", 5, 160),
             ("@!P0  BRA 0x300", 70, 160),
             ("WARPGROUP.ARRIVE", 1, 160),
             ("QGMMA.64x176x32.F32.E4M3.E4M3 R24, gdesc[UR16], R24, gsb0", 30, 160),
             ("WARPGROUP.DEPBAR.LE gsb0, 0x0", 90, 160),
             ("FFMA R100, R24, R5, R100", 25, 160),
             ("SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR6+0x40], RZ", 4, 80),
             ("F2FP.BF16.F32.PACK_AB R4, R101, R100", 6, 8),
             ("STSM.16.M88.4 [R7], R4", 8, 8),
             ("BAR.SYNC.DEFER_BLOCKING R0, 0x80", 12, 8),
             ("UTMASTG.2D [UR4], [UR10]", 2, 1),
             ("DEPBAR.LE SB0, 0x0", 9, 1),
             ("EXIT", 1, 1)]


def test_class_samples_split_a_gemm_by_instruction_class_and_hot_loop():
    """Spin loops count with their try-wait (the branch holds the samples), the producer's wait
    falls outside the hot loop, WARPGROUP.DEPBAR is a WGMMA wait and plain DEPBAR a bulk-copy wait."""
    classes = ncu.class_samples(ncu.parse_source_csv(source_csv(GEMM_ROWS)))
    hot, cold = ncu.HOT, ncu.COLD
    assert classes["mbarrier wait"] == {hot: 75, cold: 42}
    assert classes["WGMMA wait"] == {hot: 90, cold: 0}
    assert classes["WGMMA issue"] == {hot: 31, cold: 0}
    assert classes["fp32 math"] == {hot: 25, cold: 0}
    assert classes["mbarrier arrive"] == {hot: 4, cold: 0}, "executed half as often as the peak: hot"
    assert classes["TMA and bulk waits"] == {hot: 0, cold: 14}
    assert classes["shared stores"][cold] == 8 and classes["named barrier"][cold] == 12
    assert classes["conversions"][cold] == 6 and classes[ncu.OTHER][cold] == 1
    assert "global stores" not in classes, "classes without samples are dropped"
    assert sum(s[hot] + s[cold] for s in classes.values()) == sum(row[1] for row in GEMM_ROWS)
    assert list(classes)[-1] == ncu.OTHER


def test_opcode_drops_the_predicate():
    assert ncu.opcode("@!P0  BRA 0x300") == "BRA"
    assert ncu.opcode("WARPGROUP.DEPBAR.LE gsb0, 0x1") == "WARPGROUP.DEPBAR.LE"
    assert ncu.instruction_class("DEPBAR.LE SB0, 0x0") == "TMA and bulk waits"
    for wgmma in ("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ",  # bf16 / fp16
                  "QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24"):  # fp8
        assert ncu.instruction_class(wgmma) == "WGMMA issue"
    assert ncu.instruction_class("STS.128 [R1], R4") == "shared stores"
    assert ncu.instruction_class("BARX R1") == ncu.OTHER, "whole dotted parts only"


def test_exec_needs_a_kernel_name_regex(capsys):
    with pytest.raises(SystemExit):
        ncu.main(["--exec", "build/csrc-tests/fp8_test"])
    assert "--kernel-name" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ncu.main(["k8", "--exec", "ls", "--kernel-name", "x"])


def test_a_source_page_without_instructions_is_an_error():
    with pytest.raises(ValueError, match="no SASS source page"):
        ncu.parse_source_csv("==PROF== No kernels were profiled.\n")


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
    assert [p for p in problems if ladder.runs("cudnn-fe", p)] == problems  # bf16 and its FP8 SDPA
