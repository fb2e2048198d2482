"""``trojanscope rounds download``: fetch a round's train split from a leaderboard, resumably, and unpack it.

The archive is written to ``.<out>.tar.part`` beside ``--out`` with the split's etag in
``.<out>.tar.part.json``; an interrupted run leaves both, and the next run asks only for the missing bytes
(``Range`` + ``If-Range``, so a split that changed meanwhile is fetched whole again). The finished
archive is checked against the server's size and sha256, then unpacked with tarfile's ``data`` filter
(no links out, no absolute paths, no special files) into a temp folder renamed to ``--out``.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import httpx

from trojanscope.errors import ConfigError, DataError
from trojanscope.fsutil import atomic_dir, atomic_write_json, file_sha256

CHUNK = 1 << 20


def _check(resp: httpx.Response, server: str) -> None:
    if resp.status_code < 400:
        return
    resp.read()  # a streamed error response holds its JSON detail too
    try:
        detail = resp.json().get("detail", resp.text)
    except ValueError:
        detail = resp.text
    raise ConfigError(f"{server}: HTTP {resp.status_code}: {str(detail)[:300]}")


def download_train_split(server: str, round_name: str, out: Path | str, token: str, *, progress: bool = True,
                         http: httpx.Client | None = None) -> dict[str, Any]:
    """Download, verify and unpack ``round_name``'s train split into ``out``; returns the server's split info
    plus ``resumed_from`` (bytes already on disk when this run started)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{out}: already exists and is not empty; choose another --out or remove it")
    url = f"{server.rstrip('/')}/api/rounds/{round_name}/splits/train"
    own = http is None
    http = http or httpx.Client(timeout=httpx.Timeout(30.0, read=600.0))
    headers = {"Authorization": f"Bearer {token}"}
    part = out.parent / f".{out.name}.tar.part"
    meta = out.parent / f".{out.name}.tar.part.json"
    try:
        resp = http.get(f"{url}/info", headers=headers)
        _check(resp, server)
        info = resp.json()
        size, etag = int(info["size_bytes"]), str(info["etag"])
        start = 0
        if part.is_file() and meta.is_file() and _read_etag(meta) == etag and part.stat().st_size <= size:
            start = part.stat().st_size
        else:
            part.unlink(missing_ok=True)
            atomic_write_json(meta, {"etag": etag, "size_bytes": size, "sha256": info["sha256"]})
        info["resumed_from"] = start
        if start < size:
            _fetch(http, url, headers, part, start, size, etag, server,
                   f"{round_name}-train.tar", progress)
        _verify(part, meta, size, str(info["sha256"]))
        _unpack(part, out, f"{round_name}-train")
    except httpx.HTTPError as exc:
        raise ConfigError(f"{server}: cannot download ({type(exc).__name__}: {exc}); check --server, then run "
                          "the same command again to resume") from None
    finally:
        if own:
            http.close()
    part.unlink(missing_ok=True)
    meta.unlink(missing_ok=True)
    return info


def _read_etag(meta: Path) -> str | None:
    try:
        return str(json.loads(meta.read_text()).get("etag"))
    except (OSError, ValueError, AttributeError):
        return None


def _fetch(http: httpx.Client, url: str, headers: dict[str, str], part: Path, start: int, size: int, etag: str,
           server: str, label: str, progress: bool) -> None:
    from tqdm.auto import tqdm

    ranged = {**headers, "Range": f"bytes={start}-", "If-Range": f'"{etag}"'} if start else headers
    with http.stream("GET", url, headers=ranged) as resp:
        if resp.status_code == 416:  # our partial copy is longer than the archive: start over next time
            part.unlink(missing_ok=True)
            raise DataError(f"{part}: partial download does not fit the server's archive; it was removed, run the "
                            "command again")
        _check(resp, server)
        if resp.status_code == 206:
            if not resp.headers.get("content-range", "").startswith(f"bytes {start}-"):
                raise DataError(f"{server}: answered a different byte range than asked for; run the command again")
            mode = "ab"
        else:  # 200: the whole archive (the split changed, or the server ignored the range)
            start, mode = 0, "wb"
        with part.open(mode) as fh, tqdm(total=size, initial=start, unit="B", unit_scale=True, unit_divisor=1024,
                                         desc=label, disable=not progress) as bar:
            for chunk in resp.iter_bytes(CHUNK):
                fh.write(chunk)
                bar.update(len(chunk))


def _verify(part: Path, meta: Path, size: int, sha256: str) -> None:
    got = part.stat().st_size if part.is_file() else 0
    if got == size:
        digest = file_sha256(part)
        if digest == sha256:
            return
        problem = f"sha256 {digest[:16]}... is not the server's {sha256[:16]}..."
    else:
        problem = f"{got} bytes instead of {size}"
    part.unlink(missing_ok=True)
    meta.unlink(missing_ok=True)
    raise DataError(f"{part}: download is corrupt ({problem}); it was removed, run the command again")


def _unpack(part: Path, out: Path, prefix: str) -> None:
    with atomic_dir(out) as tmp:
        try:
            with tarfile.open(part, "r:") as tf:
                members = tf.getmembers()
                stray = [m.name for m in members if not m.name.startswith(f"{prefix}/")]
                if stray:
                    raise DataError(f"{part}: member {stray[0]!r} is outside {prefix}/; not a train split archive")
                tf.extractall(tmp, members=members, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise DataError(f"{part}: cannot unpack ({exc}); delete it and run the command again") from None
        for child in (tmp / prefix).iterdir():
            child.rename(tmp / child.name)
        (tmp / prefix).rmdir()
