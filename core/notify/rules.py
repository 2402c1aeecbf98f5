"""Alert rules: which events a rule is about, and its suppression window. Pure, like its conditions
(core/notify/conditions.py); the notify sink (core/notify/service.py) feeds them and writes what comes out.

A rule names event types and optional filters (queue, job name prefix, tag, schedule). Within its
`window_seconds` after an alert, further alerts are counted, not sent; when the window closes with
a count, one summary says how many were suppressed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The events a rule may name (what the engine writes; notify.* are the notifier's own and never match).
EVENT_TYPES = (
    "job.created", "job.scheduled", "job.queued", "job.running", "job.succeeded", "job.failed", "job.dead",
    "job.cancelled", "job.paused", "job.blocked", "job.priority", "job.cancel_requested",
    "schedule.created", "schedule.updated", "schedule.deleted", "schedule.paused", "schedule.resumed",
    "schedule.fired", "schedule.missed", "schedule.skipped", "schedule.cancelled_previous",
    "queue.paused", "queue.resumed", "queue.updated",
    "agent.connected", "agent.disconnected", "agent.draining", "agent.drain", "agent.status",
    "workflow.created", "workflow.succeeded", "workflow.failed", "workflow.cancelled",
)  # fmt: skip
SEVERITY = {"job.dead": "critical", "job.failed": "warning", "agent.disconnected": "warning"}


@dataclass(frozen=True, slots=True)
class Alert:
    """Something to tell a rule's channels: an alert, a summary of suppressed ones, or a resolve notice."""

    rule_id: int | None
    rule_name: str | None
    kind: str  # alert | summary | resolved | channel_disabled
    title: str
    text: str
    severity: str
    key: str  # what the alert is about, unique per rule (a message id is made of it)
    event: dict[str, Any] | None = None
    channels: tuple[int, ...] = ()  # () : every enabled channel (the notifier's own alerts)
    exclude: tuple[int, ...] = ()
    queue: str | None = None  # the queue it is about (its feed event is shown to who sees the queue)


@dataclass
class Window:
    """A rule's suppression state: when its last alert went out and how many matched since."""

    sent_at: float
    suppressed: int = 0
    last_event: dict[str, Any] | None = None


@dataclass
class RuleState:
    """What the evaluator remembers of one rule between events (kept in the store)."""

    window: Window | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # The last event seq applied. The state is saved in the transaction that writes what those
    # events raised, and the relay's cursor moves later: a round repeated after a crash brings
    # events this state has counted already, and they must not count twice (a window's
    # "N suppressed", a failure count).
    seq: int = 0


def job_of(event: dict[str, Any]) -> dict[str, Any]:
    data = event.get("data") or {}
    job = data.get("job")
    return job if isinstance(job, dict) else {}


def matches(spec: dict[str, Any], event: dict[str, Any]) -> bool:
    """Whether an event (its feed JSON) is one the rule is about."""
    if event.get("type") not in spec.get("events", ()):
        return False
    f = spec.get("filters") or {}
    job = job_of(event)
    data = event.get("data") or {}
    if f.get("queue") is not None and (event.get("queue") or job.get("queue")) != f["queue"]:
        return False
    if f.get("name_prefix") and not str(job.get("name") or "").startswith(f["name_prefix"]):
        return False
    if f.get("tag") is not None and f["tag"] not in (job.get("tags") or ()):
        return False
    if f.get("schedule_id") is not None:
        sid = job.get("schedule_id", data.get("schedule_id", (data.get("schedule") or {}).get("id")))
        if sid != f["schedule_id"]:
            return False
    if f.get("workflow_id") is not None:
        wid = job.get("workflow_id", (data.get("workflow") or {}).get("id"))
        if wid != f["workflow_id"]:
            return False
    return True


def describe(event: dict[str, Any]) -> tuple[str, str]:
    """A title and a line of text for an event, as a person reads them in an alert."""
    job = job_of(event)
    data = event.get("data") or {}
    t = event.get("type", "")
    if job:
        title = f"{t}: job {job.get('id')} {job.get('name')!s} in {job.get('queue')}"
        bits = [f"attempt {job.get('attempt')} of {job.get('max_attempts')}"]
        if data.get("error"):
            bits.append(f"error: {str(data['error'])[:300]}")
        return title, "; ".join(bits)
    if t in ("schedule.missed", "schedule.skipped") and data.get("schedule_id") is not None:
        n, what = data.get("count", 0), "missed" if t == "schedule.missed" else "skipped"
        policy = f"catch-up {data.get('catch_up')}" if t == "schedule.missed" else f"overlap {data.get('overlap')}"
        title = f"schedule {data['schedule_id']} {what} {n} fire time{'s' if n != 1 else ''} ({policy})"
        times = ", ".join(str(x) for x in (data.get("fire_times") or [])[:5])
        return title, f"{what}: {times}" + (" ..." if n > 5 else "") if times else title
    return t, ", ".join(f"{k}: {v}" for k, v in data.items() if not isinstance(v, dict | list))[:500] or t


def close_window(rule: dict[str, Any], state: RuleState, now: float) -> list[Alert]:
    """The summary of a window that has closed with suppressed matches (and forget the window)."""
    w = state.window
    if w is None or now < w.sent_at + float(rule["spec"].get("window_seconds", 0)):
        return []
    state.window = None
    if not w.suppressed:
        return []
    n = w.suppressed
    title = f"{rule['name']}: {n} more alert{'s' if n != 1 else ''} suppressed"
    text = f"{n} more event{'s' if n != 1 else ''} matched rule {rule['name']!r} in its {rule['spec'].get('window_seconds')} s window"
    if w.last_event is not None:
        text += f"; the last: {describe(w.last_event)[0]}"
    return [Alert(rule["id"], rule["name"], "summary", title, text, "info", f"s{int(w.sent_at * 1000)}",
                  w.last_event, tuple(rule["spec"].get("channels", ())),
                  queue=(rule["spec"].get("filters") or {}).get("queue"))]  # fmt: skip


def state_to_dict(state: RuleState) -> dict[str, Any]:
    w = state.window
    win = None if w is None else {"sent_at": w.sent_at, "suppressed": w.suppressed, "last_event": w.last_event}
    return {"window": win, **state.extra, "seq": state.seq}


def state_from_dict(raw: dict[str, Any]) -> RuleState:
    w = raw.get("window")
    extra = {k: v for k, v in raw.items() if k not in ("window", "seq")}
    seq = int(raw.get("seq") or 0)
    if not w:
        return RuleState(None, extra, seq)
    return RuleState(Window(float(w["sent_at"]), int(w.get("suppressed", 0)), w.get("last_event")), extra, seq)
