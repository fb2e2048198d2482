"""A round's train split for teams: authenticated, streamed, resumable (HTTP Range), verified; test and holdout
never leave the server. The CLI is exercised against a real HTTP server."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trojanscope.cli import build_app
from trojanscope.errors import ConfigError, DataError
from trojanscope.leaderboard.client import download_train_split

from .helpers import admin, round_body

URL = "/api/rounds/r1/splits/train"


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_train_split_is_a_streamed_resumable_tar_for_teams_only(client, setup_round, zoos) -> None:  # type: ignore[no-untyped-def]
    token = setup_round()["alpha"]
    assert client.get(URL).status_code == 401
    assert client.get(URL, headers=_auth("not-a-team")).status_code == 403
    for split in ("test", "holdout"):  # never, whoever asks
        for headers in (_auth(token), admin()):
            for path in (f"/api/rounds/r1/splits/{split}", f"/api/rounds/r1/splits/{split}/info"):
                r = client.get(path, headers=headers)
                assert r.status_code == 403 and "never leaves the server" in r.json()["detail"]
    assert client.get("/api/rounds/r1/splits/other", headers=_auth(token)).status_code == 404

    info = client.get(f"{URL}/info", headers=_auth(token)).json()
    whole = client.get(URL, headers=_auth(token))
    assert whole.status_code == 200 and whole.headers["accept-ranges"] == "bytes"
    assert int(whole.headers["content-length"]) == len(whole.content) == info["size_bytes"]
    assert hashlib.sha256(whole.content).hexdigest() == info["sha256"]
    assert whole.headers["etag"] == f'"{info["etag"]}"'
    with tarfile.open(fileobj=io.BytesIO(whole.content)) as tf:
        got = {m.name.removeprefix("r1-train/"): tf.extractfile(m).read() for m in tf if m.isfile()}
    assert got == _files(zoos["train"]) and info["n_files"] == len(got)  # labels and full configs included
    assert any(name.endswith("ground_truth.csv") for name in got)
    assert client.get(URL, headers=admin()).content == whole.content  # organisers too; the bytes are stable

    size = info["size_bytes"]
    for rng, (lo, hi) in (("bytes=100-1123", (100, 1123)), ("bytes=700-", (700, size - 1)),
                          ("bytes=-10", (size - 10, size - 1))):
        part = client.get(URL, headers={**_auth(token), "Range": rng, "If-Range": whole.headers["etag"]})
        assert part.status_code == 206, rng
        assert part.headers["content-range"] == f"bytes {lo}-{hi}/{size}"
        assert part.content == whole.content[lo:hi + 1]
    stale = client.get(URL, headers={**_auth(token), "Range": "bytes=700-", "If-Range": '"an-old-version"'})
    assert stale.status_code == 200 and stale.content == whole.content  # changed since: sent whole
    beyond = client.get(URL, headers={**_auth(token), "Range": f"bytes={size}-"})
    assert beyond.status_code == 416 and beyond.headers["content-range"] == f"bytes */{size}"
    head = client.head(URL, headers=_auth(token))
    assert head.status_code == 200 and head.headers["content-length"] == str(size) and head.content == b""


def test_train_split_refused_when_unsafe_or_unpublished(client, zoos) -> None:  # type: ignore[no-untyped-def]
    from trojanscope.leaderboard.db import Round

    for name, kw in (("same", {"test": str(zoos["train"])}), ("inside", {"holdout": str(zoos["train"] / "models")}),
                     ("later", {"status": "pending"})):
        r = client.post("/api/rounds", json=round_body(zoos, name=name, **kw), headers=admin())
        if name == "later":
            assert r.status_code == 201, r.text
        else:  # registration refuses splits that share models; a row written around it is still refused below
            assert r.status_code == 422, r.text
            with client.app.state.sessionmaker() as s:
                s.add(Round(name=name, train_dir=str(zoos["train"]), status="open",
                            test_dir=kw.get("test", str(zoos["test"])), holdout_dir=kw.get("holdout")))
                s.commit()
        r = client.get(f"/api/rounds/{name}/splits/train", headers=admin())
        assert r.status_code == 409, (name, r.text)
        assert ("never leaves the server" in r.json()["detail"]) == (name != "later")


def test_cli_download_resumes_verifies_and_unpacks(client, setup_round, zoos, live_server, tmp_path,  # type: ignore[no-untyped-def]
                                                   capsys) -> None:
    token = setup_round()["alpha"]
    info = client.get(f"{URL}/info", headers=_auth(token)).json()
    whole = client.get(URL, headers=_auth(token)).content
    out = tmp_path / "r1-train"
    part, meta = tmp_path / ".r1-train.tar.part", tmp_path / ".r1-train.tar.part.json"
    # an interrupted earlier run: the first 3000 bytes and the split's etag
    part.write_bytes(whole[:3000])
    meta.write_text(json.dumps({"etag": info["etag"]}))
    res = CliRunner().invoke(build_app(), ["rounds", "download", "r1", "--out", str(out), "--server", live_server,
                                           "--quiet"], env={"TROJANSCOPE_TEAM_TOKEN": token})
    assert res.exit_code == 0, res.output
    assert "resumed at byte 3000" in res.output and f"{info['size_bytes']} bytes" in res.output
    assert _files(out) == _files(zoos["train"])
    assert not part.exists() and not meta.exists()
    # a partial copy that does not match the archive is caught by the sha256, removed, and the rerun succeeds
    out2 = tmp_path / "again"
    bad_part = tmp_path / ".again.tar.part"
    bad_part.write_bytes(b"x" * 3000)
    (tmp_path / ".again.tar.part.json").write_text(json.dumps({"etag": info["etag"]}))
    with pytest.raises(DataError, match="download is corrupt"):
        download_train_split(live_server, "r1", out2, token, progress=False)
    assert not bad_part.exists() and not out2.exists()
    assert download_train_split(live_server, "r1", out2, token, progress=False)["resumed_from"] == 0
    assert _files(out2) == _files(zoos["train"])
    # bad input: one line, exit 2, nothing written
    from trojanscope.cli import main

    for args, message in ((["r1", "--out", str(out), "--token", token], "not empty"),
                          (["r1", "--out", str(tmp_path / "x"), "--token", "wrong"], "HTTP 403"),
                          (["nope", "--out", str(tmp_path / "x"), "--token", token], "HTTP 404")):
        with pytest.raises(SystemExit) as exc:
            main(["rounds", "download", *args, "--server", live_server, "--quiet"])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()
    with pytest.raises(ConfigError, match="cannot download"):
        download_train_split("http://127.0.0.1:9", "r1", tmp_path / "y", token, progress=False)
