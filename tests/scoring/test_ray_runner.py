"""evaluate --executor ray on a real local Ray cluster: the same results as the local workers, and
crashes, timeouts and bad answers scored 0.5 with their reasons."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trojanscope.errors import ConfigError
from trojanscope.scoring.harness import evaluate

if os.environ.get("CI"):
    import ray  # noqa: F401  (CI installs the ray extra: a missing Ray is a failure there)
else:
    pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[ray]'); CI runs these")

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _importable_fakes(monkeypatch):
    """Ray workers inherit the environment: put the fake detectors' folder on their PYTHONPATH."""
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_ray_scores_exactly_what_the_local_workers_score(zoo: Path, tmp_path: Path) -> None:
    local = evaluate(zoo, tmp_path / "local", detector="random", workers=2, progress=False)
    remote = evaluate(zoo, tmp_path / "ray", detector="random", workers=2, progress=False, executor="ray")
    assert list(remote.results["status"]) == ["ok"] * len(local.results)
    assert list(remote.results["probability"]) == list(local.results["probability"])
    assert remote.scores["cross_entropy"] == local.scores["cross_entropy"]


@pytest.mark.parametrize(("name", "status", "reason"), [
    ("Crash", "crash", "RuntimeError: boom on purpose"),
    ("Garbage", "unparsable", "not a number"),
    ("Hang", "timeout", "exceeded the 3 s limit"),
    ("Die", "crash", "worker process died"),  # killed under the model: scored again on a new actor, dies again
])
def test_ray_failures_score_half_with_the_reason(zoo: Path, tmp_path: Path, name: str, status: str,
                                                 reason: str) -> None:
    from trojanscope.models.layout import list_model_dirs

    # only Hang needs a short limit; elsewhere a replacement actor starting on a busy machine (imports, model
    # load) must not turn a crash into a timeout
    limit = 3 if status == "timeout" else 60
    res = evaluate(zoo, tmp_path / "run", detector=f"faulty_detectors:{name}", workers=2, time_limit_s=limit,
                   models=list_model_dirs(zoo)[:2], progress=False, executor="ray")
    assert set(res.results["status"]) == {status}, res.results
    assert (res.results["probability"] == 0.5).all()
    assert all(reason in r for r in res.results["reason"]), res.results["reason"].tolist()


def test_ray_refuses_a_command_and_an_unknown_executor(zoo: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--executor ray runs registered detectors"):
        evaluate(zoo, tmp_path / "a", command="python x.py", executor="ray")
    with pytest.raises(ConfigError, match="--executor must be local or ray"):
        evaluate(zoo, tmp_path / "b", detector="constant", executor="dask")
