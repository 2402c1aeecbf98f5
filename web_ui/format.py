"""How the dashboard words and colours things: times, states, job rows."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

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
    """'12s ago', 'in 3m', '' for no time."""
    ts = when(value)
    if ts is None:
        return ""
    delta = (now or time.time()) - ts
    future = delta < 0
    d = abs(delta)
    text = (
        f"{d:.0f}s"
        if d < 60
        else f"{d / 60:.0f}m"
        if d < 3600
        else f"{d / 3600:.1f}h"
        if d < 86400
        else f"{d / 86400:.0f}d"
    )
    return f"in {text}" if future else f"{text} ago"


def clock(value: Any) -> str:
    """A local wall-clock time, 'YYYY-MM-DD HH:MM:SS'."""
    ts = when(value)
    return "" if ts is None else datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


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


def job_row(job: dict[str, Any], refuse: str) -> dict[str, str]:
    """A job as the Jobs table shows it; `refuse` is why this user may not act on it ('' if they may)."""
    state = str(job.get("state", ""))
    return {
        "id": str(job["id"]),
        "name": str(job.get("name") or ""),
        "queue": str(job.get("queue") or ""),
        "state": state,
        "color": STATE_COLOR.get(state, "gray"),
        "priority": str(job.get("priority", 0)),
        "attempts": f"{job.get('attempt', 0)}/{job.get('max_attempts', 0)}",
        "created": ago(job.get("created_at")),
        "run_at": ago(job.get("run_at")) if state in WAITING else "",
        "agent": str(job.get("agent") or ""),
        "note": str(job.get("waiting_for") or job.get("last_error") or "")[:120],
        "refuse": refuse,
        "pausable": "1" if state in WAITING and not refuse else "",
        "resumable": "1" if state == "paused" and not refuse else "",
        "cancellable": "1" if state not in FINISHED and not refuse else "",
        "retryable": "1" if state in FINISHED and not refuse else "",
        "prioritisable": "1" if state in (*WAITING, "paused") and not refuse else "",
    }
