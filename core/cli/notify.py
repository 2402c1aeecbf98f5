"""`jobdeck notify ...`: channels, test sends, the delivery log, replay (admins; docs/notifications.md)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from core.cli.output import show, table, when
from core.client import JobDeckClient

CHANNEL_COLUMNS = (("id", 4), ("name", 18), ("kind", 8), ("enabled", 7), ("breaker", 7), ("failures", 8),
                   ("target", 40))  # fmt: skip
NOTIFICATION_COLUMNS = (("id", 6), ("created", 25), ("channel", 8), ("kind", 16), ("status", 10), ("tries", 5),
                        ("title", 50))  # fmt: skip


def add_parser(sub: Any) -> None:
    """The `notify` subcommand and its actions."""
    p = sub.add_parser("notify", help="notification channels, test sends, the delivery log (admins)")
    p.set_defaults(run=cmd_notify)
    acts = p.add_subparsers(dest="notify_action", metavar="ACTION")
    acts.add_parser("channels", help="list channels")
    s = acts.add_parser("webhook", help="add a webhook channel (prints its signing secret once)")
    s.add_argument("name")
    s.add_argument("url")
    s = acts.add_parser("email", help="add an email channel (SMTP)")
    s.add_argument("name")
    s.add_argument("--host", required=True)
    s.add_argument("--port", type=int, default=587)
    s.add_argument("--security", choices=("starttls", "tls", "none"), default="starttls")
    s.add_argument("--username")
    s.add_argument("--password-stdin", action="store_true", dest="password_stdin",
                   help="read the SMTP password from standard input (it is never shown again)")  # fmt: skip
    s.add_argument("--sender", required=True, help="the From address")
    s.add_argument("--to", required=True, action="append", help="a recipient (repeatable)")
    for action, helptext in (("enable", "turn a channel on again"), ("disable", "turn a channel off")):
        acts.add_parser(action, help=helptext).add_argument("channel_id", type=int)
    s = acts.add_parser("send", help="send a test notification to a channel and wait for its outcome")
    s.add_argument("channel_id", type=int)
    s.add_argument("--title")
    s.add_argument("--text")
    s = acts.add_parser("log", help="notifications, newest first")
    s.add_argument("--channel", type=int)
    s.add_argument("--limit", type=int, default=50)
    acts.add_parser("show", help="one notification with every attempt").add_argument("id", type=int)
    acts.add_parser("replay", help="send a notification again").add_argument("id", type=int)


def _channel_row(c: dict[str, Any]) -> dict[str, Any]:
    cfg = c["config"]
    target = cfg.get("url") or f"{', '.join(cfg.get('to') or [])} via {cfg.get('host')}:{cfg.get('port')}"
    return {**c, "enabled": "yes" if c["enabled"] else "NO", "target": target}


def _row(n: dict[str, Any]) -> dict[str, Any]:
    data = (n.get("payload") or {}).get("data") or {}
    return {**n, "created": when(n["created_at"]), "channel": n["channel_id"], "title": data.get("title"),
            "tries": f"{n['attempts']}/{n['max_attempts']}"}  # fmt: skip


def _detail(n: dict[str, Any]) -> str:
    lines = [f"notification {n['id']} to channel {n['channel_id']}: {n['status']} after {n['attempts']} "
             f"attempt(s) (webhook-id {n['message_id']})"]  # fmt: skip
    for a in n.get("log") or []:
        answer = a["error"] or (a["response"] or "").replace("\n", " ")[:60]
        lines.append(
            f"  {a['attempt']:>2}  {when(a['at'])}  {a['status'] or '-':>3}  {a['latency_ms']:>8.1f} ms  {answer}"
        )
    if n["status"] == "pending" and n.get("next_attempt_at"):
        lines.append(f"  next attempt at {when(n['next_attempt_at'])}")
    return "\n".join(lines)


async def cmd_notify(c: JobDeckClient, args: argparse.Namespace) -> int:
    action = getattr(args, "notify_action", None) or "channels"
    if action == "channels":
        show(args, await c.channels(), lambda cs: table([_channel_row(x) for x in cs], CHANNEL_COLUMNS))
    elif action == "webhook":
        made = await c.create_channel({"kind": "webhook", "name": args.name, "url": args.url})
        show(args, made, lambda m: f"channel {m['id']} ({m['name']}); its signing secret, shown once: {m['secret']}")
    elif action == "email":
        spec = {"kind": "email", "name": args.name, "host": args.host, "port": args.port, "security": args.security,
                "sender": args.sender, "to": args.to, "username": args.username,
                "password": sys.stdin.readline().rstrip("\n") if args.password_stdin else None}  # fmt: skip
        made = await c.create_channel({k: v for k, v in spec.items() if v is not None})
        show(args, made, lambda m: f"channel {m['id']} ({m['name']}): mail to {', '.join(m['config']['to'])}")
    elif action in ("enable", "disable"):
        ch = await c.update_channel(args.channel_id, {"enabled": action == "enable"})
        show(args, ch, lambda x: f"channel {x['id']} ({x['name']}) is {'on' if x['enabled'] else 'off'}")
    elif action == "send":
        n = await c.send_notification(args.channel_id, args.title, args.text)
        deadline = time.monotonic() + 30  # until its first attempt is recorded (a retry may follow)
        while n["status"] == "pending" and n["attempts"] == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
            n = await c.notification(n["id"])
        show(args, n, _detail)
        return 0 if n["status"] == "delivered" else 1
    elif action == "log":
        got = await c.notifications(args.channel, args.limit)
        show(args, got, lambda ns: table([_row(x) for x in ns], NOTIFICATION_COLUMNS))
    elif action == "show":
        show(args, await c.notification(args.id), _detail)
    elif action == "replay":
        show(args, await c.replay_notification(args.id), lambda n: f"notification {n['id']} is sent again")
    return 0
