"""FastAPI dependencies: the settings, a database session per request, and who is asking.

The cheap ones are ``async`` so FastAPI runs them on the event loop instead of the thread pool.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Header, HTTPException, Request
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from trojanscope.leaderboard import security
from trojanscope.leaderboard.settings import Settings


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.sessionmaker() as session:
        yield session


async def bearer(authorization: Annotated[str | None, Header()] = None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, if any."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


async def is_admin(request: Request, settings: Annotated[Settings, Depends(get_settings)],
                   token: Annotated[str | None, Depends(bearer)]) -> bool:
    """Whether the request carries the organiser token, or the organiser's sign-in cookie (``/organiser``), which
    only ever lets a reader see more (never raises: pages use it to decide what to show)."""
    return security.admin_matches(token, settings.admin_secret()) or security.cookie_matches(
        request.cookies.get(security.ORGANISER_COOKIE), settings.admin_secret())


async def require_admin(settings: Annotated[Settings, Depends(get_settings)],
                  token: Annotated[str | None, Depends(bearer)]) -> None:
    """401 without a token, 403 with a wrong one."""
    if settings.admin_secret() is None:
        raise HTTPException(403, "organiser actions are disabled on this server: it was started without "
                                 "TROJANSCOPE_ADMIN_TOKEN")
    if not token:
        raise HTTPException(401, "organiser token required: send Authorization: Bearer <TROJANSCOPE_ADMIN_TOKEN>",
                            headers={"WWW-Authenticate": "Bearer"})
    if not security.admin_matches(token, settings.admin_secret()):
        raise HTTPException(403, "this token is not the organiser token")


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
AdminFlag = Annotated[bool, Depends(is_admin)]
BearerDep = Annotated[str | None, Depends(bearer)]
AdminOnly = Depends(require_admin)


Model = TypeVar("Model", bound=BaseModel)


def parse_body(model: type[Model], body: dict[str, Any], what: str) -> Model:
    """A JSON body as ``model``, or HTTP 422 with one line naming the field (``what``: "round", "team", ...)."""
    from trojanscope.leaderboard.services import one_line_validation

    try:
        return model(**body)
    except ValidationError as exc:
        raise HTTPException(422, one_line_validation(exc, what)) from None
    except TypeError:
        raise HTTPException(422, f"{what}: body must be a JSON object") from None
