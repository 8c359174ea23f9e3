"""Dependencies point one way: registry -> extension backend -> ops -> loader, and the harness
under all of them. Each check imports a layer in a fresh interpreter and looks at what came in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def modules_loaded_by(*imports: str) -> set[str]:
    code = "import sys\n" + "".join(f"import {name}\n" for name in imports) + \
        "print('\\n'.join(m for m in sys.modules if m.startswith(('kernels', 'tools'))))"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return set(run.stdout.split())


def modules_of(package: str) -> tuple[str, ...]:
    """Every module of ``package`` (files, without importing them)."""
    folder = ROOT / package.replace(".", "/")
    return tuple(sorted(package + "." + ".".join(p.relative_to(folder).with_suffix("").parts)
                        for p in folder.rglob("*.py") if p.name != "__init__.py"))


@pytest.mark.parametrize("layer,forbidden", [
    # the production layer (every module of it) never reaches up to the registry
    (modules_of("kernels.extension"), ("kernels.registry", "tools")),
    # ops are stateless wrappers: no policy
    (modules_of("kernels.extension.ops"), ("kernels.extension.backend", "kernels.registry")),
    # the harness is the bottom layer
    (("kernels.harness",), ("kernels.registry", "kernels.extension", "tools")),
], ids=["extension", "ops", "harness"])
def test_layers_do_not_import_upwards(layer, forbidden):
    loaded = modules_loaded_by(*layer)
    up = sorted(m for m in loaded if m.startswith(forbidden))
    assert not up, f"importing {', '.join(layer)} loads {', '.join(up)}"


def test_registry_lists_the_production_kernels():
    loaded = modules_loaded_by("kernels.registry")
    assert {"kernels.registry.production", "kernels.extension.ops.attention"} <= loaded


def test_declared_bases_are_earlier_rungs():
    """registry.BASES names, for a rung that does not change the one before it, the one it
    changes: both rungs that exist, the base earlier in the ladder."""
    from kernels.registry import rung_base, rung_names
    from kernels.registry.rungs import BASES

    names = rung_names()
    for rung, base in BASES.items():
        assert rung in names and base in names and names.index(base) < names.index(rung), (rung, base)
        assert rung_base(rung) == base
    assert rung_base(names[0]) is None
    assert all(rung_base(n) == names[names.index(n) - 1] for n in names[1:] if n not in BASES)
