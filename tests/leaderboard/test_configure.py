"""The configure step (TrojAI's configure mode) on the leaderboard: a submission refits itself on the round's
train split in the sandbox, under its own time limit, before its smoke and test stages, which read the result."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

import trojanscope
from trojanscope.leaderboard import sandbox
from trojanscope.leaderboard.db import Job
from trojanscope.leaderboard.worker import Worker

from .helpers import admin, make_weights_zoo, round_body, submission_bytes, upload

pytest.importorskip("trojanscope.scoring.harness", reason="the scoring harness has not landed yet")

CONFIGURE = 'command = "python detector.py"\nconfigure = true\n'
# `trojanscope detect --detector weights`: no parameters ship with it, so it answers only once configured.
# (The jail passes no PYTHONPATH: the wrapper points at the trojanscope under test.)
WEIGHTS = (f"import sys\nsys.path.insert(0, {str(Path(trojanscope.__file__).parents[1])!r})\n"
           "from trojanscope.cli import main\nmain(['detect', '--detector', 'weights', *sys.argv[1:]])\n").encode()


@pytest.fixture(scope="module")
def weights_zoos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("wzoos")
    return {"train": make_weights_zoo(root / "train", 4, seed=1), "test": make_weights_zoo(root / "test", 2, seed=2)}


def _jobs(client, sub_id: int) -> dict[str, Job]:  # type: ignore[no-untyped-def]
    with client.app.state.sessionmaker() as s:
        jobs = s.scalars(select(Job).where(Job.submission_id == sub_id).order_by(Job.id)).all()
        for j in jobs:
            j.results  # noqa: B018 - load while the session is open
        return {j.stage: j for j in jobs}


@pytest.mark.slow
def test_unfitted_detector_reaches_test_scores_through_configure(client, settings, weights_zoos,  # type: ignore[no-untyped-def]
                                                                  tmp_path) -> None:
    """`weights` ships no parameters: configured on the train split it scores the test split exactly as the same
    detector fitted beforehand on those models does; unconfigured it fails its smoke test."""
    from trojanscope.detectors import load_detector
    from trojanscope.detectors.learned import inputs_for_model_dir
    from trojanscope.detectors.runner import fit_on_zoo

    body = round_body({**weights_zoos, "holdout": None}, smoke_models=1, model_time_limit_s=120,
                      submission_time_limit_s=1200, smoke_time_limit_s=600)
    body.pop("holdout")  # a split may not reuse another's models
    r = client.post("/api/rounds", json=body, headers=admin())
    assert r.status_code == 201, r.text
    tokens = {t: client.post("/api/teams", json={"name": t}, headers=admin()).json()["token"] for t in ("cfg", "raw")}
    configured = upload(client, tokens["cfg"], submission_bytes(manifest=CONFIGURE, extra={"detector.py": WEIGHTS}))
    assert configured.status_code == 201, configured.text
    assert [st["stage"] for st in configured.json()["stages"]] == ["configure"]
    raw = upload(client, tokens["raw"], submission_bytes(extra={"detector.py": WEIGHTS})).json()["id"]
    Worker(settings).run_until_idle()

    jobs = _jobs(client, configured.json()["id"])
    assert list(jobs) == ["configure", "smoke", "test"], {k: j.error for k, j in jobs.items()}
    cfg = jobs["configure"]
    assert cfg.status == "done" and cfg.scores["n_models"] == 4 and cfg.scores["learned_files"] == 1, cfg.error
    kept = settings.data_dir / "submissions" / str(configured.json()["id"]) / "learned_parameters" / "weights.json"
    assert json.loads(kept.read_text())["trained_on"]["n_models"] == 4  # kept per submission
    models = settings.data_dir / "jobs" / str(cfg.id) / "models"  # labelled neutral copies of the train split
    assert sorted(p.name for p in models.iterdir()) == [f"m-{i:05d}" for i in range(4)]
    assert all((m / "ground_truth.csv").is_file() and "poisoned" not in (m / "config.json").read_text()
               for m in models.iterdir())
    for stage in ("smoke", "test"):
        assert {r.status for r in jobs[stage].results} == {"ok"}, [r.reason for r in jobs[stage].results]
        assert not any((settings.data_dir / "jobs" / str(jobs[stage].id) / "models").glob("*/ground_truth.csv"))
    # the pre-fitted detector: the same fit, outside the leaderboard, on the configure step's models
    fit_on_zoo(models, "weights", tmp_path / "weights.json")
    prefitted = load_detector("weights", str(tmp_path / "weights.json"))
    for r in jobs["test"].results:
        expected = prefitted.score(inputs_for_model_dir(weights_zoos["test"] / "models" / r.model_name)).probability
        assert r.probability == pytest.approx(expected, abs=1e-6)
    assert jobs["test"].scores["roc_auc"] == 1.0 and jobs["test"].scores["cross_entropy"] < 0.6
    assert client.get(f"/api/submissions/{configured.json()['id']}").json()["status"] == "scored"
    assert client.get("/api/rounds/r1/leaderboard").json()[0]["team"] == "cfg"
    # the same detector without the configure step never gets past its smoke test
    assert list(_jobs(client, raw)) == ["smoke"]
    assert client.get(f"/api/submissions/{raw}").json()["status"] == "smoke_failed"


HANG = b"import time\ntime.sleep(600)\n"
CRASH = b"import sys\nprint('cannot configure', file=sys.stderr)\nraise SystemExit(3)\n"


def test_configure_failures_stop_the_submission(client, settings, setup_round, tmp_path) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(("hang", "crash"))
    subs = {kind: upload(client, tokens[kind], submission_bytes(manifest=CONFIGURE, extra={"detector.py": source}))
            for kind, source in (("hang", HANG), ("crash", CRASH))}
    w = Worker(settings.model_copy(update={"configure_time_limit_s": 1.5}))
    assert w.run_until_idle() == 2
    for kind, message in (("hang", "ran past its 1.5 s limit"),
                          ("crash", "exited with status 3 (last output: cannot configure)")):
        sub_id = subs[kind].json()["id"]
        jobs = _jobs(client, sub_id)
        assert list(jobs) == ["configure"]  # neither smoke nor test ran
        assert jobs["configure"].status == "failed" and message in jobs["configure"].error
        assert jobs["configure"].runtime_s < 20
        own = {"Authorization": f"Bearer {tokens[kind]}"}
        view = client.get(f"/api/submissions/{sub_id}", headers=own).json()
        assert view["status"] == "configure_failed" and message in view["message"]
        public = client.get(f"/api/submissions/{sub_id}").json()  # the detector's output is not public
        assert public["message"].startswith("the configure step failed") and "cannot configure" not in str(public)
        assert sandbox.tagged_pids(w.tag(jobs["configure"].id)) == []
        assert "configure_failed" in client.get(f"/submissions/{sub_id}").text
    bad = upload(client, tokens["crash"], submission_bytes(manifest='command = "python d.py"\nconfigure = "yes"\n'))
    assert bad.status_code == 400 and "configure must be true or false" in bad.json()["detail"]


# Configure mode writes a number; the normal invocation answers it: proof of what reaches each stage.
ECHO = b"""import os, sys
args = sys.argv[1:]
def arg(name):
    return args[args.index(name) + 1] if name in args else None
if "--configure_mode" in args:
    labels = [open(os.path.join(arg("--configure_models_dirpath"), m, "ground_truth.csv")).read().strip()
              for m in sorted(os.listdir(arg("--configure_models_dirpath"))) if m.startswith("m-")]
    open(os.path.join(arg("--learned_parameters_dirpath"), "p.txt"), "w").write(str(0.2 + 0.1 * len(labels)))
else:
    open(arg("--result_filepath"), "w").write(open(os.path.join(arg("--learned_parameters_dirpath"), "p.txt")).read())
"""


def test_learned_parameters_reach_every_later_stage(client, settings, setup_round, zoos) -> None:  # type: ignore[no-untyped-def]
    tokens = setup_round(("echo",), smoke_models=2)
    archive = submission_bytes(manifest=CONFIGURE, extra={"detector.py": ECHO})
    sub_id = upload(client, tokens["echo"], archive).json()["id"]
    w = Worker(settings)
    assert w.run_until_idle(max_jobs=2) == 2  # configure, smoke
    jobs = _jobs(client, sub_id)
    assert [r.probability for r in jobs["smoke"].results] == [pytest.approx(0.6)] * 2  # 4 labelled train models
    # the kept parameters vanish before the test stage: a one-line failure, not a crashed worker
    store = settings.data_dir / "submissions" / str(sub_id) / "learned_parameters"
    shutil.rmtree(store)
    assert w.run_until_idle() == 1
    test = _jobs(client, sub_id)["test"]
    assert test.status == "failed" and "learned parameters are gone" in test.error
    assert client.get(f"/api/submissions/{sub_id}").json()["status"] == "failed"
