"""Where things live: the corpora root and the embedding cache.

Corpora are read from ``--data-root``, else the ``TROJANSCOPE_DATA`` environment variable (in this
repository's development environment that is ``../shared/data``), else the user data folder
:func:`default_data_root` (``$XDG_DATA_HOME/trojanscope/data``, by default ``~/.local/share/trojanscope/data``),
which ``trojanscope corpora fetch`` fills. The embedding cache defaults to ``~/.cache/trojanscope`` and can be
moved with ``TROJANSCOPE_CACHE``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from trojanscope.errors import DataError


def default_data_root() -> Path:
    """The per-user corpora folder used when neither --data-root nor TROJANSCOPE_DATA is given (may not exist).

    ``$XDG_DATA_HOME/trojanscope/data`` when XDG_DATA_HOME is set (any OS), else ``~/.local/share/trojanscope/data``
    on Linux and other Unixes, ``~/Library/Application Support/trojanscope/data`` on macOS and
    ``%LOCALAPPDATA%\\trojanscope\\data`` on Windows.
    """
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg and Path(xdg).is_absolute():  # the XDG spec: a relative value is invalid and ignored
        base = Path(xdg)
    elif sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        base = Path(os.environ["LOCALAPPDATA"])
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path.home() / ".local" / "share"
    return base / "trojanscope" / "data"


def data_root_target(explicit: Path | str | None = None) -> Path:
    """Where corpora are read from (and fetched to): --data-root, else TROJANSCOPE_DATA, else the user folder.

    Unlike :func:`data_root` the folder need not exist yet.
    """
    candidate = explicit or os.environ.get("TROJANSCOPE_DATA")
    return Path(candidate).expanduser() if candidate else default_data_root()


def data_root(explicit: Path | str | None = None) -> Path:
    """Resolve the corpora root or raise a one-line error that says how to set or fill it."""
    root = data_root_target(explicit)
    if root.is_dir():
        return root
    if explicit or os.environ.get("TROJANSCOPE_DATA"):
        raise DataError(f"{root}: corpora folder does not exist; set TROJANSCOPE_DATA or --data-root to it")
    raise DataError(
        f"{root}: no corpora here yet (the default folder, used when neither --data-root nor TROJANSCOPE_DATA is "
        "set); download them with `trojanscope corpora fetch NAME` (or point --data-root / TROJANSCOPE_DATA at "
        "a folder holding imdb/, amazon/, sst/, ...)"
    )


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
