"""``/api/rounds``: list and inspect rounds (public); register, open and close them (organiser only); download
the train split (teams and organisers; test and holdout never leave the server)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, HTTPException, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from trojanscope.leaderboard import services
from trojanscope.leaderboard.deps import AdminFlag, AdminOnly, BearerDep, SessionDep, SettingsDep, parse_body

router = APIRouter(prefix="/api/rounds", tags=["rounds"])


@router.get("")
def list_rounds(s: SessionDep) -> list[dict[str, Any]]:
    """Every round with its status and submission counts."""
    return [services.round_view(s, r) for r in s.query(services.Round).order_by(services.Round.id)]


@router.post("", status_code=201, dependencies=[AdminOnly])
def create_round(s: SessionDep, body: dict[str, Any] = Body(..., examples=[{
        "name": "r1", "title": "Round 1", "train": "/zoos/r1-train", "test": "/zoos/r1-test",
        "holdout": "/zoos/r1-holdout", "target_ce": 0.3465}])) -> dict[str, Any]:
    """Register a round (organiser). Zoo folders must exist on the server; ``status`` is ``open`` or ``pending``."""
    return services.round_view(s, services.create_round(s, parse_body(services.RoundIn, body, "round")))


@router.get("/{name}")
def get_round(name: str, s: SessionDep) -> dict[str, Any]:
    """One round's status, limits and submission counts."""
    return services.round_view(s, services.get_round(s, name))


@router.post("/{name}/open", dependencies=[AdminOnly])
def open_round(name: str, s: SessionDep) -> dict[str, Any]:
    """Open a pending round for submissions (organiser)."""
    return services.round_view(s, services.open_round(s, name))


@router.post("/{name}/close", dependencies=[AdminOnly])
def close_round(name: str, s: SessionDep, open_next: str | None = None) -> dict[str, Any]:
    """Close a round (organiser): the leaderboard freezes, each team's best submission is queued on the
    holdout split, and the round named by ``open_next`` (if pending) opens."""
    rnd, queued = services.close_round(s, name, open_next)
    return {**services.round_view(s, rnd), "holdout_jobs_queued": queued}


@router.post("/{name}/harvest-next", status_code=202, dependencies=[AdminOnly])
def harvest_next(name: str, s: SessionDep, body: dict[str, Any] = Body(..., examples=[{
        "name": "r2", "preset": "round5-cpu", "train": 40, "test": 40, "holdout": 20,
        "candidates": {"test": 120}, "status": "pending"}])) -> dict[str, Any]:
    """Build the next round from what this closed round's top submission gets wrong (organiser): a queued
    ``harvest`` job generates a candidate pool per split with ``preset``, scores it with the submission in the
    worker's sandbox and keeps the models that fool it; the round ``name`` is registered (``pending`` or
    ``open``) when every split is built, with lineage.json naming the submission. Sending a failed request
    again resumes it."""
    from trojanscope.leaderboard import harvests

    spec = parse_body(harvests.HarvestIn, body, "harvest")
    return harvests.harvest_view(harvests.request_harvest(s, name, spec))


@router.get("/{name}/harvest-next", dependencies=[AdminOnly])
def list_harvests(name: str, s: SessionDep) -> list[dict[str, Any]]:
    """The next rounds requested from this round by harvest, with their job's state (organiser)."""
    from trojanscope.leaderboard import harvests

    return harvests.list_harvests(s, name)


@router.get("/{name}/leaderboard")
def get_leaderboard(name: str, s: SessionDep, admin: AdminFlag) -> list[dict[str, Any]]:
    """Each team's best test submission, best first. Holdout CE appears once the round is closed (organisers:
    always)."""
    rnd = services.get_round(s, name)
    return services.leaderboard(s, rnd, include_holdout=rnd.status == "closed" or admin)


def _split_archive(s: Session, name: str, split: str, admin: bool, token: str | None):  # type: ignore[no-untyped-def]
    """Teams (their token) and organisers may download; only the train split is ever served."""
    from trojanscope.leaderboard.routes.submissions import authenticate

    if not admin:
        authenticate(s, token)
    rnd = services.get_round(s, name)
    if split in ("test", "holdout"):
        raise HTTPException(403, f"the {split} split never leaves the server; only the train split can be downloaded")
    if split != "train":
        raise HTTPException(404, f"no split {split!r}; the train split is at /api/rounds/{name}/splits/train")
    return services.train_archive(rnd)


@router.get("/{name}/splits/{split}/info")
def split_info(name: str, split: str, s: SessionDep, settings: SettingsDep, admin: AdminFlag,
               token: BearerDep) -> dict[str, Any]:
    """Size, file count, etag and sha256 of the train split's tar archive (team token; the sha256 is computed
    once per version of the split)."""
    archive = _split_archive(s, name, split, admin, token)
    return {"round": name, "split": split, "filename": f"{name}-{split}.tar", "size_bytes": archive.size,
            "n_files": archive.n_files, "etag": archive.etag,
            "sha256": archive.sha256(settings.data_dir / "downloads")}


@router.get("/{name}/splits/{split}", response_model=None)
@router.head("/{name}/splits/{split}", response_model=None, include_in_schema=False)
def download_split(name: str, split: str, request: Request, s: SessionDep, admin: AdminFlag,
                   token: BearerDep) -> Response:
    """The train split as a streamed tar archive (team token). ``Range: bytes=N-`` resumes a partial download;
    with ``If-Range: "<etag>"`` the rest is sent only if the split is unchanged, else the whole archive."""
    from trojanscope.leaderboard.download import parse_range

    archive = _split_archive(s, name, split, admin, token)
    headers = {"Accept-Ranges": "bytes", "ETag": f'"{archive.etag}"',
               "Content-Disposition": f'attachment; filename="{name}-{split}.tar"'}
    wanted = request.headers.get("range")
    if_range = request.headers.get("if-range")
    if if_range is not None and if_range.strip() != headers["ETag"]:
        wanted = None  # the split changed since the client's partial copy: send it whole
    try:
        span = parse_range(wanted, archive.size)
    except ValueError:
        return Response(status_code=416, headers={**headers, "Content-Range": f"bytes */{archive.size}"})
    status, (start, end) = (200, (0, archive.size - 1)) if span is None else (206, span)
    if span is not None:
        headers["Content-Range"] = f"bytes {start}-{end}/{archive.size}"
    headers["Content-Length"] = str(end - start + 1)
    body = archive.iter_bytes(start, end) if request.method == "GET" else iter(())
    return StreamingResponse(body, status_code=status, media_type="application/x-tar", headers=headers)
