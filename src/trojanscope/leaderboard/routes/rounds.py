"""``/api/rounds``: list and inspect rounds (public); register, open and close them (organiser only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, HTTPException
from pydantic import ValidationError

from trojanscope.leaderboard import services
from trojanscope.leaderboard.deps import AdminFlag, AdminOnly, SessionDep

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
    try:
        spec = services.RoundIn(**body)
    except ValidationError as exc:
        raise HTTPException(422, services.one_line_validation(exc, "round")) from None
    except TypeError:
        raise HTTPException(422, "round: body must be a JSON object") from None
    return services.round_view(s, services.create_round(s, spec))


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


@router.get("/{name}/leaderboard")
def get_leaderboard(name: str, s: SessionDep, admin: AdminFlag) -> list[dict[str, Any]]:
    """Each team's best test submission, best first. Holdout CE appears once the round is closed (organisers:
    always)."""
    rnd = services.get_round(s, name)
    return services.leaderboard(s, rnd, include_holdout=rnd.status == "closed" or admin)
