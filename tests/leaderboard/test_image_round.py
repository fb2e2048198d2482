"""A leaderboard round over an image zoo: the submission receives the example PNGs and is scored."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import select

from trojanscope.leaderboard.db import ModelResult
from trojanscope.leaderboard.worker import Worker

from .helpers import admin, round_body, submission_bytes, upload

# Answers only if the examples folder holds PNG images (and prints what it saw); crashes otherwise.
PNG_DETECTOR = textwrap.dedent("""
    import json, os, sys
    args = sys.argv[1:]
    def arg(name):
        return args[args.index(name) + 1] if name in args else None
    examples = arg("--examples_dirpath")
    pngs = sorted(f for f in os.listdir(examples) if f.endswith(".png")) if examples else []
    print("SEEN", json.dumps({"pngs": pngs}), flush=True)  # its own folder is read-only: say it in the log
    if not pngs:
        raise SystemExit("no example images")
    open(arg("--result_filepath"), "w").write("0.25")
""")


@pytest.fixture(scope="module")
def image_test_zoo(tmp_path_factory, data_root: Path) -> Path:
    from tests.conftest import make_tiny_image_zoo

    return make_tiny_image_zoo(tmp_path_factory, data_root, split="test", count=2)


@pytest.mark.slow
def test_an_image_round_hands_submissions_the_example_images(client, settings, tiny_image_zoo, image_test_zoo):
    body = round_body({"train": tiny_image_zoo, "test": image_test_zoo, "holdout": None}, smoke_models=2)
    body.pop("holdout")
    r = client.post("/api/rounds", json=body, headers=admin())
    assert r.status_code == 201, r.text
    token = client.post("/api/teams", json={"name": "alpha"}, headers=admin()).json()["token"]
    archive = submission_bytes("constant", extra={"detector.py": PNG_DETECTOR.encode()})
    sub = upload(client, token, archive).json()["id"]
    assert Worker(settings).run_until_idle() == 2  # smoke, then test
    view = client.get(f"/api/submissions/{sub}").json()
    assert view["status"] == "scored", view
    seen = [json.loads(line.split(" ", 1)[1]) for p in (settings.data_dir / "jobs").rglob("out/logs/m-*.log")
            for line in p.read_text().splitlines() if line.startswith("SEEN ")]
    assert seen and all(s["pngs"] for s in seen), seen
    with client.app.state.sessionmaker() as s:
        statuses = [r.status for r in s.scalars(select(ModelResult))]
    assert statuses == ["ok"] * 4, statuses  # 2 smoke + 2 test models, none crashed for want of images
    board = client.get("/api/rounds/r1/leaderboard").json()
    assert board and board[0]["team"] == "alpha"
