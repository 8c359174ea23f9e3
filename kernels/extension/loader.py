"""Import the compiled extension modules from kernels/extension/lib/.

Each kernel family (csrc/CMakeLists.txt KERNEL_NAMES) builds into `lib/<name>.so`;
`load(name)` imports it once, `available(name)` says whether it is there.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

LIB_DIR = Path(__file__).resolve().parent / "lib"
BUILD_COMMAND = "python -m tools.build_ext"


class ExtensionNotBuilt(RuntimeError):
    """The requested module has not been built on this machine."""


def module_path(name: str) -> Path:
    return LIB_DIR / f"{name}.so"


_present: dict[str, Path] = {}  # module name -> the folder it was found in


def available(name: str) -> bool:
    """Whether lib/<name>.so is there. attention() asks on every call, so a module once found
    is not looked for again (in the same folder: tests point LIB_DIR elsewhere; an identity
    test, no path built or hashed per call); a missing one is, so a build during the process
    is seen."""
    if _present.get(name) is LIB_DIR:
        return True
    if os.path.exists(os.path.join(LIB_DIR, f"{name}.so")):
        _present[name] = LIB_DIR
        return True
    return False


def built_modules() -> list[str]:
    """The modules built in lib/ (``python -m tools.build_ext``), e.g. ``["attention", "fp8", "rotary"]``."""
    return sorted(p.stem for p in LIB_DIR.glob("*.so"))


def build_info(module: str | None = None) -> dict:
    """{"arch": "90a", "torch": ..., "cuda": ...} written by tools.build_ext, or {}: the latest
    build's, or with ``module`` that module's (a later ``--only`` build may have been another's;
    a file from before per-module records has one record for all)."""
    info = _read_build_info(LIB_DIR)
    if module is None:
        return info
    return info.get("modules", {}).get(module, info)


@functools.cache  # read once per process, as the modules it describes are loaded once (load)
def _read_build_info(lib_dir: Path) -> dict:
    path = lib_dir / "build_info.json"
    return json.loads(path.read_text()) if path.exists() else {}


@functools.cache
def load(name: str) -> ModuleType:
    path = module_path(name)
    if not path.exists():
        raise ExtensionNotBuilt(
            f"CUDA extension module '{name}' is not built ({path} is missing); run `{BUILD_COMMAND}`"
        )
    import torch  # noqa: F401  (the module links against torch's shared libraries)

    spec = importlib.util.spec_from_file_location(f"{__package__}.lib.{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
