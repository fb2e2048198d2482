"""Which trojanscope produced a file: the package version and, when run from a git checkout, its commit.

Reports record both so a reader can cite the exact code; an installed wheel has no commit to give.
"""

from __future__ import annotations

import shutil
import subprocess
from functools import cache
from pathlib import Path

from trojanscope import __version__


@cache
def git_commit() -> str | None:
    """The commit of the checkout this package is imported from (``+dirty`` with uncommitted tracked
    changes), or None when it is not a git checkout or git is not installed."""
    package = Path(__file__).resolve().parent
    root = package.parents[1]  # <checkout>/src/trojanscope; a worktree's .git is a file
    git = shutil.which("git")
    if package.parent.name != "src" or not (root / ".git").exists() or git is None:
        return None  # an installed copy, even one inside some other repository, has no commit of its own
    try:
        head = subprocess.run([git, "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run([git, "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head or None


def provenance() -> dict[str, str | None]:
    """``{"trojanscope_version": ..., "trojanscope_commit": ...}`` for run.json files and reports."""
    return {"trojanscope_version": __version__, "trojanscope_commit": git_commit()}
