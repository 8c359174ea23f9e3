"""Where a measurement came from: GPU, driver, versions, commit, date."""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git_commit() -> str:
    """HEAD (with -dirty when tracked files differ); $BENCH_COMMIT where the tree has no .git."""
    import os

    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def gpu_meta() -> dict:
    """GPU name, driver and library versions of this process (CUDA required)."""
    import torch

    driver = "unknown"
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, check=True).stdout.strip().splitlines()[0]
    except (OSError, subprocess.CalledProcessError, IndexError):
        pass
    try:
        import cutlass

        dsl = getattr(cutlass, "__version__", "unknown")
    except ImportError:
        dsl = None
    return {"gpu": torch.cuda.get_device_name(), "driver": driver, "cuda": torch.version.cuda,
            "torch": torch.__version__, "cutlass_dsl": dsl, "commit": git_commit(),
            "date": datetime.date.today().isoformat()}
