"""A round's train split as a tar archive that is streamed, never stored, and can be resumed at any byte.

The archive is laid out from the folder's listing alone (sorted names, fixed owner, mode and mtime),
so its size and every byte offset are known before anything is read: a ``Range`` request is served
by seeking into the one or two files it covers. Its ``etag`` changes whenever a file is added,
removed or rewritten, so a client resuming against a changed split starts over (``If-Range``).
Only regular files inside the folder go in: links, hidden names, ``.tmp-*`` leftovers and the zoo's
``failed/`` folder (draws that did not converge, replaced in the release and kept for the organiser's study) stay
out.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from trojanscope.fsutil import atomic_write_text

REJECTED_DIR = "failed"  # rounds.zoo.FAILED_DIR; not imported, so this module stays light
BLOCK = 512
CHUNK = 1 << 20
_END = b"\0" * (2 * BLOCK)


@dataclass(frozen=True)
class _Segment:
    offset: int
    length: int
    data: bytes | None = None  # a header, padding or the end marker
    path: Path | None = None  # a file's bytes


class SplitArchive:
    """The tar archive of ``folder``, with members under ``prefix/``."""

    def __init__(self, folder: Path, prefix: str) -> None:
        self.folder, self.prefix = Path(folder), prefix
        root = self.folder.resolve()
        segments: list[_Segment] = []
        digest = hashlib.sha256()
        offset, n_files = 0, 0
        for path in sorted(p for p in root.rglob("*") if not p.is_symlink() and p.is_file()):
            rel = path.relative_to(root)
            if any(part.startswith(".") for part in rel.parts) or rel.parts[0] == REJECTED_DIR:
                continue
            st = path.stat()
            info = tarfile.TarInfo(f"{prefix}/{rel.as_posix()}")
            info.size, info.mode, info.mtime = st.st_size, 0o644, 0
            header = info.tobuf(format=tarfile.PAX_FORMAT)
            segments += [_Segment(offset, len(header), data=header),
                         _Segment(offset + len(header), st.st_size, path=path)]
            offset += len(header) + st.st_size
            pad = -st.st_size % BLOCK
            if pad:
                segments.append(_Segment(offset, pad, data=b"\0" * pad))
                offset += pad
            digest.update(f"{rel.as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            n_files += 1
        segments.append(_Segment(offset, len(_END), data=_END))
        self.segments = segments
        self.size = offset + len(_END)
        self.n_files = n_files
        self.etag = digest.hexdigest()[:32]

    def iter_bytes(self, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """Bytes ``start`` to ``end`` inclusive (default: to the last one), in chunks of at most 1 MiB."""
        end = self.size - 1 if end is None else end
        for seg in self.segments:
            lo, hi = max(start, seg.offset), min(end, seg.offset + seg.length - 1)
            if lo > hi:
                continue
            if seg.data is not None:
                yield seg.data[lo - seg.offset: hi - seg.offset + 1]
                continue
            assert seg.path is not None
            with seg.path.open("rb") as fh:
                fh.seek(lo - seg.offset)
                left = hi - lo + 1
                while left > 0:
                    chunk = fh.read(min(CHUNK, left))
                    if not chunk:  # the file shrank since it was listed: the etag no longer holds
                        raise OSError(f"{seg.path} changed while it was being sent")
                    left -= len(chunk)
                    yield chunk

    def sha256(self, cache_dir: Path) -> str:
        """The whole archive's sha256, computed once per etag and kept in ``cache_dir``."""
        cached = cache_dir / f"{self.prefix}-{self.etag}.sha256"
        if cached.is_file():
            return cached.read_text().strip()
        digest = hashlib.sha256()
        for chunk in self.iter_bytes():
            digest.update(chunk)
        atomic_write_text(cached, digest.hexdigest() + "\n")
        return digest.hexdigest()


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end)`` of a single ``bytes=`` range, ``None`` to send the whole archive; raises ``ValueError``
    for a range that lies beyond the archive (HTTP 416). Several ranges are answered with the whole archive."""
    if not header:
        return None
    m = re.fullmatch(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", header)
    if m is None or (not m.group(1) and not m.group(2)):
        return None
    if not m.group(1):  # the last N bytes
        n = int(m.group(2))
        if n == 0:
            raise ValueError("empty suffix range")
        return max(0, size - n), size - 1
    start = int(m.group(1))
    end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
    if start >= size or start > end:
        raise ValueError(f"range starts at {start}, the archive has {size} bytes")
    return start, end
