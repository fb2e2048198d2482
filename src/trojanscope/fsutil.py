"""Atomic file and folder writes: nothing half-written is ever visible under its final name."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Write ``data`` to a temp file beside ``path`` and rename it into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a zoo must be readable like any written file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def file_sha256(path: Path | str) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks so a large archive never sits in memory whole
    (run records and caches use it to tell a rewritten file from the old one)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def atomic_write_text(path: Path | str, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path | str, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


@contextlib.contextmanager
def atomic_dir(final: Path | str) -> Iterator[Path]:
    """Yield a temp folder beside ``final``; on success rename it to ``final`` (replacing it).

    On any exception the temp folder is removed, so a crash never leaves a partial ``final``.
    Temp folders start with ``.tmp-`` so readers can ignore (and resumers delete) leftovers.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".tmp-{final.name}-"))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def check_writable_dir(path: Path | str) -> Path:
    """Create ``path`` if needed and prove it is writable, or raise a one-line error."""
    from trojanscope.errors import ConfigError

    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-", delete=True):
            pass
    except OSError as exc:
        raise ConfigError(f"{path}: output folder is not writable ({exc.strerror}); choose another --out") from None
    return path


class UntrustedFileError(OSError):
    """Why :func:`read_untrusted` refused a file: ``reason`` is ``missing``, ``link``, ``not regular`` or
    ``unreadable``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}{f' ({detail})' if detail else ''}")
        self.reason = reason


def read_untrusted(path: Path | str, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of a file someone else wrote (a sandboxed detector), read as this process
    without following a link and only from a regular file (never a FIFO or a device): the reader cannot be made
    to read, and then quote, a file only it may open. Raises :class:`UntrustedFileError`."""
    import errno
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UntrustedFileError("missing") from None
    except OSError as exc:
        raise UntrustedFileError("link" if exc.errno == errno.ELOOP else "unreadable", exc.strerror or "") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise UntrustedFileError("not regular")
        return fh.read(max_bytes + 1)
