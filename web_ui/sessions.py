"""Browser sessions of a signed-in dashboard: the core's one-time ticket is exchanged for a token
that stays in this backend; the browser only holds an opaque, HttpOnly session cookie."""

from __future__ import annotations

import secrets
import time
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from core.client import JobDeckClient
from core.errors import JobDeckError
from web_ui.settings import ca_file, client_for

COOKIE = "jobdeck_web_session"


class _Session:
    __slots__ = ("expires_at", "token", "user")

    def __init__(self, token: str, expires_at: float, user: dict[str, Any]) -> None:
        self.token, self.expires_at, self.user = token, expires_at, user


_SESSIONS: dict[str, _Session] = {}


def token_from_cookie_header(header: str) -> str | None:
    """The core token of the session named by a request's Cookie header, if it is still valid."""
    if not header or COOKIE not in header:
        return None
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(header)
    except Exception:
        return None
    morsel = cookie.get(COOKIE)
    session = _SESSIONS.get(morsel.value) if morsel else None
    if session is None or (session.expires_at and session.expires_at < time.time()):
        return None
    return session.token


def _new_session(token: str, expires_at: float, user: dict[str, Any], secure: bool) -> Response:
    sid = secrets.token_urlsafe(32)
    _SESSIONS[sid] = _Session(token, expires_at, user)
    resp = RedirectResponse("/", status_code=303)
    max_age = int(expires_at - time.time()) if expires_at else None
    resp.set_cookie(COOKIE, sid, httponly=True, samesite="lax", max_age=max_age, path="/", secure=secure)
    return resp


async def auth_config(client: JobDeckClient) -> dict[str, Any]:
    """How the core signs people in (`/auth/config`): `{"auth": "none|token|oidc", "web_login": bool}`."""
    return await client.auth_config()


_PENDING: dict[str, tuple[str, float]] = {}  # one-time code -> (token, expires at)
PENDING_SECONDS = 30.0


def pending_sign_in(token: str) -> str:
    """Keep a pasted token for a moment under a one-time code: the page's event hands the code to
    the browser, whose next request (`/auth/session?code=`) gets the session cookie."""
    now = time.time()
    for code in [c for c, (_, exp) in _PENDING.items() if exp < now]:
        del _PENDING[code]
    code = secrets.token_urlsafe(24)
    _PENDING[code] = (token, now + PENDING_SECONDS)
    return code


async def auth_session(request: Request) -> Response:
    """Sign in with an access token pasted in the sign-in form (a core with token sign-in)."""
    token, expires = _PENDING.pop(request.query_params.get("code", ""), ("", 0.0))
    try:
        if expires < time.time():
            raise JobDeckError("the sign-in took too long or was used already: try again")
        if not token:
            raise JobDeckError("paste an access token")
        async with JobDeckClient(client_for(None).server, token=token, timeout=10.0, ca_file=ca_file()) as client:
            me = await client.me()
    except JobDeckError as exc:
        return RedirectResponse("/?signin_error=" + quote(exc.message), status_code=303)
    return _new_session(token, 0.0, me, request.url.scheme == "https")


async def auth_done(request: Request) -> Response:
    """Where the core's sign-in sends the browser back: `?ticket=<one-time ticket>`."""
    ticket = request.query_params.get("ticket", "")
    if not ticket:
        return PlainTextResponse("sign-in failed: no ticket", status_code=400)
    try:
        got = await client_for(None).exchange_ticket(ticket)
    except JobDeckError as exc:
        return RedirectResponse("/?signin_error=" + quote(exc.message), status_code=303)
    expires_at = float(got.get("expires_at") or 0)
    return _new_session(str(got["token"]), expires_at, dict(got.get("user") or {}), request.url.scheme == "https")


async def auth_logout(request: Request) -> Response:
    """Forget this browser's session and go back to the dashboard."""
    sid = request.cookies.get(COOKIE)
    if sid:
        _SESSIONS.pop(sid, None)
    resp = RedirectResponse("/", status_code=303)
    resp.delete_cookie(COOKIE, path="/")
    return resp


ROUTES = [
    Route("/auth/done", auth_done),
    Route("/auth/session", auth_session),
    Route("/auth/logout", auth_logout),
]
