"""How the CLI shows things to people: tables, one-line summaries, details (or JSON with --json)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from core import timetext

JOB_COLUMNS = (("id", 8), ("name", 28), ("queue", 12), ("state", 10), ("priority", 8), ("attempt", 7), ("run_at", 24))
# The zone times are shown in: this machine's (the default) or UTC (`--utc`); always with its abbreviation.
VIEWER = timetext.zone("local")


def view_in(zone_name: str) -> None:
    """Show times in `zone_name` ("local" or "UTC") from now on."""
    global VIEWER
    VIEWER = timetext.zone(zone_name)


def when(value: Any) -> str:
    """An API time in the viewer's zone, with its abbreviation: 2026-12-01 10:42:07 CET."""
    return timetext.stamp(value, VIEWER)


def second_zone(first: Any) -> Any:
    """The zone to show beside one of a schedule's times: the viewer's, or UTC when that is the same."""
    return timetext.zone("UTC") if str(first) == str(VIEWER) else VIEWER


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, int]]) -> str:
    def cell(v: Any, w: int) -> str:
        if v is None:
            s = "-"
        elif isinstance(v, bool):
            s = "yes" if v else "no"
        elif isinstance(v, dict):
            s = ",".join(f"{k}={x}" for k, x in v.items()) or "-"
        elif isinstance(v, (list, tuple)):
            s = ",".join(map(str, v)) or "-"
        elif isinstance(v, str) and len(v) >= 25 and v[10] == "T" and v[4] == v[7] == "-":
            s = when(v)  # an API time: in the viewer's zone, to the second, with the zone's abbreviation
        else:
            s = str(v)
        return (s if len(s) <= w else s[: w - 1] + "…").ljust(w)

    lines = ["  ".join(cell(c.upper(), w) for c, w in columns).rstrip()]
    lines += ["  ".join(cell(r.get(c), w) for c, w in columns).rstrip() for r in rows]
    return "\n".join(lines)


def show(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> None:
    if args.json:
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(human(data))


def job_line(j: dict[str, Any]) -> str:
    notes = [
        "cancel requested" if j.get("cancel_requested") else "",
        f"waiting: {j['waiting_for']}" if j.get("waiting_for") else "",
        _deduplicated(j),
    ]
    extra = "; ".join(n for n in notes if n)
    return f"job {j['id']} {j['name']!r} on queue {j['queue']}: {j['state']}" + (f" ({extra})" if extra else "")


def _deduplicated(j: dict[str, Any]) -> str:
    if not j.get("deduplicated"):
        return ""
    if j.get("deduplicated_by") == "unique":
        return f"not submitted: this job holds the unique key {(j.get('unique') or {}).get('key')!r}"
    return "an earlier job with this idempotency key"


def job_detail(data: dict[str, Any]) -> str:
    j, attempts = data["job"], data["attempts"]
    out = [job_line(j)]
    for k in ("priority", "attempt", "max_attempts", "run_at", "created_at", "started_at", "finished_at", "timeout",
              "agent", "last_error", "result", "tags"):  # fmt: skip
        if j.get(k) not in (None, [], ""):
            out.append(f"  {k:<13} {when(j[k]) if k.endswith('_at') else j[k]}")
    out.append(f"  {'task':<13} {orjson.dumps(j['task']).decode()}")
    for a in attempts:
        out.append(
            f"\nattempt {a['attempt']}: {a['outcome']} on {a['agent']}" + (f" — {a['error']}" if a["error"] else "")
        )
        if a.get("output"):
            out += ["  | " + line for line in a["output"].rstrip("\n").splitlines()[-40:]]
    return "\n".join(out)


BREAKER_COLUMNS = (("queue", 16), ("host", 24), ("state", 9), ("mode", 4), ("window", 26), ("opened", 6),
                   ("retry_at", 32))  # fmt: skip
QUEUE_COLUMNS = (("name", 20), ("paused", 6), ("concurrency", 11), ("rate_limit", 10), ("rate_burst", 10),
                 ("key_concurrency", 15), ("fair", 4), ("depth", 8), ("running", 8), ("scheduled", 9))  # fmt: skip


SCHEDULE_COLUMNS = (
    ("id", 5),
    ("name", 24),
    ("kind", 8),
    ("cron", 16),
    ("interval", 8),
    ("timezone", 16),
    ("paused", 6),
    ("next_fire_at", 24),
)


def schedule_time(s: dict[str, Any], value: Any) -> str:
    """One of a schedule's times in its own zone, and the viewer's (or UTC) beside it."""
    tz = timetext.zone(s["timezone"])
    return timetext.in_two_zones(value, tz, second_zone(tz))


def schedule_row(s: dict[str, Any]) -> dict[str, Any]:
    """A schedule for SCHEDULE_COLUMNS: its next fire time in its own zone."""
    return {**s, "next_fire_at": timetext.stamp(s["next_fire_at"], timetext.zone(s["timezone"]))}


def schedule_line(s: dict[str, Any]) -> str:
    every = s["cron"] or (f"every {s['interval']:g} s" if s["interval"] else f"once at {schedule_time(s, s['at'])}")
    nxt = schedule_time(s, s["next_fire_at"]) if s["next_fire_at"] else "never (no time left)"
    state = "paused" if s["paused"] else f"next fire {nxt}"
    return f"schedule {s['id']} {s['name']!r} ({every}, {s['timezone']}): {state}"


def schedule_detail(s: dict[str, Any]) -> str:
    lines = [schedule_line(s)]
    if s.get("paused_reason"):
        lines.append(f"  {'paused':<13} {s['paused_reason']}")
    for k in ("last_fire_at", "fired", "skipped", "missed", "failures", "created_at"):
        value = (
            s.get(k, "-")
            if k in ("fired", "skipped", "missed", "failures")
            else (schedule_time(s, s[k]) if s[k] else "-")
        )
        lines.append(f"  {k:<13} {value}")
    if "overlap" in s:
        policies = f"overlap {s['overlap']}, catch_up {s['catch_up']} (window {s['catch_up_window']:g} s)"
        if s.get("jitter"):
            policies += f", jitter {s['jitter']:g} s"
        if s.get("pause_after_failures"):
            policies += f", pause after {s['pause_after_failures']} failures"
        lines.append(f"  {'policies':<13} {policies}")
        excluded = [*s.get("exclude_dates", []), *([f"cron {s['exclude_cron']!r}"] if s.get("exclude_cron") else [])]
        if excluded:
            lines.append(f"  {'excluded':<13} {', '.join(excluded)}")
    if s.get("workflow"):
        wf = s["workflow"]
        lines.append(f"  {'workflow':<13} {wf['name']!r}: {len(wf['jobs'])} jobs ({', '.join(j['ref'] for j in wf['jobs'][:8])}"
                     f"{' ...' if len(wf['jobs']) > 8 else ''})")  # fmt: skip
    else:
        lines.append(f"  {'job':<13} {orjson.dumps(s['job']).decode()}")
    return "\n".join(lines)


def event_line(e: dict[str, Any]) -> str:
    d = e.get("data") or {}
    job = d.get("job")
    what = job_line(job) if job else orjson.dumps(d).decode()[:160]
    extra = f" — {d['error']}" if d.get("error") else ""
    return f"{e['seq']:>8}  {timetext.stamp(e['ts'], VIEWER, date=False)}  {e['type']:<22} {what}{extra}"


AGENT_COLUMNS = (("name", 24), ("host", 14), ("slots", 6), ("slots_used", 10), ("draining", 8),
                 ("heartbeat_age", 13), ("queues", 24), ("labels", 20))  # fmt: skip
