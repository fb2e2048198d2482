"""HTTP API: organiser-only actions, team auth, upload limits and validation; bad requests store nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sqlalchemy import func, select

from trojanscope.errors import ConfigError
from trojanscope.leaderboard.db import Job, Submission, Team, make_sessionmaker

from .helpers import ADMIN, admin, round_body, submission_bytes, upload

pytestmark = pytest.mark.both_backends  # SQLite and a real PostgreSQL server


def _stored(client) -> tuple[int, int, list[str]]:  # type: ignore[no-untyped-def]
    """(submissions, jobs, folders under data/submissions) as they are now."""
    app = client.app
    with app.state.sessionmaker() as s:
        n_sub = s.scalar(select(func.count(Submission.id)))
        n_job = s.scalar(select(func.count(Job.id)))
    root = app.state.settings.data_dir / "submissions"
    return n_sub, n_job, sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_openapi_lists_submission_post(client) -> None:  # type: ignore[no-untyped-def]
    paths = client.get("/openapi.json").json()["paths"]
    posts = [p for p, ops in paths.items() if "post" in ops and "submissions" in p]
    assert posts == ["/api/rounds/{round_name}/submissions"]


@pytest.mark.parametrize("headers,code", [({}, 401), ({"Authorization": "Bearer wrong"}, 403),
                                          ({"Authorization": "Basic " + ADMIN}, 401)])
def test_organiser_only_actions(client, zoos, headers, code) -> None:  # type: ignore[no-untyped-def]
    assert client.post("/api/rounds", json=round_body(zoos), headers=headers).status_code == code
    assert client.post("/api/teams", json={"name": "x"}, headers=headers).status_code == code
    assert client.get("/api/jobs", headers=headers).status_code == code
    assert client.get("/api/rounds").json() == []
    with client.app.state.sessionmaker() as s:
        assert s.scalar(select(func.count(Team.id))) == 0
    # and with the right token it works, and closing is organiser-only too
    assert client.post("/api/rounds", json=round_body(zoos), headers=admin()).status_code == 201
    assert client.post("/api/rounds/r1/close", headers=headers).status_code == code
    assert client.get("/api/rounds/r1").json()["status"] == "open"


def test_team_token_shown_once_and_stored_hashed(client, setup_round) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(("alpha",))
    with client.app.state.sessionmaker() as s:
        stored = s.scalar(select(Team.token_hash))
    assert tokens["alpha"] not in stored and stored.startswith("scrypt$")
    assert "token" not in client.get("/api/teams/alpha").json()
    assert client.post("/api/teams", json={"name": "alpha"}, headers=admin()).status_code == 409


@pytest.mark.parametrize("token", [None, "wrong", "ts_1_" + "A" * 43, "ts_999_" + "A" * 43])
def test_bad_team_token_stores_nothing(client, setup_round, token) -> None:  # type: ignore[no-untyped-def]
    setup_round()
    r = upload(client, token, submission_bytes())
    assert r.status_code == (401 if token is None else 403), r.text
    assert _stored(client) == (0, 0, [])


def test_good_upload_queues_smoke_job(client, setup_round) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round()
    r = upload(client, tokens["alpha"], submission_bytes(fmt="tar.gz"), filename="../../x y.tgz")
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["status"] == "queued" and body["command"] == "python detector.py"
    assert body["filename"] == "x_y.tgz"
    assert [s["stage"] for s in body["stages"]] == ["smoke"]
    assert _stored(client) == (1, 1, [str(body["id"])])
    # the form field works as well as the header
    r = client.post("/api/rounds/r1/submissions", data={"token": tokens["alpha"]},
                    files={"file": ("s.zip", submission_bytes(), "application/zip")})
    assert r.status_code == 201


def test_oversized_upload_is_413_and_stores_nothing(client, setup_round, settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round()
    big = submission_bytes(extra={"weights.bin": __import__("os").urandom(settings.max_upload_bytes + 10)})
    r = upload(client, tokens["alpha"], big)
    assert r.status_code == 413
    assert _stored(client) == (0, 0, [])
    assert not list(settings.data_dir.glob(".upload-*"))


def test_chunked_upload_without_length_is_cut_off(client, setup_round, settings) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round()

    def body():  # type: ignore[no-untyped-def]
        yield b"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"s.zip\"\r\n\r\n"
        for _ in range(40):
            yield b"\0" * 16384  # 640 KiB in all, over the 300 kB limit, with no Content-Length
        yield b"\r\n--b--\r\n"

    r = client.post("/api/rounds/r1/submissions", content=body(),
                    headers={"Authorization": f"Bearer {tokens['alpha']}",
                             "content-type": "multipart/form-data; boundary=b"})
    assert r.status_code == 413
    assert _stored(client) == (0, 0, [])


@pytest.mark.parametrize("data,code", [
    (b"", 400), (b"not an archive", 400), (b"PK\x03\x04broken", 400),
    (submission_bytes(manifest=""), 400),  # empty manifest: no command
    (submission_bytes(extra={"../escape.py": b"x"}), 400)])
def test_malformed_uploads_are_4xx(client, setup_round, data, code) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round()
    r = upload(client, tokens["alpha"], data)
    assert r.status_code == code, r.text
    assert "detail" in r.json() and "\n" not in r.json()["detail"]
    assert _stored(client) == (0, 0, [])


def test_missing_file_field_is_422(client, setup_round) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round()
    r = client.post("/api/rounds/r1/submissions", headers={"Authorization": f"Bearer {tokens['alpha']}"})
    assert r.status_code == 422


def test_rate_limit(client, setup_round, settings) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(("alpha", "beta"))
    n = settings.rate_limit_count
    codes = [upload(client, tokens["alpha"], submission_bytes()).status_code for _ in range(n + 2)]
    assert codes == [201] * settings.rate_limit_count + [429, 429]
    assert upload(client, tokens["beta"], submission_bytes()).status_code == 201  # per team
    assert _stored(client)[0] == settings.rate_limit_count + 1


def test_round_validation_and_lifecycle(client, zoos, setup_round, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = [round_body(zoos, name="Bad Name!"), round_body(zoos, train=str(tmp_path / "nope")),
           round_body(zoos, train=str(tmp_path)), round_body(zoos, target_ce=-1), round_body(zoos, smoke_models=0),
           round_body(zoos, model_time_limit_s=0), {**round_body(zoos), "shell": "rm -rf /"}]
    for body in bad:
        r = client.post("/api/rounds", json=body, headers=admin())
        assert r.status_code == 422, body
    assert client.post("/api/rounds", json=[1, 2], headers=admin()).status_code == 422
    tokens = setup_round(name="r1")
    r = client.post("/api/rounds", json=round_body(zoos, name="r2", status="pending"), headers=admin())
    assert r.status_code == 201
    assert upload(client, tokens["alpha"], submission_bytes(), round_name="r2").status_code == 409  # not open
    assert upload(client, tokens["alpha"], submission_bytes(), round_name="nope").status_code == 404
    r = client.post("/api/rounds/r1/close", params={"open_next": "r2"}, headers=admin())
    assert r.status_code == 200 and r.json()["status"] == "closed"
    assert client.get("/api/rounds/r2").json()["status"] == "open"
    assert upload(client, tokens["alpha"], submission_bytes(), round_name="r1").status_code == 409  # closed
    assert client.post("/api/rounds/r1/close", headers=admin()).status_code == 409
    assert client.post("/api/rounds/r1/open", headers=admin()).status_code == 409


def test_round_whose_splits_share_models_is_refused(client, zoos, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    link = tmp_path / "train-link"
    link.symlink_to(zoos["train"])  # the same folder under another name
    r = client.post("/api/rounds", json=round_body(zoos, test=str(link)), headers=admin())
    assert r.status_code == 422 and "'train' and 'test' name the same folder" in r.json()["detail"]
    r = client.post("/api/rounds", json=round_body(zoos, holdout=str(zoos["test"])), headers=admin())
    assert r.status_code == 422 and "'test' and 'holdout' name the same folder" in r.json()["detail"]
    copied = tmp_path / "holdout"
    shutil.copytree(zoos["holdout"], copied)
    shutil.copy(zoos["train"] / "models" / "id-00000001" / "model.pt", copied / "models" / "id-00000000" / "model.pt")
    r = client.post("/api/rounds", json=round_body(zoos, holdout=str(copied)), headers=admin())
    assert r.status_code == 422
    assert r.json()["detail"] == ("round: Value error, 'train' model id-00000001 and 'holdout' model id-00000000 are "
                                  "the same file (equal sha256); a model in two splits leaks the scored models "
                                  "into training")
    assert client.get("/api/rounds").json() == []  # nothing registered


def test_json_body_size_limit(client) -> None:  # type: ignore[no-untyped-def]
    r = client.post("/api/teams", content=b"{" + b" " * 200_000 + b"}",
                    headers={**admin(), "content-type": "application/json"})
    assert r.status_code == 413


def test_no_admin_token_configured_means_no_organiser(tmp_path, zoos) -> None:  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    from trojanscope.leaderboard.app import create_app
    from trojanscope.leaderboard.settings import Settings

    app = create_app(Settings(db_url=f"sqlite:///{tmp_path / 'x.db'}", data_dir=tmp_path / "d"))
    with TestClient(app) as c:
        for headers in ({"Authorization": "Bearer "}, admin(), {}):  # whatever is sent: disabled, and it says so
            r = c.post("/api/rounds", json=round_body(zoos), headers=headers)
            assert r.status_code == 403 and "organiser actions are disabled" in r.json()["detail"]


def test_migrations_build_the_models_schema_and_a_newer_db_is_refused(db_url: str) -> None:
    """Alembic's revisions and the SQLAlchemy models agree exactly, on SQLite and on PostgreSQL."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import text

    from trojanscope.leaderboard.db import Base, make_engine

    maker = make_sessionmaker(db_url)
    engine = maker.kw["bind"]
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn)
        assert ctx.get_current_revision() == "0003"
        assert compare_metadata(ctx, Base.metadata) == []
    make_sessionmaker(db_url)  # idempotent
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(ConfigError, match="revision 9999 is newer than this trojanscope"):
        make_sessionmaker(db_url)
    engine.dispose()
    make_engine(db_url).dispose()


def test_a_database_made_before_alembic_is_stamped_and_kept(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from alembic import command
    from sqlalchemy import inspect, text

    from trojanscope.leaderboard.db import alembic_config, make_engine

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    # what init_db did before its migrations were Alembic's: the tables of revision 0001, unstamped
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), "0001")
        conn.execute(text("DROP TABLE alembic_version"))
    assert set(inspect(engine).get_table_names()) == {"rounds", "teams", "submissions", "jobs", "model_results"}
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO teams (name, token_hash, created_at) VALUES ('t', 'h', '2026-01-01')"))
    with make_sessionmaker(url)() as s:
        assert [t.name for t in s.scalars(select(Team))] == ["t"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0003"


def test_settings_from_env_and_bad_values() -> None:
    from trojanscope.leaderboard.settings import Settings

    s = Settings.from_env({"TROJANSCOPE_MAX_UPLOAD_BYTES": "1234", "TROJANSCOPE_ADMIN_TOKEN": "t"}, db_url="sqlite://")
    assert s.max_upload_bytes == 1234 and s.admin_secret() == "t" and s.db_url == "sqlite://"
    with pytest.raises(ConfigError, match="TROJANSCOPE_MAX_UPLOAD_BYTES"):
        Settings.from_env({"TROJANSCOPE_MAX_UPLOAD_BYTES": "-5"})
