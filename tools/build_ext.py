"""Build the production CUDA extension modules (csrc/) into kernels/extension/lib/.

    python -m tools.build_ext                  # every module in csrc/CMakeLists.txt KERNEL_NAMES
    python -m tools.build_ext --only attention # one module
    python -m tools.build_ext --arch 90a       # override the architecture (default: the device's)
    python -m tools.build_ext --if-stale       # what `make test` runs: build only when needed

Drives CMake with torch's CMake package (torch.utils.cmake_prefix_path) and pybind11 from
torch's headers; sm_90a on Hopper; the nvcc flags are csrc/nvcc.flags (tools/nvcc.py). Without
nvcc or a CUDA build of torch it prints why and exits 0, so CPU-only machines can run it
harmlessly. A compile error exits non-zero.

``--if-stale`` builds only where a CUDA device is present and the modules are missing or older
than csrc/ (or were built for another torch or architecture); where the device is present but
the build cannot run (no nvcc, no cmake) it exits non-zero saying so, since the GPU tests would
otherwise skip every csrc kernel without a word.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tools.nvcc import CSRC, find_nvcc

ROOT = Path(__file__).resolve().parents[1]
LIB_DIR = ROOT / "kernels" / "extension" / "lib"
BUILD_DIR = ROOT / "build" / "csrc"
SOURCE_SUFFIXES = (".cu", ".cpp", ".cuh", ".h", ".txt", ".flags")


def device_arch(torch) -> str | None:
    """'90a' on Hopper (the arch-specific features need the 'a' target), else e.g. '89'."""
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}"
    return arch + "a" if (major, minor) in ((9, 0), (10, 0)) else arch


def module_names() -> list[str]:
    """KERNEL_NAMES of csrc/CMakeLists.txt: the modules a full build writes."""
    text = (CSRC / "CMakeLists.txt").read_text()
    block = text[text.index("set(KERNEL_NAMES") + len("set(KERNEL_NAMES"):]
    return block[: block.index(")")].split()


def module_sources(name: str) -> list[Path]:
    """``<name>_SRCS`` of csrc/CMakeLists.txt: the module's binding and its kernel units."""
    text = (CSRC / "CMakeLists.txt").read_text()
    block = text[text.index(f"set({name}_SRCS") + len(f"set({name}_SRCS"):]
    return [CSRC / source for source in block[: block.index(")")].split()]


def stale_reason(torch, arch: str) -> str | None:
    """Why the built modules do not match csrc/ and this torch, or None when they do."""
    names = module_names()
    missing = [name for name in names if not (LIB_DIR / f"{name}.so").exists()]
    if missing:
        return f"not built: {', '.join(missing)}"
    records = module_records()
    for name in names:
        record = records.get(name, {})
        if record.get("torch") != torch.__version__ or record.get("arch") != arch:
            return (f"{name} built for torch {record.get('torch')} / sm_{record.get('arch')}, "
                    f"this is torch {torch.__version__} / sm_{arch}")
    built = min((LIB_DIR / f"{name}.so").stat().st_mtime for name in names)
    newer = sorted(str(p.relative_to(ROOT)) for p in CSRC.rglob("*")
                   if p.suffix in SOURCE_SUFFIXES and "tests" not in p.relative_to(CSRC).parts
                   and p.stat().st_mtime > built)
    if newer:
        return f"older than {', '.join(newer[:3])}{' ...' if len(newer) > 3 else ''}"
    return None


def module_records() -> dict[str, dict]:
    """``{module: {"arch", "torch", "cuda"}}`` of build_info.json: what each module was last built
    for (a file from before per-module records: its one record stands for every module)."""
    path = LIB_DIR / "build_info.json"
    try:
        info = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        return {}
    if "modules" in info:
        return dict(info["modules"])
    return {name: info for name in module_names()} if info else {}


def record_build(names: list[str], record: dict) -> None:
    """build_info.json after building ``names``: their records replaced, the others' kept; the
    top level holds the latest build's (kernels.extension.loader.build_info reads both)."""
    records = module_records()
    records.update({name: record for name in names})
    (LIB_DIR / "build_info.json").write_text(json.dumps({**record, "modules": records}, indent=1) + "\n")


def skip(reason: str) -> int:
    print(f"build_ext: skipped: {reason}")
    return 0


def cmake_configure(build_dir: Path, arch: str, nvcc: str, torch, manual: bool) -> subprocess.CompletedProcess:
    import torch.utils.cpp_extension as cpp

    args = [
        "cmake", "-S", str(CSRC), "-B", str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        # SASS for the one target only (90a-real: as tools.nvcc.gencode("90a"))
        f"-DCMAKE_CUDA_ARCHITECTURES={arch}-real",
        f"-DCMAKE_CUDA_COMPILER={nvcc}",
        f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-DKERNELS_OUTPUT_DIR={LIB_DIR}",
    ]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    if manual:
        args += [
            "-DKERNELS_TORCH_MANUAL=ON",
            "-DKERNELS_TORCH_INCLUDE_DIRS=" + ";".join(cpp.include_paths()),
            "-DKERNELS_TORCH_LIB_DIR=" + cpp.library_paths()[0],
        ]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True)


def build(torch, arch: str, nvcc: str, only: list[str] | None, jobs: int, clean: bool) -> int:
    start = time.time()
    if clean:  # the CMake build directories only: build/ also holds tools.nvcc's test binaries
        for directory in (BUILD_DIR, BUILD_DIR.with_name("csrc-manual")):
            shutil.rmtree(directory, ignore_errors=True)
    LIB_DIR.mkdir(parents=True, exist_ok=True)
    build_dir = BUILD_DIR
    configured = cmake_configure(build_dir, arch, nvcc, torch, manual=False)
    if configured.returncode != 0:
        # Torch's CMake package can trip over toolkit details (CUDA 13 layout, cuDNN);
        # the explicit include/library paths from torch.utils.cpp_extension do not.
        print("build_ext: find_package(Torch) failed, retrying with explicit torch paths:")
        print("\n".join(configured.stderr.strip().splitlines()[-15:]))
        build_dir = BUILD_DIR.with_name("csrc-manual")
        configured = cmake_configure(build_dir, arch, nvcc, torch, manual=True)
    if configured.returncode != 0:
        print(configured.stdout[-4000:])
        print(configured.stderr[-4000:], file=sys.stderr)
        print("build_ext: CMake configure failed", file=sys.stderr)
        return 1

    cmd = ["cmake", "--build", str(build_dir), "-j", str(jobs)]
    for name in only or []:
        cmd += ["--target", name]
    print(f"build_ext: building for sm_{arch} with {nvcc} ...", flush=True)
    built = subprocess.run(cmd, cwd=ROOT)
    if built.returncode != 0:
        print("build_ext: build failed", file=sys.stderr)
        return built.returncode
    record_build(only or module_names(), {"arch": arch, "torch": torch.__version__, "cuda": torch.version.cuda})
    modules = sorted(p.name for p in LIB_DIR.glob("*.so"))
    print(f"build_ext: done in {time.time() - start:.0f}s: {', '.join(modules)} in {LIB_DIR}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=None, help="module name (repeatable)")
    parser.add_argument("--arch", default=os.environ.get("KERNELS_CUDA_ARCH"), help="e.g. 90a")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    parser.add_argument("--clean", action="store_true",
                        help="remove the CMake build directories (build/csrc, build/csrc-manual) first")
    parser.add_argument("--if-stale", action="store_true",
                        help="only with a CUDA device, and only when the modules are missing or out of date; "
                             "fail when they are but cannot be built")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only or []) - set(module_names()))
    if unknown:
        parser.error(f"--only {', '.join(unknown)}: no such module (modules: {', '.join(module_names())})")
    if args.arch == "90":
        # Plain sm_90 code has no warpgroup MMA or TMA; the Hopper paths (FP8 GEMM, tensor-core
        # prefill) are chosen by compute capability and would trap in such a build.
        print("build_ext: --arch 90 lacks the sm_90a features the Hopper kernels use; pass --arch 90a",
              file=sys.stderr)
        return 2

    try:
        import torch
    except ImportError:
        return skip("torch is not installed")
    if args.if_stale:
        if torch.version.cuda is None or not torch.cuda.is_available():
            return skip("no CUDA device (the csrc GPU tests skip)")
        arch = args.arch or device_arch(torch)
        reason = stale_reason(torch, arch)
        if reason is None:
            print(f"build_ext: up to date ({', '.join(module_names())} for sm_{arch})")
            return 0
        nvcc = find_nvcc()
        missing = [tool for tool, found in (("nvcc", nvcc), ("cmake", shutil.which("cmake"))) if not found]
        if missing:
            print(f"build_ext: the CUDA extension is {reason}, and this CUDA machine cannot build it: "
                  f"{' and '.join(missing)} not found (set CUDA_HOME or put them on PATH); without it every "
                  "csrc GPU test would skip", file=sys.stderr)
            return 1
        print(f"build_ext: the CUDA extension is {reason}: building", flush=True)
        return build(torch, arch, nvcc, args.only, args.jobs, args.clean)

    nvcc = find_nvcc()
    if nvcc is None:
        return skip("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    if shutil.which("cmake") is None:
        return skip("cmake not found")
    if torch.version.cuda is None:
        return skip(f"torch {torch.__version__} is a CPU-only build")
    arch = args.arch or device_arch(torch)
    if arch is None:
        return skip("no CUDA device to pick the architecture from; pass --arch (e.g. 90a)")
    return build(torch, arch, nvcc, args.only, args.jobs, args.clean)


if __name__ == "__main__":
    sys.exit(main())
