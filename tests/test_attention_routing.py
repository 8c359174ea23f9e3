"""CPU tests of attention()'s routing by measurement (kernels/extension/backend/attention_routing.py)
on synthetic results files: the fastest backend wins, a backend that cannot run the call is
skipped, a missing file or another GPU keeps the default order, overrides win, and the
production page's table is the one attention() uses."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import pytest
import torch
from support import load_docs_hook  # tests/support.py

from kernels.extension import loader
from kernels.extension.backend import attention_routing as routing
from kernels.extension.ops import attention as ops

# The module (the package re-exports its function `attention` under the same name).
backend = importlib.import_module("kernels.extension.backend.attention")
ROOT = Path(__file__).resolve().parents[1]
DEFAULT = routing.DEFAULT_ORDER

META = {"suite": "attention", "gpu": "NVIDIA H200", "driver": "0", "cuda": "13.0", "torch": "test",
        "cutlass_dsl": None, "commit": "0" * 10, "date": "2026-01-01",
        "ceilings": {"copy_tbps": 4.0, "bf16_gemm_tflops": 700.0}}


def problem(batch=1, seqlen_q=1, seqlen_k=4096, heads_q=32, heads_kv=8, head_dim=128, causal=False, **extra):
    return {"batch": batch, "seqlen_q": seqlen_q, "seqlen_k": seqlen_k, "heads_q": heads_q,
            "heads_kv": heads_kv, "head_dim": head_dim, "causal": causal, "dtype": "bf16", **extra}


def row(kernel, prob, ms, status="ok"):
    timed = status == "ok"
    return {"kernel": kernel, "problem": prob, "ms": {"median": ms} if timed else None, "tflops": None,
            "gbps": None, "rel_err": 1e-3 if timed else None, "status": status}


PREFILL = problem(batch=4, seqlen_q=4096, heads_q=16, heads_kv=16)
PREFILL_CAUSAL = {**PREFILL, "causal": True}
PAGED_DECODE = problem(batch=16, page_size=16, paged=True)
RAGGED = {"batch": 3, "seqlens": [300, 200, 100], "heads_q": 32, "heads_kv": 8, "head_dim": 128,
          "causal": True, "dtype": "bf16", "page_size": 64, "paged": True, "ragged": True}
PAGED_DECODE_B64 = {**PAGED_DECODE, "batch": 64}

ROWS = [
    # prefill d128: fa4 faster at both shapes; the scalar kernel and the SDPA peers do not count
    row("cuda-prefill-tc", PREFILL, 1.3), row("fa4", PREFILL, 0.9), row("torch-sdpa-cudnn", PREFILL, 0.5),
    row("cuda-prefill-tc", PREFILL_CAUSAL, 0.8), row("fa4", PREFILL_CAUSAL, 0.5),
    row("cuda-prefill-scalar", PREFILL, 0.1),
    # decode d128: cuda alone (SDPA peers ignored): no comparison, default order
    row("cuda-decode-split", problem(batch=16), 0.07), row("torch-sdpa-cudnn", problem(batch=16), 0.01),
    # paged decode d128: mixed; cuda 0.5x at one shape and 1.2x at the other -> geomean ~0.77 of fa4
    row("cuda-paged-decode", PAGED_DECODE, 0.05), row("fa4-paged-decode", PAGED_DECODE, 0.1),
    row("cuda-paged-decode", PAGED_DECODE_B64, 0.12), row("fa4-paged-decode", PAGED_DECODE_B64, 0.1),
    # ragged paged prefill d128: fa4 faster
    row("cuda-paged-prefill", RAGGED, 0.8), row("fa4-paged-prefill", RAGGED, 0.5),
    # prefill d64: fa4 fastest but wrong at another shape -> tried last
    row("cuda-prefill-tc", {**PREFILL, "head_dim": 64}, 1.0), row("fa4", {**PREFILL, "head_dim": 64}, 0.5),
    row("fa4", {**PREFILL, "head_dim": 64, "causal": True}, None, "wrong: rel_err 0.5 > 0.01"),
    row("cuda-prefill-tc", {**PREFILL, "head_dim": 64, "causal": True}, 0.6),
    # prefill d256: fa4 could not run (unsupported): cuda alone
    row("cuda-prefill-tc", {**PREFILL, "head_dim": 256}, 2.0),
    row("fa4", {**PREFILL, "head_dim": 256}, None, "unsupported: ImportError: no"),
]


def write_results(root: Path, rows=ROWS, gpu_folder="h200", gpu_name="NVIDIA H200") -> Path:
    path = root / gpu_folder / "attention.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": {**META, "gpu": gpu_name}, "rows": rows}))
    return root


@pytest.fixture(autouse=True)
def fresh_routes(monkeypatch):
    monkeypatch.delenv(backend.ENV_VAR, raising=False)
    monkeypatch.delenv(routing.RESULTS_ENV_VAR, raising=False)
    routing.clear_caches()
    yield
    routing.clear_caches()


@pytest.fixture
def results(tmp_path, monkeypatch):
    root = write_results(tmp_path / "results")
    monkeypatch.setenv(routing.RESULTS_ENV_VAR, str(root))
    return root


@pytest.fixture
def hopper(monkeypatch):
    """Every backend installed and built for sm_90a, as on the H200 (the calls are synthetic)."""
    monkeypatch.setattr(ops, "available", lambda: True)
    monkeypatch.setattr(loader, "build_info", lambda module=None: {"arch": "90a"})
    monkeypatch.setattr(backend, "_fa4", lambda: object())


def call(phase="prefill", head_dim=128, gpu="h200", dtype=torch.bfloat16, masked=False, needs_grad=False,
         capability=(9, 0)):
    return backend.Call("cuda", capability, gpu, dtype, head_dim, phase, masked, needs_grad)


def routes(rows=ROWS):
    return routing.routes_from_results({"meta": META, "rows": rows})


# ---- the table ---------------------------------------------------------------------------------

def test_fastest_measured_backend_goes_first():
    table = routes()
    prefill = table["prefill", 128]
    assert prefill.order == ("fa4", "cuda", "ladder", "torch")
    assert prefill.slowdown["fa4"] == 1.0
    assert prefill.slowdown["cuda"] == pytest.approx(math.sqrt(1.3 / 0.9 * 0.8 / 0.5))
    assert prefill.shapes == 2 and prefill.first_beaten == 0
    assert table["paged-prefill", 128].order == ("fa4", "cuda", "ladder", "torch")


def test_geometric_mean_decides_mixed_shapes():
    paged = routes()["paged-decode", 128]
    assert paged.order == ("cuda", "fa4", "ladder", "torch")
    assert paged.slowdown["cuda"] == pytest.approx(math.sqrt(1.0 * 1.2))
    assert paged.slowdown["fa4"] == pytest.approx(math.sqrt(2.0 * 1.0))
    assert paged.first_beaten == 1  # fa4 is faster at B 64: the table says so


def test_rows_that_are_not_attention_calls_are_ignored():
    table = routes()
    decode = table["decode", 128]
    assert decode.order == DEFAULT and decode.slowdown == {} and decode.measured == ("cuda",)
    assert "torch" not in table["prefill", 128].slowdown  # torch-sdpa-* rows are peers, not the torch backend
    assert set(routing.ROW_BACKENDS.values()) <= set(DEFAULT)


def test_wrong_answers_send_a_backend_last_and_failed_runs_count_as_unmeasured():
    table = routes()
    d64 = table["prefill", 64]
    assert d64.wrong == ("fa4",) and d64.order == ("cuda", "ladder", "torch", "fa4")
    d256 = table["prefill", 256]
    assert d256.order == DEFAULT and d256.measured == ("cuda",) and d256.wrong == ()


def test_ties_keep_the_default_order():
    tie = routes([row("cuda-prefill-tc", PREFILL, 1.0), row("fa4", PREFILL, 1.0)])
    assert tie["prefill", 128].order == DEFAULT


def test_phases_follow_the_kernel_choice():
    assert routing.phase_of(1, 8, paged=False, packed=False) == "decode"
    assert routing.phase_of(2, 8, paged=False, packed=False) == "decode"  # 16 packed rows: one decode CTA
    assert routing.phase_of(3, 8, paged=False, packed=False) == "prefill"
    assert routing.phase_of(3, 8, paged=True, packed=False) == "paged-prefill"
    assert routing.phase_of(1, 4, paged=True, packed=False) == "paged-decode"
    assert routing.phase_of(None, 4, paged=True, packed=True) == "paged-prefill"
    assert routing.uses_decode_kernel is backend.uses_decode_kernel


def test_gpu_folder_is_the_one_tools_bench_writes():
    from tools import bench

    assert bench.gpu_folder is routing.gpu_folder
    expected = {
        "NVIDIA H200": "h200",
        "NVIDIA H100 80GB HBM3": "h100",
        "NVIDIA A100-SXM4-80GB": "a100-sxm4-80gb",
    }
    for name, folder in expected.items():
        assert routing.gpu_folder(name) == folder


# ---- loading -----------------------------------------------------------------------------------

def test_routing_table_reads_the_gpu_folder(results):
    table = backend.routing_table("h200")
    assert [(r.phase, r.head_dim) for r in table] == [
        ("decode", 128), ("prefill", 64), ("prefill", 128), ("prefill", 256), ("paged-decode", 128),
        ("paged-prefill", 128)]
    assert backend.routing_table("h100") == []
    assert backend.routing_table("h200", results_dir=results.parent / "nowhere") == []


def test_file_measured_on_another_gpu_warns_and_keeps_the_default(tmp_path):
    root = write_results(tmp_path, gpu_folder="h200", gpu_name="NVIDIA H100 80GB HBM3")
    with pytest.warns(RuntimeWarning, match="measured on"):
        assert routing.load_routes("h200", root) == {}


def test_unreadable_file_warns_and_keeps_the_default(tmp_path):
    (tmp_path / "h200").mkdir()
    (tmp_path / "h200" / "attention.json").write_text("{not json")
    with pytest.warns(RuntimeWarning, match="cannot read"):
        assert routing.load_routes("h200", tmp_path) == {}


def test_routes_are_read_once(results, monkeypatch):
    backend.backend_order(call())
    monkeypatch.setattr(routing, "routes_from_results", lambda doc: pytest.fail("read again"))
    assert backend.backend_order(call()) == ("fa4", "cuda", "ladder", "torch")


# ---- the choice --------------------------------------------------------------------------------

def test_fastest_backend_that_can_run_the_call_runs_it(results, hopper):
    assert backend.choose_backend(call()) == ("fa4", [])
    name, reasons = backend.choose_backend(call(masked=True))
    assert name == "cuda" and reasons == ["fa4: flash_attn.cute takes no boolean mask"]
    assert backend.choose_backend(call(phase="paged-decode"))[0] == "cuda"
    assert backend.choose_backend(call(phase="paged-prefill"))[0] == "fa4"
    # our kernels refuse fp32: the measured order goes on to the next that can
    name, reasons = backend.choose_backend(call(dtype=torch.float32))
    assert name == "torch" and reasons[0].startswith("fa4: dtype") and reasons[1].startswith("cuda: dtype")


def test_missing_file_or_other_gpu_uses_the_default_order(tmp_path, monkeypatch, hopper):
    monkeypatch.setenv(routing.RESULTS_ENV_VAR, str(tmp_path / "empty"))
    assert backend.backend_order(call()) == DEFAULT
    assert backend.choose_backend(call())[0] == "cuda"
    write_results(tmp_path / "empty")
    routing.clear_caches()
    assert backend.choose_backend(call())[0] == "fa4"
    assert backend.backend_order(call(gpu="h100")) == DEFAULT
    assert backend.backend_order(call(head_dim=96)) == DEFAULT  # a bucket nothing measured


def test_overrides_win_over_measurements(results, hopper, monkeypatch):
    monkeypatch.setenv(backend.ENV_VAR, "cuda")
    assert backend.backend_order(call()) == ("cuda", "fa4", "ladder", "torch")
    assert backend.choose_backend(call())[0] == "cuda"
    monkeypatch.setenv(backend.ENV_VAR, "torch")
    assert backend.backend_order(call()) == ("torch", "fa4", "cuda", "ladder")
    monkeypatch.delenv(backend.ENV_VAR)
    with backend.use_backend("cuda"):
        assert backend.choose_backend(call()) == ("cuda", [])
        with pytest.raises(RuntimeError, match="cannot run this call: autograd"):
            backend.choose_backend(call(needs_grad=True))


def test_autograd_takes_a_backend_with_a_backward(results, hopper):
    name, reasons = backend.choose_backend(call(phase="decode", needs_grad=True))
    assert name == "fa4"
    assert reasons == ["cuda: autograd is recording the call and our kernels have no backward"]
    assert backend.choose_backend(call(needs_grad=True))[0] == "fa4"
    name, reasons = backend.choose_backend(call(phase="paged-decode", needs_grad=True))
    assert name == "torch" and "paged forward has no backward" in reasons[1]
    name, reasons = backend.choose_backend(call(head_dim=256, needs_grad=True))
    assert name == "torch" and "head_dim <= 128" in reasons[1]


def test_fp16_runs_on_our_kernels_where_measured_first(results, hopper):
    assert torch.float16 in ops.DTYPES and torch.bfloat16 in ops.DTYPES
    assert backend.choose_backend(call(phase="paged-decode", dtype=torch.float16))[0] == "cuda"
    assert backend.choose_backend(call(dtype=torch.float16))[0] == "fa4"
    name, reasons = backend.choose_backend(call(phase="decode", dtype=torch.float32))
    assert name == "torch" and "dtype torch.float32" in reasons[0]


def test_other_architectures_skip_the_hopper_build(results, hopper):
    name, reasons = backend.choose_backend(call(phase="decode", capability=(8, 9), gpu="l40s"))
    assert name == "torch"
    assert reasons == ["cuda: built for sm_90a, device is sm_89", "fa4: flash_attn.cute needs sm90 or sm100",
                       "ladder: the ladder's kernels are built for sm_90a, device is sm_89"]


def test_cpu_calls_describe_themselves_and_run_on_torch():
    q, k, v = torch.randn(2, 5, 4, 64), torch.randn(2, 7, 1, 64), torch.randn(2, 7, 1, 64)
    described = backend.describe_call(q, k, v)
    assert described == backend.Call("cpu", None, None, torch.float32, 64, "prefill", False, False)
    assert backend.backend_order(described) == DEFAULT
    q.requires_grad_(True)
    assert backend.describe_call(q, k, v).needs_grad
    with torch.no_grad():
        assert not backend.describe_call(q, k, v).needs_grad
    assert backend.select_backend(q, k, v) == "torch"


# ---- the committed results and the production page --------------------------------------------

def test_committed_h200_table_puts_the_fastest_first():
    """Re-derived from the raw rows of results/h200/attention.json, apart from the routing code:
    per bucket, each backend's geometric mean of time over the fastest backend at every shape
    both ran; the table's first backend must be the lowest of those without a wrong answer."""
    table = backend.routing_table("h200", results_dir=ROOT / "results")
    assert table, "results/h200/attention.json has no rows that rank attention() backends"
    rows = json.loads((ROOT / "results" / "h200" / "attention.json").read_text())["rows"]
    per_shape: dict[tuple, dict[str, dict[str, float]]] = {}
    for row in rows:
        name, problem = routing.ROW_BACKENDS.get(row["kernel"]), row["problem"]
        if name is None or row["status"] != "ok" or "head_dim" not in problem:
            continue
        bucket = (routing._row_phase(problem), problem["head_dim"])
        shape = per_shape.setdefault(bucket, {}).setdefault(json.dumps(problem, sort_keys=True), {})
        shape[name] = min(shape.get(name, math.inf), row["ms"]["median"])
    checked = 0
    for route in table:
        logs: dict[str, list[float]] = {}
        for times in per_shape.get((route.phase, route.head_dim), {}).values():
            if len(times) > 1:
                for name, ms in times.items():
                    logs.setdefault(name, []).append(math.log(ms / min(times.values())))
        means = {name: sum(v) / len(v) for name, v in logs.items() if name not in route.wrong}
        if means:
            assert route.order[0] == min(means, key=means.get), (route, means)
            checked += 1
    assert checked >= 4, "prefill at three head dims and paged decode at least"


def test_production_page_shows_the_routing_table(tmp_path):
    pytest.importorskip("mkdocs")
    assert "<!-- routing: gpu=h200 -->" in (ROOT / "docs" / "production.md").read_text()
    hook = load_docs_hook()
    data = hook.Data(results_dir=write_results(tmp_path / "results"))
    html = hook.render_markers("<!-- routing: gpu=h200 -->", "docs/production.md", data)
    assert "| prefill | 128 | fa4 → cuda → ladder → torch | 2 | fa4 1.00, cuda 1.52 | 0 |" in html
    assert "| decode | 128 | cuda → fa4 → ladder → torch | 1 | cuda (alone) | 0 |" in html
    assert ("| prefill | 64 | cuda → ladder → torch → fa4 | 2 | cuda 2.00, fa4 1.00; wrong answers: fa4 | 1 |"
            in html)
    assert "results/h200/attention.json" in html
    write_results(tmp_path / "bare", rows=[row("torch-sdpa-flash", PREFILL, 1.0)])
    with pytest.raises(hook.MarkerError, match="no rows that time a backend"):
        hook.render_markers("<!-- routing: gpu=h200 -->", "docs/production.md",
                            hook.Data(results_dir=tmp_path / "bare"))


# ---- the routes shipped with the package ---------------------------------------------------------

def test_packaged_routes_are_the_ones_results_give(monkeypatch):
    """routing/<gpu>.json (package data, written by tools.bench --suite attention) holds what
    results/<gpu>/attention.json ranks (if not: rerun the bench, or write_packaged_routes)."""
    monkeypatch.delenv(routing.RESULTS_ENV_VAR, raising=False)
    routing.clear_caches()
    for results_file in sorted((ROOT / "results").glob("*/attention.json")):
        gpu = results_file.parent.name
        assert routing.packaged_routes(gpu) == routing.load_routes(gpu, ROOT / "results"), \
            f"kernels/extension/backend/routing/{gpu}.json is stale: attention_routing.write_packaged_routes"
        assert backend.routing_table(gpu) == routing.routing_table(gpu, ROOT / "results")
    routing.clear_caches()
