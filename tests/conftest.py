import os

import pytest

# Compiles on CPU-only machines target Hopper.
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    group_by_kernel(items)
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def group_by_kernel(items):
    """Under pytest-xdist ``--dist loadgroup``, keep each kernel's tests on one worker, so that
    every worker compiles only its own kernels (compiles dominate a GPU sweep)."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("name") if callspec else None
        if isinstance(name, str):
            item.add_marker(pytest.mark.xdist_group(name))
