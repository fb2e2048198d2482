"""Workers through the real scoring harness: the stages, the scores, faults killed at their limits, the sandbox."""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pytest
from sqlalchemy import select

from trojanscope.leaderboard import sandbox
from trojanscope.leaderboard.db import Job, ModelResult
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
    tokens = setup_round(("alpha", "beta"), smoke_models=2)
    good = upload(client, tokens["alpha"], submission_bytes("good")).json()["id"]
    const = upload(client, tokens["beta"], submission_bytes("constant")).json()["id"]
    assert Worker(settings).run_until_idle() == 4  # two smoke jobs, two test jobs
    smoke = _job(client, good, "smoke")
    assert smoke.status == "done" and len(smoke.results) == 2  # the first smoke_models train models
    assert {r.model_name for r in smoke.results} == {p.name for p in list_model_dirs(zoos["train"])[:2]}
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
    # the harness report: the smoke stage's is public, the test stage's (real model ids) organiser-only
    smoke_report = client.get(f"/submissions/{good}/report/smoke")
    assert smoke_report.status_code == 200, (settings.data_dir / "jobs" / str(smoke.id) / "report").iterdir()
    assert "<html" in smoke_report.text.lower()
    run = json.loads((settings.data_dir / "jobs" / str(smoke.id) / "report" / "run.json").read_text())
    assert run["command"] == ["python", "detector.py"]  # argv words, as `evaluate` records them
    assert "<title>python detector.py on " in smoke_report.text and "-0.0" not in smoke_report.text
    # the page links the report at .../smoke/report.html, so the SVG links beside it resolve and are served
    assert f'/submissions/{good}/report/smoke/report.html"' in client.get(f"/submissions/{good}").text
    svgs = re.findall(r'href="(report-[\w-]+\.svg)"', smoke_report.text)
    assert svgs, "the report links no SVG figure"
    for name in svgs:
        svg = client.get(f"/submissions/{good}/report/smoke/{name}")
        assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert client.get(f"/submissions/{good}/report/smoke/run.json").status_code == 404  # only the report
    assert client.get(f"/submissions/{good}/report/test/{svgs[0]}").status_code == 403
    assert client.get(f"/submissions/{good}/report/test").status_code == 403
    test_report = client.get(f"/submissions/{good}/report/test", headers=admin())
    assert test_report.status_code == 200 and f"{test.scores['cross_entropy']:.4f}" in test_report.text
    assert "harness report" in client.get(f"/submissions/{good}").text
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
    assert len(rows) == len(set(rows)) == 2 * (2 + 4 + 2)


FAULTS = {"crash": "crash", "hang": "timeout", "forkbomb": "timeout", "garbage": None, "nan": None}


def test_faulty_submissions_scored_as_half(client, setup_round, settings) -> None:  # type: ignore[no-untyped-def]
    """Crash, hang, fork bomb, garbage and NaN: each killed at its limit, scored p = 0.5, never reaches test."""
    tokens = setup_round(tuple(FAULTS), smoke_models=1, model_time_limit_s=1.5)
    subs = {kind: upload(client, tokens[kind], submission_bytes(kind)).json()["id"] for kind in FAULTS}
    w = Worker(settings)
    assert w.run_until_idle() == len(FAULTS)
    for kind, status in FAULTS.items():
        smoke = _job(client, subs[kind], "smoke")
        assert smoke.status == "done", kind
        (row,) = smoke.results
        assert row.probability == 0.5 and row.status != "ok" and row.reason, kind
        if status:
            assert row.status == status, kind
        if kind in ("hang", "forkbomb"):
            assert row.seconds < 10
        assert smoke.scores["cross_entropy"] == pytest.approx(math.log(2))
        assert client.get(f"/api/submissions/{subs[kind]}").json()["status"] == "smoke_failed"
        assert _job(client, subs[kind], "test") is None  # never reached the test split
        assert sandbox.tagged_pids(w.tag(smoke.id)) == []  # nothing it started survives


def test_sandbox_sees_only_neutral_copies_and_clean_env(client, setup_round, settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TROJANSCOPE_ADMIN_TOKEN", "must-not-leak")
    monkeypatch.setenv("SOME_SECRET", "must-not-leak")
    tokens = setup_round(smoke_models=2)
    sub_id = upload(client, tokens["alpha"], submission_bytes("spy")).json()["id"]
    Worker(settings).run_until_idle(max_jobs=1)
    smoke = _job(client, sub_id, "smoke")
    job_dir = settings.data_dir / "jobs" / str(smoke.id)
    work = job_dir / "work"
    logs = [p.read_text() for p in sorted((job_dir / "out" / "logs").glob("m-*.log"))]
    seen = [json.loads(line.split(" ", 1)[1]) for log in logs for line in log.splitlines() if line.startswith("SEEN ")]
    assert len(seen) == 2
    real_names = {r.model_name for r in smoke.results}
    assert {r.neutral_name for r in smoke.results} == {"m-00000", "m-00001"}
    assert not (job_dir / "models").exists()  # the neutral copies are gone once the job ended
    for s in seen:
        assert "must-not-leak" not in json.dumps(s)
        allowed = set(sandbox.sandbox_env(work, "x")) | {"LC_CTYPE", "PWD"}  # PWD: bwrap --chdir
        assert set(s["env"]) <= allowed and s["env"]["HOME"] == "/tmp"  # HOME: the sandbox's private /tmp
        assert "ground_truth.csv" not in s["model_dir"] and set(s["model_dir"]) <= {"model.pt", "config.json",
                                                                                    "clean_example_data"}
        assert not any(n in " ".join(s["argv"]) for n in real_names)
        assert os.path.realpath(s["cwd"]) == os.path.realpath(work)
        assert str(job_dir / "tmp") in s["model"]  # the harness's copy sits in the job's folder, not /tmp


def test_daemon_children_are_reaped(client, setup_round, settings) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(smoke_models=1)
    sub_id = upload(client, tokens["alpha"], submission_bytes("daemon")).json()["id"]
    w = Worker(settings)
    w.run_until_idle(max_jobs=1)
    smoke = _job(client, sub_id, "smoke")
    assert smoke.results[0].status == "ok"
    assert sandbox.tagged_pids(w.tag(smoke.id)) == []
