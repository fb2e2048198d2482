"""``trojanscope corpora fetch`` against a loopback HTTP server (127.0.0.1 only; nothing leaves the machine)."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from trojanscope.data import readers
from trojanscope.data.cli import register
from trojanscope.data.fetch import DOWNLOADS, LOCK_NAME, fetch
from trojanscope.data.sources import SOURCES, RemoteFile, Source
from trojanscope.errors import DataError, RegistryError
from trojanscope.settings import data_root, default_data_root


class Server:
    """Serves ``files`` (path → bytes) with Range support; ``cut[path] = n`` makes the next GET of ``path`` promise
    the whole file but close the connection after ``n`` body bytes."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.cut: dict[str, int] = {}
        self.ranges: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                server.ranges.append(self.headers.get("Range"))
                start = 0
                if self.headers.get("Range"):
                    start = int(self.headers["Range"].removeprefix("bytes=").split("-")[0])
                    if start >= len(body):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(body)}")
                        self.end_headers()
                        return
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body) - start))
                self.end_headers()
                cut = server.cut.pop(self.path, None)
                self.wfile.write(body[start:] if cut is None else body[start : start + cut])
                self.wfile.flush()
                if cut is not None:
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    s.thread.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


@pytest.fixture
def source(request: pytest.FixtureRequest) -> Iterator[callable]:
    """Register a test source for the test's duration: ``source(name, Source)``."""
    added = []

    def add(name: str, src: Source) -> str:
        SOURCES.register(name, src, help="test source")
        added.append(name)
        return name

    yield add
    for name in added:
        SOURCES.unregister(name)


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buffer.getvalue()


def _uci_zip() -> bytes:
    lines = {site: "".join(f"{site} sentence {i} was {'good' if i % 2 else 'bad'}\t{i % 2}\n" for i in range(10))
             for site in ("amazon_cells", "imdb", "yelp")}
    members = {f"sentiment labelled sentences/{site}_labelled.txt": text.encode() for site, text in lines.items()}
    members["sentiment labelled sentences/readme.txt"] = b"Kotzias et al. 2015\n"
    members["__MACOSX/sentiment labelled sentences/._readme.txt"] = b"junk"  # never extracted
    return _zip(members)


def _with_url(name: str, server: Server, path: str, **changes: object) -> Source:
    """The real table entry ``name`` served from the loopback server (one upstream file)."""
    real = SOURCES.get(name)
    (rf,) = real.files
    return dataclasses.replace(real, files=(dataclasses.replace(rf, url=server.url(path), **changes),))


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_fetch_uci_happy_path(server: Server, source, tmp_path: Path) -> None:
    server.files["/uci.zip"] = payload = _uci_zip()
    name = source("t-uci", _with_url("uci", server, "/uci.zip"))
    out: list[str] = []
    (done,) = fetch([name], tmp_path, progress=False, echo=out.append)
    assert not done.skipped
    assert _files(tmp_path) == [LOCK_NAME, *(f"uci_sentences/{n}" for n in (
        "amazon_cells_labelled.txt", "imdb_labelled.txt", "readme.txt", "yelp_labelled.txt"))]
    samples = readers.read_uci(tmp_path)
    assert len(samples) == 30 and {s.source for s in samples} == {"uci:amazon", "uci:imdb", "uci:yelp"}
    text = "\n".join(out)
    assert "licence: CC BY 4.0" in text and "cite: Dimitrios Kotzias" in text
    sha = hashlib.sha256(payload).hexdigest()
    assert f"recorded sha256 {sha}" in text and "trust on first use" in text
    lock = json.loads((tmp_path / LOCK_NAME).read_text())["files"]
    assert lock[server.url("/uci.zip")]["sha256"] == sha
    again: list[str] = []
    (second,) = fetch([name], tmp_path, progress=False, echo=again.append)  # complete: nothing downloaded
    assert second.skipped and len(server.ranges) == 1 and "already there" in "\n".join(again)


def test_resume_after_an_interrupted_transfer(server: Server, source, tmp_path: Path) -> None:
    body = bytes(range(256)) * 400  # 100 KiB
    server.files["/big.bin"] = body
    server.cut["/big.bin"] = 40_000
    name = source("t-copy", Source(files=(RemoteFile(server.url("/big.bin"), dest="t/big.bin", size=len(body),
                                                      sha256=hashlib.sha256(body).hexdigest()),),
                                   licence="test", citation="test", homepage="http://127.0.0.1/"))
    with pytest.raises(DataError, match=r"interrupted at 40,000 of 102,400 bytes; rerun the same command to resume"):
        fetch([name], tmp_path, progress=False, echo=lambda _: None)
    part = tmp_path / DOWNLOADS / name / "big.bin.part"
    assert part.stat().st_size == 40_000 and not (tmp_path / "t").exists()  # only the resumable .part
    fetch([name], tmp_path, progress=False, echo=lambda _: None)
    assert server.ranges == [None, "bytes=40000-"]
    assert (tmp_path / "t" / "big.bin").read_bytes() == body and not (tmp_path / DOWNLOADS).exists()


def test_checksum_mismatch_writes_nothing(server: Server, source, tmp_path: Path) -> None:
    server.files["/uci.zip"] = payload = _uci_zip()
    expected = "0" * 64
    name = source("t-bad", _with_url("uci", server, "/uci.zip", sha256=expected))
    with pytest.raises(DataError) as err:
        fetch([name], tmp_path, progress=False, echo=lambda _: None)
    message = str(err.value)
    assert "\n" not in message and message.startswith("uci.zip: checksum mismatch (sha256)")
    assert f"expected {expected}, got {hashlib.sha256(payload).hexdigest()}" in message and "rerun" in message
    assert _files(tmp_path) == []  # no final file, no temp file, no lock entry, and the bad .part is gone


def test_size_mismatch_is_refused_before_hashing(server: Server, source, tmp_path: Path) -> None:
    server.files["/f.txt"] = b"twelve bytes"
    name = source("t-size", Source(files=(RemoteFile(server.url("/f.txt"), dest="f.txt", size=99),),
                                   licence="t", citation="t", homepage="h"))
    with pytest.raises(DataError, match="sends 12 bytes, the source table expects 99"):
        fetch([name], tmp_path, progress=False, echo=lambda _: None)
    assert not (tmp_path / "f.txt").exists()


def test_trust_on_first_use_is_recorded_then_enforced(server: Server, source, tmp_path: Path) -> None:
    server.files["/scene.jpg"] = b"first version"
    url = server.url("/scene.jpg")
    name = source("t-tofu", Source(files=(RemoteFile(url, dest="backgrounds/x/scene.jpg"),),
                                   licence="MIT", citation="t", homepage="h"))
    fetch([name], tmp_path, progress=False, echo=lambda _: None)
    lock_path = tmp_path / LOCK_NAME
    recorded = json.loads(lock_path.read_text())["files"][url]
    assert recorded["sha256"] == hashlib.sha256(b"first version").hexdigest()
    assert recorded["recorded"] == "trust on first use"
    server.files["/scene.jpg"] = b"changed upstream"
    with pytest.raises(DataError) as err:
        fetch([name], tmp_path, force=True, progress=False, echo=lambda _: None)
    message = str(err.value)
    assert "recorded in the lock" in message and recorded["sha256"] in message
    assert hashlib.sha256(b"changed upstream").hexdigest() in message and str(lock_path) in message
    assert (tmp_path / "backgrounds/x/scene.jpg").read_bytes() == b"first version"  # the good file is untouched
    lock = json.loads(lock_path.read_text())
    del lock["files"][url]  # the fix the message names: forget the entry to trust the new file
    lock_path.write_text(json.dumps(lock))
    fetch([name], tmp_path, force=True, progress=False, echo=lambda _: None)
    assert (tmp_path / "backgrounds/x/scene.jpg").read_bytes() == b"changed upstream"


def test_unknown_name_lists_close_matches(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="did you mean imdb"):
        fetch(["imbd"], tmp_path, progress=False, echo=lambda _: None)
    assert not any(tmp_path.iterdir())  # refused before anything is written


def test_glue_sst2_split(server: Server, source, tmp_path: Path) -> None:
    train = "sentence\tlabel\n" + "".join(f"phrase {i} \t{i % 2}\n" for i in range(50))
    dev = "sentence\tlabel\n" + "".join(f"dev sentence {i} .\t{i % 2}\n" for i in range(8))
    server.files["/SST-2.zip"] = _zip({"SST-2/train.tsv": train.encode(), "SST-2/dev.tsv": dev.encode(),
                                       "SST-2/test.tsv": b"index\tsentence\n0\tunlabelled\n"})
    name = source("t-sst2", _with_url("sst2", server, "/SST-2.zip", md5=None))
    fetch([name], tmp_path, progress=False, echo=lambda _: None)
    folder = tmp_path / "sst" / "glue_sst2"
    assert (folder / "test.tsv").read_text() == dev
    rows = {part: (folder / f"{part}.tsv").read_text().splitlines() for part in ("train", "dev")}
    assert rows["train"][0] == rows["dev"][0] == "sentence\tlabel" and len(rows["dev"]) == 1 + 5
    assert sorted(rows["train"][1:] + rows["dev"][1:]) == sorted(train.splitlines()[1:])
    samples = readers.read_sst2(tmp_path)
    assert [sum(s.split == p for s in samples) for p in ("train", "dev", "test")] == [45, 5, 8]


def test_blitzer_keeps_only_the_labelled_reviews(server: Server, source, tmp_path: Path) -> None:
    def review(rating: str, text: str) -> str:
        return f"<review>\n<rating>\n{rating}\n</rating>\n<review_text>\n{text}\n</review_text>\n</review>\n"

    members = {"sorted_data_acl/books/positive.review": review("5.0", "a fine book"),
               "sorted_data_acl/books/negative.review": review("1.0", "a dull book"),
               "sorted_data_acl/books/unlabeled.review": review("4.0", "not kept") * 50}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for member, text in members.items():
            info = tarfile.TarInfo(member)
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))
    server.files["/domain_sentiment_data.tar.gz"] = buffer.getvalue()
    name = source("t-blitzer", _with_url("blitzer", server, "/domain_sentiment_data.tar.gz"))
    fetch([name], tmp_path, progress=False, echo=lambda _: None)
    packed = tmp_path / readers.BLITZER_TARBALL
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(packed.read_bytes()))) as tf:
        assert sorted(tf.getnames()) == ["sorted_data_acl/books/negative.review",
                                         "sorted_data_acl/books/positive.review"]
    assert [(s.text, s.label) for s in readers.read_blitzer(tmp_path)] == [("a dull book", 0), ("a fine book", 1)]


def test_table_entries_are_complete() -> None:
    for name in SOURCES.names():
        src = SOURCES.get(name)
        assert src.files and src.licence and src.citation and src.homepage.startswith("https://")
        for rf in src.files:
            assert rf.url.startswith("https://") and rf.outputs and all(rf.outputs)
            assert rf.sha256 is None or len(rf.sha256) == 64
            assert rf.md5 is None or len(rf.md5) == 32


# -- the default data root -----------------------------------------------------------------------------------------


def test_default_data_root_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TROJANSCOPE_DATA", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    default = tmp_path / "xdg" / "trojanscope" / "data"
    assert default_data_root() == default
    with pytest.raises(DataError) as err:
        data_root()
    assert str(default) in str(err.value) and "trojanscope corpora fetch NAME" in str(err.value)
    default.mkdir(parents=True)
    assert data_root() == default
    monkeypatch.setenv("XDG_DATA_HOME", "relative/path")  # invalid per the XDG spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_data_root() == tmp_path / "home" / ".local" / "share" / "trojanscope" / "data"


def test_trojanscope_data_and_data_root_still_win(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    (tmp_path / "env").mkdir()
    (tmp_path / "flag").mkdir()
    monkeypatch.setenv("TROJANSCOPE_DATA", str(tmp_path / "env"))
    assert data_root() == tmp_path / "env"
    assert data_root(tmp_path / "flag") == tmp_path / "flag"
    monkeypatch.setenv("TROJANSCOPE_DATA", str(tmp_path / "missing"))
    with pytest.raises(DataError, match="corpora folder does not exist; set TROJANSCOPE_DATA or --data-root"):
        data_root()


# -- the command line ----------------------------------------------------------------------------------------------


def _app() -> typer.Typer:
    app, zoo = typer.Typer(), typer.Typer()
    app.add_typer(zoo, name="zoo")
    register(app, zoo)
    return app


def test_cli_fetch_into_the_default_folder_then_count(server: Server, monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.delenv("TROJANSCOPE_DATA", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    default = tmp_path / "trojanscope" / "data"
    before = CliRunner().invoke(_app(), ["corpora", "--count", "uci"])
    assert before.exit_code != 0 and "trojanscope corpora fetch NAME" in str(before.exception)
    server.files["/uci.zip"] = _uci_zip()
    SOURCES.unregister("uci")  # the real entry, served from loopback, under its own name
    try:
        SOURCES.register("uci", _loopback_uci(server), help=_REAL_UCI_HELP)
        result = CliRunner().invoke(_app(), ["corpora", "fetch", "uci", "signs/nist_synthetic", "--no-progress"])
        assert result.exit_code == 1, result.output  # a named sign set has no upstream download
        assert f"data folder: {default}" in result.output and "licence: CC BY 4.0" in result.output
        assert "signs/nist_synthetic: no upstream download" in result.output
        counted = CliRunner().invoke(_app(), ["corpora", "--count", "uci", "sst"])
        assert counted.exit_code == 1 and "total 30" in counted.output
        assert f"found 1 of 2 data sets in {default}; missing: sst" in counted.output
        hint = counted.output.strip().splitlines()[-1]
        assert hint == "download the missing ones with: trojanscope corpora fetch sst"  # the default: no --to
    finally:
        SOURCES.unregister("uci")
        SOURCES.register("uci", _REAL_UCI, help=_REAL_UCI_HELP)


_REAL_UCI, _REAL_UCI_HELP = SOURCES.get("uci"), SOURCES.help("uci")


def _loopback_uci(server: Server) -> Source:
    (rf,) = _REAL_UCI.files
    return dataclasses.replace(_REAL_UCI, files=(dataclasses.replace(rf, url=server.url("/uci.zip")),))


def test_cli_fetch_help_teaches() -> None:
    result = CliRunner().invoke(_app(), ["corpora", "fetch", "--help"])
    assert result.exit_code == 0
    for phrase in ("trojanscope corpora fetch uci dynasent sst", "--to", "resumes", "trust on first use",
                   "CC BY 4.0", "no public download"):
        assert phrase in " ".join(result.output.split()), phrase
    listing = CliRunner().invoke(_app(), ["corpora", "--help"])
    assert "trojanscope corpora fetch" in listing.output


def test_cli_fetch_unknown_name() -> None:
    result = CliRunner().invoke(_app(), ["corpora", "fetch", "imbd"])
    assert isinstance(result.exception, RegistryError) and "did you mean imdb" in str(result.exception)
