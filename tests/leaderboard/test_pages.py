"""Pages through the HTTP client (the browser test covers the same pages in chromium): what shows, what hides."""

from __future__ import annotations

import time

from trojanscope.leaderboard.db import Job, ModelResult, Submission, utcnow
from trojanscope.leaderboard.routes import pages

from .helpers import admin, submission_bytes, upload


def _score(client, sub_id: int, stage: str, ce: float) -> None:  # type: ignore[no-untyped-def]
    """Mark a stage done with given scores, as a worker would (no detector run needed for page logic)."""
    with client.app.state.sessionmaker() as s:
        job = s.query(Job).filter_by(submission_id=sub_id, stage=stage).one_or_none()
        if job is None:
            job = Job(submission_id=sub_id, stage=stage)
            s.add(job)
            s.flush()
            s.add(ModelResult(job_id=job.id, model_name="id-00000001", neutral_name="m-00000", probability=0.25,
                              status="ok", reason="", seconds=1.5, ground_truth=True))
        job.status, job.scores, job.runtime_s = "done", {"cross_entropy": ce, "roc_auc": 0.75, "n_ok": 2}, 3.0
        job.finished_at = utcnow()
        if stage == "test":
            s.get(Submission, sub_id).status = "scored"
        s.commit()


def test_pages_render_and_hide_holdout_until_close(client, setup_round) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(("alpha", "beta"))
    a = upload(client, tokens["alpha"], submission_bytes()).json()["id"]
    b = upload(client, tokens["beta"], submission_bytes()).json()["id"]
    assert "Round r1" in client.get("/").text
    assert client.get("/rounds/nope").status_code == 404
    page = client.get("/rounds/r1").text
    assert "No scored submissions yet" in page and 'name="token"' in page
    _score(client, a, "test", 0.3)
    _score(client, b, "test", 0.6)
    _score(client, a, "holdout", 0.123456)
    time.sleep(pages.FRESH_S)
    page = client.get("/rounds/r1").text
    assert page.index("alpha") < page.index("beta") and "0.3000" in page and "0.6000" in page
    assert "0.1235" not in page and "Holdout CE" not in page
    assert "0.1235" in client.get("/rounds/r1", headers=admin()).text  # organisers see holdout early
    sub_page = client.get(f"/submissions/{a}").text
    assert "hidden until the round closes" in sub_page and "0.1235" not in sub_page
    assert "id-00000001" not in sub_page and "m-00000" in sub_page  # real model ids never shown
    assert "0.1235" in client.get(f"/submissions/{a}", headers=admin()).text
    assert client.get(f"/api/submissions/{a}").json()["stages"][-1]["scores"] is None
    # reports: test stage is organiser-only; no report written yet -> 404 for the organiser
    assert client.get(f"/submissions/{a}/report/test").status_code == 403
    assert client.get(f"/submissions/{a}/report/test", headers=admin()).status_code == 404
    assert client.get(f"/submissions/{a}/report/nope").status_code == 404
    assert "Team alpha" in client.get("/teams/alpha").text
    assert client.get("/teams/nobody").status_code == 404
    # after close everybody sees the holdout CE
    assert client.post("/api/rounds/r1/close", headers=admin()).status_code == 200
    time.sleep(pages.FRESH_S)
    page = client.get("/rounds/r1").text
    assert "Holdout CE" in page and "0.1235" in page and 'name="token"' not in page
    assert "0.1235" in client.get(f"/submissions/{a}").text
    # the leaderboard is frozen at close: a test run finishing afterwards does not enter it
    assert upload(client, tokens["beta"], submission_bytes()).status_code == 409
    _score(client, b, "test", 0.01)
    assert [r["team"] for r in client.get("/api/rounds/r1/leaderboard").json()] == ["alpha"]


def test_upload_form_errors_are_shown_with_their_status(client, setup_round) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round()
    files = {"file": ("s.zip", submission_bytes(), "application/zip")}
    r = client.post("/rounds/r1/submissions", data={"token": ""}, files=files)
    assert r.status_code == 401 and "team token required" in r.text
    r = client.post("/rounds/r1/submissions", data={"token": "nope"}, files=files)
    assert r.status_code == 403
    r = client.post("/rounds/r1/submissions", data={"token": tokens["alpha"]},
                    files={"file": ("s.zip", b"junk", "application/zip")})
    assert r.status_code == 400 and "neither a .zip nor a .tar.gz" in r.text
    r = client.post("/rounds/r1/submissions", data={"token": tokens["alpha"]}, files=files, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/submissions/1"


def test_pages_escape_submitted_text(client, setup_round) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round()
    sub = upload(client, tokens["alpha"], submission_bytes(command="python detector.py '<script>alert(1)</script>'"))
    page = client.get(f"/submissions/{sub.json()['id']}").text
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_lineage_page_shows_the_chain_with_each_rounds_best(client, setup_round, zoos, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 23.3: round 2 was harvested against a detector on round 1; its lineage page lists both rounds,
    what round 2 was built against with that detector's scores on it, and round 1's best leaderboard entry."""
    import json

    from .helpers import make_zoo, round_body

    tokens = setup_round(("alpha",))
    a = upload(client, tokens["alpha"], submission_bytes()).json()["id"]
    _score(client, a, "test", 0.3)
    r2_test = make_zoo(tmp_path / "r2-test", 4, seed=5, reduced=True)
    (r2_test / "lineage.json").write_text(json.dumps({
        "preset": "round5-cpu-evasive", "detector": "default", "params_sha256": "ab" * 32, "kept": 4, "fooled": 3,
        "detector_on_round": {"cross_entropy": 0.9123, "roc_auc": 0.5512}, "parent": {"path": str(zoos["test"])}}))
    body = round_body({"train": make_zoo(tmp_path / "r2-train", 4, seed=6), "test": r2_test,
                       "holdout": make_zoo(tmp_path / "r2-holdout", 2, seed=7, reduced=True)}, name="r2")
    assert client.post("/api/rounds", json=body, headers=admin()).status_code == 201
    page = client.get("/rounds/r2/lineage")
    assert page.status_code == 200
    rows = page.text.split('<table id="lineage">')[1].split("<tr>")[2:]
    assert len(rows) == 2, rows
    assert "r2" in rows[0] and "default" in rows[0] and "abababababab" in rows[0] and "0.9123" in rows[0]
    assert "r1" in rows[1] and "not harvested" in rows[1] and "alpha" in rows[1] and "0.3000" in rows[1]
    assert str(zoos["test"]) not in page.text  # sequestered folders stay private
    assert '/rounds/r1/lineage"' in client.get("/rounds/r1").text
    # a chain whose parent round is gone: the page says which and how to fix it, in one line
    gone = tmp_path / "gone"
    (r2_test / "lineage.json").write_text(json.dumps({"detector": "default", "parent": {"path": str(gone)}}))
    broken = client.get("/rounds/r2/lineage", headers=admin()).text
    assert f"{gone}: round in the chain is missing" in broken and 'id="error"' in broken
    public = client.get("/rounds/r2/lineage").text
    assert "cannot be read" in public and str(gone) not in public
