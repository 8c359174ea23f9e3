"""CPU CI: compile every torch-free CUDA translation unit in csrc/ for sm_90a and check the
ptxas resource report (no register spills where none are expected), with the flags of
csrc/nvcc.flags (tools/nvcc.py), the ones the extension build uses. Skips without nvcc.

A translation unit is torch-free when it includes neither torch nor ATen; new modules' TUs
and the standalone tests (csrc/tests/*.cu) are picked up automatically. Objects go to a
temporary directory (nothing cached in the repo).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tools import build_ext, nvcc

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
NVCC = nvcc.find_nvcc()
TORCH_INCLUDE = re.compile(r'#\s*include\s*[<"](torch/|ATen/|c10/)')

# Kernels allowed to spill (mangled-name substring -> why). Empty: every kernel fits today.
SPILLS_ALLOWED: dict[str, str] = {}

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found")


def torch_free_units() -> list[Path]:
    return sorted(p for p in CSRC.rglob("*.cu") if not TORCH_INCLUDE.search(p.read_text()))


def parse_ptxas(report: str) -> dict[str, dict]:
    """ptxas -v output -> {kernel: {"registers", "spill_stores", "spill_loads"}}."""
    kernels, current = {}, None
    for line in report.splitlines():
        if m := re.search(r"Compiling entry function '(\S+)'", line):
            current = m.group(1)
            kernels[current] = {}
        elif current and (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            kernels[current]["spill_stores"], kernels[current]["spill_loads"] = int(m.group(1)), int(m.group(2))
        elif current and (m := re.search(r"Used (\d+) registers", line)):
            kernels[current]["registers"] = int(m.group(1))
    return kernels


def compile_unit(path: Path, out_dir: Path) -> tuple[Path, subprocess.CompletedProcess]:
    cmd = nvcc.command([path], out_dir / (path.stem + ".o"), nvcc=NVCC, compile_only=True, extra=("-Xptxas", "-v"))
    return path, subprocess.run(cmd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def compiled():
    units = torch_free_units()
    assert units, "no torch-free translation units found under csrc/"
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda p: compile_unit(p, Path(tmp)), units))


def test_parse_ptxas_report():
    report = (
        "ptxas info    : Compiling entry function '_Z3foov' for 'sm_90a'\n"
        "ptxas info    : Function properties for _Z3foov\n"
        "    8 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers\n"
    )
    assert parse_ptxas(report) == {"_Z3foov": {"spill_stores": 4, "spill_loads": 8, "registers": 255}}


@needs_nvcc
def test_torch_free_units_compile_without_spills(compiled):
    failures, table = [], []
    for path, result in compiled:
        rel = path.relative_to(ROOT)
        if result.returncode != 0:
            failures.append(f"{rel} failed to compile:\n{result.stderr[-3000:]}")
            continue
        for name, info in parse_ptxas(result.stdout + result.stderr).items():
            table.append(f"{rel}: {name}: {info}")
            spilled = info.get("spill_stores", 0) + info.get("spill_loads", 0)
            if spilled and not any(key in name for key in SPILLS_ALLOWED):
                failures.append(f"{rel}: {name} spills ({info})")
    print("\n".join(table))
    assert not failures, "\n".join(failures)


@needs_nvcc
def test_attention_kernels_are_in_the_report(compiled):
    names = "".join(r.stdout + r.stderr for _, r in compiled)
    for kernel in ("attn_decode_kernel", "attn_decode_combine_kernel", "attn_prefill_kernel"):
        assert kernel in names, f"{kernel} was not compiled by any torch-free unit"


@needs_nvcc
def test_attention_host_math():
    """Host code of the attention launchers: build and run csrc/tests/attn_host_test.cu, which
    checks that the decode split heuristic picks the split counts measured best on the H200 and
    that FastDivmod divides exactly (no GPU needed)."""
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "attn_host_test"
        sources = [CSRC / "tests" / "attn_host_test.cu", CSRC / "kernels" / "attention" / "attn_decode.cu"]
        build = subprocess.run(nvcc.command(sources, exe, nvcc=NVCC), capture_output=True, text=True)
        assert build.returncode == 0, build.stderr[-3000:]
        run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 failure(s)" in run.stdout


# ---- one set of nvcc flags --------------------------------------------------------------------

def test_nvcc_flags_name_one_standard_and_the_hopper_target():
    assert nvcc.cxx_standard() == 20
    assert nvcc.gencode() == "-gencode=arch=compute_90a,code=sm_90a"
    assert not [f for f in nvcc.flags() if f.startswith(("-gencode", "-arch", "--generate-code"))], \
        "the target is not a flag of nvcc.flags (build_ext builds for the device, the checks for sm_90a)"


FLAG_SPELLINGS = re.compile(r"-std=c\+\+\d+|-gencode|--expt-relaxed-constexpr|-diag-suppress|CMAKE_CUDA_STANDARD \d")


def test_nvcc_flags_are_written_once():
    """csrc/nvcc.flags is the one place: CMake reads it, and no tool, test or source spells a
    flag of its own (tools/nvcc.py turns an architecture into its -gencode)."""
    cmake = (CSRC / "CMakeLists.txt").read_text()
    assert "nvcc.flags" in cmake and not FLAG_SPELLINGS.search(cmake)
    offenders = []
    for path in [*(ROOT / "tools").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *CSRC.rglob("*.cu*"),
                 *CSRC.rglob("*.h"), ROOT / "Makefile", ROOT / "pyproject.toml"]:
        if path in (ROOT / "tools" / "nvcc.py", Path(__file__).resolve()):
            continue
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in FLAG_SPELLINGS.finditer(path.read_text())]
    assert not offenders, "nvcc flags spelled outside csrc/nvcc.flags:\n" + "\n".join(offenders)


# ---- build_ext --if-stale (make test) -----------------------------------------------------------

class FakeTorch:
    __version__ = "2.13.0"


def fake_build(lib: Path, names, info: dict | None):
    lib.mkdir(parents=True, exist_ok=True)
    for name in names:
        (lib / f"{name}.so").write_bytes(b"")
    if info is not None:
        (lib / "build_info.json").write_text(json.dumps(info))


def test_stale_reason(monkeypatch, tmp_path):
    lib = tmp_path / "lib"
    monkeypatch.setattr(build_ext, "LIB_DIR", lib)
    names = build_ext.module_names()
    assert names == ["attention", "rotary", "fp8"]
    assert build_ext.stale_reason(FakeTorch, "90a") == f"not built: {', '.join(names)}"
    fake_build(lib, names[:1], None)
    assert build_ext.stale_reason(FakeTorch, "90a") == f"not built: {', '.join(names[1:])}"
    fake_build(lib, names, {"arch": "89", "torch": "2.13.0"})
    assert "sm_89" in build_ext.stale_reason(FakeTorch, "90a")
    fake_build(lib, names, {"arch": "90a", "torch": "2.13.0"})
    newest = max(p.stat().st_mtime for p in CSRC.rglob("*") if p.is_file())
    for so in lib.glob("*.so"):
        os.utime(so, (newest + 10, newest + 10))
    assert build_ext.stale_reason(FakeTorch, "90a") is None
    os.utime(lib / "fp8.so", (0, 0))  # older than every source
    assert build_ext.stale_reason(FakeTorch, "90a").startswith("older than csrc/")


def test_if_stale_skips_without_a_cuda_device(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only path")
    assert build_ext.main(["--if-stale"]) == 0
    assert "no CUDA device" in capsys.readouterr().out
