"""The wheel: `kernels/` installs as `hopper_attention` (pyproject.toml says why), carries the
routing table, leaves `tools/` out, and works beside another distribution's `kernels` package."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest
from support import ROOT  # tests/support.py

from kernels.extension.backend import attention_routing as routing

IMPORT_NAME = "hopper_attention"


def test_the_wheel_lists_every_package_under_kernels():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {IMPORT_NAME: "kernels"}
    folders = sorted(init.parent.relative_to(ROOT) for init in (ROOT / "kernels").rglob("__init__.py"))
    expected = [".".join((IMPORT_NAME, *folder.parts[1:])) for folder in folders]
    assert sorted(setuptools["packages"]) == expected


def test_the_package_imports_itself_relatively():
    """An absolute `kernels.` import inside the package would, once installed as
    hopper_attention, import another distribution's `kernels` (or fail)."""
    absolute = []
    for path in (ROOT / "kernels").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):  # import statements, not docstring examples
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any(name == "kernels" or name.startswith("kernels.") for name in names):
                absolute.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not absolute


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A site folder holding the wheel's files beside a stand-in for the Hugging Face kernel hub's
    `kernels` package (the wheel built from a copy of the tracked files, without isolation)."""
    tmp = tmp_path_factory.mktemp("wheel")
    # built from a copy: setuptools leaves build/ in the tree it builds
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_file():
            (tmp / "src" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tmp / "src" / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp / "dist"), str(tmp / "src")],
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    [wheel] = (tmp / "dist").glob("*.whl")
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(site)  # a wheel's tree is what it installs: no results/ in it
    (site / "kernels").mkdir()
    (site / "kernels" / "__init__.py").write_text('HUB = "the other kernels package"\n')
    return names, site


def probe(site, code: str):
    env = {k: v for k, v in os.environ.items() if k != routing.RESULTS_ENV_VAR}
    env["PYTHONPATH"] = str(site)
    run = subprocess.run([sys.executable, "-c", code], cwd=site.parent, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_wheel_installs_one_uniquely_named_package(installed):
    names, _ = installed
    tops = {name.split("/")[0] for name in names if "/" in name and ".dist-info/" not in name}
    assert tops == {IMPORT_NAME}
    assert f"{IMPORT_NAME}/extension/backend/routing/h200.json" in names


def test_the_installed_package_works_beside_another_kernels(installed):
    """Beside a `kernels` of another distribution, both import; the installed copy routes as
    the repository does (its packaged table, no results/), runs attention() on the CPU and finds
    its rungs under its own name."""
    _, site = installed
    code = ("import dataclasses, json, torch, kernels, hopper_attention\n"
            "from hopper_attention.extension.backend import attention, attention_routing as r\n"
            "from hopper_attention.registry import rung_names, rung_module\n"
            "table = [dataclasses.asdict(x) for x in r.routing_table('h200')]\n"
            "q = torch.randn(1, 5, 4, 16)\n"
            "out = attention(q, q[:, :, :2], q[:, :, :2], causal=True)\n"
            "print(json.dumps([kernels.HUB, hopper_attention.__file__, table, list(out.shape),\n"
            "                  rung_names()[:2], rung_module('k1').__name__]))")
    hub, where, table, shape, rungs, k1 = probe(site, code)
    assert hub == "the other kernels package"
    assert where.startswith(str(site)), f"imported {where}, not the installed copy"
    repository = routing.routing_table("h200", ROOT / "results")
    assert table == json.loads(json.dumps([dataclasses.asdict(r) for r in repository])) and table
    assert shape == [1, 5, 4, 16] and rungs == ["k1", "k2"] and k1 == f"{IMPORT_NAME}.k1"
