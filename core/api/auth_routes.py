"""Sign-in routes: who am I, how to sign in, the OIDC code + PKCE flow for browsers, the audit log.

The browser flow (web UI): `/auth/login?next=URL` sends the browser to the IdP with a PKCE
challenge (the verifier, state and nonce ride in a signed, HttpOnly cookie, so any node can
finish the flow); `/auth/callback` exchanges the code, checks the ID token, sets the session
cookie and returns to `next`, adding a one-time `ticket` when `next` is the web UI on another
origin, which its backend exchanges at `/auth/ticket` for the session token.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse
from pydantic import BaseModel, ConfigDict, Field

from core.api.access import principal_of
from core.api.app import JSON
from core.api.deps import Route, parse_time
from core.api.fields import NO_NUL, Cursor, QueryText, QueryTime
from core.api.openapi import errors
from core.api.responses import AuditPage, AuthConfig, Me, SignedOut, TicketExchange
from core.auth.authenticate import Authenticator
from core.auth.sessions import COOKIE
from core.engine import Engine
from core.errors import InvalidInput, NotFound, Unauthorized
from core.store.audit import AuditFilter

router = APIRouter(tags=["auth"], route_class=Route)
LOGIN_COOKIE = "jobdeck_login"
LOGIN_SECONDS = 600.0
TICKET_SECONDS = 60.0


class Ticket(BaseModel):
    """A one-time ticket from /auth/callback's redirect."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ticket: str = Field(max_length=10_000)


def _auth(request: Request) -> Authenticator:
    auth: Authenticator = request.app.state.auth
    return auth


def _public_url(request: Request) -> str:
    configured = request.app.state.engine.settings.public_url
    return (configured or str(request.base_url)).rstrip("/")


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _check_next(request: Request, next_url: str) -> str:
    """Only our own paths, or the configured web UI origins: never an open redirect."""
    if next_url.startswith("/") and not next_url.startswith("//"):
        return next_url
    allowed = {_origin(_public_url(request)), *(_origin(o) for o in request.app.state.engine.settings.web_origins)}
    if _origin(next_url) in allowed:
        return next_url
    raise InvalidInput(
        f"next: {next_url!r} is not this server or a configured web origin (web_origins: {', '.join(sorted(allowed))})",
        field="next",
    )


@router.get("/auth/me", summary="Who the caller is: role, teams, queues and allowed actions", response_model=Me)
async def me(request: Request) -> JSON:
    return JSON(principal_of(request).describe())


@router.get("/auth/config", summary="How to sign in to this server (for `jobdeck login` and the web UI)",
            response_model=AuthConfig)  # fmt: skip
async def auth_config(request: Request) -> JSON:
    auth = _auth(request)
    s = auth.settings
    out: dict[str, Any] = {"auth": auth.mode}
    if auth.oidc is not None:
        m = auth.oidc.metadata
        out.update(
            issuer=s.oidc_issuer,
            audience=s.oidc_audience,
            cli_client_id=s.oidc_cli_client_id or None,
            scopes=s.oidc_scopes,
            authorization_endpoint=m.get("authorization_endpoint"),
            token_endpoint=m.get("token_endpoint"),
            device_authorization_endpoint=m.get("device_authorization_endpoint"),
            web_login=bool(s.oidc_client_id),
        )
    return JSON(out)


def _oidc_web(request: Request) -> Authenticator:
    auth = _auth(request)
    if auth.oidc is None or not auth.settings.oidc_client_id:
        raise NotFound("browser sign-in needs auth = oidc and oidc_client_id on the server")
    return auth


_REDIRECT: dict[int | str, dict[str, Any]] = {302: {"description": "to the identity provider (login) or back to `next` (callback)",
                   "headers": {"Location": {"schema": {"type": "string"}}}}}  # fmt: skip


@router.get("/auth/login", summary="Start the browser sign-in (OIDC authorization code + PKCE)", status_code=302,
            response_class=RedirectResponse, responses={**_REDIRECT, **errors(404)})  # fmt: skip
async def login(request: Request, next: Annotated[str, Query(max_length=2000, pattern=NO_NUL)] = "/auth/me",
                login_hint: QueryText = None) -> RedirectResponse:  # fmt: skip
    auth = _oidc_web(request)
    assert auth.oidc is not None
    from core.auth.oidc import pkce_pair

    next_url = _check_next(request, next)
    verifier, challenge = pkce_pair()
    state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    sealed = auth.sessions.seal("sign-in state", {"state": state, "verifier": verifier, "nonce": nonce,
                                                  "next": next_url}, LOGIN_SECONDS)  # fmt: skip
    url = auth.oidc.authorization_url(
        auth.settings.oidc_client_id,
        _public_url(request) + "/auth/callback",
        state,
        challenge,
        nonce,
        scope=auth.settings.oidc_scopes,
        extra={"login_hint": login_hint} if login_hint else None,
    )
    resp = RedirectResponse(url, status_code=302)
    secure = _public_url(request).startswith("https://")
    # SameSite=Lax: the cookie must come back on the IdP's top-level redirect to /auth/callback.
    resp.set_cookie(LOGIN_COOKIE, sealed, max_age=int(LOGIN_SECONDS), path="/auth", httponly=True,
                    samesite="lax", secure=secure)  # fmt: skip
    return resp


@router.get("/auth/callback", summary="Where the IdP sends the browser back", status_code=302,
            response_class=RedirectResponse, responses={**_REDIRECT, **errors(401, 404)})  # fmt: skip
async def callback(
    request: Request,
    code: QueryText = None,
    state: QueryText = None,
    error: QueryText = None,
    error_description: QueryText = None,
) -> RedirectResponse:
    auth = _oidc_web(request)
    assert auth.oidc is not None
    if error:
        raise Unauthorized(f"the identity provider refused the sign-in: {error_description or error}")
    sealed = request.cookies.get(LOGIN_COOKIE)
    if not sealed:
        raise Unauthorized("no sign-in in progress in this browser (cookies off, or it took over 10 minutes)")
    flow = auth.sessions.unseal("sign-in state", sealed)
    if not code or not state or not secrets.compare_digest(state, str(flow["state"])):
        raise Unauthorized("the sign-in state does not match this browser's: start again at /auth/login")
    s = auth.settings
    redirect_uri = _public_url(request) + "/auth/callback"
    tokens = await auth.oidc.exchange_code(s.oidc_client_id, s.oidc_client_secret or None, code, redirect_uri,
                                           str(flow["verifier"]))  # fmt: skip
    claims = await auth.oidc.verify_id_token(str(tokens.get("id_token", "")), s.oidc_client_id, str(flow["nonce"]))
    access = tokens.get("access_token")
    if isinstance(access, str) and access.count(".") == 2:
        with contextlib.suppress(Unauthorized):  # roles usually ride on the access token for our audience
            claims = {**claims, **await auth.oidc.verify(access)}
    principal = auth.from_claims(claims, "oidc")
    session, expires = auth.sessions.issue(principal)
    next_url = str(flow["next"])
    if not next_url.startswith("/"):  # the web UI's backend exchanges this for the session token
        ticket = auth.sessions.seal("ticket", {"session": session, "expires_at": expires,
                                               "id": secrets.token_urlsafe(12)}, TICKET_SECONDS)  # fmt: skip
        next_url += ("&" if "?" in next_url else "?") + "ticket=" + ticket
    resp = RedirectResponse(next_url, status_code=302)
    resp.set_cookie(COOKIE, session, max_age=int(expires - time.time()), path="/", httponly=True, samesite="lax",
                    secure=_public_url(request).startswith("https://"))  # fmt: skip
    resp.delete_cookie(LOGIN_COOKIE, path="/auth")
    return resp


@router.post("/auth/ticket", summary="Exchange a one-time sign-in ticket for a session token",
             response_model=TicketExchange, responses=errors(401))  # fmt: skip
async def exchange_ticket(request: Request, body: Ticket) -> JSON:
    auth = _auth(request)
    data = auth.sessions.unseal("ticket", body.ticket)
    used: set[str] = request.app.state.__dict__.setdefault("used_tickets", set())
    if str(data["id"]) in used:
        raise Unauthorized("this sign-in ticket was used already: sign in again")
    used.add(str(data["id"]))
    session = str(data["session"])
    p = auth.sessions.verify(session)
    return JSON({"token": session, "expires_at": data["expires_at"], "user": p.describe()})


@router.post("/auth/logout", summary="End the browser session", response_model=SignedOut)
async def logout(request: Request) -> JSON:
    auth = _auth(request)
    out: dict[str, Any] = {"signed_out": True}
    if auth.oidc is not None and auth.oidc.metadata.get("end_session_endpoint"):
        out["end_session_endpoint"] = auth.oidc.metadata["end_session_endpoint"]
    resp = JSON(out)
    resp.delete_cookie(COOKIE, path="/")
    return resp


@router.get("/v1/audit", summary="The audit log, newest first (admins)", response_model=AuditPage)
async def list_audit(
    request: Request,
    actor: QueryText = None,
    action: QueryText = None,
    target: QueryText = None,
    outcome: QueryText = None,
    since: QueryTime = None,
    until: QueryTime = None,
    cursor: Cursor = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> JSON:
    engine: Engine = request.app.state.engine
    flt = AuditFilter(actor, action, target, outcome, parse_time(since, "since"), parse_time(until, "until"))
    entries = await engine.store.list_audit(flt, cursor, limit)
    return JSON({"entries": entries, "next_cursor": entries[-1]["id"] if len(entries) == limit else None})
