"""Static API and agent tokens: made by `jobdeck token new`, configured by their SHA-256 only."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from core.auth.roles import AGENT, ROLES, Principal, queues_of
from core.errors import InvalidInput

PREFIX = "jd_"
_HEX64 = re.compile(r"[0-9a-f]{64}")


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What the configuration keeps instead of the token."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenTable:
    """The configured tokens, looked up by hash."""

    def __init__(self, entries: Sequence[Mapping[str, Any]], team_queues: Mapping[str, Sequence[str]]) -> None:
        self._by_hash: dict[str, Principal] = {}
        for i, e in enumerate(entries):
            where = f"tokens[{i}]" + (f" ({e['name']})" if e.get("name") else "")
            name = str(e.get("name") or "")
            digest = str(e.get("sha256") or "").lower()
            role = str(e.get("role") or "")
            if not name:
                raise InvalidInput(f"{where}: every token needs a name", field="tokens")
            if not _HEX64.fullmatch(digest):
                raise InvalidInput(
                    f"{where}: sha256 must be the 64 hex digits `jobdeck token new` printed", field="tokens"
                )
            if role not in (*ROLES, AGENT):
                raise InvalidInput(f"{where}: role {role!r} is not one of {', '.join((*ROLES, AGENT))}", field="tokens")
            teams = tuple(str(t) for t in e.get("teams") or ())
            explicit = tuple(str(q) for q in e.get("queues") or ())
            if role == AGENT and not explicit and not teams:
                raise InvalidInput(f"{where}: an agent token needs the queues it may serve", field="tokens")
            queues = queues_of(role, teams, team_queues, explicit)
            self._by_hash[digest] = Principal(f"token:{name}", name, role, teams, queues, "token")

    def __len__(self) -> int:
        return len(self._by_hash)

    def lookup(self, token: str) -> Principal | None:
        """The principal of a static token, or None if no such token is configured."""
        return self._by_hash.get(token_hash(token))
