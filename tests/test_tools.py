"""The command-line tools in their no-GPU mode: what a reader without a Hopper GPU gets."""

import importlib
import json
import subprocess

import pytest
from support import ROOT

from kernels.registry import rung_names
from tools import compare, inspect


def test_compare_without_gpu_shows_compile_reports_and_recorded_numbers(capsys):
    assert compare.main(["k1", "k2", "fa4", "--cpu", "--json", "--causal", "no"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["mode"] == "cpu"
    assert [r["kernel"] for r in result["inspect"]] == ["k1", "k2"]
    for r in result["inspect"]:
        assert r["status"] == "ok" and r["registers"] > 0 and r["sass_mix"]["FFMA"] > 0
    rec = result["recorded"]
    assert "error" not in rec, f"the recorded H200 numbers are missing: {rec['error']}"
    kernels = {r["kernel"] for r in rec["rows"]}
    assert kernels == {"k1", "k2", "fa4"}, f"results/h200/ladder.json has rows for {kernels} only"


def test_compare_table_output(capsys):
    assert compare.main(["k2", "--cpu", "--causal", "yes", "--seqlen", "1024"]) == 0
    text = capsys.readouterr().out
    assert "registers / thread" in text and "SHFL" in text


@pytest.mark.parametrize("argv", [["nope"], ["k2", "--causal", "maybe"], ["k2", "--seqlen", "0"]])
def test_compare_rejects_bad_arguments(argv):
    with pytest.raises(SystemExit) as exc:
        compare.main(argv + ["--cpu"])
    assert exc.value.code == 2


@pytest.mark.parametrize("tool,argv", [
    ("inspect", ["k1", "--record"]),  # would have rewritten results/inspect.json with k1 alone
    ("inspect", ["--record", "--head-dim", "64"]),
    ("inspect", ["k2", "--head-dim", "0"]),
    ("inspect", ["k2", "--head-dim", "96"]),  # named, and it cannot: no silent "unsupported" row
    ("inspect", ["--production-ws", "--head-dim", "96"]),
    ("compare", ["k11:", "--cpu"]),
    ("compare", ["k11:block_n=160,block_n=128", "--cpu"]),
    ("ncu", ["nosuch"]),
    ("ncu", ["k2", "--head-dim", "0"]),
    ("ncu", ["k2", "--head-dim", "96"]),
    ("report", ["show", "nosuch"]),
    ("report", ["show", "../../etc/passwd"]),
])
def test_tools_refuse_bad_arguments_with_exit_status_2(tool, argv, capsys):
    module = importlib.import_module(f"tools.{tool}")
    with pytest.raises(SystemExit) as exc:
        module.main(argv)
    assert exc.value.code == 2 and "error:" in capsys.readouterr().err
    assert not subprocess.run(["git", "status", "--porcelain", "results"], cwd=ROOT, capture_output=True,
                              text=True).stdout


@pytest.mark.parametrize("variant,why,extra", [
    ("k11:block_n=7", "block_n must be a multiple of 16", []),
    ("k11:block_n='abc'", "block_n must be an integer", []),
    ("k12:block_n=160", "dtype bf16 unsupported", ["--dtype", "bf16"]),
    ("k11:pingpong='yes'", "pingpong must be True or False", [])])
def test_compare_checks_a_variants_knobs_without_compiling(variant, why, extra, capsys):
    assert compare.main([variant, "--cpu", "--causal", "no", "--seqlen", "1024", *extra]) == 2
    assert why in capsys.readouterr().err


def test_compare_takes_each_rungs_own_dtype_and_the_docs_spelling(capsys):
    """No --dtype: an FP8-only rung runs e4m3 (not a refusal of bf16); K4 is k4."""
    assert compare.native_dtypes(["k12"]) == ["e4m3"]
    assert compare.native_dtypes(["k12", "k11", "fa4"]) == ["bf16", "e4m3"]
    assert compare.canonical_name("K4") == "k4"
    assert compare.canonical_name("K11:block_n=160") == "k11:block_n=160"
    assert compare.main(["K12", "--cpu", "--causal", "no", "--seqlen", "1024", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["problem"]["dtype"] for r in report["inspect"]] == ["e4m3"]


def test_rungs_refuse_grids_past_the_launch_limits():
    from kernels.harness import AttentionProblem
    from kernels.registry import rung_module

    for shape in (dict(batch=70000, seqlen_q=1, seqlen_k=1), dict(heads_q=70000, heads_kv=70000)):
        assert "must be <= 65535" in rung_module("k2").can_implement(AttentionProblem(**shape))


def test_inspect_cli_json(capsys):
    assert inspect.main(["k1", "--head-dim", "64", "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["kernel"] == "k1" and report["problem"]["head_dim"] == 64
    assert report["local_bytes"] == 0 and report["registers"] > 0


def test_inspect_reports_the_lse_variant():
    from kernels.harness import AttentionProblem

    report = inspect.inspect("k1", AttentionProblem(head_dim=64), has_lse=True)
    assert report["status"] == "ok" and report["has_lse"] and report["registers"] > 0
    assert "has_lse" not in inspect.inspect("k1", AttentionProblem(head_dim=64))


def test_inspect_reports_unsupported_problems():
    from kernels.harness import AttentionProblem

    report = inspect.inspect("k1", AttentionProblem(head_dim=96))
    assert report["status"].startswith("unsupported: k1: head_dim 96 unsupported")


def test_recorded_compile_reports_cover_every_rung():
    doc = inspect.load_recorded()
    recorded = {r["kernel"] for r in doc["reports"]}
    assert set(rung_names()) <= recorded, "run python -m tools.inspect --record"
    assert doc["meta"]["arch"] == "sm_90a" and doc["meta"]["commit"]


def test_opcode_mix_parses_predicated_instructions():
    sass = """
        /*0010*/                   FFMA R1, R2, R3, R4 ;
        /*0020*/              @!P0 SHFL.BFLY PT, R5, R6, 0x1, 0x1f ;
        /*0030*/               @P1 LDG.E.128 R8, desc[UR4][R2.64] ;
    """
    assert inspect.opcode_mix(sass) == {"FFMA": 1, "SHFL": 1, "LDG": 1}


def test_main_loop_facts_count_the_loop_and_the_turn():
    """The smallest loop with one BAR.SYNC and one BAR.ARV, on its fast path (an mbarrier
    wait's retry branch not taken); the turn runs from after BAR.SYNC to BAR.ARV."""
    sass = """
        /*0000*/                   MOV R1, R2 ;
.L_x_1:
        /*0010*/                   UIADD3 UR4, UR4, 0x1, URZ ;
        /*0020*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3 ;
        /*0030*/               @P0 BRA `(.L_x_2) ;
        /*0040*/                   NOP ;
.L_x_2:
        /*0050*/                   BAR.SYNC.DEFER_BLOCKING R4, 0x100 ;
        /*0060*/                   ULEA UR6, UR4, UR5, 0xb ;
        /*0070*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], RZ, !UPT ;
        /*0080*/                   FMUL R8, R8, R9 ;
        /*0090*/                   BAR.ARV R4, 0x100 ;
        /*00a0*/                   MUFU.EX2 R10, R10 ;
        /*00a2*/                   FFMA R12, R12, R13, R14 ;
        /*00a4*/               @!P0 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR10+0x20], RZ ;
        /*00a8*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*00ac*/                   MUFU.EX2 R11, R11 ;
        /*00b0*/               @P1 BRA `(.L_x_1) ;
        /*00c0*/                   EXIT ;
    """
    # pv_wait: the instructions between the end of the turn and the wait for every GEMM, of
    # which exp2_under_own_pv MUFU.EX2 and ffma_under_own_pv FFMA; first_arrive: the mbarrier
    # arrive's place after the turn
    assert inspect.main_loop_facts(sass) == {"instructions": 14, "uniform": 2, "turn": 4,
                                             "turn_mma": 1, "turn_fp": 1, "pv_wait": 3,
                                             "exp2_under_own_pv": 1, "ffma_under_own_pv": 1,
                                             "first_arrive": 2, "exp2": 2, "packs_among_exp2": 0}
    assert inspect.main_loop_facts(sass.replace("BAR.ARV", "NOP")) is None
    # P's packs (F2FP) before the last exponential, not after it
    pack = "F2FP.BF16.F32.PACK_AB"
    assert inspect._packs_among_exp2(["MUFU.EX2", pack, "MUFU.EX2", pack]) == 1


def test_recorded_compile_reports_match_the_code():
    """The docs show results/inspect.json; it must describe the rungs as they are now."""
    from kernels.harness import AttentionProblem

    compared = set()
    for recorded in inspect.load_recorded()["reports"]:
        problem = AttentionProblem.from_dict(recorded["problem"])
        if problem.head_dim != 128 or problem.causal:
            continue
        compared.add(recorded["kernel"])
        live = inspect.inspect(recorded["kernel"], problem)
        assert (live["registers"], live["sass_mix"]) == (recorded["registers"], recorded["sass_mix"]), \
            f"{recorded['kernel']}: results/inspect.json is stale: run python -m tools.inspect --record"
    assert set(rung_names()) <= compared, \
        "results/inspect.json lacks a head_dim 128 report: run python -m tools.inspect --record"


def test_build_ext_refuses_plain_sm90(capsys):
    from tools import build_ext

    assert build_ext.main(["--arch", "90"]) == 2
    assert "90a" in capsys.readouterr().err


def test_power_samples_parse_and_average_over_a_window():
    from tools import power

    text = ("2026/12/04 14:00:00.000, 1650, 660.5, 60\n"
            "2026/12/04 14:00:00.050, 1610, 670.5, 62\n"
            "[Not Supported]\n"
            "2026/12/04 14:00:01.000, 1980, 80.0, 35\n")
    samples = power.parse_samples(text)
    assert [s[1:] for s in samples] == [(1650, 660.5, 60), (1610, 670.5, 62), (1980, 80.0, 35)]
    start = samples[0][0]
    means = power.window_means(samples, start, start + 0.1)
    assert means == {"mhz": 1630, "watts": 665.5, "celsius": 61, "samples": 2}
    assert power.window_means(samples, start + 2, start + 3) is None
    assert power.main(["k11", "--seconds", "0"]) == 2  # no GPU here: a clear refusal
    assert power.main(["k12", "--dtype", "e4m3", "--seconds", "0"]) == 2  # the FP8 rungs' inputs


def test_inspect_lists_rungs_that_cannot_compile_under_the_table(capsys, monkeypatch):
    """All rungs at head_dim 256: a rung refused there is a line under the table, not a column of
    its reason squeezing the others."""
    import kernels.registry

    refusal = "unsupported: k1: head_dim 256 unsupported"

    def fake(name, problem, **kwargs):
        if name == "k1":
            return {"kernel": "k1", "problem": problem.to_dict(), "status": refusal}
        return {"kernel": name, "problem": problem.to_dict(), "status": "ok", "registers": 168,
                "sass_mix": {"STL": 0, "LDL": 0}, "sass_total": 100, "compile_s": 1.0}

    monkeypatch.setattr(inspect, "inspect", fake)
    monkeypatch.setattr(kernels.registry, "rung_names", lambda: ["k1", "k4"])
    assert inspect.main(["--head-dim", "256"]) == 0
    table, line, _ = capsys.readouterr().out.partition(f"k1: not compiled: {refusal}")
    assert line and "k4" in table and "registers / thread" in table and "unsupported" not in table


def test_sanitize_reads_each_tools_summary(monkeypatch):
    from tools import sanitize

    def fake_run(text, code=0):
        return lambda *a, **k: subprocess.CompletedProcess(a, code, stdout=text, stderr="")

    done = "launch k13 d128 causal=False: ok (rel_err 2.0e-03)\nlaunches done: 0 wrong\n"
    monkeypatch.setattr(sanitize, "sanitizer", lambda: "compute-sanitizer")
    cases = [
        (done + "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n", 0, True),
        (done + "========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)\n", 0, False),
        (done + "========= ERROR SUMMARY: 0 errors\n", 0, True),
        (done + "========= ERROR SUMMARY: 3 errors\n", 0, False),
        ("launches done: 1 wrong\n========= ERROR SUMMARY: 0 errors\n", 1, False),  # a wrong output
        ("Traceback (most recent call last):\n", 1, False),                         # no summary at all
    ]
    for text, code, clean in cases:
        monkeypatch.setattr(sanitize.subprocess, "run", fake_run(text, code))
        assert sanitize.run_tool("racecheck", "k13", 128)[0] is clean, text


def test_inspect_reads_a_report_made_with_the_same_arguments(tmp_path, monkeypatch):
    """$KERNELS_INSPECT_CACHE: a report made once is read back by any later call with the same
    rung, problem and knobs (the run's workers and notebooks share it); other arguments compile."""
    from kernels.harness import AttentionProblem

    made = []

    def fake(name, problem, has_lse, knobs):
        made.append((name, has_lse, dict(knobs)))
        return {"kernel": name, "registers": len(made), "facts": (1, 2)}

    monkeypatch.setattr(inspect, "_inspect", fake)
    monkeypatch.setenv(inspect.REPORT_CACHE_ENV, str(tmp_path))
    first = inspect.inspect("k4", AttentionProblem(head_dim=64))
    assert first == {"kernel": "k4", "registers": 1, "facts": [1, 2]}  # as JSON keeps it, every time
    assert inspect.inspect("k4", AttentionProblem(head_dim=64)) == first and len(made) == 1
    inspect.inspect("k4", AttentionProblem(head_dim=64), pingpong=False)
    inspect.inspect("k4", AttentionProblem(head_dim=128))
    inspect.inspect("k4", AttentionProblem(head_dim=64), has_lse=True)
    assert len(made) == 4 and len(list(tmp_path.glob("*.json"))) == 4
    monkeypatch.delenv(inspect.REPORT_CACHE_ENV)
    inspect.inspect("k4", AttentionProblem(head_dim=64))
    assert len(made) == 5  # no folder, no cache
