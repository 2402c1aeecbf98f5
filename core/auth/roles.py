"""Roles, actions and the principal: who is calling and what they may do.

viewer reads and subscribes; operator also acts on jobs and schedules in their teams' queues
(create, pause, resume, re-prioritise, cancel, retry), pauses those queues and resets their circuit
breakers; admin may do everything, in every queue: queue settings, agents, the audit log. Teams own queues by name
patterns (`team_queues`); a principal sees and acts on the queues its teams own.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

ROLES = ("viewer", "operator", "admin")
AGENT = "agent"  # a machine that takes work from its queues; no REST actions

#: action -> the least role that may do it. Queue-scoped actions also need the queue to be the principal's.
ACTIONS: dict[str, str] = {
    "jobs.read": "viewer",
    "jobs.write": "operator",
    "schedules.write": "operator",
    "queues.pause": "operator",
    "queues.configure": "admin",
    "breakers.reset": "operator",
    "agents.drain": "admin",
    "audit.read": "admin",
    "archive.read": "admin",
    "archive.restore": "admin",
    "notifications.manage": "admin",
}
QUEUE_SCOPED = frozenset({"jobs.read", "jobs.write", "schedules.write", "queues.pause", "breakers.reset"})


@lru_cache(maxsize=4096)
def _pattern(p: str) -> re.Pattern[str]:
    return re.compile(fnmatch.translate(p))


def queue_matches(queue: str, patterns: Sequence[str]) -> bool:
    """True if `queue` matches one of the shell-style `patterns` ("payments-*")."""
    return any(p == "*" or p == queue or _pattern(p).match(queue) is not None for p in patterns)


@dataclass(frozen=True)
class Principal:
    """A signed-in caller: a person, a service or an agent."""

    subject: str
    name: str
    role: str  # viewer | operator | admin | agent
    teams: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()  # patterns of the queues it sees and acts on ("*": all)
    via: str = "none"  # none | token | oidc | session
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def sees_everything(self) -> bool:
        return "*" in self.queues

    def has_role_for(self, action: str) -> bool:
        """Whether the role allows `action` at all (before looking at the queue)."""
        need = ACTIONS[action]
        if self.role == AGENT or self.role not in ROLES:
            return False
        return ROLES.index(self.role) >= ROLES.index(need)

    def may(self, action: str, queue: str | None = None) -> bool:
        """Whether this principal may do `action` (on `queue`, for queue-scoped actions)."""
        if not self.has_role_for(action):
            return False
        if action in QUEUE_SCOPED and queue is not None:
            return self.sees(queue)
        return True

    def sees(self, queue: str | None) -> bool:
        """Whether events and jobs of `queue` are visible to it (events of no queue are)."""
        return queue is None or queue_matches(queue, self.queues)

    def refusal(self, action: str, queue: str | None = None) -> str:
        """Why `action` is refused, in words for the user."""
        if self.role == AGENT:
            return f"{self.name} is an agent token: it may take work from its queues, nothing else"
        if self.role not in ROLES:
            return f"{self.name} has no JobDeck role (viewer, operator or admin) in the IdP's roles claim"
        if not self.has_role_for(action):
            return f"{self.name} has the role {self.role}; {action} needs {ACTIONS[action]} or above"
        return f"queue {queue!r} is not one of {self.name}'s teams' queues ({', '.join(self.queues) or 'none'})"

    def describe(self) -> dict[str, Any]:
        """The `/auth/me` answer."""
        return {
            "subject": self.subject,
            "name": self.name,
            "role": self.role,
            "teams": list(self.teams),
            "queues": list(self.queues),
            "auth": self.via,
            "allowed": [a for a in ACTIONS if self.has_role_for(a)],
        }


def queues_of(
    role: str, teams: Iterable[str], team_queues: Mapping[str, Sequence[str]], explicit: Sequence[str] = ()
) -> tuple[str, ...]:
    """The queue patterns a principal works on: everything for admins, else its teams' queues
    (and any it was given explicitly, as agent tokens are)."""
    if role == "admin":
        return ("*",)
    out: list[str] = list(explicit)
    for t in teams:
        out.extend(team_queues.get(t, ()))
    return tuple(dict.fromkeys(out))


LOCAL_ADMIN = Principal("local", "local", "admin", (), ("*",), "none")
