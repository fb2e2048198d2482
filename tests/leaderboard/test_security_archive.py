"""Tokens are stored hashed; uploads never escape their folder and are size- and count-limited."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from trojanscope.leaderboard import archive, security


def test_team_token_hash_roundtrip_and_no_plaintext() -> None:
    token = security.new_team_token(7)
    stored = security.hash_token(token)
    assert token not in stored and stored.startswith("scrypt$")
    assert security.verify_token(token, stored)
    assert not security.verify_token(token + "x", stored)
    assert not security.verify_token(token, "garbage")
    assert security.team_id_from_token(token) == 7
    assert security.team_id_from_token("ts_7_short") is None
    assert security.hash_token(token) != stored  # salted


def test_admin_compare() -> None:
    assert security.admin_matches("abc", "abc")
    assert not security.admin_matches("abd", "abc")
    assert not security.admin_matches("", "abc")
    assert not security.admin_matches("abc", None)  # no configured token: nobody is organiser


def _zip(members: dict[str, bytes], link: str | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = (0o120777 << 16)
            zf.writestr(info, "/etc/passwd")
    return buf.getvalue()


def _tar(add) -> bytes:  # type: ignore[no-untyped-def]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        add(tf)
    return buf.getvalue()


def _file(tf: tarfile.TarFile, name: str, data: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def _extract(tmp_path: Path, data: bytes, **kw: int) -> list[str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / "upload"
    src.write_bytes(data)
    return archive.safe_extract(src, tmp_path / "dest", max_files=kw.get("max_files", 50),
                                max_bytes=kw.get("max_bytes", 10_000))


@pytest.mark.parametrize("name", ["../evil.py", "/abs/evil.py", "a/../../evil.py", "a\\..\\evil.py", "C:/x.py"])
def test_zip_path_traversal_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(archive.UploadError, match="outside|backslash"):
        _extract(tmp_path, _zip({"ok.txt": b"1", name: b"boom"}))
    assert not (tmp_path / "evil.py").exists() and not Path("/abs/evil.py").exists()


@pytest.mark.parametrize("kind", ["traversal", "symlink", "hardlink", "device"])
def test_tar_unsafe_members_refused(tmp_path: Path, kind: str) -> None:
    def add(tf: tarfile.TarFile) -> None:
        if kind == "traversal":
            _file(tf, "../../evil.py")
        else:
            info = tarfile.TarInfo("link")
            info.type = {"symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE, "device": tarfile.CHRTYPE}[kind]
            info.linkname = "/etc/passwd"
            tf.addfile(info)
    with pytest.raises(archive.UploadError, match="outside|link or special"):
        _extract(tmp_path, _tar(add))
    assert not (tmp_path / "evil.py").exists() and not (tmp_path.parent / "evil.py").exists()


def test_zip_symlink_refused(tmp_path: Path) -> None:
    with pytest.raises(archive.UploadError, match="link or special"):
        _extract(tmp_path, _zip({"a.txt": b"1"}, link="passwd"))


def test_zip_bomb_and_member_count_refused(tmp_path: Path) -> None:
    with pytest.raises(archive.UploadError, match="larger than 10000 bytes"):
        _extract(tmp_path, _zip({"zeros.bin": b"\0" * 200_000}))  # compresses to a few hundred bytes
    with pytest.raises(archive.UploadError, match="members"):
        _extract(tmp_path / "b", _zip({f"f{i}.txt": b"1" for i in range(60)}))
    with pytest.raises(archive.UploadError, match="more than 50 members"):
        _extract(tmp_path / "c", _tar(lambda tf: [_file(tf, f"f{i}") for i in range(60)]))


@pytest.mark.parametrize("data,match", [(b"hello world", "neither"), (b"PK\x03\x04garbage", "corrupt"),
                                        (b"\x1f\x8b\x08\x00garbage", "corrupt")])
def test_malformed_archives(tmp_path: Path, data: bytes, match: str) -> None:
    with pytest.raises(archive.UploadError, match=match):
        _extract(tmp_path / "a", data)


def test_good_archives_extract(tmp_path: Path) -> None:
    names = _extract(tmp_path / "z", _zip({"pkg/detector.py": b"print(1)", "trojanscope-submission.toml": b"x"}))
    assert sorted(names) == ["pkg/detector.py", "trojanscope-submission.toml"]
    names = _extract(tmp_path / "t", _tar(lambda tf: _file(tf, "d/x.py", b"1")))
    assert names == ["d/x.py"] and (tmp_path / "t" / "dest" / "d" / "x.py").read_bytes() == b"1"


@pytest.mark.parametrize("text,match", [
    (None, "not found"), ("command = ", "not valid TOML"), ("command = 3", "non-empty string"),
    ('command = "   "', "non-empty string"), ('command = "python \'unclosed"', "cannot be split"),
    ('command = "python d.py"\nnetwork = true', "unknown keys")])
def test_manifest_validation(tmp_path: Path, text: str | None, match: str) -> None:
    if text is not None:
        (tmp_path / archive.MANIFEST).write_text(text)
    with pytest.raises(archive.UploadError, match=match):
        archive.read_manifest(tmp_path)


def test_manifest_ok(tmp_path: Path) -> None:
    (tmp_path / archive.MANIFEST).write_text('command = "python detector.py --fast"\n')
    assert archive.read_manifest(tmp_path) == "python detector.py --fast"


def test_owner_execute_bit_kept_and_nothing_else(tmp_path: Path) -> None:
    def add(tf: tarfile.TarFile) -> None:
        for name, mode in (("run.sh", 0o4777), ("data.txt", 0o666)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = 1, mode
            tf.addfile(info, io.BytesIO(b"x"))
    _extract(tmp_path, _tar(add))
    assert (tmp_path / "dest" / "run.sh").stat().st_mode & 0o7777 == 0o755
    assert (tmp_path / "dest" / "data.txt").stat().st_mode & 0o7777 == 0o644
