"""One place that turns a request's credentials into a Principal, whatever the auth mode.

Accepted, in this order: `Authorization: Bearer <token>` (a static `jd_` token, a `jds.` session,
or, in oidc mode, a JWT from the IdP), then the session cookie. With auth "none" everyone is
the local admin (the node refuses to start on anything but loopback then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from core.auth import sessions, tokens
from core.auth.roles import AGENT, LOCAL_ADMIN, ROLES, Principal, queues_of
from core.auth.sessions import SessionSigner
from core.auth.tokens import TokenTable
from core.config import Settings
from core.errors import InvalidInput, Unauthorized

if TYPE_CHECKING:
    from core.auth.oidc import OidcProvider

LOOPBACK = ("127.0.0.1", "localhost", "::1")
NO_CREDENTIALS = "no credentials: send `Authorization: Bearer <token>` (get one with `jobdeck login --server URL`)"


def claim(claims: Mapping[str, Any], path: str) -> Any:
    """A claim by dotted path ("realm_access.roles")."""
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return value.replace(",", " ").split()
    if isinstance(value, Sequence):
        return [str(v) for v in value]
    return [str(value)]


class Authenticator:
    """The node's sign-in rules (built from Settings; `start` reaches the IdP)."""

    def __init__(self, settings: Settings) -> None:
        self.mode = settings.auth
        self.settings = settings
        self.tokens = TokenTable(settings.tokens, settings.team_queues)
        self.sessions = SessionSigner(settings.session_secret, settings.session_hours, settings.team_queues)
        self.oidc: OidcProvider | None = None
        if self.mode == "none" and settings.host not in LOOPBACK:
            raise InvalidInput(
                f"auth is 'none' (everyone is admin) but the node would listen on {settings.host}: "
                "bind to 127.0.0.1, or turn sign-in on with JOBDECK_AUTH=token or oidc",
                field="auth",
            )
        if self.mode == "token" and not len(self.tokens):
            raise InvalidInput(
                "auth is 'token' but no tokens are configured: make one with `jobdeck token new --name NAME "
                "--role admin` and add it to the config file's [[tokens]]",
                field="tokens",
            )
        if self.mode == "oidc":
            from core.auth.oidc import OidcProvider

            algorithms = [a.strip() for a in settings.oidc_algorithms.split(",") if a.strip()]
            self.oidc = OidcProvider(settings.oidc_issuer, settings.oidc_audience, algorithms=algorithms)

    async def start(self) -> None:
        """Discover the IdP (Unavailable naming the issuer if it cannot be reached)."""
        if self.oidc is not None:
            await self.oidc.discover()

    async def principal(self, authorization: str | None, cookie: str | None = None) -> Principal:
        """Who sent these credentials; Unauthorized (with the failed check) if nobody valid did."""
        if self.mode == "none":
            return LOCAL_ADMIN
        token = None
        if authorization:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise Unauthorized("the Authorization header must be `Bearer <token>`")
            token = value.strip()
        elif cookie:
            token = cookie
        if not token:
            raise Unauthorized(NO_CREDENTIALS)
        if token.startswith(tokens.PREFIX):
            p = self.tokens.lookup(token)
            if p is None:
                raise Unauthorized("unknown API token (revoked, or never configured on this server)")
            return p
        if token.startswith(sessions.PREFIX):
            return self.sessions.verify(token)
        if self.oidc is None:
            raise Unauthorized("this server accepts only JobDeck tokens (jd_...) and sessions; auth mode is token")
        return self.from_claims(await self.oidc.verify(token), "oidc")

    def from_claims(self, claims: Mapping[str, Any], via: str) -> Principal:
        """A principal from an IdP's claims: the highest JobDeck role in the roles claim, the teams claim."""
        s = self.settings
        granted = set(_as_list(claim(claims, s.oidc_roles_claim)))
        role = next((r for r in reversed(ROLES) if r in granted), AGENT if AGENT in granted else "")
        teams = tuple(_as_list(claim(claims, s.oidc_teams_claim)))
        # A person's token names them; a service's (client credentials) has its client id as sub or client_id.
        name = str(claims.get("preferred_username") or claims.get("email") or claims.get("sub")
                   or claims.get("client_id") or "unknown")  # fmt: skip
        return Principal(str(claims.get("sub") or name), name, role, teams, queues_of(role, teams, s.team_queues), via)
