"""What a leaderboard job does once its detector runs are over, and its configure step.

* :func:`run_configure`: one jailed run of the submission in TrojAI's configure mode on the labelled train
  split; what it writes (regular files only, within the size limit) is kept per submission;
* :func:`record_results`: the stage's per-model rows and scores into the database, and the next stage;
* :func:`explanation_tracks`: where the round enables them, the explanation tracks of a test or holdout stage
  (target class, source class, trigger), over every trojaned model of the split;
* :func:`write_stage_report`: the harness report of a stage, with no server path in it (and no detector
  output in the public smoke report).

Functions of a :class:`~trojanscope.leaderboard.worker.Worker` (its settings, session factory, lease and
jail), kept apart so the worker module holds the queue and the loop.
"""

from __future__ import annotations

import csv
import io
import math
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trojanscope.fsutil import atomic_dir
from trojanscope.leaderboard import sandbox
from trojanscope.leaderboard.db import Job, ModelResult, utcnow
from trojanscope.leaderboard.sandbox import LEARNED_DIR
from trojanscope.models.layout import read_ground_truth
from trojanscope.provenance import provenance

if TYPE_CHECKING:
    from trojanscope.leaderboard.worker import Worker

DEFAULT_P = 0.5


def _json_number(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _json_number(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_number(x) for x in v]
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def run_configure(worker: Worker, job_id: int, command: str, models: Path, n_models: int, work: Path,
              env: dict[str, str], job_dir: Path, store: Path) -> None:
    """The submission's configure step: one jailed run of its command in TrojAI's configure mode on the
    labelled neutral copies of the train split, under ``configure_time_limit_s``; what it writes into its
    learned-parameters folder is kept per submission and handed to its later stages."""
    limit = worker.settings.configure_time_limit_s
    learned, scratch = job_dir / LEARNED_DIR, job_dir / "scratch"
    for folder in (learned, scratch):  # an interrupted attempt starts over
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    argv = worker.jailed(command, job_id, limit, env=env)
    argv += ["--configure_mode", "--configure_models_dirpath", str(models),
             "--learned_parameters_dirpath", str(learned), "--scratch_dirpath", str(scratch)]
    log = job_dir / "configure.log"
    error = None
    t0 = time.monotonic()
    with log.open("wb") as fh:
        try:
            proc = subprocess.run(argv, cwd=work, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                  timeout=limit, check=False)
            if proc.returncode != 0:
                error = f"exited with status {proc.returncode}"
        except subprocess.TimeoutExpired:
            error = f"ran past its {limit:g} s limit"
        finally:
            sandbox.kill_tagged(worker.tag(job_id))
    seconds = time.monotonic() - t0
    if worker.lease_lost():
        return
    entries = list(learned.rglob("*"))
    files = [p for p in entries if p.is_file() and not p.is_symlink()]
    size = sum(p.lstat().st_size for p in files)
    odd = next((p for p in entries if p.is_symlink() or not (p.is_file() or p.is_dir())), None)
    if error is None and odd is not None:
        # copying a link would follow it as the worker: a way to carry a server file into the next stage
        error = (f"wrote {odd.relative_to(learned)}, which is a link or special file; learned parameters must "
                 "be regular files and folders")
    if error is None and size > worker.settings.max_extracted_bytes:
        error = f"wrote {size} bytes of learned parameters, over the {worker.settings.max_extracted_bytes} limit"
    if error is None:
        with atomic_dir(store) as tmp:
            shutil.copytree(learned, tmp, dirs_exist_ok=True)
    else:
        tail = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        error = f"configure step {error}" + (f" (last output: {tail[-1][:300]})" if tail else "")
    with worker.Session() as s:
        job = s.get(Job, job_id)
        if job.status != "running" or job.worker_id != worker.worker_id:
            return
        job.status = "failed" if error else "done"
        job.scores = {"n_models": n_models, "n_ok": 0 if error else n_models, "learned_files": len(files),
                      "learned_bytes": size}
        job.runtime_s, job.finished_at, job.lease_until, job.error = seconds, utcnow(), None, error or ""
        sub = job.submission
        if error:
            sub.status, sub.message = "configure_failed", error[:1000]
        else:
            sub.status = "queued"
            s.add(Job(submission_id=sub.id, stage="smoke", priority=0))
        s.commit()

def record_results(worker: Worker, job_id: int, model_map: list[list[str]], source: dict[str, Path],
               rows: dict[str, dict[str, Any]], job_dir: Path, zoo: Path, command: str) -> None:
    """Store a scoring stage's per-model rows (real names, p = 0.5 for models the budget did not reach) and
    scores, move the submission on (smoke -> test -> scored), and write the stage's report."""
    records = []
    for neutral, real in model_map:
        row = rows.get(neutral) or {"probability": DEFAULT_P, "status": "not_run",
                                    "reason": "the submission's time budget ran out before this model",
                                    "seconds": 0.0}
        records.append((neutral, real, row, read_ground_truth(source[real])))
    labelled = [(gt, r["probability"]) for _, _, r, gt in records if gt is not None]
    scores = worker.scoring.score_all([y for y, _ in labelled], [p for _, p in labelled]) if labelled else {}
    scores = _json_number(dict(scores))
    scores["n_models"] = len(records)
    scores["n_ok"] = sum(r["status"] == "ok" for _, _, r, _ in records)
    with worker.Session() as s:
        job = s.get(Job, job_id)
        tracks = job.stage in ("test", "holdout") and job.submission.round.explanations
    if tracks:
        try:
            truth = {real: gt for _, real, _, gt in records}
            scores["explanations"] = _json_number(explanation_tracks(job_dir, model_map, source, truth))
        except Exception as exc:  # noqa: BLE001 - the tracks must never lose a scored stage's cross-entropy
            scores["explanations"] = {"error": f"the explanation tracks could not be scored ({type(exc).__name__})"}
    runtime = float(sum(r["seconds"] for _, _, r, _ in records))
    with worker.Session() as s:
        job = s.get(Job, job_id)
        if job.status != "running" or job.worker_id != worker.worker_id:
            return  # lease lost: the owner records the results, not us
        s.query(ModelResult).filter(ModelResult.job_id == job_id).delete()
        for neutral, real, row, gt in records:
            s.add(ModelResult(job_id=job_id, model_name=real, neutral_name=neutral, probability=row["probability"],
                              status=row["status"], reason=row["reason"][:500], seconds=row["seconds"],
                              ground_truth=None if gt is None else bool(gt)))
        job.status, job.scores, job.runtime_s, job.finished_at = "done", scores, runtime, utcnow()
        job.lease_until = None
        sub = job.submission
        if job.stage == "smoke":
            if scores["n_ok"] == 0:
                first = next((r["reason"] for _, _, r, _ in records if r["reason"]), "no result")
                sub.status = "smoke_failed"  # the reason is the detector's own output: team and organiser only
                sub.message = f"smoke test: no model produced a valid answer (first reason: {first[:200]})"
            else:
                sub.status = "scoring"
                s.add(Job(submission_id=sub.id, stage="test", priority=1))
        elif job.stage == "test":
            sub.status = "scored"
        stage = job.stage
        label = f"round {sub.round.name}, {'train' if stage in ('smoke', 'configure') else stage} split"
        s.commit()
    if stage == "smoke":  # the smoke report is public: no detector output in it
        records = [(n, real, {**row, "reason": ""}, gt) for n, real, row, gt in records]
    write_stage_report(worker.scoring, job_dir, records, scores, zoo, command, label=label)

TRACK_TEXT_MAX = 1000  # characters: a trigger the server inserts into held-out texts is a word or a phrase
TRACK_PATCH_MAX = 1 << 20  # characters of a patch's base64 PNG


def explanation_tracks(job_dir: Path, model_map: list[list[str]], source: dict[str, Path],
                       truth: dict[str, int | None]) -> dict[str, Any]:
    """The explanation tracks of one scored stage, as the Trojan Detection Challenge scored them, over *every*
    trojaned model of the split: a model the submission wrote no explanation for counts as missed, so the
    figures say nothing about which models were explained (``trojanscope.scoring.explanations`` scores the
    explanations themselves):

    * ``target_accuracy``: share of the trojaned models whose explanation names a planted trigger's target;
    * ``source_accuracy``: the same for the source class, over trojaned models whose trigger has one;
    * ``trigger_recovery``: share whose first trigger candidate sends at least 90% of held-out clean inputs of its
      source class (other models' clean examples in the split) to its target.

    ``truth`` is each real model's ground truth (the stage's records already read it).

    The explanations the harness kept (``out/explanations/<neutral name>.json``, checked as they were copied)
    are read again here and renamed to the real models; a candidate whose text or patch is over the limits is
    dropped (the server runs it through the model outside the jail). Per-model rows go to the job's private
    ``explanations-real/explanations.csv``, never to a report."""
    import json

    import pandas as pd

    from trojanscope.detectors.explain import read_explanation
    from trojanscope.fsutil import atomic_write_text
    from trojanscope.scoring.explanations import SUCCESS, explanation_rows, planted

    kept, run = job_dir / "out" / "explanations", job_dir / "explanations-real"
    shutil.rmtree(run, ignore_errors=True)
    (run / "explanations").mkdir(parents=True)
    for neutral, real in model_map:
        data = read_explanation(kept / f"{neutral}.json")
        if data is None:
            continue
        data["candidates"] = [c for c in data["candidates"] if len(c.get("text") or "") <= TRACK_TEXT_MAX
                              and len(str(c.get("patch") or "")) <= TRACK_PATCH_MAX]
        atomic_write_text(run / "explanations" / f"{real}.json", json.dumps(data))
    dirs = [source[real] for _, real in model_map]
    frame = explanation_rows(run, dirs)
    atomic_write_text(run / "explanations.csv", frame.to_csv(index=False))
    trojaned = [source[real] for _, real in model_map if truth.get(real) == 1]
    out: dict[str, Any] = {"n_explained": len(frame), "trigger_success": SUCCESS}
    if not trojaned:
        return out
    hits = (frame[frame["poisoned"] == 1] if len(frame) else
            pd.DataFrame(columns=["target_correct", "source_correct", "held_out_attack_success"]))
    with_source = [d for d in trojaned if any(t.get("source_class") is not None for t in planted(d))]
    out["target_accuracy"] = int(hits["target_correct"].eq(True).sum()) / len(trojaned)
    out["source_accuracy"] = int(hits["source_correct"].eq(True).sum()) / len(with_source) if with_source else None
    out["trigger_recovery"] = int((hits["held_out_attack_success"].astype(float) >= SUCCESS).sum()) / len(trojaned)
    return out


def write_stage_report(scoring: Any, job_dir: Path, records: list, scores: dict[str, Any], zoo: Path, command: str,
                   *, label: str = "zoo") -> None:
    """The harness report over de-neutralised results; best effort. The zoo's path on this server is
    replaced by ``label`` (a report page must not show server paths)."""
    if scoring.write_report is None:
        return
    from trojanscope.fsutil import atomic_write_json, atomic_write_text

    report = job_dir / "report"
    report.mkdir(exist_ok=True)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["model_name", "probability", "status", "reason", "seconds"])
    for _, real, row, _ in records:
        writer.writerow([real, repr(row["probability"]), row["status"], row["reason"], f"{row['seconds']:.4f}"])
    atomic_write_text(report / "results.csv", buf.getvalue())
    atomic_write_json(report / "scores.json", scores)
    atomic_write_json(report / "run.json", {"zoo": str(zoo), "models": [real for _, real, _, _ in records],
                                            "n_models": len(records), "seed": 0,
                                            # argv words, as `trojanscope evaluate` records them
                                            "command": shlex.split(command), **provenance()})
    try:
        scoring.write_report(report, zoo)
    except Exception as exc:  # noqa: BLE001 - a report failure must never lose a scored job
        atomic_write_text(report / "report-error.txt", f"{type(exc).__name__}: {exc}\n")
        return
    for page in [*report.glob("report*.html"), *report.glob("report*.md"), report / "run.json"]:
        if page.is_file():
            text = page.read_text(encoding="utf-8")
            for path in {str(zoo), str(zoo.resolve())}:
                text = text.replace(path, label)
            atomic_write_text(page, text)
