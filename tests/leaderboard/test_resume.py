"""Killing a worker mid-submission, or stopping it cleanly, loses nothing and scores each model once."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from trojanscope.leaderboard.db import Job
from trojanscope.leaderboard.worker import Worker

from .helpers import submission_bytes, upload

pytestmark = pytest.mark.both_backends  # SQLite and a real PostgreSQL server

pytest.importorskip("trojanscope.scoring.harness", reason="the scoring harness has not landed yet")


def _start_worker(settings) -> subprocess.Popen:  # type: ignore[no-untyped-def]
    env = {**os.environ, "TROJANSCOPE_DB_URL": settings.db_url, "TROJANSCOPE_DATA_DIR": str(settings.data_dir),
           "TROJANSCOPE_LEASE_S": "1.5", "TROJANSCOPE_HEARTBEAT_S": "0.3", "TROJANSCOPE_POLL_S": "0.1"}
    return subprocess.Popen([sys.executable, "-m", "trojanscope.leaderboard.worker"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_rows(path: Path, n: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if path.is_file() and len(path.read_text().splitlines()) - 1 >= n:
            return
        if proc.poll() is not None:
            raise AssertionError(f"worker exited early: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached {n} rows")


def _test_job(client, sub_id: int) -> Job | None:  # type: ignore[no-untyped-def]
    with client.app.state.sessionmaker() as s:
        return s.scalar(select(Job).where(Job.submission_id == sub_id, Job.stage == "test"))


def _assert_each_model_once(client, settings, sub_id: int) -> Job:  # type: ignore[no-untyped-def]
    with client.app.state.sessionmaker() as s:
        job = s.scalar(select(Job).where(Job.submission_id == sub_id, Job.stage == "test"))
        results = list(job.results)
    assert job.status == "done"
    names = [r["model_name"] for r in csv.DictReader((settings.data_dir / "jobs" / str(job.id) / "out" /
                                                      "results.csv").open())]
    assert len(names) == len(set(names)) == 4
    assert len(results) == 4 and {r.status for r in results} == {"ok"}
    assert {r.probability for r in results} == {0.6}
    return job


def _wait_running(client, sub_id: int, proc: subprocess.Popen) -> Job:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60
    while (job := _test_job(client, sub_id)) is None or job.status != "running":
        assert time.monotonic() < deadline and proc.poll() is None, "worker never started the test job"
        time.sleep(0.05)
    return job


@pytest.mark.slow
def test_sigterm_hands_back_then_sigkill_then_resume(client, setup_round, settings) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(smoke_models=1)
    sub_id = upload(client, tokens["alpha"], submission_bytes("slow")).json()["id"]
    # 1. a clean stop (what Ctrl-C on `serve` does): the job goes back to the queue, not counted as a crash
    proc = _start_worker(settings)
    job = _wait_running(client, sub_id, proc)
    results = settings.data_dir / "jobs" / str(job.id) / "out" / "results.csv"
    _wait_rows(results, 1, proc)
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=20)
    assert rc == 0, f"worker exited {rc} on SIGTERM: {proc.stderr.read().decode()[-3000:]}"
    job = _test_job(client, sub_id)
    assert job.status == "queued" and job.worker_id is None and job.attempts == 0
    # 2. a hard kill mid-submission: the job stays 'running' until its lease expires
    proc = _start_worker(settings)
    try:
        _wait_running(client, sub_id, proc)
        _wait_rows(results, 2, proc)
    finally:
        proc.kill()
        proc.wait()
    assert _test_job(client, sub_id).status == "running"
    time.sleep(1.6)
    # 3. a restarted worker takes it over and completes it, each model scored once
    Worker(settings.model_copy(update={"lease_s": 1.5})).run_until_idle()
    job = _assert_each_model_once(client, settings, sub_id)
    assert job.attempts == 2
