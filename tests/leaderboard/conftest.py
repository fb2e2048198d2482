"""Fixtures: the tiny zoos (built once), settings with a temp DB, a TestClient, round/team setup."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from trojanscope.leaderboard.settings import Settings

from .helpers import ADMIN, admin, make_zoo, round_body


@pytest.fixture(scope="session")
def zoos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """train (4 models), test (4, reduced configs) and holdout (2) zoos, built once."""
    root = tmp_path_factory.mktemp("zoos")
    return {"train": make_zoo(root / "train", 4, seed=1), "test": make_zoo(root / "test", 4, seed=2, reduced=True),
            "holdout": make_zoo(root / "holdout", 2, seed=3, reduced=True)}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked ``both_backends`` run on SQLite and on a real PostgreSQL server; the rest on SQLite."""
    if "db_backend" in metafunc.fixturenames:
        both = metafunc.definition.get_closest_marker("both_backends") is not None
        metafunc.parametrize("db_backend", ["sqlite", "postgresql"] if both else ["sqlite"])


@pytest.fixture(scope="session")
def postgres_server():  # type: ignore[no-untyped-def]
    from .postgres import PostgresServer

    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture
def db_url(db_backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if db_backend == "sqlite":
        return f"sqlite:///{tmp_path / 'lb.db'}"
    return request.getfixturevalue("postgres_server").new_database()


@pytest.fixture
def settings(tmp_path: Path, db_url: str) -> Settings:
    return Settings(db_url=db_url, data_dir=tmp_path / "data", admin_token=ADMIN,
                    lease_s=30, heartbeat_s=0.5, poll_s=0.1, rate_limit_count=4, max_upload_bytes=300_000)


@pytest.fixture
def client(settings: Settings):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from trojanscope.leaderboard.app import create_app

    with TestClient(create_app(settings)) as c:
        yield c


@pytest.fixture
def setup_round(client, zoos) -> Callable[..., dict[str, str]]:  # type: ignore[no-untyped-def]
    """Register a round (on the tiny zoos, or ``zoo_dirs``) and teams; returns {team name: token}."""
    def _setup(teams: tuple[str, ...] = ("alpha",), zoo_dirs: dict[str, Path] | None = None,
               **round_kw: object) -> dict[str, str]:
        r = client.post("/api/rounds", json=round_body(zoo_dirs or zoos, **round_kw), headers=admin())
        assert r.status_code == 201, r.text
        tokens = {}
        for t in teams:
            r = client.post("/api/teams", json={"name": t}, headers=admin())
            assert r.status_code == 201, r.text
            tokens[t] = r.json()["token"]
        return tokens
    return _setup


@pytest.fixture
def live_server(client):  # type: ignore[no-untyped-def]
    """The app of ``client`` served by uvicorn on a free loopback port (for clients that make their own
    HTTP connections: the browser, the CLI)."""
    import socket
    import threading
    import time

    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(client.app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)
