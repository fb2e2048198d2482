"""``/api/rounds/{round}/submissions`` (team upload), ``/api/submissions/{id}`` and ``/api/jobs`` (organiser)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, HTTPException, UploadFile
from sqlalchemy.orm import Session

from trojanscope.leaderboard import archive, services
from trojanscope.leaderboard.db import Job, Submission, Team
from trojanscope.leaderboard.deps import AdminFlag, AdminOnly, BearerDep, SessionDep, SettingsDep
from trojanscope.leaderboard.settings import Settings

router = APIRouter(tags=["submissions"])


def authenticate(s: Session, token: str | None) -> Team:
    """The team owning ``token``: 401 when there is none, 403 when it matches no team."""
    if not token:
        raise HTTPException(401, "team token required: send Authorization: Bearer <token> or a 'token' form field",
                            headers={"WWW-Authenticate": "Bearer"})
    team = services.team_for_token(s, token)
    if team is None:
        raise HTTPException(403, "this token does not belong to any team")
    return team


def accept_upload(s: Session, settings: Settings, round_name: str, token: str | None, file: UploadFile) -> Submission:
    """Shared by the API and the web form: authenticate, copy the upload within the size limit, store it."""
    team = authenticate(s, token)
    rnd = services.get_round(s, round_name)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=settings.data_dir, prefix=".upload-") as tmp:
        path = Path(tmp) / "upload"
        size = 0
        with path.open("wb") as out:
            while chunk := file.file.read(1 << 20):
                size += len(chunk)
                if size > settings.max_upload_bytes:
                    raise archive.UploadError(f"upload is larger than {settings.max_upload_bytes} bytes; "
                                              "leave data and caches out of the archive")
                out.write(chunk)
        if size == 0:
            raise archive.UploadError("upload is empty; attach a .zip or .tar.gz of the detector folder")
        return services.create_submission(s, settings, rnd, team, path, file.filename or "upload")


@router.post("/api/rounds/{round_name}/submissions", status_code=201)
def create_submission(round_name: str, s: SessionDep, settings: SettingsDep, bearer: BearerDep,
                      file: Annotated[UploadFile, File(description=".zip or .tar.gz holding "
                                                       "trojanscope-submission.toml and the detector's files")],
                      token: Annotated[str | None, Form()] = None) -> dict[str, Any]:
    """Upload a submission (team token as a Bearer header or a ``token`` form field); it is queued for its smoke
    test, then scored on the test split."""
    sub = accept_upload(s, settings, round_name, bearer or token, file)
    return services.submission_view(sub, admin=False, owner=True)


@router.get("/api/submissions/{sub_id}")
def get_submission(sub_id: int, s: SessionDep, admin: AdminFlag, bearer: BearerDep) -> dict[str, Any]:
    """A submission with each stage's status and scores (holdout hidden until the round closes). With its team's
    token (or the organiser's) it also carries the messages and, per model, the reasons its detector failed;
    without, statuses and scores only."""
    sub = services.get_submission(s, sub_id)
    owner = not admin and services.viewer_owns(s, sub, bearer)
    view = services.submission_view(sub, admin=admin, owner=owner)
    if admin or owner:
        view["results"] = {job.stage: [{"model": r.neutral_name, "probability": r.probability, "status": r.status,
                                        "reason": r.reason, "seconds": r.seconds}
                                       for r in sorted(job.results, key=lambda r: r.neutral_name)]
                           for job in sub.jobs if job.stage in ("smoke", "test")
                           or (job.stage == "holdout" and (admin or sub.round.status == "closed"))}
    return view


@router.get("/api/jobs", dependencies=[AdminOnly])
def list_jobs(s: SessionDep, status: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """The job queue (organiser): newest first, optionally filtered by status."""
    q = s.query(Job).order_by(Job.id.desc())
    if status:
        q = q.filter(Job.status == status)
    return [{"id": j.id, "submission_id": j.submission_id, "stage": j.stage, "status": j.status,
             "worker_id": j.worker_id, "attempts": j.attempts, "lease_until": j.lease_until, "error": j.error}
            for j in q.limit(max(1, min(limit, 1000)))]

