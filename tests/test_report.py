"""Results files: schema, provenance and the table builders used by compare, docs, notebooks."""

import copy
import json

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
    md = report.markdown_table(headers, rows)
    assert md.splitlines()[0] == "| problem | k1 | k2 |"
    assert "NVIDIA H200" in report.provenance(GOOD["meta"]) and "720 TFLOP/s" in report.provenance(GOOD["meta"])


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
    assert all(r["status"] != "ok" or r["rel_err"] is not None for r in doc["rows"])


def test_readme_ladder_table_is_generated_and_current(tmp_path):
    copy_path = tmp_path / "README.md"
    copy_path.write_text((report.ROOT / "README.md").read_text())
    assert not report.update_readme(copy_path), "run python -m tools.report readme"
    from kernels.registry import rung_names

    text = copy_path.read_text()
    assert all(f"[{n.upper()}](kernels/{n}.py)" in text for n in rung_names())
