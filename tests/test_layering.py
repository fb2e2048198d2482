"""Imports point one way (data -> encoders -> models -> triggers -> rounds -> detectors -> scoring -> dynamic
-> leaderboard).

The layers are import-linter contracts in ``pyproject.toml`` (run by ``lint-imports`` in CI); these tests run it,
show it rejects a deliberately bad import, and add the two checks it cannot make: lazy ``"module:attr"``
registry strings that point upward, and private names imported from another module. The one sanctioned
upward string is a modality's registration line (the core names each plug-in folder by its module path).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "trojanscope"
LINT_IMPORTS = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
LAZY_REF = re.compile(r"^trojanscope((?:\.\w+)+)(?::\w+)?$")
PLUGIN_REGISTRATIONS = {Path("models/modalities.py"): "modalities"}  # registry file -> the plug-in layer it names


def _layers() -> dict[str, int]:
    """Top-level module -> rank in the layers contract (higher may import lower; siblings share a rank)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    layers = contract["layers"]
    return {name.strip(): len(layers) - i for i, layer in enumerate(layers) for name in layer.split("|")}


def _run_lint_imports(cwd: Path, env_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(env_path)}
    return subprocess.run([LINT_IMPORTS, "--no-cache", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def upward_lazy_refs(package: Path, ranks: dict[str, int]) -> list[str]:
    """``"trojanscope.x...:attr"`` strings in a lower layer that name a module of a higher one."""
    bad = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        here = ranks.get(rel.parts[0].removesuffix(".py"))
        if here is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and (m := LAZY_REF.match(node.value)):
                top = m.group(1).split(".")[1]
                if PLUGIN_REGISTRATIONS.get(rel) == top:
                    continue
                there = ranks.get(top)
                if there is not None and there > here:
                    bad.append(f"{rel}:{node.lineno} refers to {node.value!r}")
    return bad


def private_imports(package: Path) -> list[str]:
    """``from trojanscope.x import _name`` (absolute or relative) where ``_name`` belongs to another module."""
    bad = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        pkg = parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                target = ".".join([*pkg[: len(pkg) - node.level + 1], *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target.split(".")[0] != package.name or target == module:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    bad.append(f"{path.relative_to(package)}:{node.lineno} imports {alias.name} from {target}")
    return bad


def test_lint_imports_passes_on_the_source_tree() -> None:
    proc = _run_lint_imports(ROOT, ROOT / "src")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


@pytest.fixture
def bad_package(tmp_path: Path) -> Path:
    """A two-layer package whose lower layer imports the upper one with a relative import."""
    pkg = tmp_path / "badpkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "high").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "high" / "__init__.py").write_text("from ..low import thing\n")
    (pkg / "low" / "__init__.py").write_text("thing = 1\n")
    (pkg / "low" / "helper.py").write_text("from ..high import thing as again  # deliberate upward import\n")
    (tmp_path / ".importlinter").write_text(
        "[importlinter]\nroot_package = badpkg\n\n[importlinter:contract:layers]\nname = one way\ntype = layers\n"
        "layers =\n    high\n    low\ncontainers = badpkg\n"
    )
    return tmp_path


def test_lint_imports_rejects_an_upward_relative_import(bad_package: Path) -> None:
    proc = _run_lint_imports(bad_package, bad_package)
    assert proc.returncode != 0
    assert "badpkg.low.helper -> badpkg.high" in proc.stdout


def test_registry_strings_point_one_way() -> None:
    assert upward_lazy_refs(SRC, _layers()) == []


def test_registry_string_check_catches_an_upward_reference(tmp_path: Path) -> None:
    pkg = tmp_path / "trojanscope"
    (pkg / "data").mkdir(parents=True)
    (pkg / "data" / "__init__.py").write_text('R.register("x", "trojanscope.detectors.learned:MetaDetector")\n')
    bad = upward_lazy_refs(pkg, _layers())
    assert bad == ["data/__init__.py:1 refers to 'trojanscope.detectors.learned:MetaDetector'"]


def test_no_private_name_is_imported_from_another_module() -> None:
    assert private_imports(SRC) == []


def test_private_import_check_sees_relative_and_absolute_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "trojanscope"
    (pkg / "rounds").mkdir(parents=True)
    (pkg / "rounds" / "__init__.py").write_text("")
    (pkg / "rounds" / "a.py").write_text("from .build import _accepted\nfrom trojanscope.registry import _x\n")
    assert private_imports(pkg) == ["rounds/a.py:1 imports _accepted from trojanscope.rounds.build",
                                    "rounds/a.py:2 imports _x from trojanscope.registry"]
