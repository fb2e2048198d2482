"""Server-rendered pages: rounds, leaderboard + upload form, submission detail, team page."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, HTTPException, Request, UploadFile
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sqlalchemy.orm import joinedload
from starlette.concurrency import run_in_threadpool

from trojanscope.errors import TrojanscopeError
from trojanscope.leaderboard import sandbox, security, services
from trojanscope.leaderboard.db import Round, Submission
from trojanscope.leaderboard.deps import AdminFlag, SessionDep, SettingsDep
from trojanscope.leaderboard.routes.submissions import accept_upload
from trojanscope.leaderboard.services import status_for

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=str(Path(__file__).resolve().parents[1] / "templates"))


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else "–"


templates.env.filters["fmt"] = _fmt
templates.env.filters["when"] = _when


def _render(request: Request, name: str, status_code: int = 200, **ctx: Any) -> HTMLResponse:
    ctx.setdefault("isolation", request.app.state.settings.isolation)  # every page says how submissions run
    ctx.setdefault("organiser", security.cookie_matches(request.cookies.get(security.ORGANISER_COOKIE),
                                                        request.app.state.settings.admin_secret()))
    return templates.TemplateResponse(request, name, ctx, status_code=status_code)


_NOT_PAGES = ("/api/", "/docs", "/redoc", "/openapi.json", "/static-offline-docs")


def wants_page(request: Request) -> bool:
    """A browser asking for a page (HTML accepted, not an API path): its errors are answered as a page."""
    return (not request.url.path.startswith(_NOT_PAGES)
            and "text/html" in request.headers.get("accept", ""))


def error_page(request: Request, status_code: int, message: str) -> HTMLResponse:
    return _render(request, "error.html", status_code=status_code, status=status_code, message=message)


@router.get("/organiser", response_class=HTMLResponse)
def organiser_page(request: Request) -> HTMLResponse:
    """Sign in as the organiser in this browser, to read test and holdout reports and reasons on the pages."""
    return _render(request, "organiser.html", error=None)


@router.post("/organiser", response_model=None)
def organiser_sign_in(request: Request, settings: SettingsDep,
                      token: Annotated[str, Form()] = "") -> Response:
    """Check the organiser token once; the browser keeps a digest of it (HttpOnly, SameSite=Strict) that lets it
    read what organisers read. Actions (rounds, teams, closing) still need the token as a bearer header."""
    if settings.admin_secret() is None:
        return _render(request, "organiser.html", status_code=403,
                       error="organiser actions are disabled on this server: it was started without "
                             "TROJANSCOPE_ADMIN_TOKEN")
    if not security.admin_matches(token.strip(), settings.admin_secret()):
        return _render(request, "organiser.html", status_code=403, error="this token is not the organiser token")
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(security.ORGANISER_COOKIE, security.organiser_cookie(settings.admin_secret() or ""),
                        httponly=True, samesite="strict", secure=request.url.scheme == "https", max_age=12 * 3600)
    return response


@router.post("/organiser/sign-out")
def organiser_sign_out() -> RedirectResponse:
    response = RedirectResponse("/", status_code=303)
    response.delete_cookie(security.ORGANISER_COOKIE)
    return response


@router.get("/", response_class=HTMLResponse)
def index(request: Request, s: SessionDep) -> HTMLResponse:
    rounds = [services.round_view(s, r) for r in s.query(Round).order_by(Round.id.desc())]
    return _render(request, "index.html", rounds=rounds)


FRESH_S = 0.5  # a cached round page younger than this is served without touching the database


def _round_page(request: Request, s: Any, name: str, admin: bool, status_code: int = 200,
                error: str | None = None) -> HTMLResponse:
    rnd = services.get_round(s, name)
    # The round page is the one everybody reloads: render it again only when its content changed
    # (a fingerprint of two small queries), and skip even those for FRESH_S after a check.
    cache: dict = request.app.state.round_page_cache
    fingerprint = services.round_fingerprint(s, rnd)
    hit = cache.get((name, admin)) if error is None else None
    if hit is not None and hit[1] == fingerprint:
        cache[(name, admin)] = (time.monotonic(), fingerprint, hit[2])
        return HTMLResponse(hit[2], status_code=status_code)
    rows = services.leaderboard(s, rnd, include_holdout=rnd.status == "closed" or admin)
    recent = (s.query(Submission).options(joinedload(Submission.team)).filter_by(round_id=rnd.id)
              .order_by(Submission.id.desc()).limit(20).all())
    page = _render(request, "round.html", status_code, round=services.round_view(s, rnd), rows=rows,
                   recent=recent, error=error, show_holdout=rnd.status == "closed" or admin)
    if error is None:
        cache[(name, admin)] = (time.monotonic(), fingerprint, page.body)
    return page


def _round_page_fresh(request: Request, name: str, admin: bool) -> HTMLResponse:
    with request.app.state.sessionmaker() as s:
        return _round_page(request, s, name, admin)


@router.get("/rounds/{name}", response_class=HTMLResponse)
async def round_page(name: str, request: Request, admin: AdminFlag) -> HTMLResponse:
    hit = request.app.state.round_page_cache.get((name, admin))
    if hit is not None and time.monotonic() - hit[0] < FRESH_S:
        return HTMLResponse(hit[2])
    return await run_in_threadpool(_round_page_fresh, request, name, admin)


@router.get("/rounds/{name}/lineage", response_class=HTMLResponse)
def lineage_page(name: str, request: Request, s: SessionDep, admin: AdminFlag) -> HTMLResponse:
    """The chain of rounds this round was built from (``trojanscope zoo harvest``), newest first."""
    rnd = services.get_round(s, name)
    try:
        rows, error = services.lineage_view(s, rnd), None
    except TrojanscopeError as exc:  # a broken chain (missing parent round, bad lineage.json): say so on the page,
        # with the server's folder names for organisers only (they can name sequestered splits)
        rows, error = [], str(exc) if admin else "the round's lineage cannot be read; the organisers can see why"
    return _render(request, "lineage.html", round=rnd, rows=rows, error=error)


@router.post("/rounds/{name}/submissions")
def submit_form(name: str, request: Request, s: SessionDep, settings: SettingsDep, admin: AdminFlag,
                file: Annotated[UploadFile, File()], token: Annotated[str, Form()] = "") -> Response:
    """The upload form: on success go to the submission's page, otherwise show the round page with the error."""
    try:
        sub = accept_upload(s, settings, name, token.strip() or None, file)
    except HTTPException as exc:
        return _round_page(request, s, name, admin, exc.status_code, str(exc.detail))
    except TrojanscopeError as exc:
        s.rollback()
        return _round_page(request, s, name, admin, status_for(exc), str(exc))
    return RedirectResponse(f"/submissions/{sub.id}", status_code=303)


@router.get("/submissions/{sub_id}", response_class=HTMLResponse)
def submission_page(sub_id: int, request: Request, s: SessionDep, settings: SettingsDep,
                    admin: AdminFlag) -> HTMLResponse:
    sub = services.get_submission(s, sub_id)
    view = services.submission_view(sub, admin=admin)
    results = {}
    reports = {job.stage for job in sub.jobs if (job.stage == "smoke" or admin)
               and (settings.data_dir / "jobs" / str(job.id) / "report" / "report.html").is_file()}
    for job in sub.jobs:
        if job.stage not in ("configure", "harvest") and (job.stage != "holdout" or sub.round.status == "closed"
                                                          or admin):
            # Neutral names only: which real model a row is stays secret (test labels would leak).
            results[job.stage] = sorted(job.results, key=lambda r: r.neutral_name)
    progress = {job.stage: _progress(settings, job) for job in sub.jobs if job.status == "running"}
    final = sub.status in ("scored", "smoke_failed", "failed", "configure_failed") and not progress
    # Per-model reasons are the detector's own output: organisers only on the page (teams read theirs
    # through GET /api/submissions/{id} with their token).
    return _render(request, "submission.html", sub=view, results=results, reports=reports, reasons=admin,
                   progress=progress, refresh_s=None if final else 5)


def _progress(settings: Any, job: Any) -> str:
    """``"3 of 10 models"`` for a running stage: the harness's results.csv rows against the job's model map."""
    total = len(job.model_map or [])
    done = len(sandbox.read_results(settings.data_dir / "jobs" / str(job.id) / "out" / "results.csv"))
    return f"{min(done, total)} of {total} models" if total else "starting"


@router.get("/submissions/{sub_id}/report/{stage}")
def submission_report(sub_id: int, stage: str, s: SessionDep, settings: SettingsDep, admin: AdminFlag) -> Response:
    """The harness report of one stage: public for the smoke test (train split), organisers only otherwise."""
    return _report_file(sub_id, stage, "report.html", s, settings, admin)


@router.get("/submissions/{sub_id}/report/{stage}/{name}")
def submission_report_file(sub_id: int, stage: str, name: str, s: SessionDep, settings: SettingsDep,
                           admin: AdminFlag) -> Response:
    """``report.html`` or one of the SVG figures beside it, so the report's relative figure links resolve."""
    if name != "report.html" and not _REPORT_SVG.fullmatch(name):
        raise HTTPException(404, f"no {name!r} in a harness report")
    return _report_file(sub_id, stage, name, s, settings, admin)


_REPORT_SVG = re.compile(r"report-[A-Za-z0-9_-]+\.svg")


def _report_file(sub_id: int, stage: str, name: str, s: Any, settings: Any, admin: bool) -> Response:
    sub = services.get_submission(s, sub_id)
    job = next((j for j in sub.jobs if j.stage == stage), None)
    if job is None:
        raise HTTPException(404, f"submission {sub_id} has no {stage!r} stage")
    if stage != "smoke" and not admin:
        raise HTTPException(403, "test and holdout reports name the sequestered models: organiser token required")
    path = settings.data_dir / "jobs" / str(job.id) / "report" / name
    if not path.is_file():
        raise HTTPException(404, f"no {name} for submission {sub_id} {stage} yet")
    return FileResponse(path, media_type="text/html" if name.endswith(".html") else "image/svg+xml")


@router.get("/teams/{name}", response_class=HTMLResponse)
def team_page(name: str, request: Request, s: SessionDep, admin: AdminFlag) -> HTMLResponse:
    team = services.get_team(s, name)
    subs = s.query(Submission).filter_by(team_id=team.id).order_by(Submission.id.desc()).all()
    return _render(request, "team.html", team=team, subs=[services.submission_view(x, admin=admin) for x in subs])
