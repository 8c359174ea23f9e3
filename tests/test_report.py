"""Results files: schema, provenance and the table builders used by compare, docs, notebooks."""

import copy
import functools
import json
import re

import pytest

from tools import report

GOOD = {
    "meta": {"suite": "ladder", "gpu": "NVIDIA H200", "driver": "580", "cuda": "13.0", "torch": "2.11",
             "cutlass_dsl": "4.8.1", "commit": "abc123", "date": "2026-11-30",
             "ceilings": {"copy_tbps": 4.2, "bf16_gemm_tflops": 720.0}},
    "rows": [
        {"kernel": "k1", "problem": {"batch": 4, "seqlen_q": 4096, "seqlen_k": 4096, "heads_q": 16,
                                     "heads_kv": 16, "head_dim": 128, "causal": False, "dtype": "bf16"},
         "ms": {"median": 10.0, "p20": 9.9, "p80": 10.1}, "tflops": 13.7, "gbps": 1.0, "rel_err": 0.002,
         "status": "ok"},
        {"kernel": "k2", "problem": {"batch": 4, "seqlen_q": 4096, "seqlen_k": 4096, "heads_q": 16,
                                     "heads_kv": 16, "head_dim": 128, "causal": False, "dtype": "bf16"},
         "ms": None, "tflops": None, "gbps": None, "rel_err": 0.5, "status": "wrong: rel_err 5e-01 > 1e-02"},
    ],
}


def test_valid_document_passes():
    assert report.validate(copy.deepcopy(GOOD)) == GOOD


@pytest.mark.parametrize("breakage", [
    lambda d: d.pop("rows"),
    lambda d: d["meta"].pop("commit"),
    lambda d: d["meta"].update(ceilings={}),
    lambda d: d["rows"][0].pop("status"),
    lambda d: d["rows"][0].update(status="fine"),
    lambda d: d["rows"][0].update(ms=None),
])
def test_malformed_documents_fail(breakage):
    doc = copy.deepcopy(GOOD)
    breakage(doc)
    with pytest.raises(report.ResultsError):
        report.validate(doc)


def test_pivot_and_markdown():
    headers, rows = report.pivot(GOOD)
    assert headers == ["problem", "k1", "k2"]
    assert rows == [["b4 s4096 h16 d128", "13.7", "wrong"]]
    assert report.pivot(GOOD, value="us")[1] == [["b4 s4096 h16 d128", "10000", "wrong"]]  # ms -> us
    md = report.markdown_table(headers, rows)
    assert md.splitlines()[0] == "| problem | k1 | k2 |"
    assert "NVIDIA H200" in report.provenance(GOOD["meta"]) and "720 TFLOP/s" in report.provenance(GOOD["meta"])


def test_shape_label_puts_an_fp8_row_beside_the_bf16_rows_of_its_shape():
    doc = copy.deepcopy(GOOD)
    fp8 = copy.deepcopy(doc["rows"][0])
    fp8.update(kernel="k12", tflops=27.4)
    fp8["problem"]["dtype"] = "e4m3"
    doc["rows"].append(fp8)
    assert report.pivot(doc)[1] == [["b4 s4096 h16 d128", "13.7", "wrong", "-"],
                                    ["b4 s4096 h16 d128 e4m3", "-", "-", "27.4"]]
    assert report.pivot(doc, label=report.shape_label)[1] == [["b4 s4096 h16 d128", "13.7", "wrong", "27.4"]]
    assert report.kernel_dtypes(doc, ["k1", "k12"]) == {"k1": "bf16", "k12": "e4m3"}
    refused = copy.deepcopy(fp8)  # a bf16 rung asked to run the e4m3 problem (tools.compare does)
    refused.update(kernel="k1", ms=None, tflops=None, status="unsupported: k1: dtype e4m3 unsupported")
    doc["rows"].insert(0, refused)
    assert report.pivot(doc, label=report.shape_label)[1] == [["b4 s4096 h16 d128", "13.7", "wrong", "27.4"]]
    twice = copy.deepcopy(fp8)
    twice["problem"]["dtype"] = "bf16"
    doc["rows"].append(twice)  # k12 measured in two dtypes at one shape: a merged row would hide one
    with pytest.raises(report.ResultsError, match="several dtypes"):
        report.pivot(doc, label=report.shape_label)


def test_load_reports_missing_and_broken_files(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(report, "ROOT", tmp_path)
    with pytest.raises(report.ResultsError, match="not found"):
        report.load("ladder")
    (tmp_path / "results" / "h200").mkdir(parents=True)
    (tmp_path / "results" / "h200" / "ladder.json").write_text("{not json")
    with pytest.raises(report.ResultsError, match="not valid JSON"):
        report.load("ladder")
    (tmp_path / "results" / "h200" / "ladder.json").write_text(json.dumps(GOOD))
    assert report.load("ladder")["meta"]["gpu"] == "NVIDIA H200"


@pytest.mark.parametrize("path", sorted(report.RESULTS.glob("*/*.json")), ids=lambda p: p.parent.name + "/" + p.name)
def test_committed_results_follow_the_schema(path):
    doc = report.validate(json.loads(path.read_text()), str(path))
    assert doc["meta"]["gpu"].startswith("NVIDIA")
    assert all(r["status"] != "ok" or r["rel_err"] is not None or checked_elsewhere(r, path)
               for r in doc["rows"]), "an ok row whose output nobody checked"


@functools.cache
def committed_results(path) -> dict:
    """A committed results file, read once per test session (checked_elsewhere asks per row)."""
    return json.loads(path.read_text())


def checked_elsewhere(row: dict, path) -> bool:
    """A profile row (counters of one launch) whose kernel and shape the ladder suite checked
    against the reference at the same commit; or, in the model suite, transformers' own rows:
    they are the reference the others are checked against."""
    if path.stem == "model":
        return row["kernel"].startswith("transformers")
    if path.stem != "profile":
        return False
    ladder = committed_results(path.parent / "ladder.json")
    profile_commit = committed_results(path)["meta"]["commit"]
    return ladder["meta"]["commit"] == profile_commit and any(
        r["kernel"] == row["kernel"] and r["problem"] == row["problem"] and r["status"] == "ok"
        and r["rel_err"] is not None for r in ladder["rows"])


def test_readme_ladder_table_is_generated_and_current(tmp_path):
    copy_path = tmp_path / "README.md"
    copy_path.write_text((report.ROOT / "README.md").read_text())
    assert not report.update_readme(copy_path), "run python -m tools.report readme"
    from kernels.registry import rung_names

    text = copy_path.read_text()
    assert all(f"[{n.upper()}](kernels/{n}.py)" in text for n in rung_names())


def test_ladder_overview_divides_by_the_best_peer_of_the_same_dtype():
    """The "% of" column takes the fastest peer of the rung's dtype in the same run, not one
    named peer; a dtype without a measured peer gets "-"."""
    def row(kernel, tflops, dtype="bf16"):
        problem = {"batch": 1, "seqlen_q": 16384, "seqlen_k": 16384, "heads_q": 16, "heads_kv": 16,
                   "head_dim": 128, "causal": False, "dtype": dtype}
        return {"kernel": kernel, "problem": problem, "status": "ok", "tflops": tflops}

    doc = {"meta": GOOD["meta"], "rows": [row("fa4", 600.0), row("sdpa-cudnn", 650.0), row("k13", 715.0),
                                          row("k12", 900.0, "e4m3"), row("k11", 520.0)]}
    headers, rows = report.ladder_overview(doc)
    assert headers[-1] == "% of the best peer"
    cells = {r[0].split("]")[0][1:]: r[-1] for r in rows}
    assert (cells["K13"], cells["K11"], cells["K12"]) == ("110%", "80%", "-")
    assert report.best_peer_note(doc) == "The best peer in that run: sdpa-cudnn at 650 TFLOP/s (bf16)."


def test_provenance_leaves_out_versions_a_suite_does_not_use():
    meta = {**GOOD["meta"], "cutlass_dsl": None}
    text = report.provenance(meta)
    assert "None" not in text and "CuTe DSL" not in text and "torch 2.11" in text
    assert "CuTe DSL 4.8.1" in report.provenance(GOOD["meta"])


@pytest.mark.parametrize("problem,label", [
    ({"batch": 4, "seqlen_q": 4096, "seqlen_k": 4096, "heads_q": 16, "heads_kv": 16, "head_dim": 128,
      "causal": True, "dtype": "bf16"}, "b4 s4096 h16 d128 causal"),
    ({"batch": 16, "seqlen_q": 1, "seqlen_k": 4096, "heads_q": 32, "heads_kv": 8, "head_dim": 128,
      "causal": False, "dtype": "bf16", "page_size": 16, "paged": True}, "b16 s1/4096 h32/8 d128 page 16"),
    ({"batch": 6, "seqlens": [4096, 3000, 100], "heads_q": 32, "heads_kv": 8, "head_dim": 128, "causal": True,
      "dtype": "bf16", "page_size": 64, "paged": True, "ragged": True}, "b6 s100..4096 h32/8 d128 causal page 64"),
    ({"batch": 8, "seqlen": 4096, "heads_q": 32, "heads_k": 8, "head_dim": 128, "rotary_dim": 64,
      "layout": "half_split", "dtype": "bf16"}, "b8 s4096 h32/8 d128 rot64 half-split"),
    ({"m": 1, "n": 4096, "k": 11008, "a": "e4m3", "b": "e4m3", "out": "bf16"}, "1 x 4096 x 11008"),
    ({"m": 64, "n": 64, "k": 64, "a": "e5m2", "b": "e4m3", "out": "fp16"}, "64 x 64 x 64 e5m2 x e4m3 -> fp16"),
    ({"shape": [8192, 8192], "in": "bf16", "out": "e4m3"}, "8192 x 8192 bf16 -> e4m3"),
])
def test_problem_labels_are_short_and_readable(problem, label):
    assert report.problem_label(problem) == label


def test_committed_results_have_no_raw_labels():
    """Every recorded row gets a label of its kind: no ``key value`` dump of its fields."""
    for suite in report.available():
        for row in report.load(suite)["rows"]:
            assert report.problem_kind(row["problem"]) != "other", (suite, row["problem"])
            label = report.problem_label(row["problem"])
            raw = [f"{key} {'x'.join(map(str, v)) if isinstance(v, list) else v}" for key, v in row["problem"].items()]
            assert not any(pair in label for pair in raw), (suite, label)


def test_gemm_tables_name_their_dimensions():
    doc = {"meta": GOOD["meta"], "rows": [
        {**GOOD["rows"][0], "kernel": "fp8_gemm", "problem": {"m": 1, "n": 2, "k": 3, "a": "e4m3", "b": "e4m3", "out": "bf16"}}]}
    headers, rows = report.pivot(doc)
    assert headers == ["M x N x K", "fp8_gemm"] and rows == [["1 x 2 x 3", "13.7"]]


def test_a_part_replaces_its_rows_and_keeps_the_others():
    from tools import bench

    part = copy.deepcopy(GOOD["rows"][1])
    part.update(ms={"median": 5.0, "p20": 4.9, "p80": 5.1}, tflops=27.5, rel_err=0.002, status="ok")
    other = copy.deepcopy(GOOD["rows"][0])
    other.update(kernel="fa4")
    meta = {**GOOD["meta"], "date": "2026-12-01", "ceilings": {"copy_tbps": 4.3, "bf16_gemm_tflops": 700.0}}
    doc = report.validate(bench.add_part(copy.deepcopy(GOOD), meta, [part, other], "kernels k2 fa4"))
    assert [r["kernel"] for r in doc["rows"]] == ["k1", "k2", "fa4"]  # k2 replaced in place, fa4 appended
    assert doc["rows"][0] == GOOD["rows"][0] and doc["rows"][1]["status"] == "ok"
    assert doc["meta"]["ceilings"] == GOOD["meta"]["ceilings"]  # the first part's fill the tables
    assert [(p["date"], p["covers"]) for p in doc["meta"]["parts"]] == [
        ("2026-11-30", "all"), ("2026-12-01", "kernels k2 fa4")]
    said = report.provenance(doc["meta"])
    assert "in 2 parts: 2026-11-30 (all); 2026-12-01 (kernels k2 fa4)" in said and "first part" in said
    third = bench.add_part(doc, {**meta, "date": "2026-12-02"}, [other], "head_dim 64")
    assert len(third["meta"]["parts"]) == 3 and len(third["rows"]) == 3


@pytest.mark.parametrize("key", ["commit", "gpu", "driver", "torch", "cutlass_dsl", "suite"])
def test_a_part_of_other_code_or_another_machine_is_refused(key):
    from tools import bench

    meta = {**GOOD["meta"], key: "other"}
    with pytest.raises(ValueError, match=key):
        bench.add_part(copy.deepcopy(GOOD), meta, [GOOD["rows"][0]], "kernels k1")


def test_a_filtered_run_says_what_it_covers():
    import argparse

    from tools import bench
    from tools.suites import ladder

    said = bench.filters_said(argparse.Namespace(kernels=None, head_dim=[64, 256], seqlen=[16384]))
    assert said == "head_dim 64 256; seqlen 16384"
    assert bench.filters_said(argparse.Namespace(kernels=None, head_dim=None, seqlen=None)) == "all"
    assert {p.head_dim for p in ladder.problems(head_dims=[128])} == {128}


def test_each_suite_declares_the_filters_it_reads_and_bench_refuses_the_rest(capsys):
    """A suite's FILTERS are exactly the Context filters its source reads, so a filter it would
    ignore (re-measuring everything while --add says the part covers less) is refused first."""
    import importlib
    import inspect

    from tools import bench

    attribute = {"kernels": "ctx.kernels", "seqlen": "ctx.seqlens", "head_dim": "ctx.head_dims"}
    for name in bench.suite_names():
        suite = importlib.import_module(f"tools.suites.{name}")
        source = inspect.getsource(suite)
        read = {f for f, attr in attribute.items() if attr in source}
        assert set(getattr(suite, "FILTERS", ())) == read, name
    with pytest.raises(SystemExit):
        bench.main(["--suite", "attention", "--seqlen", "4096", "--add"])
    assert "attention suite takes no --seqlen filter (it takes none)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--suite", "fp8_accuracy", "--head-dim", "64"])
    assert "takes no --head-dim filter (it takes --kernels, --seqlen)" in capsys.readouterr().err


def test_show_picks_each_tables_value_and_results_folder(capsys, monkeypatch):
    """`show model` / `show rotary` print their own measure (tokens/s, GB/s) rather than a table
    of dashes; every value a row can record may be asked for; --gpu names another folder."""
    assert report.natural_value([{"tflops": None, "gbps": 3800.0}]) == "gbps"
    assert report.natural_value([{"tflops": 650.0, "gbps": 1.0}]) == "tflops"
    if "attention" in report.available():  # decode rows (GB/s) apart from prefill's (TFLOP/s)
        groups = report.show_groups(report.load("attention")["rows"], "attention")
        decode = [rows for _, rows in groups if any(r["kernel"] == "cuda-paged-decode" for r in rows)]
        assert decode and all(report.natural_value(rows) == "gbps" for rows in decode)
        assert all(r.get("gbps") is not None for rows in decode for r in rows if r["status"] == "ok")
    for suite, unit in (("model", "tokens/s"), ("rotary", "GB/s")):
        if suite in report.available():
            assert report.main(["show", suite]) == 0
            assert f"({unit})" in capsys.readouterr().out
    if "model" in report.available():
        assert report.main(["show", "model", "--value", "tokens_per_s", "--columns", "2"]) == 0
        out = capsys.readouterr().out
        assert out.count("(tokens/s)") >= 2, "four implementations, two per table"
    with pytest.raises(SystemExit):
        report.main(["show", "ladder", "--gpu", "h100-nowhere"])
    assert "in results/h100-nowhere" in capsys.readouterr().err


def test_transpose_turns_a_pivot_into_kernel_rows():
    headers, body = ["problem", "k1", "fa4"], [["s1k", "1.0", "2.0"], ["s4k", "3.0", "4.0"]]
    assert report.transpose(headers, body) == (["kernel", "s1k", "s4k"], [["k1", "1.0", "3.0"], ["fa4", "2.0", "4.0"]])


def test_plot_series_differ_and_ticks_are_plain_numbers():
    """Up to twenty series, no two share a colour and marker; a log axis reads 200, 500, not
    2x10^2 (tick labels are SVG text)."""
    styles = [report.series_style(i) for i in range(20)]
    assert len(set(styles)) == 20 and len({color for color, _ in styles}) == 20
    kernels = [f"k{i}" for i in range(1, 17)]
    rows = [{"kernel": k, "problem": {"seqlen_q": s, "head_dim": 128}, "tflops": 40.0 * i + s / 64,
             "status": "ok"} for i, k in enumerate(kernels, 1) for s in (1024, 4096)]
    svg = report.plot_svg({"rows": rows}, kernels)
    assert "times10" not in svg and "10^" not in svg
    assert re.search(r">\s*(100|200|500)\s*<", svg), "plain tick labels expected"
