"""The next round by harvest: round N+1 built from what round N's top submission gets wrong.

An organiser asks for it once round N is closed (``POST /api/rounds/N/harvest-next``). The request is
checked whole before anything is stored (round closed, a scored submission, a preset that loads, a free
name) and reserves the new round's name; a ``harvest`` job of round N's top submission then, per split,
generates a candidate pool with the preset, scores every candidate with the submission *through the
worker's jailed per-model loop* (the smoke/test/holdout sandbox, neutral copies, time limits) and keeps
what fooled it (:func:`trojanscope.dynamic.harvest`). The round is registered only when every split is
built; its lineage.json names the submission, its archive's sha256 and round N's test split as the
parent. A killed worker's job goes back to the queue and resumes: candidate pools, the submission's
per-model results.csv and finished splits are kept.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from trojanscope.errors import ConfigError, TrojanscopeError
from trojanscope.fsutil import atomic_write_json
from trojanscope.leaderboard import sandbox
from trojanscope.leaderboard.db import Harvest, Job, Round, utcnow
from trojanscope.leaderboard.services import NAME_RE, ConflictError, RoundIn, create_round, get_round, leaderboard

if TYPE_CHECKING:
    from trojanscope.leaderboard.worker import Worker

SPLITS = ("train", "test", "holdout")


class LeaseLost(TrojanscopeError):  # noqa: N818 - reads as the reason
    """Another worker took the job over (this one's lease expired); it finishes the harvest."""


class HarvestIn(BaseModel):
    """The organiser's request: the new round's name, preset and split sizes (a holdout is optional)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_RE)
    title: str = Field("", max_length=200)
    preset: str = Field(min_length=1, max_length=1000)
    train: int = Field(ge=2, le=100_000)
    test: int = Field(ge=2, le=100_000)
    holdout: int | None = Field(None, ge=2, le=100_000)
    # models generated per split to harvest from; default 3 x the split's size
    candidates: dict[str, int] = Field(default_factory=dict)
    threshold: float = Field(0.5, gt=0, lt=1)
    status: str = Field("pending", pattern="^(pending|open)$")

    @model_validator(mode="after")
    def _candidates_fit(self) -> HarvestIn:
        for split, n in self.candidates.items():
            size = getattr(self, split, None) if split in SPLITS else None
            if size is None:
                raise ValueError(f"candidates names split {split!r}, which this round does not have; "
                                 f"use {', '.join(s for s in SPLITS if getattr(self, s))}")
            if n < size:
                raise ValueError(f"candidates[{split!r}] = {n} is fewer than the split's {size} models")
        return self

    def sizes(self) -> dict[str, int]:
        return {split: n for split in SPLITS if (n := getattr(self, split)) is not None}


def request_harvest(s: Session, round_name: str, data: HarvestIn) -> Harvest:
    """Check the request whole, then store it with its queued ``harvest`` job (nothing is stored on error).
    Re-sending a request whose harvest failed queues the same job again: it resumes where it stopped."""
    from trojanscope.dynamic.harvest import lineage_chain
    from trojanscope.rounds.factors import is_matched
    from trojanscope.rounds.preset import load_preset

    rnd = get_round(s, round_name)
    if rnd.status != "closed":
        raise ConflictError(f"round {round_name!r} is {rnd.status}; close it first (POST /api/rounds/{round_name}"
                            "/close): the next round is built against its final leaderboard")
    if s.scalar(select(Round.id).where(Round.name == data.name)) is not None:
        raise ConflictError(f"round {data.name!r} already exists; choose another name for the next round")
    preset = data.preset
    if preset.endswith(".toml") or Path(preset).exists():  # a file on the server: the worker resolves it alike
        preset = str(Path(preset).expanduser().resolve())
    loaded, _ = load_preset(preset)  # an unknown preset is one ConfigError line (HTTP 400)
    odd = {split: n for split, n in data.sizes().items() if n % 2}
    if is_matched(loaded) and odd:
        raise ConfigError(f"{loaded.name} draws matched pairs and a harvest keeps whole pairs: split sizes must be "
                          f"even, got {', '.join(f'{k} {v}' for k, v in odd.items())}")
    lineage_chain(rnd.test_dir)  # round N's test split is the parent: it must be readable
    top = leaderboard(s, rnd, include_holdout=False)
    if not top:
        raise ConflictError(f"round {round_name!r} has no scored submission; the next round is built against "
                            "its top submission")
    sub_id = top[0]["submission_id"]
    spec = {**data.model_dump(mode="json"), "preset": preset}
    earlier = s.scalar(select(Harvest).where(Harvest.name == data.name))
    if earlier is not None:
        if earlier.status != "failed" or earlier.source_round_id != rnd.id or earlier.spec != spec:
            raise ConflictError(f"round name {data.name!r} is taken by a harvest of round "
                                f"{earlier.source_round.name!r} ({earlier.status}); choose another name")
        earlier.status = "queued"
        earlier.job.status, earlier.job.error, earlier.job.attempts = "queued", "", 0
        earlier.job.worker_id = earlier.job.lease_until = earlier.job.finished_at = None
        s.commit()
        return earlier
    job = s.scalar(select(Job).where(Job.submission_id == sub_id, Job.stage == "harvest"))
    if job is not None:
        built = s.scalar(select(Harvest).where(Harvest.job_id == job.id))
        raise ConflictError(f"submission {sub_id} already feeds the harvest of round {built.name!r} "
                            f"({built.status}); a failed one is retried by sending its request again")
    job = Job(submission_id=sub_id, stage="harvest", priority=3)
    hv = Harvest(name=data.name, source_round_id=rnd.id, submission_id=sub_id, job=job, spec=spec,
                 status="queued")
    s.add_all([job, hv])
    s.commit()
    return hv


def harvest_view(hv: Harvest) -> dict[str, Any]:
    sub = hv.submission
    return {"name": hv.name, "source_round": hv.source_round.name, "submission_id": sub.id,
            "team": sub.team.name, "status": hv.status, "job_status": hv.job.status, "error": hv.job.error,
            "spec": hv.spec, "created_at": hv.created_at, "registered": hv.round_id is not None,
            "scores": hv.job.scores}


def list_harvests(s: Session, round_name: str) -> list[dict[str, Any]]:
    rnd = get_round(s, round_name)
    return [harvest_view(hv) for hv in s.scalars(select(Harvest).where(Harvest.source_round_id == rnd.id)
                                                 .order_by(Harvest.id))]


# the worker's side ------------------------------------------------------------------------------------
def run_harvest_job(worker: Worker, job_id: int) -> None:
    """Build every split of the requested round with the job's submission in the loop, then register it."""
    import fcntl

    from trojanscope.dynamic.harvest import LINEAGE_FILE, harvest, read_lineage
    from trojanscope.leaderboard.sandbox import LEARNED_DIR, read_results

    with worker.Session() as s:
        hv = s.scalar(select(Harvest).where(Harvest.job_id == job_id))
        sub, src = hv.submission, hv.source_round
        spec, name = dict(hv.spec), hv.name
        who = f"submission {sub.id} of team {sub.team.name} (round {src.name})"
        extra = {"submission": {"id": sub.id, "team": sub.team.name, "round": src.name, "sha256": sub.sha256}}
        command, sha256, files = sub.command, sub.sha256, worker.submission_files(sub.id)
        configured = any(j.stage == "configure" and j.status == "done" for j in sub.jobs)
        limits = {"per_model": src.model_time_limit_s, "budget": src.submission_time_limit_s}
        new_round = {"name": name, "title": spec.get("title") or name, "target_ce": src.target_ce,
                     "smoke_models": src.smoke_models, "model_time_limit_s": src.model_time_limit_s,
                     "submission_time_limit_s": src.submission_time_limit_s,
                     "smoke_time_limit_s": src.smoke_time_limit_s, "explanations": src.explanations,
                     "status": spec["status"]}
        parent = Path(src.test_dir)
    job_dir = worker.settings.data_dir / "jobs" / str(job_id)
    round_dir = worker.settings.data_dir / "rounds" / name
    job_dir.mkdir(parents=True, exist_ok=True)
    tag = worker.tag(job_id)
    with (job_dir / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sandbox.kill_tagged(tag)
        work = sandbox.copy_submission(files, job_dir / "work")
        env = sandbox.sandbox_env(work, tag)
        learned_args = worker.learned_args(configured, files.parent / LEARNED_DIR, job_dir)

        def score_pool(cand_dir: Path, split: str) -> pd.DataFrame:
            return _score_pool(worker, job_id, command, cand_dir, job_dir / split, env=env, work=work,
                               learned_args=learned_args, **limits)

        lineages = {}
        sizes = {split: spec[split] for split in SPLITS if spec.get(split)}
        for split, size in sizes.items():
            out = round_dir / split
            if not (out / LINEAGE_FILE).is_file():
                if (out / "models").exists():  # stopped between the models and lineage.json: build it again
                    shutil.rmtree(out / "models")
                harvest(spec["preset"], split, size, out,
                        scores=lambda cand_dir, split=split: score_pool(cand_dir, split),
                        scored_by=who, scored_by_sha256=sha256, lineage_extra=extra,
                        candidates=spec["candidates"].get(split), candidates_dir=job_dir / split / "candidates",
                        parent=parent, threshold=spec["threshold"], progress=False)
            lineages[split] = read_lineage(out)
    answered = sum(r["status"] == "ok" for split in sizes
                   for r in read_results(job_dir / split / "out" / "results.csv").values())
    _register(worker, job_id, new_round, {split: round_dir / split for split in sizes}, lineages, answered)


def _score_pool(worker: Worker, job_id: int, command: str, cand_dir: Path, split_dir: Path, *,
                env: dict[str, str], work: Path, learned_args: list[str], per_model: float,
                budget: float) -> pd.DataFrame:
    """The submission's P(trojaned) for every candidate of a pool, from the worker's jailed per-model loop
    over neutral copies (the map from neutral to real names is kept, so a resumed job reuses its results)."""
    from trojanscope.models.layout import list_model_dirs

    model_dirs = list_model_dirs(cand_dir)
    map_file = split_dir / "model_map.json"
    if map_file.is_file():
        model_map = json.loads(map_file.read_text())
    else:
        model_map = sandbox.make_model_map(model_dirs)
        atomic_write_json(map_file, model_map)
    source = {p.name: p for p in model_dirs}
    neutral_root = split_dir / "models"
    neutral = sandbox.materialise_models(model_map, source, neutral_root)
    sandbox.link_assets(cand_dir, neutral_root)
    rows = worker.score_models(job_id, command, neutral, split_dir / "out", env=env, work=work,
                               per_model=per_model, budget=budget, learned_args=learned_args)
    if worker.lease_lost():
        raise LeaseLost(f"job {job_id}: lease lost while scoring {cand_dir}; the worker that holds it finishes")
    real = dict(map(tuple, model_map))
    return pd.DataFrame([{"model_name": real[n], "probability": r["probability"], "status": r["status"]}
                         for n, r in rows.items() if n in real],
                        columns=["model_name", "probability", "status"])


def _register(worker: Worker, job_id: int, new_round: dict[str, Any], splits: dict[str, Path],
              lineages: dict[str, dict[str, Any]], answered: int) -> None:
    """Register the built round and finish the job in one transaction (only while this worker owns it)."""
    body = RoundIn(**new_round, **{split: path for split, path in splits.items()})
    per_split = {split: {k: lin.get(k) for k in ("candidates", "validated", "kept", "fooled", "harvest_yield",
                                                 "detector_on_candidates", "detector_on_round")}
                 for split, lin in lineages.items()}
    # n_models/n_ok as the other stages report them (the submission page's columns), then each split's record
    scores = {"n_models": sum(v["candidates"] or 0 for v in per_split.values()), "n_ok": answered,
              "splits": per_split}
    with worker.Session() as s:
        job = s.get(Job, job_id)
        if job.status != "running" or job.worker_id != worker.worker_id:
            return
        hv = s.scalar(select(Harvest).where(Harvest.job_id == job_id))
        rnd = create_round(s, body, commit=False, reserved_by=hv)
        hv.status, hv.round_id = "done", rnd.id
        job.status, job.scores, job.finished_at, job.lease_until = "done", scores, utcnow(), None
        job.runtime_s = (utcnow() - job.started_at).total_seconds() if job.started_at else None
        s.commit()
