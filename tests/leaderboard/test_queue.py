"""The job queue without running detectors: atomic claims, leases, attempts, closed rounds."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import select

from trojanscope.leaderboard.db import Job, Submission
from trojanscope.leaderboard.worker import Worker

from .helpers import admin, submission_bytes, upload

pytestmark = pytest.mark.both_backends  # SQLite and a real PostgreSQL server


def _job(client, sub_id: int, stage: str) -> Job:  # type: ignore[no-untyped-def]
    with client.app.state.sessionmaker() as s:
        return s.scalar(select(Job).where(Job.submission_id == sub_id, Job.stage == stage))


def test_two_workers_never_take_the_same_job(client, setup_round, settings) -> None:  # type: ignore[no-untyped-def]
    setup_round()
    with client.app.state.sessionmaker() as s:  # 30 queued jobs without running anything
        for _ in range(30):
            sub = Submission(round_id=1, team_id=1, filename="x", size_bytes=1, sha256="0" * 64, command="true")
            s.add(sub)
            s.flush()
            s.add(Job(submission_id=sub.id, stage="smoke"))
        s.commit()
    claimed: dict[str, list[int]] = {}
    workers = [Worker(settings, worker_id=f"w{i}") for i in range(4)]

    def grab(w: Worker) -> None:
        claimed[w.worker_id] = []
        while (job_id := w.claim()) is not None:
            claimed[w.worker_id].append(job_id)

    threads = [threading.Thread(target=grab, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ids = [j for ids in claimed.values() for j in ids]
    assert sorted(all_ids) == list(range(1, 31))  # every job exactly once
    with client.app.state.sessionmaker() as s:
        owners = {j.id: j.worker_id for j in s.scalars(select(Job))}
    assert all(owners[j] == w for w, ids in claimed.items() for j in ids)


def test_stale_lease_is_requeued_and_gives_up_after_max_attempts(client, setup_round, settings) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round()
    sub_id = upload(client, tokens["alpha"], submission_bytes()).json()["id"]
    fast = settings.model_copy(update={"lease_s": 0.01, "max_attempts": 2})
    a, b = Worker(fast, worker_id="a"), Worker(fast, worker_id="b")
    assert a.claim() is not None  # a "dies" holding the job
    time.sleep(0.05)
    assert b.claim() is not None  # lease expired: b takes it over
    time.sleep(0.05)
    assert Worker(fast, worker_id="c").claim() is None  # second loss: attempts exhausted
    job = _job(client, sub_id, "smoke")
    assert job.status == "failed" and "2 times" in job.error
    assert client.get(f"/api/submissions/{sub_id}").json()["status"] == "failed"


def test_jobs_of_a_closed_round_are_not_run(client, setup_round, settings) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round()
    sub_id = upload(client, tokens["alpha"], submission_bytes()).json()["id"]
    assert client.post("/api/rounds/r1/close", headers=admin()).json()["holdout_jobs_queued"] == 0
    assert Worker(settings).run_until_idle() == 1
    job = _job(client, sub_id, "smoke")
    assert job.status == "failed" and "closed before" in job.error
    assert client.get(f"/api/submissions/{sub_id}").json()["status"] == "failed"
