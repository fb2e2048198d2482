"""docs/leaderboard.md's curl walk-through, run as written against ``trojanscope serve``: every call must work."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .helpers import ADMIN, DETECTOR_HEAD, DETECTORS

DOC = Path(__file__).resolve().parents[2] / "docs" / "leaderboard.md"
MARKER = "<!-- this block is run against a live server by tests/leaderboard/test_curl_walkthrough.py -->"


def walkthrough() -> str:
    """The bash block right after the marker comment."""
    text = DOC.read_text(encoding="utf-8")
    assert MARKER in text, f"{DOC}: the walk-through marker is gone"
    block = re.search(r"```bash\n(.*?)```", text[text.index(MARKER):], re.S)
    assert block is not None, f"{DOC}: no bash block after the walk-through marker"
    return block.group(1)


def test_walkthrough_calls_every_api_route_once(client) -> None:  # type: ignore[no-untyped-def]
    routes = sorted({(method, re.sub(r"\{\w+\}", "{}", path)) for path, item in client.get("/openapi.json")
                     .json()["paths"].items() if path.startswith("/api/") for method in map(str.upper, item)})
    seen = []
    for line in walkthrough().replace("\\\n", " ").splitlines():
        if "curl " not in line or line.lstrip().startswith("#"):
            continue
        path = re.search(r'"\$LB(/api/[^"?]*)', line).group(1)
        method = "POST" if "-X POST" in line or " -F " in line else "GET"
        seen.append((method, re.sub(r"\$\w+|\br1\b|team-a|(?<=splits/)train", "{}", path)))
    assert len(routes) == 15 and sorted(set(seen)) == routes  # the polling loop calls one route twice


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("tar") is None, reason="needs curl and tar")
def test_walkthrough_runs_against_a_live_server(tmp_path: Path, zoos) -> None:  # type: ignore[no-untyped-def]
    for split in ("train", "test", "holdout"):
        (tmp_path / "zoos").mkdir(exist_ok=True)
        (tmp_path / "zoos" / f"r1-{split}").symlink_to(zoos[split])
    (tmp_path / "my-detector").mkdir()
    (tmp_path / "my-detector" / "detector.py").write_text(DETECTOR_HEAD + DETECTORS["good"] + "\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = walkthrough()
    for name, value in (("LB", f"http://127.0.0.1:{port}"), ("ZOOS", str(tmp_path / "zoos"))):
        script, n = re.subn(rf"^{name}=.*$", f"{name}={value}", script, count=1, flags=re.M)
        assert n == 1, name
    env = {**os.environ, "TROJANSCOPE_ADMIN_TOKEN": ADMIN, "TROJANSCOPE_POLL_S": "0.2"}
    server = subprocess.Popen([sys.executable, "-m", "trojanscope.cli", "serve", "--db",
                               f"sqlite:///{tmp_path}/lb.db", "--port", str(port), "--workers", "1", "--data-dir",
                               str(tmp_path / "data"), "--no-access-log"], env=env, start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, server.stdout.read().decode()[-3000:]
            try:
                if httpx.get(f"{base}/api/rounds", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.2)
        run = subprocess.run(["bash", "-c", script.replace("do sleep 5", "do sleep 0.5")], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=240)
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        board = httpx.get(f"{base}/api/rounds/r1/leaderboard", timeout=5).json()
        assert [row["team"] for row in board] == ["team-a"] and board[0]["cross_entropy"] < 0.2
        assert httpx.get(f"{base}/api/rounds/r1", timeout=5).json()["status"] == "closed"
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
