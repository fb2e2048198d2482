"""Safe extraction of uploaded submissions (.zip or .tar.gz) and their manifest.

Nothing is ever written outside the destination folder: absolute paths, ``..`` parts, links,
device files and names with control characters are refused, as are archives with too many
members or too many bytes once extracted (zip bombs). Sizes are counted while copying, not taken
from the archive's headers, which can lie.
"""

from __future__ import annotations

import shlex
import shutil
import stat
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from trojanscope.errors import ConfigError

MANIFEST = "trojanscope-submission.toml"
_CHUNK = 1 << 16


class UploadError(ConfigError):
    """An uploaded submission is malformed, unsafe or too large (HTTP 4xx)."""


def archive_kind(path: Path) -> str:
    """``zip`` or ``tar.gz`` from the file's first bytes (the upload's name is not trusted)."""
    with path.open("rb") as fh:
        head = fh.read(4)
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "zip"
    if head.startswith(b"\x1f\x8b"):
        return "tar.gz"
    raise UploadError("upload is neither a .zip nor a .tar.gz archive; pack the detector folder with zip or tar -czf")


def _safe_name(name: str) -> PurePosixPath:
    if not name or "\x00" in name or any(ord(c) < 32 for c in name):
        raise UploadError(f"archive member {name!r} has control characters in its name; rename it")
    if "\\" in name:
        raise UploadError(f"archive member {name!r} contains a backslash; use / separated paths")
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or (p.parts and p.parts[0].endswith(":")):
        raise UploadError(f"archive member {name!r} points outside the submission folder; use relative paths")
    return p


def safe_extract(archive: Path, dest: Path, *, max_files: int, max_bytes: int) -> list[str]:
    """Extract ``archive`` into ``dest`` (created) and return the member names written."""
    # One linear pass on purpose: every safety check on a member sits next to the write it guards.
    kind = archive_kind(archive)
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    written: list[str] = []
    total = 0

    def copy(src, rel: PurePosixPath, executable: bool = False) -> None:  # type: ignore[no-untyped-def]
        nonlocal total
        target = (root / rel).resolve()
        if root not in target.parents:
            raise UploadError(f"archive member {str(rel)!r} points outside the submission folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("xb") as out:
            while chunk := src.read(_CHUNK):
                total += len(chunk)
                if total > max_bytes:
                    raise UploadError(f"submission is larger than {max_bytes} bytes once extracted; make it smaller")
                out.write(chunk)
        # Only the owner-execute bit survives (so `command = "./run.sh"` works); never setuid or others' bits.
        target.chmod(0o755 if executable else 0o644)
        written.append(str(rel))

    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as zf:
                infos = zf.infolist()
                if len(infos) > max_files:
                    raise UploadError(f"archive has {len(infos)} members, the limit is {max_files}")
                for info in infos:
                    rel = _safe_name(info.filename)
                    mode = (info.external_attr >> 16) & 0o170000
                    if mode and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                        raise UploadError(f"archive member {info.filename!r} is a link or special file; "
                                          "only regular files are accepted")
                    if info.is_dir():
                        (root / rel).mkdir(parents=True, exist_ok=True)
                        continue
                    with zf.open(info) as src:
                        copy(src, rel, bool(mode & 0o100))
        else:
            with tarfile.open(archive, "r:gz") as tf:
                count = 0
                for member in tf:  # streamed so a huge member list cannot exhaust memory first
                    count += 1
                    if count > max_files:
                        raise UploadError(f"archive has more than {max_files} members; pack fewer files")
                    rel = _safe_name(member.name)
                    if member.isdir():
                        (root / rel).mkdir(parents=True, exist_ok=True)
                        continue
                    if not member.isfile():
                        raise UploadError(f"archive member {member.name!r} is a link or special file; "
                                          "only regular files are accepted")
                    src = tf.extractfile(member)
                    assert src is not None
                    copy(src, rel, bool(member.mode & 0o100))
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, FileExistsError):
            raise UploadError(f"archive holds {Path(exc.filename or '?').name!r} twice; pack each file once") from None
        raise UploadError(f"archive is corrupt or truncated ({type(exc).__name__}); pack it again") from None
    return written


@dataclass(frozen=True)
class Manifest:
    """A submission's ``trojanscope-submission.toml``: the command, and whether to run its configure step."""

    command: str
    configure: bool = False


def load_manifest(folder: Path) -> Manifest:
    """``trojanscope-submission.toml`` at the submission's top level, validated."""
    path = folder / MANIFEST
    if not path.is_file():
        raise UploadError(f"{MANIFEST} not found at the top of the archive; "
                          "add one with command = \"python detector.py\"")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UploadError(f"{MANIFEST}: not valid TOML ({exc}); write command = \"python detector.py\"") from None
    unknown = set(data) - {"command", "name", "description", "configure"}
    if unknown:
        raise UploadError(f"{MANIFEST}: unknown keys {sorted(unknown)}; allowed: command, configure, name, "
                          "description")
    command = data.get("command")
    if not isinstance(command, str) or not command.strip() or len(command) > 1000:
        raise UploadError(f"{MANIFEST}: command must be a non-empty string under 1000 characters, "
                          "e.g. command = \"python detector.py\"")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise UploadError(f"{MANIFEST}: command {command!r} cannot be split into arguments ({exc})") from None
    if not argv:
        raise UploadError(f"{MANIFEST}: command is empty")
    configure = data.get("configure", False)
    if not isinstance(configure, bool):
        raise UploadError(f"{MANIFEST}: configure must be true or false, not {configure!r}")
    return Manifest(command=command, configure=configure)


def read_manifest(folder: Path) -> str:
    """The validated ``command`` of the submission's manifest."""
    return load_manifest(folder).command


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
