"""A rule's condition over time: pure functions of (rule, its state, an event or the facts, now).

- `every` (default): each matching event alerts;
- `failed_times` {times}: a job's matching event once its attempt number reaches `times`;
- `count` {above, minutes}: more than `above` matching events within `minutes` (dead jobs over N in T);
- `queue_depth` {above, for_seconds}: a queue with more than `above` jobs waiting for `for_seconds`;
- `no_agent` {for_seconds}: a queue with waiting jobs and no connected agent serving it for that long;
- `success_ratio` {below, minutes, min_jobs}: succeeded / finished over `minutes` under `below`;
- `paused_itself`: a schedule paused itself (N dead runs in a row: its `schedule.paused` event
  carries the reason; a person's pause carries none and does not alert).

The last four are levels: they alert once when the condition starts to hold and send a resolve
notice when it clears. Every alert passes the rule's suppression window (core/notify/rules.py):
within `window_seconds` of the last alert, further alerts are counted and summed up when it closes.
"""

from __future__ import annotations

import fnmatch
import math
from typing import Any

from core.notify.rules import SEVERITY, Alert, RuleState, Window, close_window, describe, job_of, matches

CONDITIONS = ("every", "failed_times", "count", "queue_depth", "no_agent", "success_ratio", "paused_itself")
LEVELS = frozenset({"count", "queue_depth", "no_agent", "success_ratio"})
NEEDS_FACTS = frozenset({"queue_depth", "no_agent"})
OK_EVENTS = frozenset({"job.succeeded"})
BAD_EVENTS = frozenset({"job.dead", "job.failed"})


def condition_of(spec: dict[str, Any]) -> dict[str, Any]:
    return spec.get("condition") or {"kind": "every"}


def raise_alert(rule: dict[str, Any], state: RuleState, now: float, title: str, text: str, severity: str, key: str,
                event: dict[str, Any] | None, queue: str | None = None) -> list[Alert]:  # fmt: skip
    """One alert through the rule's suppression window: sent, or counted for the window's summary."""
    spec = rule["spec"]
    window = float(spec.get("window_seconds", 0))
    w = state.window
    if w is not None and now < w.sent_at + window:
        w.suppressed += 1
        w.last_event = event
        return []
    out = close_window(rule, state, now) if w is not None else []
    state.window = Window(now) if window > 0 else None
    if queue is None:
        queue = (event or {}).get("queue") or (spec.get("filters") or {}).get("queue")
    out.append(Alert(rule["id"], rule["name"], "alert", title, text, severity, key, event, tuple(spec["channels"]),
                     queue=queue))  # fmt: skip
    return out


def on_event(rule: dict[str, Any], state: RuleState, event: dict[str, Any], now: float) -> list[Alert]:
    """The alerts one committed event raises for one rule."""
    spec = rule["spec"]
    if not rule["enabled"] or not matches(spec, event):
        return []
    cond = condition_of(spec)
    kind = cond["kind"]
    if kind in ("every", "failed_times"):
        if kind == "failed_times" and int(job_of(event).get("attempt") or 0) < int(cond["times"]):
            return []
        title, text = describe(event)
        return raise_alert(rule, state, now, title, text, SEVERITY.get(event.get("type", ""), "info"),
                           f"e{event.get('seq')}", event)  # fmt: skip
    if kind == "paused_itself":
        data = event.get("data") or {}
        if event.get("type") != "schedule.paused" or not data.get("reason"):
            return []
        sched = data.get("schedule") or {}
        title = f"schedule {sched.get('id')} {sched.get('name')!s} paused itself"
        text = f"{data['reason']} (POST /v1/schedules/{sched.get('id')}/resume)"
        return raise_alert(rule, state, now, title, text, "critical", f"e{event.get('seq')}", event)
    if kind == "count":
        times: list[float] = state.extra.setdefault("times", [])
        times.append(now)
        del times[: max(0, len(times) - int(cond["above"]) - 1)]
        state.extra["last_event"] = event
        return _count_level(rule, state, cond, now)
    if kind == "success_ratio":
        t = event.get("type")
        if t in OK_EVENTS or t in BAD_EVENTS:
            buckets: dict[str, list[int]] = state.extra.setdefault("buckets", {})
            b = buckets.setdefault(str(int(now // 60)), [0, 0])
            b[0] += t in OK_EVENTS
            b[1] += 1
    return []


def on_tick(rule: dict[str, Any], state: RuleState, facts: dict[str, Any] | None, now: float) -> list[Alert]:
    """What time alone changes for one rule: windows that closed, levels that began or cleared."""
    out = close_window(rule, state, now)
    if not rule["enabled"]:
        return out
    cond = condition_of(rule["spec"])
    kind = cond["kind"]
    if kind == "count":
        out += _count_level(rule, state, cond, now)
    elif kind == "success_ratio":
        out += _ratio_level(rule, state, cond, now)
    elif kind in NEEDS_FACTS and facts is not None:
        out += _queue_levels(rule, state, cond, facts, now)
    return out


def _level(rule: dict[str, Any], state: RuleState, key: str, bad: bool, hold: float, now: float, title: str,
           text: str, event: dict[str, Any] | None = None, queue: str | None = None) -> list[Alert]:  # fmt: skip
    """A level condition's transitions: an alert once it has held for `hold` s, a notice when it clears."""
    levels: dict[str, dict[str, Any]] = state.extra.setdefault("levels", {})
    lv = levels.get(key)
    if bad:
        if lv is None:
            lv = levels[key] = {"since": now, "firing": False, "alerted": False, "title": title}
        if not lv["firing"] and now - lv["since"] >= hold:
            lv["firing"], lv["title"] = True, title
            got = raise_alert(rule, state, now, title, text, "warning", f"{key}@{int(now * 1000)}", event, queue)
            lv["alerted"] = any(a.kind == "alert" for a in got)
            return got
        return []
    if lv is None:
        return []
    del levels[key]
    if not (lv["firing"] and lv["alerted"]):
        return []  # never alerted (still holding off, or suppressed): nothing to resolve
    since = now - float(lv["since"])
    return [Alert(rule["id"], rule["name"], "resolved", f"resolved: {lv['title']}",
                  f"the condition of rule {rule['name']!r} cleared after {since:.0f} s", "info",
                  f"r{key}@{int(now * 1000)}", None, tuple(rule["spec"]["channels"]),
                  queue=queue or (rule["spec"].get("filters") or {}).get("queue"))]  # fmt: skip


def _count_level(rule: dict[str, Any], state: RuleState, cond: dict[str, Any], now: float) -> list[Alert]:
    above, minutes = int(cond["above"]), float(cond["minutes"])
    times: list[float] = state.extra.get("times", [])
    span = minutes * 60
    times[:] = [t for t in times if t > now - span]
    bad = len(times) > above
    what = " or ".join(rule["spec"].get("events", ())) or "events"
    title = f"{rule['name']}: more than {above} {what} in {minutes:g} min"
    return _level(rule, state, "count", bad, 0.0, now, title, f"{len(times)} within {minutes:g} min",
                  state.extra.get("last_event"))  # fmt: skip


def _ratio_level(rule: dict[str, Any], state: RuleState, cond: dict[str, Any], now: float) -> list[Alert]:
    minutes, below, least = float(cond["minutes"]), float(cond["below"]), int(cond.get("min_jobs", 10))
    first = int((now - minutes * 60) // 60)
    buckets: dict[str, list[int]] = state.extra.get("buckets", {})
    for k in [k for k in buckets if int(k) <= first]:
        del buckets[k]
    ok = sum(b[0] for b in buckets.values())
    total = sum(b[1] for b in buckets.values())
    ratio = ok / total if total else 1.0
    bad = total >= least and ratio < below
    title = f"{rule['name']}: {ratio:.0%} of {total} jobs succeeded in {minutes:g} min (below {below:.0%})"
    return _level(rule, state, "ratio", bad, 0.0, now, title, f"{ok} succeeded, {total - ok} failed or dead")


def serves(agent: dict[str, Any], queue: str) -> bool:
    """Whether a connected agent takes jobs of `queue` (its queue patterns, '*' for all)."""
    return any(p == "*" or p == queue or fnmatch.fnmatchcase(queue, p) for p in agent.get("queues") or ())


def _queue_levels(rule: dict[str, Any], state: RuleState, cond: dict[str, Any], facts: dict[str, Any],
                  now: float) -> list[Alert]:  # fmt: skip
    want = (rule["spec"].get("filters") or {}).get("queue")
    hold = float(cond.get("for_seconds", 0))
    out: list[Alert] = []
    seen = set()
    for q in facts.get("queues", ()):
        name, depth = q["name"], int(q.get("depth", 0))
        if want is not None and name != want:
            continue
        seen.add(name)
        if cond["kind"] == "queue_depth":
            above = int(cond["above"])
            title = f"queue {name}: more than {above} jobs waiting for {hold:g} s"
            out += _level(rule, state, f"q:{name}", depth > above, hold, now, title, f"{depth} waiting now",
                          queue=name)  # fmt: skip
        else:
            live = [a for a in facts.get("agents", ()) if serves(a, name) and not a.get("draining")]
            title = f"queue {name}: no agent has served it for {hold:g} s"
            out += _level(rule, state, f"q:{name}", depth > 0 and not live, hold, now, title,
                          f"{depth} jobs waiting and no connected agent takes queue {name}", queue=name)  # fmt: skip
    for key in [k for k in state.extra.get("levels", {}) if k.startswith("q:") and k[2:] not in seen]:
        out += _level(rule, state, key, False, hold, now, "", "", queue=key[2:])  # the queue is gone: cleared
    return out


def next_check(rule: dict[str, Any]) -> float:
    """How often (s) the rule's time condition is worth checking."""
    cond = condition_of(rule["spec"])
    return 5.0 if cond["kind"] in NEEDS_FACTS else 1.0 if cond["kind"] in LEVELS else math.inf
