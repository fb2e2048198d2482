"""``/api/teams``: organisers create teams (the token is shown once); anyone can read a team's submissions."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body

from trojanscope.leaderboard import services
from trojanscope.leaderboard.deps import AdminFlag, AdminOnly, SessionDep, parse_body

router = APIRouter(prefix="/api/teams", tags=["teams"])


@router.post("", status_code=201, dependencies=[AdminOnly])
def create_team(s: SessionDep, body: dict[str, Any] = Body(..., examples=[{"name": "team-a"}])) -> dict[str, Any]:
    """Create a team (organiser). The response holds the team's token; it is stored hashed and never shown again."""
    team, token = services.create_team(s, parse_body(services.TeamIn, body, "team").name)
    return {"id": team.id, "name": team.name, "token": token}


@router.get("/{name}")
def get_team(name: str, s: SessionDep, admin: AdminFlag) -> dict[str, Any]:
    """A team and its submissions (newest first)."""
    team = services.get_team(s, name)
    subs = s.query(services.Submission).filter_by(team_id=team.id).order_by(services.Submission.id.desc()).all()
    return {"name": team.name, "created_at": team.created_at,
            "submissions": [services.submission_view(sub, admin=admin) for sub in subs]}
