"""The GPU tests' time limit and isolation, tried on CPU: under ``make test-gpu``'s flags a test
that hangs (as a kernel waiting on a barrier that never completes would) ends as one failure,
and the tests after it still run."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("xdist", reason="pytest-xdist not installed: pip install -e '.[test]'")
pytest.importorskip("pytest_timeout", reason="pytest-timeout not installed: pip install -e '.[test]'")


def gpu_isolation_flags() -> list[str]:
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(r"^GPU_ISOLATION \?= (.+)$", makefile, re.MULTILINE)
    assert match, "Makefile: GPU_ISOLATION (the flags of make test-gpu) not found"
    return match.group(1).split()


def test_a_hung_gpu_test_fails_alone(pytester, monkeypatch):
    # The repository's conftest, with a GPU pretended, so that its time limits apply.
    conftest = (ROOT / "tests" / "conftest.py").read_text()
    pytester.makeconftest(conftest + "\n\ndef cuda_available():\n    return True\n")
    pytester.makeini("[pytest]\nmarkers = gpu: needs a CUDA GPU\n")
    pytester.makepyfile(test_gpu="""
        import time
        import pytest

        pytestmark = pytest.mark.gpu

        def test_hangs():
            time.sleep(120)   # never returns in time, like a hung kernel launch

        def test_after_the_hang():
            pass
    """)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    start = time.monotonic()
    result = pytester.runpytest_subprocess(*gpu_isolation_flags(), "--gpu-timeout", "3",
                                           "-p", "no:cacheprovider")
    assert time.monotonic() - start < 100, "the time limit did not end the hung test"
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*crashed while running 'test_gpu.py::test_hangs'*"])
