"""Session tokens: what the web sign-in gives a browser (cookie) and the web UI's backend (bearer).

A session is signed, not stored: `jds.<payload>.<HMAC-SHA256>`, so any node with the same
`session_secret` accepts it. It names the person and role as the IdP said at sign-in, and
expires after `session_hours`; the queues are worked out again from `team_queues` on each use.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import orjson

from core.auth.roles import Principal, queues_of
from core.errors import Unauthorized

PREFIX = "jds."
COOKIE = "jobdeck_session"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionSigner:
    """Issues and checks session tokens with one secret."""

    def __init__(self, secret: str, hours: float, team_queues: Mapping[str, Sequence[str]]) -> None:
        # No secret configured: a random one, so sessions end when the node restarts (and other
        # nodes do not accept them); set session_secret on every node to share sessions.
        self._key = (secret or secrets.token_hex(32)).encode()
        self.seconds = hours * 3600
        self._team_queues = team_queues

    def _sign(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())

    def seal(self, kind: str, data: dict[str, object], seconds: float) -> str:
        """A signed, expiring envelope for a short-lived secret of the login flow (its state, a ticket)."""
        payload = _b64(orjson.dumps({"kind": kind, "exp": time.time() + seconds, **data}))
        return f"{payload}.{self._sign(payload)}"

    def unseal(self, kind: str, sealed: str) -> dict[str, object]:
        """What `seal` wrapped, if it is intact, of this kind and not expired (else Unauthorized)."""
        payload, _, signature = sealed.partition(".")
        if not signature or not hmac.compare_digest(signature, self._sign(payload)):
            raise Unauthorized(f"the {kind} does not verify: start the sign-in again")
        data: dict[str, object] = orjson.loads(_unb64(payload))
        if data.get("kind") != kind:
            raise Unauthorized(f"this is not a {kind}: start the sign-in again")
        if float(data.get("exp", 0)) < time.time():  # type: ignore[arg-type]
            raise Unauthorized(f"the {kind} expired: start the sign-in again")
        return data

    def issue(self, p: Principal, now: float | None = None) -> tuple[str, float]:
        """A session token for `p` and when it expires."""
        expires = (now or time.time()) + self.seconds
        claims = {"sub": p.subject, "name": p.name, "role": p.role, "teams": list(p.teams), "via": p.via,
                  "exp": expires}  # fmt: skip
        payload = _b64(orjson.dumps(claims))
        return f"{PREFIX}{payload}.{self._sign(payload)}", expires

    def verify(self, token: str, now: float | None = None) -> Principal:
        """The principal of a session token; Unauthorized says which check failed."""
        try:
            payload, signature = token.removeprefix(PREFIX).split(".")
            claims = orjson.loads(_unb64(payload))
        except (ValueError, orjson.JSONDecodeError):
            raise Unauthorized("the session token is malformed: sign in again") from None
        if not hmac.compare_digest(signature, self._sign(payload)):
            raise Unauthorized(
                "the session token's signature does not verify (signed by another node's secret, or altered): "
                "sign in again"
            )
        exp = float(claims.get("exp", 0))
        if exp < (now or time.time()):
            at = datetime.fromtimestamp(exp, UTC).isoformat(timespec="seconds")
            raise Unauthorized(f"the session expired at {at}: sign in again")
        role, teams = str(claims["role"]), tuple(claims.get("teams") or ())
        return Principal(str(claims["sub"]), str(claims["name"]), role, teams,
                         queues_of(role, teams, self._team_queues), "session")  # fmt: skip
