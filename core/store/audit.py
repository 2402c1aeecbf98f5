"""The audit log's record of one call: who did what to which target, with the state before and
after, written by the store in the same transaction as the change itself.

The API sets `acting(...)` for a mutating call; every store write made while it is set carries
an `AuditScope` on its transaction: JobChanges notes each job's state before the change, the
outbox notes what was written (the after), and the store inserts the row before the commit.
A refused or failed call has no change to ride on: it is recorded on its own (`record_audit`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import orjson

MAX_NOTED = 100  # targets kept in before/after per entry; a batch of 10,000 is summarised with a count
COLUMNS = ("at", "actor", "subject", "role", "via", "ip", "user_agent", "action", "target", "outcome", "message",
           "before", "after")  # fmt: skip


@dataclass(frozen=True)
class Actor:
    """Who is calling, and from where."""

    subject: str
    name: str
    role: str
    via: str
    ip: str | None = None
    user_agent: str | None = None


@dataclass
class AuditScope:
    """One audited call's notes, filled while its write runs."""

    actor: Actor
    action: str
    target: str | None
    before: dict[str, Any] = field(default_factory=dict)
    after: list[dict[str, Any]] = field(default_factory=list)
    changed: int = 0

    def note_before(self, target: str, state: dict[str, Any]) -> None:
        if len(self.before) < MAX_NOTED:
            self.before.setdefault(target, state)

    def note_after(self, type_: str, job_id: int | None, queue: str | None, data: dict[str, Any]) -> None:
        self.changed += 1
        if len(self.after) < MAX_NOTED:
            self.after.append({"type": type_, "job_id": job_id, "queue": queue, "data": data})

    def row(self, at: float, outcome: str = "ok", message: str | None = None) -> tuple[Any, ...]:
        """The audit_log row, in COLUMNS order (JSON columns as text)."""
        target = self.target
        if target is None and self.after:
            ids = sorted({a["job_id"] for a in self.after if a["job_id"] is not None})
            target = f"job:{ids[0]}" if len(ids) == 1 else (f"jobs:{self.changed}" if ids else None)
        after: Any = self.after
        if self.changed > len(self.after):
            after = {"changes": self.changed, "first": self.after}
        a = self.actor
        return (at, a.name, a.subject, a.role, a.via, a.ip, a.user_agent, self.action, target, outcome, message,
                orjson.dumps(self.before or None).decode(), orjson.dumps(after or None).decode())  # fmt: skip


@dataclass
class Acting:
    """The audited call in progress: who does what to which target (and its state, when the API read it)."""

    actor: Actor
    action: str
    target: str | None
    before: dict[str, Any] = field(default_factory=dict)


_CURRENT: ContextVar[Acting | None] = ContextVar("jobdeck_audit", default=None)


def begin() -> AuditScope | None:
    """The scope for a write made now: set when the write is part of an audited call."""
    a = _CURRENT.get()
    return None if a is None else AuditScope(a.actor, a.action, a.target, dict(a.before))


def set_acting(actor: Actor, action: str, target: str | None) -> Acting:
    """Mark the rest of this call (its task) as `actor` doing `action` to `target`."""
    acting = Acting(actor, action, target)
    _CURRENT.set(acting)
    return acting


def current() -> Acting | None:
    """What `set_acting` said for this call, if anything."""
    return _CURRENT.get()


@contextlib.contextmanager
def not_acting() -> Iterator[None]:
    """Writes inside are not part of the audited call (e.g. recording its refusal)."""
    token = _CURRENT.set(None)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def entry_dict(row: tuple[Any, ...], id_: int) -> dict[str, Any]:
    """A stored row as the API shows it."""
    from core.model import iso

    out = dict(zip(COLUMNS, row, strict=True))
    out["id"] = id_
    out["at"] = iso(out["at"])
    for k in ("before", "after"):
        v = out[k]
        out[k] = orjson.loads(v) if isinstance(v, str) else v
    return out


@dataclass(frozen=True)
class AuditFilter:
    """What `list_audit` returns: entries by this actor (name or subject), action, target, outcome, time."""

    actor: str | None = None
    action: str | None = None
    target: str | None = None
    outcome: str | None = None
    since: float | None = None
    until: float | None = None

    def conditions(self, before_id: int | None) -> list[tuple[str, str, Any]]:
        """(column, operator, value) triples, ANDed by the store."""
        out: list[tuple[str, str, Any]] = []
        for col in ("action", "target", "outcome"):
            if getattr(self, col):
                out.append((col, "=", getattr(self, col)))
        if self.actor:
            out.append(("actor", "=", self.actor))
        if self.since is not None:
            out.append(("at", ">=", self.since))
        if self.until is not None:
            out.append(("at", "<", self.until))
        if before_id is not None:
            out.append(("id", "<", before_id))
        return out
