"""CPU CI: every csrc C++ / CUDA file is formatted as .clang-format says, by the clang-format
pinned in pyproject.toml's test extra (another version may format differently). To fix a
failure, run `clang-format -i` on the files it names (that clang-format: `python -c "import
clang_format; print(clang_format.get_executable('clang-format'))"`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUFFIXES = (".cu", ".cpp", ".cuh", ".h")


def clang_format() -> str:
    try:
        import clang_format as package
    except ImportError as exc:
        raise AssertionError("clang-format is not installed: pip install -e '.[test]' (pyproject.toml pins it)") from exc
    return package.get_executable("clang-format")


def csrc_files() -> list[Path]:
    return sorted(p for p in (ROOT / "csrc").rglob("*") if p.suffix in SUFFIXES)


def test_csrc_is_clang_formatted():
    files = csrc_files()
    assert len(files) > 20, f"expected the csrc sources, found {len(files)} files"
    result = subprocess.run([clang_format(), "--dry-run", "--Werror", *map(str, files)], cwd=ROOT,
                            capture_output=True, text=True)
    unformatted = sorted({line.split(":", 1)[0] for line in result.stderr.splitlines() if ": error:" in line})
    assert result.returncode == 0, (
        f"not clang-formatted: {', '.join(unformatted) or '(see below)'}; run clang-format -i on them\n"
        + result.stderr[-3000:])


def test_format_check_catches_a_misformatted_file(tmp_path):
    """The check above fails on a badly formatted file under the repository's style."""
    (tmp_path / ".clang-format").write_text((ROOT / ".clang-format").read_text())
    bad = tmp_path / "bad.cuh"
    bad.write_text("namespace kernels {\nint   f( int x ){return x;}\n}\n")
    result = subprocess.run([clang_format(), "--dry-run", "--Werror", str(bad)], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode != 0 and "bad.cuh" in result.stderr
