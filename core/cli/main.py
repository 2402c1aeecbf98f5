"""The `jobdeck` command: its parser and entry point."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence

from core.cli import notify, signin, workflows
from core.cli.lifecycle import cmd_archive, cmd_backup, cmd_restore
from core.cli.nodes import cmd_agent, cmd_migrate, cmd_up, cmd_up_console, run_async
from core.cli.output import view_in
from core.cli.remote import (
    add_job_flags,
    cmd_agents,
    cmd_breakers,
    cmd_events,
    cmd_jobs_action,
    cmd_jobs_ls,
    cmd_jobs_priority,
    cmd_jobs_show,
    cmd_jobs_tail,
    cmd_queues,
    cmd_schedules,
    cmd_stats,
    cmd_submit,
    run_remote,
)
from core.client import DEFAULT_SERVER
from core.errors import JobDeckError
from core.schedule.policy import CATCH_UP_POLICIES, OVERLAP_POLICIES
from core.version import version


def add_policy_flags(s: argparse.ArgumentParser) -> None:
    """The flags of a schedule's policies (docs/schedules.md); left out: the default, or unchanged."""
    s.add_argument("--overlap", choices=OVERLAP_POLICIES, help="a fire time while the previous run goes")
    s.add_argument("--catch-up", choices=CATCH_UP_POLICIES, help="missed fire times after downtime or a pause")
    s.add_argument("--catch-up-window", type=float, metavar="SECONDS", help="how late a catch_up 'all' run may be")
    s.add_argument("--jitter", type=float, metavar="SECONDS", help="start each run up to this much late")
    s.add_argument("--pause-after-failures", type=int, metavar="N", help="pause after N dead runs in a row (0: never)")
    s.add_argument("--exclude-date", action="append", dest="exclude_dates", metavar="YYYY-MM-DD",
                   help="a local date without runs (repeatable)")  # fmt: skip
    s.add_argument("--exclude-cron", metavar="EXPR", help="fire times this cron expression matches do not run")


def build_parser() -> argparse.ArgumentParser:
    # JOBDECK_PROG: what the user typed to run us (`./dev` sets it), so usage lines and hints name it.
    prog = os.environ.get("JOBDECK_PROG") or "jobdeck"
    p = argparse.ArgumentParser(prog=prog, description="JobDeck: a job scheduler with a live operator console.")
    p.set_defaults(prog=prog)
    p.add_argument(
        "--server", default=os.environ.get("JOBDECK_SERVER", DEFAULT_SERVER), help="core node URL (env JOBDECK_SERVER)"
    )
    p.add_argument(
        "--ca-file", dest="ca_file", default=os.environ.get("JOBDECK_CA_FILE") or None, metavar="PEM",
        help="trust the CA certificate(s) in this file for https:// nodes, besides the system's (env JOBDECK_CA_FILE)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.add_argument("--version", action="version", version=f"jobdeck {version()}")
    p.add_argument("--utc", action="store_true", help="show times in UTC (default: this machine's zone)")
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
        s.add_argument("--log-level", dest="log_level", help="debug, info, warning, error (env JOBDECK_LOG_LEVEL)")
        s.add_argument("--log-format", dest="log_format", choices=("json", "text", "auto"),
                       help="json lines, or text; auto (default): text on a terminal, else JSON (env JOBDECK_LOG_FORMAT)")  # fmt: skip
        s.add_argument("--tls-cert", dest="tls_cert_file", metavar="PEM",
                       help="serve https:// with this certificate (chain) (env JOBDECK_TLS_CERT_FILE)")  # fmt: skip
        s.add_argument("--tls-key", dest="tls_key_file", metavar="PEM",
                       help="the certificate's private key (env JOBDECK_TLS_KEY_FILE)")  # fmt: skip
        if name == "up":
            s.add_argument("--console", action="store_true", help="open the terminal console on it (the node runs "
                                                                  "in the background; quitting the console stops it)")  # fmt: skip
        s.set_defaults(local=name == "up")
        if name == "up":
            s.add_argument("--web", dest="web", action="store_true", default=None,
                           help="start the web dashboard (default: when run in a terminal; env JOBDECK_WEB=1)")  # fmt: skip
            s.add_argument("--no-web", dest="web", action="store_false",
                           help="do not start the web dashboard (env JOBDECK_WEB=0)")  # fmt: skip
            s.add_argument("--web-port", dest="web_port", type=int, help="port of the web dashboard (default 8650)")

    s = sub.add_parser("web", help="serve the web dashboard for a core node (--server)")
    s.add_argument("--host", dest="web_host", default=os.environ.get("JOBDECK_WEB_HOST", "127.0.0.1"),
                   help="address to bind (default 127.0.0.1; env JOBDECK_WEB_HOST)")  # fmt: skip
    s.add_argument("--port", dest="web_port", type=int, default=int(os.environ.get("JOBDECK_WEB_PORT") or 8650),
                   help="port (default 8650; env JOBDECK_WEB_PORT)")  # fmt: skip
    s.add_argument("--setup-only", dest="setup_only", action="store_true",
                   help="set up bun and build the frontend, then exit")  # fmt: skip

    s = sub.add_parser("migrate", help="apply database migrations (JOBDECK_DATABASE_URL, or the SQLite file)")
    s.add_argument("--data-dir", dest="data_dir")

    s = sub.add_parser("agent", help="run an agent that takes jobs from a core node")
    s.add_argument("--name", help="unique agent name (default: host-pid)")
    s.add_argument("--queues", default="*",
                   help="comma-separated queues to serve (default: all); QUEUE:N keeps N slots for QUEUE alone "
                   "(bulkheads: `emails:50,reports:10,*`: a flood of reports never takes an email's slot; queues "
                   "without a number, or * for any other, share the slots left over)")  # fmt: skip
    s.add_argument("--slots", type=int, default=None,
                   help="jobs run at once (default 32, plus the slots --queues keeps)")  # fmt: skip
    s.add_argument(
        "--token",
        default=os.environ.get("JOBDECK_TOKEN", ""),
        help="agent token, when the server has sign-in on (env JOBDECK_TOKEN)",
    )
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
    s.add_argument("--log-level", dest="log_level", help="debug, info, warning, error (env JOBDECK_LOG_LEVEL)")
    s.add_argument("--log-format", dest="log_format", choices=("json", "text", "auto"),
                   help="json lines, or text; auto (default): text on a terminal, else JSON (env JOBDECK_LOG_FORMAT)")  # fmt: skip
    s.add_argument("--kill-grace", type=float, default=5.0, dest="kill_grace", help="SIGTERM to SIGKILL on cancel")
    s.add_argument(
        "--secrets-dir",
        dest="secrets_dir",
        default=os.environ.get("JOBDECK_SECRETS_DIR", ""),
        metavar="DIR",
        help="a folder with one file per secret that jobs name in their env (env JOBDECK_SECRETS_DIR); "
        "JOBDECK_SECRET_<NAME> variables of the agent are secrets too",
    )
    s.add_argument(
        "--state-dir",
        dest="state_dir",
        default=os.environ.get("JOBDECK_AGENT_STATE_DIR", ""),
        metavar="DIR",
        help="the agent's identity and the results no core has acknowledged yet, kept across restarts "
        "(env JOBDECK_AGENT_STATE_DIR; default with --name: $XDG_STATE_HOME/jobdeck/agents/NAME, "
        "~/.local/state/... when unset; one process per folder)",
    )
    s.add_argument(
        "--shutdown-grace",
        type=float,
        default=30.0,
        dest="shutdown_grace",
        help="on SIGTERM, seconds running jobs get to finish",
    )
    s.set_defaults(run=None)

    s = sub.add_parser("submit", help="submit a job")
    add_job_flags(s)
    s.add_argument("--at", help="run at this ISO 8601 time")
    s.add_argument("--delay", type=float, help="run after this many seconds")
    s.add_argument("--idempotency-key", dest="idempotency_key")
    s.add_argument(
        "--unique",
        metavar="KEY",
        help="at most one job with this key waiting or running: a second submit answers with the first",
    )
    s.add_argument(
        "--unique-window",
        dest="unique_window",
        type=float,
        metavar="SECONDS",
        help="with --unique: hold the key for this many seconds from the submit instead (scope window)",
    )
    s.add_argument(
        "--depends-on",
        dest="depends_on",
        type=int,
        action="append",
        metavar="ID",
        help="wait until this job succeeded (repeatable)",
    )
    s.add_argument(
        "--on-parent-failure",
        dest="on_parent_failure",
        choices=("cancel", "run", "skip"),
        help="if a parent ends dead or cancelled: cancel this job (default), run it anyway, or skip it",
    )
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
    for action in ("cancel", "pause", "resume", "retry", "run-now"):
        s = jobs.add_parser(
            action, help="queue scheduled or delayed jobs now" if action == "run-now" else f"{action} jobs"
        )
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
    s = qs.add_parser(
        "concurrency",
        help="limit how many jobs of a queue run at once",
        description="At most LIMIT jobs of the queue run at once, over every agent. 0 lets none start "
        "(running ones finish; their waiting_for says so); 'none' removes the limit.",
    )
    s.add_argument("name")
    s.add_argument("limit", help="a number (0: none start), or 'none' to remove the limit")
    s = qs.add_parser(
        "rate",
        help="limit how many jobs of a queue start per second, over every node",
        description="At most RATE jobs of the queue start per second, counted over every node (a token "
        "bucket kept in the store). RATE is a number per second, or N/s, N/m, N/h ('600/m' is 10/s); "
        "'none' removes the limit. --burst: starts allowed at once after a quiet spell (default: a "
        "tenth of a second's worth, at least 1). Held jobs say so in their waiting_for.",
    )
    s.add_argument("name")
    s.add_argument("rate", help="jobs per second (10, 0.5, 600/m, 100/h), or 'none' to remove the limit")
    s.add_argument("--burst", type=int, help="starts allowed at once (default: a tenth of a second's worth)")
    s = qs.add_parser(
        "keys",
        help="per-key limits: jobs of one concurrency key at once, fairness weights; alone, what each key uses",
        description="With a queue's name alone: its running jobs per concurrency key and queued jobs per fairness "
        "key. LIMIT: at most this many jobs of one --concurrency-key (e.g. a customer) run at once, "
        "over every node ('none' removes it). --weight KEY=N: a fairness key's share (default 1) while keys "
        "wait together. --fair on|off: rotate claims between fairness keys (a job with --fairness-key turns "
        "it on).",
    )
    s.add_argument("name")
    s.add_argument("limit", nargs="?", help="jobs of one concurrency key at once, or 'none'")
    s.add_argument("--weight", action="append", metavar="KEY=N", help="a fairness key's weight (repeatable)")
    s.add_argument("--fair", choices=("on", "off"), help="rotate claims between fairness keys")
    s = qs.add_parser(
        "breaker",
        help="the circuit breakers of a queue's http jobs: when they open, what jobs do while open",
        description="Each queue keeps one circuit breaker per host its http jobs call, shared by every agent "
        "and node. It opens when, within --window seconds, at least --min-requests requests were sent and "
        "--ratio of them failed (a transport error, a 5xx or a 429); after --reset seconds one trial request "
        "goes, and its outcome closes or reopens it. --mode wait (the default): while open, the host's jobs "
        "wait unsent and use no attempt; fail: their attempt fails at once. 'default' puts a number back.",
    )
    s.add_argument("name")
    s.add_argument("--mode", choices=("wait", "fail", "default"))
    s.add_argument("--ratio", help="share of failed requests that opens it (0.5: half), or 'default'")
    s.add_argument("--window", help="seconds of requests it judges (default 10)")
    s.add_argument("--reset", help="seconds it stays open before a trial request (default 30)")
    s.add_argument("--min-requests", help="fewer requests than this never open it (default 5)")

    brk = sub.add_parser("breakers", help="the circuit breakers of http jobs: open, half open, closed")
    brk.set_defaults(run=cmd_breakers)
    bs = brk.add_subparsers(dest="breaker_action", metavar="ACTION")
    bs.add_parser("ls", help="list every breaker (the default)")
    s = bs.add_parser("reset", help="close a queue's breaker for one host now; the jobs it held go at once",
                      description="Close the circuit breaker of QUEUE's http jobs for HOST at once, whatever its "
                      "state, with an empty window (operators of the queue's teams and admins; audited). Use it "
                      "when the host is known to be well again, rather than waiting for the trial request.")  # fmt: skip
    s.add_argument("queue")
    s.add_argument("host", help="host[:port], as `breakers` lists it")

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
    s.add_argument(
        "--workflow",
        metavar="FILE",
        help="fire this workflow (a JSON file: the body of POST /v1/workflows) instead of one job",
    )
    add_policy_flags(s)
    add_job_flags(s, name_flag="--job-name")
    s.set_defaults(idempotency_key=None)
    s = ss.add_parser("set", help="change a schedule's policies (from its next fire time)")
    s.add_argument("id", type=int)
    add_policy_flags(s)
    for action in ("show", "pause", "resume", "delete", "run"):
        ss.add_parser(action, help=f"{action} a schedule").add_argument("id", type=int)
    s = ss.add_parser("preview", help="the fire times after now (or --from), marked")
    s.add_argument("id", type=int)
    s.add_argument("-n", type=int, default=10)
    s.add_argument("--from", dest="from_", help="preview from this ISO 8601 instant (past ones show their job)")
    s = ss.add_parser("backfill", help="make the runs of a past range's fire times (each at most once)")
    s.add_argument("id", type=int)
    s.add_argument("start", metavar="FROM", help="ISO 8601 instant, inclusive")
    s.add_argument("end", metavar="TO", help="ISO 8601 instant, inclusive, not in the future")
    s.add_argument("--dry-run", action="store_true", help="only count the fire times and the runs it would make")
    s.add_argument("--side-by-side", action="store_true", help="overlap allow (default: one after another)")

    workflows.add_parser(sub)

    sub.add_parser("console", help="the live terminal console (signed in with `jobdeck login`)")

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

    notify.add_parser(sub)  # core/cli/notify.py

    # sign-in (core/cli/signin.py)
    s = sub.add_parser("login", help="sign in to --server and cache the token (device code, browser or pasted)")
    s.add_argument("--method", choices=("auto", "device", "browser", "paste"), default="auto")
    s.add_argument("--token", help="use this token (from `jobdeck token new` or your IdP) instead of signing in")
    s.add_argument("--no-browser", action="store_true", dest="no_browser", help="print the sign-in URL only")
    s.set_defaults(entry=signin.run_login)
    sub.add_parser("logout", help="forget the cached token for --server").set_defaults(entry=signin.cmd_logout)
    sub.add_parser("whoami", help="who you are signed in as, your role and queues").set_defaults(run=signin.cmd_whoami)
    tokens = sub.add_parser("token", help="static API and agent tokens").add_subparsers(
        dest="token_command", required=True, metavar="ACTION"
    )
    s = tokens.add_parser("new", help="make a token: prints it once and the config entry with its hash")
    s.add_argument("--name", required=True, help="who or what uses it (shown in the audit log)")
    s.add_argument("--role", required=True, choices=("viewer", "operator", "admin", "agent"))
    s.add_argument("--teams", help="comma-separated teams (their queues are the token's)")
    s.add_argument("--queues", help="comma-separated queue patterns (agent tokens: the queues it may serve)")
    s.set_defaults(entry=signin.cmd_token_new)
    archive = sub.add_parser("archive", help="finished jobs the retention archived (admins): list, show, restore")
    archive.set_defaults(run=cmd_archive)
    arch = archive.add_subparsers(dest="archive_action", metavar="ACTION")
    arch.add_parser("ls", help="every node's archive files, newest day first")
    arch.add_parser("show", help="one archived job with its attempts and output").add_argument("id", type=int)
    arch.add_parser("restore", help="put a file's jobs back into the store (ids kept)").add_argument(
        "file", help="an archive file's name, e.g. jobs-2026-11-01.jsonl.gz"
    )
    s = sub.add_parser("backup", help="a consistent copy of the embedded store, while its node runs")
    s.add_argument("path", help="the new backup file")
    s.add_argument("--data-dir", dest="data_dir")
    s.set_defaults(entry=cmd_backup)
    s = sub.add_parser("restore", help="put a backup in place of the embedded store (stop its node first)")
    s.add_argument("path", help="a file made by jobdeck backup")
    s.add_argument("--data-dir", dest="data_dir")
    s.set_defaults(entry=cmd_restore)
    s = sub.add_parser("audit", help="the audit log, newest first (admins)")
    s.add_argument("--actor")
    s.add_argument("--action", help="e.g. cancel_job")
    s.add_argument("--target", help="e.g. job:42 or queue:payments")
    s.add_argument("--outcome", choices=("ok", "refused", "failed"))
    s.add_argument("--since", help="ISO 8601 time")
    s.add_argument("--limit", type=int, default=50)
    s.set_defaults(run=signin.cmd_audit)
    _accept_common_flags_anywhere(p)
    return p


def _accept_common_flags_anywhere(parser: argparse.ArgumentParser) -> None:
    # `jobdeck submit --server URL ...` should work as well as `jobdeck --server URL submit ...`.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                child.add_argument("--server", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
                child.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
                child.add_argument("--utc", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
                child.add_argument("--ca-file", dest="ca_file", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
                _accept_common_flags_anywhere(child)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `jobdeck` command."""
    args = build_parser().parse_args(argv)
    if args.utc:
        view_in("UTC")
    try:
        if args.command == "up" and args.console:
            return cmd_up_console(args, argv)
        if args.command in ("up", "server"):
            return cmd_up(args, local_agent=args.local or (args.slots or 0) > 0)
        if args.command == "console":
            from console_tui.app import main as console_main  # lazy: core does not depend on the console

            return console_main(args)
        if args.command == "agent":
            return cmd_agent(args)
        if args.command == "migrate":
            return cmd_migrate(args)
        if args.command == "web":
            from web_ui.launch import main as web_main  # lazy: the core does not need the web UI

            return web_main(args)
        if getattr(args, "entry", None) is not None:  # commands that make their own clients
            return int(args.entry(args))
        return int(run_async(run_remote(args)))
    except JobDeckError as exc:
        if getattr(args, "json", False):  # scripts get the API's error object, on stderr
            print(json.dumps(exc.to_dict()), file=sys.stderr)
        else:
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
