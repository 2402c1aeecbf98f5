"""The Notifications page and the live alert banner in a real browser, against a real core and a
real webhook receiver (a thread here, checking signatures with the standardwebhooks library)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.web_ui.conftest import Dashboard
from tests.web_ui.test_dashboard import api

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
OpenPage = Callable[..., Page]


class Hooked:
    """What the receiver got: (verified, payload) per request; `secret` set once the channel exists."""

    def __init__(self) -> None:
        self.secret = ""
        self.got: list[tuple[bool, dict[str, Any]]] = []


@pytest.fixture
def receiver() -> Iterator[tuple[str, Hooked]]:
    seen = Hooked()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            try:
                Webhook(seen.secret).verify(body, {k.lower(): v for k, v in self.headers.items()})
                ok = True
            except WebhookVerificationError:
                ok = False
            seen.got.append((ok, json.loads(body)))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", seen
    finally:
        server.shutdown()


def test_channels_send_test_the_delivery_log_and_a_live_alert_banner(
    open_page: OpenPage, web: Dashboard, receiver: tuple[str, Hooked]
) -> None:
    url, seen = receiver
    page = open_page("/notifications")
    expect(page.locator("#nav-notifications")).to_be_visible()
    page.fill("#new-channel-name", "web-hook")
    page.fill("#new-channel-url", url)
    page.click("#add-webhook")
    secret = page.locator("#new-secret")
    expect(secret).to_contain_text("whsec_")
    seen.secret = secret.inner_text().strip()
    expect(page.locator("#channel-row-web-hook")).to_contain_text(url)

    page.fill("#rule-name", "web-dead")
    page.fill("#rule-events", "job.dead")
    page.fill("#rule-queue", "w-alerts")
    page.fill("#rule-channels", "web-hook")
    page.fill("#rule-window", "0")
    page.click("#add-rule")
    expect(page.locator("#rule-row-web-dead")).to_contain_text("job.dead")
    job = api(web, "submit", {"name": "invoice-sync", "queue": "w-alerts", "max_attempts": 1,
                              "task": {"kind": "shell", "command": "exit 2"}})  # fmt: skip
    banner = page.locator("#alert-banner")
    expect(banner).to_contain_text(f"job.dead: job {job['id']} invoice-sync in w-alerts", timeout=30_000)
    log = page.locator("#deliveries-table")
    expect(log).to_contain_text("invoice-sync", timeout=30_000)
    expect(log.locator("tr", has_text="invoice-sync")).to_contain_text("delivered", timeout=30_000)

    page.locator("#channel-row-web-hook .send-test").click()
    expect(log.locator("tr", has_text="Test notification from JobDeck")).to_contain_text("delivered", timeout=30_000)
    page.screenshot(path=str(web.log.parent / "notifications.png"), full_page=True)
    kinds = sorted(p["type"] for _, p in seen.got)
    assert kinds == ["jobdeck.alert", "jobdeck.test"] and all(ok for ok, _ in seen.got), seen.got

    page.get_by_role("button", name="Dismiss").click()
    expect(banner).to_have_count(0)
