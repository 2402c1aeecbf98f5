"""Commands that talk to a running node through core.client: submit, jobs, queues, schedules, events."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import orjson

from core import timetext
from core.auth.credentials import token_for
from core.breaker import BreakerSettings
from core.cli.output import (
    AGENT_COLUMNS,
    BREAKER_COLUMNS,
    JOB_COLUMNS,
    QUEUE_COLUMNS,
    SCHEDULE_COLUMNS,
    event_line,
    job_detail,
    job_line,
    schedule_detail,
    schedule_line,
    schedule_row,
    schedule_time,
    second_zone,
    show,
    table,
)
from core.client import JobDeckClient, agent_queues_text, breaker_window_text, key_limit_text
from core.errors import JobDeckError
from core.flow import default_burst, rate_text


def _pairs(items: list[str] | None, sep: str, flag: str) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, found, value = item.partition(sep)
        if not found or not key.strip():
            raise JobDeckError(f"{flag} {item!r} must look like NAME{sep}VALUE")
        out[key.strip()] = value.strip() if sep == ":" else value
    return out


def _job_spec(args: argparse.Namespace) -> dict[str, Any]:
    kinds = [k for k, given in (("-- COMMAND", args.argv), ("--sh", args.sh), ("--http", args.http),
                                ("--python", args.python)) if given]  # fmt: skip
    if len(kinds) > 1:
        raise JobDeckError(f"say one thing to run, not {' and '.join(kinds)}")
    if args.http:
        task: dict[str, Any] = {"kind": "http", "method": args.method, "url": args.http}
        if args.header:
            task["headers"] = _pairs(args.header, ":", "--header")
        if args.body is not None:
            task["body"] = args.body
    elif args.python:
        task = {"kind": "python", "function": args.python, "args": _json_arg(args.args, "--args", list),
                "kwargs": _json_arg(args.kwargs, "--kwargs", dict)}  # fmt: skip
    elif args.sh:
        task = {"kind": "shell", "command": args.sh}
    elif args.argv:
        task = {"kind": "shell", "argv": args.argv}
    else:
        raise JobDeckError(
            "say what to run: `-- COMMAND ARGS`, --sh 'shell string', --http URL or --python module:function"
        )
    if args.env or args.env_secret:
        secrets = {k: {"secret": v} for k, v in _pairs(args.env_secret, "=", "--env-secret").items()}
        task["env"] = {**_pairs(args.env, "=", "--env"), **secrets}
    if args.cwd:
        task["cwd"] = args.cwd
    spec: dict[str, Any] = {"task": task}
    if args.job_name:
        spec["name"] = args.job_name
    for key in ("queue", "priority", "max_attempts", "timeout", "idempotency_key", "concurrency_key", "fairness_key"):
        if getattr(args, key, None) is not None:
            spec[key] = getattr(args, key)
    if getattr(args, "unique", None):
        window = getattr(args, "unique_window", None)
        spec["unique"] = {"key": args.unique, "scope": "active" if window is None else "window"}
        if window is not None:
            spec["unique"]["seconds"] = window
    elif getattr(args, "unique_window", None) is not None:
        raise JobDeckError("--unique-window needs --unique KEY: the key the window holds", field="unique")
    if args.tag:
        spec["tags"] = args.tag
    if args.label:
        spec["labels"] = _pairs(args.label, "=", "--label")
    return spec


def _json_arg(raw: str | None, flag: str, kind: type) -> Any:
    if raw is None:
        return kind()
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise JobDeckError(f"{flag} is not valid JSON: {exc}") from None
    if not isinstance(value, kind):
        raise JobDeckError(f"{flag} must be a JSON {'array' if kind is list else 'object'}")
    return value


def add_job_flags(p: argparse.ArgumentParser, name_flag: str = "--name") -> None:
    g = p.add_argument_group("what to run (one of)")
    g.add_argument("argv", nargs="*", help="a command and its arguments, after --")
    g.add_argument("--sh", metavar="STRING", help="a /bin/sh command string")
    g.add_argument("--http", metavar="URL", help="send an HTTP request")
    g.add_argument("--python", metavar="MODULE:FUNCTION", help="call a Python function")
    p.add_argument("--method", default="GET", help="HTTP method (with --http)")
    p.add_argument("--header", action="append", metavar="NAME:VALUE", help="HTTP header (repeatable)")
    p.add_argument("--body", help="HTTP body (with --http)")
    p.add_argument("--args", help="JSON array of arguments (with --python)")
    p.add_argument("--kwargs", help="JSON object of keyword arguments (with --python)")
    p.add_argument("--env", action="append", metavar="NAME=VALUE",
                   help="environment variable (repeatable; stored with the job: anyone who can read it sees it)")  # fmt: skip
    p.add_argument("--env-secret", action="append", dest="env_secret", metavar="NAME=SECRET",
                   help="environment variable set to the agent's secret SECRET (repeatable; only the name is stored)")  # fmt: skip
    p.add_argument("--cwd", help="working directory of the command")
    p.add_argument(name_flag, dest="job_name", help="job name (default: from the command)")
    p.add_argument("--queue")
    p.add_argument("--priority", type=int, help="higher runs first (-1000..1000, default 0)")
    p.add_argument("--max-attempts", type=int, dest="max_attempts")
    p.add_argument("--timeout", type=float, help="seconds before the run is killed")
    p.add_argument("--tag", action="append", help="a tag (repeatable)")
    p.add_argument(
        "--label", action="append", metavar="KEY=VALUE", help="only agents with this label run it (repeatable)"
    )
    p.add_argument("--concurrency-key", dest="concurrency_key", metavar="KEY",
                   help="e.g. a customer id: the queue's key limit caps its jobs of one key running at once")  # fmt: skip
    p.add_argument("--fairness-key", dest="fairness_key", metavar="KEY",
                   help="e.g. a tenant id: the queue's claims rotate between keys")  # fmt: skip


async def run_remote(args: argparse.Namespace) -> int:
    token = await token_for(args.server)
    async with JobDeckClient(args.server, token=token, ca_file=getattr(args, "ca_file", None)) as c:
        return int(await args.run(c, args))


async def cmd_submit(c: JobDeckClient, args: argparse.Namespace) -> int:
    spec = _job_spec(args)
    if args.at:
        spec["run_at"] = args.at
    if args.delay is not None:
        spec["delay"] = args.delay
    if args.depends_on:
        spec["depends_on"] = args.depends_on
    if args.on_parent_failure:
        spec["on_parent_failure"] = args.on_parent_failure
    job = await c.submit(spec)
    if not args.wait:
        show(args, job, job_line)
        return 0
    if not args.json:
        print(job_line(job), flush=True)
    try:
        job = await c.wait_for(job["id"], timeout=args.wait_timeout)
    except TimeoutError:
        now = await c.get_job(job["id"])
        raise JobDeckError(
            f"job {job['id']} did not finish within {args.wait_timeout:g} s; it is {now['state']} "
            f"(follow it with: {getattr(args, 'prog', 'jobdeck')} jobs tail {job['id']})"
        ) from None
    attempts = await c.attempts(job["id"])
    show(args, {"job": job, "attempts": attempts}, job_detail)
    return 0 if job["state"] == "succeeded" else 1


async def cmd_jobs_ls(c: JobDeckClient, args: argparse.Namespace) -> int:
    page = await c.list_jobs(state=args.state, queue=args.queue, name_prefix=args.name, tag=args.tag,
                             limit=args.limit, cursor=args.cursor)  # fmt: skip

    def human(p: dict[str, Any]) -> str:
        text = table(p["jobs"], JOB_COLUMNS)
        return text + (f"\nmore: --cursor {p['next_cursor']}" if p["next_cursor"] else "")

    show(args, page, human)
    return 0


async def cmd_jobs_show(c: JobDeckClient, args: argparse.Namespace) -> int:
    data = {"job": await c.get_job(args.id), "attempts": await c.attempts(args.id)}
    show(args, data, job_detail)
    return 0


async def cmd_jobs_action(c: JobDeckClient, args: argparse.Namespace) -> int:
    failed = 0
    results = []
    for job_id in args.ids:
        try:
            results.append(await c.job_action(job_id, args.action))
        except JobDeckError as exc:
            failed += 1
            print(f"error: {exc.message}", file=sys.stderr)
    if results:
        show(args, results if len(results) > 1 else results[0],
               lambda r: "\n".join(job_line(j) for j in (r if isinstance(r, list) else [r])))  # fmt: skip
    return 1 if failed else 0


FINAL = ("succeeded", "dead", "cancelled")


async def cmd_jobs_tail(c: JobDeckClient, args: argparse.Namespace) -> int:
    """Print a job's output and follow it live until the job ends (like tail -f)."""
    since = (await c.health())["last_seq"]
    current = await c.output(args.id)
    sys.stdout.write(current["output"])
    sys.stdout.flush()
    if current["state"] in FINAL:
        return 0 if current["state"] == "succeeded" else 1
    async for e in c.events(since=since, job_ids=[args.id], types=["job.output", "job.*"]):
        if e["type"] == "job.output":
            sys.stdout.write(e["data"]["text"])
            sys.stdout.flush()
            continue
        state = (e.get("data") or {}).get("job", {}).get("state")
        if state in FINAL or state == "failed":
            print(
                f"\n[job {args.id} {state}" + (f": {e['data'].get('error')}" if e["data"].get("error") else "") + "]",
                file=sys.stderr,
            )
            if state in FINAL:
                return 0 if state == "succeeded" else 1
    return 0


async def cmd_jobs_priority(c: JobDeckClient, args: argparse.Namespace) -> int:
    job = await c.set_priority(args.id, args.priority)
    show(args, job, lambda j: job_line(j) + f", priority {j['priority']}")
    return 0


async def cmd_queues(c: JobDeckClient, args: argparse.Namespace) -> int:
    action = getattr(args, "queue_action", None) or "ls"
    if action == "ls":
        show(args, await c.queues(), lambda qs: table(qs, QUEUE_COLUMNS))
    elif action in ("pause", "resume"):
        show(
            args,
            await c.queue_action(args.name, action),
            lambda q: f"queue {q['name']}: {'paused' if q['paused'] else 'running'}",
        )
    elif action == "keys":
        settings: dict[str, Any] = {}
        if args.limit is not None:
            settings["key_concurrency"] = _limit_arg(args.limit, "the key limit")
        if args.weight:
            settings["fairness_weights"] = {k: _weight(v) for k, v in _pairs(args.weight, "=", "--weight").items()}
        if args.fair is not None:
            settings["fair"] = args.fair == "on"
        if not settings:  # nothing to change: what the keys use now
            named = [q for q in await c.queues() if q["name"] == args.name]
            if not named:
                raise JobDeckError(f"no queue named {args.name!r}", field="name")
            show(args, await c.queue_keys(args.name), lambda u: key_usage_text(named[0], u))
            return 0
        show(args, await c.update_queue(args.name, **settings), keys_line)
    elif action == "breaker":
        show(args, await c.update_queue(args.name, **_breaker_args(args)), breaker_line)
    elif action == "rate":
        rate = parse_rate(args.rate)
        changes: dict[str, Any] = {"rate_limit": rate}
        if args.burst is not None or rate is None:
            changes["rate_burst"] = args.burst
        show(args, await c.update_queue(args.name, **changes), lambda q: rate_line(q, args))
    else:
        if args.limit.lower() in ("none", "off", "unlimited"):
            limit = None
        elif args.limit.isdigit():
            limit = int(args.limit)
        else:
            raise JobDeckError(f"concurrency must be a number or 'none', not {args.limit!r}")
        show(args, await c.set_concurrency(args.name, limit), lambda q: concurrency_line(q, args))
    return 0


async def cmd_breakers(c: JobDeckClient, args: argparse.Namespace) -> int:
    if getattr(args, "breaker_action", None) == "reset":
        b = await c.reset_breaker(args.queue, args.host)
        show(args, b, lambda b: f"breaker of {b['host']} in queue {b['queue']}: {b['state']}; the jobs it held go now")
        return 0
    show(args, await c.breakers(), breakers_text)
    return 0


def breakers_text(breakers: list[dict[str, Any]]) -> str:
    """Breakers as a table, with why the open ones hold their jobs."""
    if not breakers:
        return "no circuit breakers yet: a queue gets one per host its http jobs call"
    rows = [{**b, "window": breaker_window_text(b), "opened": b["times_opened"]} for b in breakers]
    out = [table(rows, BREAKER_COLUMNS)]
    out += [f"  {b['queue']} {b['host']}: {b['reason']}" for b in breakers if b["reason"]]
    return "\n".join(out)


_BREAKER_FLAGS = (("ratio", "breaker_failure_ratio", float), ("window", "breaker_window", float),
                  ("reset", "breaker_reset", float), ("min_requests", "breaker_min_requests", int))  # fmt: skip


def _breaker_args(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if args.mode is not None:
        changes["breaker_mode"] = None if args.mode == "default" else args.mode
    for flag, name, kind in _BREAKER_FLAGS:
        text = getattr(args, flag)
        if text is None:
            continue
        if text.lower() == "default":
            changes[name] = None
            continue
        try:
            changes[name] = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise JobDeckError(f"--{flag.replace('_', '-')} must be {what} or 'default', not {text!r}",
                               field=name) from None  # fmt: skip
    if not changes:
        raise JobDeckError("say what to change: --mode, --ratio, --window, --reset or --min-requests")
    return changes


def breaker_line(q: dict[str, Any]) -> str:
    """A queue's breaker settings in one line."""
    s = BreakerSettings.of(q)
    held = "wait unsent (no attempt used)" if s.mode == "wait" else "fail at once"
    return (f"queue {q['name']}: a host's breaker opens at {s.failure_ratio:.0%} failed of at least {s.min_requests} "
            f"requests within {s.window:g} s, tries again after {s.reset:g} s; while open its jobs {held}")  # fmt: skip


def _second_zone_name(tz_name: str) -> str:
    other = second_zone(timetext.zone(tz_name))
    return "UTC" if str(other) == "UTC" else "your local time"


_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_rate(text: str) -> float | None:
    """'10', '10/s', '600/m', '100/h' as jobs per second; 'none' as None."""
    t = text.strip().lower()
    if t in ("none", "off", "unlimited"):
        return None
    number, _, unit = t.partition("/")
    try:
        value = float(number)
    except ValueError:
        value = float("nan")
    if unit not in ("", *_PER) or not math.isfinite(value) or value <= 0:
        raise JobDeckError(f"rate must be a positive number per second, or N/s, N/m, N/h, or 'none'; not {text!r}",
                           field="rate")  # fmt: skip
    return value / _PER[unit or "s"]


def rate_line(q: dict[str, Any], args: argparse.Namespace) -> str:
    """What a queue's rate limit now means, and how to undo it."""
    if q["rate_limit"] is None:
        return f"queue {q['name']}: no rate limit"
    burst = q["rate_burst"] if q["rate_burst"] is not None else default_burst(q["rate_limit"])
    undo = f"`{getattr(args, 'prog', 'jobdeck')} queues rate {q['name']} none` removes the limit"
    return f"queue {q['name']}: at most {rate_text(q['rate_limit'])} of its jobs start, {burst} at once ({undo})"


def _limit_arg(text: str, what: str) -> int | None:
    if text.lower() in ("none", "off", "unlimited"):
        return None
    if text.isdigit():
        return int(text)
    raise JobDeckError(f"{what} must be a number or 'none', not {text!r}")


def _weight(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value <= 0:
        raise JobDeckError(f"a weight is a positive number, not {text!r}", field="weight")
    return value


def keys_line(q: dict[str, Any]) -> str:
    """A queue's per-key settings in one line."""
    limit = q["key_concurrency"]
    parts = [f"queue {q['name']}:", key_limit_text(limit)]
    parts.append("; claims rotate between fairness keys" if q["fair"] else "; no fair rotation")
    if q["fairness_weights"]:
        parts.append(" (weights " + ", ".join(f"{k}={v:g}" for k, v in sorted(q["fairness_weights"].items())) + ")")
    return " ".join(parts[:2]) + "".join(parts[2:])


def key_usage_text(q: dict[str, Any], u: dict[str, Any]) -> str:
    """A queue's per-key settings, then its running jobs per concurrency key and queued jobs per fairness
    key (GET /v1/queues/{name}/keys), as the console's and the dashboard's panels show them."""
    limit = u["key_concurrency"]
    out = [keys_line(q)]
    running = [{"concurrency_key": r["key"], "running": f"{r['running']}" + ("" if limit is None else f" of {limit}")}
               for r in u["running_by_concurrency_key"]]  # fmt: skip
    out.append(
        table(running, (("concurrency_key", 24), ("running", 10))) if running else "no job with a concurrency key runs"
    )
    if u["more_running_keys"]:
        out.append(f"  (the busiest {len(running)} keys)")
    queued = [{"fairness_key": w["key"], "queued": f"{w['waiting']:,}", "served": f"{w['served']:g}"}
              for w in u["waiting_by_fairness_key"]]  # fmt: skip
    columns = (("fairness_key", 24), ("queued", 10)) + ((("served", 10),) if q["fair"] else ())
    out.append(table(queued, columns) if queued else "no job with a fairness key is queued")
    if u["more_waiting_keys"] or u["waiting_capped"]:
        out.append(f"  (the busiest {len(queued)} keys of the first {u['waiting_counted']:,} queued jobs counted)")
    return "\n".join(out)


def concurrency_line(q: dict[str, Any], args: argparse.Namespace) -> str:
    """What a queue's limit now means, and how to undo it."""
    limit, name = q["concurrency"], q["name"]
    if limit is None:
        return f"queue {name}: no concurrency limit"
    undo = f"`{getattr(args, 'prog', 'jobdeck')} queues concurrency {name} none` removes the limit"
    if limit == 0:
        return f"queue {name}: concurrency 0: none of its jobs start, running ones finish ({undo})"
    return f"queue {name}: at most {limit} of its jobs run at once ({undo})"


_POLICY_FLAGS = ("overlap", "catch_up", "catch_up_window", "jitter", "pause_after_failures", "exclude_dates",
                 "exclude_cron")  # fmt: skip


def _policy_flags(args: argparse.Namespace) -> dict[str, Any]:
    return {k: getattr(args, k) for k in _POLICY_FLAGS if getattr(args, k, None) is not None}


def _marks(t: dict[str, Any]) -> str:
    notes = list(t.get("marks") or [])
    if t.get("job_id"):
        notes.insert(0, f"job {t['job_id']}")
    return f"  [{', '.join(notes)}]" if notes else ""


def _backfill_text(b: dict[str, Any]) -> str:
    head = "would make" if b["dry_run"] else "made"
    count = b["would_make"] if b["dry_run"] else b["made"]
    span = f"{b['first_fire_time']} .. {b['last_fire_time']}" if b["fire_times"] else "no fire time in the range"
    return (f"schedule {b['schedule_id']}: {b['fire_times']} fire times ({span}); {b['existing']} had a job "
            f"already; {head} {count} ({'one after another' if b['overlap'] == 'buffer_all' else 'side by side'})")  # fmt: skip


async def cmd_schedules(c: JobDeckClient, args: argparse.Namespace) -> int:
    action = getattr(args, "schedule_action", None) or "ls"
    if action == "ls":
        show(args, await c.schedules(), lambda ss: table([schedule_row(x) for x in ss], SCHEDULE_COLUMNS))
    elif action == "create":
        spec: dict[str, Any] = {"name": args.name, "timezone": args.tz, "paused": args.paused}
        if args.workflow:
            from core.cli.workflows import load_workflow_file

            data = load_workflow_file(args.workflow)
            spec["workflow"] = {"name": str(data.get("name") or args.name), "jobs": data.get("jobs")}
        else:
            spec["job"] = _job_spec(args)
            spec["job"].pop("idempotency_key", None)
        for k in ("cron", "interval", "at", "delay"):
            if getattr(args, k) is not None:
                spec[k] = getattr(args, k)
        s = await c.create_schedule({**spec, **_policy_flags(args)})
        show(args, s, schedule_line)
    elif action == "set":
        show(args, await c.update_schedule(args.id, _policy_flags(args)), schedule_detail)
    elif action == "backfill":
        overlap = "allow" if args.side_by_side else "buffer_all"
        out = await c.backfill(args.id, args.start, args.end, overlap=overlap, dry_run=args.dry_run)
        show(args, out, _backfill_text)
    elif action == "show":
        show(args, await c.get_schedule(args.id), schedule_detail)
    elif action == "preview":
        p = await c.preview(args.id, args.n, from_=args.from_)
        show(
            args,
            p,
            lambda p: (
                f"fire times ({p['timezone']}, and {_second_zone_name(p['timezone'])}):\n"
                + "\n".join(f"  {schedule_time(p, t['utc'])}{_marks(t)}" for t in p["fire_times"])
            ),
        )
    elif action == "delete":
        await c.delete_schedule(args.id)
        show(args, {"deleted": args.id}, lambda _: f"schedule {args.id} deleted")
    elif action == "run":
        show(args, await c.schedule_action(args.id, "run"), job_line)
    else:
        s = await c.schedule_action(args.id, action)
        show(args, s, schedule_line)
    return 0


async def cmd_events(c: JobDeckClient, args: argparse.Namespace) -> int:
    async for e in c.events(since=args.since, queues=args.queue or (), job_ids=args.job or (), types=args.type or ()):
        if args.json:
            sys.stdout.write(orjson.dumps(e).decode() + "\n")
        else:
            print(event_line(e))
        sys.stdout.flush()
    return 0


async def cmd_stats(c: JobDeckClient, args: argparse.Namespace) -> int:
    def human(s: dict[str, Any]) -> str:
        lines = [
            f"jobs/s (last minute): {s['jobs_per_second']}",
            "by state: " + ", ".join(f"{k} {v}" for k, v in sorted(s["by_state"].items())),
        ]
        lines += [
            f"  {q}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) for q, c in sorted(s["by_queue"].items())
        ]
        return "\n".join(lines)

    show(args, await c.stats(), human)
    return 0


async def cmd_agents(c: JobDeckClient, args: argparse.Namespace) -> int:
    if getattr(args, "agent_action", None) == "drain":
        a = await c.drain_agent(args.name)
        show(args, a, lambda a: f"agent {a['name']}: draining, {a['slots_used']} jobs still running")
        return 0
    show(args, await c.agents(), lambda a: table([{**x, "queues": agent_queues_text(x)} for x in a], AGENT_COLUMNS))
    return 0
