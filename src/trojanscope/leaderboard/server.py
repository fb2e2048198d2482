"""Running the service: the web server in this process, workers in child processes, one Ctrl-C stops all."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import time
from pathlib import Path

from trojanscope.leaderboard.settings import Settings

ADMIN_TOKEN_ENV = "TROJANSCOPE_ADMIN_TOKEN"
ADMIN_TOKEN_FD_ENV = "TROJANSCOPE_ADMIN_TOKEN_FD"
_PR_SET_PDEATHSIG = 1


def hide_admin_token() -> None:
    """Re-execute this command without the organiser token in its environment.

    ``/proc/<pid>/environ`` shows a process's environment as it was at ``exec``, whatever the process does to
    ``os.environ`` afterwards, and every child inherits it. So ``serve`` hands the token to a fresh image of
    itself through a pipe (its number in ``TROJANSCOPE_ADMIN_TOKEN_FD``) and no process of the service (the
    server, its workers, the detectors they start) carries it. No-op when the variable is not set.
    """
    token = os.environ.get(ADMIN_TOKEN_ENV)
    script = Path(sys.argv[0])
    if not token or "trojanscope" not in (script.name, script.parent.name):
        return  # called in-process (tests, an embedding program): never re-execute someone else's program
    read, write = os.pipe()
    os.write(write, token.encode())
    os.close(write)
    os.set_inheritable(read, True)
    env = {k: v for k, v in os.environ.items() if k != ADMIN_TOKEN_ENV} | {ADMIN_TOKEN_FD_ENV: str(read)}
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def take_admin_token() -> str | None:
    """The token :func:`hide_admin_token` passed on (read once; the pipe is closed and the variable removed)."""
    fd = os.environ.pop(ADMIN_TOKEN_FD_ENV, None)
    if fd is None:
        return None
    with os.fdopen(int(fd), "rb") as fh:
        return fh.read().decode() or None


def _die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Linux: ``sig`` to this process when the process that started it dies (a server killed with SIGKILL
    must not leave workers polling the queue beside the next server's)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def _pid_file(data_dir: Path, pid: int) -> Path:
    return data_dir / "workers" / f"{pid}.pid"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22): pid and start time
    name one process, so a recycled pid is never killed by mistake."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _worker_process(settings_json: str, parent: int) -> None:
    from trojanscope.leaderboard.worker import Worker

    _die_with_parent()
    if os.getppid() != parent:  # the server died before the line above took effect
        return
    settings = Settings.model_validate_json(settings_json)
    pid_file = _pid_file(settings.data_dir, os.getpid())
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{os.getpid()} {_start_time(os.getpid())}\n")
    try:
        Worker(settings).run_forever()
    finally:
        pid_file.unlink(missing_ok=True)


def reap_stale_workers(data_dir: Path, timeout: float = 30.0) -> int:
    """Stop workers a previous server on ``data_dir`` left behind (their pid files name them); returns how many.

    SIGTERM first (a worker hands its job back), SIGKILL after ``timeout``."""
    folder = data_dir / "workers"
    alive: list[int] = []
    for pid_file in sorted(folder.glob("*.pid")) if folder.is_dir() else []:
        try:
            pid_text, started = pid_file.read_text().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            pid_file.unlink(missing_ok=True)
            continue
        if pid != os.getpid() and _start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGTERM)
                alive.append(pid)
        pid_file.unlink(missing_ok=True)
    signalled = len(alive)
    deadline = time.monotonic() + timeout
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if Path(f"/proc/{p}").exists() and not _zombie(p)]
        time.sleep(0.1)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return signalled


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def start_workers(settings: Settings, n: int) -> list[mp.process.BaseProcess]:
    """``n`` worker processes (spawned, so they share no state with the server)."""
    ctx = mp.get_context("spawn")
    payload = settings.model_dump_json()
    if settings.admin_token is not None:  # model_dump_json masks secrets; workers need no admin token anyway
        payload = settings.model_copy(update={"admin_token": None}).model_dump_json()
    procs = [ctx.Process(target=_worker_process, args=(payload, os.getpid()), name=f"trojanscope-worker-{i}")
             for i in range(n)]
    for p in procs:
        p.start()
    return procs


def stop_workers(procs: list[mp.process.BaseProcess], timeout: float = 30.0) -> None:
    """SIGTERM each worker (its job goes back to the queue), then wait; SIGKILL stragglers."""
    for p in procs:
        if p.is_alive() and p.pid:
            os.kill(p.pid, signal.SIGTERM)
    for p in procs:
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join(5)


def _check_port(host: str, port: int) -> None:
    """One line, before anything starts, when HOST:PORT cannot be listened on (uvicorn would print five)."""
    import socket

    from trojanscope.errors import ConfigError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror}); stop what uses that port or pass "
                              "--port with a free one") from None


def run_server(settings: Settings, *, host: str, port: int, rounds: Path | None, workers: int,
               access_log: bool = True) -> None:
    """Create/upgrade the database, register rounds.toml, start workers, serve until Ctrl-C, stop workers."""
    import uvicorn

    from trojanscope.leaderboard.app import create_app
    from trojanscope.leaderboard.services import load_rounds_file

    _check_port(host, port)
    app = create_app(settings)
    if rounds is not None:
        with app.state.sessionmaker() as s:
            added = load_rounds_file(s, rounds)
        print(f"rounds: registered {', '.join(added) if added else 'none (all already in the database)'}",
              file=sys.stderr)
    if settings.admin_token is None:
        print("warning: TROJANSCOPE_ADMIN_TOKEN is not set; organiser actions are disabled", file=sys.stderr)
    if workers:
        reaped = reap_stale_workers(settings.data_dir)
        if reaped:
            print(f"stopped {reaped} worker(s) a previous server on {settings.data_dir} left running", file=sys.stderr)
    procs = start_workers(settings, workers)
    try:
        uvicorn.run(app, host=host, port=port, log_level="info", access_log=access_log)
    finally:
        stop_workers(procs)
