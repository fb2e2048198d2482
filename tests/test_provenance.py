"""The commit a report cites: the checkout's own, never that of a repository an installed copy happens to sit in."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

import trojanscope.provenance

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def _commit_seen_from(module_path: Path) -> str | None:
    module_path.parent.mkdir(parents=True)
    shutil.copy(trojanscope.provenance.__file__, module_path)
    spec = importlib.util.spec_from_file_location("provenance_copy", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.git_commit()


def _repo(root: Path) -> Path:
    root.mkdir()
    _git(root, "init", "-q")
    (root / "README.md").write_text("x\n")
    _git(root, "add", "README.md")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return root


def test_checkout_gives_its_commit_and_marks_uncommitted_changes(tmp_path: Path) -> None:
    root = _repo(tmp_path / "checkout")
    assert _commit_seen_from(root / "src" / "trojanscope" / "provenance.py") == _git(root, "rev-parse", "HEAD")
    (root / "README.md").write_text("changed\n")
    assert _commit_seen_from(root / "src2" / "trojanscope" / "provenance.py") is None  # not <checkout>/src/…
    shutil.rmtree(root / "src")
    head = _git(root, "rev-parse", "HEAD")
    assert _commit_seen_from(root / "src" / "trojanscope" / "provenance.py") == f"{head}+dirty"


def test_installed_copy_inside_another_repository_has_no_commit(tmp_path: Path) -> None:
    root = _repo(tmp_path / "project")
    site = root / ".venv" / "lib" / "python3.11" / "site-packages" / "trojanscope" / "provenance.py"
    assert _commit_seen_from(site) is None
