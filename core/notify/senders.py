"""Sending one delivery: a signed webhook POST (httpx) or an email (aiosmtplib).

A send never raises: it returns a `Sent` with what a person reading the delivery log needs (HTTP
status, latency, the start of the response, or why it failed). Each channel's own timeout bounds it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from email.message import EmailMessage
from typing import Any

import httpx
import orjson

from core.notify import signing
from core.notify.http1 import AnswerError, Http1Client

EXCERPT = 500  # characters of a receiver's answer kept in the delivery log
USER_AGENT = "JobDeck-Webhooks/1"


@dataclass(frozen=True, slots=True)
class Sent:
    """The outcome of one attempt."""

    ok: bool
    status: int | None
    latency_ms: float
    response: str | None
    error: str | None


def body_of(payload: dict[str, Any]) -> bytes:
    """The exact bytes a webhook delivery sends (and signs)."""
    return orjson.dumps(payload)


async def send_webhook(http: Http1Client | httpx.AsyncClient, channel: dict[str, Any], delivery: dict[str, Any],
                       now: float) -> Sent:  # fmt: skip
    """POST the delivery's payload, signed, to the channel's URL (httpx only where a proxy applies)."""
    cfg, sec = channel["config"], channel["secrets"]
    body = body_of(delivery["payload"])
    headers = {"content-type": "application/json", "user-agent": USER_AGENT, **sec.get("headers", {})}
    headers.update(signing.headers(signing.secret_key(sec["secret"]), delivery["message_id"], int(now), body))
    started = time.perf_counter()
    if isinstance(http, Http1Client):
        return await _send_http1(http, cfg, headers, body, started)
    try:
        r = await http.post(cfg["url"], content=body, headers=headers, timeout=float(cfg.get("timeout", 10.0)))
    except httpx.TimeoutException:
        return Sent(False, None, _ms(started), None, f"no answer within {cfg.get('timeout', 10.0)} s")
    except httpx.HTTPError as exc:
        return Sent(False, None, _ms(started), None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    excerpt = r.text[:EXCERPT] if r.content else None
    ok = 200 <= r.status_code < 300
    return Sent(ok, r.status_code, _ms(started), excerpt, None if ok else f"HTTP {r.status_code}")


async def _send_http1(http: Http1Client, cfg: dict[str, Any], headers: dict[str, str], body: bytes,
                      started: float) -> Sent:  # fmt: skip
    timeout = float(cfg.get("timeout", 10.0))
    try:
        status, answer = await http.post(cfg["url"], headers, body, timeout)
    except TimeoutError:
        return Sent(False, None, _ms(started), None, f"no answer within {cfg.get('timeout', 10.0)} s")
    except (OSError, AnswerError, ValueError) as exc:
        return Sent(False, None, _ms(started), None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    excerpt = answer.decode("utf-8", errors="replace")[:EXCERPT] if answer else None
    ok = 200 <= status < 300
    return Sent(ok, status, _ms(started), excerpt, None if ok else f"HTTP {status}")


async def send_email(channel: dict[str, Any], delivery: dict[str, Any]) -> Sent:
    """Mail the delivery's title and text to the channel's recipients over SMTP."""
    import aiosmtplib

    cfg, sec = channel["config"], channel["secrets"]
    data = delivery["payload"].get("data") or {}
    msg = EmailMessage()
    msg["From"] = cfg["sender"]
    msg["To"] = ", ".join(cfg["to"])
    msg["Subject"] = f"[JobDeck] {data.get('title') or delivery['payload'].get('type')}"
    msg["Message-ID"] = f"<{delivery['message_id']}@jobdeck>"
    msg.set_content(
        f"{data.get('text') or ''}\n\n--\n{orjson.dumps(delivery['payload'], option=orjson.OPT_INDENT_2).decode()}\n"
    )
    security = cfg.get("security", "starttls")
    started = time.perf_counter()
    try:
        answer = await aiosmtplib.send(
            msg, hostname=cfg["host"], port=int(cfg["port"]), username=cfg.get("username"),
            password=sec.get("password"), use_tls=security == "tls", start_tls=security == "starttls",
            timeout=float(cfg.get("timeout", 10.0)),
        )  # fmt: skip
    except aiosmtplib.SMTPResponseException as exc:
        return Sent(False, exc.code, _ms(started), exc.message[:EXCERPT], f"SMTP {exc.code}: {exc.message}"[:EXCERPT])
    except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
        return Sent(False, None, _ms(started), None, f"{type(exc).__name__}: {exc}"[:EXCERPT])
    _refused, text = answer
    return Sent(True, 250, _ms(started), str(text)[:EXCERPT], None)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
