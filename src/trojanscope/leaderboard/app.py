"""The app factory: ``create_app(settings)`` builds the FastAPI app; nothing connects at import time."""

from __future__ import annotations

import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from trojanscope.errors import TrojanscopeError
from trojanscope.leaderboard import security
from trojanscope.leaderboard.db import make_sessionmaker
from trojanscope.leaderboard.services import status_for
from trojanscope.leaderboard.settings import Settings

JSON_BODY_LIMIT = 64 * 1024


class BodySizeLimit:
    """Refuse request bodies over the limit while they stream in (413), before anything is spooled to disk.

    Uploads (paths with ``submissions``) may use ``max_upload_bytes`` plus room for the form
    fields; every other request is small JSON or a form.
    """

    def __init__(self, app: ASGIApp, max_upload_bytes: int) -> None:
        self.app, self.max_upload = app, max_upload_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        limit = self.max_upload + 64 * 1024 if "submissions" in scope["path"] else JSON_BODY_LIMIT
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _too_large(send, limit)
            return
        seen, refused = 0, False

        async def limited() -> dict:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit and not refused:
                    refused = True
                    await _too_large(send, limit)  # answer now: the app may wrap our exception into a 400
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: dict) -> None:
            if not refused:  # once refused, the app's own (error) response is dropped
                await send(message)

        try:
            await self.app(scope, limited, guarded_send)
        except Exception:
            if not refused:
                raise


class _BodyTooLarge(Exception):
    pass


async def _too_large(send: Send, limit: int) -> None:
    body = f'{{"detail":"request body is larger than {limit} bytes; make the upload smaller"}}'.encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class CachedRoundPages:
    """Serve cached round pages (see ``routes.pages``) before routing and dependency resolution.

    Only anonymous ``GET /rounds/<name>`` requests qualify. A page younger than ``fresh_s`` is
    served as is; an older one is revalidated by exactly one request (a fingerprint check, re-render
    only on change) while the others keep getting the cached copy, so a crowd of readers never
    piles onto the database at once.
    """

    def __init__(self, app: ASGIApp, cache: dict, fresh_s: float) -> None:
        self.app, self.cache, self.fresh_s = app, cache, fresh_s
        self.revalidating: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = None
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"].startswith("/rounds/") and \
                not any(k == b"authorization" or (k == b"cookie" and security.ORGANISER_COOKIE.encode() in v)
                        for k, v in scope["headers"]):
            name = scope["path"][len("/rounds/"):]
            hit = self.cache.get((name, False)) if "/" not in name else None
            if hit is not None and (time.monotonic() - hit[0] < self.fresh_s or name in self.revalidating):
                await send({"type": "http.response.start", "status": 200,
                            "headers": [(b"content-type", b"text/html; charset=utf-8"),
                                        (b"content-length", str(len(hit[2])).encode())]})
                await send({"type": "http.response.body", "body": hit[2]})
                return
            if hit is not None:
                self.revalidating.add(name)
        try:
            await self.app(scope, receive, send)
        finally:
            if name is not None:
                self.revalidating.discard(name)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service for ``settings`` (default: from ``TROJANSCOPE_*`` variables); creates/upgrades the schema."""
    from trojanscope.leaderboard.routes import pages, rounds, submissions, teams

    settings = settings or Settings.from_env()
    sessions = make_sessionmaker(settings.db_url)  # first: a --db that does not work leaves nothing behind
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    # FastAPIOffline: /docs and /redoc load Swagger UI and ReDoc from the package, not a CDN (offline servers)
    app = FastAPIOffline(title="trojanscope leaderboard", version="1",
                  description="TrojAI-style leaderboard: rounds, teams, sandboxed submissions scored by the "
                              "trojanscope harness. Organiser actions need `Authorization: Bearer <admin token>`; "
                              "team uploads need the team's token.")
    app.state.settings = settings
    app.state.sessionmaker = sessions
    app.state.round_page_cache = {}  # (round, admin) -> (checked at, fingerprint, html); see routes.pages

    @app.exception_handler(TrojanscopeError)
    async def _service_error(request: Request, exc: TrojanscopeError) -> Response:
        if pages.wants_page(request):
            return pages.error_page(request, status_for(exc), str(exc))
        return JSONResponse({"detail": str(exc)}, status_code=status_for(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        """Pages answer errors as pages (a browser gets HTML, not a JSON body); the API keeps {"detail"}."""
        if pages.wants_page(request):
            return pages.error_page(request, exc.status_code, str(exc.detail))
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        """A malformed body, path or query answers one line in the documented shape, not pydantic's list."""
        err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        msg = str(err.get("msg", "invalid request")).splitlines()[0][:200]
        if err.get("type") == "json_invalid":
            where, msg = "body", f"not valid JSON ({(err.get('ctx') or {}).get('error', 'parse error')})"
        return JSONResponse({"detail": f"{where}: {msg}"}, status_code=422)

    for module in (rounds, teams, submissions, pages):
        app.include_router(module.router)
    app.add_middleware(BodySizeLimit, max_upload_bytes=settings.max_upload_bytes)
    app.add_middleware(CachedRoundPages, cache=app.state.round_page_cache, fresh_s=pages.FRESH_S)
    return app
