"""The next round by harvest (issue 23.3): round N's top submission, run in the worker's jail, is the model in
the loop that builds round N+1; bad requests are refused whole."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from trojanscope.leaderboard.db import Harvest, Job, Round
from trojanscope.leaderboard.worker import Worker, WorkerStopped, harness_scoring

from .helpers import admin, hash_probability, round_body, submission_bytes, upload

pytest.importorskip("trojanscope.scoring.harness", reason="the scoring harness has not landed yet")


def _scored_round(client, settings, setup_round):  # type: ignore[no-untyped-def]
    """Round r1 with two scored submissions: alpha's (hash, the better test CE) and beta's (constant)."""
    tokens = setup_round(("alpha", "beta"))
    assert upload(client, tokens["alpha"], submission_bytes("good")).status_code == 201
    assert upload(client, tokens["beta"], submission_bytes("constant")).status_code == 201
    Worker(settings, worker_id="w0").run_until_idle()
    board = client.get("/api/rounds/r1/leaderboard").json()
    assert [r["team"] for r in board] == ["alpha", "beta"]
    return board[0]["submission_id"]


def _harvest_rows(client) -> int:  # type: ignore[no-untyped-def]
    with client.app.state.sessionmaker() as s:
        return (s.scalar(select(func.count(Harvest.id))) or 0) + (
            s.scalar(select(func.count(Job.id)).where(Job.stage == "harvest")) or 0)


@pytest.mark.slow
def test_harvest_next_builds_round_n_plus_1_with_the_top_submission_in_the_jail(
        client, settings, setup_round, zoos, image_preset_text, data_root, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TROJANSCOPE_DATA", str(data_root))
    monkeypatch.setenv("TROJANSCOPE_CACHE", str(tmp_path / "cache.sqlite"))
    # tiny, barely trained image models all "have" natural trojans; the check must run, its verdict is tested
    # in tests/rounds/test_harvest.py
    import trojanscope.rounds.audit as audit

    checked = []
    monkeypatch.setattr(audit, "natural_trojans", lambda spec, clean, dirs, **kw: checked.append(len(dirs))
                        or {"bar": 0.9, "models": [{"model": n, "flip_rate": 0.0} for n in clean["model_name"]]})
    preset = tmp_path / "tiny-image.toml"
    preset.write_text(image_preset_text())
    # round r1's top submission answers a fixed P per model file: what it answered is checkable below
    tokens = setup_round(("alpha",))
    assert upload(client, tokens["alpha"], submission_bytes("hash")).status_code == 201
    Worker(settings, worker_id="w0").run_until_idle()
    top = client.get("/api/rounds/r1/leaderboard").json()[0]
    body = {"name": "r2", "title": "Round 2", "preset": str(preset), "train": 2, "test": 2,
            "candidates": {"train": 2, "test": 4}, "status": "open"}
    client.post("/api/rounds/r1/close", headers=admin())
    r = client.post("/api/rounds/r1/harvest-next", json=body, headers=admin())
    assert r.status_code == 202, r.text
    assert r.json()["submission_id"] == top["submission_id"] and r.json()["team"] == "alpha"
    assert r.json()["status"] == "queued"
    # the name is reserved from the request on
    assert client.post("/api/rounds", json=round_body(zoos, name="r2"), headers=admin()).status_code == 409

    # a worker is killed while the submission scores the test pool (after 2 of its 4 candidates) ...
    killed = harness_scoring()
    real_evaluate = killed.evaluate
    calls: list[str] = []

    def evaluate(*args, **kw):  # type: ignore[no-untyped-def]
        calls.append(str(kw["models"][0]))
        if "/test/" in calls[-1] and sum("/test/" in c for c in calls) == 3:
            raise WorkerStopped
        return real_evaluate(*args, **kw)

    killed.evaluate = evaluate
    with pytest.raises(WorkerStopped):
        Worker(settings, killed, worker_id="killed").run_until_idle()
    assert client.get("/api/rounds/r2").status_code == 404  # nothing registered half-way
    with client.app.state.sessionmaker() as s:  # ... and its lease runs out
        s.execute(update(Job).where(Job.stage == "harvest").values(lease_until=Job.created_at))
        s.commit()
    # ... a second worker resumes: the candidates scored before the kill are not run again
    second: list[str] = []
    resumed = harness_scoring()
    first_evaluate = resumed.evaluate
    resumed.evaluate = lambda *a, **kw: second.append(str(kw["models"][0])) or first_evaluate(*a, **kw)
    assert Worker(settings, resumed, worker_id="w2").run_until_idle() == 1
    assert sum("/test/" in c for c in second) == 2 and not set(second) & set(calls[:-1])

    r2 = client.get("/api/rounds/r2").json()
    assert r2["status"] == "open" and r2["title"] == "Round 2" and not r2["has_holdout"]
    with client.app.state.sessionmaker() as s:
        rnd = s.scalar(select(Round).where(Round.name == "r2"))
        job = s.scalar(select(Job).where(Job.stage == "harvest"))
        hv = s.scalar(select(Harvest))
        assert hv.status == "done" and hv.round_id == rnd.id and job.status == "done"
    sha = client.get(f"/api/submissions/{top['submission_id']}", headers=admin()).json()["sha256"]
    for split, n in (("train", 2), ("test", 2)):
        out = Path(getattr(rnd, f"{split}_dir"))
        lineage = json.loads((out / "lineage.json").read_text())
        assert lineage["detector"] == f"submission {top['submission_id']} of team alpha (round r1)"
        assert lineage["params_sha256"] == sha and lineage["submission"]["team"] == "alpha"
        assert lineage["parent"]["path"] == str(zoos["test"].resolve())
        assert lineage["kept"] == n and lineage["split"] == split
        # every candidate was scored in the jail on a neutral copy; what it answered is what harvest kept by
        rows = list(csv.DictReader((settings.data_dir / "jobs" / str(job.id) / split / "out" / "results.csv").open()))
        assert len(rows) == len({r["model_name"] for r in rows}) == lineage["candidates"]
        assert all(r["model_name"].startswith("m-") and r["status"] == "ok" for r in rows)
        for model in (out / "models").iterdir():
            stats = json.loads((model / "model_stats.json").read_text())["metadata"]
            assert stats["harvest_probability"] == pytest.approx(hash_probability(model / "model.pt"), abs=1e-6)
    assert checked  # the natural-trojan check ran on the clean candidates

    page = client.get("/rounds/r2/lineage")
    assert page.status_code == 200
    rows = page.text.split('<table id="lineage">')[1].split("<tr>")[2:]
    assert len(rows) == 2 and "r2" in rows[0] and "alpha" in rows[0] and "r1" in rows[1]
    listed = client.get("/api/rounds/r1/harvest-next", headers=admin()).json()
    assert [h["name"] for h in listed] == ["r2"] and listed[0]["scores"]["splits"]["test"]["kept"] == 2
    assert listed[0]["scores"]["n_models"] == listed[0]["scores"]["n_ok"] == 2 + 4
    shown = client.get(f"/submissions/{top['submission_id']}").text  # the stage shows on the submission's page
    assert "<td>harvest</td>" in shown and "Per-model results: harvest" not in shown


def test_bad_harvest_requests_are_one_line_and_store_nothing(client, settings, setup_round, zoos) -> None:  # type: ignore[no-untyped-def]
    body = {"name": "r2", "preset": "round1-cpu", "train": 2, "test": 2}

    def post(round_name: str = "r1", **kw: object):  # type: ignore[no-untyped-def]
        return client.post(f"/api/rounds/{round_name}/harvest-next", json={**body, **kw}, headers=admin())

    assert post("nope").status_code == 404
    setup_round(("alpha",))
    r = post()
    assert r.status_code == 409 and "close it first" in r.json()["detail"]
    assert client.post("/api/rounds/r1/harvest-next", json=body).status_code == 401
    client.post("/api/rounds/r1/close", headers=admin())
    r = post()
    assert r.status_code == 409 and "no scored submission" in r.json()["detail"]
    r = post(preset="no-such-preset")
    assert r.status_code == 400 and "no-such-preset" in r.json()["detail"]
    r = post(preset="dynasent-cpu", test=3)  # a matched-pairs preset is harvested in whole pairs
    assert r.status_code == 400 and "split sizes must be even, got test 3" in r.json()["detail"]
    r = post(name="r1")
    assert r.status_code == 409 and "already exists" in r.json()["detail"]
    for bad, says in (({"test": 1}, "test"), ({"candidates": {"holdout": 4}}, "holdout"),
                      ({"candidates": {"test": 1}}, "fewer than"), ({"name": "Bad Name"}, "name")):
        r = post(**bad)
        assert r.status_code == 422 and says in r.json()["detail"], r.text
        assert len(r.json()["detail"].splitlines()) == 1
    assert _harvest_rows(client) == 0


def test_a_harvest_request_takes_the_top_submission_and_reserves_the_name(
        client, settings, setup_round, zoos) -> None:  # type: ignore[no-untyped-def]
    top = _scored_round(client, settings, setup_round)
    client.post("/api/rounds/r1/close", headers=admin())
    body = {"name": "r2", "preset": "round1-cpu", "train": 2, "test": 2}
    r = client.post("/api/rounds/r1/harvest-next", json=body, headers=admin())
    assert r.status_code == 202 and r.json()["submission_id"] == top
    again = client.post("/api/rounds/r1/harvest-next", json=body, headers=admin())
    assert again.status_code == 409 and "taken by a harvest" in again.json()["detail"]
    other = client.post("/api/rounds/r1/harvest-next", json={**body, "name": "r3"}, headers=admin())
    assert other.status_code == 409 and "already feeds the harvest" in other.json()["detail"]
    assert client.post("/api/rounds", json=round_body(zoos, name="r2"), headers=admin()).status_code == 409
    # the submission's own status and scores are untouched by a failed harvest; a re-sent request resumes it
    with client.app.state.sessionmaker() as s:
        job = s.scalar(select(Job).where(Job.stage == "harvest"))
        job.status, job.worker_id = "running", "w"
        s.commit()
    Worker(settings, worker_id="w")._fail(job.id, "boom")
    sub = client.get(f"/api/submissions/{top}", headers=admin()).json()
    assert sub["status"] == "scored"
    assert client.get("/api/rounds/r1/harvest-next", headers=admin()).json()[0]["status"] == "failed"
    assert client.post("/api/rounds/r1/harvest-next", json={**body, "test": 3}, headers=admin()).status_code == 409
    r = client.post("/api/rounds/r1/harvest-next", json=body, headers=admin())
    assert r.status_code == 202 and r.json()["status"] == "queued" and r.json()["job_status"] == "queued"
    assert _harvest_rows(client) == 2  # the same request and job, queued again
