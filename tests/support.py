"""Helpers shared by several test modules. Not a test module; the tests import it from here
(pytest puts tests/ on sys.path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS_HOOK = ROOT / "docs" / "hooks" / "generated.py"


def load_docs_hook():
    """docs/hooks/generated.py (the mkdocs hook that renders the results markers), imported
    from its file: docs/ is no package."""
    spec = importlib.util.spec_from_file_location("docs_hooks_generated", DOCS_HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_prompts(lengths, vocab: int, seed: int) -> list[list[int]]:
    """Seeded prompts of random token ids in [0, vocab), one per length."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


def run_once(tmp_path_factory, key: str, make) -> Path:
    """``make(folder)`` run once per test run, even under pytest-xdist: the first worker to ask
    runs it under a file lock in the run's shared temporary root, the others wait for it and
    get the same folder. For work that several tests (and workers) read: compiles, a site build.
    ``make`` returns nothing; what it leaves in the folder is the result."""
    import fcntl
    import os

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # workers: .../popen-gwN
    folder, lock, done = root / key, root / f"{key}.lock", root / f"{key}.done"
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        if not done.exists():
            folder.mkdir(parents=True, exist_ok=True)
            make(folder)
            done.touch()
    return folder
