"""Browser sessions of a signed-in dashboard: the core's one-time ticket is exchanged for a token
that stays in this backend; the browser only holds an opaque, HttpOnly session cookie."""

from __future__ import annotations

import secrets
import time
from http.cookies import SimpleCookie
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from core.errors import JobDeckError
from web_ui.settings import client_for

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


async def auth_done(request: Request) -> Response:
    """Where the core's sign-in sends the browser back: `?ticket=<one-time ticket>`."""
    ticket = request.query_params.get("ticket", "")
    if not ticket:
        return PlainTextResponse("sign-in failed: no ticket", status_code=400)
    client = client_for(None)
    exchange = getattr(client, "exchange_ticket", None)
    if exchange is None:
        return PlainTextResponse("this core's client cannot exchange sign-in tickets yet", status_code=501)
    try:
        got = await exchange(ticket)
    except JobDeckError as exc:
        return PlainTextResponse(f"sign-in failed: {exc.message}", status_code=401)
    sid = secrets.token_urlsafe(32)
    expires_at = float(got.get("expires_at") or 0)
    _SESSIONS[sid] = _Session(str(got["token"]), expires_at, dict(got.get("user") or {}))
    resp = RedirectResponse("/", status_code=303)
    max_age = int(expires_at - time.time()) if expires_at else None
    resp.set_cookie(COOKIE, sid, httponly=True, samesite="lax", max_age=max_age, path="/",
                    secure=request.url.scheme == "https")  # fmt: skip
    return resp


async def auth_logout(request: Request) -> Response:
    """Forget this browser's session and go back to the dashboard."""
    sid = request.cookies.get(COOKIE)
    if sid:
        _SESSIONS.pop(sid, None)
    resp = RedirectResponse("/", status_code=303)
    resp.delete_cookie(COOKIE, path="/")
    return resp


ROUTES = [Route("/auth/done", auth_done), Route("/auth/logout", auth_logout)]
