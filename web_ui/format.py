"""How the dashboard words and colours things: times, states, job rows."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

from core import timetext

STATES = ("blocked", "scheduled", "queued", "running", "succeeded", "failed", "dead", "cancelled", "paused")
STATE_COLOR = {
    "blocked": "gray",
    "scheduled": "blue",
    "queued": "cyan",
    "running": "amber",
    "succeeded": "green",
    "failed": "orange",
    "dead": "red",
    "cancelled": "gray",
    "paused": "purple",
}
WAITING = ("scheduled", "queued", "failed", "blocked")
FINISHED = ("succeeded", "dead", "cancelled")


def when(value: Any) -> float | None:
    """A timestamp (ISO 8601 or seconds) as epoch seconds."""
    if value in (None, ""):
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return datetime.fromisoformat(str(value)).timestamp()
    except ValueError:
        return None


def ago(value: Any, now: float | None = None) -> str:
    """'12s ago', 'in 4m05s', '' for no time (core.timetext.duration)."""
    ts = when(value)
    if ts is None:
        return ""
    delta = (now or time.time()) - ts
    future = delta < 0
    text = timetext.duration(abs(delta))
    return f"in {text}" if future else f"{text} ago"


def clock(value: Any, zone: str = "UTC") -> str:
    """A time in `zone` (the viewer's, or a schedule's) with its abbreviation: '2026-12-02 02:00:00 CET'."""
    ts = when(value)
    return "" if ts is None else timetext.stamp(ts, timetext.zone(zone))


def clock_both(value: Any, zone: str, viewer: str) -> str:
    """A time in `zone`, and the viewer's zone (or UTC) beside it when that differs (for a hover)."""
    ts = when(value)
    if ts is None:
        return ""
    first = timetext.zone(zone)
    second = timetext.zone(viewer if viewer != zone else "UTC")
    return timetext.in_two_zones(ts, first, second)


def task_text(task: dict[str, Any]) -> str:
    """A task in one line: the command, URL or function."""
    kind = task.get("kind")
    if kind == "shell":
        return str(task.get("command") or " ".join(task.get("argv") or []))
    if kind == "http":
        return f"{task.get('method', 'GET')} {task.get('url', '')}"
    if kind == "python":
        return str(task.get("function", ""))
    return json.dumps(task)[:120]


NOTE_CHARS = 120  # of a job's waiting_for or last error in a row of the Jobs table


def _cut(text: str, chars: int) -> str:
    """`text` in at most `chars` characters, a cut one ending in '…' (so it does not read as whole)."""
    return text if len(text) <= chars else text[: chars - 1].rstrip() + "…"


def job_row(job: dict[str, Any], refuse: str, zone: str = "UTC") -> dict[str, str]:
    """A job as the Jobs table shows it; `refuse` is why this user may not act on it ('' if they may);
    `zone` is the viewer's (the exact times on hover)."""
    state = str(job.get("state", ""))
    started, finished = when(job.get("started_at")), when(job.get("finished_at"))
    note = str(job.get("waiting_for") or job.get("last_error") or "")
    return {
        "id": str(job["id"]),
        "name": str(job.get("name") or ""),
        "queue": str(job.get("queue") or ""),
        "state": state,
        "color": STATE_COLOR.get(state, "gray"),
        "priority": str(job.get("priority", 0)),
        "attempts": f"{job.get('attempt', 0)}/{job.get('max_attempts', 0)}",
        "created": ago(job.get("created_at")),
        "created_title": clock_both(job.get("created_at"), zone, "UTC"),
        "duration": timetext.duration(finished - started) if started is not None and finished is not None else "",
        "run_at": ago(job.get("run_at")) if state in WAITING else "",
        "agent": str(job.get("agent") or ""),
        "note": _cut(note, NOTE_CHARS),
        "note_title": note if len(note) > NOTE_CHARS else "",  # the whole of a cut note, on hover
        "refuse": refuse,
        "pausable": "1" if state in WAITING and not refuse else "",
        "resumable": "1" if state == "paused" and not refuse else "",
        "cancellable": "1" if state not in FINISHED and not refuse else "",
        "retryable": "1" if state in FINISHED and not refuse else "",
        "runnable": "1" if state in ("scheduled", "failed") and not refuse else "",  # POST /v1/jobs/{id}/run-now
        "prioritisable": "1" if state in (*WAITING, "paused") and not refuse else "",
    }
