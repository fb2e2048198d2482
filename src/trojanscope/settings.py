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
    """The cache folder (created if missing), or a one-line error if the path names something else."""
    root = explicit or os.environ.get("TROJANSCOPE_CACHE") or Path.home() / ".cache" / "trojanscope"
    path = Path(root).expanduser()
    if path.exists() and not path.is_dir():
        where = "the path given" if explicit else "TROJANSCOPE_CACHE"
        raise DataError(f"{path}: not a folder; {where} names the cache folder (the embedding cache is "
                        f"embeddings.sqlite inside it), e.g. {path.parent}")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"{path}: cannot create the cache folder ({exc.strerror}); set TROJANSCOPE_CACHE to a "
                        "writable folder") from None
    return path
