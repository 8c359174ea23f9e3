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
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from support import run_once  # tests/support.py

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


def binding_units() -> list[Path]:
    """The pybind11 bindings: the translation units that include torch (one per module), host
    C++ (.cpp, the host compiler's) or, where the module's kernels live in it, CUDA (.cu)."""
    return sorted(p for suffix in ("*.cu", "*.cpp") for p in CSRC.rglob(suffix) if TORCH_INCLUDE.search(p.read_text()))


# Headers that torch's CUDA headers include and a CPU machine lacks: the CUDA math libraries'
# (the bindings call none of them; their handle types are all torch's declarations need) and
# one that the CPU torch wheel leaves out. Searched after every real include directory, so a
# full toolkit's and a CUDA torch's own headers win.
TORCH_CUDA_HEADER_STUBS = {
    "c10/cuda/impl/cuda_cmake_macros.h": "",
    "cublas_v2.h": "typedef struct cublasContext* cublasHandle_t;\ntypedef int cublasStatus_t;\n",
    "cublasLt.h": "typedef struct cublasLtContext* cublasLtHandle_t;\n",
    "cusparse.h": "typedef struct cusparseContext* cusparseHandle_t;\ntypedef int cusparseStatus_t;\n",
    "cusolverDn.h": "typedef struct cusolverDnContext* cusolverDnHandle_t;\ntypedef int cusolverStatus_t;\n",
    "cusolver_common.h": "",
}


BINDING_GENCODE = f"-gencode=arch=compute_{nvcc.HOPPER_ARCH},code=compute_{nvcc.HOPPER_ARCH}"


def host_compiler() -> str:
    """The C++ compiler CMake takes for the .cpp bindings: $CXX, else c++."""
    return os.environ.get("CXX") or shutil.which("c++") or "g++"


def compile_binding(path: Path, out_dir: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """A binding compiled as the extension build compiles it (csrc/CMakeLists.txt: the module's
    name, TORCH_API_INCLUDE_EXTENSION_H, torch's and Python's headers), against the installed
    torch, with TORCH_CUDA_HEADER_STUBS where the real headers are missing. A .cpp binding goes
    to the host compiler with the CUDA toolkit's headers, compiled unoptimized to an object (what
    it needs from its module's kernel units are its undefined symbols); a .cu one to nvcc, checked
    on the host side (-fsyntax-only), its device side compiled to PTX, not to SASS."""
    import sysconfig

    from torch.utils import cpp_extension

    stubs = out_dir / "stubs"
    for name, text in TORCH_CUDA_HEADER_STUBS.items():
        (stubs / name).parent.mkdir(parents=True, exist_ok=True)
        (stubs / name).write_text("#pragma once\n" + text)
    includes = [f"-I{p}" for p in cpp_extension.include_paths()] + [f"-I{sysconfig.get_paths()['include']}"]
    defines = (f"-DTORCH_EXTENSION_NAME={path.stem}", "-DTORCH_API_INCLUDE_EXTENSION_H")
    if path.suffix == ".cpp":
        toolkit_include = Path(NVCC).resolve().parents[1] / "include"
        cmd = [host_compiler(), f"-std=c++{nvcc.cxx_standard()}", "-c", "-O0", "-fPIC", *includes,
               f"-isystem{toolkit_include}", f"-I{nvcc.INCLUDE_DIR}", f"-idirafter{stubs}", *defines, str(path),
               "-o", str(out_dir / (path.stem + ".o"))]
        return path, subprocess.run(cmd, capture_output=True, text=True)
    # The host compiler checks the code without generating any (-fsyntax-only): a binding's
    # errors are in what it says to torch's headers, not in the code generated for it.
    extra = (*includes, f"-Xcompiler=-idirafter,{stubs}", "-Xcompiler=-fsyntax-only", "-Xcicc", "-O0", *defines)
    cmd = nvcc.command([path], out_dir / (path.stem + ".o"), nvcc=NVCC, compile_only=True, extra=extra)
    # Device code to unoptimized PTX only (-Xcicc -O0 above): ptxas's work on the kernels is the
    # torch-free units' check.
    cmd = [BINDING_GENCODE if arg.startswith("-gencode") else arg for arg in cmd]
    return path, subprocess.run(cmd, capture_output=True, text=True)


def parse_ptxas(report: str) -> dict[str, dict]:
    """ptxas -v output -> {kernel: {"registers", "spill_stores", "spill_loads"}}."""
    kernels, current = {}, None
    for line in report.splitlines():
        if m := re.search(r"Compiling entry function '(\S+)'", line):
            current = m.group(1)
            kernels[current] = {}
        elif current and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            kernels[current]["stack_frame"] = int(m.group(1))
            kernels[current]["spill_stores"], kernels[current]["spill_loads"] = int(m.group(2)), int(m.group(3))
        elif current and (m := re.search(r"Used (\d+) registers", line)):
            kernels[current]["registers"] = int(m.group(1))
    return kernels


def compile_unit(path: Path, out_dir: Path) -> tuple[Path, subprocess.CompletedProcess, Path]:
    """(source, the nvcc run with the ptxas report, the object file)."""
    obj = out_dir / (path.stem + ".o")
    cmd = nvcc.command([path], obj, nvcc=NVCC, compile_only=True, extra=("-Xptxas", "-v"))
    return path, subprocess.run(cmd, capture_output=True, text=True), obj


# One compile per translation unit for the whole run, shared by the tests that read it and by
# pytest-xdist's workers (make test): the first to ask compiles, the others read its result.
def compiled(tmp_path_factory, path: Path, binding: bool = False) -> tuple[subprocess.CompletedProcess, Path]:
    """(the nvcc run, with ptxas's report, and the object file) of ``path``."""
    def make(folder: Path):
        if binding:
            _, result = compile_binding(path, folder)
        else:
            _, result, _ = compile_unit(path, folder)
        (folder / "result.json").write_text(json.dumps(
            {"returncode": result.returncode, "stdout": result.stdout, "stderr": result.stderr}))

    folder = run_once(tmp_path_factory, f"csrc-{'binding' if binding else 'unit'}-{path.stem}", make)
    saved = json.loads((folder / "result.json").read_text())
    result = subprocess.CompletedProcess(args=[str(path)], returncode=saved["returncode"],
                                         stdout=saved["stdout"], stderr=saved["stderr"])
    return result, folder / (path.stem + ".o")


def unit_name(path: Path) -> str:
    return path.name


def test_one_binding_per_module():
    assert {p.stem for p in binding_units()} == set(build_ext.module_names()), "one binding per module expected"


@needs_nvcc
@pytest.mark.parametrize("path", binding_units(), ids=unit_name)
def test_binding_compiles_against_the_installed_torch(path, tmp_path_factory):
    """Every module's pybind11 binding compiles on a CPU machine too, so that an error in one
    shows in CI rather than first in `python -m tools.build_ext` on the GPU host."""
    result, _ = compiled(tmp_path_factory, path, binding=True)
    assert result.returncode == 0, f"{path.relative_to(ROOT)}:\n{result.stderr[-3000:]}"


def kernels_symbols(obj: Path, defined: bool) -> set[str]:
    """The demangled ``kernels::`` functions an object defines (or needs from elsewhere)."""
    flag = "--defined-only" if defined else "--undefined-only"
    listing = subprocess.run(["nm", "-C", flag, str(obj)], check=True, capture_output=True, text=True).stdout
    symbols = (re.match(r"\s*(?:[0-9a-f]+\s+)?\w\s+(.*)", line).group(1) for line in listing.splitlines())
    return {symbol for symbol in symbols if symbol.startswith("kernels::")}


@needs_nvcc
@pytest.mark.skipif(shutil.which("nm") is None, reason="nm not found")
@pytest.mark.parametrize("name", build_ext.module_names())
def test_binding_finds_what_it_calls_in_its_kernel_units(name, tmp_path_factory):
    """The host C++ binding calls its module's kernels through an API header; the definitions
    are in the module's .cu units (csrc/CMakeLists.txt <name>_SRCS). A signature that differs
    between the two links into a module that fails at import on the GPU host (undefined
    symbol): here every ``kernels::`` function the binding needs is one its units define."""
    sources = build_ext.module_sources(name)
    binding = [p for p in sources if p.suffix == ".cpp"]
    if not binding:
        pytest.skip(f"{name}: its binding is CUDA, compiled with its kernels")
    result, obj = compiled(tmp_path_factory, binding[0], binding=True)
    assert result.returncode == 0, result.stderr[-3000:]
    needed = kernels_symbols(obj, defined=False)
    assert needed, f"{binding[0].name} calls no kernels:: function: the check would pass on nothing"
    defined = set()
    for unit in (p for p in sources if p.suffix == ".cu"):
        unit_result, unit_obj = compiled(tmp_path_factory, unit)
        assert unit_result.returncode == 0, unit_result.stderr[-3000:]
        defined |= kernels_symbols(unit_obj, defined=True)
    assert needed <= defined, f"{name}: not defined by {[p.name for p in sources]}: {sorted(needed - defined)}"


def test_parse_ptxas_report():
    report = (
        "ptxas info    : Compiling entry function '_Z3foov' for 'sm_90a'\n"
        "ptxas info    : Function properties for _Z3foov\n"
        "    8 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers\n"
    )
    assert parse_ptxas(report) == {"_Z3foov": {"stack_frame": 8, "spill_stores": 4, "spill_loads": 8, "registers": 255}}


@needs_nvcc
@pytest.mark.parametrize("path", torch_free_units(), ids=unit_name)
def test_torch_free_unit_compiles_without_spills(path, tmp_path_factory):
    failures, table = [], []
    result, _ = compiled(tmp_path_factory, path)
    rel = path.relative_to(ROOT)
    assert result.returncode == 0, f"{rel} failed to compile:\n{result.stderr[-3000:]}"
    for name, info in parse_ptxas(result.stdout + result.stderr).items():
        table.append(f"{rel}: {name}: {info}")
        # a stack frame without spills is an array ptxas could not keep in registers (an index
        # it cannot resolve at compile time): local-memory traffic just the same
        spilled = info.get("spill_stores", 0) + info.get("spill_loads", 0) + info.get("stack_frame", 0)
        if spilled and not any(key in name for key in SPILLS_ALLOWED):
            failures.append(f"{rel}: {name} spills or keeps a stack frame ({info})")
    print("\n".join(table))
    assert not failures, "\n".join(failures)


@needs_nvcc
@pytest.mark.parametrize("path", torch_free_units(), ids=unit_name)
def test_no_kernel_serializes_its_wgmmas(path, tmp_path_factory):
    """ptxas serializes every WGMMA of a kernel it cannot prove safe to pipeline (a call in the
    kernel, accumulators touched while in flight, a wait it cannot match to its group) and says
    so in a "Potential Performance Loss" line (C7514, C7517, C7518, ...): the kernel would then
    run, slowly, with nothing overlapped. Every unit: the attention kernels, every FP8 GEMM
    instance launch_gemm builds (fp8_launch.cu) and the lab tiles of csrc/tests/fp8_test.cu."""
    result, _ = compiled(tmp_path_factory, path)
    warnings = [f"{path.relative_to(ROOT)}: {line.strip()}" for line in (result.stdout + result.stderr).splitlines()
                if "wgmma" in line.lower() or "Performance Loss" in line]
    assert not warnings, "\n".join(warnings)


ATTENTION_UNIT_KERNELS = {"attn_decode.cu": ("attn_decode_kernel", "attn_decode_combine_kernel"),
                          "attn_prefill.cu": ("attn_prefill_kernel",),
                          "attn_prefill_ws.cu": ("attn_prefill_ws_kernel",)}


@needs_nvcc
@pytest.mark.parametrize("path", [CSRC / "kernels" / "attention" / name for name in ATTENTION_UNIT_KERNELS],
                         ids=unit_name)
def test_attention_kernels_are_in_the_report(path, tmp_path_factory):
    result, _ = compiled(tmp_path_factory, path)
    for kernel in ATTENTION_UNIT_KERNELS[path.name]:
        assert kernel in result.stdout + result.stderr, f"{kernel} was not compiled by {path.name}"


@needs_nvcc
def test_e4m3_paged_decode_unpacks_its_keys_into_fp16_fragments(tmp_path_factory):
    """The FP8-KV paged decode (decode_kernel.cuh with KvElement e4m3, E4m3DecodeConfig): one
    kernel per head_dim and query type, its ring filled by cp.async, every e4m3 pair a lane
    reads unpacked once by the hardware conversion (F2FP...E4M3) straight into fp16 B fragments,
    the math in fp16 MMAs for bf16 queries too (Q converted once, scaled by a power of two)."""
    _, functions = compiled_sass(tmp_path_factory, CSRC / "kernels" / "attention" / "attn_decode.cu")
    found = {}
    for name, lines in functions.items():
        m = re.search(r"E4m3DecodeConfigILi(\d+)EEELNS0_8AttnImplE0ENS0_7PagedKVE(13__nv_bfloat16|6__half)13__nv_fp8_e4m3E",
                      name)
        if m:
            found[(int(m.group(1)), "bf16" if "bfloat" in m.group(2) else "fp16")] = lines
    assert set(found) == {(d, t) for d in (64, 128, 256) for t in ("bf16", "fp16")}
    for (head_dim, dtype), lines in found.items():
        count = lambda op: sum(op in line for line in lines)  # noqa: E731
        # per iteration a lane unpacks keys_per_warp * head_dim * 2 (K and V) / 32 lanes / 2 pairs
        # (twice the 16-bit decode's keys per warp); the loop body is unrolled once
        keys_per_warp = 64 if head_dim == 64 else 32
        pairs = keys_per_warp * head_dim // 32
        assert count("F2FP.F16.E4M3.UNPACK_B") == pairs, (head_dim, dtype)
        # Q K^T and P V over keys_per_warp keys: (head_dim / 16) * (keys / 8) MMAs each
        assert count("HMMA.16816.F32") == 2 * (head_dim // 16) * (keys_per_warp // 8), (head_dim, dtype)
        assert count("HMMA.16816.F32.BF16") == 0, (head_dim, dtype)
        assert count("LDGSTS") > 0, (head_dim, dtype)


# ---- the warp-specialized Hopper prefill (csrc/kernels/attention/prefill_ws_sm90.cuh) -------------

WS_UNIT = CSRC / "kernels" / "attention" / "attn_prefill_ws.cu"
# head_dim -> (consumer warpgroups, consumer registers, producer registers, keys per tile):
# PrefillWsConfig and PrefillWsTraits (configs.cuh), the splits of kernels/cute/fmha.py
# REGISTER_SPLITS.
WS_PLANS = {64: (3, 160, 32, 128), 128: (2, 240, 24, 128), 256: (2, 240, 24, 80)}


def sass_functions(sass: str) -> dict[str, list[str]]:
    """``cuobjdump -sass`` output -> {mangled kernel name: its instruction lines}."""
    functions, current = {}, None
    for line in sass.splitlines():
        if m := re.search(r"Function : (\S+)", line):
            current = functions.setdefault(m.group(1), [])
        elif current is not None and re.match(r"\s*/\*[0-9a-f]+\*/\s+\S", line):
            current.append(line)
    return functions


def compiled_sass(tmp_path_factory, path: Path) -> tuple[dict[str, dict], dict[str, list[str]]]:
    """(ptxas's report, {kernel: SASS lines}) of ``path``, compiled and disassembled once per run."""
    from tools.inspect import _tool

    result, obj = compiled(tmp_path_factory, path)
    assert result.returncode == 0, result.stderr[-3000:]

    def dump(folder: Path):
        sass = subprocess.run([_tool("cuobjdump"), "-sass", str(obj)], check=True, capture_output=True, text=True)
        (folder / "sass.txt").write_text(sass.stdout)

    sass = (run_once(tmp_path_factory, f"csrc-sass-{path.stem}", dump) / "sass.txt").read_text()
    return parse_ptxas(result.stdout + result.stderr), sass_functions(sass)


@pytest.fixture(scope="module")
def ws_kernels(tmp_path_factory):
    """The warp-specialized kernels of attn_prefill_ws.cu: {(head_dim, dtype, paged): (ptxas info, SASS lines)}."""
    report, functions = compiled_sass(tmp_path_factory, WS_UNIT)
    kernels = {}
    for name, lines in functions.items():
        m = re.search(r"attn_prefill_ws_kernelINS0_15PrefillWsConfigILi(\d+)EEE(\w+?)Lb([01])EEEv", name)
        if m:
            key = (int(m.group(1)), "fp16" if "half" in m.group(2) else "bf16", m.group(3) == "1")
            kernels[key] = (report[name], lines)
    return kernels


@needs_nvcc
def test_ws_prefill_instantiations(ws_kernels):
    assert set(ws_kernels) == {(d, t, paged) for d in WS_PLANS for t in ("bf16", "fp16") for paged in (False, True)}


@needs_nvcc
def test_ws_prefill_watchdog_build_compiles(tmp_path):
    """The debug build for a hang on the GPU (-DKERNELS_PREFILL_WS_WATCHDOG, prefill_ws_sm90.cuh)
    stays buildable: it is what one reaches for first when the kernel hangs. To PTX: what the
    macro adds (clock reads, printf, trap) is C++ and PTX that ptxas takes; the spill and SASS
    checks are the release build's."""
    cmd = nvcc.command([WS_UNIT], tmp_path / "watchdog.ptx", nvcc=NVCC,
                       extra=("-ptx", "-DKERNELS_PREFILL_WS_WATCHDOG=100000000"))
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]


@needs_nvcc
@pytest.mark.parametrize("paged", [False, True], ids=["dense", "paged"])
@pytest.mark.parametrize("head_dim", sorted(WS_PLANS))
def test_ws_prefill_sass(head_dim, paged, ws_kernels):
    """The structure the kernel claims, in its SASS (bf16; fp16 differs only in the MMA type):
    setmaxnreg on both sides of the role switch with the planned budgets, every TMA load outside
    the consumers' region and every HGMMA inside it, two WGMMA groups in flight (the softmax under
    P V), named barriers taking turns, O through a TMA store, no calls, no spills; dense: no
    global loads; paged: global loads (the schedule, the page table) and stores (O's rows where a
    box would cross the sequence's end)."""
    from tools.inspect import opcode_mix

    warpgroups, consumer_regs, producer_regs, _ = WS_PLANS[head_dim]
    info, lines = ws_kernels[(head_dim, "bf16", paged)]
    threads = 128 * (warpgroups + 1)
    assert info.get("spill_stores", 0) == 0 and info.get("spill_loads", 0) == 0, info
    # ptxas reports the budget at entry (65536 / threads, a multiple of 8); the consumers'
    # branch is allocated for the setmaxnreg budget checked below.
    assert 0 < info["registers"] <= 65536 // threads // 8 * 8, info

    mix = opcode_mix("\n".join(lines))
    for op in ("HGMMA", "UTMALDG", "UTMASTG", "SYNCS", "BAR", "MUFU"):
        assert mix[op] > 0, f"no {op} in the SASS: {mix}"
    for op in ("LDGSTS", "LDL", "STL", "CALL") + (() if paged else ("LDG",)):
        assert mix[op] == 0, f"{op} in the SASS: {mix}"
    if paged:
        assert mix["LDG"] > 0 and mix["STG"] > 0, mix

    text = [ln.split(";")[0] for ln in lines]
    alloc = [i for i, ln in enumerate(text) if "USETMAXREG.TRY_ALLOC" in ln]
    dealloc = [i for i, ln in enumerate(text) if "USETMAXREG.DEALLOC" in ln]
    assert len(alloc) == 1 and len(dealloc) == 1, "one setmaxnreg per role"
    assert text[alloc[0]].rstrip().endswith(hex(consumer_regs)), text[alloc[0]]
    assert text[dealloc[0]].rstrip().endswith(hex(producer_regs)), text[dealloc[0]]
    # The consumers' region: from their setmaxnreg to the producer's (or the end, if the
    # compiler lays the producer out first).
    start, end = alloc[0], dealloc[0] if dealloc[0] > alloc[0] else len(text)
    in_consumers = lambda i: start < i < end  # noqa: E731
    tma_loads = [i for i, ln in enumerate(text) if re.search(r"\bUTMALDG\b", ln)]
    hgmma = [i for i, ln in enumerate(text) if re.search(r"\bHGMMA\b", ln)]
    assert tma_loads and not any(in_consumers(i) for i in tma_loads), "a TMA load in the consumers' region"
    assert hgmma and all(in_consumers(i) for i in hgmma), "an HGMMA outside the consumers' region"
    assert any(".tnspB" in text[i] for i in hgmma), "no P V (V read transposed)"
    assert any(re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x1\b", ln) for ln in text), \
        "no wgmma.wait_group 1: S is never back while P V still runs"
    assert any(re.search(r"\bBAR\.SYNC\S*\s+R\d+, 0x100\b", ln) for ln in text), "no turn (named barrier, 256)"
    assert any(re.search(r"\bBAR\.ARV\s+R\d+, 0x100\b", ln) for ln in text), "no turn passed (bar.arrive, 256)"


@needs_nvcc
@pytest.mark.parametrize("head_dim", sorted(WS_PLANS))
def test_ws_prefill_turn_holds_the_step_gemms(head_dim):
    """tools.inspect finds the steady-state step of the dense bf16 kernel, and a warpgroup's turn
    (from the named barrier's sync to its arrive) holds exactly the step's GEMMs, Q K^T in k16
    slices and P V in 16-key slices, and no softmax: at most three floating-point instructions
    (ptxas's placement of a sum or a rescale factor), no exponential. A GEMM left outside the
    turn would run into the other warpgroup's. The turn stays short: WgmmaMath steps each
    operand's descriptor by an add (sw128_desc_advance); built from the address before every
    WGMMA the turn held 89 / 112 / 179 instructions at head dim 64 / 128 / 256, stepped 50 / 58
    / 113."""
    from tools.inspect import production_ws_step

    facts = production_ws_step(head_dim)
    assert facts, "no steady-state step found"
    assert facts["turn_mma"] == head_dim // 16 + WS_PLANS[head_dim][3] // 16, facts
    assert facts["turn_fp"] <= 3, facts
    assert facts["turn"] <= {64: 60, 128: 70, 256: 130}[head_dim], facts


@needs_nvcc
@pytest.mark.parametrize("head_dim", [64, 128])
def test_ws_prefill_packs_p_among_the_exponentials(head_dim):
    """kPackBeforeRescale (D = 64, 128): P's packing to bf16 comes before O's lazy rescale, so
    ptxas mixes the packs (F2FP) into the exponentials it sinks below the wait for P V; with the
    rescale first, its branch kept all 32 packs behind the last exponential (packs_among_exp2 0)
    and the exponentials ran back to back on the XU pipe."""
    from tools.inspect import production_ws_step

    facts = production_ws_step(head_dim)
    assert facts and facts["packs_among_exp2"] >= 16, facts


@needs_nvcc
@pytest.mark.parametrize("paged", [False, True], ids=["dense", "paged"])
def test_ws_prefill_pv_wait_after_row_factors(paged, ws_kernels):
    """D = 128 (PrefillWsConfig's kPvWaitAfterRowScale): in every step the wait for the
    warpgroup's own P V (wgmma.wait_group 0 after wait_group 1) follows the row factors'
    exponentials and the scaled scores, so some exponentials and an FFMA per P value of a row
    run under P V. Without the hold ptxas put the unmasked step's wait right after the row max,
    71 instructions after the wait for S with no exponential and no FFMA before it."""
    _, lines = ws_kernels[(128, "bf16", paged)]
    text = [ln.split(";")[0] for ln in lines]
    steps = []
    for i, ln in enumerate(text):
        if re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x1\b", ln):
            j = next(j for j in range(i + 1, len(text)) if re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0\b", text[j]))
            between = text[i:j]
            steps.append((sum("MUFU.EX2" in x for x in between), sum(re.search(r"\bFFMA\b", x) is not None
                                                                     for x in between)))
    assert len(steps) == 2, steps  # the masked and the unmasked step
    assert all(exp2 >= 2 and ffma >= 32 for exp2, ffma in steps), steps


# ---- the FP8 GEMV (csrc/kernels/fp8/gemm/gemv.cuh), as the binding's kernels unit builds it ------

FP8_LAUNCH_UNIT = CSRC / "kernels" / "fp8" / "fp8_launch.cu"


@needs_nvcc
def test_fp8_gemv_runs_on_the_tensor_cores(tmp_path_factory):
    """Every format pair's GEMV kernel: its fp8 mma.sync on Hopper is fp8 -> f16 unpacks and f16
    HMMAs (no fp8 mma.sync of its own), B and A in 16-byte loads, no spills, no local memory."""
    from tools.inspect import opcode_mix

    report, functions = compiled_sass(tmp_path_factory, FP8_LAUNCH_UNIT)
    gemv = {name: lines for name, lines in functions.items() if "gemv_kernel" in name}
    # The planner's tiles (GemvPolicy = GemvTiles<2, 8, 4>, GemvLongK at long K) for every format
    # pair (e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3); fp8_test times other tiles on e4m3 x e4m3.
    for policy in ("GemvTilesILi2ELi8ELi4E", "GemvLongK"):
        assert len([name for name in gemv if policy in name]) == 3, (policy, sorted(gemv))
    for name, lines in gemv.items():
        info = report[name]
        assert info.get("spill_stores", 0) == 0 and info.get("spill_loads", 0) == 0, info
        text = "\n".join(lines)
        mix = opcode_mix(text)
        assert mix["HMMA"] > 0 and mix["F2FP"] > 0, mix
        assert mix["LDL"] == mix["STL"] == 0, mix
        assert len(re.findall(r"\bLDG\.E\.(?:EF\.)?(?:CONSTANT\.)?128\b", text)) >= 8, "B and A in 16-byte loads"


@needs_nvcc
def test_block_scaled_gemm_scales_each_k_block_as_it_adds_it(tmp_path_factory):
    """The block-scaled kernel (AccumMode::kBlockScaled = 4, BN 128): one instance, e4m3 x e4m3;
    four k32 QGMMAs per 128-deep k-block into a fresh partial, all retired before it is added
    (nothing in flight across the add: its factors differ per k-block), one FFMA per accumulator
    register (64 at BN 128: the partial times its row's factor, added), the three factors of a
    k-block loaded from global memory, no spills, no local memory."""
    from tools.inspect import opcode_mix

    report, functions = compiled_sass(tmp_path_factory, FP8_LAUNCH_UNIT)
    scaled = {name: lines for name, lines in functions.items() if "Sm90PolicyILi128ELNS1_9AccumModeE4E" in name}
    assert len(scaled) == 1 and "FormatE0ELS6_0E" in next(iter(scaled)), sorted(scaled)
    name, lines = next(iter(scaled.items()))
    info = report[name]
    assert info.get("spill_stores", 0) == 0 and info.get("spill_loads", 0) == 0 and info.get("stack_frame", 0) == 0
    text = "\n".join(lines)
    mix = opcode_mix(text)
    mma = re.findall(r"\bQGMMA\.64x128x32\.F32\.E4M3\.E4M3\b", text)
    fresh = re.findall(r"\bQGMMA\.64x128x32\S*\s+R\d+, gdesc\[\w+\], RZ, !UPT", text)
    assert len(mma) == 4 and len(fresh) == 1, "one k-block's four WGMMAs, the first fresh"
    assert re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0\b", text), "the k-block retired before it is added"
    assert mix["FFMA"] == 64, mix
    assert len(re.findall(r"\bLDG\.E(?:\.CONSTANT)?\s", text)) >= 3, "the k-block's three factors"
    assert mix["LDL"] == mix["STL"] == 0, mix


# ---- the swap-AB TMA GEMV (csrc/kernels/fp8/gemm/gemv_tma.cuh), as the binding's kernels unit builds it

FP8_NAMES = {"0": "E4M3", "1": "E5M2"}


@needs_nvcc
def test_fp8_gemv_tma_runs_on_wgmma_fed_by_tma(tmp_path_factory):
    """Every format pair's swap-AB GEMV kernel at every width (A's rows in WGMMA n 16 / 32 / 64 /
    128) and both block heights (128 or 64 rows of B): fp8 WGMMA m64nXk32 with the weight's
    format in the A slot (.F32.<FB>.<FA>), four per k-block and the first of each fresh, two
    groups in flight (ping-pong promotion) except at n128 with 128 rows (one partial: three sets
    of 64 accumulators would spill 384 threads' 168 registers), TMA loads, the totals through
    shared memory (STS / LDS, not generic stores), cluster barriers for the split-K sum, no
    spills, no local memory, no calls, within the registers of 384 (168) or 256 threads (255)."""
    from tools.inspect import opcode_mix

    report, functions = compiled_sass(tmp_path_factory, FP8_LAUNCH_UNIT)
    kernels = {name: lines for name, lines in functions.items() if "gemv_tma_kernel" in name}
    instances = set()
    for name, lines in kernels.items():
        info = report[name]
        assert info.get("spill_stores", 0) == 0 and info.get("spill_loads", 0) == 0, (name, info)
        fa, fb, width, rows = re.search(
            r"gemv_tma_kernelILNS0_6FormatE(\d)ELS3_(\d)ENS1_12GemvTmaTilesILi(\d+)ELi(\d+)EE", name).groups()
        assert info["registers"] <= (168 if rows == "128" else 255), (name, info)
        instances.add((FP8_NAMES[fa], FP8_NAMES[fb], int(width), int(rows)))
        text = "\n".join(lines)
        mix = opcode_mix(text)
        mma = re.findall(r"\bQGMMA\.(\w+)\.F32\.(E4M3|E5M2)\.(E4M3|E5M2)\b", text)
        assert mma and set(mma) == {(f"64x{width}x32", FP8_NAMES[fb], FP8_NAMES[fa])}, (name, set(mma))
        assert len(mma) % 4 == 0, "four k32 WGMMAs per 128-deep k-block"
        fresh = re.findall(rf"\bQGMMA\.64x{width}x32\S*\s+R\d+, gdesc\[\w+\], RZ, !UPT", text)
        assert len(fresh) == len(mma) // 4, "every k-block's first WGMMA starts a fresh partial"
        pingpong = re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x1\b", text)
        if int(width) <= 64 or rows == "64":
            assert pingpong, "no second WGMMA group in flight"
        else:
            assert not pingpong and re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0\b", text), "n128 promotes one partial"
        assert mix["UTMALDG"] >= 2 and mix["SYNCS"] > 0, mix
        assert mix["STS"] > 0 and mix["LDS"] > 0 and mix["ST"] == 0, mix
        assert mix["UCGABAR_ARV"] > 0 and mix["UCGABAR_WAIT"] > 0, mix
        for op in ("LDL", "STL", "CALL"):
            assert mix[op] == 0, f"{op} in the SASS: {mix}"
    pairs = {("E4M3", "E4M3"), ("E4M3", "E5M2"), ("E5M2", "E4M3")}
    assert instances == {(fa, fb, w, r) for fa, fb in pairs for w in (16, 32, 64, 128) for r in (64, 128)}, (
        instances,
        sorted(kernels),
    )


@needs_nvcc
def test_attention_host_math(tmp_path_factory):
    """Host code of the attention launchers: build and run csrc/tests/attn_host_test.cu, which
    checks that the decode split heuristic picks the split counts measured best on the H200,
    that FastDivmod divides exactly and which calls the warp-specialized prefill takes (no GPU
    needed)."""
    _, decode_object = compiled(tmp_path_factory, CSRC / "kernels" / "attention" / "attn_decode.cu")
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "attn_host_test"
        sources = [CSRC / "tests" / "attn_host_test.cu", decode_object]  # the unit's object, compiled once
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
    for path in [*(ROOT / "tools").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *CSRC.rglob("*.cu*"), *CSRC.rglob("*.cpp"),
                 *CSRC.rglob("*.h"), ROOT / "Makefile", ROOT / "pyproject.toml"]:
        if path in (ROOT / "tools" / "nvcc.py", Path(__file__).resolve()):
            continue
        offenders += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in FLAG_SPELLINGS.finditer(path.read_text())]
    assert not offenders, "nvcc flags spelled outside csrc/nvcc.flags:\n" + "\n".join(offenders)


@needs_nvcc
@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ninja") is None, reason="cmake or ninja not found")
def test_cmake_configures_and_builds_bindings_with_the_host_compiler(tmp_path, monkeypatch):
    """csrc/CMakeLists.txt as build_ext configures it (torch given by hand: the CPU wheel has no
    CUDA libraries, empty stand-ins take their place), with this machine's CMake: it generates,
    and the .cpp bindings are compiled by the C++ compiler at the standard of nvcc.flags, the
    .cu units by nvcc. Configure errors otherwise show first on the GPU host."""
    import torch
    import torch.utils.cpp_extension as cpp

    libs = tmp_path / "torch-libs"
    libs.mkdir()
    real = Path(cpp.library_paths()[0])
    for name in ("c10", "torch", "torch_cpu", "torch_python"):
        (libs / f"lib{name}.so").symlink_to(real / f"lib{name}.so")
    for name in ("c10_cuda", "torch_cuda"):
        (libs / f"lib{name}.so").write_bytes(b"")  # found, never linked here
    monkeypatch.setattr(cpp, "library_paths", lambda *args, **kwargs: [str(libs)])
    monkeypatch.setattr(build_ext, "LIB_DIR", tmp_path / "lib")
    build = tmp_path / "build"
    result = build_ext.cmake_configure(build, "90a", NVCC, torch, manual=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    commands = subprocess.run(["ninja", "-C", str(build), "-t", "commands"], capture_output=True, text=True,
                              check=True).stdout.splitlines()
    def compile_line(source: Path) -> list[str]:
        found = [c.split() for c in commands if str(source) in c.split() and "-c" in c.split()]
        assert len(found) == 1, f"one compile of {source.name} expected, got {len(found)}"
        return found[0]

    for binding in (p for p in binding_units() if p.suffix == ".cpp"):
        line = compile_line(binding)
        assert "nvcc" not in Path(line[0]).name and f"-std=c++{nvcc.cxx_standard()}" in line, line
    for unit in ("attention/attn_decode.cu", "rotary/rotary_launch.cu"):
        assert Path(compile_line(CSRC / "kernels" / unit)[0]).name == "nvcc"


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


def test_build_info_keeps_a_record_per_module(monkeypatch, tmp_path):
    """Building one module (--only) records that module only: after a torch upgrade the others
    stay stale instead of passing for rebuilt."""
    lib = tmp_path / "lib"
    monkeypatch.setattr(build_ext, "LIB_DIR", lib)
    names = build_ext.module_names()
    fake_build(lib, names, None)
    build_ext.record_build(names, {"arch": "90a", "torch": "2.12.0", "cuda": "13.0"})
    build_ext.record_build(["rotary"], {"arch": "90a", "torch": "2.13.0", "cuda": "13.0"})
    info = json.loads((lib / "build_info.json").read_text())
    assert info["torch"] == "2.13.0" and info["modules"]["attention"]["torch"] == "2.12.0"
    assert build_ext.stale_reason(FakeTorch, "90a").startswith("attention built for torch 2.12.0")
    build_ext.record_build(["attention", "fp8"], {"arch": "90a", "torch": "2.13.0", "cuda": "13.0"})
    newest = max(p.stat().st_mtime for p in CSRC.rglob("*") if p.is_file())
    for so in lib.glob("*.so"):
        os.utime(so, (newest + 10, newest + 10))
    assert build_ext.stale_reason(FakeTorch, "90a") is None


def test_build_ext_refuses_unknown_modules_and_cleans_only_cmake_dirs(monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit):
        build_ext.main(["--only", "atention"])
    assert "no such module" in capsys.readouterr().err
    build = tmp_path / "build"
    for name in ("csrc", "csrc-manual", "csrc-tests", "lab"):
        (build / name).mkdir(parents=True)
    monkeypatch.setattr(build_ext, "BUILD_DIR", build / "csrc")
    monkeypatch.setattr(build_ext, "LIB_DIR", tmp_path / "lib")
    failed = subprocess.CompletedProcess([], 1, "", "")
    monkeypatch.setattr(build_ext, "cmake_configure", lambda *args, **kwargs: failed)
    assert build_ext.build(FakeTorch, "90a", "nvcc", None, 1, clean=True) == 1
    assert sorted(p.name for p in build.iterdir()) == ["csrc-tests", "lab"]


def test_if_stale_skips_without_a_cuda_device(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the CPU-only path")
    assert build_ext.main(["--if-stale"]) == 0
    assert "no CUDA device" in capsys.readouterr().out
