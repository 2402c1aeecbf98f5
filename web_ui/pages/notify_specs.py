"""What the Notifications page's forms send: a channel (webhook or email) and an alert rule (any
condition), built from the text of the form's fields. Only the shape is settled here (numbers parsed,
lists split, empty fields left out); the core checks the rest and names the field if it is wrong."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.errors import InvalidInput

CHANNEL_KINDS = ("webhook", "email")
SECURITY = ("starttls", "tls", "none")
# condition kind -> (what the form calls it, the numbers it takes: (field, label, whole number?))
CONDITIONS: dict[str, tuple[str, tuple[tuple[str, str, bool], ...]]] = {
    "every": ("every matching event", ()),
    "failed_times": ("a job failed N times", (("times", "times", True),)),
    "count": ("more than N events in T minutes", (("above", "more than", True), ("minutes", "minutes", False))),
    "queue_depth": ("queue depth over N for T s", (("above", "more than", True), ("for_seconds", "held for (s)", False))),
    "no_agent": ("no agent for a queue for T s", (("for_seconds", "held for (s)", False),)),
    "success_ratio": ("success ratio below X over T minutes",
                      (("below", "below (0-1)", False), ("minutes", "minutes", False), ("min_jobs", "judged from N jobs", True))),
    "paused_itself": ("a schedule paused itself", ()),
}  # fmt: skip
CONDITION_FIELDS = ("times", "above", "minutes", "for_seconds", "below", "min_jobs")
# conditions whose events the core implies (core/api/notify_models.py IMPLIED_EVENTS): the form hides `events`
IMPLIED = frozenset({"failed_times", "success_ratio", "queue_depth", "no_agent", "paused_itself"})


def _number(text: str, field: str, whole: bool) -> int | float:
    try:
        return int(text) if whole else float(text)
    except ValueError:
        what = "a whole number" if whole else "a number"
        raise InvalidInput(f"{field}: {what}, not {text.strip()!r}", field=field) from None


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def channel_spec(kind: str, form: Mapping[str, str]) -> dict[str, Any]:
    """The POST /v1/notifications/channels body for a webhook (name, url) or an email channel (host,
    port, security, username, password, sender, to: addresses separated by commas)."""
    name = form.get("name", "").strip()
    if kind == "webhook":
        return {"kind": "webhook", "name": name, "url": form.get("url", "").strip()}
    if kind != "email":
        raise InvalidInput(f"kind: webhook or email, not {kind!r}", field="kind")
    spec: dict[str, Any] = {
        "kind": "email", "name": name, "host": form.get("host", "").strip(),
        "port": _number(form.get("port", "") or "587", "port", True), "security": form.get("security") or "starttls",
        "sender": form.get("sender", "").strip(), "to": _names(form.get("to", "")),
    }  # fmt: skip
    for secretish in ("username", "password"):
        if form.get(secretish):
            spec[secretish] = form[secretish] if secretish == "password" else form[secretish].strip()
    return spec


def rule_spec(form: Mapping[str, str], channel_ids: Mapping[str, int]) -> dict[str, Any]:
    """The POST /v1/notifications/rules body: name, events (comma list; left out for the conditions
    that imply theirs), condition kind and its numbers, queue filter, channels by name, window."""
    wanted = _names(form.get("channels", ""))
    unknown = [n for n in wanted if n not in channel_ids]
    if unknown or not wanted:
        known = ", ".join(channel_ids) or "(no channels yet)"
        raise InvalidInput(f"channels: name one or more of {known}", field="channels")
    kind = form.get("condition") or "every"
    if kind not in CONDITIONS:
        raise InvalidInput(f"condition: one of {', '.join(CONDITIONS)}", field="condition.kind")
    condition: dict[str, Any] = {"kind": kind}
    for field, _label, whole in CONDITIONS[kind][1]:
        condition[field] = _number(form.get(field, ""), f"condition.{field}", whole)
    spec: dict[str, Any] = {
        "name": form.get("name", "").strip(), "channels": [channel_ids[n] for n in wanted], "condition": condition,
        "window_seconds": _number(form.get("window", "") or "0", "window_seconds", False),
    }  # fmt: skip
    events = [] if kind in IMPLIED else _names(form.get("events", ""))
    if events:
        spec["events"] = events
    if form.get("queue", "").strip():
        spec["filters"] = {"queue": form["queue"].strip()}
    return spec
