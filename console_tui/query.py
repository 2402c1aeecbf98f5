"""The jobs filter people type after `/`: words and `key:value` terms, sent to the server's
job listing (and bulk) filter, and checked locally against live updates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KEYS = ("state", "queue", "tag", "name")


@dataclass(frozen=True)
class JobQuery:
    """`state:queued,failed queue:emails tag:nightly backup` (a bare word is a name prefix)."""

    states: tuple[str, ...] = ()
    queue: str | None = None
    tag: str | None = None
    name_prefix: str | None = None

    @classmethod
    def parse(cls, text: str) -> JobQuery:
        """Read a typed filter; an unknown `key:` raises ValueError naming the keys."""
        states: tuple[str, ...] = ()
        queue = tag = name = None
        words: list[str] = []
        for term in text.split():
            key, sep, value = term.partition(":")
            if not sep:
                words.append(term)
                continue
            if key not in KEYS:
                raise ValueError(f"unknown filter {key!r}: use {', '.join(k + ':' for k in KEYS)} or a name prefix")
            if key == "state":
                states = tuple(s for s in value.split(",") if s)
            elif key == "queue":
                queue = value or None
            elif key == "tag":
                tag = value or None
            else:
                name = value or None
        if words:
            name = " ".join(words)
        return cls(states, queue, tag, name)

    def params(self) -> dict[str, Any]:
        """The filter as `list_jobs` / `bulk(filter=...)` keys (only those set)."""
        out: dict[str, Any] = {}
        if self.states:
            out["state"] = ",".join(self.states)
        if self.queue:
            out["queue"] = self.queue
        if self.name_prefix:
            out["name_prefix"] = self.name_prefix
        if self.tag:
            out["tag"] = self.tag
        return out

    def matches(self, job: dict[str, Any]) -> bool | None:
        """Whether a job summary (from an event) passes; None when it cannot tell (a tag filter and
        a summary without tags: a core older than the tags in events)."""
        if self.states and job.get("state") not in self.states:
            return False
        if self.queue and job.get("queue") != self.queue:
            return False
        if self.name_prefix and not str(job.get("name", "")).startswith(self.name_prefix):
            return False
        if not self.tag:
            return True
        return self.tag in job["tags"] if isinstance(job.get("tags"), list) else None

    def text(self) -> str:
        """The filter as it would be typed."""
        parts = []
        if self.states:
            parts.append("state:" + ",".join(self.states))
        if self.queue:
            parts.append(f"queue:{self.queue}")
        if self.tag:
            parts.append(f"tag:{self.tag}")
        if self.name_prefix:
            parts.append(self.name_prefix if " " not in self.name_prefix and ":" not in self.name_prefix
                         else f"name:{self.name_prefix}")  # fmt: skip
        return " ".join(parts)

    def __bool__(self) -> bool:
        return bool(self.states or self.queue or self.tag or self.name_prefix)
