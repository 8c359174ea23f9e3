import os
import sys

import pytest

pytest_plugins = ("pytester",)  # tests of the test machinery (guards, time limits) run pytest in pytest

# Compiles on CPU-only machines target Hopper.
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

# A hung kernel blocks the process in a CUDA call that never returns; pytest-timeout's thread
# method still ends it after this long, dumping every thread's stack under the test's name.
# Under pytest-xdist (make test-gpu: -n 1) only the worker dies: the test is reported as
# crashed and the run goes on in a fresh worker. First calls compile, hence the generous limit.
GPU_TEST_TIMEOUT_S = 300


@pytest.fixture(autouse=True)
def fresh_length_checks():
    """attention() remembers the lengths' tensors that passed its check (backend/validation.py):
    a test that patches what the check reads starts from an empty memory."""
    module = sys.modules.get("kernels.extension.backend.validation")
    if module is not None:
        module.forget_checked_lengths()


def pytest_configure(config):
    """One compile-report cache for the whole run (tools/inspect.py, $KERNELS_INSPECT_CACHE): set
    by the process that starts the run, inherited by pytest-xdist's workers and the notebooks'
    kernels, removed when the run ends. A cache set from outside is left as it is."""
    if hasattr(config, "workerinput") or os.environ.get("KERNELS_INSPECT_CACHE"):
        return
    import tempfile

    config._inspect_cache = tempfile.mkdtemp(prefix="inspect-cache-")
    os.environ["KERNELS_INSPECT_CACHE"] = config._inspect_cache


def pytest_unconfigure(config):
    folder = getattr(config, "_inspect_cache", None)
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("KERNELS_INSPECT_CACHE", None)


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_addoption(parser):
    parser.addoption("--gpu-timeout", type=float, default=GPU_TEST_TIMEOUT_S, metavar="SECONDS",
                     help=f"time limit of each gpu-marked test (default {GPU_TEST_TIMEOUT_S}; 0: none)")


def _timeout_plugin(config) -> bool:
    return config.pluginmanager.hasplugin("timeout")


def pytest_report_header(config):
    if not cuda_available():
        return "gpu tests: deselected (no CUDA device; they run on a GPU host: make test-gpu)"
    limit = config.getoption("--gpu-timeout")
    if not _timeout_plugin(config):
        return "gpu tests: NO time limit (pytest-timeout is not installed: pip install -e '.[test]')"
    if not limit:
        return "gpu tests: no time limit"
    return f"gpu tests: {limit:g} s each (pytest-timeout, thread method)"


def pytest_collection_modifyitems(config, items):
    group_by_kernel(items)
    if not cuda_available():
        # Without a GPU the gpu-marked tests are deselected (counted in pytest's summary line,
        # named in the report header) rather than listed one skip line each.
        gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
        if gpu:
            config.hook.pytest_deselected(items=gpu)
            items[:] = [item for item in items if item.get_closest_marker("gpu") is None]
        return
    limit = config.getoption("--gpu-timeout")
    if limit and _timeout_plugin(config):
        for item in items:
            if item.get_closest_marker("gpu") is not None and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(limit, method="thread"))


@pytest.fixture
def guards():
    """A GuardedAllocator (kernels/harness/guards.py) on the GPU, or the CPU without one:
    ``guards.copy(t)`` / ``guards.copies(q=q, ...)`` for inputs, ``guards.empty(shape, dtype)``
    for NaN-poisoned outputs, ``guards.check()`` after the run. Guards not checked by the test
    are checked when it ends."""
    from kernels.harness.guards import GuardedAllocator  # imports torch: not at conftest import

    allocator = GuardedAllocator("cuda" if cuda_available() else "cpu")
    yield allocator
    if allocator.unchecked:
        allocator.check()


def group_by_kernel(items):
    """Under pytest-xdist ``--dist loadgroup``, keep each kernel's tests on one worker, so that
    every worker compiles only its own kernels (compiles dominate a GPU sweep)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("name") if callspec else None
        if isinstance(name, str):
            item.add_marker(pytest.mark.xdist_group(name))
