"""Where things live: the corpora root and the embedding cache.

Corpora are read from ``--data-root`` or the ``TROJANSCOPE_DATA`` environment variable (in this
repository's development environment that is ``../shared/data``). The embedding cache defaults
to ``~/.cache/trojanscope`` and can be moved with ``TROJANSCOPE_CACHE``.
"""

from __future__ import annotations

import os
from pathlib import Path

from trojanscope.errors import DataError


def data_root(explicit: Path | str | None = None) -> Path:
    """Resolve the corpora root or raise a one-line error that says how to set it."""
    candidate = explicit or os.environ.get("TROJANSCOPE_DATA")
    if not candidate:
        raise DataError(
            "no corpora folder given: pass --data-root DIR or set TROJANSCOPE_DATA "
            "(the folder that holds imdb/, amazon/, sst/, ...)"
        )
    root = Path(candidate).expanduser()
    if not root.is_dir():
        raise DataError(f"{root}: corpora folder does not exist; set TROJANSCOPE_DATA or --data-root to it")
    return root


def cache_dir(explicit: Path | str | None = None) -> Path:
    root = explicit or os.environ.get("TROJANSCOPE_CACHE") or Path.home() / ".cache" / "trojanscope"
    path = Path(root).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path
