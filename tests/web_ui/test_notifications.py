"""The Notifications page and the live alert banner in a real browser, against a real core and a
real webhook receiver (a thread here, checking signatures with the standardwebhooks library)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.sync_api import Page, expect
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.conftest import Mailbox
from tests.web_ui.conftest import Dashboard
from tests.web_ui.test_dashboard import api
from web_ui.pages.notifications import LOG_PAGE

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
    page.click("#add-channel")
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

    other = open_page("/")  # another session
    expect(other.locator("#alert-banner")).to_contain_text("invoice-sync", timeout=30_000)
    page.get_by_role("button", name="Dismiss").click()
    expect(banner).to_have_count(0)
    other.reload()  # dismissed in one session only: the other still has it
    expect(other.locator("#alert-banner")).to_contain_text("invoice-sync", timeout=30_000)
    expect(banner).to_have_count(0)


def _wait_for_mail(box: Mailbox, text: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in list(box.messages):
            body = m.content.decode(errors="replace")
            if text in body:
                return body
        time.sleep(0.1)
    subjects = [m.content.decode(errors="replace").split("Subject:", 1)[-1].split("\n", 1)[0] for m in box.messages]
    raise AssertionError(f"no mail with {text!r} within {timeout} s; got subjects {subjects}")


def test_an_email_channel_and_a_condition_rule_made_on_the_page_mail_an_alert(
    open_page: OpenPage, web: Dashboard, smtp_server: tuple[str, int, Mailbox]
) -> None:
    host, port, box = smtp_server
    page = open_page("/notifications")
    page.locator("#new-channel-kind").click()
    page.get_by_role("option", name="email").click()
    expect(page.locator("#new-channel-url")).to_have_count(0)
    page.fill("#new-channel-name", "web-mail")
    page.fill("#new-channel-host", host)
    page.fill("#new-channel-port", str(port))
    page.locator("#new-channel-security").click()
    page.get_by_role("option", name="none").click()
    page.fill("#new-channel-sender", "jobdeck@example.com")
    page.fill("#new-channel-to", "oncall@example.com, lead@example.com")
    page.click("#add-channel")
    row = page.locator("#channel-row-web-mail")
    expect(row).to_contain_text("oncall@example.com, lead@example.com")
    expect(row).to_contain_text("email")
    row.locator(".send-test").click()
    test_mail = _wait_for_mail(box, "Test notification from JobDeck")
    assert "To: oncall@example.com, lead@example.com" in test_mail, test_mail[:400]

    page.locator("#rule-condition").click()
    page.get_by_role("option", name="more than N events in T minutes").click()
    page.fill("#rule-name", "web-dead-burst")
    page.fill("#rule-above", "one")
    page.fill("#rule-minutes", "5")
    page.fill("#rule-events", "job.dead")
    page.fill("#rule-queue", "w-mail")
    page.fill("#rule-channels", "web-mail")
    page.fill("#rule-window", "0")
    page.click("#add-rule")
    expect(page.get_by_text("condition.above: a whole number, not 'one'")).to_be_visible()
    expect(page.locator("#rule-row-web-dead-burst")).to_have_count(0)
    page.fill("#rule-above", "1")
    page.click("#add-rule")
    rule = page.locator("#rule-row-web-dead-burst")
    expect(rule).to_contain_text("count (above 1, minutes 5)")
    expect(rule).to_contain_text("web-mail")

    page.locator("#rule-condition").click()
    page.get_by_role("option", name="no agent for a queue for T s").click()
    expect(page.locator("#rule-events")).to_have_count(0)  # implied: the condition watches the queues
    expect(page.locator("#rule-for-seconds")).to_be_visible()

    for n in (1, 2):
        api(web, "submit", {"name": f"burst-{n}", "queue": "w-mail", "max_attempts": 1,
                            "task": {"kind": "shell", "command": "exit 3"}})  # fmt: skip
    alert = _wait_for_mail(box, "web-dead-burst")
    assert "Subject: [JobDeck]" in alert, alert[:400]
    log = page.locator("#deliveries-table")
    alert_row = log.locator("tr", has_text="web-mail").filter(has_text="alert")
    expect(alert_row).to_contain_text("delivered", timeout=30_000)
    page.screenshot(path=str(web.log.parent / "notifications-email.png"), full_page=True)
    page.locator("#log-channel").click()  # one channel's log: only its deliveries
    page.get_by_role("option", name="web-mail").click()
    expect(log.locator("tbody tr")).to_have_count(2)  # the test and the alert
    expect(log).not_to_contain_text("web-hook")


def test_the_delivery_log_pages_back_to_the_oldest_delivery(
    open_page: OpenPage, web: Dashboard, receiver: tuple[str, Hooked]
) -> None:
    """A channel with more deliveries than a page: Older shows the rest, down to the first one."""
    url, seen = receiver
    ch = api(web, "create_channel", {"kind": "webhook", "name": "web-paged", "url": url})
    seen.secret = ch["secret"]
    for i in range(LOG_PAGE + 5):
        api(web, "send_notification", ch["id"], f"paged-{i}-note")
    page = open_page("/notifications")
    page.locator("#log-channel").click()
    page.get_by_role("option", name="web-paged").click()
    log = page.locator("#deliveries-table")
    expect(log.locator("tbody tr")).to_have_count(LOG_PAGE)
    expect(log.locator("tbody tr").first).to_contain_text(f"paged-{LOG_PAGE + 4}-note")  # newest first
    expect(log).not_to_contain_text("paged-0-note")
    expect(page.locator("#log-newer")).to_be_disabled()
    page.click("#log-older")
    expect(log.locator("tbody tr")).to_have_count(5)
    expect(log.locator("tbody tr").last).to_contain_text("paged-0-note")
    expect(page.locator("#log-older")).to_be_disabled()
    page.click("#log-newer")
    expect(log.locator("tbody tr")).to_have_count(LOG_PAGE)
    expect(log.locator("tbody tr").first).to_contain_text(f"paged-{LOG_PAGE + 4}-note")
