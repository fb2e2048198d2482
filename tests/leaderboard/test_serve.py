"""``trojanscope serve``: help, rounds.toml, and the whole service as one command that Ctrl-C stops."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from trojanscope.cli import build_app
from trojanscope.errors import ConfigError
from trojanscope.leaderboard.db import make_sessionmaker
from trojanscope.leaderboard.services import load_rounds_file

from .helpers import ADMIN, submission_bytes


def _rounds_toml(path: Path, zoos: dict[str, Path], extra: str = "") -> Path:
    path.write_text(f'''[[round]]
name = "r1"
title = "Round one"
train = "{zoos['train']}"
test = "{zoos['test']}"
holdout = "{zoos['holdout']}"
target_ce = 0.3465
smoke_models = 1
model_time_limit_s = 30
{extra}
''')
    return path


def test_serve_help_teaches() -> None:
    result = CliRunner().invoke(build_app(), ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for word in ("--db", "--host", "--port", "--rounds", "--workers", "--data-dir", "TROJANSCOPE_ADMIN_TOKEN",
                 "Ctrl-C"):
        assert word in result.output


def test_rounds_file(tmp_path: Path, zoos) -> None:  # type: ignore[no-untyped-def]
    maker = make_sessionmaker(f"sqlite:///{tmp_path / 'r.db'}")
    with maker() as s:
        assert load_rounds_file(s, _rounds_toml(tmp_path / "ok.toml", zoos)) == ["r1"]
        assert load_rounds_file(s, tmp_path / "ok.toml") == []  # already there: left alone
        with pytest.raises(ConfigError, match="#1 round field 'smoke_time_limit_s'"):
            load_rounds_file(s, _rounds_toml(tmp_path / "bad.toml", zoos, extra="smoke_time_limit_s = -1"))
    with maker() as s:
        (tmp_path / "bad2.toml").write_text('[[round]]\nname = "r2"\ntrain = "nope"\ntest = "nope"\n')
        with pytest.raises(ConfigError, match="bad2.toml: \\[\\[round\\]\\] #1 round field 'train'"):
            load_rounds_file(s, tmp_path / "bad2.toml")
        with pytest.raises(ConfigError, match="not found"):
            load_rounds_file(s, tmp_path / "missing.toml")
        (tmp_path / "same.toml").write_text(f'[[round]]\nname = "r3"\ntrain = "{zoos["train"]}"\n'
                                            f'test = "{zoos["train"]}/."\n')
        with pytest.raises(ConfigError, match="same.toml: \\[\\[round\\]\\] #1 round: .*'train' and 'test' name "
                                              "the same folder"):
            load_rounds_file(s, tmp_path / "same.toml")


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return kids


@pytest.mark.slow
def test_serve_end_to_end_and_ctrl_c(tmp_path: Path, zoos) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("trojanscope.scoring.harness", reason="the scoring harness has not landed yet")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rounds = _rounds_toml(tmp_path / "rounds.toml", zoos)
    env = {**os.environ, "TROJANSCOPE_ADMIN_TOKEN": ADMIN, "TROJANSCOPE_POLL_S": "0.2"}
    proc = subprocess.Popen([sys.executable, "-m", "trojanscope.cli", "serve", "--db", f"sqlite:///{tmp_path}/lb.db",
                             "--port", str(port), "--rounds", str(rounds), "--workers", "2", "--data-dir",
                             str(tmp_path / "data")], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=10) as c:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
                try:
                    if c.get("/api/rounds").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "server did not come up"
                time.sleep(0.2)
            assert [r["name"] for r in c.get("/api/rounds").json()] == ["r1"]
            token = c.post("/api/teams", json={"name": "alpha"}, headers={"Authorization": f"Bearer {ADMIN}"}
                           ).json()["token"]
            r = c.post("/api/rounds/r1/submissions", headers={"Authorization": f"Bearer {token}"},
                       files={"file": ("s.zip", submission_bytes("good"), "application/zip")})
            assert r.status_code == 201
            while c.get(f"/api/submissions/{r.json()['id']}").json()["status"] != "scored":
                assert time.monotonic() < deadline + 60, "submission was never scored"
                time.sleep(0.3)
            assert c.get("/api/rounds/r1/leaderboard").json()[0]["team"] == "alpha"
        workers = _children(proc.pid)
        assert len(workers) >= 2
        # the organiser token worked above, yet no process of the service carries it in its environment
        for pid in (proc.pid, *workers):
            assert ADMIN.encode() not in Path(f"/proc/{pid}/environ").read_bytes(), pid
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert rc == 0, proc.stdout.read().decode()[-3000:]
    deadline = time.monotonic() + 10  # multiprocessing's resource tracker leaves once its pipe closes
    while (alive := [w for w in workers if Path(f"/proc/{w}").exists()]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, [Path(f"/proc/{w}/cmdline").read_bytes() for w in alive]


@pytest.mark.parametrize(("url", "message"), [
    ("postgresql+psycopg://lb:s3cret@127.0.0.1:1/leaderboard", r"--db postgresql\+psycopg://lb:\*\*\*@127.0.0.1:1/"
     r"leaderboard: cannot connect \(.*refused.*\); check that the server runs"),
    ("mysql://lb@db/leaderboard", r"--db mysql://lb@db/leaderboard: no database driver for it"),
    ("leaderboard.db", r"--db 'leaderboard.db' is not a database URL; use sqlite:///FILE"),
])
def test_a_database_url_that_does_not_work_is_one_line(tmp_path: Path, capsys, url: str, message: str) -> None:
    """Issue 24's bad input: a --db that does not connect (password hidden), has no driver, or is no URL."""
    from trojanscope.cli import main

    pytest.importorskip("psycopg", reason="the postgres extra is not installed (CI installs it)")
    with pytest.raises(ConfigError, match=message) as err:
        make_sessionmaker(url)
    assert "s3cret" not in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SystemExit) as exit_info:
        main(["serve", "--db", url, "--workers", "0", "--data-dir", str(tmp_path / "d")])
    err_text = capsys.readouterr().err
    assert exit_info.value.code == 2 and err_text.startswith("error: --db ") and err_text.count("\n") == 1
    assert "s3cret" not in err_text and not (tmp_path / "d").exists()  # nothing half-made


@pytest.mark.slow
def test_workers_die_with_a_killed_server_and_a_new_one_reaps_leftovers(tmp_path: Path) -> None:
    """SIGKILL of `serve` (no chance to stop its workers): they end with it, and pid files of workers a
    server left behind are stopped by the next server on that data folder."""
    from trojanscope.leaderboard.server import _start_time, reap_stale_workers

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "trojanscope.cli", "serve", "--db", f"sqlite:///{tmp_path}/lb.db",
                             "--port", str(port), "--workers", "2", "--data-dir", str(data), "--no-access-log"],
                            env={**os.environ, "TROJANSCOPE_ADMIN_TOKEN": ADMIN}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while len(list((data / "workers").glob("*.pid")) if (data / "workers").is_dir() else []) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, "workers did not start"
        time.sleep(0.2)
    workers = [int(p.stem) for p in (data / "workers").glob("*.pid")]
    proc.kill()
    proc.wait(10)
    deadline = time.monotonic() + 20
    while (alive := [w for w in workers if _start_time(w) is not None]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, "workers outlived their server"
    # a worker the kernel could not take down (another machine's pid namespace, an old trojanscope): its pid file
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (data / "workers").mkdir(exist_ok=True)
    (data / "workers" / f"{stray.pid}.pid").write_text(f"{stray.pid} {_start_time(stray.pid)}\n")
    (data / "workers" / "999999999.pid").write_text("999999999 1\n")  # long gone: ignored
    assert reap_stale_workers(data, timeout=5) == 1
    assert stray.wait(10) is not None and not list((data / "workers").glob("*.pid"))


def test_serve_refuses_to_score_without_a_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where bubblewrap is missing, serve does not start workers unless the operator names the risk."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH
    args = ["serve", "--db", f"sqlite:///{tmp_path}/lb.db", "--data-dir", str(tmp_path / "d"), "--workers", "1"]
    result = CliRunner().invoke(build_app(), args, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "bubblewrap (bwrap) is not installed" in result.output and "--insecure-no-sandbox" in result.output
    help_text = CliRunner().invoke(build_app(), ["serve", "--help"], env={"COLUMNS": "200"}).output
    assert "--insecure-no-sandbox" in help_text and "WITHOUT" in help_text
