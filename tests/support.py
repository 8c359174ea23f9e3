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
