"""Issue 46's leaderboard breaks, each failing before its fix: pages answer errors as pages, the organiser can
read sequestered reports in a browser, running stages show progress and refresh, the operator's terminal
logs jobs, a port in use is one line, the train download leaves rejected draws out."""

from __future__ import annotations

import io
import socket
import tarfile
from pathlib import Path

import pytest

from trojanscope.leaderboard import security
from trojanscope.leaderboard.db import Job
from trojanscope.leaderboard.download import SplitArchive
from trojanscope.leaderboard.worker import Worker

from .helpers import ADMIN, submission_bytes, upload

HTML = {"Accept": "text/html,application/xhtml+xml"}


def test_unknown_pages_are_pages_for_browsers_and_json_for_the_api(client, setup_round) -> None:  # type: ignore[no-untyped-def]
    setup_round()
    for path in ("/rounds/nope", "/submissions/12345", "/teams/nobody", "/submissions/99999999999999999999999"):
        page = client.get(path, headers=HTML)
        assert page.status_code == 404 and page.headers["content-type"].startswith("text/html"), path
        assert "<h1>Not found</h1>" in page.text and '"detail"' not in page.text
    api = client.get("/api/rounds/nope", headers=HTML)  # the API answers JSON whatever the client accepts
    assert api.status_code == 404 and api.json()["detail"]
    forbidden = client.get("/submissions/1/report/test", headers=HTML)
    assert forbidden.status_code in (403, 404) and forbidden.headers["content-type"].startswith("text/html")


def test_organiser_signs_in_once_and_reads_sequestered_reports(client, setup_round, settings) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(smoke_models=1)
    sub = upload(client, tokens["alpha"], submission_bytes("good")).json()["id"]
    Worker(settings).run_until_idle()
    report = f"/submissions/{sub}/report/test"
    assert client.get(report, headers=HTML).status_code == 403
    wrong = client.post("/organiser", data={"token": "not-it"}, headers=HTML, follow_redirects=False)
    assert wrong.status_code == 403 and "not the organiser token" in wrong.text
    assert security.ORGANISER_COOKIE not in client.cookies
    ok = client.post("/organiser", data={"token": ADMIN}, follow_redirects=False)
    assert ok.status_code == 303 and "httponly" in ok.headers["set-cookie"].lower()
    assert "samesite=strict" in ok.headers["set-cookie"].lower()
    cookie = client.cookies[security.ORGANISER_COOKIE]
    assert ADMIN not in cookie  # a digest, never the token
    page = client.get(report, headers=HTML)
    assert page.status_code == 200 and "<html" in page.text.lower()
    assert "organiser view" in client.get(f"/submissions/{sub}", headers=HTML).text
    # the cookie reads; it does not act
    r = client.post("/api/teams", json={"name": "mallory"})
    assert r.status_code == 401
    client.post("/organiser/sign-out")
    assert client.get(report, headers=HTML).status_code == 403


def test_running_stage_shows_progress_and_the_page_refreshes(client, setup_round, settings) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(smoke_models=3)
    sub = upload(client, tokens["alpha"], submission_bytes("good")).json()["id"]
    page = client.get(f"/submissions/{sub}").text
    assert '<meta http-equiv="refresh" content="5">' in page  # queued: the page follows it
    with client.app.state.sessionmaker() as s:  # a smoke stage caught mid-run: 2 of its 3 models answered
        job = s.query(Job).filter(Job.submission_id == sub).one()
        job.status, job.model_map = "running", [["m-00000", "a"], ["m-00001", "b"], ["m-00002", "c"]]
        s.commit()
        out = settings.data_dir / "jobs" / str(job.id) / "out"
    out.mkdir(parents=True)
    (out / "results.csv").write_text("model_name,probability,status,reason,seconds\n"
                                     "m-00001,0.9,ok,,0.1\nm-00000,0.1,ok,,0.1\n")
    page = client.get(f"/submissions/{sub}").text
    assert 'id="progress-smoke">2 of 3 models<' in page
    with client.app.state.sessionmaker() as s:
        s.query(Job).filter(Job.submission_id == sub).update({"status": "queued", "model_map": None})
        s.commit()
    Worker(settings).run_until_idle()
    page = client.get(f"/submissions/{sub}").text
    assert "scored" in page and 'http-equiv="refresh"' not in page  # final: no more refreshing


def test_worker_logs_each_job_on_the_operators_terminal(client, setup_round, settings, capsys) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(smoke_models=1)
    sub = upload(client, tokens["alpha"], submission_bytes("good")).json()["id"]
    Worker(settings).run_until_idle()
    err = capsys.readouterr().err
    assert f"submission {sub} (alpha, smoke): started" in err
    assert f"submission {sub} (alpha, smoke): done in" in err and "1/1 valid answers" in err
    assert f"submission {sub} (alpha, test): done in" in err and "CE " in err


def test_a_port_in_use_is_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    from trojanscope.cli import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(SystemExit) as exit_info:
            main(["serve", "--db", f"sqlite:///{tmp_path}/lb.db", "--port", str(port), "--workers", "0",
                  "--data-dir", str(tmp_path / "d")])
    err = capsys.readouterr().err
    assert exit_info.value.code != 0 and err.count("\n") == 1
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err
    assert not (tmp_path / "d").exists() and not (tmp_path / "lb.db").exists()  # nothing started, nothing made


def test_train_download_leaves_rejected_draws_on_the_server(tmp_path: Path) -> None:
    zoo = tmp_path / "zoo"
    (zoo / "models" / "id-00000000").mkdir(parents=True)
    (zoo / "models" / "id-00000000" / "model.pt").write_bytes(b"m" * 10)
    (zoo / "failed" / "id-00000003-try1").mkdir(parents=True)  # a draw that did not converge, replaced
    (zoo / "failed" / "id-00000003-try1" / "model.pt").write_bytes(b"f" * 1000)
    (zoo / "METADATA.csv").write_text("model_name\nid-00000000\n")
    archive = SplitArchive(zoo, "r1-train")
    data = b"".join(archive.iter_bytes())
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        names = sorted(m.name for m in tf if m.isfile())
    assert names == ["r1-train/METADATA.csv", "r1-train/models/id-00000000/model.pt"]


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "submission"


@pytest.mark.slow
def test_the_example_submission_runs_as_the_docs_walk_through_it(client, settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """examples/submission, zipped as docs/leaderboard.md says, configures itself on the train split in the
    sandbox and then separates the test split's models."""
    import math
    import zipfile

    from .helpers import admin, make_weights_zoo, round_body

    zoos = {"train": make_weights_zoo(tmp_path / "train", 6, seed=1), "test": make_weights_zoo(tmp_path / "test", 4,
                                                                                                seed=2)}
    body = round_body({**zoos, "holdout": None}, smoke_models=2, model_time_limit_s=60)
    body.pop("holdout")
    assert client.post("/api/rounds", json=body, headers=admin()).status_code == 201
    token = client.post("/api/teams", json={"name": "newcomer"}, headers=admin()).json()["token"]
    archive = tmp_path / "submission.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name in ("trojanscope-submission.toml", "detector.py"):
            zf.write(EXAMPLE / name, name)
    sub = upload(client, token, archive.read_bytes()).json()["id"]
    assert Worker(settings).run_until_idle() == 3  # configure, smoke, test
    view = client.get(f"/api/submissions/{sub}", headers={"Authorization": f"Bearer {token}"}).json()
    assert view["status"] == "scored", view
    test = next(st for st in view["stages"] if st["stage"] == "test")
    assert test["scores"]["n_ok"] == 4 and test["scores"]["cross_entropy"] < math.log(2) / 4
