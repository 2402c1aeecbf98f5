"""Who the console is signed in as and what that allows: the `me()` answer, checked per action
and queue, so the console can show a forbidden action disabled with its reason."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

QUEUE_SCOPED = frozenset({"jobs.write", "schedules.write", "queues.pause", "breakers.reset"})


@dataclass(frozen=True)
class Identity:
    """The signed-in user as the server sees them."""

    name: str
    role: str
    auth: str
    queues: tuple[str, ...]
    allowed: frozenset[str]

    @classmethod
    def from_me(cls, me: dict[str, Any]) -> Identity:
        """From `JobDeckClient.me()`."""
        return cls(
            name=str(me["name"]),
            role=str(me["role"]),
            auth=str(me["auth"]),
            queues=tuple(me["queues"]),
            allowed=frozenset(me["allowed"]),
        )

    def refusal(self, permission: str, queue: str | None = None) -> str | None:
        """None if the action is allowed (on `queue`), else why not, in a sentence."""
        if permission not in self.allowed:
            return f"your role ({self.role}) does not allow {permission}"
        if queue is not None and permission in QUEUE_SCOPED and not self.may_touch(queue):
            return f"queue {queue!r} is not one of yours ({', '.join(self.queues)})"
        return None

    def may_touch(self, queue: str) -> bool:
        return any(fnmatchcase(queue, pattern) for pattern in self.queues)

    @property
    def label(self) -> str:
        """How the header names the user."""
        if self.auth == "none":
            return f"{self.role} · no sign-in"
        return f"{self.name} · {self.role} ({self.auth})"
