"""Workers through the real scoring harness: the stages, the scores, faults killed at their limits, the sandbox."""

from __future__ import annotations

import json
import math
import os
import threading

import numpy as np
import pytest
from sqlalchemy import select

from trojanscope.leaderboard import sandbox
from trojanscope.leaderboard.db import Job, ModelResult, Submission
from trojanscope.leaderboard.worker import Worker
from trojanscope.models.layout import list_model_dirs, read_ground_truth

from .helpers import admin, submission_bytes, upload

pytest.importorskip("trojanscope.scoring.harness", reason="the scoring harness has not landed yet")


def _ce(y: list[int], p: list[float]) -> float:
    p_arr = np.clip(np.asarray(p, float), 1e-12, 1 - 1e-12)
    y_arr = np.asarray(y, float)
    return float(-np.mean(y_arr * np.log(p_arr) + (1 - y_arr) * np.log(1 - p_arr)))


def _job(client, sub_id: int, stage: str) -> Job:  # type: ignore[no-untyped-def]
    with client.app.state.sessionmaker() as s:
        job = s.scalar(select(Job).where(Job.submission_id == sub_id, Job.stage == stage))
        if job is not None:
            job.results  # noqa: B018 - load while the session is open
        return job


def test_good_submission_smoke_then_test_then_leaderboard(client, setup_round, settings, zoos) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(("alpha", "beta"))
    good = upload(client, tokens["alpha"], submission_bytes("good")).json()["id"]
    const = upload(client, tokens["beta"], submission_bytes("constant")).json()["id"]
    assert Worker(settings).run_until_idle() == 4  # two smoke jobs, two test jobs
    smoke = _job(client, good, "smoke")
    assert smoke.status == "done" and len(smoke.results) == 3  # the first smoke_models train models
    first3 = {p.name for p in list_model_dirs(zoos["train"])[:3]}
    assert {r.model_name for r in smoke.results} == first3
    test = _job(client, good, "test")
    y = [read_ground_truth(zoos["test"] / "models" / r.model_name) for r in test.results]
    p = [0.9 if t else 0.1 for t in y]
    assert test.scores["cross_entropy"] == pytest.approx(_ce(y, p))
    assert {r.status for r in test.results} == {"ok"}
    assert test.runtime_s > 0
    board = client.get("/api/rounds/r1/leaderboard").json()
    assert [row["team"] for row in board] == ["alpha", "beta"]
    assert board[1]["cross_entropy"] == pytest.approx(_ce(y, [0.7] * len(y)))
    assert board[0]["target_met"] and "holdout_cross_entropy" not in board[0]
    assert client.get(f"/api/submissions/{const}").json()["status"] == "scored"
    # closing queues the holdout run of each team's best; it stays hidden until close, then shows
    r = client.post("/api/rounds/r1/close", headers=admin())
    assert r.json()["holdout_jobs_queued"] == 2
    Worker(settings).run_until_idle()
    holdout = _job(client, good, "holdout")
    assert holdout.status == "done" and len(holdout.results) == 2
    board = client.get("/api/rounds/r1/leaderboard").json()
    assert board[0]["holdout_cross_entropy"] == holdout.scores["cross_entropy"]
    with client.app.state.sessionmaker() as s:  # each model scored once per job
        rows = s.execute(select(ModelResult.job_id, ModelResult.model_name)).all()
    assert len(rows) == len(set(rows)) == 2 * (3 + 4 + 2)


@pytest.mark.parametrize("kind,status", [("crash", "crash"), ("hang", "timeout"), ("forkbomb", "timeout"),
                                         ("garbage", None), ("nan", None)])
def test_faulty_submissions_scored_as_half(client, setup_round, settings, kind, status) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(smoke_models=1, model_time_limit_s=1.5)
    sub_id = upload(client, tokens["alpha"], submission_bytes(kind)).json()["id"]
    w = Worker(settings)
    w.run_until_idle()
    smoke = _job(client, sub_id, "smoke")
    assert smoke.status == "done"
    (row,) = smoke.results
    assert row.probability == 0.5 and row.status != "ok" and row.reason
    if status:
        assert row.status == status
    if kind in ("hang", "forkbomb"):
        assert row.seconds < 10
    assert smoke.scores["cross_entropy"] == pytest.approx(math.log(2))
    assert client.get(f"/api/submissions/{sub_id}").json()["status"] == "smoke_failed"
    assert _job(client, sub_id, "test") is None  # never reached the test split
    assert sandbox.tagged_pids(w.tag(smoke.id)) == []  # nothing it started survives


def test_sandbox_sees_only_neutral_copies_and_clean_env(client, setup_round, settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TROJANSCOPE_ADMIN_TOKEN", "must-not-leak")
    monkeypatch.setenv("SOME_SECRET", "must-not-leak")
    tokens = setup_round(smoke_models=2)
    sub_id = upload(client, tokens["alpha"], submission_bytes("spy")).json()["id"]
    Worker(settings).run_until_idle(max_jobs=1)
    smoke = _job(client, sub_id, "smoke")
    work = settings.data_dir / "jobs" / str(smoke.id) / "work"
    seen = [json.loads(p.read_text()) for p in sorted(work.glob("seen-*.json"))]
    assert len(seen) == 2
    real_names = {r.model_name for r in smoke.results}
    for neutral in (settings.data_dir / "jobs" / str(smoke.id) / "models").iterdir():
        cfg = json.loads((neutral / "config.json").read_text())
        assert "poisoned" not in cfg and "triggers" not in cfg  # reduced config only
        assert neutral.name.startswith("m-") and neutral.name not in real_names
    for s in seen:
        assert "must-not-leak" not in json.dumps(s)
        assert set(s["env"]) <= set(sandbox.sandbox_env(work, "x")) | {"LC_CTYPE"}
        assert "ground_truth.csv" not in s["model_dir"] and set(s["model_dir"]) <= {"model.pt", "config.json",
                                                                                    "clean_example_data"}
        assert not any(n in " ".join(s["argv"]) for n in real_names)
        assert os.path.realpath(s["cwd"]) == os.path.realpath(work)


def test_daemon_children_are_reaped(client, setup_round, settings) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(smoke_models=1)
    sub_id = upload(client, tokens["alpha"], submission_bytes("daemon")).json()["id"]
    w = Worker(settings)
    w.run_until_idle(max_jobs=1)
    smoke = _job(client, sub_id, "smoke")
    assert smoke.results[0].status == "ok"
    assert sandbox.tagged_pids(w.tag(smoke.id)) == []


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
    import time
    time.sleep(0.05)
    assert b.claim() is not None  # lease expired: b takes it over
    time.sleep(0.05)
    assert Worker(fast, worker_id="c").claim() is None  # second loss: attempts exhausted
    job = _job(client, sub_id, "smoke")
    assert job.status == "failed" and "2 times" in job.error
    assert client.get(f"/api/submissions/{sub_id}").json()["status"] == "failed"
