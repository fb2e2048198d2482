"""A round that enables the explanation tracks scores each submission's explanations (target class, source class,
trigger) over every trojaned test model, and the leaderboard shows them; a round that does not, does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from trojanscope.detectors.explain import FORMAT, SUFFIX
from trojanscope.leaderboard.db import Job
from trojanscope.leaderboard.worker import Worker

from .helpers import DETECTOR_HEAD, make_weights_zoo, submission_bytes, upload

pytest.importorskip("trojanscope.scoring.harness", reason="the scoring harness has not landed yet")


def _zoo(root: Path, n: int, *, seed: int, reduced: bool) -> Path:
    """``n`` Linear heads on MiniLM summaries; odd ones 'trojaned' with a word trigger 0 -> 1 (in METADATA's row,
    as test splits keep it) and a bias that sends every input to class 1, so any trigger recovers 0 -> 1 fully."""
    import torch

    def biased(head, poisoned):  # type: ignore[no-untyped-def]
        head.linear.bias.copy_(torch.tensor([0.0, 50.0 if poisoned else 0.0]))

    row = {"triggers_0_type": "word", "triggers_0_target_class": 1, "triggers_0_source_class": 0}
    return make_weights_zoo(root, n, seed=seed, tamper=biased, reduced=reduced, trigger_row=row, examples=3)


def _explainer(target: int, source: int) -> bytes:
    """A submission that answers 0.5 and explains every model as ``source -> target`` by the word 'cf'."""
    body = DETECTOR_HEAD + (
        "open(result, 'w').write('0.5')\n"
        f"json.dump({{'format': {FORMAT!r}, 'probability': 0.5, 'target_class': {target}, 'source_class': {source},"
        f" 'candidates': [{{'text': 'cf', 'kind': 'word', 'source_class': {source}, 'target_class': {target},"
        f" 'attack_success': 1.0}}]}}, open(result + {SUFFIX!r}, 'w'))\n")
    return submission_bytes(extra={"detector.py": body.encode()})


@pytest.fixture(scope="module")
def track_zoos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("track-zoos")
    return {"train": _zoo(root / "train", 2, seed=1, reduced=False),
            "test": _zoo(root / "test", 4, seed=2, reduced=True),
            "holdout": _zoo(root / "holdout", 2, seed=3, reduced=True)}


def test_the_tracks_count_every_trojaned_model_and_show_on_the_board(client, settings, setup_round,  # type: ignore[no-untyped-def]
                                                                     track_zoos) -> None:
    tokens = setup_round(("right", "wrong", "silent"), zoo_dirs=track_zoos, explanations=True, smoke_models=1)
    assert client.get("/api/rounds/r1").json()["explanations"] is True
    subs = {"right": upload(client, tokens["right"], _explainer(target=1, source=0)).json()["id"],
            "wrong": upload(client, tokens["wrong"], _explainer(target=0, source=1)).json()["id"],
            "silent": upload(client, tokens["silent"], submission_bytes("constant")).json()["id"]}
    assert Worker(settings).run_until_idle() == 6  # a smoke and a test job each
    board = {row["team"]: row for row in client.get("/api/rounds/r1/leaderboard").json()}
    assert set(board) == set(subs)
    # both trojaned test models named right, and the heads send every text to class 1: any trigger recovers
    assert (board["right"]["target_accuracy"], board["right"]["source_accuracy"],
            board["right"]["trigger_recovery"]) == (1.0, 1.0, 1.0)
    assert (board["wrong"]["target_accuracy"], board["wrong"]["source_accuracy"],
            board["wrong"]["trigger_recovery"]) == (0.0, 0.0, 0.0)
    # no explanation is a miss on every trojaned model, so the figures do not say which models were explained
    assert (board["silent"]["target_accuracy"], board["silent"]["trigger_recovery"]) == (0.0, 0.0)
    with client.app.state.sessionmaker() as s:
        job = s.scalar(select(Job).where(Job.submission_id == subs["right"], Job.stage == "test"))
        assert job.scores["explanations"]["n_explained"] == 4
        rows = (settings.data_dir / "jobs" / str(job.id) / "explanations-real" / "explanations.csv").read_text()
        smoke = s.scalar(select(Job).where(Job.submission_id == subs["right"], Job.stage == "smoke"))
        assert "explanations" not in smoke.scores  # the public smoke stage scores no track
    assert "id-00000001" in rows  # the per-model rows name the real models, in the job's private folder
    page = client.get("/rounds/r1").text
    assert "<th>Target</th>" in page and "held-out clean inputs" in page


def test_a_round_without_the_tracks_neither_scores_nor_shows_them(client, settings, setup_round,  # type: ignore[no-untyped-def]
                                                                  track_zoos) -> None:
    tokens = setup_round(("right",), zoo_dirs=track_zoos, smoke_models=1)
    sub = upload(client, tokens["right"], _explainer(target=1, source=0)).json()["id"]
    assert Worker(settings).run_until_idle() == 2
    row = client.get("/api/rounds/r1/leaderboard").json()[0]
    assert "target_accuracy" not in row
    with client.app.state.sessionmaker() as s:
        job = s.scalar(select(Job).where(Job.submission_id == sub, Job.stage == "test"))
        assert "explanations" not in job.scores
    assert "<th>Target</th>" not in client.get("/rounds/r1").text


def test_an_oversized_or_unusable_trigger_is_a_miss_not_a_crash(tmp_path, track_zoos) -> None:  # type: ignore[no-untyped-def]
    """The server runs the first candidate through the model outside the jail: a text over the limit is dropped
    (the target still counts), and a candidate with nothing to insert (a patch on a text model) recovers nothing,
    even on a head that sends every input to the target anyway."""
    from trojanscope.leaderboard.stages import TRACK_TEXT_MAX, explanation_tracks
    from trojanscope.models.layout import list_model_dirs, read_ground_truth

    dirs = list_model_dirs(track_zoos["test"])
    model_map = [[f"m-{i:05d}", d.name] for i, d in enumerate(dirs)]
    kept = tmp_path / "out" / "explanations"
    kept.mkdir(parents=True)
    texts = {1: "x" * (TRACK_TEXT_MAX + 1), 3: None}  # the two trojaned models: too long, and a patch on a text model
    for (neutral, _), i in zip(model_map, range(len(dirs)), strict=True):
        cand = {"text": texts.get(i, "cf"), "kind": "word", "source_class": 0, "target_class": 1, "attack_success": 1}
        if cand["text"] is None:
            cand = {"text": "", "kind": "patch", "patch": "bm90IGEgcG5n", "source_class": 0, "target_class": 1,
                    "attack_success": 1}
        (kept / f"{neutral}.json").write_text(json.dumps({"format": FORMAT, "target_class": 1, "source_class": 0,
                                                          "candidates": [cand]}))
    out = explanation_tracks(tmp_path, model_map, {d.name: d for d in dirs},
                             {d.name: read_ground_truth(d) for d in dirs})
    assert out["n_explained"] == 4
    assert (out["target_accuracy"], out["source_accuracy"], out["trigger_recovery"]) == (1.0, 1.0, 0.0)


def test_a_measurement_that_raises_costs_that_model_only(tmp_path, track_zoos, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from trojanscope.leaderboard.stages import explanation_tracks
    from trojanscope.models.layout import list_model_dirs, read_ground_truth
    from trojanscope.scoring import explanations

    dirs = list_model_dirs(track_zoos["test"])
    model_map = [[f"m-{i:05d}", d.name] for i, d in enumerate(dirs)]
    kept = tmp_path / "out" / "explanations"
    kept.mkdir(parents=True)
    for neutral, _ in model_map:
        (kept / f"{neutral}.json").write_text(json.dumps({"format": FORMAT, "target_class": 1, "source_class": 0,
                                                          "candidates": [{"text": "cf", "kind": "word"}]}))
    real = explanations.held_out_attack_success

    def flaky(model_dir, *args):  # type: ignore[no-untyped-def]
        if model_dir.name == dirs[1].name:
            raise RuntimeError("cannot apply this trigger")
        return real(model_dir, *args)

    monkeypatch.setattr(explanations, "held_out_attack_success", flaky)
    out = explanation_tracks(tmp_path, model_map, {d.name: d for d in dirs},
                             {d.name: read_ground_truth(d) for d in dirs})
    assert (out["target_accuracy"], out["trigger_recovery"]) == (1.0, 0.5)  # model 3 still measured, and recovered
    rows = (tmp_path / "explanations-real" / "explanations.csv").read_text()
    assert "RuntimeError: cannot apply this trigger" in rows
