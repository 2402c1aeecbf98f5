"""Bad notification input is a 4xx naming the field, and writes nothing."""

from __future__ import annotations

import httpx

from tests.conftest import RunningNode

HOOK = {"kind": "webhook", "name": "ops", "url": "https://hooks.example.com/x"}
CASES = [
    ("POST", "/v1/notifications/channels", {**HOOK, "url": "ftp://x/"}, 422, "url"),
    ("POST", "/v1/notifications/channels", {**HOOK, "url": "https:///nohost"}, 422, "url"),
    ("POST", "/v1/notifications/channels", {**HOOK, "secret": "hunter2"}, 422, "secret"),
    ("POST", "/v1/notifications/channels", {**HOOK, "headers": {"webhook-signature": "x"}}, 422, "headers"),
    ("POST", "/v1/notifications/channels", {**HOOK, "headers": {"X-A": "a\r\nInjected: 1"}}, 422, "headers"),
    ("POST", "/v1/notifications/channels", {**HOOK, "max_attempts": 0}, 422, "max_attempts"),
    ("POST", "/v1/notifications/channels", {**HOOK, "timeout": "5"}, 422, "timeout"),
    ("POST", "/v1/notifications/channels", {**HOOK, "kind": "sms"}, 422, "kind"),
    (
        "POST",
        "/v1/notifications/channels",
        {"kind": "email", "name": "m", "host": "smtp", "sender": "a@b", "to": []},
        422,
        "to",
    ),
    (
        "POST",
        "/v1/notifications/channels",
        {"kind": "email", "name": "m", "host": "smtp", "sender": "nobody", "to": ["a@b"]},
        422,
        "sender",
    ),
    ("POST", "/v1/notifications/rules", {"name": "r", "events": ["job.exploded"], "channels": [1]}, 422, "events"),
    (
        "POST",
        "/v1/notifications/rules",
        {"name": "r", "events": ["job.dead"], "channels": [1], "window_seconds": -1},
        422,
        "window_seconds",
    ),
    ("POST", "/v1/notifications/rules", {"name": "r", "events": ["job.dead"], "channels": [99]}, 404, "channels"),
    ("POST", "/v1/notifications", {"channel_id": 99}, 404, "channel_id"),
    ("GET", "/v1/notifications/12345", None, 404, "notification_id"),
    ("PATCH", "/v1/notifications/channels/1", {"host": "smtp.example.com"}, 409, "host"),
    ("PATCH", "/v1/notifications/channels/1", {"url": "mailto:a@b"}, 422, "url"),
    ("PATCH", "/v1/notifications/channels/1", {"secret": ""}, 422, "secret"),
    ("POST", "/v1/notifications/channels", HOOK, 409, "name"),
]


async def test_bad_notification_input_names_the_field_and_changes_nothing(running: RunningNode) -> None:
    async with httpx.AsyncClient(base_url=running.url) as http:
        made = await http.post("/v1/notifications/channels", json=HOOK)
        assert made.status_code == 201, made.text
        before = (await http.get("/v1/notifications/channels")).json()
        wrong = []
        for method, path, body, status, field in CASES:
            r = await http.request(method, path, json=body)
            got = r.json()
            if r.status_code != status or field not in str(got.get("field")):
                wrong.append(f"{method} {path} {body}: expected {status} on {field}, got {r.status_code} {got}")
        assert wrong == [], "\n".join(wrong)
        assert (await http.get("/v1/notifications/channels")).json() == before, "nothing was written"
        assert (await http.get("/v1/notifications/rules")).json() == {"rules": []}
