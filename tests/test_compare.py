"""tools.compare as a reader without a GPU meets it: help, peers that cannot be compiled here,
shapes that are not recorded, kernels that can run none of the requested shapes."""

from __future__ import annotations

import json

import pytest

from kernels.harness.problem import AttentionProblem
from tools import compare, report

META = {"suite": "ladder", "gpu": "NVIDIA H200", "driver": "580", "cuda": "13.0", "torch": "2.11",
        "cutlass_dsl": "4.8.1", "commit": "abc123", "date": "2026-11-30", "ceilings": {"bf16_gemm_tflops": 700.0}}


def row(kernel, problem: AttentionProblem, tflops=100.0, status="ok"):
    ok = status == "ok"
    return {"kernel": kernel, "problem": problem.to_dict(), "ms": {"median": 1.0, "p20": 1.0, "p80": 1.0} if ok else None,
            "tflops": tflops if ok else None, "gbps": None, "rel_err": 0.001 if ok else None, "status": status}


@pytest.fixture()
def results(tmp_path, monkeypatch):
    """A results root with the ladder at head_dim 128 only (as committed today)."""
    monkeypatch.setattr(report, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(report, "ROOT", tmp_path)
    (tmp_path / "results" / "h200").mkdir(parents=True)
    rows = [row(k, p, 10.0 * (i + 1)) for i, k in enumerate(("k2", "fa4"))
            for c in (False, True) for p in compare.fa3_paper_shapes(128, c, (1024, 4096))]
    (tmp_path / "results" / "h200" / "ladder.json").write_text(json.dumps({"meta": META, "rows": rows}))
    return tmp_path


def test_help_text(capsys):
    parser = compare.build_parser()
    for action in parser._actions:
        assert action.help and len(action.help) > 8, f"{action.option_strings or action.dest} has no help text"
    with pytest.raises(SystemExit) as exc:
        compare.main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "`" not in text.split("\n\n")[1], "the description shows raw backticks"
    assert "Compare attention kernels" in text and "Exit status" in text


def test_recorded_view_names_missing_shapes_and_shows_the_nearest(results):
    problems = compare.fa3_paper_shapes(64, True, (4096,))
    rec = compare.recorded_rows(["k2", "fa4"], problems)
    assert rec["rows"] == []
    assert rec["missing"] == {"k2": ["b4 s4096 h32 d64 causal"], "fa4": ["b4 s4096 h32 d64 causal"]}
    assert rec["shapes"]["k2"] == ["head_dim 128: seqlen 1024, 4096; causal and not (ladder.json)"]
    assert {(r["kernel"], report.attention_label(r["problem"])) for r in rec["nearest"]} == \
        {("k2", "b4 s4096 h16 d128 causal"), ("fa4", "b4 s4096 h16 d128 causal")}


def test_recorded_view_at_a_recorded_shape_has_no_missing_rows(results):
    rec = compare.recorded_rows(["k2", "fa4"], compare.fa3_paper_shapes(128, False, (1024, 4096)))
    assert len(rec["rows"]) == 4 and rec["missing"] == {} and rec["nearest"] == []


def test_recorded_view_without_results(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "RESULTS", tmp_path / "nothing")
    rec = compare.recorded_rows(["k2"], compare.fa3_paper_shapes(128, False, (1024,)))
    assert rec["rows"] == [] and "records no dense-attention rows of k2" in rec["error"]


def test_paged_and_decode_rows_are_named_or_shown_in_their_unit(capsys):
    """Paged rows (problem fields past AttentionProblem's) are not dense shapes: the kernel is
    named with the file that holds them instead of crashing on them; decode rows, which record
    GB/s and no TFLOP/s, come in a GB/s table."""
    rec = compare.recorded_rows(["cuda-paged-decode"], compare.fa3_paper_shapes(128, False, (4096,)))
    assert rec["rows"] == [] and rec["elsewhere"] == {"cuda-paged-decode": ["attention.json"]}
    assert "cuda-paged-decode has rows on paged or ragged KV in attention.json" in rec["error"]
    # A decode kernel runs none of these dense shapes (exit 2, as on the GPU), and says where its rows are.
    assert compare.main(["cuda-paged-decode", "k2", "--cpu", "--seqlen", "4096", "--causal", "no"]) == 2
    assert "cuda-paged-decode: its rows on paged or ragged KV are in attention.json" in capsys.readouterr().out
    assert compare.main(["cuda-decode-split", "--cpu", "--seqlen", "1", "--causal", "no"]) == 0
    text = capsys.readouterr().out
    assert "Recorded on the H200: GB/s of K and V" in text and "b16 s1/4096 h32/8 d128" in text
    assert "Recorded on the H200: TFLOP/s" not in text


def test_readme_example_prints_what_is_recorded(capsys):
    """The README's CPU-mode example: at head_dim 64 (not recorded yet) it still shows numbers,
    says what is missing and what is recorded; fa4 says why it has no compile report."""
    argv = ["k2", "fa4", "--seqlen", "4096", "--head-dim", "64", "--causal", "yes", "--cpu"]
    assert compare.main(argv) == 0
    text = capsys.readouterr().out
    assert "no rows" not in text
    assert "fa4: no compile report: fa4 is a peer" in text and "registers / thread" in text
    rec = compare.recorded_rows(["k2", "fa4"], compare.fa3_paper_shapes(64, True, (4096,)))
    if rec["missing"]:  # until the GPU run records d64
        assert "Not recorded in results/: b4 s4096 h32 d64 causal" in text and "k2: head_dim 128" in text
        assert rec["nearest"] and "Nearest recorded rows" in text
    assert "Recorded on the H200: TFLOP/s" in text and "results/h200/ladder.json, measured by" in text


def test_peer_without_gpu_is_explained_and_its_rows_shown(capsys):
    assert compare.main(["k1", "fa4", "--cpu", "--json", "--causal", "no", "--seqlen", "1024"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [r["kernel"] for r in result["inspect"]] == ["k1"]
    assert "peer" in result["not_compiled"]["fa4"] and "flash_attn.cute" in result["not_compiled"]["fa4"]
    assert {r["kernel"] for r in result["recorded"]["rows"]} == {"k1", "fa4"}


def test_rung_that_runs_none_of_the_shapes_exits_non_zero(capsys):
    assert compare.main(["k1", "--cpu", "--head-dim", "256", "--causal", "no", "--seqlen", "1024"]) == 2
    err = capsys.readouterr().err
    assert "k1 can run none of the requested shapes (b16 s1024 h8 d256)" in err and "head_dim 256" in err


def test_dtype_option_asks_for_each_shape_in_each_dtype(capsys):
    """--dtype bf16 e4m3: every shape in both dtypes, so an FP8 rung and a bf16 one each find
    theirs; an FP8 rung alone on bf16 shapes runs none of them."""
    args = compare.build_parser().parse_args(["k10", "k12", "--seqlen", "1024", "--causal", "no",
                                              "--dtype", "bf16", "e4m3"])
    args.heads = compare.default_heads(args.head_dim)
    problems = compare.problems_from_args(args)
    assert [p.dtype for p in problems] == ["bf16", "e4m3"] and problems[0] == problems[1].with_(dtype="bf16")
    assert compare.unrunnable(["k10", "k12"], problems) == {}
    assert "k12" in compare.unrunnable(["k10", "k12"], problems[:1])


def test_on_a_gpu_a_kernel_with_no_measured_row_exits_non_zero(monkeypatch, capsys):
    import torch

    problems = compare.fa3_paper_shapes(128, False, (1024,))

    def fake_run_gpu(names, probs, progress=None):
        rows = [row("k2", problems[0]), row("fa4", problems[0], status="unsupported: fa4: flash_attn.cute not importable")]
        return {"mode": "gpu", "bf16_gemm_tflops": 700.0, "rows": rows}

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(compare, "run_gpu", fake_run_gpu)
    assert compare.main(["k2", "fa4", "--causal", "no", "--seqlen", "1024"]) == 2
    out = capsys.readouterr()
    assert "fa4 can run none of the requested shapes" in out.err and "not importable" in out.err
    assert "k2" in out.out  # the kernels that ran are still shown

    def fake_wrong(names, probs, progress=None):
        return {"mode": "gpu", "bf16_gemm_tflops": 700.0,
                "rows": [row("k2", problems[0], status="wrong: rel_err 0.5 > 0.01")]}

    monkeypatch.setattr(compare, "run_gpu", fake_wrong)
    assert compare.main(["k2", "--causal", "no", "--seqlen", "1024"]) == 1


def test_no_runnable_shape_needs_every_row_unsupported():
    p = AttentionProblem()
    rows = [row("k1", p, status="unsupported: x"), row("k1", p.with_(causal=True)), row("k2", p, status="unsupported: y")]
    assert compare.no_runnable_shape(rows, ["k1", "k2"]) == {"k2": "y"}


def test_a_rung_with_knobs_is_a_kernel_of_its_own(monkeypatch):
    from kernels.registry import get, rung_module

    module = rung_module("k11")
    seen = {}
    monkeypatch.setattr(module, "compile_kernel", lambda problem, **knobs: seen.update(knobs) or "compiled")
    runner = get("k11:rescale_before_pv=True,pingpong=False")
    assert runner.name == "k11:rescale_before_pv=True,pingpong=False" and runner.kind == "rung"
    runner.prepare(AttentionProblem(head_dim=128))
    assert seen == {"rescale_before_pv": True, "pingpong": False}
    for spec, why in (("k11:colour=1", "knob among"), ("k11:pingpong=maybe", "Python literal"),
                      ("fa4:pingpong=True", "ladder's rungs"), ("k2:plan=1", "none")):
        with pytest.raises(KeyError, match=why):
            get(spec)


def test_a_rung_variant_sets_fields_of_its_tile_plan(monkeypatch):
    """``k11:block_n=160,num_stages=3``: the rung's default plan at the problem's head_dim with
    those fields replaced, the other knobs passed on; a rung without a plan refuses them."""
    import dataclasses

    from kernels.registry import get, rung_module

    module = rung_module("k11")
    seen = {}
    monkeypatch.setattr(module, "compile_kernel", lambda problem, **knobs: seen.update(knobs) or "compiled")
    runner = get("k11:block_n=160,num_stages=3,pingpong=False")
    for head_dim in (64, 256):
        seen.clear()
        runner.prepare(AttentionProblem(head_dim=head_dim))
        want = dataclasses.replace(module.TILE_CONFIGS[head_dim], block_n=160, num_stages=3)
        assert seen == {"plan": want, "pingpong": False} and want != module.TILE_CONFIGS[head_dim]
    with pytest.raises(KeyError, match="knob among"):
        get("k2:block_n=160")


def test_compare_takes_a_rung_variant_and_refuses_a_bad_knob(capsys):
    assert compare.main(["k11", "k11:rescale_before_pv=True", "--cpu", "--json", "--causal", "no",
                         "--seqlen", "1024"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert "variant of rung k11" in result["not_compiled"]["k11:rescale_before_pv=True"]
    with pytest.raises(SystemExit):
        compare.main(["k11:nope=1", "--cpu"])
    assert "knob among" in capsys.readouterr().err


def test_head_dim_that_does_not_divide_2048_gets_a_power_of_two_of_heads():
    assert [compare.default_heads(d) for d in (64, 128, 256, 96, 192, 80)] == [32, 16, 8, 16, 8, 32]
    args = compare.build_parser().parse_args(["k2", "--head-dim", "96", "--seqlen", "1024", "--causal", "no"])
    args.heads, args.dtype = compare.default_heads(args.head_dim), ["bf16"]
    assert [p.label() for p in compare.problems_from_args(args)] == ["b16 s1024 h16 d96"]


def test_without_a_gpu_a_kernel_that_runs_none_of_the_shapes_exits_as_on_the_gpu(capsys):
    """The production decode kernels and the peers have shape and dtype limits that hold on any
    machine: a CPU-only run refuses them with the reason, as the GPU run would (exit 2)."""
    assert compare.main(["cuda-paged-decode", "--cpu", "--causal", "no", "--seqlen", "1024"]) == 2
    assert "cuda-paged-decode can run none of the requested shapes" in capsys.readouterr().err
    assert compare.main(["fa4", "--cpu", "--dtype", "e4m3", "--causal", "no", "--seqlen", "1024"]) == 2
    assert "dtype e4m3 unsupported" in capsys.readouterr().err
