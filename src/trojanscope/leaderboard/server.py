"""Running the service: the web server in this process, workers in child processes, one Ctrl-C stops all."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
from pathlib import Path

from trojanscope.leaderboard.settings import Settings


def _worker_process(settings_json: str) -> None:
    from trojanscope.leaderboard.worker import Worker

    Worker(Settings.model_validate_json(settings_json)).run_forever()


def start_workers(settings: Settings, n: int) -> list[mp.process.BaseProcess]:
    """``n`` worker processes (spawned, so they share no state with the server)."""
    ctx = mp.get_context("spawn")
    payload = settings.model_dump_json()
    if settings.admin_token is not None:  # model_dump_json masks secrets; workers need no admin token anyway
        payload = settings.model_copy(update={"admin_token": None}).model_dump_json()
    procs = [ctx.Process(target=_worker_process, args=(payload,), name=f"trojanscope-worker-{i}") for i in range(n)]
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


def run_server(settings: Settings, *, host: str, port: int, rounds: Path | None, workers: int,
               access_log: bool = True) -> None:
    """Create/upgrade the database, register rounds.toml, start workers, serve until Ctrl-C, stop workers."""
    import uvicorn

    from trojanscope.leaderboard.app import create_app
    from trojanscope.leaderboard.services import load_rounds_file

    app = create_app(settings)
    if rounds is not None:
        with app.state.sessionmaker() as s:
            added = load_rounds_file(s, rounds)
        print(f"rounds: registered {', '.join(added) if added else 'none (all already in the database)'}",
              file=sys.stderr)
    if settings.admin_token is None:
        print("warning: TROJANSCOPE_ADMIN_TOKEN is not set; organiser actions are disabled", file=sys.stderr)
    procs = start_workers(settings, workers)
    try:
        uvicorn.run(app, host=host, port=port, log_level="info", access_log=access_log)
    finally:
        stop_workers(procs)
