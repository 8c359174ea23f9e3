"""nvcc for csrc/ from one set of flags: csrc/nvcc.flags, which csrc/CMakeLists.txt reads too.

    python -m tools.nvcc csrc/tests/rotary_test.cu            # -> build/csrc-tests/rotary_test
    python -m tools.nvcc csrc/tests/attn_test.cu csrc/kernels/attention/attn_decode.cu \\
        csrc/kernels/attention/attn_prefill.cu csrc/kernels/attention/attn_prefill_ws.cu -o build/attn_test
    python -m tools.nvcc --print                              # the flags, one line

Builds a standalone test (or any torch-free translation units) for Hopper,
``-gencode=arch=compute_90a,code=sm_90a``, unless ``--arch`` says otherwise. The CPU compile
checks in tests/ build their commands with ``command()``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
FLAGS_FILE = CSRC / "nvcc.flags"
INCLUDE_DIR = CSRC / "kernels"
HOPPER_ARCH = "90a"
OUT_DIR = ROOT / "build" / "csrc-tests"


def find_nvcc() -> str | None:
    """nvcc from CUDA_HOME / CUDA_PATH, /usr/local/cuda, then PATH."""
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").exists():
            return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def flags() -> list[str]:
    """The flags of csrc/nvcc.flags, in order (comments and blank lines dropped)."""
    out = []
    for line in FLAGS_FILE.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def cxx_standard() -> int:
    """The C++ standard the flags name (-std=c++NN)."""
    found = [int(m.group(1)) for f in flags() if (m := re.fullmatch(r"-std=c\+\+(\d+)", f))]
    if len(found) != 1:
        raise ValueError(f"{FLAGS_FILE} must name exactly one -std=c++NN, found {found}")
    return found[0]


def gencode(arch: str = HOPPER_ARCH) -> str:
    """SASS for one architecture: '90a' -> -gencode=arch=compute_90a,code=sm_90a."""
    if not re.fullmatch(r"\d+a?", arch):
        raise ValueError(f"arch must look like 90a or 89, got {arch!r}")
    return f"-gencode=arch=compute_{arch},code=sm_{arch}"


def command(sources: list[str | Path], output: str | Path, *, nvcc: str | None = None, arch: str = HOPPER_ARCH,
            compile_only: bool = False, extra: tuple[str, ...] = ()) -> list[str]:
    """The nvcc command line for torch-free csrc sources (the csrc/kernels include root)."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise FileNotFoundError("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    return [nvcc, *flags(), gencode(arch), "-I", str(INCLUDE_DIR), *extra, *(["-c"] if compile_only else []),
            *map(str, sources), "-o", str(output)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="*", help="torch-free .cu files (csrc/tests/<name>.cu first)")
    parser.add_argument("-o", "--output", help=f"executable (default: {OUT_DIR.relative_to(ROOT)}/<first source>)")
    parser.add_argument("--arch", default=HOPPER_ARCH, help="SASS target, e.g. 90a (default) or 89")
    parser.add_argument("--print", action="store_true", help="print the flags and exit")
    args, extra = parser.parse_known_args(argv)
    if args.print:
        print(shlex.join([*flags(), gencode(args.arch)]))
        return 0
    if not args.sources:
        parser.error("name at least one source")
    output = Path(args.output) if args.output else OUT_DIR / Path(args.sources[0]).stem
    output.parent.mkdir(parents=True, exist_ok=True)
    cmd = command(args.sources, output, arch=args.arch, extra=tuple(extra))
    print(shlex.join(cmd), flush=True)
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
