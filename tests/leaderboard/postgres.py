"""A throwaway PostgreSQL server for the tests: Debian's binaries, a cluster in a temp dir, loopback only.

PostgreSQL refuses to run as root, so when the tests run as root the cluster belongs to the ``postgres``
system user (created by Debian's package) and every server command runs through ``runuser``. With
``CI`` set, a server that cannot start fails the tests with the reason; elsewhere they skip.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest


def _bin_dir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    return Path(dirs[-1]) if dirs else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unavailable(reason: str):  # type: ignore[no-untyped-def]
    """Fail in CI (the server is part of what CI must test), skip with the reason elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"PostgreSQL test server: {reason}")
    pytest.skip(f"PostgreSQL test server: {reason} (install Debian's postgresql and psycopg, or run .ci/run)")


class PostgresServer:
    def __init__(self) -> None:
        self.bin = _bin_dir()
        if self.bin is None:
            unavailable("initdb/pg_ctl not found")
        try:
            import psycopg  # noqa: F401
        except ImportError:
            unavailable("the psycopg driver is not installed (pip install -e '.[postgres]')")
        self.root = Path(tempfile.mkdtemp(prefix="trojanscope-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            self.prefix = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres", "postgres")
        self._run([str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"])
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-o",
                   f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off", "start"])

    def _run(self, argv: list[str]) -> None:
        res = subprocess.run([*self.prefix, *argv], capture_output=True, text=True, timeout=120)
        if res.returncode != 0:
            log = (self.root / "log").read_text()[-500:] if (self.root / "log").is_file() else ""
            unavailable(f"{Path(argv[0]).name} failed: {(res.stderr or res.stdout).strip()[-300:]} {log}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database on this server; returns its SQLAlchemy URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        subprocess.run([*self.prefix, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)
