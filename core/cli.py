"""`jobdeck`: the command line. The composition root: the only place in core that starts agents."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from core.client import DEFAULT_SERVER, JobDeckClient
from core.config import load_settings
from core.errors import JobDeckError

if TYPE_CHECKING:
    from core.node import Node

JOB_COLUMNS = (("id", 8), ("name", 28), ("queue", 12), ("state", 10), ("priority", 8), ("attempt", 7), ("run_at", 19))


def _table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, int]]) -> str:
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
            s = v[:19].replace("T", " ")  # an ISO time: to the second is enough in a table
        else:
            s = str(v)
        return (s if len(s) <= w else s[: w - 1] + "…").ljust(w)

    lines = ["  ".join(cell(c.upper(), w) for c, w in columns).rstrip()]
    lines += ["  ".join(cell(r.get(c), w) for c, w in columns).rstrip() for r in rows]
    return "\n".join(lines)


def _print(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> None:
    if args.json:
        sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(human(data))


def _job_line(j: dict[str, Any]) -> str:
    notes = [
        "cancel requested" if j.get("cancel_requested") else "",
        f"waiting: {j['waiting_for']}" if j.get("waiting_for") else "",
        "an earlier job with this idempotency key" if j.get("deduplicated") else "",
    ]
    extra = "; ".join(n for n in notes if n)
    return f"job {j['id']} {j['name']!r} on queue {j['queue']}: {j['state']}" + (f" ({extra})" if extra else "")


def _job_detail(data: dict[str, Any]) -> str:
    j, attempts = data["job"], data["attempts"]
    out = [_job_line(j)]
    for k in ("priority", "attempt", "max_attempts", "run_at", "created_at", "started_at", "finished_at", "timeout",
              "agent", "last_error", "result", "tags"):  # fmt: skip
        if j.get(k) not in (None, [], ""):
            out.append(f"  {k:<13} {j[k]}")
    out.append(f"  {'task':<13} {orjson.dumps(j['task']).decode()}")
    for a in attempts:
        out.append(
            f"\nattempt {a['attempt']}: {a['outcome']} on {a['agent']}" + (f" — {a['error']}" if a["error"] else "")
        )
        if a.get("output"):
            out += ["  | " + line for line in a["output"].rstrip("\n").splitlines()[-40:]]
    return "\n".join(out)


# ------------------------------------------------------------------ job specs from flags


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
    if args.env:
        task["env"] = _pairs(args.env, "=", "--env")
    if args.cwd:
        task["cwd"] = args.cwd
    spec: dict[str, Any] = {"task": task}
    if args.job_name:
        spec["name"] = args.job_name
    for key in ("queue", "priority", "max_attempts", "timeout", "idempotency_key"):
        if getattr(args, key, None) is not None:
            spec[key] = getattr(args, key)
    if args.tag:
        spec["tags"] = args.tag
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


def _add_job_flags(p: argparse.ArgumentParser, name_flag: str = "--name") -> None:
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
    p.add_argument("--env", action="append", metavar="NAME=VALUE", help="environment variable (repeatable)")
    p.add_argument("--cwd", help="working directory of the command")
    p.add_argument(name_flag, dest="job_name", help="job name (default: from the command)")
    p.add_argument("--queue")
    p.add_argument("--priority", type=int, help="higher runs first (-1000..1000, default 0)")
    p.add_argument("--max-attempts", type=int, dest="max_attempts")
    p.add_argument("--timeout", type=float, help="seconds before the run is killed")
    p.add_argument("--tag", action="append", help="a tag (repeatable)")


# ------------------------------------------------------------------ commands that talk to a server


async def _remote(args: argparse.Namespace) -> int:
    async with JobDeckClient(args.server) as c:
        return int(await args.run(c, args))


async def cmd_submit(c: JobDeckClient, args: argparse.Namespace) -> int:
    spec = _job_spec(args)
    if args.at:
        spec["run_at"] = args.at
    if args.delay is not None:
        spec["delay"] = args.delay
    job = await c.submit(spec)
    if not args.wait:
        _print(args, job, _job_line)
        return 0
    if not args.json:
        print(_job_line(job), flush=True)
    try:
        job = await c.wait_for(job["id"], timeout=args.wait_timeout)
    except TimeoutError:
        now = await c.get_job(job["id"])
        raise JobDeckError(
            f"job {job['id']} did not finish within {args.wait_timeout:g} s; it is {now['state']} "
            f"(follow it with: jobdeck jobs tail {job['id']})"
        ) from None
    attempts = await c.attempts(job["id"])
    _print(args, {"job": job, "attempts": attempts}, _job_detail)
    return 0 if job["state"] == "succeeded" else 1


async def cmd_jobs_ls(c: JobDeckClient, args: argparse.Namespace) -> int:
    page = await c.list_jobs(state=args.state, queue=args.queue, name_prefix=args.name, tag=args.tag,
                             limit=args.limit, cursor=args.cursor)  # fmt: skip

    def human(p: dict[str, Any]) -> str:
        text = _table(p["jobs"], JOB_COLUMNS)
        return text + (f"\nmore: --cursor {p['next_cursor']}" if p["next_cursor"] else "")

    _print(args, page, human)
    return 0


async def cmd_jobs_show(c: JobDeckClient, args: argparse.Namespace) -> int:
    data = {"job": await c.get_job(args.id), "attempts": await c.attempts(args.id)}
    _print(args, data, _job_detail)
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
        _print(args, results if len(results) > 1 else results[0],
               lambda r: "\n".join(_job_line(j) for j in (r if isinstance(r, list) else [r])))  # fmt: skip
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
    _print(args, job, lambda j: _job_line(j) + f", priority {j['priority']}")
    return 0


QUEUE_COLUMNS = (("name", 20), ("paused", 6), ("concurrency", 11), ("depth", 8), ("running", 8), ("scheduled", 9))


async def cmd_queues(c: JobDeckClient, args: argparse.Namespace) -> int:
    action = getattr(args, "queue_action", None) or "ls"
    if action == "ls":
        _print(args, await c.queues(), lambda qs: _table(qs, QUEUE_COLUMNS))
    elif action in ("pause", "resume"):
        _print(
            args,
            await c.queue_action(args.name, action),
            lambda q: f"queue {q['name']}: {'paused' if q['paused'] else 'running'}",
        )
    else:
        if args.limit.lower() in ("none", "off", "unlimited"):
            limit = None
        elif args.limit.isdigit():
            limit = int(args.limit)
        else:
            raise JobDeckError(f"concurrency must be a number or 'none', not {args.limit!r}")
        _print(
            args,
            await c.set_concurrency(args.name, limit),
            lambda q: f"queue {q['name']}: concurrency {q['concurrency'] or 'unlimited'}",
        )
    return 0


SCHEDULE_COLUMNS = (
    ("id", 5),
    ("name", 24),
    ("kind", 8),
    ("cron", 16),
    ("interval", 8),
    ("timezone", 16),
    ("paused", 6),
    ("next_fire_at", 19),
)


def _schedule_line(s: dict[str, Any]) -> str:
    when = s["cron"] or (f"every {s['interval']:g} s" if s["interval"] else f"once at {s['at']}")
    state = "paused" if s["paused"] else f"next fire {s['next_fire_at'] or 'never (no time left)'}"
    return f"schedule {s['id']} {s['name']!r} ({when}, {s['timezone']}): {state}"


def _schedule_detail(s: dict[str, Any]) -> str:
    lines = [_schedule_line(s)]
    for k in ("last_fire_at", "fired", "created_at"):
        lines.append(f"  {k:<13} {s[k] if s[k] is not None else '-'}")
    lines.append(f"  {'job':<13} {orjson.dumps(s['job']).decode()}")
    return "\n".join(lines)


async def cmd_schedules(c: JobDeckClient, args: argparse.Namespace) -> int:
    action = getattr(args, "schedule_action", None) or "ls"
    if action == "ls":
        _print(args, await c.schedules(), lambda ss: _table(ss, SCHEDULE_COLUMNS))
    elif action == "create":
        spec: dict[str, Any] = {"name": args.name, "job": _job_spec(args), "timezone": args.tz, "paused": args.paused}
        spec["job"].pop("idempotency_key", None)
        for k in ("cron", "interval", "at", "delay"):
            if getattr(args, k) is not None:
                spec[k] = getattr(args, k)
        s = await c.create_schedule(spec)
        _print(args, s, _schedule_line)
    elif action == "show":
        _print(args, await c.get_schedule(args.id), _schedule_detail)
    elif action == "preview":
        p = await c.preview(args.id, args.n)
        _print(
            args,
            p,
            lambda p: (
                f"next fire times ({p['timezone']}):\n"
                + "\n".join(f"  {t['local']}   {t['utc']} UTC" for t in p["fire_times"])
            ),
        )
    elif action == "delete":
        await c.delete_schedule(args.id)
        _print(args, {"deleted": args.id}, lambda _: f"schedule {args.id} deleted")
    elif action == "run":
        _print(args, await c.schedule_action(args.id, "run"), _job_line)
    else:
        s = await c.schedule_action(args.id, action)
        _print(args, s, _schedule_line)
    return 0


def _event_line(e: dict[str, Any]) -> str:
    d = e.get("data") or {}
    job = d.get("job")
    what = _job_line(job) if job else orjson.dumps(d).decode()[:160]
    extra = f" — {d['error']}" if d.get("error") else ""
    return f"{e['seq']:>8}  {e['ts'][11:23]}  {e['type']:<22} {what}{extra}"


async def cmd_events(c: JobDeckClient, args: argparse.Namespace) -> int:
    async for e in c.events(since=args.since, queues=args.queue or (), job_ids=args.job or (), types=args.type or ()):
        if args.json:
            sys.stdout.write(orjson.dumps(e).decode() + "\n")
        else:
            print(_event_line(e))
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

    _print(args, await c.stats(), human)
    return 0


AGENT_COLUMNS = (("name", 24), ("host", 14), ("slots", 6), ("slots_used", 10), ("draining", 8),
                 ("heartbeat_age", 13), ("queues", 16), ("labels", 20))  # fmt: skip


async def cmd_agents(c: JobDeckClient, args: argparse.Namespace) -> int:
    if getattr(args, "agent_action", None) == "drain":
        a = await c.drain_agent(args.name)
        _print(args, a, lambda a: f"agent {a['name']}: draining, {a['slots_used']} jobs still running")
        return 0
    _print(args, await c.agents(), lambda a: _table(a, AGENT_COLUMNS))
    return 0


# ------------------------------------------------------------------ commands that run a node


def attach_local_agent(node: Node, name: str | None = None) -> None:
    """Run an agent inside the node over an in-process channel: the same runtime remote agents use."""
    from agents.runtime import AgentConfig, AgentRuntime
    from core.protocol import LocalChannel

    settings = node.settings
    core_end, agent_end = LocalChannel.pair()
    config = AgentConfig(
        name=name or f"local-{os.getpid()}",
        slots=settings.local_slots,
        heartbeat_seconds=settings.heartbeat_seconds,
        kill_grace_seconds=settings.kill_grace_seconds,
        output_tail_bytes=settings.output_tail_bytes,
    )
    runtime = AgentRuntime(config)
    if getattr(node.store, "single_node", False):
        node.spawn(node.engine.hub.reclaim_orphans("local-", config.name), "reclaim-orphans")
    node.spawn(node.engine.attach_agent(core_end), "local-agent-session")
    node.spawn(runtime.serve(agent_end), "local-agent")
    node.on_stop(lambda: runtime.shutdown(settings.shutdown_grace_seconds), hurry=runtime.hurry)


def cmd_up(args: argparse.Namespace, *, local_agent: bool) -> int:
    settings = load_settings(
        data_dir=args.data_dir, host=args.host, port=args.port, local_slots=args.slots, log_level=args.log_level
    )
    if local_agent and settings.local_slots <= 0:
        local_agent = False
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def main() -> None:
        from core.node import Node

        node = Node(settings)
        await node.start()
        if local_agent:
            attach_local_agent(node)

        def ready(url: str) -> None:
            agents = f", local agent with {settings.local_slots} slots" if local_agent else ", no local agents"
            print(f"JobDeck is up: API {url}  (store {settings.store_label}{agents})", flush=True)
            hint = "" if url == DEFAULT_SERVER else f"   (another port: export JOBDECK_SERVER={url})"
            print(f"  try: jobdeck submit -- echo hello{hint}   |   API docs: {url}/docs", flush=True)

        await node.serve(ready)

    _run(main())
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    """Bring the store's schema up to date (nodes also do it when they start) and say its version."""
    settings = load_settings(data_dir=args.data_dir)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    async def main() -> int:
        from core.bus import LocalBus
        from core.node import open_store

        store = open_store(settings, LocalBus())
        await store.open()
        try:
            return store.schema_version
        finally:
            await store.close()

    version = _run(main())
    print(f"schema version {version}: {settings.store_label}")
    return 0


def cmd_agent(args: argparse.Namespace) -> int:
    from agents.main import main as agent_main

    labels = {}
    for pair in args.label:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise JobDeckError(f"--label {pair!r} must look like key=value")
        labels[key] = value
    if args.slots < 1:
        raise JobDeckError("--slots must be at least 1")
    return agent_main(
        args.server,
        name=args.name,
        queues=[q for q in args.queues.split(",") if q],
        slots=args.slots,
        labels=labels,
        imports=args.imports,
        heartbeat_seconds=args.heartbeat,
        kill_grace_seconds=args.kill_grace,
        shutdown_grace_seconds=args.shutdown_grace,
    )


def _run(coro: Any) -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


# ------------------------------------------------------------------ parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobdeck", description="JobDeck: a job scheduler with a live operator console.")
    p.add_argument(
        "--server", default=os.environ.get("JOBDECK_SERVER", DEFAULT_SERVER), help="core node URL (env JOBDECK_SERVER)"
    )
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for name, helptext in (("up", "run a node with local agents on the embedded store"), ("server", "run a core node")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("--host")
        s.add_argument("--port", type=int)
        s.add_argument("--data-dir", dest="data_dir")
        s.add_argument(
            "--slots",
            type=int,
            help="local agent slots" + (" (default 32)" if name == "up" else " (default 0: no local agent)"),
        )
        s.add_argument("--log-level", dest="log_level")
        s.set_defaults(local=name == "up")

    s = sub.add_parser("migrate", help="apply database migrations (JOBDECK_DATABASE_URL, or the SQLite file)")
    s.add_argument("--data-dir", dest="data_dir")

    s = sub.add_parser("agent", help="run an agent that takes jobs from a core node")
    s.add_argument("--name", help="unique agent name (default: host-pid)")
    s.add_argument("--queues", default="*", help="comma-separated queues to serve (default: all)")
    s.add_argument("--slots", type=int, default=32, help="jobs run at once (default 32)")
    s.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="a label jobs can require (repeatable)"
    )
    s.add_argument(
        "--import",
        action="append",
        default=[],
        dest="imports",
        metavar="MODULE",
        help="a module declaring tasks (repeatable)",
    )
    s.add_argument(
        "--heartbeat", type=float, default=5.0, help="seconds between heartbeats (at most a third of the lease)"
    )
    s.add_argument("--kill-grace", type=float, default=5.0, dest="kill_grace", help="SIGTERM to SIGKILL on cancel")
    s.add_argument(
        "--shutdown-grace",
        type=float,
        default=30.0,
        dest="shutdown_grace",
        help="on SIGTERM, seconds running jobs get to finish",
    )
    s.set_defaults(run=None)

    s = sub.add_parser("submit", help="submit a job")
    _add_job_flags(s)
    s.add_argument("--at", help="run at this ISO 8601 time")
    s.add_argument("--delay", type=float, help="run after this many seconds")
    s.add_argument("--idempotency-key", dest="idempotency_key")
    s.add_argument("--wait", action="store_true", help="wait until it finishes; exit 1 unless it succeeded")
    s.add_argument("--wait-timeout", type=float, default=3600.0, dest="wait_timeout")
    s.set_defaults(run=cmd_submit)

    jobs = sub.add_parser("jobs", help="list, show and act on jobs").add_subparsers(
        dest="jobs_command", required=True, metavar="ACTION"
    )
    s = jobs.add_parser("ls", help="list jobs, newest first")
    s.add_argument("--state", help="comma-separated states")
    s.add_argument("--queue")
    s.add_argument("--name", help="name prefix")
    s.add_argument("--tag")
    s.add_argument("--limit", type=int, default=50)
    s.add_argument("--cursor", type=int)
    s.set_defaults(run=cmd_jobs_ls)
    s = jobs.add_parser("tail", help="print a job's output and follow it live until it ends")
    s.add_argument("id", type=int)
    s.set_defaults(run=cmd_jobs_tail)
    s = jobs.add_parser("show", help="a job with its attempts and output")
    s.add_argument("id", type=int)
    s.set_defaults(run=cmd_jobs_show)
    for action in ("cancel", "pause", "resume", "retry"):
        s = jobs.add_parser(action, help=f"{action} jobs")
        s.add_argument("ids", type=int, nargs="+", metavar="ID")
        s.set_defaults(run=cmd_jobs_action, action=action)
    s = jobs.add_parser("priority", help="set the priority of a waiting job")
    s.add_argument("id", type=int)
    s.add_argument("priority", type=int)
    s.set_defaults(run=cmd_jobs_priority)

    queues = sub.add_parser("queues", help="list queues; pause, resume, limit them")
    queues.set_defaults(run=cmd_queues)
    qs = queues.add_subparsers(dest="queue_action", metavar="ACTION")
    qs.add_parser("ls", help="list queues")
    for action in ("pause", "resume"):
        qs.add_parser(action, help=f"{action} a queue").add_argument("name")
    s = qs.add_parser("concurrency", help="limit running jobs of a queue ('none' for no limit)")
    s.add_argument("name")
    s.add_argument("limit")

    sched = sub.add_parser("schedules", help="recurring and one-time schedules")
    sched.set_defaults(run=cmd_schedules)
    ss = sched.add_subparsers(dest="schedule_action", metavar="ACTION")
    ss.add_parser("ls", help="list schedules")
    s = ss.add_parser("create", help="create a schedule")
    s.add_argument("--name", required=True)
    s.add_argument("--cron", help="cron expression, e.g. '*/5 * * * *'")
    s.add_argument("--interval", type=float, help="every N seconds")
    s.add_argument("--at", help="once, at this ISO 8601 time")
    s.add_argument("--delay", type=float, help="once, after N seconds")
    s.add_argument("--tz", default="UTC", help="IANA time zone of the cron expression")
    s.add_argument("--paused", action="store_true")
    _add_job_flags(s, name_flag="--job-name")
    s.set_defaults(idempotency_key=None)
    for action in ("show", "pause", "resume", "delete", "run"):
        ss.add_parser(action, help=f"{action} a schedule").add_argument("id", type=int)
    s = ss.add_parser("preview", help="the next fire times")
    s.add_argument("id", type=int)
    s.add_argument("-n", type=int, default=10)

    s = sub.add_parser("events", help="follow the live event feed")
    s.add_argument("--since", type=int, help="start after this sequence number (default: now)")
    s.add_argument("--queue", action="append")
    s.add_argument("--job", action="append", type=int)
    s.add_argument("--type", action="append", help="event type, e.g. job.failed or job.* (repeatable)")
    s.set_defaults(run=cmd_events)

    sub.add_parser("stats", help="counts and throughput").set_defaults(run=cmd_stats)
    agents = sub.add_parser("agents", help="connected agents; drain one")
    agents.set_defaults(run=cmd_agents)
    ags = agents.add_subparsers(dest="agent_action", metavar="ACTION")
    ags.add_parser("ls", help="list agents")
    ags.add_parser("drain", help="give an agent no new work").add_argument("name")
    _accept_common_flags_anywhere(p)
    return p


def _accept_common_flags_anywhere(parser: argparse.ArgumentParser) -> None:
    # `jobdeck submit --server URL ...` should work as well as `jobdeck --server URL submit ...`.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.add_argument("--server", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
                child.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
                _accept_common_flags_anywhere(child)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `jobdeck` command."""
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("up", "server"):
            return cmd_up(args, local_agent=args.local or (args.slots or 0) > 0)
        if args.command == "agent":
            return cmd_agent(args)
        if args.command == "migrate":
            return cmd_migrate(args)
        return int(_run(_remote(args)))
    except JobDeckError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `jobdeck jobs ls | head`: the reader has what it wanted
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's final flush quiet
        return 0
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
