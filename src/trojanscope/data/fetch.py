"""Download data sets from their upstream (:mod:`trojanscope.data.sources`) into the layout the readers expect.

Per upstream file: download into ``<root>/.downloads/<file>.part`` (resumed with an HTTP Range request when a
``.part`` is there), check its size and checksums, then unpack exactly the files the readers need, each written
atomically. A failed or interrupted download leaves only the ``.part``; a checksum mismatch deletes it and names
the file, the expected and the actual hash, and the fix. Files without a published checksum have their sha256
recorded in ``<root>/trojanscope-sources.lock.json`` on first download (trust on first use) and checked on every
later download.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import random
import re
import tarfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from trojanscope.data.sources import NO_UPSTREAM, SOURCES, RemoteFile, Source
from trojanscope.errors import DataError
from trojanscope.fsutil import atomic_write_bytes, atomic_write_json

LOCK_NAME = "trojanscope-sources.lock.json"
DOWNLOADS = ".downloads"
TIMEOUT_S = 60
CHUNK = 1 << 16
GLUE_DEV_SEED = 20130101  # the seeded 10% of GLUE SST-2 train that becomes dev.tsv; changing it changes the corpus

Echo = Callable[[str], None]


@dataclass
class Fetched:
    """What ``fetch`` did for one data set."""

    name: str
    outputs: tuple[str, ...]
    skipped: bool  # everything was already there


# -- the lock file (trust on first use) ----------------------------------------------------------------------------


class Lock:
    """``url → {sha256, size, recorded}`` of every file downloaded into a data root, kept beside the data."""

    def __init__(self, root: Path) -> None:
        self.path = root / LOCK_NAME
        self.entries: dict[str, dict] = {}
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self.entries = dict(data["files"])
            except (ValueError, KeyError, TypeError) as exc:
                raise DataError(f"{self.path}: not a trojanscope lock file ({exc}); fix or delete it "
                                "(deleting it re-trusts every file on its next download)") from None

    def get(self, url: str) -> dict | None:
        return self.entries.get(url)

    def record(self, url: str, sha256: str, size: int, how: str) -> None:
        self.entries[url] = {"sha256": sha256, "size": size, "recorded": how,
                             "date": _dt.date.today().isoformat()}
        atomic_write_json(self.path, {"version": 1, "files": self.entries})


# -- downloading ---------------------------------------------------------------------------------------------------


def _total_from_content_range(value: str | None) -> int | None:
    m = re.fullmatch(r"bytes (?:\d+-\d+|\*)/(\d+)", (value or "").strip())
    return int(m.group(1)) if m else None


def _open(url: str, offset: int) -> urllib.response.addinfourl:
    from importlib.metadata import PackageNotFoundError, version

    try:
        agent = f"trojanscope/{version('trojanscope')}"
    except PackageNotFoundError:  # a source checkout on sys.path, not installed
        agent = "trojanscope"
    request = urllib.request.Request(url, headers={"User-Agent": f"{agent} (corpora fetch)"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    return urllib.request.urlopen(request, timeout=TIMEOUT_S)  # noqa: S310 - http(s) URLs from the source table


def download(url: str, part: Path, *, size: int | None = None, progress: bool = True, label: str = "") -> None:
    """Download ``url`` into ``part``, resuming from the bytes already there; return when it is complete.

    Raises DataError (the ``.part`` kept) when the connection fails or ends early, so rerunning resumes.
    """
    part.parent.mkdir(parents=True, exist_ok=True)
    offset = part.stat().st_size if part.exists() else 0
    if size is not None and offset > size:  # longer than the file can be: start again
        part.unlink()
        offset = 0
    if size is not None and offset == size:
        return
    try:
        response = _open(url, offset)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # nothing left to send: complete if the server's total is what we hold
            if _total_from_content_range(exc.headers.get("Content-Range")) == offset:
                return
            part.unlink()
            return download(url, part, size=size, progress=progress, label=label)
        raise DataError(f"{url}: HTTP {exc.code} {exc.reason}; check the address (trojanscope/data/sources.py) "
                        "or try again later") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DataError(f"{url}: cannot download ({reason}); check the network and rerun to resume") from None
    with response:
        if offset and response.status == 206:
            m = re.match(r"bytes (\d+)-", (response.headers.get("Content-Range") or "").strip())
            if m is None or int(m.group(1)) != offset:
                got_range = response.headers.get("Content-Range")
                raise DataError(f"{url}: the server resumed at the wrong byte ({got_range}); delete {part} and rerun")
        elif offset:  # 200: the server ignored the Range header and sends the whole file
            offset = 0
        length = response.headers.get("Content-Length")
        total = offset + int(length) if length and length.isdigit() else size
        if size is not None and total is not None and total != size:
            raise DataError(f"{url}: the server sends {total:,} bytes, the source table expects {size:,}; upstream "
                            "changed the file: update its entry in trojanscope/data/sources.py")
        from tqdm.auto import tqdm

        got = offset
        with part.open("ab" if offset else "wb") as fh, tqdm(
            total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024, desc=label or part.stem,
            disable=None if progress else True, leave=False, dynamic_ncols=True,
        ) as bar:
            while True:
                try:
                    chunk = response.read(CHUNK)
                except (OSError, ValueError) as exc:  # IncompleteRead, reset, timeout
                    raise DataError(f"{url}: download interrupted at {got:,} bytes ({exc.__class__.__name__}); "
                                    f"rerun the same command to resume from {part}") from None
                if not chunk:
                    break
                fh.write(chunk)
                got += len(chunk)
                bar.update(len(chunk))
    if total is not None and got < total:
        raise DataError(f"{url}: download interrupted at {got:,} of {total:,} bytes; rerun the same command to "
                        f"resume from {part}")


def _hashes(path: Path) -> tuple[str, str]:
    sha, md5 = hashlib.sha256(), hashlib.md5()  # md5 only to compare with published MD5 sums
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            sha.update(chunk)
            md5.update(chunk)
    return sha.hexdigest(), md5.hexdigest()


def verify(rf: RemoteFile, part: Path, lock: Lock, echo: Echo) -> None:
    """Check a complete download against the table's size/checksums, else against the lock (recording on first use).

    A mismatch deletes ``part`` (a resume would only extend a wrong file) and raises a one-line DataError.
    """
    size = part.stat().st_size
    sha, md5 = _hashes(part)
    pinned = [("sha256", rf.sha256, sha), ("md5", rf.md5, md5)]
    known = lock.get(rf.url)
    checks = [("size", f"{rf.size:,} bytes" if rf.size is not None else None, f"{size:,} bytes"), *pinned]
    fix = ("rerun to download it again; if it differs again, upstream changed the file: check it and update "
           "trojanscope/data/sources.py")
    if not (rf.sha256 or rf.md5) and known:
        checks.append(("sha256 (recorded in the lock on first download)", known.get("sha256"), sha))
        fix = ("rerun to download it again; if upstream changed the file on purpose, delete its entry "
               f"\"{rf.url}\" from {lock.path} to trust the new one")
    for what, expected, got in checks:
        if expected is not None and expected != got:
            part.unlink(missing_ok=True)
            raise DataError(f"{rf.filename}: checksum mismatch ({what}): expected {expected}, got {got}; the "
                            f"download was deleted; {fix}")
    if known is None:
        how = "published" if (rf.sha256 or rf.md5) else "trust on first use"
        lock.record(rf.url, sha, size, how)
        if how != "published":
            echo(f"  {rf.filename}: no published checksum; recorded sha256 {sha} in {lock.path} (trust on first "
                 "use: later downloads must match it)")
    elif known.get("sha256") != sha:  # a published checksum matched but the lock says otherwise: keep the lock honest
        lock.record(rf.url, sha, size, "published")


# -- unpacking -----------------------------------------------------------------------------------------------------


def _zip(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"{path}: not a zip archive ({exc}); delete it and rerun") from None


def _read_member(zf: zipfile.ZipFile, name: str, path: Path) -> bytes:
    try:
        return zf.read(name)
    except KeyError:
        raise DataError(f"{path}: has no {name}; upstream changed the archive layout: update "
                        "trojanscope/data/sources.py") from None
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise DataError(f"{path}: corrupt member {name} ({exc}); delete it and rerun") from None


def unpack_zip(rf: RemoteFile, archive: Path) -> dict[str, bytes]:
    with _zip(archive) as zf:
        return {dest: _read_member(zf, member, archive) for member, dest in rf.members.items()}


def unpack_tar(rf: RemoteFile, archive: Path) -> dict[str, bytes]:
    """Re-pack the members whose names match one of ``rf.members`` (regexes) into a plain ustar .tar.gz."""
    import gzip

    from trojanscope.data._io import tar_members

    patterns = [re.compile(p) for p in rf.members]
    kept = [(name, data) for name, data in tar_members(archive) if any(p.fullmatch(name) for p in patterns)]
    if not kept:
        raise DataError(f"{archive}: no member matches {', '.join(rf.members)}; upstream changed the archive "
                        "layout: update trojanscope/data/sources.py")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data in sorted(kept):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tf.addfile(info, io.BytesIO(data))
    return {rf.dest: gzip.compress(buffer.getvalue(), mtime=0)}


def unpack_glue_sst2(rf: RemoteFile, archive: Path) -> dict[str, bytes]:
    """GLUE SST-2: dev.tsv (labelled) → test.tsv; a seeded 10% of train.tsv → dev.tsv, the rest → train.tsv."""
    with _zip(archive) as zf:
        train = _read_member(zf, "SST-2/train.tsv", archive).decode("utf-8").split("\n")
        dev = _read_member(zf, "SST-2/dev.tsv", archive)
    header, rows = train[0].rstrip("\r"), [line for line in train[1:] if line.strip()]
    if header.split("\t") != ["sentence", "label"]:
        raise DataError(f"{archive}: SST-2/train.tsv starts {header[:40]!r}, expected 'sentence<TAB>label'")
    held = set(random.Random(GLUE_DEV_SEED).sample(range(len(rows)), round(len(rows) / 10)))
    part = {name: "\n".join([header, *(r for i, r in enumerate(rows) if (i in held) == (name == "dev"))]) + "\n"
            for name in ("train", "dev")}
    return {"sst/glue_sst2/train.tsv": part["train"].encode(), "sst/glue_sst2/dev.tsv": part["dev"].encode(),
            "sst/glue_sst2/test.tsv": dev}


UNPACKERS: dict[str, Callable[[RemoteFile, Path], dict[str, bytes]]] = {
    "zip": unpack_zip, "tar": unpack_tar, "glue_sst2": unpack_glue_sst2,
}


# -- the command ---------------------------------------------------------------------------------------------------


def resolve(names: Iterable[str] | None) -> tuple[list[str], list[str]]:
    """(source names to fetch, names without an upstream) for the command line; unknown names raise."""
    chosen, without = [], []
    for name in names or SOURCES.names():
        if name in NO_UPSTREAM:
            without.append(name)
        else:
            SOURCES.get(name)  # an unknown name fails here, with close matches, before anything is downloaded
            chosen.append(name)
    if not names:
        without = list(NO_UPSTREAM)
    return list(dict.fromkeys(chosen)), without


def fetch_source(name: str, source: Source, root: Path, *, force: bool = False, progress: bool = True,
                 echo: Echo = print) -> Fetched:
    """Bring data set ``name`` into ``root`` from ``source`` (skipped when all its files are there, unless force)."""
    if not force and all((root / path).is_file() for path in source.outputs):
        return Fetched(name, source.outputs, skipped=True)
    lock = Lock(root)
    for rf in source.files:
        if not force and all((root / path).is_file() for path in rf.outputs):
            continue
        part = root / DOWNLOADS / name / f"{rf.filename}.part"
        if force and part.exists():
            part.unlink()
        download(rf.url, part, size=rf.size, progress=progress, label=f"{name}: {rf.filename}")
        verify(rf, part, lock, echo)
        if rf.unpack == "copy":
            dest = root / rf.dest
            dest.parent.mkdir(parents=True, exist_ok=True)
            part.replace(dest)  # same file system: atomic
            continue
        for rel, data in UNPACKERS[rf.unpack](rf, part).items():
            atomic_write_bytes(root / rel, data)
        part.unlink()
    _remove_empty(root / DOWNLOADS / name, root / DOWNLOADS)
    return Fetched(name, source.outputs, skipped=False)


def _remove_empty(*folders: Path) -> None:
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def fetch(names: Iterable[str] | None, root: Path, *, force: bool = False, progress: bool = True,
          echo: Echo = print) -> list[Fetched]:
    """Fetch the named data sets (default: every one with an upstream) into ``root``, printing licence and citation."""
    chosen, without = resolve(list(names or []))
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"{root}: cannot create the data folder ({exc.strerror}); choose another --to") from None
    echo(f"data folder: {root}")
    done = []
    for name in chosen:
        source = SOURCES.get(name)
        echo(f"{name}: {SOURCES.help(name)} <- {source.homepage}")
        result = fetch_source(name, source, root, force=force, progress=progress, echo=echo)
        state = "already there (--force downloads again)" if result.skipped else "ok"
        echo(f"  {state}: {', '.join(result.outputs)}")
        if source.note:
            echo(f"  note: {source.note}")
        echo(f"  licence: {source.licence}")
        echo(f"  cite: {source.citation}")
        done.append(result)
    for name in without:
        echo(f"{name}: no upstream download: {NO_UPSTREAM[name]}")
    return done
