"""File access for readers: every failure becomes a one-line DataError naming the path and the fix."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trojanscope.errors import DataError


def require_file(path: Path, expected: str) -> Path:
    """Return ``path`` if it is a file, else raise naming it and what belongs there."""
    if not path.is_file():
        raise DataError(f"{path}: not found; expected {expected}")
    return path


def require_glob(folder: Path, pattern: str, expected: str) -> list[Path]:
    """Files in ``folder`` matching ``pattern``, sorted by name; at least one must exist."""
    paths = sorted(p for p in folder.glob(pattern) if p.is_file())
    if not paths:
        raise DataError(f"{folder / pattern}: no such files; expected {expected}")
    return paths


def read_gzip(path: Path) -> bytes:
    """The decompressed bytes of a gzip file (whole-file reads are much faster than streaming)."""
    try:
        return gzip.decompress(path.read_bytes())
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: corrupt or truncated gzip ({exc}); download the file again") from exc


_ZERO_BLOCK = bytes(512)
_PLAIN_TYPES = (b"0", b"\0", b"5")  # regular file (new and old flag), directory


def _octal(field: bytes) -> int:
    return int(field.replace(b"\0", b" ").strip() or b"0", 8)


def _plain_ustar(data: bytes, path: Path) -> list[tuple[str, bytes]] | None:
    """Fast path for ustar/GNU archives holding only files and folders; None when anything else appears.

    tarfile spends ~90% of the IMDB read building 50k TarInfo objects; the corpora tarballs are
    plain, so their headers are read here directly (checksums verified) and tarfile handles the rest.
    """
    out = []
    offset = 0
    while offset + 512 <= len(data):
        header = data[offset : offset + 512]
        if header == _ZERO_BLOCK:
            break
        if header[257:262] != b"ustar" or header[156:157] not in _PLAIN_TYPES or header[124] & 0x80:
            return None
        try:
            size, checksum = _octal(header[124:136]), _octal(header[148:156])
        except ValueError:
            return None
        if sum(header[:148]) + 8 * 32 + sum(header[156:]) != checksum:
            raise DataError(f"{path}: corrupt tar header at byte {offset}; download the file again")
        name = header[:100].split(b"\0", 1)[0]
        prefix = header[345:500].split(b"\0", 1)[0] if header[257:263] == b"ustar\0" else b""
        if prefix:
            name = prefix + b"/" + name
        start = offset + 512
        if start + size > len(data):
            raise DataError(f"{path}: tar archive ends inside {name.decode(errors='replace')}; download the file again")
        if header[156:157] != b"5":
            out.append((name.decode("utf-8", "surrogateescape"), data[start : start + size]))
        offset = start + (size + 511) // 512 * 512
    return out


def tar_members(path: Path) -> Iterator[tuple[str, bytes]]:
    """(member name, content) for every regular file of a ``.tar.gz``, in archive order."""
    data = read_gzip(path)
    plain = _plain_ustar(data, path)
    if plain is not None:
        yield from plain
        return
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
            for member in tf:
                fh = tf.extractfile(member) if member.isfile() else None  # extractfile also handles sparse files
                if fh is not None:
                    yield member.name, fh.read()
    except tarfile.TarError as exc:
        raise DataError(f"{path}: corrupt tar archive ({exc}); download the file again") from exc


def decode(data: bytes, where: str) -> str:
    """UTF-8 text, or a DataError naming ``where``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{where}: not UTF-8 text (byte {exc.start}); the file is damaged or mis-encoded") from exc


def read_text(path: Path) -> str:
    """The UTF-8 text of a plain file."""
    return decode(path.read_bytes(), str(path))


def json_lines(text: str, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) for every non-blank line (split on "\\n" only: JSON may hold U+2028)."""
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: not a JSON object ({exc.msg}); the JSON-lines file is damaged") from exc
        if not isinstance(obj, dict):
            raise DataError(f"{path}:{number}: expected a JSON object per line, got {type(obj).__name__}")
        yield number, obj
