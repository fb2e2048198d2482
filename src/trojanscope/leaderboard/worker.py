"""Workers: claim jobs from the database queue and run them through the scoring harness.

A job is one stage of one submission (``configure`` on the train split when the submission asks for
it, ``smoke`` on the first N train models, ``test`` on the sequestered split, ``holdout`` after a round
closes, ``harvest`` when an organiser builds the next round against the submission: the same jailed
per-model loop over candidate pools, see :mod:`trojanscope.leaderboard.harvests`). Claiming is atomic
(``UPDATE ... WHERE status='queued' AND id=?`` with a rowcount check; ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL), a heartbeat thread extends the job's lease, and a job whose lease expired (worker killed)
is put back in the queue. A re-run resumes from the harness's ``results.csv``, so no model is scored
twice; the final per-model rows are stored under a unique (job, model) key. What a stage does once its
detector runs are over (and the configure step) is in :mod:`trojanscope.leaderboard.stages`.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import math
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker

from trojanscope.errors import TrojanscopeError
from trojanscope.leaderboard import sandbox, stages
from trojanscope.leaderboard.db import Harvest, Job, make_sessionmaker, utcnow
from trojanscope.leaderboard.sandbox import LEARNED_DIR, read_results
from trojanscope.leaderboard.settings import Settings
from trojanscope.models.layout import list_model_dirs


class RoundClosedError(TrojanscopeError):
    """A smoke or test job whose round closed while it waited: not run (the leaderboard is frozen)."""


class ConfiguredParametersMissing(TrojanscopeError):  # noqa: N818 - reads as the reason shown to the team
    """A configured submission's kept learned parameters vanished (the data folder was pruned or moved)."""


class WorkerStopped(BaseException):  # noqa: N818 - BaseException so harness code cannot swallow it
    """Raised in the worker's main thread on SIGINT/SIGTERM: the job goes back to the queue."""


@dataclass
class Scoring:
    """The harness functions a worker calls; tests inject fakes, production uses :func:`harness_scoring`."""

    evaluate: Callable[..., Any]
    score_all: Callable[[Any, Any], dict[str, Any]]
    write_report: Callable[..., Any] | None = None


def harness_scoring() -> Scoring:
    """The real scoring harness (``trojanscope.scoring``)."""
    from trojanscope.scoring.harness import evaluate
    from trojanscope.scoring.metrics import score_all

    try:
        from trojanscope.scoring.report import write_report
    except ImportError:  # the report module is optional for scoring
        write_report = None
    return Scoring(evaluate=evaluate, score_all=score_all, write_report=write_report)


class Worker:
    """One worker: ``run_forever()`` in a process of its own, or ``run_until_idle()`` in tests."""

    def __init__(self, settings: Settings, scoring: Scoring | None = None, *, worker_id: str | None = None,
                 session_factory: sessionmaker | None = None) -> None:
        self.settings = settings
        self._scoring = scoring
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"
        self.Session = session_factory or make_sessionmaker(settings.db_url)
        self.stop = threading.Event()
        self._lost = threading.Event()

    @property
    def scoring(self) -> Scoring:
        if self._scoring is None:
            self._scoring = harness_scoring()
        return self._scoring

    # queue ------------------------------------------------------------------------------------
    def requeue_stale(self, session: Session) -> int:
        """Put jobs whose lease expired back in the queue (or fail them after ``max_attempts``)."""
        now = utcnow()
        stale = session.scalars(select(Job).where(Job.status == "running", Job.lease_until < now)).all()
        for job in stale:
            if job.attempts >= self.settings.max_attempts:
                job.status, job.finished_at = "failed", now
                job.error = f"worker lost {job.attempts} times while running this job; giving up"
                if job.stage == "harvest":
                    self._mark_failed(session, job)
                else:
                    job.submission.status, job.submission.message = "failed", job.error
            else:
                job.status, job.worker_id, job.lease_until = "queued", None, None
        session.commit()
        return len(stale)

    def claim(self) -> int | None:
        """Atomically take the next queued job; returns its id or ``None`` when the queue is empty."""
        with self.Session() as s:
            self.requeue_stale(s)
            now = utcnow()
            lease = now + dt.timedelta(seconds=self.settings.lease_s)
            query = select(Job.id).where(Job.status == "queued").order_by(Job.priority, Job.id).limit(8)
            if s.get_bind().dialect.name == "postgresql":
                query = query.with_for_update(skip_locked=True)
            for job_id in s.scalars(query).all():
                res = s.execute(update(Job).where(Job.id == job_id, Job.status == "queued").values(
                    status="running", worker_id=self.worker_id, lease_until=lease, attempts=Job.attempts + 1,
                    started_at=func.coalesce(Job.started_at, now)))
                if res.rowcount == 1:
                    job = s.get(Job, job_id)
                    if job.stage in ("configure", "smoke"):
                        job.submission.status = job.stage
                    s.commit()
                    return job_id
            s.commit()
        return None

    def _heartbeat(self, job_id: int, done: threading.Event) -> None:
        while not done.wait(self.settings.heartbeat_s):
            with self.Session() as s:
                res = s.execute(update(Job).where(Job.id == job_id, Job.worker_id == self.worker_id,
                                                  Job.status == "running").values(
                    lease_until=utcnow() + dt.timedelta(seconds=self.settings.lease_s)))
                s.commit()
            if res.rowcount != 1:
                self._lost.set()
                return

    def release(self, job_id: int) -> None:
        """Give a job back to the queue after a clean stop (not counted as an attempt)."""
        with self.Session() as s:
            s.execute(update(Job).where(Job.id == job_id, Job.worker_id == self.worker_id,
                                        Job.status == "running").values(
                status="queued", worker_id=None, lease_until=None, attempts=Job.attempts - 1))
            s.commit()

    # loop ---------------------------------------------------------------------------------------
    def run_until_idle(self, max_jobs: int = 1000) -> int:
        """Run jobs until none is queued; returns how many ran (for tests and one-shot use)."""
        n = 0
        while n < max_jobs and (job_id := self.claim()) is not None:
            self.run_job(job_id)
            n += 1
        return n

    def run_forever(self) -> None:
        """Poll the queue until SIGINT/SIGTERM; an interrupted job returns to the queue."""
        def _stop(_sig: int, _frame: Any) -> None:
            if self.stop.is_set():  # Ctrl-C and serve's SIGTERM both arrive: stop once
                return
            self.stop.set()
            raise WorkerStopped

        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)
        job_id = None
        try:
            while not self.stop.is_set():
                job_id = self.claim()
                if job_id is None:
                    self.stop.wait(self.settings.poll_s)
                    continue
                self.run_job(job_id)
                job_id = None
        except WorkerStopped:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the hand-back short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if job_id is not None:
                sandbox.kill_tagged(self.tag(job_id))
                self.release(job_id)
                self.log(job_id, "stopped; handed back to the queue")

    def log(self, job_id: int, what: str) -> None:
        """One line per job event on the operator's terminal (stderr), beside the web server's access lines."""
        with self.Session() as s:
            job = s.get(Job, job_id)
            who = (f"submission {job.submission_id} ({job.submission.team.name}, {job.stage})"
                   if job is not None and job.submission is not None else "?")
        stamp = utcnow().strftime("%H:%M:%S")
        print(f"{stamp} worker {os.getpid()}: job {job_id}, {who}: {what}", file=sys.stderr, flush=True)

    def tag(self, job_id: int) -> str:
        # Stable across restarts (a resumed job must find its predecessor's leftovers) and per install.
        install = hashlib.sha256(str(self.settings.data_dir.resolve()).encode()).hexdigest()[:10]
        return f"job{job_id}-{install}"

    # one job ------------------------------------------------------------------------------------
    def run_job(self, job_id: int) -> None:
        """Run (or resume) one claimed job to completion and record its results."""
        self._lost.clear()
        done = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(job_id, done), daemon=True)
        beat.start()
        job_dir = self.settings.data_dir / "jobs" / str(job_id)
        t0 = time.monotonic()
        self.log(job_id, "started")
        try:
            # The harness's per-model copies go under the job's folder, never the system temp folder.
            with sandbox.private_tmp(job_dir / "tmp"):
                self._run_job(job_id)
        except TrojanscopeError as exc:
            self._fail(job_id, str(exc))
        finally:
            done.set()
            beat.join()
        with self.Session() as s:
            job = s.get(Job, job_id)
            if job is not None and job.status in ("done", "failed"):
                sc = job.scores or {}
                ce = f", CE {sc['cross_entropy']:.4f}" if isinstance(sc.get("cross_entropy"), float) else ""
                ok = f", {sc.get('n_ok')}/{sc.get('n_models')} valid answers" if "n_models" in sc else ""
                self.log(job_id, f"{job.status} in {time.monotonic() - t0:.1f} s{ok}{ce}"
                         + (f": {job.error[:200]}" if job.status == "failed" and job.error else ""))
            # configure's labelled copies are of the train split, which teams download anyway; they stay for
            # the organiser to refit from
            ended = job is not None and job.status in ("done", "failed") and job.stage != "configure"
        if ended:  # no copy of a scored model (test, holdout) stays on disk after its job
            shutil.rmtree(job_dir / "models", ignore_errors=True)

    def _run_job(self, job_id: int) -> None:
        with self.Session() as s:
            if s.get(Job, job_id).stage == "harvest":  # builds the next round; see leaderboard.harvests
                from trojanscope.leaderboard.harvests import run_harvest_job

                run_harvest_job(self, job_id)
                return
        with self.Session() as s:
            job = s.get(Job, job_id)
            sub, rnd = job.submission, job.submission.round
            if rnd.status == "closed" and job.stage != "holdout":
                raise RoundClosedError(f"round {rnd.name!r} closed before this submission's {job.stage} stage ran")
            zoo = Path({"configure": rnd.train_dir, "smoke": rnd.train_dir, "test": rnd.test_dir,
                        "holdout": rnd.holdout_dir or ""}[job.stage])
            model_dirs = list_model_dirs(zoo)
            if job.stage == "smoke":
                model_dirs = model_dirs[: rnd.smoke_models]
            if job.model_map is None:
                job.model_map = sandbox.make_model_map(model_dirs)
                s.commit()
            model_map = [list(x) for x in job.model_map]
            command, stage = sub.command, job.stage
            per_model = rnd.model_time_limit_s
            budget = rnd.smoke_time_limit_s if stage == "smoke" else rnd.submission_time_limit_s
            files = self.submission_files(sub.id)
            configured = any(j.stage == "configure" and j.status == "done" for j in sub.jobs)
        learned_store = files.parent / LEARNED_DIR
        source = {p.name: p for p in model_dirs}
        job_dir = self.settings.data_dir / "jobs" / str(job_id)
        job_dir.mkdir(parents=True, exist_ok=True)
        tag = self.tag(job_id)
        with (job_dir / "lock").open("w") as lock:
            # A second worker on this machine that somehow got the same job waits here instead of
            # appending to the same results.csv; the kernel drops the lock if this process dies.
            fcntl.flock(lock, fcntl.LOCK_EX)
            sandbox.kill_tagged(tag)  # leftovers of an interrupted attempt
            neutral_root = job_dir / "models"
            neutral = sandbox.materialise_models(model_map, source, neutral_root)
            if stage == "configure":
                sandbox.add_ground_truth(model_map, source, neutral_root)
            sandbox.link_assets(zoo, neutral_root)
            work = sandbox.copy_submission(files, job_dir / "work")
            env = sandbox.sandbox_env(work, tag)
            if stage == "configure":
                stages.run_configure(self, job_id, command, neutral_root, len(neutral), work, env, job_dir,
                                     learned_store)
                return
            learned_args = self.learned_args(configured, learned_store, job_dir)
            rows = self.score_models(job_id, command, neutral, job_dir / "out", env=env, work=work,
                                     per_model=per_model, budget=budget, learned_args=learned_args)
            if self._lost.is_set():
                return  # another worker owns the job now; it will finish it
            stages.record_results(self, job_id, model_map, source, rows, job_dir, zoo, command)

    def lease_lost(self) -> bool:
        """Whether another worker took the running job over (this one's lease expired)."""
        return self._lost.is_set()

    def submission_files(self, sub_id: int) -> Path:
        """The unpacked files of a submission (its learned parameters, if configured, sit beside them)."""
        return self.settings.data_dir / "submissions" / str(sub_id) / "files"

    @staticmethod
    def learned_args(configured: bool, store: Path, job_dir: Path) -> list[str]:
        """The detector's ``--learned_parameters_dirpath`` for a configured submission: a copy per job, so
        no run can alter what the next one reads."""
        if not configured:
            return []
        if not store.is_dir():
            raise ConfiguredParametersMissing(
                f"{store}: this submission's configure step finished but its learned parameters "
                "are gone from the data folder; re-upload the submission to configure it again")
        learned = sandbox.copy_submission(store, job_dir / LEARNED_DIR)
        return ["--learned_parameters_dirpath", str(learned)]

    def score_models(self, job_id: int, command: str, neutral: list[Path], out: Path, *, env: dict[str, str],
                     work: Path, per_model: float, budget: float, learned_args: list[str]) -> dict[str, dict]:
        """Run the submission's command in the jail on each neutral model copy, one harness call per model,
        until ``budget`` seconds are spent; resumes from ``out/results.csv`` (a model is never run twice).
        Returns the rows of results.csv by neutral name; stops early when the job's lease is lost."""
        tag = self.tag(job_id)
        results_csv = out / "results.csv"
        for model in neutral:
            if self._lost.is_set():
                break
            rows = read_results(results_csv)
            if model.name in rows:
                continue
            remaining = budget - sum(r["seconds"] for r in rows.values())
            if remaining <= 0:
                break
            limit = min(per_model, remaining)
            argv = self.jailed(command, job_id, per_model, env=env) + learned_args
            try:
                self.scoring.evaluate(model.parent, out, command=argv, models=[model], time_limit_s=limit,
                                      env=env, cwd=work, seed=job_id, progress=False, workers=1)
            finally:
                sandbox.kill_tagged(tag)
        return read_results(results_csv)

    def jailed(self, command: str, job_id: int, seconds: float, *, env: dict[str, str]) -> list[str]:
        """The jail launcher's argv for one detector run of ``job_id`` (engine and limits from the settings)."""
        st = self.settings
        return sandbox.jailed_command(
            command, env, cpu_seconds=math.ceil(seconds * (os.cpu_count() or 1)) + 5,
            memory_bytes=st.memory_bytes, max_processes=st.max_processes, file_size_bytes=st.file_size_bytes,
            engine=st.isolation, tmp_bytes=st.sandbox_tmp_bytes,
            uid=sandbox.sandbox_uid(st.sandbox_uid_base, job_id) if os.geteuid() == 0 else None)

    def _fail(self, job_id: int, message: str) -> None:
        with self.Session() as s:
            job = s.get(Job, job_id)
            if job.worker_id != self.worker_id:
                return
            job.status, job.error, job.finished_at, job.lease_until = "failed", message[:1000], utcnow(), None
            self._mark_failed(s, job)
            s.commit()

    @staticmethod
    def _mark_failed(s: Session, job: Job) -> None:
        """What a failed job fails besides itself: its submission, or (harvest) the next-round request, which
        leaves the submission's scores alone. A holdout failure shows on the job only."""
        if job.stage == "harvest":
            for hv in s.scalars(select(Harvest).where(Harvest.job_id == job.id)):
                hv.status = "failed"
        elif job.stage != "holdout":
            job.submission.status, job.submission.message = "failed", job.error[:1000]


def main(argv: list[str] | None = None) -> None:
    """``python -m trojanscope.leaderboard.worker [--scoring module:attr]``: one worker, settings from the env."""
    import argparse
    import importlib

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--scoring", default=None, help="module:attr of a Scoring object (tests only)")
    args = parser.parse_args(argv)
    scoring = None
    if args.scoring:
        module, attr = args.scoring.split(":")
        scoring = getattr(importlib.import_module(module), attr)
    Worker(Settings.from_env(), scoring).run_forever()


if __name__ == "__main__":
    main()
